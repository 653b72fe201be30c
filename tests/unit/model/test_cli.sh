#!/bin/sh
# test_cli.sh - `whet model init` from the command line: the preset twice gives byte-identical files
# (the library test loads and trains them), --help
# documents the options, bad options exit 2.
set -u
fail=0
check() { if ! eval "$1"; then echo "FAIL: $1" >&2; fail=1; fi; }
tmp=$(mktemp -d /tmp/whet-model-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
check '"$WHET_BIN" model init --preset tiny --out "$tmp/a"'
check '"$WHET_BIN" model init --preset tiny --out "$tmp/b"'
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
  check 'cmp -s "$tmp/a/$f" "$tmp/b/$f"'
done
check '"$WHET_BIN" model init --out "$tmp/c" --arch llama --layers 1 --hidden 32 --heads 2 --vocab 300 --seed 3'
check 'grep -q LlamaForCausalLM "$tmp/c/config.json"'
check '! cmp -s "$tmp/a/model.safetensors" "$tmp/c/model.safetensors"'
check '"$WHET_BIN" model init --help | grep -q -- "--kv-heads"'
"$WHET_BIN" model init --out "$tmp/d" --layers zero 2>/dev/null; check '[ $? -eq 2 ]'
"$WHET_BIN" model init 2>/dev/null; check '[ $? -eq 2 ]'
"$WHET_BIN" model init --out "$tmp/e" --heads 3 --kv-heads 2 2>"$tmp/err"; check '[ $? -eq 1 ]'
check 'grep -q "does not divide" "$tmp/err"'
[ $fail -eq 0 ] && echo "test_cli: ok"
exit $fail
