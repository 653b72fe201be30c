#!/usr/bin/env bash
# Object store upload throughput: objstore_put_file (whole-file SHA-256 first, then the upload with
# x-amz-content-sha256 set to the real hash) against a plain `curl -T` PUT of the same bytes
# (SigV4-signed by curl with UNSIGNED-PAYLOAD, one stream), both to the same s3rver in the same run.
# objstore runs three ways: one PUT (part size above the file size: the same S3 operation as curl's),
# and multipart in 16 MiB parts with 4 threads (the default) and with 1. A second peer does the same
# integrity work as objstore in shell: `sha256sum`, then curl -T with that hash as the signed payload
# hash and as x-amz-meta-sha256. A third does the multipart upload with curl (create, 16 MiB parts one
# after another, complete), to show what s3rver's completion costs any client. Prints MiB/s, the
# client's CPU seconds and the ratios to plain curl.
#
# s3rver completes a multipart upload by reading every part back and writing the object again (with
# an MD5), so on s3rver multipart pays a second full copy that real S3 does not: the single-PUT ratio
# is the one that measures this client; the multipart ratios show what s3rver makes of it.
#
#   tests/bench/objstore/bench.sh [BUILD_DIR]     (needs libwhet_objstore.a, libwhet_common.a built there)
#   SIZE_MB=200 ROUNDS=3 tests/bench/objstore/bench.sh build-objstore
#
# s3rver is a single-threaded Node server writing to local disk, so it, not the network, bounds both
# sides; on a 2-core machine shared with other builds the figures are noisy: rounds alternate the two
# clients and the median is reported.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bench_setup objstore-bench "${1:-build}"
size_mb=${SIZE_MB:-200}
rounds=${ROUNDS:-5}
bench_driver upload
bench_s3rver
head -c "$((size_mb << 20))" /dev/urandom >"$work/blob"
bytes=$(stat -c %s "$work/blob")

# Prints "wall cpu" seconds like the upload driver.
curl_put() {
  local TIMEFORMAT='%R %U %S'
  { time curl -fsS -o /dev/null -T "$work/blob" --aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER \
      -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$endpoint/whet-bench/curl-$1.bin"; } 2>&1 |
    awk '{printf "%.3f %.3f\n", $1, $2 + $3}'
}

# The same, hashing first like objstore does (sha256sum's CPU counted too).
curl_put_hashed() {
  local TIMEFORMAT='%R %U %S'
  { time {
      sha=$(sha256sum "$work/blob" | cut -d' ' -f1)
      curl -fsS -o /dev/null -T "$work/blob" --aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER \
        -H "x-amz-content-sha256: $sha" -H "x-amz-meta-sha256: $sha" "$endpoint/whet-bench/curlh-$1.bin"
    }; } 2>&1 | awk '{printf "%.3f %.3f\n", $1, $2 + $3}'
}

# A multipart upload with curl alone: create, the parts in sequence, complete.
curl_multipart() {
  local TIMEFORMAT='%R %U %S' url="$endpoint/whet-bench/curlmp-$1.bin"
  local sig=(--aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER -H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
  { time {
      id=$(curl -fsS "${sig[@]}" -X POST "$url?uploads=" | sed -n 's:.*<UploadId>\(.*\)</UploadId>.*:\1:p')
      split -b 16M "$work/blob" "$work/part."
      n=0 xml="<CompleteMultipartUpload>"
      for f in "$work"/part.*; do
        n=$((n + 1))
        etag=$(curl -fsS "${sig[@]}" -T "$f" -D - -o /dev/null "$url?partNumber=$n&uploadId=$id" |
               tr -d '\r' | sed -n 's/^[Ee][Tt]ag: //p')
        xml="$xml<Part><PartNumber>$n</PartNumber><ETag>$etag</ETag></Part>"
      done
      curl -fsS "${sig[@]}" -X POST --data-binary "$xml</CompleteMultipartUpload>" -H "Content-Type:" \
        -o /dev/null "$url?uploadId=$id"
      rm -f "$work"/part.*
    }; } 2>&1 | awk '{printf "%.3f %.3f\n", $1, $2 + $3}'
}

# Median of "wall cpu" lines by wall time, printed as "wall cpu".
median() { sort -g | awk '{w[NR]=$1; c[NR]=$2} END {m=int((NR+1)/2); print w[m], c[m]}'; }

curl_t=() curlh_t=() curlmp_t=() single_t=() multi4_t=() multi1_t=()
for r in $(seq "$rounds"); do
  curl_t+=("$(curl_put "$r")")
  curlh_t+=("$(curl_put_hashed "$r")")
  curlmp_t+=("$(curl_multipart "$r")")
  single_t+=("$("$work/upload" s3://whet-bench/objstore "single-$r" "$work/blob" 4096 1)")
  multi4_t+=("$("$work/upload" s3://whet-bench/objstore "multi4-$r" "$work/blob" 16 4)")
  multi1_t+=("$("$work/upload" s3://whet-bench/objstore "multi1-$r" "$work/blob" 16 1)")
  rm -rf "${work:?}/s3/whet-bench/"*   # keep s3rver's disk use to one round
done
read -r c c_cpu < <(printf '%s\n' "${curl_t[@]}" | median)
read -r ch ch_cpu < <(printf '%s\n' "${curlh_t[@]}" | median)
read -r cm cm_cpu < <(printf '%s\n' "${curlmp_t[@]}" | median)
read -r s s_cpu < <(printf '%s\n' "${single_t[@]}" | median)
read -r m4 m4_cpu < <(printf '%s\n' "${multi4_t[@]}" | median)
read -r m1 m1_cpu < <(printf '%s\n' "${multi1_t[@]}" | median)
mbs() { awk -v b="$bytes" -v t="$1" 'BEGIN {printf "%.1f", b / 1048576 / t}'; }
ratio() { awk -v c="$c" -v t="$1" 'BEGIN {printf "%.2f", c / t}'; }
echo "objstore upload bench: ${size_mb} MiB to s3rver, median of $rounds rounds, $(nproc) cores shared with other work"
row() { printf '  %-48s %7.3fs %7.1f MiB/s  client CPU %6.3fs  ratio %s\n' "$1" "$2" "$(mbs "$2")" "$3" "$(ratio "$2")"; }
row "curl -T (one PUT, unsigned payload)" "$c" "$c_cpu"
row "sha256sum + curl -T (signed payload, meta)" "$ch" "$ch_cpu"
row "curl multipart (16 MiB parts in sequence)" "$cm" "$cm_cpu"
row "objstore_put_file, one PUT" "$s" "$s_cpu"
row "objstore_put_file, multipart 16 MiB x 4 threads" "$m4" "$m4_cpu"
row "objstore_put_file, multipart 16 MiB x 1 thread" "$m1" "$m1_cpu"
echo "  (ratio = throughput / plain curl -T throughput; above 1 is faster than curl)"
echo "  objstore multipart (4 threads) vs curl multipart: $(awk -v a="$cm" -v b="$m4" 'BEGIN {printf "%.2f", a / b}')"
