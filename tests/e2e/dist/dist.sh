#!/usr/bin/env bash
# Distributed training with CPU ranks on this machine, as the runtime starts a gang: rank 0 listens on
# port 0 and says where in its "rendezvous" event, the other ranks are then started with that address.
#   - N ranks x the global batch = 1 process x the same batch, step for step (<= 1e-5 relative; the
#     sums run in another order), for SFT LoRA (data parallel, 2 and 3 ranks; the gradient all-reduced
#     in buckets during the backward pass), SFT full with fewer rows than ranks, SFT full and DPO LoRA
#     (ZeRO-1, 3 ranks), SFT, DPO and GRPO, full and LoRA, under ZeRO-3 (3 ranks; SFT full also with fewer
#     rows than ranks; a full fine-tune's frozen reference sharded with the policy), GRPO LoRA (3
#     ranks sharing 5 prompts, a reference pass, dynamic sampling with refills); only rank 0 writes
#     metrics, events and checkpoints;
#   - a gang of one rank (a rendezvous given) runs the gang's code path alone with the same losses;
#   - a ZeRO-1 checkpoint of 3 ranks resumes on 1 process and on 2 ranks, and a ZeRO-3 one on 2 ranks of
#     ZeRO-3, repeating the uninterrupted run;
#   - a rank of another generation is refused; SIGKILL of a rank fails the others quickly, naming it;
#   - SIGTERM to one rank stops the whole gang at the same step, rank 0 writing the checkpoint.
set -euo pipefail
: "${WHET_BIN:?}" "${WHET_FIXTURES:?}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d /tmp/whet-dist-e2e.XXXXXX)
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$WHET_BIN" model init --preset tiny --out "$work/model" >/dev/null
# GRPO's prompts: the tiny model's answers contain an "o" about three times in four, so groups mix
# rewards 0 and 1 and the advantages are not all zero.
mkdir -p "$work/grpo"
python3 - "$work/grpo" <<'PY'
import json, sys
words = ["red", "green", "blue", "yellow", "black", "white", "apple", "house"]
for name in ("train", "valid"):
    with open(f"{sys.argv[1]}/{name}.jsonl", "w") as f:
        for t in ["Reply with the word {w}.", "Say {w} and nothing else."]:
            for w in words:
                f.write(json.dumps({"messages": [{"role": "user", "content": t.format(w=w)}], "answer": "o"}) + "\n")
PY
hparams_of() {
  if [ "$1" = grpo ]; then
    echo '{"batch_size": 5, "learning_rate": 0.005, "max_seq_len": 64, "kl_coef": 0.05, "dynamic_sampling": true}'
  else
    echo '{"batch_size": 8, "learning_rate": 0.002, "max_seq_len": 128, "warmup_steps": 2}'
  fi
}
data_dir() { if [ "$1" = grpo ]; then echo "$work/grpo"; else echo "$WHET_FIXTURES/$1"; fi; }

SHORT='"max_steps": 6, "eval_every_steps": 3, "checkpoint_every_steps": 3'
LONG='"max_steps": 100000, "checkpoint_every_steps": 0, "eval_every_steps": 0'
steps=$SHORT
config() { # config FILE METHOD OUTPUT_DIR EXTRA_FIELDS (the run's length: $steps)
  cat > "$1" <<JSON
{"method": "$2", "model": "$work/model", "training_file": "$(data_dir "$2")/train.jsonl",
 "validation_file": "$(data_dir "$2")/valid.jsonl", "output_dir": "$3", "seed": 1, $steps,
 "hyperparameters": ${HP:-$(hparams_of "$2")} $4}
JSON
}

# The address in rank 0's rendezvous event, once it is there.
rendezvous_of() {
  for _ in $(seq 300); do
    addr=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e["type"] == "rendezvous": print(e["address"]); break' "$1" 2>/dev/null || true)
    [ -n "$addr" ] && { echo "$addr"; return; }
    sleep 0.1
  done
  echo "FAIL: rank 0 sent no rendezvous event: $(cat "${1%.events}.log")" >&2
  exit 1
}

