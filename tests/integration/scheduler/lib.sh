# lib.sh - what the scheduler's integration tests share, sourced as `. lib.sh NAME`: a migrated
# database of their own on run.sh's PostgreSQL (WHET_DATABASE_URL), a work dir ($work, with a file
# object store), the executor token and a free gRPC address in the environment, the processes listed
# in `pids` killed, their logs' ends printed when a check failed, and everything removed at exit; check,
# q, wait_for, eventually, free_port, metric and seed_tenant.
set -euo pipefail
: "${WHET_TEST_DATABASE_URL:?set by tests/run.sh}" "${WHET_BIN:?set by ctest}"
db="whet_$1_$$_$RANDOM"
work=$(mktemp -d "/tmp/whet-$1.XXXXXX")
chmod 755 "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # A failed check's story is in the processes' logs, which go with the work dir: their ends, to the test's output.
  if [ "${fails:-0}" -gt 0 ]; then
    for f in "$work"/*.log; do [ -f "$f" ] && { echo "--- last 40 lines of ${f##*/}"; tail -n 40 "$f"; } >&2; done
  fi
  psql -qX "$WHET_TEST_DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
psql -qX "$WHET_TEST_DATABASE_URL" -c "CREATE DATABASE $db"
export WHET_DATABASE_URL="${WHET_TEST_DATABASE_URL%/*}/$db"
export WHET_EXECUTOR_TOKEN=test-token WHET_OBJECT_STORE="file://$work/objects"
free_port_py=$(cd "$(dirname "${BASH_SOURCE[0]}")/../lib" && pwd)/free_port.py
free_port() { python3 "$free_port_py"; }
export WHET_GRPC="127.0.0.1:$(free_port)"
fails=0 passes=0
check() { if eval "$2"; then passes=$((passes+1)); echo "ok   $1"; else fails=$((fails+1)); echo "FAIL $1" >&2; fi; }
q() { psql -qtAX "$WHET_DATABASE_URL" -c "$1"; }
wait_for() { # wait_for SECONDS SQL EXPECTED
  for _ in $(seq $(( $1 * 10 ))); do [ "$(q "$2")" = "$3" ] && return 0; sleep 0.1; done
  echo "  waited $1s for [$2] = [$3], got [$(q "$2")]" >&2; return 1
}
eventually() { # eventually SECONDS COMMAND: true once COMMAND is (polled every 0.1 s), false after SECONDS
  for _ in $(seq $(( $1 * 10 ))); do eval "$2" && return 0; sleep 0.1; done
  eval "$2"
}
metric() { curl -fsS "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'; } # metric PORT NAME
# Tenant t1 (acme) with base model tiny (not in the object store) and training file file-1.
seed_tenant() {
  q "INSERT INTO tenants (id, name) VALUES ('t1', 'acme');
     INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
       VALUES ('tiny', 'LlamaForCausalLM', 1000, 'models/tiny', 'abc', '{}');
     INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key)
       VALUES ('file-1', 't1', 'fine-tune', 'train.jsonl', 10, 'x', 'files/file-1');"
}
"$WHET_BIN" migrate >/dev/null
