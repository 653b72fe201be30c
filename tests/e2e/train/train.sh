#!/usr/bin/env bash
# End to end on the tiny model: `whet model init`, then `whet train` with LoRA and full fine-tuning on
# tests/fixtures/sft (the loss must fall), exact resume (the same losses step for step as the run that
# did not stop), SIGTERM (a checkpoint, exit 0, quickly), `whet score` (the adapter lowers the loss)
# and `whet sample` (the same seed gives the same text). One OpenMP thread: fast on a busy 2-core
# machine, and resume is compared on the same thread count, as the trainer promises.
set -euo pipefail
: "${WHET_BIN:?}" "${WHET_FIXTURES:?}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d /tmp/whet-trainer-e2e.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
py() { python3 - "$@"; }

"$WHET_BIN" model init --preset tiny --out "$work/model" >/dev/null

HP='{"batch_size": 4, "learning_rate": 0.003, "max_seq_len": 128, "warmup_steps": 2}'
config() { # config NAME OUTPUT_DIR EXTRA_FIELDS [HYPERPARAMETERS] [TRAINING_FILE]
  cat > "$work/$1.json" <<EOF
{"method": "sft", "model": "$work/model", "training_file": "${5:-$WHET_FIXTURES/sft/train.jsonl}",
 "validation_file": "$WHET_FIXTURES/sft/valid.jsonl", "output_dir": "$work/$2", "seed": 1,
 "hyperparameters": ${4:-$HP}, $3}
EOF
}