# start_gang NAME METHOD WORLD EXTRA_FIELDS [DIST_EXTRA]: starts a gang of WORLD ranks in the background,
# rank r in $work/NAME-r (its pid in pids[r]); $addr is rank 0's rendezvous.
start_gang() {
  local name=$1 method=$2 world=$3 extra=$4 dist=${5:-} r
  config "$work/$name-0.json" "$method" "$work/$name-0" "$extra, \"distributed\": {\"world_size\": $world, \"rank\": 0, \"rendezvous\": \"127.0.0.1:0\" $dist}"
  "$WHET_BIN" train --config "$work/$name-0.json" > "$work/$name-0.events" 2> "$work/$name-0.log" &
  pids=($!)
  addr=$(rendezvous_of "$work/$name-0.events")
  for r in $(seq 1 $((world - 1))); do
    config "$work/$name-$r.json" "$method" "$work/$name-$r" "$extra, \"distributed\": {\"world_size\": $world, \"rank\": $r, \"rendezvous\": \"$addr\" $dist}"
    "$WHET_BIN" train --config "$work/$name-$r.json" > "$work/$name-$r.events" 2> "$work/$name-$r.log" &
    pids+=($!)
  done
}

# gang NAME METHOD WORLD EXTRA_FIELDS [DIST_EXTRA]: start_gang, then waits for every rank; fails unless
# each exits 0.
gang() {
  local name=$1 world=$3 r
  start_gang "$@"
  for r in $(seq 0 $((world - 1))); do
    wait "${pids[$r]}" || { cat "$work/$name-$r.log" >&2; fail "$name: rank $r failed"; }
  done
}

# same_losses SINGLE_METRICS GANG_METRICS: step for step within 1e-5 relative.
same_losses() {
  python3 - "$1" "$2" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert [x["step"] for x in a] == [x["step"] for x in b], (len(a), len(b))
worst = 0.0
for x, y in zip(a, b):
    assert x["tokens"] == y["tokens"], ("every rank's tokens summed", x["tokens"], y["tokens"])
    for k in ("loss", "grad_norm", "valid_loss", "reward_mean", "kl", "valid_reward_mean", "groups_kept"):
        if x.get(k) is not None:
            assert abs(x[k] - y[k]) <= 1e-5 * abs(x[k]) + 1e-9, f"step {x['step']} {k}: {x[k]} alone, {y[k]} in the gang"
            worst = max(worst, abs(x[k] - y[k]) / max(abs(x[k]), 1e-9))
print(f"{sys.argv[2].split('/')[-2]}: {len(a)} steps, worst relative difference {worst:.2e}")
PY
}

LORA=', "lora": {"r": 8, "alpha": 16}'
FULL=', "lora": null'
GRPO_FIELDS=', "grader": {"type": "string_check", "name": "has_o", "input": "{{sample.output_text}}",
 "reference": "{{item.answer}}", "operation": "like"}, "rollout": {"n": 4, "max_tokens": 6, "temperature": 1.0},
 "eval_samples": 5'
GRPO="$LORA$GRPO_FIELDS"
GRPO_FULL="$FULL$GRPO_FIELDS"

# ---- the references: one process each
for run in "sft lora" "sft full" "dpo lora" "dpo full" "grpo lora" "grpo full"; do
  set -- $run
  extra=$([ "$2" = full ] && echo "$FULL" || echo "$LORA")
  [ "$1" = grpo ] && extra=$GRPO
  [ "$1 $2" = "grpo full" ] && extra=$GRPO_FULL
  config "$work/single-$1-$2.json" "$1" "$work/single-$1-$2" "$extra"
  "$WHET_BIN" train --config "$work/single-$1-$2.json" --quiet > /dev/null || fail "single $1 $2"
done

