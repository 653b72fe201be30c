#!/bin/sh
# run.sh - co-training: JOBS LoRA SFT jobs on a ~25M-parameter Llama (7 layers, hidden 512, vocab 8192), each
# STEPS steps of B examples cut to L tokens at a constant learning rate, run (a) as JOBS `whet train`
# processes at once, (b) as the same processes one after another, (c) co-trained in ONE
# `whet train --cotrain` process (one copy of the base, each step batched passes of up to PASS_TOKENS tokens
# over every job's rows), (f) the same co-trained process with as many threads as the machine has cores,
# (d, e) as JOBS training sessions on ONE `whet serve --training` worker driven by JOBS clients at once
# (clients.mjs: the same examples, cross_entropy forward_backward + optim_step; the calls of sessions
# waiting at the same time run as one batched pass on the one frozen base), twice: passes of up to 16384
# tokens (the default --max-train-tokens: up to 32 sessions' calls fit one pass) and of up to PASS_TOKENS
# (2 sessions a pass, which bounds the worker's activations). Every process but (f)'s runs THREADS threads.
# Equal hardware: with THREADS=1, (a)'s JOBS processes keep every core busy while (c)'s one process uses one
# core (a co-training worker owns its device; separate jobs time-share it), so (c) against (a) in tokens/s is
# one core against all of them; (f) against (a) is all the cores against all of them, and tokens per CPU s
# compare the work's cost whatever the cores.
# Reports aggregate tokens/s, tokens per CPU second (user + system seconds of the trainers, their start
# included, or of the worker while the clients ran: what the work costs whatever else runs on the machine,
# which wall-clock ratios do not show on a shared one), peak memory (the JOBS processes' peak RSS summed,
# against the one co-training process's or worker's) and each job's wall time (a co-trained job's: from the
# process's start to its last event line); the ratios within one run are what counts. The issue's goal:
# the co-trained process at >= 1.5x the tokens/s of (a) and <= 0.3x its memory, reported for (c) and (f). Its
# time grows with JOBS x STEPS: with the defaults about 11 minutes on 2 shared cores under a load of 4 (a
# sixth of it each of (a) to (f)).
# Usage (from the repository root, after a Release build):
#   tests/bench/cotrain/run.sh [BUILD_DIR] [THREADS] [STEPS] [PASS_TOKENS] [JOBS]
set -eu
BUILD=${1:-build}
THREADS=${2:-1}
STEPS=${3:-4}
PASS_TOKENS=${4:-1024}
JOBS=${5:-8}
B=4 L=128 LR=0.0002
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=$(mktemp -d /tmp/whet-bench-cotrain.XXXXXX)
trap '[ -z "$WORKER" ] || kill "$WORKER" 2>/dev/null; rm -rf "$OUT"' EXIT
WORKER=
CORES=$(nproc) # before OMP_NUM_THREADS, which nproc reports instead
export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
echo "machine: $CORES cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $JOBS jobs x $STEPS steps x $B x $L tokens," \
     "$THREADS threads per process; only the ratios within this run mean anything."
"$BUILD/whet" model init --out "$OUT/model" --arch llama --layers 7 --hidden 512 --heads 8 --kv-heads 4 \
    --intermediate 1376 --vocab 8192 >/dev/null
/usr/bin/python3 "$SRC/tests/bench/cotrain/make_data.py" "$OUT/data-" "$JOBS" $((STEPS * B))
for mode in parallel serial cotrain cores; do for j in $(seq 0 $((JOBS - 1))); do
  cat > "$OUT/job-$mode-$j.json" <<JSON
{"method": "sft", "model": "$OUT/model", "training_file": "$OUT/data-$j.jsonl", "output_dir": "$OUT/out-$mode-$j",
 "seed": 1, "lora": {"r": 8, "alpha": 16}, "max_steps": $STEPS,
 "hyperparameters": {"batch_size": $B, "learning_rate": $LR, "lr_scheduler": "constant", "warmup_steps": 0,
                     "max_seq_len": $L, "n_epochs": 1}}
JSON
done; done

# one process: its wall seconds, peak RSS (KiB) and CPU seconds appended to $1; the rest are its arguments
train() { out=$1; shift; /usr/bin/time -f "%e %M %U %S" -a -o "$out" "$BUILD/whet" train "$@" --quiet >/dev/null; }

: > "$OUT/parallel"
t0=$(date +%s.%N)
for j in $(seq 0 $((JOBS - 1))); do train "$OUT/parallel" --config "$OUT/job-parallel-$j.json" & done
wait
t1=$(date +%s.%N)
: > "$OUT/serial"
for j in $(seq 0 $((JOBS - 1))); do train "$OUT/serial" --config "$OUT/job-serial-$j.json"; done
t2=$(date +%s.%N)
: > "$OUT/cotrain"
train "$OUT/cotrain" --cotrain --pass-tokens "$PASS_TOKENS" \
    $(for j in $(seq 0 $((JOBS - 1))); do echo "--config $OUT/job-cotrain-$j.json"; done)
t3=$(date +%s.%N)
: > "$OUT/cores"
OMP_NUM_THREADS=$CORES train "$OUT/cores" --cotrain --pass-tokens "$PASS_TOKENS" \
    $(for j in $(seq 0 $((JOBS - 1))); do echo "--config $OUT/job-cores-$j.json"; done)
t4=$(date +%s.%N)
for mode in parallel serial cotrain cores; do for j in $(seq 0 $((JOBS - 1))); do
  n=$(wc -l < "$OUT/out-$mode-$j/metrics.jsonl")
  [ "$n" -eq "$STEPS" ] || { echo "$mode job $j: $n steps, expected $STEPS" >&2; exit 1; }
