#!/usr/bin/env bash
# Resuming a crashed multipart upload against starting it again: a SIZE_MB file in 16 MiB parts with 4
# threads is uploaded by a process that SIGKILLs itself once FRACTION of it is stored; the upload that
# follows (same file, same key) continues from the journal. Its peer, in the same run, is a fresh
# upload of the same file, which is what a retry cost before uploads were journaled. Prints the median
# seconds and bytes sent of each and their ratios (resumed / fresh).
#
# s3rver completes a multipart upload by reading every part back and writing the object again, a cost
# both sides pay in full whatever was resumed, so the time ratio stays above 1 - FRACTION; the bytes
# ratio is the client's saving. s3rver is single-threaded Node on local disk and this machine has 2
# cores shared with other work: the times are noisy, rounds alternate the two and medians are shown.
#
#   tests/bench/objstore/resume.sh [BUILD_DIR]       (needs libwhet_objstore.a and libwhet_common.a built there)
#   SIZE_MB=200 FRACTION=0.5 ROUNDS=3 tests/bench/objstore/resume.sh build-objstore
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bench_setup objstore-resume "${1:-build}"
size_mb=${SIZE_MB:-200}
fraction=${FRACTION:-0.5}
rounds=${ROUNDS:-3}
bench_driver resume
bench_s3rver
export WHET_LOG_LEVEL=warn
head -c "$((size_mb << 20))" /dev/urandom >"$work/blob"

fresh=() resumed=()
for r in $(seq "$rounds"); do
  fresh+=("$("$work/resume" s3://whet-bench/objstore "fresh-$r" "$work/blob" 16 4 0)")
  resumed+=("$("$work/resume" s3://whet-bench/objstore "resumed-$r" "$work/blob" 16 4 "$fraction")")
  rm -rf "${work:?}/s3/whet-bench/"*   # keep s3rver's disk use to one round
done
# Median line by wall time: "seconds bytes_sent reused".
median() { sort -g | awk '{l[NR]=$0} END {print l[int((NR+1)/2)]}'; }
read -r f_s f_b _ < <(printf '%s\n' "${fresh[@]}" | median)
read -r r_s r_b r_reused < <(printf '%s\n' "${resumed[@]}" | median)
echo "objstore resume bench: ${size_mb} MiB, 16 MiB parts x 4 threads, crash at ${fraction}, median of $rounds rounds, $(nproc) cores shared"
printf '  %-36s %7.3fs  %11d bytes sent\n' "fresh upload (start again)" "$f_s" "$f_b"
printf '  %-36s %7.3fs  %11d bytes sent  (%d bytes taken over)\n' "resumed upload (journal)" "$r_s" "$r_b" "$r_reused"
awk -v a="$r_s" -v b="$f_s" -v c="$r_b" -v d="$f_b" \
  'BEGIN {printf "  resumed / fresh: time %.2f, bytes %.2f (%.1f MiB not sent again)\n", a / b, c / d, (d - c) / 1048576}'