# ---- data parallel and ZeRO-1 against them
gang dp2 sft 2 "$LORA"
same_losses "$work/single-sft-lora/metrics.jsonl" "$work/dp2-0/metrics.jsonl"
gang dp3 sft 3 "$LORA"
same_losses "$work/single-sft-lora/metrics.jsonl" "$work/dp3-0/metrics.jsonl"
# a gang of one (a rendezvous given): the gang's code path alone, as the GPU check runs NCCL's
config "$work/one.json" sft "$work/one" "$LORA, \"distributed\": {\"world_size\": 1, \"rank\": 0, \"rendezvous\": \"127.0.0.1:0\"}"
"$WHET_BIN" train --config "$work/one.json" > /dev/null 2> "$work/one.log" || fail "gang of one: $(tail -3 "$work/one.log")"
same_losses "$work/single-sft-lora/metrics.jsonl" "$work/one/metrics.jsonl"
grep -q "rank 0 of 1 joined the gang in .* (gloo)" "$work/one.log" || fail "the gang of one did not join: $(head -5 "$work/one.log")"
# batch_size 2 packs into fewer rows than ranks: a rank with no rows still takes part in every bucket
HP='{"batch_size": 2, "learning_rate": 0.002, "max_seq_len": 128}'
config "$work/single-small.json" sft "$work/single-small" "$FULL"
"$WHET_BIN" train --config "$work/single-small.json" --quiet > /dev/null || fail "single small"
gang small3 sft 3 "$FULL"
same_losses "$work/single-small/metrics.jsonl" "$work/small3-0/metrics.jsonl"
# ZeRO-3 with a rank that has no rows: its idle passes take part in every gather and reduce-scatter
gang small3z sft 3 "$FULL" ', "zero": 3'
same_losses "$work/single-small/metrics.jsonl" "$work/small3z-0/metrics.jsonl"
unset HP
gang z3x3 sft 3 "$FULL" ', "zero": 3'
same_losses "$work/single-sft-full/metrics.jsonl" "$work/z3x3-0/metrics.jsonl"
grep -q "ZeRO-3: parameters, gradients and optimizer state sharded" "$work/z3x3-1.log" || fail "rank 1 did not shard its parameters"
gang zero3 sft 3 "$FULL" ', "zero": 1'
same_losses "$work/single-sft-full/metrics.jsonl" "$work/zero3-0/metrics.jsonl"
gang dpo3 dpo 3 "$LORA" ', "zero": 1'
same_losses "$work/single-dpo-lora/metrics.jsonl" "$work/dpo3-0/metrics.jsonl"
gang dpo3z dpo 3 "$FULL" ', "zero": 3'
same_losses "$work/single-dpo-full/metrics.jsonl" "$work/dpo3z-0/metrics.jsonl"
grep -q "reference model: sharded as the policy" "$work/dpo3z-2.log" || fail "rank 2 did not shard DPO's reference"
# LoRA under ZeRO-3: the frozen base sharded (DPO's reference passes, the adapter off, gather it too)
gang lora3z sft 3 "$LORA" ', "zero": 3'
same_losses "$work/single-sft-lora/metrics.jsonl" "$work/lora3z-0/metrics.jsonl"
gang dpolora3z dpo 3 "$LORA" ', "zero": 3'
same_losses "$work/single-dpo-lora/metrics.jsonl" "$work/dpolora3z-0/metrics.jsonl"
gang grpo3 grpo 3 "$GRPO"
same_losses "$work/single-grpo-lora/metrics.jsonl" "$work/grpo3-0/metrics.jsonl"
# GRPO under ZeRO-3: rollouts hold the whole model gathered; reference and update passes kept in step
gang grpo3z grpo 3 "$GRPO" ', "zero": 3'
same_losses "$work/single-grpo-lora/metrics.jsonl" "$work/grpo3z-0/metrics.jsonl"
gang grpofull3z grpo 3 "$GRPO_FULL" ', "zero": 3'
same_losses "$work/single-grpo-full/metrics.jsonl" "$work/grpofull3z-0/metrics.jsonl"
grep -q "reference model: sharded as the policy" "$work/grpofull3z-1.log" || fail "rank 1 did not shard GRPO's reference"
python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; assert any(0 < x["reward_mean"] < 1 and x["groups_kept"] > 0 for x in r), r' \
  "$work/single-grpo-lora/metrics.jsonl" || fail "GRPO: no step with mixed rewards to compare"

# Rank 0 alone speaks: metrics, checkpoints and events; the others write none of them.
for r in 1 2; do
  [ ! -e "$work/zero3-$r/metrics.jsonl" ] && [ -z "$(ls "$work/zero3-$r/checkpoints")" ] && [ ! -e "$work/zero3-$r/final" ] \
    || fail "rank $r wrote files of its own"
  [ ! -s "$work/zero3-$r.events" ] || fail "rank $r sent events: $(head -2 "$work/zero3-$r.events")"
done
[ -s "$work/zero3-0/checkpoints/step-3/optimizer.safetensors.zst" ] && [ -s "$work/zero3-0/final/model.safetensors" ] \
  || fail "rank 0 wrote no checkpoint or final model"
grep -q '"type":"final"' "$work/zero3-0.events" || fail "rank 0 sent no final event"

# ---- the ZeRO-1 checkpoint of 3 ranks resumes alone and on 2 ranks: steps 4..6 as uninterrupted
ck="$work/zero3-0/checkpoints/step-3"
config "$work/resume1.json" sft "$work/resume1" "$FULL, \"resume_from\": \"$ck\""
"$WHET_BIN" train --config "$work/resume1.json" --quiet > /dev/null || fail "resume of a 3-rank checkpoint alone"
gang resume2 sft 2 "$FULL, \"resume_from\": \"$ck\"" ', "zero": 1'
# and ZeRO-3's consolidated checkpoint of 3 ranks on 2 ranks of ZeRO-3 (re-sharded on load)
gang resume2z sft 2 "$FULL, \"resume_from\": \"$work/z3x3-0/checkpoints/step-3\"" ', "zero": 3'
for d in resume1 resume2-0 resume2z-0; do
  python3 - "$work/single-sft-full/metrics.jsonl" "$work/$d/metrics.jsonl" <<'PY'
