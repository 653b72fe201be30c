# lib.sh - what the object store benchmarks (bench.sh, resume.sh, crypt.sh) share, sourced after
# `set -euo pipefail`:
#   bench_setup NAME [BUILD_DIR]   root, build (checked for the object store's libraries) and a work dir
#                                  /tmp/whet-NAME.XXXXXX removed on exit with every process in pids
#   bench_driver NAME              builds tests/bench/objstore/NAME.c against them into $work/NAME
#   bench_s3rver                   starts an s3rver with bucket whet-bench on a free port in $work/s3,
#                                  sets endpoint and exports the S3 variables objstore reads
bench_setup() {
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
  build=${2:-build}
  case "$build" in /*) ;; *) build="$root/$build" ;; esac
  [ -f "$build/libwhet_objstore.a" ] || { echo "bench: $build/libwhet_objstore.a not built" >&2; exit 1; }
  work=$(mktemp -d "/tmp/whet-$1.XXXXXX")
  pids=()
  trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"' EXIT
}

bench_driver() {
  cc -O2 -std=c17 -D_GNU_SOURCE -I"$root/common" -I"$root/common/objstore" "$root/tests/bench/objstore/$1.c" \
    "$build/libwhet_objstore.a" "$build/libwhet_common.a" \
    $(pkg-config --libs libcurl libzstd jansson libcrypto) -lpthread -lm -o "$work/$1"
}

bench_s3rver() {
  local port
  port=$(python3 "$root/tests/integration/lib/free_port.py")
  mkdir -p "$work/s3"
  node "$root/tests/node_modules/s3rver/bin/s3rver.js" --directory "$work/s3" --address 127.0.0.1 --port "$port" \
    --configure-bucket whet-bench --silent >"$work/s3rver.log" 2>&1 &
  pids+=($!)
  endpoint="http://127.0.0.1:$port"
  for _ in $(seq 100); do curl -fs -o /dev/null "$endpoint/" && break; sleep 0.1; done
  export WHET_S3_ENDPOINT="$endpoint" AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
}
