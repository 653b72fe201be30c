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
source "$(dirname "$0")/lib.sh"
bench_setup crypt-bench "${1:-build}"
size_mb=${SIZE_MB:-128}
rounds=${ROUNDS:-5}
bench_driver crypt
head -c "$((size_mb << 20))" /dev/urandom >"$work/blob"
echo "encryption at rest: $size_mb MiB, $rounds rounds, $(nproc) cores"
echo "-- file://"
"$work/crypt" "file://$work/objects" "$work/blob" "$rounds"
bench_s3rver
echo "-- s3:// (s3rver)"
"$work/crypt" "s3://whet-bench/crypt" "$work/blob" "$rounds"
