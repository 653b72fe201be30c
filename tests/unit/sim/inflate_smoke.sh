#!/bin/sh
# inflate_smoke.sh - `whet sim` end to end on a slice of the public traces (fixtures/, taken from
# ../shared/traces: every 20th node of the Alibaba 2023 GPU node list, the first 400 tasks of its
# gpuspec33 pod list, the first 300 Philly jobs). Checks the JSON lines, one per policy, that the
# numbers add up, and that a malformed file is rejected with its line number.
set -eu
: "${WHET_BIN:?}" "${WHET_SOURCE_DIR:?}"
F="$WHET_SOURCE_DIR/tests/unit/sim/fixtures"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$WHET_BIN" sim inflate --nodes "$F/openb_nodes_slice.csv" --pods "$F/openb_pods_slice.csv" --load 1.3 --seed 7 \
    --policy fifo,bestfit,las,whet > "$TMP/inflate.jsonl"
python3 - "$TMP/inflate.jsonl" <<'PY' || exit 1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["policy"] for r in rows] == ["fifo", "bestfit", "las", "whet"], rows
for r in rows:
    for k in ("allocation_pct", "failed", "placed", "decisions_per_s", "tasks"):
        assert k in r, (k, r)
    assert r["placed"] + r["failed"] == r["tasks"], r
    assert 0 < r["allocation_pct"] <= 100 and r["requested_pct"] >= 130, r
    assert r["nodes"] == 61 and r["gpus"] == 314, r
# every policy saw the same tasks
assert len({r["tasks"] for r in rows}) == 1, rows
print("inflate ok:", {r["policy"]: r["allocation_pct"] for r in rows})
PY

"$WHET_BIN" sim replay --trace "$F/philly_slice.csv" --nodes "$F/openb_nodes_slice.csv" --policy fifo,las,whet \
    > "$TMP/replay.jsonl"
python3 - "$TMP/replay.jsonl" <<'PY' || exit 1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["policy"] for r in rows] == ["fifo", "las", "whet"], rows
for r in rows:
    for k in ("jobs", "avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_s", "p99_queue_s", "makespan_s",
              "gpu_utilization", "preemptions", "tenants"):
        assert k in r, (k, r)
    assert r["jobs"] == 300 and r["finished"] + r["unplaceable"] == 300, r
    assert sum(t["jobs"] for t in r["tenants"].values()) == r["finished"], r
    assert 0 < r["gpu_utilization"] <= 1, r
print("replay ok")
PY

"$WHET_BIN" sim scale --nodes 50 --gpus-per-node 8 --queued 2000 --policy whet > "$TMP/scale.json"
grep -q '"p99_decision_us":' "$TMP/scale.json" || fail "scale output: $(cat "$TMP/scale.json")"
# Co-trainable one-GPU jobs: once the fleet is full they join groups (up to 8 on a device), so more are
# placed than devices; the same run twice decides the same (decisions_hash).
for run in 1 2; do
  "$WHET_BIN" sim scale --nodes 50 --gpus-per-node 8 --queued 2000 --cotrain-keys 2 --policy whet > "$TMP/cotrain$run.json"
done
python3 - "$TMP/scale.json" "$TMP/cotrain1.json" "$TMP/cotrain2.json" <<'PY'
import json, sys
alone, co, again = (json.load(open(p)) for p in sys.argv[1:])
assert alone["placed"] <= alone["gpus"] < co["placed"] <= 8 * co["gpus"], (alone, co)
assert co["decisions_hash"] == again["decisions_hash"] and co["placed"] == again["placed"], (co, again)
print("scale ok: %d placed alone, %d with co-training on %d GPUs" % (alone["placed"], co["placed"], co["gpus"]))
PY

# Malformed input: the error names the file, the line and the column; exit status 1.
{ head -3 "$F/openb_nodes_slice.csv"; echo "bad-node,64000,262144,two,P100"; } > "$TMP/bad.csv"
if "$WHET_BIN" sim inflate --nodes "$TMP/bad.csv" --pods "$F/openb_pods_slice.csv" 2> "$TMP/err"; then
    fail "a malformed node file was accepted"
fi
grep -q "bad.csv: line 4: gpu: expected an integer" "$TMP/err" || fail "error was: $(cat "$TMP/err")"
"$WHET_BIN" sim inflate --nodes "$F/openb_nodes_slice.csv" --pods "$F/openb_pods_slice.csv" --policy nope 2> "$TMP/err" \
    && fail "an unknown policy was accepted"
grep -q 'unknown policy "nope"' "$TMP/err" || fail "error was: $(cat "$TMP/err")"
"$WHET_BIN" sim --help | grep -q -- "--checkpoint-cost" || fail "--help does not document --checkpoint-cost"
echo "sim smoke ok"