# ---- LoRA: 30 steps, checkpoints every 10, validation every 10
config lora out-lora '"lora": {"r": 8, "alpha": 16}, "max_steps": 30, "checkpoint_every_steps": 10, "eval_every_steps": 10'
"$WHET_BIN" train --config "$work/lora.json" > "$work/lora.events" 2> "$work/lora.log" || { cat "$work/lora.log"; fail "LoRA run"; }
py "$work/out-lora/metrics.jsonl" "$work/lora.events" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == list(range(1, 31)), "steps 1..30, one line each"
for r in rows:
    for k in ("step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "train_mean_token_accuracy"):
        assert k in r, f"metrics line lacks {k}: {r}"
first = sum(r["loss"] for r in rows[:5]) / 5
last = sum(r["loss"] for r in rows[-5:]) / 5
assert last < 0.85 * first, f"LoRA loss did not fall: first five {first:.3f}, last five {last:.3f}"
valid = [r["valid_loss"] for r in rows if "valid_loss" in r]
assert len(valid) == 3 and valid[-1] < valid[0], f"validation loss every 10 steps, falling: {valid}"
assert rows[0]["lr"] == 0 and abs(rows[2]["lr"] - 0.003) < 1e-9, "warmup from 0 over 2 steps"
events = [json.loads(l) for l in open(sys.argv[2])]
kinds = [e["type"] for e in events]
assert kinds.count("metrics") == 30 and kinds.count("checkpoint") == 2 and kinds[-1] == "final", kinds
data = [e for e in events if e["type"] == "data"]
assert data[0]["examples"] == 96 and data[0]["truncated_examples"] == 0
assert data[0]["steps_per_epoch"] == 24 and data[0]["total_steps"] == 30, data[0]  # 96 examples / batch 4; max_steps
print(f"LoRA loss {first:.3f} -> {last:.3f}, valid {valid[0]:.3f} -> {valid[-1]:.3f}")
EOF
for d in checkpoints/step-10 checkpoints/step-20; do
  for f in adapter_config.json adapter_model.safetensors optimizer.safetensors.zst trainer_state.json; do
    [ -s "$work/out-lora/$d/$f" ] || fail "$d/$f missing"
  done
done
for f in adapter_config.json adapter_model.safetensors trainer_state.json; do
  [ -s "$work/out-lora/final/$f" ] || fail "final/$f missing"
done
grep -aq 'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight' "$work/out-lora/final/adapter_model.safetensors" \
  || fail "adapter tensors are not named as PEFT names them"
! ls -d "$work"/out-lora/*.tmp-* "$work"/out-lora/checkpoints/*.tmp-* 2>/dev/null || fail "temporary dirs left behind"

# ---- a checkpoint whose compressed optimizer state was cut short is refused, naming the file
cp -r "$work/out-lora/checkpoints/step-10" "$work/cut-step-10"
zst="$work/cut-step-10/optimizer.safetensors.zst"
head -c $(( $(stat -c %s "$zst") / 2 )) "$zst" > "$zst.half" && mv "$zst.half" "$zst"
config cut out-cut '"lora": {"r": 8, "alpha": 16}, "max_steps": 30, "resume_from": "'"$work"'/cut-step-10"'
if "$WHET_BIN" train --config "$work/cut.json" --quiet > /dev/null 2> "$work/cut.err"; then fail "a cut optimizer state resumed"; fi
grep -q "resume_from: .*optimizer.safetensors.zst: zstd: truncated frame" "$work/cut.err" || fail "cut state: $(cat "$work/cut.err")"

# ---- resume from step 10 into the same output dir: metrics.jsonl is cut back to step 10, then steps
# 11..30 come out identical to the uninterrupted run
cp "$work/out-lora/metrics.jsonl" "$work/uninterrupted.jsonl"
config resume out-lora '"lora": {"r": 8, "alpha": 16}, "max_steps": 30, "checkpoint_every_steps": 10, "eval_every_steps": 10, "resume_from": "'"$work"'/out-lora/checkpoints/step-10"'
"$WHET_BIN" train --config "$work/resume.json" --quiet > /dev/null || fail "resumed run"
py "$work/uninterrupted.jsonl" "$work/out-lora/metrics.jsonl" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert [r["step"] for r in b] == list(range(1, 31)), [r["step"] for r in b]
for x, y in zip(a[10:], b[10:]):
    for k in ("loss", "lr", "grad_norm", "tokens", "epoch", "valid_loss", "train_mean_token_accuracy"):
        assert x.get(k) == y.get(k), f"step {x['step']}: {k} {x.get(k)} != {y.get(k)} after resume"
assert a[:10] == b[:10], "the first ten lines are kept as they were"
print("resume from step 10: steps 11..30 identical")
EOF

# ---- init_adapter: a run that starts from the trained adapter starts from its lower loss
config init out-init '"lora": {"r": 8, "alpha": 16}, "max_steps": 1, "init_adapter": "'"$work"'/out-lora/final"'
"$WHET_BIN" train --config "$work/init.json" --quiet > /dev/null || fail "init_adapter run"
py "$work/out-lora/metrics.jsonl" "$work/out-init/metrics.jsonl" <<'EOF'
import json, sys
fresh = json.loads(open(sys.argv[1]).readline())["loss"]
warm = json.loads(open(sys.argv[2]).readline())["loss"]
assert warm < fresh - 1.0, f"init_adapter: first loss {warm:.3f}, a fresh adapter starts at {fresh:.3f}"
print(f"init_adapter: first loss {warm:.3f} (fresh adapter {fresh:.3f})")
EOF

# ---- gradient accumulation only splits a step's rows: batches of 8 examples in 1, 2 or 4 micro-batches
# take the same steps (max_seq_len 64: a step's 8 examples pack into several rows)
for acc in 1 2 4; do
  config "acc$acc" "out-acc$acc" '"lora": {"r": 8, "alpha": 16}, "max_steps": 3' \
    '{"batch_size": 8, "gradient_accumulation_steps": '"$acc"', "learning_rate": 0.003, "max_seq_len": 64}'
  "$WHET_BIN" train --config "$work/acc$acc.json" --quiet > /dev/null || fail "accumulation run $acc"
done
py "$work"/out-acc{1,2,4}/metrics.jsonl <<'EOF'
import json, sys
runs = [[json.loads(l) for l in open(p)] for p in sys.argv[1:]]
assert all(len(r) == 3 for r in runs), [len(r) for r in runs]
for other in runs[1:]:
    for x, y in zip(runs[0], other):
        assert x["tokens"] == y["tokens"], (x, y)
        assert abs(x["loss"] - y["loss"]) < 1e-4 * abs(x["loss"]), (x["loss"], y["loss"])
        assert abs(x["grad_norm"] - y["grad_norm"]) < 1e-3 * x["grad_norm"], (x["grad_norm"], y["grad_norm"])
print("accumulation: 1, 2 and 4 micro-batches give the same losses and gradient norms")
EOF

# ---- batch_size counts examples: 96 examples, n_epochs 2, batch_size 40 -> 2 x ceil(96/40) = 6 steps,
# the last step of each epoch taking the 16 examples left
config epochs out-epochs '"lora": {"r": 8, "alpha": 16}' '{"n_epochs": 2, "batch_size": 40, "learning_rate": 0.003, "max_seq_len": 128}'
"$WHET_BIN" train --config "$work/epochs.json" > "$work/epochs.events" 2> "$work/epochs.log" || { cat "$work/epochs.log"; fail "epochs run"; }
grep -q "3 steps an epoch" "$work/epochs.log" || fail "progress: no steps per epoch: $(head -5 "$work/epochs.log")"
py "$work/out-epochs/metrics.jsonl" "$work/epochs.events" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [(r["step"], r["epoch"]) for r in rows] == [(1, 0), (2, 0), (3, 0), (4, 1), (5, 1), (6, 1)], rows
data = [json.loads(l) for l in open(sys.argv[2]) if '"type":"data"' in l]
assert (data[0]["steps_per_epoch"], data[0]["total_steps"]) == (3, 6), data[0]
assert "steps_per_epoch" not in data[1], "only the training file's event carries the plan"
print("2 epochs of 96 examples in batches of 40: 6 steps")
EOF

# ---- SIGTERM: the step under way finishes, a checkpoint is written, exit 0
config term out-term '"lora": {"r": 8, "alpha": 16}, "max_steps": 100000'
"$WHET_BIN" train --config "$work/term.json" --quiet > "$work/term.events" &
pid=$!
for _ in $(seq 600); do
  [ "$({ wc -l < "$work/out-term/metrics.jsonl"; } 2>/dev/null || echo 0)" -ge 3 ] && break
  sleep 0.1
done
start=$(date +%s%N)
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$rc" = 0 ] || fail "SIGTERM: exit status $rc"
[ "$elapsed_ms" -lt 20000 ] || fail "SIGTERM: took ${elapsed_ms} ms to stop"
last=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["step"])' "$work/out-term/metrics.jsonl")
[ -s "$work/out-term/checkpoints/step-$last/optimizer.safetensors.zst" ] || fail "SIGTERM: no checkpoint at step $last"
grep -q '"type":"checkpoint"' "$work/term.events" || fail "SIGTERM: no checkpoint event"
echo "SIGTERM: checkpoint at step $last, exit 0 after ${elapsed_ms} ms"

# ---- full fine-tuning: 12 steps, loss falls, HF layout; resume from step 6 is exact too
FULL_HP='{"batch_size": 4, "learning_rate": 0.001, "max_seq_len": 128}'
config full out-full '"lora": null, "max_steps": 12, "checkpoint_every_steps": 6' "$FULL_HP"
"$WHET_BIN" train --config "$work/full.json" --quiet > /dev/null || fail "full fine-tuning run"
config fullr out-full-r '"lora": null, "max_steps": 12, "checkpoint_every_steps": 6, "resume_from": "'"$work"'/out-full/checkpoints/step-6"' "$FULL_HP"
"$WHET_BIN" train --config "$work/fullr.json" --quiet > /dev/null || fail "full fine-tuning resume"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
  [ -s "$work/out-full/final/$f" ] || fail "full final/$f missing"
done
py "$work/out-full/metrics.jsonl" "$work/out-full-r/metrics.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
first, last = rows[0]["loss"], sum(r["loss"] for r in rows[-3:]) / 3
assert last < 0.8 * first, f"full fine-tuning loss did not fall: {first:.3f} -> {last:.3f}"
resumed = [json.loads(l) for l in open(sys.argv[2])]
assert [(r["step"], r["loss"], r["grad_norm"]) for r in resumed] == [(r["step"], r["loss"], r["grad_norm"]) for r in rows[6:]]
print(f"full fine-tuning loss {first:.3f} -> {last:.3f}; resume from step 6 identical")
EOF

# ---- score: chat texts of the validation set, scored without and with what was trained
py "$WHET_FIXTURES/sft/valid.jsonl" > "$work/texts.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    msgs = json.loads(line)["messages"]
    print(json.dumps("".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs)))
EOF
"$WHET_BIN" tokenize --tokenizer "$work/model/tokenizer.json" --json < "$work/texts.jsonl" | sed 's/^/{"input_ids":/; s/$/}/' > "$work/ids.jsonl"
"$WHET_BIN" score --model "$work/model" --data "$work/ids.jsonl" > "$work/base.scores"
"$WHET_BIN" score --model "$work/model" --adapter "$work/out-lora/final" --data "$work/ids.jsonl" > "$work/lora.scores"
"$WHET_BIN" score --model "$work/out-full/final" --data "$work/ids.jsonl" > "$work/full.scores"
py "$work/base.scores" "$work/lora.scores" "$work/full.scores" "$work/ids.jsonl" <<'EOF'
import json, sys
def load(p): return [json.loads(l) for l in open(p)]
base, lora, full, ids = (load(p) for p in sys.argv[1:5])
assert [r["index"] for r in base] == list(range(24)) and len(lora) == len(full) == 24
assert all(r["tokens"] == len(i["input_ids"]) - 1 for r, i in zip(base, ids)), "tokens = predicted positions"
mean = lambda rs: sum(r["loss"] for r in rs) / len(rs)
assert mean(lora) < mean(base) - 0.3, f"adapter does not lower the loss: {mean(base):.3f} vs {mean(lora):.3f}"
assert mean(full) < mean(base) - 0.3, f"full fine-tune does not lower the loss: {mean(base):.3f} vs {mean(full):.3f}"
print(f"score: base {mean(base):.3f}, LoRA {mean(lora):.3f}, full {mean(full):.3f}")
EOF

# ---- sample: deterministic for a seed
s1=$("$WHET_BIN" sample --model "$work/model" --adapter "$work/out-lora/final" --prompt "Add 2 and 3." --max-tokens 16 --temperature 0.9 --top-p 0.95 --seed 5)
s2=$("$WHET_BIN" sample --model "$work/model" --adapter "$work/out-lora/final" --prompt "Add 2 and 3." --max-tokens 16 --temperature 0.9 --top-p 0.95 --seed 5)
[ "$s1" = "$s2" ] || fail "sample differs for the same seed: '$s1' vs '$s2'"
g1=$("$WHET_BIN" sample --model "$work/out-full/final" --prompt "What is the capital of Peru?" --max-tokens 16 --temperature 0)
g2=$("$WHET_BIN" sample --model "$work/out-full/final" --prompt "What is the capital of Peru?" --max-tokens 16 --temperature 0 --seed 9)
[ "$g1" = "$g2" ] || fail "greedy decoding depends on the seed"
echo "sample: seed 5 twice gives '$s1'"

# ---- errors: a bad config field (exit 2), a bad dataset line (exit 1, file and line)
config bad out-bad '"max_steps": 1' '{"learning_rate": 5}'
rc=0; "$WHET_BIN" train --config "$work/bad.json" 2> "$work/bad.err" || rc=$?
[ "$rc" = 2 ] && grep -q 'hyperparameters.learning_rate' "$work/bad.err" || fail "bad config: rc $rc, $(cat "$work/bad.err")"
{ head -2 "$WHET_FIXTURES/sft/train.jsonl"; echo '{"messages": "oops"}'; } > "$work/badline.jsonl"
config badline out-badline '"max_steps": 1' "$HP" "$work/badline.jsonl"
rc=0; "$WHET_BIN" train --config "$work/badline.json" 2> "$work/badline.err" || rc=$?
[ "$rc" = 1 ] && grep -q 'badline.jsonl: line 3' "$work/badline.err" || fail "bad line: rc $rc, $(cat "$work/badline.err")"
echo "ok"
