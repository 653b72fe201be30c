#!/usr/bin/python3
# A stand-in for `whet train` in the gang tests (gang.sh), run by the executors as `--trainer` in the
# same sandbox: it follows the event-line contract of executor/train and the distributed contract
# (/work/notes/dist_contract.md: rank 0 announces a rendezvous, only rank 0 writes checkpoints and the
# final model) without training: rank 0 listens where its rendezvous says (port 0: the sandbox picks
# one of the gang's range) and announces the address, the other ranks connect to it, as a store's
# clients would. The test steers it through a file `ctl` in its job dir (its working directory):
# "exit N" exits with N, "finish" ends the run (rank 0 writes final/), "connect HOST PORT" tries a
# connection the gang's network policy refuses.
# SIGTERM checkpoints (rank 0) and exits 0, as a stopped trainer does. A training file whose first
# line holds "no-rendezvous" keeps rank 0 from announcing one.
import json
import os
import signal
import socket
import sys
import time

cfg = json.load(open(sys.argv[3]))
dist = cfg.get("distributed") or {}
rank, generation = dist.get("rank", 0), dist.get("generation", 0)
out = cfg["output_dir"]
json.dump(cfg, open("seen_config.json", "w"))
step = 0
if cfg.get("resume_from"):
    step = json.load(open(os.path.join(cfg["resume_from"], "state.json")))["step"]


def emit(**line):
    print(json.dumps(line), flush=True)


def checkpoint(s):
    d = os.path.join(out, "checkpoints", "step-%d" % s)
    os.makedirs(d, exist_ok=True)
    json.dump({"step": s, "generation": generation}, open(os.path.join(d, "state.json"), "w"))
    emit(type="checkpoint", step=s, path=d)


stopping = False


def on_term(sig, frame):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, on_term)
quiet = "no-rendezvous" in open(cfg["training_file"]).readline()
host, port = dist.get("rendezvous", ":").rsplit(":", 1)
if rank == 0 and dist and not quiet:
    store = socket.socket()
    store.bind((host, int(port)))
    store.listen(64)
    emit(type="rendezvous", address="%s:%d" % (host, store.getsockname()[1]), generation=generation)
elif rank > 0:
    peer = socket.create_connection((host, int(port)), timeout=30)
if rank == 0:
    step += 1
    emit(type="metrics", step=step, total_steps=100, loss=1.0 / step, tokens=10)
    checkpoint(step)
while True:
    if stopping:
        if rank == 0:
            checkpoint(step + 1)
        sys.exit(0)
    try:
        ctl = open("ctl").read().split()
    except FileNotFoundError:
        ctl = []
    if ctl[:1] == ["exit"]:
        print("fake trainer: told to exit %s" % ctl[1], file=sys.stderr)
        sys.exit(int(ctl[1]))
    if ctl[:1] == ["connect"]:
        socket.create_connection((ctl[1], int(ctl[2])), timeout=10)
        print("fake trainer: reached %s:%s" % (ctl[1], ctl[2]), file=sys.stderr)
    if ctl[:1] == ["finish"]:
        if rank == 0:
            d = os.path.join(out, "final")
            os.makedirs(d, exist_ok=True)
            json.dump({"step": step}, open(os.path.join(d, "state.json"), "w"))
            emit(type="final", path=d)
        sys.exit(0)
    time.sleep(0.1)
