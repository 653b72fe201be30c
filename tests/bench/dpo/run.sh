#!/bin/sh
# run.sh - a DPO step against an SFT step on the same tokens, same model and run (bench_dpo.c), on the
# tiny model's shape and on a ~25M one. Usage (from the repository root, after building):
#   tests/bench/dpo/run.sh [BUILD_DIR] [THREADS]
# Prints one JSON line per shape. The machine may be shared (2 cores, other work on it): read the
# ratios, which are taken back to back in one process, not the seconds.
set -eu
BUILD=${1:-build}
THREADS=${2:-2}
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=$(mktemp -d /tmp/whet-bench-dpo.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
cc -O2 -march=native -fopenmp -D_GNU_SOURCE -I"$SRC/executor/train" -I"$SRC/common" \
   "$SRC/tests/bench/dpo/bench_dpo.c" "$BUILD/libwhet_train.a" "$BUILD/libwhet_common.a" \
   $(pkg-config --libs openblas jansson libcrypto libpcre2-8) -lm -o "$OUT/bench_dpo"
export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
#        layers hidden heads ffn  vocab pairs prompt response steps
echo "tiny: $("$OUT/bench_dpo" 4 256 4 768 2048 8 48 32 5)"
echo "25M:  $("$OUT/bench_dpo" 7 512 8 1376 8192 4 96 64 3)"
