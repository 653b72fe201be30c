#!/usr/bin/env bash
# whet on this machine in one command: installs the dependencies, builds, starts `whet up` (a private
# PostgreSQL, the gateway, the scheduler and one executor), creates a tenant, uploads a small bundled
# dataset, fine-tunes the bundled whet-tiny model through the API with live progress, and shows what
# the fine-tuned model answers next to the base model. Then it says how to call the API. The stack runs
# in the foreground until Ctrl-C; with --detach it keeps running in the background.
#
#   deploy/quickstart.sh [--data-dir DIR] [--http HOST:PORT] [--detach] [--no-demo]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

data_dir="$root/whet-data"
data_dir_given=0
http="127.0.0.1:8080"
detach=0
demo=1
while [ $# -gt 0 ]; do
  case "$1" in
    --data-dir) data_dir=$2; data_dir_given=1; shift ;;
    --http) http=$2; shift ;;
    --detach) detach=1 ;;
    --no-demo) demo=0 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "quickstart: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

WHET_SKIP_NPM=1 ./deploy/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
whet="$root/build/whet"

# As root, the private PostgreSQL runs as the postgres user, which must be able to reach the data dir.
if [ "$(id -u)" -eq 0 ] && [ $data_dir_given -eq 0 ] && ! runuser -u postgres -- test -x "$root" 2>/dev/null; then
  data_dir=/var/lib/whet/quickstart
  echo "quickstart: $root is not reachable by the postgres user; using $data_dir"
fi
mkdir -p "$data_dir"
data_dir=$(cd "$data_dir" && pwd)
log="$data_dir/up.log"
"$whet" up --data-dir "$data_dir" --http "$http" --executors 1 --devices sim:demo:1 >"$log" 2>&1 &
up_pid=$!
trap '[ $detach -eq 1 ] || kill $up_pid 2>/dev/null' EXIT
for _ in $(seq 600); do
  grep -q "whet: ready" "$log" && break
  kill -0 $up_pid 2>/dev/null || { echo "quickstart: whet up failed:" >&2; tail -n 20 "$log" >&2; exit 1; }
  sleep 0.1
done
grep -q "whet: ready" "$log" || { echo "quickstart: whet up did not become ready; see $log" >&2; exit 1; }

export WHET_DATA_DIR="$data_dir"
if key=$("$whet" tenant create demo 2>/dev/null); then
  echo "$key" >"$data_dir/demo.key"
  chmod 600 "$data_dir/demo.key"
else
  key=$(cat "$data_dir/demo.key" 2>/dev/null || "$whet" token --tenant demo)
fi

# The product's main job: a dataset in, a fine-tuned model out, through the API.
api() { curl -sS -H "Authorization: Bearer $key" "$@"; }
field() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(eval("d"+sys.argv[1]))' "$1"; }
if [ $demo -eq 1 ]; then
  echo
  echo "== uploading deploy/examples/sft-train.jsonl (96 chat examples)"
  file_id=$(WHET_API_KEY=$key "$whet" files upload deploy/examples/sft-train.jsonl --url "http://$http")
  echo "== creating a LoRA SFT job on whet-tiny"
  job_id=$(api "http://$http/v1/fine_tuning/jobs" -H 'Content-Type: application/json' \
    -d "{\"model\":\"whet-tiny\",\"training_file\":\"$file_id\",\"suffix\":\"quickstart\",
         \"method\":{\"type\":\"supervised\",\"supervised\":{\"hyperparameters\":{\"n_epochs\":40,\"batch_size\":24,\"learning_rate_multiplier\":5}}},
         \"whet\":{\"max_steps\":120,\"checkpoint_every_steps\":40}}" | field "['id']")
  echo "   $job_id (watch it at http://$http/console, or: whet jobs follow $job_id)"
  # A progress bar with the step, the loss, the ETA and the cost; the model's name on stdout.
  if model=$(WHET_API_KEY=$key "$whet" jobs follow "$job_id" --url "http://$http"); then
    echo "== $model"
    adapter="$data_dir/quickstart-adapter"
    mkdir -p "$adapter"
    for f in adapter_config.json adapter_model.safetensors; do
      api -o "$adapter/$f" "http://$http/v1/fine_tuning/jobs/$job_id/checkpoints/final/files/$f"
    done
    prompt="What is the capital of Egypt?"
    echo "== asking both models: $prompt"
    echo "   base:       $("$whet" sample --model "$data_dir/models/whet-tiny" --prompt "$prompt" --temperature 0 --max-tokens 24)"
    echo "   fine-tuned: $("$whet" sample --model "$data_dir/models/whet-tiny" --adapter "$adapter" --prompt "$prompt" --temperature 0 --max-tokens 24)"
    echo "   (the adapter is in $adapter; checkpoints: GET /v1/fine_tuning/jobs/$job_id/checkpoints)"
    # the fine-tuned model answers through the gateway's chat completions (whet up runs a model worker)
    echo "== chat.completions.create(model=\"$model\") at http://$http/v1:"
    api "http://$http/v1/chat/completions" -H 'Content-Type: application/json' -d "{\"model\": \"$model\",
      \"messages\": [{\"role\": \"user\", \"content\": \"$prompt\"}], \"max_tokens\": 24, \"temperature\": 0}" |
      field "['choices'][0]['message']['content']" | sed 's/^/   /'
  else
    echo "quickstart: the job did not succeed (above); its events: GET /v1/fine_tuning/jobs/$job_id/events" >&2
  fi
fi

cat <<MSG

whet is running at http://$http (data in $data_dir, log in $log).
The web console is at http://$http/console: sign in with the key below (or an operator's \`whet token --admin\`).
Tenant "demo" has the API key $key (saved in $data_dir/demo.key).

  curl -s http://$http/v1/models -H "Authorization: Bearer $key"
  curl -s http://$http/v1/files -H "Authorization: Bearer $key" -F purpose=fine-tune -F file=@train.jsonl
  curl -s http://$http/v1/fine_tuning/jobs -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \\
       -d '{"model":"whet-tiny","training_file":"file-…"}'

The official OpenAI SDKs work unchanged: base URL http://$http/v1, API key as above.
At a terminal: export WHET_API_KEY=$key; $whet files upload FILE; $whet jobs follow JOB_ID
Operator commands read $data_dir/whet.env:  WHET_DATA_DIR=$data_dir $whet tenant create NAME
MSG

if [ $detach -eq 1 ]; then
  echo "whet up runs in the background (pid $up_pid); stop it with: kill $up_pid"
  exit 0
fi
echo "Press Ctrl-C to stop."
wait $up_pid
