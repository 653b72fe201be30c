#!/usr/bin/env bash
# End to end DPO on the tiny model (`whet model init --preset tiny`) with tests/fixtures/dpo (polite
# answers preferred over rude ones): 30 LoRA steps in which preference accuracy rises and the reward
# margin grows; step 1 has a margin of 0 up to rounding (B starts at zero, so the policy is the reference,
# but the reference and policy passes may round differently on another CPU's kernels);
# the metrics and events carry the DPO fields; resume from step 10 gives identical steps 11..30; full
# fine-tuning DPO (with a frozen reference copy) trains too; a bad line is refused with its file,
# line and field. One OpenMP thread, as the SFT end-to-end test does (resume is exact per thread count).
set -euo pipefail
: "${WHET_BIN:?}" "${WHET_FIXTURES:?}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d /tmp/whet-dpo-e2e.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
py() { /usr/bin/python3 - "$@"; }

"$WHET_BIN" model init --preset tiny --out "$work/model" >/dev/null

HP='{"batch_size": 4, "learning_rate": 0.003, "max_seq_len": 128, "warmup_steps": 2, "beta": 0.1}'
config() { # config NAME OUTPUT_DIR EXTRA_FIELDS [HYPERPARAMETERS] [TRAINING_FILE]
  cat > "$work/$1.json" <<JSON
{"method": "dpo", "model": "$work/model", "training_file": "${5:-$WHET_FIXTURES/dpo/train.jsonl}",
 "validation_file": "$WHET_FIXTURES/dpo/valid.jsonl", "output_dir": "$work/$2", "seed": 1,
 "hyperparameters": ${4:-$HP}, $3}
JSON
}

# ---- LoRA: 30 steps, checkpoints and validation every 10
config lora out-lora '"lora": {"r": 8, "alpha": 16}, "max_steps": 30, "checkpoint_every_steps": 10, "eval_every_steps": 10'
"$WHET_BIN" train --config "$work/lora.json" > "$work/lora.events" 2> "$work/lora.log" || { cat "$work/lora.log"; fail "LoRA DPO run"; }
py "$work/out-lora/metrics.jsonl" "$work/lora.events" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == list(range(1, 31)), "steps 1..30, one line each"
for r in rows:
    for k in ("loss", "lr", "grad_norm", "tokens", "tokens_per_s", "reward_margin", "preference_accuracy",
              "chosen_logps", "rejected_logps"):
        assert k in r, f"metrics line lacks {k}: {r}"
    assert r["chosen_logps"] < 0 and r["rejected_logps"] < 0
# Step 1: the adapter's B is zero, so policy == reference: z = 0 for every pair, loss = ln 2 (up to the
# rounding of two passes that another CPU's BLAS kernels may order differently).
assert abs(rows[0]["reward_margin"]) < 1e-5 and abs(rows[0]["loss"] - math.log(2)) < 1e-6, rows[0]
def mean(k, part): return sum(r[k] for r in part) / len(part)
early, late = rows[1:6], rows[-5:]
assert mean("preference_accuracy", late) >= 0.9 and mean("preference_accuracy", late) > mean("preference_accuracy", early), \
    (mean("preference_accuracy", early), mean("preference_accuracy", late))
assert mean("reward_margin", late) > mean("reward_margin", early) + 1.0, (mean("reward_margin", early), mean("reward_margin", late))
assert mean("loss", late) < 0.5 * mean("loss", early), (mean("loss", early), mean("loss", late))
valid = [r for r in rows if "valid_loss" in r]
assert [r["step"] for r in valid] == [10, 20, 30], valid
assert valid[-1]["valid_loss"] < valid[0]["valid_loss"] < math.log(2), [r["valid_loss"] for r in valid]
assert valid[-1]["valid_preference_accuracy"] >= 0.8 and valid[-1]["valid_reward_margin"] > valid[0]["valid_reward_margin"]
events = [json.loads(l) for l in open(sys.argv[2])]
kinds = [e["type"] for e in events]
assert kinds.count("metrics") == 30 and kinds.count("checkpoint") == 2 and kinds[-1] == "final", kinds
assert [e for e in events if e["type"] == "metrics"][4]["reward_margin"] == rows[4]["reward_margin"]
data = [e for e in events if e["type"] == "data"]
assert data[0]["examples"] == 50 and data[1]["examples"] == 10 and data[0]["truncated_examples"] == 0, data
print(f"LoRA DPO: loss {mean('loss', early):.3f} -> {mean('loss', late):.3f}, margin {mean('reward_margin', early):.3f} "
      f"-> {mean('reward_margin', late):.3f}, accuracy {mean('preference_accuracy', early):.2f} -> "
      f"{mean('preference_accuracy', late):.2f}, valid loss {valid[0]['valid_loss']:.3f} -> {valid[-1]['valid_loss']:.3f}")
