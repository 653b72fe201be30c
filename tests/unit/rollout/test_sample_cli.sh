#!/bin/sh
# test_sample_cli.sh - `whet sample --top-k` on the tiny model: --top-k 1 at temperature 1 is greedy
# decoding, a top-k draw is the same for the same seed and changes with the seed, --help documents
# the option, a bad value exits 2.
set -u
fail=0
check() { if ! eval "$1"; then echo "FAIL: $1" >&2; fail=1; fi; }
tmp=$(mktemp -d /tmp/whet-rollout-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
check '"$WHET_BIN" model init --preset tiny --out "$tmp/m" >/dev/null'
s() { "$WHET_BIN" sample --model "$tmp/m" --prompt "Tell me a story." --max-tokens 12 "$@"; }
greedy=$(s --temperature 0)
k1=$(s --temperature 1 --top-k 1 --seed 4)
check '[ -n "$greedy" ] && [ "$greedy" = "$k1" ]'
a=$(s --temperature 1.2 --top-k 20 --seed 4)
b=$(s --temperature 1.2 --top-k 20 --seed 4)
c=$(s --temperature 1.2 --top-k 20 --seed 5)
check '[ "$a" = "$b" ]'
check '[ "$a" != "$c" ]'
check '[ "$a" != "$greedy" ]'
check '"$WHET_BIN" sample --help | grep -q -- "--top-k K"'
"$WHET_BIN" sample --model "$tmp/m" --prompt x --top-k -1 2>/dev/null; check '[ $? -eq 2 ]'
"$WHET_BIN" sample --model "$tmp/m" --prompt x --top-k 1.5 2>/dev/null; check '[ $? -eq 2 ]'
[ $fail -eq 0 ] && echo "test_sample_cli: ok"
exit $fail
