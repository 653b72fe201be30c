# lib.sh - what the e2e shell scripts share, sourced: port (a free loopback port), check NAME CMD
# (runs CMD, counts passes and fails), json PATH (a field of the JSON on stdin, PATH as "['a'][0]"),
# and up DIR HTTP ARGS... (starts `whet up` on DIR serving HTTP, with ARGS, its output in DIR/up.out
# and DIR/up.err; sets up_pid and returns once it is ready, or exits with its log); fleet NAME for the
# tests of jobs over several executors, and finish JOB (below).
free_port_py=$(cd "$(dirname "${BASH_SOURCE[0]}")/../integration/lib" && pwd)/free_port.py
port() { python3 "$free_port_py"; }
fails=0 passes=0
check() { if eval "$2"; then passes=$((passes+1)); echo "ok   $1"; else fails=$((fails+1)); echo "FAIL $1" >&2; fi; }
json() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(eval("d"+sys.argv[1]))' "$1"; }
up() {
  local d=$1 h=$2
  shift 2
  "$WHET_BIN" up --data-dir "$d" --http "$h" --grpc "127.0.0.1:$(port)" "$@" >"$d/up.out" 2>"$d/up.err" &
  up_pid=$!
  for _ in $(seq 600); do grep -qs "whet: ready" "$d/up.out" && break; sleep 0.1; done
  grep -q "whet: ready" "$d/up.out" || { tail -n 30 "$d/up.err" >&2; exit 1; }
}

# fleet NAME: `whet up` without executors of its own (3 s leases) on a work dir $dir, serving $http;
# `executor N [DC]` starts a separate executor of 2 simulated H100s in data center DC (pool DC; dc-1 by
# default) with its work dir $dir/eN and its log $dir/eN.log (e$N its pid), `q SQL` queries its
# database, a tenant NAME's key is $key (`api` is curl with it), the SFT fixture its file $file, and
# `create WHET` a job on it (whet-tiny, seed 7, batches of 8) with the extension object WHET, printing
# its id. At exit every process started and the work dir go.
fleet() {
  dir=$(mktemp -d "/tmp/whet-$1-e2e.XXXXXX")
  chmod 755 "$dir"
  pids=()
  trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
        [ -n "${up_pid:-}" ] && kill "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null || true
        rm -rf "$dir"' EXIT
  http=127.0.0.1:$(port)
  WHET_LEASE_MS=3000 up "$dir" "$http" --executors 0
  export WHET_DATA_DIR=$dir
  db=$(grep '^WHET_DATABASE_URL=' "$dir/whet.env" | cut -d= -f2-)
  key=$("$WHET_BIN" tenant create "$1" 2>/dev/null)
  file=$(api "http://$http/v1/files" -F purpose=fine-tune -F file=@"$WHET_SOURCE_DIR/tests/fixtures/sft/train.jsonl" |
         json "['id']")
}
executor() {
  "$WHET_BIN" executor --data-dir "$dir" --dc "${2:-dc-1}" --pool "${2:-dc-1}" --devices sim:H100:2 --work-dir "$dir/e$1" \
    >"$dir/e$1.log" 2>&1 &
  pids+=($!)
  eval "e$1=$!"
}
q() { psql -qtAX "$db" -c "$1"; }
api() { curl -sS -H "Authorization: Bearer $key" "$@"; }
create() {
  api "http://$http/v1/fine_tuning/jobs" -H 'Content-Type: application/json' \
    -d "{\"model\":\"whet-tiny\",\"training_file\":\"$file\",\"seed\":7,\"hyperparameters\":{\"batch_size\":8},\"whet\":$1}" |
    json "['id']"
}
# finish JOB: waits for its end (10 minutes at most) through the API ($http, $key), prints its status.
finish() {
  local s=
  for _ in $(seq 3000); do
    s=$(api "http://$http/v1/fine_tuning/jobs/$1" | json "['status']" 2>/dev/null || true)
    case "$s" in succeeded|failed|cancelled) break ;; esac
    sleep 0.2
  done
  echo "$s"
}
