#!/usr/bin/env bash
# whet on this machine in one command: installs the dependencies, builds, starts `whet up`, creates a
# tenant and prints how to call the API. The stack runs in the foreground until Ctrl-C; with --detach
# it keeps running in the background.
#
#   deploy/quickstart.sh [--data-dir DIR] [--http HOST:PORT] [--detach]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

data_dir="$root/whet-data"
http="127.0.0.1:8080"
detach=0
while [ $# -gt 0 ]; do
  case "$1" in
    --data-dir) data_dir=$2; shift ;;
    --http) http=$2; shift ;;
    --detach) detach=1 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "quickstart: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

WHET_SKIP_NPM=1 ./deploy/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
whet="$root/build/whet"

mkdir -p "$data_dir"
data_dir=$(cd "$data_dir" && pwd)
log="$data_dir/up.log"
"$whet" up --data-dir "$data_dir" --http "$http" >"$log" 2>&1 &
up_pid=$!
trap '[ $detach -eq 1 ] || kill $up_pid 2>/dev/null' EXIT
for _ in $(seq 600); do
  grep -q "whet: ready" "$log" && break
  kill -0 $up_pid 2>/dev/null || { echo "quickstart: whet up failed:" >&2; tail -n 20 "$log" >&2; exit 1; }
  sleep 0.1
done
grep -q "whet: ready" "$log" || { echo "quickstart: whet up did not become ready; see $log" >&2; exit 1; }

export WHET_DATA_DIR="$data_dir"
if key_line=$("$whet" tenant create demo 2>/dev/null | grep '^api key:'); then
  key=${key_line#api key: }
  echo "$key" >"$data_dir/demo.key"
  chmod 600 "$data_dir/demo.key"
else
  key=$(cat "$data_dir/demo.key" 2>/dev/null || "$whet" token --tenant demo)
fi

cat <<MSG

whet is running at http://$http (data in $data_dir, log in $log).
Tenant "demo" has the API key $key (saved in $data_dir/demo.key).

  curl -s http://$http/v1/models -H "Authorization: Bearer $key"
  curl -s http://$http/v1/files -H "Authorization: Bearer $key" -F purpose=fine-tune -F file=@train.jsonl
  curl -s http://$http/v1/fine_tuning/jobs -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \\
       -d '{"model":"whet-tiny","training_file":"file-…"}'

The official OpenAI SDKs work unchanged: base URL http://$http/v1, API key as above.
Operator commands read $data_dir/whet.env:  WHET_DATA_DIR=$data_dir $whet tenant create NAME
MSG

if [ $detach -eq 1 ]; then
  echo "whet up runs in the background (pid $up_pid); stop it with: kill $up_pid"
  exit 0
fi
echo "Press Ctrl-C to stop."
wait $up_pid
