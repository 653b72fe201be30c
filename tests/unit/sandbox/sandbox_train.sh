#!/bin/sh
# sandbox_train.sh - `whet train` runs under the sandbox the executor gives it: the seccomp filter lets
# the trainer (OpenMP, OpenBLAS, mmap'd safetensors) work, metric lines come back on stdout, and the
# checkpoints land in the one writable dir while the model and data dirs stay read-only.
set -eu
: "${WHET_BIN:?}" "${WHET_FIXTURES:?}"
bin=$(readlink -f "$WHET_BIN")
work=$(mktemp -d /tmp/whet-sandbox-train.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir "$work/out"
"$bin" model init --preset tiny --out "$work/model" >/dev/null
cat >"$work/config.json" <<JSON
{"method": "sft", "model": "$work/model", "training_file": "$WHET_FIXTURES/sft/train.jsonl",
 "output_dir": "$work/out", "seed": 1, "lora": {"r": 4, "alpha": 8}, "max_steps": 2,
 "checkpoint_every_steps": 1,
 "hyperparameters": {"batch_size": 2, "learning_rate": 0.003, "max_seq_len": 64}}
JSON
# A sanitizer build reserves terabytes of shadow memory, which no address-space limit admits, and its
# LeakSanitizer needs ptrace at exit: give it neither limit nor leak check (the plain build has both).
mem="--mem 2048"
if ldd "$bin" | grep -q libasan; then mem="--env ASAN_OPTIONS=detect_leaks=0"; fi
"$bin" sandbox run --env OMP_NUM_THREADS=2 --env OPENBLAS_NUM_THREADS=1 $mem --procs 64 --wall 240 \
    --readonly "$(dirname "$bin")" --readonly "$work/model" --readonly "$work/config.json" \
    --readonly "$WHET_FIXTURES/sft" --writable "$work/out" \
    -- "$bin" train --config "$work/config.json" --quiet >"$work/events" 2>"$work/log" || { cat "$work/log"; fail "sandboxed whet train"; }
grep -q '"type":"metrics","step":2' "$work/events" || fail "no metric line for step 2 on stdout"
[ -s "$work/out/final/adapter_model.safetensors" ] || fail "no final adapter in the writable dir"
[ -d "$work/out/checkpoints/step-1" ] || fail "no checkpoint at step 1"
grep -q "whet sandbox: ok" "$work/log" || fail "verdict: $(tail -1 "$work/log")"
echo "ok   whet train ran sandboxed: $(tail -1 "$work/log")"
