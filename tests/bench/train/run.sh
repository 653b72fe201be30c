#!/bin/sh
# run.sh - training-step throughput of whet's engine against PyTorch 1.13, same model, batch, thread
# count and run; plus OpenBLAS's sgemm peak. Usage (from the repository root, after building):
#   tests/bench/train/run.sh [BUILD_DIR] [THREADS] [REPS]
# Prints one JSON line per measurement and a table: per model and method, the median over REPS
# back-to-back pairs (whet, then PyTorch) of the ratio whet tokens/s / PyTorch tokens/s, with the
# lowest and highest pair; and the ratio of the CPU seconds of a step (PyTorch's / whet's, all
# threads), which says how much work each does whatever the load. The machine may be shared: only
# numbers taken back to back are comparable, and the spread says how much the neighbours moved them.
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
# --wrap lets `bench_train profile` hand the model a timed copy of the backend table.
cc -O2 -march=native -fopenmp -D_GNU_SOURCE -I"$SRC/executor/train" -I"$SRC/common" $(pkg-config --cflags openblas) \
   "$SRC/tests/bench/train/bench_train.c" "$BUILD/libwhet_train.a" "$BUILD/libwhet_common.a" \
   $(pkg-config --libs openblas jansson libcrypto) -lm -Wl,--wrap=backend_cpu -o "$OUT/bench_train"
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
CONFIGS="25M   7  512 8  1376 8192  2 512 3
125M  12 768 12 2560 32000 1 512 2"
echo "$CONFIGS" | while read -r name L C NH F V B T S; do
  for r in 16 0; do
    rep=0
    while [ $rep -lt "$REPS" ]; do
      w=$("$OUT/bench_train" step "$L" "$C" "$NH" "$F" "$V" "$B" "$T" "$r" "$S")
      p=$(/usr/bin/python3 "$SRC/tests/bench/train/bench_torch.py" "$L" "$C" "$NH" "$F" "$V" "$B" "$T" "$r" "$S" "$THREADS")
      echo "$w"; echo "$p"
      echo "$name $r $w $p" >> "$OUT/results"
      rep=$((rep + 1))
    done
  done
done
# The peak again: the best of the two is the machine's, the load around it permitting.
"$OUT/bench_train" peak | tee -a "$OUT/peak.json"
echo
echo "                                                                  GFLOP/s         GFLOP per CPU s"
echo "model  method     whet tok/s torch tok/s  ratio (min-max)  cpu ratio   whet   sgemm       whet   sgemm"
/usr/bin/python3 - "$OUT/results" "$OUT/peak.json" <<'PY'
import json, statistics, sys
peaks = [json.loads(line) for line in open(sys.argv[2])]
peak = max(p["sgemm_gflops"] for p in peaks)
peak_cpu = max(p["sgemm_gflops_per_cpu_s"] for p in peaks)
pairs = {}
for line in open(sys.argv[1]):
    name, r, rest = line.split(" ", 2)
    dec = json.JSONDecoder()
    w, i = dec.raw_decode(rest)
    p, _ = dec.raw_decode(rest[i:].lstrip())
    pairs.setdefault((name, r), []).append((w, p))
med = statistics.median
for (name, r), ps in pairs.items():
    method = "LoRA r=16" if r != "0" else "full FT"
    ratios = [w["tokens_per_s"] / p["tokens_per_s"] for w, p in ps]
    cpu = [p["cpu_s_per_step"] / w["cpu_s_per_step"] for w, p in ps]
    print(f"{name:6} {method:10} {med(w['tokens_per_s'] for w, _ in ps):10.0f} {med(p['tokens_per_s'] for _, p in ps):11.0f}"
          f"  {med(ratios):5.2f} ({min(ratios):.2f}-{max(ratios):.2f})  {med(cpu):8.2f}"
          f"  {max(w['gflops'] for w, _ in ps):6.1f}  {peak:6.1f}"
          f"     {med(w['gflops_per_cpu_s'] for w, _ in ps):6.1f}  {peak_cpu:6.1f}")
PY
