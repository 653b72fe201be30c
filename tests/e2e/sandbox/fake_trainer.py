#!/usr/bin/python3
# fake_trainer.py - a stand-in for `whet train`, deployed with `whet executor --trainer` by
# sandbox.test.mjs. Run as `fake_trainer.py train --config FILE`, it does what the first user message
# of its training file says:
#   "socket"  opens a TCP connection (a trainer phoning home): the sandbox must kill it;
#   "write"   writes outside its job dir (the node's base-model cache, the executor's work dir, the
#             trainer program itself): every write must fail, and it exits 1 saying so;
#   "grpo"    behaves: metrics lines carrying rollout_tokens (as a GRPO trainer emits them), a final
#             model, exit 0 — for metering;
#   "late"    one metrics line (1000 rollout tokens), then waits for a file named "release" in its job
#             dir before writing its final model: the test decides when an attempt finishes.
import json
import os
import socket
import sys
import time

# The rollout tokens of the "grpo" mode's steps; the test expects their sum in the usage records.
ROLLOUT_TOKENS = [123, 456, 789]
TRAINED_TOKENS = [10, 20, 30]


def say(text):
    print(f"fake trainer: {text}", file=sys.stderr, flush=True)


def event(obj):
    print(json.dumps(obj), flush=True)


def main():
    cfg_path = sys.argv[sys.argv.index("--config") + 1]
    with open(cfg_path) as f:
        cfg = json.load(f)
    with open(cfg["training_file"]) as f:
        first = json.loads(f.readline())
    mode = next(m["content"] for m in first["messages"] if m["role"] == "user").strip()
    job_dir = os.path.dirname(cfg_path)
    say(f"mode {mode}")

    if mode == "socket":
        say("connecting to 1.1.1.1:80")
        socket.create_connection(("1.1.1.1", 80), timeout=5)
        say("connected: the sandbox let a socket through")
        return 0

    if mode == "write":
        work_dir = os.path.dirname(os.path.dirname(job_dir))  # WORK_DIR/jobs/ID-ATTEMPT
        targets = [os.path.join(cfg["model"], "config.json"), os.path.join(work_dir, "escaped.txt"),
                   os.path.abspath(sys.argv[0])]
        escaped = 0
        for path in targets:
            try:
                with open(path, "a") as f:
                    f.write("written by a hostile trainer\n")
                escaped += 1
                say(f"wrote {path}: the sandbox let a write out of the job dir")
            except OSError as e:
                say(f"cannot write {path}: {e.strerror}")
        return 2 if escaped else 1

    if mode == "grpo":
        n = len(ROLLOUT_TOKENS)
        event({"type": "data", "total_steps": n, "examples": 1})
        for i in range(n):
            event({"type": "metrics", "step": i + 1, "total_steps": n, "epoch": 1, "loss": 0.5, "lr": 1e-5,
                   "tokens": TRAINED_TOKENS[i], "reward_mean": 0.5, "rollout_tokens": ROLLOUT_TOKENS[i]})
        final = os.path.join(cfg["output_dir"], "final")
        os.makedirs(final, exist_ok=True)
        with open(os.path.join(final, "adapter_config.json"), "w") as f:
            json.dump({"fake": True}, f)
        event({"type": "final", "step": n, "path": final})
        return 0

    if mode == "late":
        event({"type": "data", "total_steps": 1, "examples": 1})
        event({"type": "metrics", "step": 1, "total_steps": 1, "epoch": 1, "loss": 0.5, "lr": 1e-5, "tokens": 5,
               "rollout_tokens": 1000})
        say("waiting for release")
        deadline = time.monotonic() + 300
        while not os.path.exists(os.path.join(job_dir, "release")):
            if time.monotonic() > deadline:
                return 4
            time.sleep(0.1)
        final = os.path.join(cfg["output_dir"], "final")
        os.makedirs(final, exist_ok=True)
        with open(os.path.join(final, "adapter_config.json"), "w") as f:
            json.dump({"fake": True}, f)
        event({"type": "final", "step": 1, "path": final})
        say("final model written")
        return 0

    say(f"unknown mode {mode!r}")
    return 3


sys.exit(main())
