#!/bin/sh
# run.sh - training-step throughput of whet's engine against PyTorch 1.13, same model, batch, thread
# count and run; plus OpenBLAS's sgemm peak. Usage (from the repository root, after building):
#   tests/bench/train/run.sh [BUILD_DIR] [THREADS]
# Prints one JSON line per measurement and a table of ratios (whet tokens/s / PyTorch tokens/s).
# The machine may be shared: numbers are only comparable within one run, taken back to back.
set -eu
BUILD=${1:-build}
THREADS=${2:-2}
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=$(mktemp -d /tmp/whet-bench-train.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
cc -O2 -march=native -fopenmp -D_GNU_SOURCE -I"$SRC/executor/train" -I"$SRC/common" $(pkg-config --cflags openblas) \
   "$SRC/tests/bench/train/bench_train.c" "$BUILD/libwhet_train.a" "$BUILD/libwhet_common.a" \
   $(pkg-config --libs openblas jansson libcrypto) -lm -o "$OUT/bench_train"
export OMP_NUM_THREADS=$THREADS
# Both sides use libgomp; idle workers sleep instead of spinning, which on a shared machine keeps a
# waiting thread from taking the core its partner needs (it changes nothing on an idle machine).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
"$OUT/bench_train" peak | tee "$OUT/peak.json"
#            name  layers hidden heads ffn  vocab B T   steps
CONFIGS="25M   7  512 8  1376 8192  2 512 3
125M  12 768 12 2560 32000 1 512 2"
echo "$CONFIGS" | while read -r name L C NH F V B T S; do
  for r in 16 0; do
    # Alternate the two twice; each reports its fastest step and the best of the two runs counts.
    for rep in 1 2; do
      w=$("$OUT/bench_train" step "$L" "$C" "$NH" "$F" "$V" "$B" "$T" "$r" "$S")
      p=$(/usr/bin/python3 "$SRC/tests/bench/train/bench_torch.py" "$L" "$C" "$NH" "$F" "$V" "$B" "$T" "$r" "$S" "$THREADS")
      echo "$w"; echo "$p"
      echo "$name $r $w $p" >> "$OUT/results"
    done
  done
done
# The peak again: the best of the two is the machine's, the load around it permitting.
"$OUT/bench_train" peak | tee -a "$OUT/peak.json"
echo
echo "model  method      whet tok/s  torch tok/s  ratio  whet GFLOP/s  sgemm peak"
/usr/bin/python3 - "$OUT/results" "$OUT/peak.json" <<'PY'
import json, sys
peak = max(json.loads(line)["sgemm_gflops"] for line in open(sys.argv[2]))
best = {}
for line in open(sys.argv[1]):
    name, r, rest = line.split(" ", 2)
    dec = json.JSONDecoder()
    w, i = dec.raw_decode(rest)
    p, _ = dec.raw_decode(rest[i:].lstrip())
    b = best.setdefault((name, r), [w, p])
    if w["tokens_per_s"] > b[0]["tokens_per_s"]: b[0] = w
    if p["tokens_per_s"] > b[1]["tokens_per_s"]: b[1] = p
for (name, r), (w, p) in best.items():
    method = "LoRA r=16" if r != "0" else "full FT"
    print(f"{name:6} {method:10} {w['tokens_per_s']:11.0f} {p['tokens_per_s']:12.0f} {w['tokens_per_s']/p['tokens_per_s']:6.2f}"
          f" {w['gflops']:13.1f} {peak:11.1f}")
PY
