#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs the dependencies, builds with warnings as errors,
# starts a throwaway PostgreSQL and an S3 server (s3rver) on free loopback ports, runs ctest, stops
# them, and exits non-zero on any failure.
#
#   tests/run.sh                 everything: a short run of each fuzz target, then the unit, integration and e2e tests
#   tests/run.sh --quick         the inner loop: unit and integration tests only (no training runs, no fuzzing)
#   tests/run.sh --sanitize      the same, built with ASan+UBSan (in build-asan/)
#   tests/run.sh -R REGEX        only the tests whose names match (passed to ctest; -L LABEL likewise)
#   WHET_FUZZ_SECONDS=N          how long each libFuzzer target runs after the suite (default 10; 0 skips)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

build_dir=build
cmake_extra=()
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) build_dir=build-asan; cmake_extra+=(-DWHET_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug)
                # libh2o's own allocations live as long as the process; every gateway gets the suppressions
                export LSAN_OPTIONS="suppressions=$root/tests/integration/lib/lsan.supp"
                # tests of out-of-memory errors ask for more than any machine has: a NULL, not an abort
                export ASAN_OPTIONS="allocator_may_return_null=1" ;;
    --quick) ctest_args+=(-L 'unit|integration') ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) ctest_args+=("$1") ;;
  esac
  shift
done

./deploy/install-deps.sh

cmake -S . -B "$build_dir" -DWHET_WERROR=ON "${cmake_extra[@]}" >/dev/null
cmake --build "$build_dir" -j"$(nproc)"

work=$(mktemp -d /tmp/whet-test.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  set +e
  [ -n "${PGDATA_DIR:-}" ] && run_pg "$PG_BIN/pg_ctl" -D "$PGDATA_DIR" -m immediate stop >/dev/null 2>&1
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 "$root/tests/integration/lib/free_port.py"; }

# PostgreSQL refuses to run as root: run it as the postgres user then.
run_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
PGDATA_DIR="$work/pg"
mkdir -p "$PGDATA_DIR"
[ "$(id -u)" -eq 0 ] && chown postgres: "$PGDATA_DIR"
pg_port=$(free_port)
run_pg "$PG_BIN/initdb" -D "$PGDATA_DIR" -U postgres -A trust --no-sync >/dev/null
run_pg "$PG_BIN/pg_ctl" -D "$PGDATA_DIR" -l "$PGDATA_DIR/log" -w \
  -o "-c listen_addresses=127.0.0.1 -c port=$pg_port -c unix_socket_directories=$PGDATA_DIR -c fsync=off -c max_connections=300" start >/dev/null
export WHET_TEST_DATABASE_URL="postgresql://postgres@127.0.0.1:$pg_port/postgres"
export WHET_TEST_PG_BIN="$PG_BIN"

s3_port=$(free_port)
mkdir -p "$work/s3"
node tests/node_modules/s3rver/bin/s3rver.js --directory "$work/s3" --address 127.0.0.1 --port "$s3_port" \
  --configure-bucket whet-test --silent >"$work/s3rver.log" 2>&1 &
pids+=($!)
export WHET_TEST_S3_ENDPOINT="http://127.0.0.1:$s3_port"
for _ in $(seq 50); do curl -fs -o /dev/null "$WHET_TEST_S3_ENDPOINT/" 2>/dev/null && break; sleep 0.1; done

echo "tests: PostgreSQL on 127.0.0.1:$pg_port, s3rver on 127.0.0.1:$s3_port"
status=0
# libFuzzer targets (tests/fuzz/<name>/), built with clang in build-fuzz and run briefly on their seed
# corpus; run them longer by hand with WHET_FUZZ_SECONDS.
fuzz_seconds=${WHET_FUZZ_SECONDS:-10}
if [ "$fuzz_seconds" -gt 0 ] && [ ${#ctest_args[@]} -eq 0 ] && ls tests/fuzz/*/CMakeLists.txt >/dev/null 2>&1; then
  CC=clang cmake -S . -B build-fuzz -DWHET_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  for dir in tests/fuzz/*/; do
    name=$(basename "$dir")
    cmake --build build-fuzz -j"$(nproc)" --target "fuzz_$name" >/dev/null
    corpus="$work/corpus-$name"
    mkdir -p "$corpus"
    [ -d "$dir/corpus" ] && cp -r "$dir/corpus/." "$corpus/"
    if build-fuzz/tests/fuzz/"$name"/fuzz_"$name" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 \
         -artifact_prefix="$work/" "$corpus" >"$work/fuzz-$name.log" 2>&1; then
      echo "fuzz_$name: ok ($(ls "$corpus" | wc -l) corpus entries after ${fuzz_seconds}s)"
    else
      echo "fuzz_$name: FAILED"; tail -n 40 "$work/fuzz-$name.log"; status=1
    fi
  done
fi
(cd "$build_dir" && ctest --output-on-failure -j"$(nproc)" "${ctest_args[@]}") || status=$?

exit $status
