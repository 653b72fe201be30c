#!/usr/bin/env bash
# `whet sample` on the emulated CUDA backend ($1: whet built with tests/unit/backend/cuda_emu) against the
# CPU on the tiny model: the same text greedy, and seeded with top-p, with top-k and with no cut, for the same
# seed. Generation on "cuda" goes through prefill, KV-cache slot copies, decode steps, cached attention
# and the device's sampler, none of which the op test strings together.
set -euo pipefail
: "${WHET_BIN:?}"
emu=${1:?the emulated whet}
export OMP_NUM_THREADS=1
work=$(mktemp -d /tmp/whet-sample-emu.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$WHET_BIN" model init --preset tiny --out "$work/model" >/dev/null

same() { # same ARGS...: cpu and emulated cuda print the same text
  local a b
  a=$("$emu" sample --model "$work/model" --device cpu "$@")
  b=$("$emu" sample --model "$work/model" --device cuda "$@")
  [ "$a" = "$b" ] || { printf 'FAIL: %s\ncpu:  %s\ncuda: %s\n' "$*" "$a" "$b" >&2; exit 1; }
  echo "same on cpu and cuda: $*"
}
same --prompt "What is the capital of Peru?" --max-tokens 12 --temperature 0
same --prompt "Add 2 and 3." --max-tokens 12 --temperature 0.9 --top-p 0.95 --seed 5
same --prompt "Add 2 and 3." --max-tokens 12 --temperature 1.2 --top-k 20 --seed 7
same --prompt "Name a colour." --max-tokens 12 --temperature 1 --seed 11
