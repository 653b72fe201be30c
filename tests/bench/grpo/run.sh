#!/bin/sh
# run.sh - where a GRPO step's time goes: rollout, grading, reference pass and update, read from the
# time_* fields of `whet train`'s metrics lines, on a ~25M-parameter Qwen3-shaped model (7 layers,
# hidden 512, vocabulary 8192) with LoRA and with full fine-tuning (whose reference is a frozen copy),
# 4 prompts x 8 responses of up to 32 tokens per step, a string_check grader. Usage (from the
# repository root, after building):
#   tests/bench/grpo/run.sh [BUILD_DIR] [THREADS] [STEPS]
# The machine may be shared (2 cores, other work on it): read the shares and ratios, taken in one run,
# not the seconds. The first step is left out (buffers grow on it).
set -eu
BUILD=${1:-build}
THREADS=${2:-2}
STEPS=${3:-4}
WHET=$(cd "$BUILD" && pwd)/whet
OUT=$(mktemp -d /tmp/whet-bench-grpo.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

"$WHET" model init --out "$OUT/model" --layers 7 --hidden 512 --heads 8 --kv-heads 4 --intermediate 1376 --vocab 8192 >/dev/null
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
words = ["red", "green", "blue", "yellow", "black", "white", "apple", "house"]
with open(f"{sys.argv[1]}/train.jsonl", "w") as f:
    for i in range(64):
        w = words[i % 8]
        f.write(json.dumps({"messages": [{"role": "user", "content": f"Question {i}: reply with the word {w} and nothing else."}],
                            "answer": w}) + "\n")
PY
for mode in lora full; do
  if [ "$mode" = lora ]; then LORA='{"r": 16, "alpha": 32}'; else LORA=null; fi
  cat > "$OUT/$mode.json" <<JSON
{"method": "grpo", "model": "$OUT/model", "training_file": "$OUT/train.jsonl", "output_dir": "$OUT/out-$mode",
 "seed": 1, "lora": $LORA, "max_steps": $STEPS,
 "grader": {"type": "string_check", "name": "exact", "input": "{{sample.output_text}}", "reference": "{{item.answer}}", "operation": "eq"},
 "rollout": {"n": 8, "max_tokens": 32, "temperature": 1.0},
 "hyperparameters": {"batch_size": 4, "learning_rate": 0.0001, "max_seq_len": 128, "gradient_accumulation_steps": 2}}
JSON
  "$WHET" train --config "$OUT/$mode.json" --quiet > /dev/null
  /usr/bin/python3 - "$mode" "$OUT/out-$mode/metrics.jsonl" "$THREADS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[2])][1:]
parts = ["rollout", "grading", "reference", "update"]
t = {p: sum(r[f"time_{p}_s"] for r in rows) / len(rows) for p in parts}
total = sum(t.values())
gen = sum(r["rollout_tokens"] for r in rows) / len(rows)
trained = sum(r["tokens"] for r in rows) / len(rows)
print(f"{sys.argv[1]} ({sys.argv[3]} threads, {len(rows)} steps): step {total:.2f}s = "
      + ", ".join(f"{p} {t[p]:.2f}s ({100 * t[p] / total:.0f}%)" for p in parts))
print(f"  rollout {gen / t['rollout']:.0f} generated tok/s ({gen:.0f} tokens/step); update {trained / t['update']:.0f} tok/s "
      f"({trained:.0f} prompt+response tokens/step); reference/update time {t['reference'] / t['update']:.2f}x; "
      f"rollout per generated token / update per trained token {(t['rollout'] / gen) / (t['update'] / trained):.1f}x")
PY
done
