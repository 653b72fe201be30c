#!/bin/sh
# run.sh - whet's DPO micro-batch (bench_dpo.c) against PyTorch 1.13 doing the same with a PEFT-style
# LoRA model (bench_dpo_torch.py), same Llama shape, tokens, thread count and run; and against an
# SFT step of whet's engine on the same tokens. Usage (from the repository root, after building):
#   tests/bench/dpo/run.sh [BUILD_DIR] [THREADS]
# The machine may be shared (2 cores, other work on it): read the ratios, taken back to back in one
# run, not the seconds.
set -eu
BUILD=${1:-build}
THREADS=${2:-2}
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=$(mktemp -d /tmp/whet-bench-dpo.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
BUILD="$BUILD" "$SRC/tests/bench/engine_cc.sh" "$SRC/tests/bench/dpo/bench_dpo.c" "$OUT/bench_dpo"
export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
#            name  layers hidden heads ffn  vocab pairs prompt response steps
CONFIGS="tiny  4 256 4 768 2048 8 48 32 5
25M   7 512 8 1376 8192 4 96 64 3"
echo "$CONFIGS" | while read -r name L C NH F V P PR R S; do
  w=$("$OUT/bench_dpo" "$L" "$C" "$NH" "$F" "$V" "$P" "$PR" "$R" "$S")
  p=$(/usr/bin/python3 "$SRC/tests/bench/dpo/bench_dpo_torch.py" "$L" "$C" "$NH" "$F" "$V" "$P" "$PR" "$R" "$S" "$THREADS")
  echo "$name whet:  $w"
  echo "$name torch: $p"
  /usr/bin/python3 - "$name" "$w" "$p" <<'PY'
import json, sys
w, p = json.loads(sys.argv[2]), json.loads(sys.argv[3])
print(f"{sys.argv[1]}: DPO micro-batch torch/whet time {p['dpo_s'] / w['dpo_s']:.2f}x, reference pass torch/whet "
      f"{p['reference_s'] / w['reference_s']:.2f}x; whet DPO / whet SFT {w['dpo_over_sft']:.2f}x")
PY
done
