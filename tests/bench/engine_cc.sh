#!/bin/sh
# engine_cc.sh - compiles a benchmark program against the training engine's static libraries:
#   BUILD=build tests/bench/engine_cc.sh SOURCE.c OUTPUT [LINKER FLAGS...]
# (the engine's headers live in executor/train and its sub-folders; its libraries in $BUILD, linked in
# CMakeLists.txt's order, with the shared libraries this build's whet links for them: Gloo, and CUDA's when
# the build has the CUDA backend).
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
source=$1
output=$2
shift 2
includes=$(for d in "$SRC"/executor/train "$SRC"/executor/train/*/ "$SRC"/common; do printf ' -I%s' "$d"; done)
cuda=$(ldd "$BUILD/whet" | awk '/libcudart/ {print $3}')
cuda_libs=${cuda:+-L$(dirname "$cuda") -lnccl -lcudart -lcublas -lcublasLt -Wl,-rpath,$(dirname "$cuda")}
# shellcheck disable=SC2086 # the include and library flags are words
cc -O2 -march=native -fopenmp -D_GNU_SOURCE $includes $(pkg-config --cflags openblas) "$source" \
   "$BUILD/libwhet_train.a" "$BUILD/libwhet_train_data.a" "$BUILD/libwhet_tokenizer.a" "$BUILD/libwhet_dist.a" \
   "$BUILD/libwhet_model_plan.a" "$BUILD/libwhet_grader_runner.a" "$BUILD/libwhet_grader.a" \
   "$BUILD/libwhet_sandbox.a" "$BUILD/libwhet_common.a" \
   $(pkg-config --libs openblas jansson libcrypto libpcre2-8 libseccomp) -lgloo $cuda_libs -lstdc++ -lm "$@" \
   -o "$output"
