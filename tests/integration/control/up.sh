#!/usr/bin/env bash
# `whet up` as the quickstart runs it: no WHET_DATABASE_URL, so it creates and owns a private
# PostgreSQL under the data dir (as the postgres user when root), applies migrations, registers
# whet-tiny, writes whet.env (mode 0600), prints `whet: ready`, serves the API (chat completions from its
# bundled model worker, in the trainers' sandbox), and on SIGTERM stops
# everything it started — then starts again on the same data dir with the same secrets.
set -euo pipefail
: "${WHET_BIN:?set by ctest}"
unset WHET_DATABASE_URL WHET_OBJECT_STORE WHET_JWT_KEY WHET_DATA_DIR
dir=$(mktemp -d /tmp/whet-up.XXXXXX)
chmod 755 "$dir"
up_pid=
cleanup() {
  [ -n "$up_pid" ] && kill -9 "$up_pid" 2>/dev/null || true
  pkill -9 -f "postgres -D $dir/pg/data" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
free_port_py=$(cd "$(dirname "${BASH_SOURCE[0]}")/../lib" && pwd)/free_port.py
port() { python3 "$free_port_py"; }
http=127.0.0.1:$(port)
grpc=127.0.0.1:$(port)
fails=0 passes=0
check() { if eval "$2"; then passes=$((passes+1)); echo "ok   $1"; else fails=$((fails+1)); echo "FAIL $1" >&2; fi; }

start() {
  "$WHET_BIN" up --data-dir "$dir" --http "$http" --grpc "$grpc" --executors 0 >"$dir/up.out" 2>"$dir/up.err" &
  up_pid=$!
  for _ in $(seq 600); do grep -q "whet: ready" "$dir/up.out" 2>/dev/null && return 0; kill -0 $up_pid 2>/dev/null || break; sleep 0.1; done
  tail -n 30 "$dir/up.err" "$dir/pg/log" >&2 2>/dev/null || true
  return 1
}

check "whet up starts with a private PostgreSQL" start
check "prints the address" 'grep -q "whet: ready http://$http" "$dir/up.out"'
check "whet.env is private" '[ "$(stat -c %a "$dir/whet.env")" = 600 ]'
check "whet.env names the database and a JWT secret" 'grep -q "^WHET_DATABASE_URL=postgresql://" "$dir/whet.env" && grep -q "^WHET_JWT_KEY=" "$dir/whet.env"'
key=$(WHET_DATA_DIR=$dir "$WHET_BIN" tenant create quick 2>/dev/null)
check "a tenant is created through whet.env, its API key alone on stdout" '[[ "$key" =~ ^sk-whet-[A-Za-z0-9_-]{43}$ ]]'
models=$(curl -s "http://$http/v1/models" -H "Authorization: Bearer $key")
check "the API answers with the bundled whet-tiny" '[[ "$models" == *"\"whet-tiny\""* ]]'
# the bundled model's worker answers, from the trainers' sandbox (its own PID namespace, seccomp, no new
# privileges), as placed workers do
chat=$(curl -s "http://$http/v1/chat/completions" -H "Authorization: Bearer $key" -H 'content-type: application/json' \
  -d '{"model":"whet-tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":3}')
check "the bundled worker answers chat completions" '[[ "$chat" == *"\"chat.completion\""* ]]'
worker=
for p in $(pgrep -f -- " serve --model $dir/models/whet-tiny"); do
  grep -q sandbox "/proc/$p/cmdline" 2>/dev/null || worker=$p
done
check "the bundled worker runs sandboxed" '[ -n "$worker" ] && grep -q "the model worker runs sandboxed" "$dir/up.err" &&
  [ "$(readlink /proc/$worker/ns/pid)" != "$(readlink /proc/self/ns/pid)" ] &&
  grep -Eq "^Seccomp:[[:space:]]+2" /proc/$worker/status && grep -Eq "^NoNewPrivs:[[:space:]]+1" /proc/$worker/status'
secret=$(grep '^WHET_JWT_KEY=' "$dir/whet.env")
kill -TERM $up_pid
check "SIGTERM stops whet up" 'for _ in $(seq 200); do kill -0 $up_pid 2>/dev/null || break; sleep 0.1; done; ! kill -0 $up_pid 2>/dev/null'
check "and its PostgreSQL" 'for _ in $(seq 100); do pgrep -f "postgres -D $dir/pg/data" >/dev/null || break; sleep 0.1; done; ! pgrep -f "postgres -D $dir/pg/data" >/dev/null'
up_pid=
check "starts again on the same data dir" start
check "with the same secret" '[ "$(grep "^WHET_JWT_KEY=" "$dir/whet.env")" = "$secret" ]'
check "and the same tenants" '[ "$(curl -s -o /dev/null -w "%{http_code}" "http://$http/v1/models" -H "Authorization: Bearer $key")" = 200 ]'
kill -TERM $up_pid; wait $up_pid 2>/dev/null || true; up_pid=
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
