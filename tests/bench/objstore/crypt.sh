#!/usr/bin/env bash
# The throughput cost of encryption at rest: crypt.c times uploads (objstore_put_file), checkpoint
# uploads and downloads (objstore_put_dir / objstore_get_dir, what the executor streams) and the
# gateway's chunked download reader, each through the plain store and through a sealed view of it
# (AES-256-GCM, objstore_encrypted), alternating in the same process, on a file:// store and on an
# s3rver, and prints the median MiB/s of each and sealed / plain.
#
#   tests/bench/objstore/crypt.sh [BUILD_DIR]     (needs libwhet_objstore.a, libwhet_common.a built there)
#   SIZE_MB=128 ROUNDS=5 tests/bench/objstore/crypt.sh build
#
# On a 2-core machine shared with other work the figures are noisy: compare the ratios, not the MiB/s.
# s3rver is a single-threaded Node server writing to local disk: it bounds both paths there, so the
# s3 ratio shows what sealing costs behind a slow store, the file:// ratio what it costs the CPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=${1:-build}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
size_mb=${SIZE_MB:-128}
rounds=${ROUNDS:-5}
[ -f "$build/libwhet_objstore.a" ] || { echo "bench: $build/libwhet_objstore.a not built" >&2; exit 1; }

work=$(mktemp -d /tmp/whet-crypt-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

cc -O2 -std=c17 -D_GNU_SOURCE -I"$root/common" -I"$root/common/objstore" "$root/tests/bench/objstore/crypt.c" \
  "$build/libwhet_objstore.a" "$build/libwhet_common.a" \
  $(pkg-config --libs libcurl libzstd jansson libcrypto) -lpthread -lm -o "$work/crypt"
head -c "$((size_mb << 20))" /dev/urandom >"$work/blob"
echo "encryption at rest: $size_mb MiB, $rounds rounds, $(nproc) cores"
echo "-- file://"
"$work/crypt" "file://$work/objects" "$work/blob" "$rounds"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/s3"
node "$root/tests/node_modules/s3rver/bin/s3rver.js" --directory "$work/s3" --address 127.0.0.1 --port "$port" \
  --configure-bucket whet-bench --silent >"$work/s3rver.log" 2>&1 &
pids+=($!)
endpoint="http://127.0.0.1:$port"
for _ in $(seq 100); do curl -fs -o /dev/null "$endpoint/" && break; sleep 0.1; done
export WHET_S3_ENDPOINT="$endpoint" AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
echo "-- s3:// (s3rver)"
"$work/crypt" "s3://whet-bench/crypt" "$work/blob" "$rounds"