import json, sys
a = {x["step"]: x for x in map(json.loads, open(sys.argv[1]))}
b = [json.loads(l) for l in open(sys.argv[2])]
assert [x["step"] for x in b] == [4, 5, 6], [x["step"] for x in b]
for y in b:
    x = a[y["step"]]
    assert abs(x["loss"] - y["loss"]) <= 1e-5 * abs(x["loss"]), (y["step"], x["loss"], y["loss"])
print(f"{sys.argv[2].split('/')[-2]}: resumed steps 4..6 as the uninterrupted run")
PY
done

# ---- a rank of another generation is refused by the rendezvous
config "$work/gen-0.json" sft "$work/gen-0" "$LORA, \"distributed\": {\"world_size\": 2, \"rank\": 0, \"rendezvous\": \"127.0.0.1:0\", \"generation\": 7, \"timeout_s\": 5}"
"$WHET_BIN" train --config "$work/gen-0.json" > "$work/gen-0.events" 2> "$work/gen-0.log" &
pids=($!)
addr=$(rendezvous_of "$work/gen-0.events")
config "$work/gen-1.json" sft "$work/gen-1" "$LORA, \"distributed\": {\"world_size\": 2, \"rank\": 1, \"rendezvous\": \"$addr\", \"generation\": 6, \"timeout_s\": 5}"
if "$WHET_BIN" train --config "$work/gen-1.json" > /dev/null 2> "$work/gen-1.log"; then fail "a rank of generation 6 joined generation 7"; fi
grep -q "rank 1 is of generation 6; this gang is generation 7" "$work/gen-1.log" || fail "stale rank: $(cat "$work/gen-1.log")"
if wait "${pids[0]}"; then fail "rank 0 trained without its peer"; fi
grep -q "did not all arrive in time\|cannot join the gang" "$work/gen-0.log" || fail "rank 0 alone: $(cat "$work/gen-0.log")"
echo "a stale generation is refused; rank 0 gives up at its deadline"

# ---- SIGKILL of rank 1 mid-run: rank 0 fails at once, saying which rendezvous and rank
steps=$LONG
start_gang kill sft 2 "$LORA" ', "timeout_s": 60'
for _ in $(seq 600); do [ "$(grep -c '"type":"metrics"' "$work/kill-0.events")" -ge 3 ] && break; sleep 0.1; done
kill -9 "${pids[1]}"
start=$(date +%s)
if wait "${pids[0]}"; then fail "rank 0 went on without rank 1"; fi
elapsed=$(( $(date +%s) - start ))
[ "$elapsed" -lt 30 ] || fail "rank 0 took ${elapsed}s to notice (timeout_s is 60: it must see the closed connection)"
grep -q "distributed: rank 0 of 2 (rendezvous $addr, gloo)" "$work/kill-0.log" || fail "lost rank: $(tail -3 "$work/kill-0.log")"
echo "a killed rank fails its peer in ${elapsed}s: $(grep -o 'distributed: rank 0 of 2.*' "$work/kill-0.log" | head -c 160)"

# ---- SIGTERM to rank 1 only: both stop after the same step, rank 0 checkpoints it, both exit 0
start_gang term sft 2 "$LORA"
for _ in $(seq 600); do [ "$(grep -c '"type":"metrics"' "$work/term-0.events")" -ge 3 ] && break; sleep 0.1; done
kill -TERM "${pids[1]}"
wait "${pids[1]}" || fail "SIGTERM: rank 1 exit status $?"
wait "${pids[0]}" || fail "SIGTERM: rank 0 exit status $?"
last=$(grep '"type":"metrics"' "$work/term-0.events" | tail -1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["step"])')
[ -s "$work/term-0/checkpoints/step-$last/optimizer.safetensors.zst" ] || fail "SIGTERM: no checkpoint at step $last"
grep -q "stopped on request" "$work/term-1.log" && grep -q "stopped on request" "$work/term-0.log" || fail "SIGTERM: not both stopped"
echo "SIGTERM to rank 1: the gang stopped at step $last, rank 0 checkpointed it"
echo "dist: all passed"
