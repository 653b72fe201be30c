#!/usr/bin/env bash
# Executor benchmarks, each against its own peer in the same run (prints ratios):
#  1. the stall a checkpoint upload causes: mean training step time of a job that checkpoints (and
#     uploads) every step, against the same job checkpointing never;
#  2. time from job create to its first training step on a warm node (model already cached), against
#     the time the bare `whet train` of the same config takes to reach its first step.
# Usage: tests/bench/executor/bench.sh [BUILD_DIR]   (uses a private PostgreSQL through `whet up`)
set -euo pipefail
cd "$(dirname "$0")/../../.."
whet=$(realpath "${1:-build}/whet")
dir=$(mktemp -d /tmp/whet-bench-exec.XXXXXX)
chmod 755 "$dir"
up_pid=
trap '[ -n "$up_pid" ] && kill $up_pid 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
port() { python3 tests/integration/lib/free_port.py; }
http=127.0.0.1:$(port)
env -u WHET_DATABASE_URL -u WHET_OBJECT_STORE "$whet" up --data-dir "$dir" --http "$http" --grpc 127.0.0.1:$(port) \
  --executors 1 --devices sim:bench:1 >"$dir/up.out" 2>"$dir/up.err" &
up_pid=$!
for _ in $(seq 600); do grep -qs "whet: ready" "$dir/up.out" && break; sleep 0.1; done
export WHET_DATA_DIR=$dir
key=$("$whet" tenant create bench 2>/dev/null)
file=$(curl -s -H "Authorization: Bearer $key" "http://$http/v1/files" -F purpose=fine-tune \
  -F file=@tests/fixtures/sft/train.jsonl | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')

# Runs a job; prints "seconds-to-first-step mean-step-seconds" (steps 3.. to skip warm-up).
run_job() {
  python3 - "$http" "$key" "$file" "$1" <<'PY'
import json, sys, time, urllib.request
http, key, file, every = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def call(method, path, body=None):
    req = urllib.request.Request(f"http://{http}{path}", method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))
t0 = time.monotonic()
job = call("POST", "/v1/fine_tuning/jobs", {"model": "whet-tiny", "training_file": file,
      "whet": {"max_steps": 40, "checkpoint_every_steps": every}})["id"]
first = None
while True:
    ev = call("GET", f"/v1/fine_tuning/jobs/{job}/events?limit=1")["data"]
    if first is None and ev and ev[0]["type"] == "metrics":
        first = time.monotonic() - t0
    st = call("GET", f"/v1/fine_tuning/jobs/{job}")["status"]
    if st in ("succeeded", "failed", "cancelled"):
        break
    time.sleep(0.05)
steps = {}
after = None
while True:
    page = call("GET", f"/v1/fine_tuning/jobs/{job}/events?limit=100" + (f"&after={after}" if after else ""))
    for e in page["data"]:
        if e["type"] == "metrics":
            steps[e["data"]["step"]] = e["data"]["tokens"] / e["data"]["tokens_per_s"]
    if not page["has_more"]:
        break
    after = page["data"][-1]["id"]
late = [v for k, v in steps.items() if k >= 3]
print(f"{first:.3f} {sum(late) / len(late):.5f}")
PY
}
run_job 1000 >/dev/null                      # warm the node's model cache
read -r first_plain step_plain < <(run_job 1000)
read -r first_ckpt step_ckpt < <(run_job 1)
# The bare trainer on the same data: time to its first step line.
model="$dir/models/whet-tiny"
cat >"$dir/bare.json" <<JSON
{"method":"sft","model":"$model","training_file":"$(pwd)/tests/fixtures/sft/train.jsonl","output_dir":"$dir/bare",
 "hyperparameters":{"n_epochs":1,"batch_size":4,"learning_rate":0.0002,"max_seq_len":512},"seed":1,"max_steps":1}
JSON
bare=$(python3 - "$whet" "$dir/bare.json" <<'PY'
import subprocess, sys, time, os
env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
t0 = time.monotonic()
p = subprocess.Popen([sys.argv[1], "train", "--config", sys.argv[2]], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
for line in p.stdout:
    if '"type":"metrics"' in line:
        print(f"{time.monotonic() - t0:.3f}")
        break
p.wait()
PY
)
python3 - "$step_plain" "$step_ckpt" "$first_plain" "$bare" <<'PY'
import sys
plain, ckpt, first, bare = map(float, sys.argv[1:])
print(f"step time, checkpoint+upload every step vs never: {ckpt*1000:.1f} ms vs {plain*1000:.1f} ms  (ratio {ckpt/plain:.2f})")
print(f"create -> first step on a warm node: {first:.2f} s; bare `whet train` to its first step: {bare:.2f} s  (ratio {first/bare:.2f})")
PY
