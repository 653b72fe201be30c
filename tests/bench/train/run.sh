#!/bin/sh
# run.sh - training-step throughput of whet's engine against PyTorch 1.13, same model, batch, thread
# count and run; plus OpenBLAS's sgemm peak. Usage (from the repository root, after building):
#   tests/bench/train/run.sh [BUILD_DIR] [THREADS] [REPS]
# Each model and method runs REPS times; a run loads both models and takes their steps alternately,
# one at a time (pairs.py), so each whet step has a PyTorch step next to it in time. Prints one JSON
# line per run and a table: the median over all pairs of whet tokens/s / PyTorch tokens/s, with the
# lowest and highest of the runs' own medians; the median ratio of the CPU seconds of a step
# (PyTorch's / whet's, all threads: how much work each does, whatever the load). The machine may be
# shared: only numbers taken back to back are comparable, and the spread says how much the
# neighbours moved them.
#   tests/bench/train/run.sh BUILD_DIR THREADS profile LAYERS HIDDEN HEADS FFN VOCAB B T LORA_R STEPS
# instead prints the time of every backend op of a step (bench_train profile). GFLOP/s: the model's
# FLOPs over the fastest step; GFLOP per CPU s: over the CPU seconds of a step, against sgemm's own.
set -eu
BUILD=${1:-build}
THREADS=${2:-2}
REPS=${3:-3}
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=$(mktemp -d /tmp/whet-bench-train.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
# --wrap lets `bench_train profile` time the ops of the model's backend instance.
BUILD="$BUILD" "$SRC/tests/bench/engine_cc.sh" "$SRC/tests/bench/train/bench_train.c" "$OUT/bench_train" -Wl,--wrap=backend_open
export OMP_NUM_THREADS=$THREADS
# Both sides use libgomp; idle workers sleep instead of spinning, which on a shared machine keeps a
# waiting thread from taking the core its partner needs (it changes nothing on an idle machine).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if [ "$REPS" = profile ]; then
  shift 3
  "$OUT/bench_train" profile "$@"
  exit
fi
"$OUT/bench_train" peak | tee "$OUT/peak.json"
#            name  layers hidden heads ffn  vocab B T   steps
CONFIGS="25M   7  512 8  1376 8192  2 512 4
125M  12 768 12 2560 32000 1 512 3"
echo "$CONFIGS" | while read -r name L C NH F V B T S; do
  for r in 16 0; do
    rep=0
    while [ $rep -lt "$REPS" ]; do
      res=$(/usr/bin/python3 "$SRC/tests/bench/train/pairs.py" "$OUT/bench_train" "$SRC/tests/bench/train/bench_torch.py" \
            "$THREADS" "$L" "$C" "$NH" "$F" "$V" "$B" "$T" "$r" "$S")
      echo "$name $r $res" | tee -a "$OUT/results"
      rep=$((rep + 1))
    done
  done
done
# The peak again: the best of the two is the machine's, the load around it permitting.
"$OUT/bench_train" peak | tee -a "$OUT/peak.json"
echo
echo "                                              tokens/s ratio whet/torch   CPU s    GFLOP/s      GFLOP per CPU s"
echo "model  method     whet tok/s torch tok/s   median (runs: min-max)   torch/whet  whet  sgemm    whet  sgemm"
/usr/bin/python3 - "$OUT/results" "$OUT/peak.json" <<'PY'
import json, statistics, sys
peaks = [json.loads(line) for line in open(sys.argv[2])]
peak = max(p["sgemm_gflops"] for p in peaks)
peak_cpu = max(p["sgemm_gflops_per_cpu_s"] for p in peaks)
runs = {}
for line in open(sys.argv[1]):
    name, r, rest = line.split(" ", 2)
    runs.setdefault((name, r), []).append(json.loads(rest))
med = statistics.median
for (name, r), rs in runs.items():
    method = "LoRA r=16" if r != "0" else "full FT"
    tokens = rs[0]["whet"]["B"] * rs[0]["whet"]["T"]
    pairs = [p for run in rs for p in run["pairs"]]
    ratio = med(p["torch_s"] / p["whet_s"] for p in pairs)
    per_run = [med(p["torch_s"] / p["whet_s"] for p in run["pairs"]) for run in rs]
    cpu = med(p["torch_cpu_s"] / p["whet_cpu_s"] for p in pairs)
    # The model FLOPs of a step, from bench_train's own figure.
    w0 = rs[0]["whet"]
    flop = w0["gflops"] * w0["s_per_step"]
    print(f"{name:6} {method:10} {tokens / med(p['whet_s'] for p in pairs):10.0f} {tokens / med(p['torch_s'] for p in pairs):11.0f}"
          f"   {ratio:5.2f} ({min(per_run):.2f}-{max(per_run):.2f}, {len(pairs)} pairs)   {cpu:6.2f}"
          f"   {flop / min(p['whet_s'] for p in pairs):6.1f} {peak:6.1f}"
          f"   {flop / med(p['whet_cpu_s'] for p in pairs):6.1f} {peak_cpu:6.1f}")
PY
