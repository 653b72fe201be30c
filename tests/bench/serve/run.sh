#!/bin/sh
# run.sh - serving throughput: one `whet serve` worker holding one copy of a ~25M-parameter Llama and
# 16 LoRA adapters, 16 adapters x 4 concurrent streams of 64 tokens (continuous batching, the rows of a
# step grouped by adapter), against the same 64 replies from `whet sample` processes (one process per
# adapter at a time: 16 in parallel, 4 rounds) and against a PyTorch 1.13 sampling loop with a KV cache
# (tests/bench/rollout/bench_torch.py: the same model without adapters, 8 prompts x 8 responses);
# memory of the worker against the sum of the 16 processes; time to first token warm, cold (adapters
# not loaded yet) and from zero (the worker started by the request's sender).
# Usage (from the repository root, after building): tests/bench/serve/run.sh [BUILD_DIR] [THREADS]
set -eu
BUILD=${1:-build}
THREADS=${2:-2}
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=$(mktemp -d /tmp/whet-bench-serve.XXXXXX)
trap 'kill "$WORKER" 2>/dev/null; rm -rf "$OUT"' EXIT
WORKER=
export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); only the ratios within this run mean anything."
"$BUILD/whet" model init --out "$OUT/model" --arch llama --layers 7 --hidden 512 --heads 8 --kv-heads 4 \
    --intermediate 1376 --vocab 8192 >/dev/null
"$BUILD/tests/integration/serve/make_adapters" "$OUT/model" "$OUT/adapter-" 16
args=""
for k in $(seq 0 15); do args="$args --adapter a$k=$OUT/adapter-$k"; done

# the worker: from zero (spawn to the first token), then cold (adapters loading) and warm rounds
start=$(date +%s.%N)
# shellcheck disable=SC2086
"$BUILD/whet" serve --model "$OUT/model" --http 127.0.0.1:0 --address-file "$OUT/address" --slots 64 \
    --max-len 256 --cache 16 $args 2>"$OUT/worker.log" &
WORKER=$!
while [ ! -s "$OUT/address" ]; do sleep 0.05; done
URL="http://$(cat "$OUT/address")"
node "$SRC/tests/bench/serve/streams.mjs" "$URL" 1 1 8 zero > "$OUT/zero.json"
echo "{\"label\": \"from zero\", \"started\": $start, \"answered\": $(date +%s.%N)}" >> "$OUT/results"
node "$SRC/tests/bench/serve/streams.mjs" "$URL" 16 64 64 cold | tee -a "$OUT/results"
for rep in 1 2; do node "$SRC/tests/bench/serve/streams.mjs" "$URL" 16 64 64 warm | tee -a "$OUT/results"; done
worker_kb=$(awk '/VmHWM/ {print $2}' "/proc/$WORKER/status")
kill "$WORKER"; wait "$WORKER" 2>/dev/null || true; WORKER=

# 16 `whet sample` processes at a time (one per adapter), 4 rounds: the same 64 replies
t0=$(date +%s.%N)
: > "$OUT/rss"
for round in 1 2 3 4; do
  for k in $(seq 0 15); do
    /usr/bin/time -f "%M" -a -o "$OUT/rss" "$BUILD/whet" sample --model "$OUT/model" --adapter "$OUT/adapter-$k" \
      --prompt "Tell me about $k." --max-tokens 64 --temperature 1 --seed "$round" > "$OUT/sample-$round-$k.txt" &
  done
  wait
done
t1=$(date +%s.%N)

# PyTorch with a KV cache on the same model (no adapters): 8 prompts x 8 responses x 64 tokens
BUILD="$BUILD" "$SRC/tests/bench/engine_cc.sh" "$SRC/tests/bench/rollout/bench_rollout.c" "$OUT/bench_rollout"
"$OUT/bench_rollout" prompts "$OUT/model" 8 16 > "$OUT/prompts.json"
/usr/bin/python3 "$SRC/tests/bench/rollout/bench_torch.py" "$OUT/model" "$OUT/prompts.json" 8 64 "$THREADS" 1 \
  | tee "$OUT/torch.json"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
/usr/bin/python3 - "$OUT/results" "$OUT/torch.json" "$OUT/rss" "$worker_kb" "$t0" "$t1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
torch = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
rss = [int(x) for x in open(sys.argv[3]).read().split()]
worker_kb, t0, t1 = int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
warm = max((r for r in rows if r.get("label") == "warm"), key=lambda r: r["tokens_per_s"])
cold = next(r for r in rows if r.get("label") == "cold")
zero = next(r for r in rows if r.get("label") == "from zero")
zero["seconds_to_first_answer"] = zero["answered"] - zero["started"]
sample_tps = 64 * 64 / (t1 - t0)  # each reply is 64 tokens unless it ended early (rare on random weights)
print(f"whet serve, 16 adapters x 4 streams: {warm['tokens']} tokens in {warm['seconds']:.2f} s = {warm['tokens_per_s']:.1f} tokens/s")
print(f"16 whet sample processes x 4 rounds:  about {64 * 64} tokens in {t1 - t0:.2f} s = {sample_tps:.1f} tokens/s")
print(f"PyTorch, KV cache, no adapters:       {torch['tokens']} tokens in {torch['seconds']:.2f} s = {torch['tokens_per_s']:.1f} tokens/s")
print(f"worker / 16 processes:                {warm['tokens_per_s'] / sample_tps:.2f}x tokens/s")
print(f"worker / PyTorch:                     {warm['tokens_per_s'] / torch['tokens_per_s']:.2f}x tokens/s")
print(f"memory: worker {worker_kb / 1024:.0f} MiB peak; 16 processes {sum(rss[:16]) / 1024:.0f} MiB together "
      f"(one round's peaks summed) = {sum(rss[:16]) / max(worker_kb, 1):.1f}x the worker")
print(f"time to first token: warm p50 {warm['ttft_p50_s']:.2f} s (max {warm['ttft_max_s']:.2f}), cold p50 "
      f"{cold['ttft_p50_s']:.2f} s (16 adapters loading), from zero {zero['seconds_to_first_answer']:.2f} s (worker start, model load, first answer)")
PY
