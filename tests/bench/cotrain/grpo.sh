#!/bin/sh
# grpo.sh - co-trained GRPO rollouts: JOBS LoRA GRPO jobs on the tiny test model (`whet model init --preset tiny`),
# each STEPS steps of PROMPTS prompts x GROUP responses of up to 32 tokens (its own seed and sampling temperature), run
# (a) one after another as `whet train` processes and (b) co-trained in ONE `whet train --cotrain` process, where
# every lock-step generates the jobs' first rollout batches together (one batched decode over the jobs' adapter
# views, trainer_cotrain.c); with BEFORE set to another build's whet binary (one whose co-trained GRPO jobs
# generate one after another), (c) the same co-trained group with that binary, in the same run.
# Reports, per mode, the wall and CPU seconds (user + system, of the trainers: what the work costs whatever
# else runs on the machine) and the rollouts' figures as the metrics lines give them: the sum of
# time_rollout_s over the jobs' steps (a co-trained job's share of a batched rollout is the rollout's time split
# by the tokens each job generated, so the shares add up to the rollout's time) and the aggregate
# rollout_tokens_per_s (all generated tokens / that sum). The first step of each job is left out (buffers grow
# on it). The machine may be shared: only the ratios within one run mean anything.
# A decode step computes a few rows for every weight it reads: the fewer rows a job has (PROMPTS x GROUP), the
# more batching the jobs' rows together saves. Last, the rollouts alone, without the rest of the steps and with
# less noise (bench_rollouts.c: the fastest of 3 reps, wall and CPU seconds): the same JOBS x PROMPTS x GROUP
# responses on views of the same model, generated one job after another and together, and how many responses
# the two drew alike.
# Usage (from the repository root, after building):
#   [BEFORE=path/to/whet] tests/bench/cotrain/grpo.sh [BUILD_DIR] [THREADS] [STEPS] [JOBS] [PROMPTS] [GROUP]
set -eu
BUILD=${1:-build}
THREADS=${2:-1}
STEPS=${3:-4}
JOBS=${4:-4}
PROMPTS=${5:-4}
GROUP=${6:-8}
WHET=$(cd "$BUILD" && pwd)/whet
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=$(mktemp -d /tmp/whet-bench-cotrain-grpo.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
CORES=$(nproc) # before OMP_NUM_THREADS, which nproc reports instead
export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
echo "machine: $CORES cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $JOBS GRPO jobs x $STEPS steps x $PROMPTS prompts" \
     "x $GROUP responses of <= 32 tokens, $THREADS thread(s); only the ratios within this run mean anything."
"$WHET" model init --preset tiny --out "$OUT/model" >/dev/null
set -- red green blue yellow black white apple house # the answers: a prompt asks for one, the grader looks for it
for i in $(seq 0 63); do
  eval "w=\${$((i % 8 + 1))}"
  printf '{"messages": [{"role": "user", "content": "Question %d: reply with the word %s."}], "answer": "%s"}\n' "$i" "$w" "$w"
done > "$OUT/train.jsonl"
MODES="alone cotrain"
[ -z "${BEFORE:-}" ] || MODES="$MODES before"
for mode in $MODES; do for j in $(seq 0 $((JOBS - 1))); do
  cat > "$OUT/job-$mode-$j.json" <<JSON
{"method": "grpo", "model": "$OUT/model", "training_file": "$OUT/train.jsonl", "output_dir": "$OUT/out-$mode-$j",
 "seed": $((j + 1)), "lora": {"r": 8, "alpha": 16}, "max_steps": $STEPS,
 "grader": {"type": "string_check", "name": "has", "input": "{{sample.output_text}}", "reference": "{{item.answer}}",
            "operation": "like"},
 "rollout": {"n": $GROUP, "max_tokens": 32, "temperature": 0.$((9 - j % 4))},
 "hyperparameters": {"batch_size": $PROMPTS, "learning_rate": 0.0001, "max_seq_len": 128, "kl_coef": 0.01}}
JSON
done; done
# one process: its CPU seconds (user + system) appended to $OUT/cpu-MODE; the rest are its arguments
run() { mode=$1; shift; /usr/bin/time -f "%U %S" -a -o "$OUT/cpu-$mode" "$@" >/dev/null; }
configs() { for j in $(seq 0 $((JOBS - 1))); do echo "--config $OUT/job-$1-$j.json"; done; }

for mode in $MODES; do
  t0=$(date +%s.%N)
  case $mode in
    alone) for j in $(seq 0 $((JOBS - 1))); do run alone "$WHET" train --config "$OUT/job-alone-$j.json" --quiet; done ;;
    cotrain) run cotrain "$WHET" train --cotrain --quiet $(configs cotrain) ;;
    before) run before "$BEFORE" train --cotrain --quiet $(configs before) ;;
  esac
  echo "$mode $(date +%s.%N) $t0" >> "$OUT/walls"
done
/usr/bin/python3 - "$OUT" "$JOBS" "$STEPS" <<'PY'
import json, sys
out, jobs, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
walls = {l.split()[0]: float(l.split()[1]) - float(l.split()[2]) for l in open(f"{out}/walls")}
label = {"alone": f"(a) {jobs} whet train in a row", "cotrain": "(b) --cotrain, batched rollouts",
         "before": "(c) --cotrain, BEFORE's binary"}
rollout = {}
cpu = {m: sum(float(x) for l in open(f"{out}/cpu-{m}") for x in l.split()) for m in walls}
print(f"{'':34} {'wall s':>7} {'CPU s':>7} {'rollout s':>9} {'rollout tok':>11} {'rollout tok/s':>13}")
for mode in walls:
    rows = [r for j in range(jobs) for r in [json.loads(l) for l in open(f"{out}/out-{mode}-{j}/metrics.jsonl")][1:]]
    assert len(rows) == jobs * (steps - 1), (mode, len(rows))
    secs, toks = sum(r["time_rollout_s"] for r in rows), sum(r["rollout_tokens"] for r in rows)
    rollout[mode] = secs, toks
    print(f"{label[mode]:34} {walls[mode]:7.1f} {cpu[mode]:7.1f} {secs:9.2f} {toks:11d} {toks / secs:13.0f}")
for mode in ("cotrain", "before"):
    if mode in rollout and mode != "alone":
        a, m = rollout["alone"], rollout[mode]
        print(f"{label[mode]} against (a): {(m[1] / m[0]) / (a[1] / a[0]):.2f}x rollout tokens/s, "
              f"{walls['alone'] / walls[mode]:.2f}x wall, {cpu['alone'] / cpu[mode]:.2f}x CPU s")
if "before" in rollout:
    b, c = rollout["cotrain"], rollout["before"]
    print(f"(b) against (c), batched against one after another: {(b[1] / b[0]) / (c[1] / c[0]):.2f}x rollout tokens/s, "
          f"{walls['before'] / walls['cotrain']:.2f}x wall, {cpu['before'] / cpu['cotrain']:.2f}x CPU s")
PY
echo
BUILD="$BUILD" "$SRC/tests/bench/engine_cc.sh" "$SRC/tests/bench/cotrain/bench_rollouts.c" "$OUT/bench_rollouts"
"$OUT/bench_rollouts" "$OUT/model" "$JOBS" "$PROMPTS" "$GROUP" 32 3
