#!/usr/bin/env bash
# End to end on the tiny model: four SFT LoRA runs, two DPO LoRA runs (one validated) and two GRPO LoRA runs
# (different temperatures, ppo_epochs, KL or none, one validated) with different seeds, batch sizes, learning
# rates, gradient accumulation, LoRA ranks and step counts, trained alone (`whet train`) and co-trained in one
# group on one copy of the base (`whet train --cotrain`, its steps in passes of at most 200 tokens): each
# co-trained run's figures equal its run alone per step (losses, norms, log-probs within 1e-5 relative, DPO's
# margins within 1e-4 absolute: the shared passes sum in another order; accuracies within 0.05, an argmax or a
# pair's sign flipped by that rounding, DPO's within one pair's share; a GRPO run's samples identical: its
# rewards, pass rate, response lengths, rollout tokens and groups exactly as alone), its adapter within 1e-4 (L2, relative: AdamW's
# normalised steps enlarge the rounding on near-zero gradients), the same checkpoints and events, and the
# co-training event's tokens are the run's metrics tokens. The two GRPO runs generate each step's rollouts
# together (one batched decode over both adapters): each response is drawn from the seeds it has alone, but the
# batched products sum in another order, so on some CPU a sampled token may flip where two were within
# rounding (none has here so far), and from that step on the run's adapter parts from alone's. So a GRPO run
# is as alone (exactly as above) up to the first step whose draws differ, if any; at that step at most two of
# its responses may differ (rollout tokens within 2 x max_tokens, rewards, pass rate and mean length within two
# responses' worth); after it only the steps, epochs and learning rates are compared, and not the adapter
# (the test prints how many steps were as alone). Then three runs co-trained (passes of the default
# bound), one stopped through its stop file mid-run: it ends with a checkpoint of its last
# step, the others finish, every step still equal to alone; a run with bad data and a GRPO run whose grader
# names a judge model it does not have fail alone; the stopped run resumed alone from its checkpoint ends as
# the run that was never stopped. One OpenMP thread.
set -euo pipefail
: "${WHET_BIN:?}" "${WHET_FIXTURES:?}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
work=$(mktemp -d /tmp/whet-cotrain-e2e.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$WHET_BIN" model init --preset tiny --out "$work/model" >/dev/null

config() { # config NAME INDEX MAX_STEPS [dpo]
  local i=$2 data=sft extra=
  [ "${4:-}" = dpo ] && data=dpo extra=', "beta": 0.1'
  cat > "$work/$1.json" <<EOF
{"method": "$data", "model": "$work/model", "training_file": "$WHET_FIXTURES/$data/train.jsonl",
 "output_dir": "$work/$1", "seed": $((i + 1)), "max_steps": $3, "checkpoint_every_steps": 5,
 "hyperparameters": {"batch_size": $((2 + i)), "learning_rate": 0.00$((1 + i)), "max_seq_len": 128,
                     "warmup_steps": 2, "gradient_accumulation_steps": $((i % 2 + 1))$extra},
 "lora": {"r": $((4 * (i + 1))), "alpha": 16}}
EOF
}
# GRPO: "reply with the word W" prompts, rewarded when the reply holds a "k" (the untrained tiny model's
# replies are random tokens: some do, some do not, so the groups have advantages to train on)
python3 - "$work/grpo.jsonl" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as f:
    for t in ["Reply with the word {w}.", "Say {w} and nothing else."]:
        for w in ["red", "green", "blue", "yellow", "black", "white"]:
            f.write(json.dumps({"messages": [{"role": "user", "content": t.format(w=w)}], "answer": w}) + "\n")
EOF
HAS_K='{"type": "string_check", "name": "has_k", "input": "{{sample.output_text}}", "reference": "k", "operation": "like"}'
grpo_config() { # grpo_config NAME INDEX MAX_STEPS [GRADER]: run 1 samples at 0.7 with 2 PPO epochs and a KL term
  local i=$2
  cat > "$work/$1.json" <<EOF
{"method": "grpo", "model": "$work/model", "training_file": "$work/grpo.jsonl", "output_dir": "$work/$1",
 "seed": $((i + 7)), "max_steps": $3, "checkpoint_every_steps": 5, "grader": ${4:-$HAS_K},
 "rollout": {"n": 4, "max_tokens": 6, "temperature": $([ $i = 0 ] && echo 1.0 || echo 0.7)},
 "hyperparameters": {"batch_size": $((3 + i)), "learning_rate": 0.00$((5 + i)), "max_seq_len": 64, "warmup_steps": 1,
                     "gradient_accumulation_steps": $((i + 1)), "ppo_epochs": $((i + 1)),
                     "kl_coef": $([ $i = 0 ] && echo 0 || echo 0.05)},
 "lora": {"r": $((4 * (i + 1))), "alpha": 16}}
EOF
}
validated() { # validated NAME [FILE]: validation every 3 steps (DPO's pairs unless FILE)
  local fields="\"validation_file\": \"${2:-$WHET_FIXTURES/dpo/valid.jsonl}\", \"eval_every_steps\": 3"
  sed -i "s|\"max_steps\"|$fields, \"max_steps\"|" "$work/$1.json"
}

compare() { # compare ALONE_DIR CO_DIR [PREFIX_ONLY]
  python3 - "$@" <<'EOF'
import json, struct, sys
a_dir, c_dir = sys.argv[1], sys.argv[2]
prefix = len(sys.argv) > 3
a = [json.loads(l) for l in open(f"{a_dir}/metrics.jsonl")]
c = [json.loads(l) for l in open(f"{c_dir}/metrics.jsonl")]
cfg = json.load(open(f"{a_dir}.json"))
if prefix:
    a = a[:len(c)]
assert [r["step"] for r in c] == [r["step"] for r in a], (len(a), len(c))
draws = ("reward_mean", "reward_std", "pass_rate", "response_length_mean", "rollout_tokens", "groups_kept", "gen_batches",
         "grader_errors", "valid_reward_mean", "valid_pass_rate")
parted = None # a GRPO run's first step whose draws differ from alone's (a token flipped by the batched rounding)
def one_pair(k):
    """A DPO accuracy's share of one pair, the most one flipped sign moves it: at step 1 (LoRA B = 0) the policy
    is the reference and every margin is zero but for rounding, which the shared passes' order decides."""
    if cfg["method"] != "dpo":
        return 0
    if k.startswith("valid_"):
        return 1 / sum(1 for line in open(cfg["validation_file"]) if line.strip())
    return 1 / cfg["hyperparameters"]["batch_size"]
for x, y in zip(a, c):
    assert set(x) == set(y), set(x) ^ set(y)
    if cfg["method"] == "grpo" and parted is None and any(x[k] != y[k] for k in draws if k in x):
        parted = x["step"]
        n, L = cfg["rollout"]["n"] * cfg["hyperparameters"]["batch_size"], cfg["rollout"]["max_tokens"]
        for k, most in (("rollout_tokens", 2 * L), ("response_length_mean", 2 * L / n), ("reward_mean", 2 / n),
                        ("pass_rate", 2 / n)): # at most two responses differ
            assert abs(x[k] - y[k]) <= most + 1e-9, f"{c_dir} step {parted} {k}: alone {x[k]}, co-trained {y[k]}"
    if parted is not None:
        assert all(x[k] == y[k] for k in ("step", "epoch", "lr")), (x, y)
        continue
    for k in x:
        if k.endswith("_per_s") or k.startswith("time_"):
            continue
        if k in ("step", "epoch", "lr", "tokens") or x[k] is None:
            ok = x[k] == y[k]
        elif k in ("reward_mean", "reward_std", "pass_rate", "response_length_mean", "rollout_tokens", "groups_kept",
                   "gen_batches", "grader_errors", "valid_reward_mean", "valid_pass_rate"):
            ok = x[k] == y[k] # a GRPO run's samples and grades: the same draws as alone
        elif k.endswith("accuracy"):
            ok = abs(x[k] - y[k]) <= max(0.05, one_pair(k) + 1e-5) # the metrics are written with 6 digits
        elif k.endswith("margin"):
            ok = abs(x[k] - y[k]) <= 1e-4
        else:
            ok = abs(x[k] - y[k]) <= 1e-5 * abs(x[k])
        assert ok, f"{c_dir} step {x['step']} {k}: alone {x[k]}, co-trained {y[k]}"
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        out[name] = struct.unpack(f"<{(hi - lo) // 4}f", raw[8 + n + lo:8 + n + hi])
    return out
if parted is not None:
    print(f"{c_dir.split('/')[-1]}: draws as alone in {parted - 1} of {len(c)} steps, then a token flipped")
elif not prefix:
    ta, tc = tensors(f"{a_dir}/final/adapter_model.safetensors"), tensors(f"{c_dir}/final/adapter_model.safetensors")
    assert ta.keys() == tc.keys()
    norm = sum(v * v for t in ta.values() for v in t) ** 0.5
    dist = sum((u - v) ** 2 for k in ta for u, v in zip(ta[k], tc[k])) ** 0.5
    diff = max(abs(u - v) for k in ta for u, v in zip(ta[k], tc[k]))
    assert dist <= 1e-4 * norm, f"{c_dir}: adapter differs by {dist} in L2 (its norm {norm})"
    print(f"{c_dir.split('/')[-1]}: {len(c)} steps, losses as alone; adapter |diff| {dist / norm:.3g} of its norm, "
          f"max element diff {diff:.3g}")
EOF
}

# runs 0-3 SFT, 4-5 DPO (run 5 validated), 6-7 GRPO (run 7 validated)
for i in 0 1 2 3; do config "alone$i" $i $((8 + i)); config "co$i" $i $((8 + i)); done
for i in 4 5; do config "alone$i" $((i - 4)) $((i + 2)) dpo; config "co$i" $((i - 4)) $((i + 2)) dpo; done
validated alone5
validated co5
for i in 6 7; do grpo_config "alone$i" $((i - 6)) $i; grpo_config "co$i" $((i - 6)) $i; done
validated alone7 "$work/grpo.jsonl"
validated co7 "$work/grpo.jsonl"
t0=$(date +%s.%N)
for i in 0 1 2 3 4 5 6 7; do
  "$WHET_BIN" train --config "$work/alone$i.json" --quiet > "$work/alone$i.events" || fail "run $i alone"
done
t1=$(date +%s.%N)
# passes of at most 200 tokens: a step's rows (up to 128 tokens each) cut into passes, a run's rows across two or
# more of them (its gradients summed over them, its SFT mean over the whole step's targets, a DPO pair whole)
"$WHET_BIN" train --cotrain --quiet --pass-tokens 200 $(for i in 0 1 2 3 4 5 6 7; do echo --config "$work/co$i.json"; done) \
  2> "$work/co.err" || { cat "$work/co.err"; fail "co-training"; }
t2=$(date +%s.%N)
echo "wall time: 8 runs one after another $(python3 -c "print(round($t1 - $t0, 2))") s, co-trained $(python3 -c "print(round($t2 - $t1, 2))") s"
grep -q '"valid_reward_margin"' "$work/co5/metrics.jsonl" || fail "the validated DPO run has no validation figures"
grep -q '"valid_reward_mean"' "$work/co7/metrics.jsonl" || fail "the validated GRPO run has no validation figures"
python3 - "$work/co6/metrics.jsonl" "$work/co7/metrics.jsonl" <<'EOF'
import json, sys
for path in sys.argv[1:]: # the co-trained GRPO runs trained: rewards that differ within groups, a loss
    rows = [json.loads(l) for l in open(path)]
    assert any(0 < r["reward_mean"] < 1 for r in rows) and any(r["loss"] != 0 for r in rows), rows
EOF
for i in 0 1 2 3 4 5 6 7; do
  compare "$work/alone$i" "$work/co$i"
  [ -s "$work/co$i/checkpoints/step-5/optimizer.safetensors.zst" ] || fail "co$i: checkpoint step-5 missing"
  python3 - "$work/alone$i.events" "$work/co$i/events.jsonl" "$work/co$i/metrics.jsonl" <<'EOF'
import json, sys
a = [json.loads(l)["type"] for l in open(sys.argv[1])]
c = [json.loads(l) for l in open(sys.argv[2])]
assert [e["type"] for e in c[:-1]] == a, ([e["type"] for e in c], a)
last = c[-1]
tokens = sum(json.loads(l)["tokens"] for l in open(sys.argv[3]))
assert last["type"] == "cotrain" and last["tokens"] == tokens and last["device_seconds"] > 0, (last, tokens)
EOF
done

# ---- one run stopped alone: co-trained runs of 120, 9 and 10 steps; run 0's stop file once it has 3 steps;
# a fourth whose training file is not JSONL and a GRPO run whose grader names a judge model not in its judge_models
# fail alone, their errors their own last events
for i in 0 1 2; do config "stop$i" $i $([ $i = 0 ] && echo 120 || echo $((8 + i))); done
echo 'not json' > "$work/bad.jsonl"
config bad 3 10
sed -i "s|\"training_file\": \"[^\"]*\"|\"training_file\": \"$work/bad.jsonl\"|" "$work/bad.json"
config long0 0 120
grpo_config badgrader 0 10 '{"type": "score_model", "name": "judge", "model": "no-such-judge",
                             "input": [{"role": "user", "content": "{{sample.output_text}}"}]}'
