#!/usr/bin/env bash
# GRPO with a score_model grader whose judge is a model loaded in the trainer (executor/train/methods/judge.h).
#
# The judge is the tiny model after a short SFT that teaches it to answer the grading prompt with a
# digit (9 when the answer is the expected word, 2 otherwise), so its replies are numbers and every
# sample gets a score: 2 GRPO steps must finish with grader_errors 0 and rewards inside the range.
# The untrained tiny model as the judge replies with random text: the run must still finish, its
# rewards inside the range (0 for replies without a number, counted in grader_errors). A grader naming
# a judge that judge_models lacks is refused before any step.
set -euo pipefail
: "${WHET_BIN:?}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d /tmp/whet-judge-e2e.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
py() { python3 - "$@"; }

"$WHET_BIN" model init --preset tiny --out "$work/model" >/dev/null

py "$work" <<'EOF2'
import json, sys
work = sys.argv[1]
words = ["red", "green", "blue", "yellow", "black", "white", "apple", "house"]
instruction = "Reply with only a number from 0 to 10."
with open(f"{work}/judge-sft.jsonl", "w") as f:
    for w in words:
        for got in words[:4]:
            user = f"Expected {w}; got {got}.\n\n{instruction}"
            f.write(json.dumps({"messages": [{"role": "user", "content": user},
                                             {"role": "assistant", "content": "9" if got == w else "2"}]}) + "\n")
with open(f"{work}/train.jsonl", "w") as f:
    for w in words:
        f.write(json.dumps({"messages": [{"role": "user", "content": f"Reply with the word {w}."}], "answer": w}) + "\n")
EOF2

cat > "$work/judge-sft.json" <<EOF2
{"method": "sft", "model": "$work/model", "training_file": "$work/judge-sft.jsonl", "output_dir": "$work/judge", "seed": 1,
 "lora": null, "max_steps": 30,
 "hyperparameters": {"batch_size": 8, "learning_rate": 0.003, "max_seq_len": 64, "lr_scheduler": "constant"}}
EOF2
"$WHET_BIN" train --config "$work/judge-sft.json" --quiet > /dev/null || fail "judge SFT"

GRADER='{"type": "score_model", "name": "judge", "model": "tiny-judge", "range": [0, 10],
 "sampling_params": {"max_completions_tokens": 4},
 "input": [{"role": "user", "content": "Expected {{item.answer}}; got {{sample.output_text}}."}]}'
grpo_config() { # NAME JUDGE_DIR
  cat > "$work/$1.json" <<EOF2
{"method": "grpo", "model": "$work/model", "training_file": "$work/train.jsonl", "output_dir": "$work/$1", "seed": 3,
 "grader": $GRADER, "judge_models": {"tiny-judge": "$2"},
 "rollout": {"n": 4, "max_tokens": 4, "temperature": 1.0}, "lora": {"r": 8, "alpha": 16}, "max_steps": 2,
 "hyperparameters": {"batch_size": 4, "learning_rate": 0.005, "max_seq_len": 64, "lr_scheduler": "constant"}}
EOF2
}

check_metrics() { # METRICS_FILE WANT_NO_ERRORS
  py "$1" "$2" <<'EOF2'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
want_no_errors = sys.argv[2] == "1"
assert len(rows) == 2, rows
for r in rows:
    assert 0 <= r["reward_mean"] <= 10, r
    assert r["time_grading_s"] > 0, r
    if want_no_errors:
        assert r["grader_errors"] == 0, f"the trained judge answers numbers: {r}"
        # 2 (wrong) or 9 (right) for most replies: the mean is a judged score, not a default 0
        assert r["reward_mean"] >= 1.5, r
print("reward_mean", [r["reward_mean"] for r in rows], "grader_errors", [r["grader_errors"] for r in rows])
EOF2
}

# ---- the trained judge: numbers for every sample
grpo_config trained "$work/judge/final"
"$WHET_BIN" train --config "$work/trained.json" --quiet > /dev/null 2> "$work/trained.log" || { cat "$work/trained.log" >&2; fail "GRPO with the trained judge"; }
check_metrics "$work/trained/metrics.jsonl" 1 || fail "metrics with the trained judge"

# ---- the untrained tiny model: random replies, still a finished run with rewards in range
grpo_config random "$work/model"
"$WHET_BIN" train --config "$work/random.json" --quiet > /dev/null 2> "$work/random.log" || { cat "$work/random.log" >&2; fail "GRPO with the random judge"; }
check_metrics "$work/random/metrics.jsonl" 0 || fail "metrics with the random judge"

# ---- a judge that judge_models lacks: refused before the first step
sed 's/"tiny-judge": /"other-judge": /' "$work/random.json" > "$work/missing.json"
sed -i "s#$work/random\"#$work/missing\"#" "$work/missing.json"
if "$WHET_BIN" train --config "$work/missing.json" --quiet > /dev/null 2> "$work/missing.log"; then fail "a missing judge model was accepted"; fi
grep -q 'judge model \\\?"tiny-judge\\\?" is not in judge_models' "$work/missing.log" || { cat "$work/missing.log" >&2; fail "the error does not name the missing judge"; }
[ ! -s "$work/missing/metrics.jsonl" ] || fail "steps ran without a judge"
echo "e2e_judge_grpo: ok"
