#!/bin/sh
# run.sh - GRPO rollout throughput: whet's rollout engine with its KV cache, the same engine without it
# (every token recomputes the whole sequence), and a PyTorch 1.13 sampling loop with a KV cache
# (bench_torch.py), on the same ~25M-parameter Llama (`whet model init`, read by both sides from the
# same model.safetensors), the same prompts and batch, the same thread count, in the same run.
# Usage (from the repository root, after building):
#   tests/bench/rollout/run.sh [BUILD_DIR] [THREADS] [PROMPTS] [N] [MAX_TOKENS]
# defaults: build 2 4 8 64 (4 prompts x 8 responses x 64 tokens, temperature 1).
# Prints one JSON line per measurement, then tokens/s and the ratios.
set -eu
BUILD=${1:-build}
THREADS=${2:-2}
PROMPTS=${3:-4}
N=${4:-8}
MAX_TOKENS=${5:-64}
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=$(mktemp -d /tmp/whet-bench-rollout.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
BUILD="$BUILD" "$SRC/tests/bench/engine_cc.sh" "$SRC/tests/bench/rollout/bench_rollout.c" "$OUT/bench_rollout"
export OMP_NUM_THREADS=$THREADS
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} # idle OpenMP workers sleep (a shared machine)
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); other work may share them, so"
echo "only the ratios within this run mean anything. $THREADS threads each side."
# ~25M parameters: the size of tests/bench/train's smaller model
"$BUILD/whet" model init --out "$OUT/model" --arch llama --layers 7 --hidden 512 --heads 8 --kv-heads 4 \
    --intermediate 1376 --vocab 8192 >/dev/null
"$OUT/bench_rollout" prompts "$OUT/model" "$PROMPTS" 16 > "$OUT/prompts.json"
# KV-cache runs alternate three times (best of each counts); the no-cache baseline, much slower, runs once.
for rep in 1 2 3; do
  "$OUT/bench_rollout" run "$OUT/model" "$PROMPTS" "$N" "$MAX_TOKENS" 1 1 | tee -a "$OUT/results"
  /usr/bin/python3 "$SRC/tests/bench/rollout/bench_torch.py" "$OUT/model" "$OUT/prompts.json" "$N" "$MAX_TOKENS" \
      "$THREADS" 1 | tee -a "$OUT/results"
done
"$OUT/bench_rollout" run "$OUT/model" "$PROMPTS" "$N" "$MAX_TOKENS" 0 1 | tee -a "$OUT/results"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
/usr/bin/python3 - "$OUT/results" <<'PY'
import json, sys
best = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    key = (r["impl"], r["kv_cache"])
    if key not in best or r["tokens_per_s"] > best[key]["tokens_per_s"]:
        best[key] = r
w, w0, t = best[("whet", 1)], best[("whet", 0)], best[("torch", 1)]
print(f"batch: {w['prompts']} prompts x {w['n']} responses x up to {w['max_tokens']} tokens (temperature 1)")
print(f"greedy replies of PyTorch agreeing with whet's: {t['greedy_tokens_agreeing']} tokens")
print(f"{'':24} {'tokens':>7} {'seconds':>8} {'tokens/s':>9}")
for name, r in (("whet, KV cache", w), ("whet, no KV cache", w0), ("PyTorch, KV cache", t)):
    print(f"{name:24} {r['tokens']:7} {r['seconds']:8.2f} {r['tokens_per_s']:9.1f}")
print(f"whet KV / whet no KV:    {w['tokens_per_s'] / w0['tokens_per_s']:.2f}x")
print(f"whet KV / PyTorch KV:    {w['tokens_per_s'] / t['tokens_per_s']:.2f}x")
PY
