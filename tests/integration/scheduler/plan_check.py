"""plan_check.py LOG BOUND TABLES [EXEMPT ...] - reads the auto_explain plans (JSON, with row counts, sent
to the client as warnings) in LOG and prints a line per plan: "ok QUERY", or "BAD what IN QUERY" when a
scan of one of TABLES (comma-separated) is sequential or reads more than BOUND rows (rows returned and
filtered out, times loops). A plan whose query starts with one of EXEMPT is not walked."""
import json
import re
import sys

log, bound, big, exempt = sys.argv[1], int(sys.argv[2]), set(sys.argv[3].split(',')), tuple(sys.argv[4:])
lines = open(log, encoding='utf-8', errors='replace').read().split('\n')


def walk(n, bad):
    if n.get('Actual Loops') == 0:
        return
    read = (n.get('Actual Rows', 0) + n.get('Rows Removed by Filter', 0)) * n.get('Actual Loops', 1)
    # job_events and usage_records are read through their monthly partitions (migrations 0044, 0051):
    # job_events_202612, ... (not the _default ones, which the leader's maintenance keeps empty).
    rel = re.sub(r'^(job_events|usage_records)_\d{6}$', r'\1', n.get('Relation Name', ''))
    if rel in big and (n['Node Type'] == 'Seq Scan' or read > bound):
        bad.append(f"{n['Node Type']} on {n['Relation Name']} read {read}")
    for c in n.get('Plans', []):
        walk(c, bad)


i = 0
while i < len(lines):
    if not re.search(r'WARNING:  duration: [0-9.]+ ms  plan:$', lines[i]):
        i += 1
        continue
    body = []
    while i + 1 < len(lines) and not re.match(r'^(ts=|LOG:|NOTICE:|WARNING:|psql:)', lines[i + 1]):
        i += 1
        body.append(lines[i])
    doc = json.loads('\n'.join(body))
    query = ' '.join(doc['Query Text'].split())
    bad = []
    if not query.startswith(exempt):
        walk(doc['Plan'], bad)
    print(('BAD ' + '; '.join(bad) + ' IN ' if bad else 'ok ') + query[:300])
    i += 1
