#!/usr/bin/env bash
# tests/gpu/pack.sh - a CUDA build of whet made on a build machine, packed for a GPU machine that lacks the
# project's Debian libraries (h2o, libpq, gRPC, OpenBLAS, ...) and cannot install them:
#
#   tests/gpu/pack.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR holds a build configured with -DWHET_CUDA=ON (tests/gpu/run.sh's step 1 makes one). OUT_DIR gets
# the binaries tests/gpu/run.sh runs, at the paths they have in a build dir (whet, tests/unit/backend/
# unit_backend, tests/unit/model/unit_model), bench_train (tests/bench/train, compiled against that build),
# and lib.tar.gz: every shared library they load except the C runtime (glibc, libstdc++, libgcc_s, which the
# GPU machine has in a version at least as new) and CUDA's own (cudart, cuBLAS, NCCL: the GPU machine's
# toolkit, matched to its driver). Then, on the GPU machine:
#
#   WHET_GPU_PREBUILT=OUT_DIR tests/gpu/run.sh
#
# unpacks the libraries, finds CUDA's, and runs the checks without building. The libraries are compressed
# because what travels to a GPU machine is limited in size (about 65 MB raw, 25 MB packed).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: tests/gpu/pack.sh BUILD_DIR OUT_DIR" >&2; exit 2; }
build=$1 out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
for f in whet tests/unit/backend/unit_backend tests/unit/model/unit_model; do
  [ -x "$build/$f" ] || { echo "pack.sh: $build/$f is missing: build the targets whet unit_backend unit_model" >&2; exit 1; }
done
ldd "$build/whet" | grep -q libcudart || { echo "pack.sh: $build/whet has no CUDA backend (configure with -DWHET_CUDA=ON)" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/tests/unit/backend" "$out/tests/unit/model" "$out/lib"
cp "$build/whet" "$out/whet"
cp "$build/tests/unit/backend/unit_backend" "$out/tests/unit/backend/"
cp "$build/tests/unit/model/unit_model" "$out/tests/unit/model/"
BUILD="$build" "$root/tests/bench/engine_cc.sh" "$root/tests/bench/train/bench_train.c" "$out/bench_train" \
  -Wl,--wrap=backend_open
strip "$out/whet" "$out/tests/unit/backend/unit_backend" "$out/tests/unit/model/unit_model" "$out/bench_train"
for f in "$out/whet" "$out/tests/unit/backend/unit_backend" "$out/tests/unit/model/unit_model" "$out/bench_train"; do
  ldd "$f"
done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s)\.so|ld-linux|/libcud|/libcublas|/libnccl' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
tar -C "$out" -czf "$out/lib.tar.gz" lib
rm -rf "$out/lib"
du -sh "$out"
