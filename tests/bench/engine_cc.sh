#!/bin/sh
# engine_cc.sh - compiles a benchmark program against the training engine's static libraries:
#   BUILD=build tests/bench/engine_cc.sh SOURCE.c OUTPUT [LINKER FLAGS...]
# (the engine's headers live in executor/train and its sub-folders; its libraries in $BUILD).
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
source=$1
output=$2
shift 2
includes=$(for d in "$SRC"/executor/train "$SRC"/executor/train/*/ "$SRC"/common; do printf ' -I%s' "$d"; done)
# shellcheck disable=SC2086 # the include flags are words
cc -O2 -march=native -fopenmp -D_GNU_SOURCE $includes $(pkg-config --cflags openblas) "$source" \
   "$BUILD/libwhet_train.a" "$BUILD/libwhet_model_plan.a" "$BUILD/libwhet_grader_runner.a" "$BUILD/libwhet_grader.a" \
   "$BUILD/libwhet_sandbox.a" "$BUILD/libwhet_common.a" \
   $(pkg-config --libs openblas jansson libcrypto libpcre2-8 libseccomp) -lm "$@" -o "$output"
