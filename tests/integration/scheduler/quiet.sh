#!/usr/bin/env bash
# quiet.sh - heartbeats answered without the database (scheduler/service/heartbeat_quiet.c, migration 0061).
# The real scheduler, a real PostgreSQL and scale_fleet (tests/bench/scale/fleet.c: executors speaking the
# protocol, nothing run) for 8 idle nodes, a 30 s lease: a heartbeat every 3 s, a node's stored lease written
# every 7.5 s (a quarter lease). Checks that most heartbeats then skip the database; that every node's stored
# lease is still written that often (no node silent, none lost); and that a command inserted by another
# process reaches its node at the node's next heartbeat, not at its next lease write (the test gives it right
# after a write: it comes 3 s later when the NOTIFY is heard, 9 s later were it not; verified by dropping the
# trigger), and more commands than one answer holds with the heartbeat after.
#
#   quiet.sh SCALE_FLEET
. "$(dirname "$0")/lib.sh" quiet
fleet=${1:?usage: quiet.sh SCALE_FLEET}
m1=$(free_port)
seed_tenant
q "INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status)
     VALUES ('ftjob-done', 't1', 'tiny', 'tiny', 'file-1', '{\"type\":\"supervised\"}', 1, 'cancelled')"
"$WHET_BIN" scheduler --lease-ms 30000 --metrics "127.0.0.1:$m1" >"$work/s1.log" 2>&1 & pids+=($!)
eventually 30 'grep -q leading "$work/s1.log"'
"$fleet" --scheduler "$WHET_GRPC" --nodes 8 --gpus 1 --threads 8 >"$work/fleet.json" 2>"$work/fleet.err" & pids+=($!)
wait_for 30 "SELECT count(*) FROM nodes WHERE state = 'ready'" 8

quiet() { metric "$m1" whet_scheduler_heartbeats_quiet_total; }
written() { metric "$m1" whet_scheduler_heartbeats_total; }
# The oldest stored lease of the fleet, in seconds, sampled every half second for SECONDS: the largest seen.
oldest_lease() { # SECONDS
  local worst=0 age
  for _ in $(seq $(($1 * 2))); do
    age=$(q "SELECT floor(max(extract(epoch FROM clock_timestamp()) - last_heartbeat)) FROM nodes")
    [ "$age" -gt "$worst" ] && worst=$age
    sleep 0.5
  done
  echo "$worst"
}
sleep 9 # past each node's first lease write after its registration
quiet0=$(quiet) written0=$(written)
worst=$(oldest_lease 15)
quiet1=$(quiet) written1=$(written)
echo "  heartbeats in 15 s: $((quiet1 - quiet0)) answered from memory, $((written1 - written0)) written;" \
     "oldest stored lease seen: ${worst} s"
# Of every three heartbeats of a node, two come before its stored lease falls due again.
check "most heartbeats are answered without the database" "[ $((quiet1 - quiet0)) -gt $((written1 - written0)) ]"
# Written at the first heartbeat past a quarter lease (7.5 s + 3 s); silent for half a lease (15 s) a node
# would take no new work (leases.c).
check "every node's stored lease is still written every quarter lease (oldest seen under 15 s)" "[ $worst -lt 15 ]"
check "no node lost" "[ \"\$(q \"SELECT count(*) FROM nodes WHERE state = 'ready'\")\" = 8 ] &&
  [ \"\$(metric $m1 whet_scheduler_nodes_lost_total)\" = 0 ]"
# Every heartbeat's handling is timed (whet_scheduler_heartbeat_duration_seconds), the quiet ones too: one
# scrape's count is the written and quiet heartbeats', less those still in a handler (a node has one at most).
read -r answered handled < <(curl -fsS "http://127.0.0.1:$m1/metrics" | awk '$1 == "whet_scheduler_heartbeats_total" ||
  $1 == "whet_scheduler_heartbeats_quiet_total" {a += $2} $1 == "whet_scheduler_heartbeat_duration_seconds_count" {h = $2}
  END {print a, h}')
echo "  heartbeats answered $answered, timed $handled"
check "every heartbeat's handling is timed" "[ $handled -gt 0 ] && [ $handled -le $answered ] && [ $handled -ge $((answered - 8)) ]"

# A command for each node from another process (as the gateway's cancel or a placement would give one), given
# right after the node's stored lease was written: the node is then quiet for its next two heartbeats (6 s of
# the 7.5 s until its next write), so a command heard of by NOTIFY comes at the next heartbeat (3 s) and one
# not heard of at the third (9 s).
declare -A before given
n_given=0
while read -r id at; do before[$id]=$at; done < <(q "SELECT id, last_heartbeat FROM nodes" | tr '|' ' ')
for _ in $(seq 300); do
  while read -r id at; do
    [ -z "${given[$id]:-}" ] && [ "$at" != "${before[$id]}" ] || continue
    q "INSERT INTO node_commands (node_id, job_id, attempt, kind) VALUES ('$id', 'ftjob-done', 1, 'cancel')"
    given[$id]=1
    n_given=$((n_given + 1))
  done < <(q "SELECT id, last_heartbeat FROM nodes" | tr '|' ' ')
  [ $n_given = 8 ] && break
  sleep 0.1
done
check "each node's stored lease was written again (and its command given right after)" "[ $n_given = 8 ]"
wait_for 30 "SELECT count(*) FROM node_commands WHERE delivered_at IS NULL" 0
echo "  deliveries (s): $(q "SELECT string_agg(round((delivered_at - created_at)::numeric, 2)::text, ' ' ORDER BY node_id) FROM node_commands")"
check "each node's command is delivered at its next heartbeat (within 5 s), not at its next lease write" \
  "[ \"\$(q \"SELECT count(*) FROM node_commands WHERE delivered_at - created_at >= 5\")\" = 0 ]"
# More commands than one answer holds (32): the rest come with the next heartbeat, the node not left quiet.
q "DELETE FROM node_commands" >/dev/null
node=$(q "SELECT min(id) FROM nodes")
at=$(q "SELECT last_heartbeat FROM nodes WHERE id = '$node'")
wait_for 20 "SELECT last_heartbeat <> $at FROM nodes WHERE id = '$node'" t
q "INSERT INTO node_commands (node_id, job_id, attempt, kind) SELECT '$node', 'ftjob-done', 1, 'cancel'
     FROM generate_series(1, 40)"
wait_for 30 "SELECT count(*) FROM node_commands WHERE delivered_at IS NULL" 0
echo "  40 commands to one node: delivered after $(q "SELECT string_agg(DISTINCT round((delivered_at - created_at)::numeric, 1)::text, ' s, ') FROM node_commands") s"
check "40 commands to one node come with its next two heartbeats (within 8 s), not at its next lease write" \
  "[ \"\$(q \"SELECT count(*) FROM node_commands WHERE delivered_at - created_at >= 8\")\" = 0 ]"
check "the fleet answered every heartbeat" "kill -TERM ${pids[1]} && wait ${pids[1]};
  python3 -c \"import json; d = json.load(open('$work/fleet.json')); exit(d['heartbeat_failed'] != 0 or d['heartbeats_missed_deadline'] != 0)\""
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