PY
for f in adapter_config.json adapter_model.safetensors optimizer.safetensors.zst trainer_state.json; do
  [ -s "$work/out-lora/checkpoints/step-10/$f" ] || fail "checkpoints/step-10/$f missing"
done
grep -q '"method": "dpo"' "$work/out-lora/checkpoints/step-10/trainer_state.json" || fail "trainer_state.json names the method"
[ -s "$work/out-lora/final/adapter_model.safetensors" ] || fail "final adapter missing"

# ---- resume from step 10 into the same output dir: steps 11..30 identical to the run that did not stop
cp "$work/out-lora/metrics.jsonl" "$work/uninterrupted.jsonl"
config resume out-lora '"lora": {"r": 8, "alpha": 16}, "max_steps": 30, "checkpoint_every_steps": 10, "eval_every_steps": 10, "resume_from": "'"$work"'/out-lora/checkpoints/step-10"'
"$WHET_BIN" train --config "$work/resume.json" --quiet > /dev/null || fail "resumed DPO run"
py "$work/uninterrupted.jsonl" "$work/out-lora/metrics.jsonl" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert [r["step"] for r in b] == list(range(1, 31)), [r["step"] for r in b]
for x, y in zip(a[10:], b[10:]):
    for k in x:
        if k != "tokens_per_s":
            assert x[k] == y.get(k), f"step {x['step']}: {k} {x[k]} != {y.get(k)} after resume"
assert a[:10] == b[:10]
print("DPO resume from step 10: steps 11..30 identical")
PY

# ---- a DPO checkpoint does not resume an SFT run (its data cursor counts other rows)
py "$work/resume.json" "$work/resume-sft.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["method"] = "sft"
c["training_file"], c["validation_file"] = c["training_file"].replace("/dpo/", "/sft/"), None
del c["hyperparameters"]["beta"]
json.dump(c, open(sys.argv[2], "w"))
PY
if "$WHET_BIN" train --config "$work/resume-sft.json" --quiet > /dev/null 2> "$work/resume-sft.log"; then fail "an SFT run resumed a DPO checkpoint"; fi
grep -q "written by a dpo run, the config asks for sft" "$work/resume-sft.log" || { cat "$work/resume-sft.log"; fail "method mismatch on resume"; }

# ---- full fine-tuning DPO: the reference is a frozen copy of the base
config full out-full '"lora": null, "max_steps": 6' '{"batch_size": 8, "learning_rate": 0.0003, "max_seq_len": 128, "beta": 0.1, "lr_scheduler": "constant"}'
"$WHET_BIN" train --config "$work/full.json" --quiet > /dev/null || fail "full fine-tuning DPO run"
py "$work/out-full/metrics.jsonl" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 6 and abs(rows[0]["loss"] - math.log(2)) < 1e-6 and abs(rows[0]["reward_margin"]) < 1e-5, rows[0]
assert rows[-1]["reward_margin"] > 0.1 and rows[-1]["loss"] < rows[0]["loss"], rows[-1]
print(f"full fine-tuning DPO: loss {rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f}, margin -> {rows[-1]['reward_margin']:.3f}")
PY
[ -s "$work/out-full/final/model.safetensors" ] || fail "full fine-tune: final model missing"

# ---- a bad line names the file, the line and the field
head -3 "$WHET_FIXTURES/dpo/train.jsonl" > "$work/bad.jsonl"
echo '{"input": {"messages": [{"role": "user", "content": "Hi"}]}, "preferred_output": [{"role": "user", "content": "x"}], "non_preferred_output": [{"role": "assistant", "content": "y"}]}' >> "$work/bad.jsonl"
config bad out-bad '"lora": {"r": 8, "alpha": 16}, "max_steps": 1' "$HP" "$work/bad.jsonl"
if "$WHET_BIN" train --config "$work/bad.json" > /dev/null 2> "$work/bad.log"; then fail "a bad DPO line was accepted"; fi
grep -q "bad.jsonl: line 4: preferred_output\[0\].role: must be \"assistant\"" "$work/bad.log" || { cat "$work/bad.log"; fail "error names file, line and field"; }
echo "ok"
