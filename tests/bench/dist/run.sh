#!/bin/sh
# run.sh - distributed training on CPU ranks of this machine (Gloo over loopback): step time and bytes
# each rank sends per step for data parallel (DP), ZeRO-1 and ZeRO-3 at 2 and 4 ranks, against one
# process and against the ring's theoretical volume (all-reduce: 2(N-1)/N of the gradient's bytes;
# ZeRO-1: a reduce-scatter and an all-gather, the same; ZeRO-3: two all-gathers of each unit, forward
# and backward, and a reduce-scatter, 3(N-1)/N); rank 0's peak memory over the whole run (loading
# included: every rank reads the whole model) and while training (after its first step): ZeRO-1 keeps
# 1/N of the AdamW moments, ZeRO-3 1/N of everything but the units in flight; and the stall a checkpoint of a 4-rank gang causes (the run's wall time with a checkpoint
# every 2 steps against none, per checkpoint). Full fine-tuning of a ~25M-parameter Llama, batch 8 x
# 128 tokens, one thread per rank.
# Usage (from the repository root, after building): tests/bench/dist/run.sh [BUILD_DIR] [STEPS]
set -eu
BUILD=${1:-build}
STEPS=${2:-6}
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=$(mktemp -d /tmp/whet-bench-dist.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); only the ratios within this run mean anything."
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive
"$BUILD/whet" model init --out "$OUT/model" --arch llama --layers 7 --hidden 512 --heads 8 --kv-heads 4 \
    --intermediate 1376 --vocab 8192 >/dev/null
python3 - "$BUILD/whet" "$OUT" "$SRC/tests/fixtures/sft/train.jsonl" "$STEPS" <<'PY'
import json, os, statistics, subprocess, sys, time
whet, out, train, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def config(name, world=1, rank=0, zero=0, addr=None, ckpt=0):
    c = {"method": "sft", "model": f"{out}/model", "training_file": train, "output_dir": f"{out}/{name}-{rank}",
         "seed": 1, "lora": None, "max_steps": steps, "checkpoint_every_steps": ckpt, "eval_every_steps": 0,
         "hyperparameters": {"batch_size": 8, "learning_rate": 1e-4, "max_seq_len": 128}}
    if world > 1:
        c["distributed"] = {"world_size": world, "rank": rank, "rendezvous": addr or "127.0.0.1:0", "zero": zero}
    path = f"{out}/{name}-{rank}.json"
    json.dump(c, open(path, "w"))
    return path

def status_kb(pid, field):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field): return int(line.split()[1])
    except OSError: pass
    return 0

def trained_steps(name):
    try: return sum(1 for _ in open(f"{out}/{name}-0/metrics.jsonl"))
    except OSError: return 0

def run(name, world=1, zero=0, ckpt=0):
    """Runs a gang (rank 0 first, the others at its rendezvous); returns wall seconds, rank 0's metrics
    lines, rank 0's peak memory (kB) and its largest resident set once a step was done (kB)."""
    t0 = time.time()
    ev = open(f"{out}/{name}.events", "w+")
    p0 = subprocess.Popen([whet, "train", "--config", config(name, world, 0, zero, None, ckpt), "--quiet"], stdout=ev,
                          stderr=open(f"{out}/{name}.log", "w"))
    others = []
    if world > 1:
        addr = None
        while addr is None:
            ev.seek(0)
            for l in ev:
                e = json.loads(l)
                if e["type"] == "rendezvous": addr = e["address"]
            time.sleep(0.05)
        for r in range(1, world):
            others.append(subprocess.Popen([whet, "train", "--config", config(name, world, r, zero, addr, ckpt), "--quiet"],
                                           stdout=subprocess.DEVNULL))
    peak = training = 0
    while p0.poll() is None:
        peak = max(peak, status_kb(p0.pid, "VmHWM"))
        if trained_steps(name) >= 1: training = max(training, status_kb(p0.pid, "VmRSS"))
        time.sleep(0.05)
    for p in others: p.wait()
    assert p0.returncode == 0 and all(p.returncode == 0 for p in others), f"{name} failed: {open(f'{out}/{name}.log').read()}"
    wall = time.time() - t0
    rows = [json.loads(l) for l in open(f"{out}/{name}-0/metrics.jsonl")]
    return wall, rows, peak, training

base_wall, base, base_peak, base_training = run("alone")
base_step = statistics.median(r["tokens"] / r["tokens_per_s"] for r in base[1:])
# the gradient of a full fine-tune: every parameter (the safetensors header's shapes), f32
with open(f"{out}/model/model.safetensors", "rb") as f:
    header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
n_params = 0
for k, t in header.items():
    if k != "__metadata__":
        n = 1
        for d in t["shape"]: n *= d
        n_params += n
grad_bytes = 4 * n_params
print(f"model: {n_params/1e6:.1f}M parameters, gradient {grad_bytes/2**20:.1f} MiB; one process: step {base_step:.3f}s, "
      f"{statistics.median(r['tokens_per_s'] for r in base[1:]):.0f} tokens/s, peak {base_peak/1024:.0f} MiB, "
      f"{base_training/1024:.0f} MiB while training")
print(f"{'run':<10} {'step s':>7} {'x alone':>8} {'MiB sent/step':>14} {'theory':>8} {'comm s':>7} {'rank 0 peak MiB':>16} "
      f"{'training MiB':>13}")
results = {}
for world in (2, 4):
    for zero in (0, 1, 3):
        name = f"{'zero' + str(zero) + '-' if zero else 'dp'}{world}"
        wall, rows, peak, training = run(name, world, zero)
        step = statistics.median(r["tokens"] / r["tokens_per_s"] for r in rows[1:])
        sent = [b - a for a, b in zip([r["comm_bytes"] for r in rows], [r["comm_bytes"] for r in rows][1:])]
        per_step = statistics.median(sent)
        theory = (3 if zero == 3 else 2) * (world - 1) / world * grad_bytes
        comm_s = statistics.median(r["comm_s"] for r in rows[1:])
        # the losses are the single process's (the e2e test holds them to 1e-5; here a sanity check)
        assert all(abs(a["loss"] - b["loss"]) <= 1e-4 * abs(a["loss"]) for a, b in zip(base, rows)), name
        print(f"{name:<10} {step:7.3f} {base_step/step:8.2f} {per_step/2**20:14.2f} {theory/2**20:8.2f} {comm_s:7.3f} {peak/1024:16.0f} "
              f"{training/1024:13.0f}")
# checkpoint stall of a 4-rank ZeRO-1 gang: every 2 steps against none
wall_none = run("stall-none", 4, 1, 0)[0]
wall_ckpt = run("stall-ckpt", 4, 1, 2)[0]
n_ckpt = (steps - 1) // 2
print(f"checkpoint stall (4 ranks, ZeRO-1, consolidated on rank 0): {(wall_ckpt - wall_none) / max(n_ckpt, 1):.2f}s per "
      f"checkpoint ({n_ckpt} checkpoints; the run {wall_none:.1f}s without, {wall_ckpt:.1f}s with)")
PY
