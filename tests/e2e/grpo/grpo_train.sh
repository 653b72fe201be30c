#!/usr/bin/env bash
# GRPO end to end on the tiny model: it must learn, and resume exactly.
#
# The task: "reply with the word W" for 8 words in 3 phrasings (24 training prompts), graded by a
# string_check grader ({{sample.output_text}} eq {{item.answer}}); validation is a 4th phrasing the
# training never sees. A 2-layer-deep model (4 layers, 3.7M parameters) warm-started with a short SFT
# on the training phrasings gets some answers right (about 15-20% of sampled answers) but not most:
# the regime where GRPO has groups with both outcomes to learn from. Then 30 GRPO steps (8 prompts x 8
# responses, LoRA) with a fixed seed must lift the mean reward of the last five steps well above the
# first five (+0.15 and 1.5x) and the greedy validation reward two answers (of 8) above the warm start's. A run resumed from
# step 20 must give steps 21..30 identical to the run that did not stop. Then dynamic sampling with
# refills and two PPO epochs on a full fine-tune (resumed exactly), kl_coef 0 (no reference pass),
# SIGTERM (a checkpoint, exit 0), and errors (a bad line, a config without a grader).
# One OpenMP thread: fast on a busy 2-core machine, and resume is compared on the same thread count.
set -euo pipefail
: "${WHET_BIN:?}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d /tmp/whet-grpo-e2e.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
py() { python3 - "$@"; }

"$WHET_BIN" model init --preset tiny --out "$work/model" >/dev/null

py "$work" <<'EOF2'
import json, sys
work = sys.argv[1]
words = ["red", "green", "blue", "yellow", "black", "white", "apple", "house"]
train = ["Reply with the word {w}.", "Say {w} and nothing else.", "Answer with one word: {w}."]
valid = ["Write the word {w}."]
def dump(path, tpls, sft):
    with open(path, "w") as f:
        for t in tpls:
            for w in words:
                p = t.format(w=w)
                if sft:
                    line = {"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": w}]}
                else:
                    line = {"messages": [{"role": "user", "content": p}], "answer": w}
                f.write(json.dumps(line) + "\n")
dump(f"{work}/sft.jsonl", train, True)
dump(f"{work}/train.jsonl", train, False)
dump(f"{work}/valid.jsonl", valid, False)
EOF2

# ---- warm start: a short SFT (full fine-tuning)
cat > "$work/sft.json" <<EOF2
{"method": "sft", "model": "$work/model", "training_file": "$work/sft.jsonl", "output_dir": "$work/sft", "seed": 1,
 "lora": null, "max_steps": 20,
 "hyperparameters": {"batch_size": 8, "learning_rate": 0.002, "max_seq_len": 64, "lr_scheduler": "constant"}}
EOF2
"$WHET_BIN" train --config "$work/sft.json" --quiet > /dev/null || fail "SFT warm start"

# The warm start's validation reward, measured apart from the trainer: greedy answers of `whet sample`.
base_valid=$(py "$work" "$WHET_BIN" <<'EOF2'
import json, subprocess, sys
work, whet = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(f"{work}/valid.jsonl")]
right = 0
for r in rows:
    out = subprocess.run([whet, "sample", "--model", f"{work}/sft/final", "--prompt", r["messages"][0]["content"],
                          "--max-tokens", "6", "--temperature", "0"], capture_output=True, text=True, check=True).stdout
    right += out.rstrip("\n") == r["answer"]
print(right / len(rows))
EOF2
)

