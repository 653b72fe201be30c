#!/usr/bin/env bash
# "cuda" devices where there is no GPU (every CI machine): `whet sample --device cuda` and a training
# config with "device": "cuda" must fail at once, with "no CUDA device" and an ordinary exit status (not
# a crash). The message also tells which build this is, so a CUDA build that silently left the backend
# out fails here: $1 is ON when CMake built the CUDA backend (then the reason comes from the CUDA
# runtime), OFF when it did not (then whet says it was built without it). $2 is the WHET_CUDA setting:
# unless it is OFF, a machine with nvcc must have built the backend (CI compiles and links it on every
# run). On a machine with a GPU the backend is tested by tests/gpu/run.sh instead.
set -euo pipefail
: "${WHET_BIN:?}" "${WHET_FIXTURES:?}"
built=${1:?ON or OFF} setting=${2:?AUTO, ON or OFF}
if [ "$built" != ON ] && [ "$setting" != OFF ] && { command -v nvcc || [ -x /usr/local/cuda/bin/nvcc ]; } >/dev/null; then
  echo "FAIL: nvcc is on this machine but the CUDA backend was not built (WHET_CUDA=$setting)" >&2
  exit 1
fi
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "a GPU is here: not the case this test is about (tests/gpu/run.sh tests the backend)"
  exit 0
fi
work=$(mktemp -d /tmp/whet-no-cuda.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$WHET_BIN" model init --preset tiny --out "$work/model" >/dev/null

# expect_no_device NAME CMD...: exits 1..127 (not a signal) within 30 s, saying "no CUDA device"
expect_no_device() {
  local name=$1 rc=0
  shift
  timeout 30 "$@" > "$work/$name.out" 2> "$work/$name.err" || rc=$?
  [ "$rc" -ne 0 ] || fail "$name: succeeded on a machine without a GPU"
  [ "$rc" -ne 124 ] || fail "$name: still running after 30 s"
  [ "$rc" -lt 128 ] || fail "$name: killed by signal $((rc - 128)): $(cat "$work/$name.err")"
  grep -q "no CUDA device" "$work/$name.err" || fail "$name: no 'no CUDA device' in: $(cat "$work/$name.err")"
  if [ "$built" = ON ]; then
    ! grep -q "built without the CUDA backend" "$work/$name.err" || fail "$name: the CUDA backend was not compiled in"
  else
    grep -q "built without the CUDA backend" "$work/$name.err" || fail "$name: expected the no-CUDA build's message"
  fi
  echo "$name: $(head -n1 "$work/$name.err")"
}

expect_no_device sample "$WHET_BIN" sample --device cuda --model "$work/model" --prompt "hi" --max-tokens 4
expect_no_device sample_cuda1 "$WHET_BIN" sample --device cuda:1 --model "$work/model" --prompt "hi" --max-tokens 4
cat > "$work/train.json" <<JSON
{"method": "sft", "model": "$work/model", "training_file": "$WHET_FIXTURES/sft/train.jsonl",
 "output_dir": "$work/out", "seed": 1, "max_steps": 2, "device": "cuda",
 "hyperparameters": {"batch_size": 2, "learning_rate": 0.001, "max_seq_len": 64}}
JSON
expect_no_device train "$WHET_BIN" train --config "$work/train.json" --quiet
