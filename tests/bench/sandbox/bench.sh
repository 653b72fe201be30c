#!/bin/sh
# bench.sh - what the sandbox costs: start-up of a sandboxed command against the same command run
# plainly, and python grading throughput through the sandboxed pool against the same grader called in
# a plain python loop, in the same run. Ratios are sandboxed / plain.
#
#   tests/bench/sandbox/bench.sh [WHET_BIN]   (default build-sandbox/whet)
#
# The build machines have 2 cores shared with other work: read the ratios, not the absolute times.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=$(readlink -f "${1:-$here/../../../build-sandbox/whet}")
n=${N:-40}
work=$(mktemp -d /tmp/whet-bench-sandbox.XXXXXX)
trap 'rm -rf "$work"' EXIT

now() { date +%s.%N; }
per_run_ms() { echo "($2 - $1) * 1000 / $n" | bc -l; }

time_loop() { # time_loop CMD...: mean ms per run over $n runs
    t0=$(now)
    i=0
    while [ $i -lt $n ]; do "$@" >/dev/null 2>&1; i=$((i + 1)); done
    t1=$(now)
    per_run_ms "$t0" "$t1"
}

echo "sandbox start-up, mean of $n runs (2 shared cores, other work running)"
# The peer for the sandboxed run is the same binary starting without a sandbox (`whet version`, the
# command run plainly after it), so the difference is what the sandbox adds: plan, seccomp compile,
# clone with six namespaces, ~40 mounts, init, and the teardown of the namespaces.
start=$(time_loop "$bin" version)
for cmd in /bin/true "/usr/bin/python3 -I -S -c pass"; do
    plain=$(time_loop $cmd)
    boxed=$(time_loop "$bin" sandbox run --mem 512 --procs 16 --wall 30 -- $cmd)
    peer=$(echo "$start + $plain" | bc -l)
    printf '  %-32s whet start + plain %7.2f ms  sandboxed %7.2f ms  ratio %5.2f  (+%.1f ms)\n' "$cmd" "$peer" \
        "$boxed" "$(echo "$boxed / $peer" | bc -l)" "$(echo "$boxed - $peer" | bc -l)"
done

# Grading: 64 pairs, a grader that does a little string work per pair.
cat >"$work/grader.py" <<'PY'
def grade(sample, item):
    a, b = sample["output_text"], item["answer"]
    return sum(x == y for x, y in zip(a, b)) / max(len(a), len(b), 1)
PY
i=0
while [ $i -lt 64 ]; do
    echo "{\"sample\":{\"output_text\":\"answer $i is $((i * 7))\"},\"item\":{\"answer\":\"answer $i is $((i * 7 % 50))\"}}"
    i=$((i + 1))
done >"$work/pairs.jsonl"
cat >"$work/plain.py" <<'PY'
import json, sys
ns = {}
exec(open(sys.argv[1]).read(), ns)
for line in open(sys.argv[2]):
    p = json.loads(line)
    print(json.dumps({"score": float(ns["grade"](p["sample"], p["item"]))}))
PY
t0=$(now); /usr/bin/python3 "$work/plain.py" "$work/grader.py" "$work/pairs.jsonl" >"$work/plain.out"; t1=$(now)
plain=$(echo "($t1 - $t0) * 1000" | bc -l)
echo "python grader, 64 pairs (the plain peer: one python process, no sandbox)"
printf '  plain loop                         %7.1f ms\n' "$plain"
for p in 1 2 4; do
    t0=$(now)
    "$bin" sandbox grade --source "$work/grader.py" --parallel $p <"$work/pairs.jsonl" >"$work/boxed.out"
    t1=$(now)
    boxed=$(echo "($t1 - $t0) * 1000" | bc -l)
    /usr/bin/python3 -c 'import json, sys
a = [json.loads(l)["score"] for l in open(sys.argv[1])]
b = [json.loads(l)["score"] for l in open(sys.argv[2])]
sys.exit(0 if len(a) == len(b) == 64 and all(abs(x - y) < 1e-12 for x, y in zip(a, b)) else 1)' \
        "$work/plain.out" "$work/boxed.out" || { echo "scores differ from the plain run" >&2; exit 1; }
    printf '  sandboxed pool, %d sandbox(es)       %7.1f ms  ratio %5.2f\n' $p "$boxed" "$(echo "$boxed / $plain" | bc -l)"
done