GRADER='{"type": "string_check", "name": "exact", "input": "{{sample.output_text}}", "reference": "{{item.answer}}", "operation": "eq"}'
grpo_config() { # NAME OUTPUT_DIR EXTRA_FIELDS [HYPERPARAMETERS] [TRAINING_FILE]
  cat > "$work/$1.json" <<EOF2
{"method": "grpo", "model": "$work/sft/final", "training_file": "${5:-$work/train.jsonl}",
 "validation_file": "$work/valid.jsonl", "output_dir": "$work/$2", "seed": 3, "grader": $GRADER,
 "rollout": {"n": 8, "max_tokens": 6, "temperature": 1.0},
 "hyperparameters": ${4:-{\"batch_size\": 8, \"learning_rate\": 0.005, \"max_seq_len\": 64, \"lr_scheduler\": \"constant\"\}}, $3}
EOF2
}

# ---- the learning run: 30 steps, checkpoints every 10, validation every 10
grpo_config learn out '"lora": {"r": 8, "alpha": 16}, "max_steps": 30, "checkpoint_every_steps": 10, "eval_every_steps": 10'
start=$(date +%s)
"$WHET_BIN" train --config "$work/learn.json" > "$work/learn.events" 2> "$work/learn.log" || { cat "$work/learn.log"; fail "GRPO run"; }
echo "GRPO: 30 steps in $(( $(date +%s) - start )) s"
py "$work/out/metrics.jsonl" "$work/learn.events" "$base_valid" <<'EOF2'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base_valid = float(sys.argv[3])
assert [r["step"] for r in rows] == list(range(1, 31)), "steps 1..30, one line each"
fields = ("step", "epoch", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "reward_mean", "reward_std", "pass_rate",
          "kl", "entropy", "clip_frac", "response_length_mean", "rollout_tokens", "rollout_tokens_per_s",
          "time_rollout_s", "time_grading_s", "time_reference_s", "time_update_s")
for r in rows:
    for k in fields:
        assert k in r, f"metrics line lacks {k}: {r}"
    assert r["rollout_tokens"] >= 64 and r["time_rollout_s"] > 0 and r["time_update_s"] > 0 and r["tokens"] > 0, r
    assert 1 <= r["response_length_mean"] <= 6 and r["entropy"] > 0, r
    assert r["clip_frac"] == 0, "one PPO epoch: the ratio is 1, nothing is clipped"
    assert r["reward_mean"] == r["pass_rate"], "string_check: reward 1 exactly when it passes"
# Before the first update the policy is the reference; the two passes batch differently, so another CPU's
# kernels may round them apart by a few ulps.
assert abs(rows[0]["kl"]) < 1e-6 and rows[5]["kl"] > 1e-4, "KL to the reference: 0 before the first update, then positive"
reward = [r["reward_mean"] for r in rows]
first, last = sum(reward[:5]) / 5, sum(reward[-5:]) / 5
curve = [round(sum(reward[i:i + 5]) / 5, 3) for i in range(0, 30, 5)]
valid = [(r["step"], r["valid_reward_mean"]) for r in rows if "valid_reward_mean" in r]
print(f"reward by five steps: {curve}; validation {base_valid:.3f} (warm start) -> {valid}")
assert 0.08 <= first <= 0.6, f"the warm start should get some answers right, not most: first five steps {first:.3f}"
# Seeds 3..7 on the build machine: +0.18 .. +0.30 and 2.0x .. 3.0x (this one: +0.29, 2.9x). The bar sits
# below the worst of them, so another CPU's rounding (another trajectory) does not make it flaky.
assert last >= first + 0.15 and last >= 1.5 * first, f"GRPO did not learn: reward {first:.3f} -> {last:.3f}"
assert [s for s, _ in valid] == [10, 20, 30], valid
assert valid[-1][1] >= base_valid + 0.25, f"validation reward: warm start {base_valid:.3f}, after GRPO {valid}"
events = [json.loads(l) for l in open(sys.argv[2])]
kinds = [e["type"] for e in events]
assert kinds.count("metrics") == 30 and kinds.count("checkpoint") == 2 and kinds[-1] == "final", kinds
data = [e for e in events if e["type"] == "data"]
assert data[0]["examples"] == 24 and data[1]["examples"] == 8, data
print(f"reward {first:.3f} -> {last:.3f}")
EOF2
for f in adapter_config.json adapter_model.safetensors optimizer.safetensors.zst trainer_state.json; do
  [ -s "$work/out/checkpoints/step-20/$f" ] || fail "checkpoints/step-20/$f missing"
done
[ -s "$work/out/final/adapter_model.safetensors" ] || fail "final adapter missing"

# ---- resume from step 20: steps 21..30 identical to the run that did not stop
cp "$work/out/metrics.jsonl" "$work/uninterrupted.jsonl"
grpo_config resume out '"lora": {"r": 8, "alpha": 16}, "max_steps": 30, "checkpoint_every_steps": 10, "eval_every_steps": 10, "resume_from": "'"$work"'/out/checkpoints/step-20"'
"$WHET_BIN" train --config "$work/resume.json" --quiet > /dev/null || fail "resumed run"
py "$work/uninterrupted.jsonl" "$work/out/metrics.jsonl" <<'EOF2'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert [r["step"] for r in b] == list(range(1, 31)), [r["step"] for r in b]
assert a[:20] == b[:20], "the first twenty lines are kept as they were"
for x, y in zip(a[20:], b[20:]):
    for k in x:
        if k.startswith("time_") or k.endswith("_per_s"):
            continue
        assert x[k] == y.get(k), f"step {x['step']}: {k} {x[k]} != {y.get(k)} after resume"
print("resume from step 20: steps 21..30 identical")
EOF2

# ---- dynamic sampling with refills (max_gen_batches 3, the default), two PPO epochs (the clip at
# work), full fine-tuning (a frozen reference copy); resumed from step 2, step 3 is the same
grpo_config dyn out-dyn '"lora": null, "max_steps": 3, "checkpoint_every_steps": 2' \
  '{"batch_size": 4, "learning_rate": 0.0003, "max_seq_len": 64, "ppo_epochs": 2, "dynamic_sampling": true, "loss_agg": "seq-mean-token-mean", "gradient_accumulation_steps": 2}'
"$WHET_BIN" train --config "$work/dyn.json" --quiet > /dev/null || fail "dynamic sampling run"
py "$work/out-dyn/metrics.jsonl" "$work/out-dyn/final/trainer_state.json" <<'EOF2'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 3
used = 0  # prompts of the current epoch sampled so far (24 an epoch, 4 a batch)
for r in rows:
    assert 0 <= r["groups_kept"] <= 4 and 1 <= r["gen_batches"] <= 3, r
    used += 4 * r["gen_batches"]
    epoch_done = used >= 24
    used = 0 if epoch_done else used
    # Refills go on until 4 groups are kept, 3 batches were drawn, or the epoch ends.
    assert r["groups_kept"] == 4 or r["gen_batches"] == 3 or epoch_done, r
    # Every batch drawn is metered: 4 prompts x 8 responses of 1..6 tokens each.
    assert 32 * r["gen_batches"] <= r["rollout_tokens"] <= 6 * 32 * r["gen_batches"], r
    if r["groups_kept"] == 0:
        assert r["tokens"] == 0 and r["loss"] == 0, "a step with no group left trains nothing"
assert any(r["gen_batches"] > 1 for r in rows), "some step kept fewer than 4 groups of its first batch and refilled"
assert any(r["clip_frac"] > 0 for r in rows if r["groups_kept"]), "the second PPO epoch sees ratios != 1"
state = json.load(open(sys.argv[2]))
assert state["epoch"] * 24 + state["position"] == 4 * sum(r["gen_batches"] for r in rows), (state, rows)
print("dynamic sampling: groups kept", [r["groups_kept"] for r in rows], "gen batches", [r["gen_batches"] for r in rows],
      "clip_frac", [r["clip_frac"] for r in rows], "cursor", state["epoch"], state["position"])
EOF2
cp "$work/out-dyn/metrics.jsonl" "$work/dyn-uninterrupted.jsonl"
grpo_config dynresume out-dyn '"lora": null, "max_steps": 3, "checkpoint_every_steps": 2, "resume_from": "'"$work"'/out-dyn/checkpoints/step-2"' \
  '{"batch_size": 4, "learning_rate": 0.0003, "max_seq_len": 64, "ppo_epochs": 2, "dynamic_sampling": true, "loss_agg": "seq-mean-token-mean", "gradient_accumulation_steps": 2}'
"$WHET_BIN" train --config "$work/dynresume.json" --quiet > /dev/null || fail "dynamic sampling: resumed run"
py "$work/dyn-uninterrupted.jsonl" "$work/out-dyn/metrics.jsonl" <<'EOF2'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert [r["step"] for r in b] == [1, 2, 3], [r["step"] for r in b]
for k in a[2]:
    if not (k.startswith("time_") or k.endswith("_per_s")):
        assert a[2][k] == b[2].get(k), f"dynamic sampling, step 3: {k} {a[2][k]} != {b[2].get(k)} after resume"
print("dynamic sampling: resumed from step 2, step 3 identical")
EOF2
[ -s "$work/out-dyn/final/model.safetensors" ] || fail "full fine-tune: final model missing"
# kl_coef 0: no reference pass (and no frozen copy of this full fine-tune); the KL is not measured.
grpo_config nokl out-nokl '"lora": null, "max_steps": 2' \
  '{"batch_size": 4, "learning_rate": 0.0003, "max_seq_len": 64, "kl_coef": 0}'
"$WHET_BIN" train --config "$work/nokl.json" --quiet > /dev/null || fail "kl_coef 0 run"
py "$work/out-nokl/metrics.jsonl" <<'EOF2'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == [1, 2], rows
for r in rows:
    assert "kl" in r and r["kl"] is None, f"kl_coef 0: kl is null (not measured): {r}"
    assert r["time_reference_s"] == 0 and r["tokens"] > 0 and r["time_update_s"] > 0, r
assert any(r["grad_norm"] > 0 for r in rows), rows
print("kl_coef 0: no reference pass, kl null, update", [r["time_update_s"] for r in rows])
EOF2
# A grader nothing passes: every group is all zeros, dynamic sampling drops them all, refills up to
# max_gen_batches 2 find nothing either, and each step trains nothing but still counts (its prompts
# are used, the metrics line says so).
grpo_config skip out-skip '"lora": {"r": 8, "alpha": 16}, "max_steps": 2' \
  '{"batch_size": 4, "learning_rate": 0.005, "max_seq_len": 64, "dynamic_sampling": true, "max_gen_batches": 2}'
sed -i 's/{{item.answer}}/no such answer/' "$work/skip.json"
"$WHET_BIN" train --config "$work/skip.json" --quiet > /dev/null || fail "all-skipped run"
py "$work/out-skip/metrics.jsonl" "$work/out-skip/final/trainer_state.json" <<'EOF2'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == [1, 2], rows
for r in rows:
    assert r["groups_kept"] == 0 and r["reward_mean"] == 0 and r["tokens"] == 0 and r["grad_norm"] == 0, r
    assert r["gen_batches"] == 2 and r["rollout_tokens"] >= 2 * 32 and r["time_update_s"] == 0, r
state = json.load(open(sys.argv[2]))
assert state["step"] == 2 and state["position"] == 16, state
print("dynamic sampling with nothing left: 2 steps of 2 batches counted, nothing trained, cursor at prompt 16")
EOF2

# ---- SIGTERM: the step under way finishes, a checkpoint is written, exit 0
grpo_config term out-term '"lora": {"r": 8, "alpha": 16}, "max_steps": 100000'
"$WHET_BIN" train --config "$work/term.json" --quiet > "$work/term.events" &
pid=$!
for _ in $(seq 600); do
  [ "$({ wc -l < "$work/out-term/metrics.jsonl"; } 2>/dev/null || echo 0)" -ge 2 ] && break
  sleep 0.1
done
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
[ "$rc" = 0 ] || fail "SIGTERM: exit status $rc"
last=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["step"])' "$work/out-term/metrics.jsonl")
[ -s "$work/out-term/checkpoints/step-$last/optimizer.safetensors.zst" ] || fail "SIGTERM: no checkpoint at step $last"
grep -q '"position":' "$work/out-term/checkpoints/step-$last/trainer_state.json" || fail "SIGTERM: no data cursor in the state"
echo "SIGTERM: checkpoint at step $last, exit 0"

# ---- errors: a bad training line (exit 1, file and line), no grader (exit 2, the field)
{ head -2 "$work/train.jsonl"; echo '{"messages": [{"role": "assistant", "content": "x"}]}'; } > "$work/bad.jsonl"
grpo_config badline out-bad '"max_steps": 1' "" "$work/bad.jsonl"
rc=0; "$WHET_BIN" train --config "$work/badline.json" 2> "$work/badline.err" || rc=$?
[ "$rc" = 1 ] && grep -q 'bad.jsonl: line 3: messages\[0\].role' "$work/badline.err" || fail "bad line: rc $rc, $(cat "$work/badline.err")"
py "$work/badline.json" "$work/train.jsonl" > "$work/nograder.json" <<'EOF2'
import json, sys
c = json.load(open(sys.argv[1]))
del c["grader"]
c["training_file"] = sys.argv[2]
print(json.dumps(c))
EOF2
rc=0; "$WHET_BIN" train --config "$work/nograder.json" 2> "$work/nograder.err" || rc=$?
[ "$rc" = 2 ] && grep -q 'grader: required' "$work/nograder.err" || fail "no grader: rc $rc, $(cat "$work/nograder.err")"
echo "ok"
