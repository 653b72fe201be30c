# lib.sh - what the e2e shell scripts share, sourced: port (a free loopback port), check NAME CMD
# (runs CMD, counts passes and fails), json PATH (a field of the JSON on stdin, PATH as "['a'][0]"),
# and up DIR HTTP ARGS... (starts `whet up` on DIR serving HTTP, with ARGS, its output in DIR/up.out
# and DIR/up.err; sets up_pid and returns once it is ready, or exits with its log).
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
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