"$WHET_BIN" train --cotrain --quiet --config "$work/stop0.json" --config "$work/stop1.json" --config "$work/stop2.json" \
  --config "$work/bad.json" --config "$work/badgrader.json" 2> "$work/stop.err" &
pid=$!
for _ in $(seq 600); do
  [ "$(cat "$work/stop0/metrics.jsonl" 2>/dev/null | wc -l)" -ge 3 ] && break
  sleep 0.1
done
touch "$work/stop0/stop"
if wait $pid; then fail "co-training with a failing run exited 0"; fi
for name in bad badgrader; do
  grep -q "$name.json: co-trained run failed" "$work/stop.err" || { cat "$work/stop.err"; fail "$name: the failing run's error"; }
done
python3 - "$work/bad/events.jsonl" "$work/badgrader/events.jsonl" <<'EOF'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
assert [e["type"] for e in ev] == ["error", "cotrain"] and "bad.jsonl" in ev[0]["message"], ev
ev = [json.loads(l) for l in open(sys.argv[2])] # its data read, then the judge it names is not there
assert [e["type"] for e in ev] == ["data", "error", "cotrain"], ev
assert 'judge model "no-such-judge" is not in judge_models' in ev[1]["message"], ev
EOF
steps=$(wc -l < "$work/stop0/metrics.jsonl")
[ "$steps" -ge 3 ] && [ "$steps" -lt 120 ] || fail "the stopped run took $steps steps"
[ -s "$work/stop0/checkpoints/step-$steps/trainer_state.json" ] || fail "no checkpoint of the stopped run's step $steps"
[ ! -e "$work/stop0/final" ] || fail "the stopped run wrote a final model"
for i in 1 2; do
  [ -s "$work/stop$i/final/adapter_model.safetensors" ] || fail "run $i did not finish beside the stopped one"
  compare "$work/alone$i" "$work/stop$i" 
done
"$WHET_BIN" train --config "$work/long0.json" --quiet > /dev/null || fail "run 0 alone"
compare "$work/long0" "$work/stop0" prefix
echo "stopped run: $steps steps, a checkpoint at its last; a run with bad data and one with a bad grader failed alone; the other two finished; all equal to alone"

# ---- the stopped run resumed alone from its checkpoint, into its own output dir: its metrics (the file
# kept up to that step, then the resumed steps) and final adapter as the run that was never stopped
sed -i "s|\"max_steps\"|\"resume_from\": \"$work/stop0/checkpoints/step-$steps\", \"max_steps\"|" "$work/stop0.json"
"$WHET_BIN" train --config "$work/stop0.json" --quiet > /dev/null || fail "resuming the stopped run alone"
compare "$work/long0" "$work/stop0"
echo "the stopped run resumed alone from step $steps: as the uninterrupted run"
echo "PASS"