done; done

# the sessions on one worker: its start, then the clients; its CPU seconds (utime + stime) over the clients
sessions() { # sessions NAME MAX_TRAIN_TOKENS
  w0=$(date +%s.%N)
  rm -f "$OUT/address"
  WHET_LOG_LEVEL=debug "$BUILD/whet" serve --model "$OUT/model" --name base --http 127.0.0.1:0 --address-file "$OUT/address" --slots 4 \
      --max-len 256 --training --max-sessions $JOBS --max-train-tokens "$2" 2>"$OUT/worker-$1.log" &
  WORKER=$!
  while [ ! -s "$OUT/address" ]; do sleep 0.05; done
  echo "{\"label\": \"start\", \"seconds\": $(awk "BEGIN {print $(date +%s.%N) - $w0}")}" > "$OUT/$1"
  node "$SRC/tests/bench/cotrain/clients.mjs" "http://$(cat "$OUT/address")" "$OUT/data-" "$JOBS" "$STEPS" "$B" "$L" "$LR" \
    "/proc/$WORKER/stat" "$(getconf CLK_TCK)" >> "$OUT/$1"
  echo "{\"label\": \"memory\", \"kb\": $(awk '/VmHWM/ {print $2}' "/proc/$WORKER/status")}" >> "$OUT/$1"
  kill "$WORKER"; wait "$WORKER" 2>/dev/null || true; WORKER=
}
sessions one-pass 16384
sessions small-passes "$PASS_TOKENS"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
/usr/bin/python3 - "$OUT" "$JOBS" "$STEPS" "$B" "$L" "$t0" "$t1" "$t2" "$t3" "$t4" "$PASS_TOKENS" "$THREADS" "$CORES" <<'PY'
import json, os, sys
out, jobs, steps, B, L = sys.argv[1], *map(int, sys.argv[2:6])
t0, t1, t2, t3, t4 = map(float, sys.argv[6:11])
pass_tokens, threads, cores = sys.argv[11:14]
tokens = jobs * steps * B * L
def runs(name):
    rows = [line.split() for line in open(f"{out}/{name}")]
    return [float(r[0]) for r in rows], [int(r[1]) for r in rows], sum(float(r[2]) + float(r[3]) for r in rows)
rows = {}
def row(key, label, wall, cpu, kb, jobs_s, extra=""):
    rows[key] = (wall, cpu, kb)
    print(f"{f'({key}) {label}':39} {wall:7.1f} {tokens / wall:8.0f} {tokens / cpu:9.0f} {kb / 1024:8.0f} "
          f" {' '.join(f'{x:.0f}' for x in sorted(jobs_s))}{extra}")
print(f"{tokens} tokens in all ({jobs} jobs x {steps} steps x {B} x {L})")
print(f"{'':39} {'wall s':>7} {'tokens/s':>8} {'tok/CPU s':>9} {'peak MiB':>8}  jobs' wall s")
par_s, par_kb, par_cpu = runs("parallel")
row("a", f"{jobs} whet train at once", t1 - t0, par_cpu, sum(par_kb), par_s)
ser_s, ser_kb, ser_cpu = runs("serial")
row("b", f"{jobs} whet train in a row", t2 - t1, ser_cpu, max(ser_kb), ser_s)
# a co-trained job's wall time: the process's start to its last event line (its "cotrain" line, after its final)
for key, mode, start, end, n in (("c", "cotrain", t2, t3, threads), ("f", "cores", t3, t4, cores)):
    _, kb, cpu = runs(mode)
    row(key, f"--cotrain, {n} thr, passes <= {pass_tokens}", end - start, cpu, kb[0],
        [os.path.getmtime(f"{out}/out-{mode}-{j}/events.jsonl") - start for j in range(jobs)])
for key, name, what in (("d", "one-pass", "passes <= 16384 tok"), ("e", "small-passes", f"passes <= {pass_tokens} tok")):
    rs = [json.loads(l) for l in open(f"{out}/{name}")]
    wall = next(r for r in rs if r["label"] == "sessions")
    kb = next(r["kb"] for r in rs if r["label"] == "memory")
    start = next(r["seconds"] for r in rs if r["label"] == "start")
    sizes = [int(l.split("sessions=")[1].split()[0]) for l in open(f"{out}/worker-{name}.log") if "forward_backward pass" in l]
    row(key, f"sessions, {what}", wall["seconds"], wall["cpu_s"], kb, [r["seconds"] for r in rs if r["label"] == "session"],
        f"  (worker start {start:.1f} s, passes: {len(sizes)}, {sum(sizes) / max(len(sizes), 1):.1f} sessions each)")
for key in "cfde":
    w, c, kb = rows[key]
    print(f"({key}) against (a): {rows['a'][0] / w:.2f}x tokens/s, {rows['a'][1] / c:.2f}x tokens per CPU s, {kb / rows['a'][2]:.2f}x memory;"
          f" against (b): {rows['b'][0] / w:.2f}x tokens/s, {rows['b'][1] / c:.2f}x tokens per CPU s")
for key, hardware in (("c", f"{threads} thread(s) against {jobs} processes of {threads}"),
                      ("f", f"{cores} threads against {jobs} processes of {threads} on {cores} cores")):
    speed, memory = rows["a"][0] / rows[key][0], rows[key][2] / rows["a"][2]
    print(f"goal, ({key}) against (a), {hardware}: >= 1.5x tokens/s: {speed:.2f}x,"
          f" {'met' if speed >= 1.5 else 'NOT met'}; <= 0.3x memory: {memory:.2f}x, {'met' if memory <= 0.3 else 'NOT met'}")
PY
