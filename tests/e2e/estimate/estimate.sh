#!/usr/bin/env bash
# Estimate against actual for the methods whose dry runs tokenize with the trainer's readers besides SFT
# (tests/e2e/console checks SFT): `whet up` with one simulated H100, whet-tiny. A DPO job of whole epochs
# trains exactly the tokens its dry run counted (both sequences of every pair); a reinforcement job's
# trained and rollout (completion) tokens stay within the estimate's stated upper bounds (every response
# at max_tokens). The created jobs carry the dry runs' counts and, finished, the actual beside them.
set -euo pipefail
: "${WHET_BIN:?set by ctest}" "${WHET_SOURCE_DIR:?set by ctest}"
unset WHET_DATABASE_URL WHET_OBJECT_STORE WHET_JWT_KEY WHET_DATA_DIR
. "$(dirname "$0")/../lib.sh"
dir=$(mktemp -d /tmp/whet-estimate-e2e.XXXXXX)
chmod 755 "$dir"
trap '[ -n "${up_pid:-}" ] && kill "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null; rm -rf "$dir"' EXIT
http=127.0.0.1:$(port)
up "$dir" "$http" --executors 1 --devices sim:H100:1
export WHET_DATA_DIR=$dir
key=$("$WHET_BIN" tenant create est 2>/dev/null)
upload() { api "http://$http/v1/files" -F purpose=fine-tune -F file=@"$1" | json "['id']"; }
python3 -c "
import json
for l in 'eaotinsr': print(json.dumps({'messages': [{'role': 'user', 'content': f'Say a word with the letter {l}.'}], 'answer': l}))
" >"$dir/rft.jsonl"
dpo=$(upload "$WHET_SOURCE_DIR/tests/fixtures/dpo/train.jsonl")
rft=$(upload "$dir/rft.jsonl")
post() { api "http://$http/v1/fine_tuning/jobs" -H 'Content-Type: application/json' -d "$1"; }
DPO='"model":"whet-tiny","training_file":"'$dpo'","seed":7,"method":{"type":"dpo","dpo":{"hyperparameters":{"n_epochs":1,"batch_size":5}}}'
grader='{"type":"string_check","name":"g","input":"{{sample.output_text}}","reference":"{{item.answer}}","operation":"like"}'
RFT='"model":"whet-tiny","training_file":"'$rft'","seed":7,"method":{"type":"reinforcement","reinforcement":{"grader":'$grader',"hyperparameters":{"n_epochs":1,"batch_size":4}}}'
ROLLOUT='"group_size":4,"max_tokens":16'

# py JSON EXPR: EXPR (Python) of the JSON as `d`, printed as JSON.
py() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(json.dumps(eval(sys.argv[2])))' "$1" "$2"; }

d=$(post "{$DPO,\"whet\":{\"dry_run\":true}}")
check "dpo dry run: the 50 pairs tokenized" '[ "$(py "$d" "[d[\"tokenization\"][\"examples\"], d[\"trained_tokens_source\"]]")" = "[50, \"tokenized\"]" ]'
r=$(post "{$RFT,\"whet\":{\"dry_run\":true,$ROLLOUT}}")
check "rft dry run: 8 prompts, at most 8 x 4 x 16 rollout tokens" \
  '[ "$(py "$r" "[d[\"tokenization\"][\"examples\"], d[\"rollout_tokens\"], d[\"rollout_tokens_upper_bound\"]]")" = "[8, 512, true]" ]'
j1=$(post "{$DPO}" | json "['id']")
j2=$(post "{$RFT,\"whet\":{$ROLLOUT}}" | json "['id']")
check "dpo job succeeds" '[ "$(finish "$j1")" = succeeded ]'
check "rft job succeeds" '[ "$(finish "$j2")" = succeeded ]'
e1=$(api "http://$http/v1/fine_tuning/jobs/$j1" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["whet"]["estimate"]))')
e2=$(api "http://$http/v1/fine_tuning/jobs/$j2" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["whet"]["estimate"]))')
echo "dpo: estimate $(py "$e1" 'd["trained_tokens"]') trained tokens; actual $(py "$e1" 'd.get("actual")')"
echo "rft: estimate $(py "$e2" '[d["trained_tokens"], d["rollout_tokens"]]') trained, rollout tokens; actual $(py "$e2" 'd.get("actual")')"
check "dpo: the create carried the dry run's count, and the actual trained tokens are the estimate's" \
  '[ "$(py "$e1" "[d[\"trained_tokens_source\"], d[\"trained_tokens\"] == d[\"actual\"][\"trained_tokens\"] > 0]")" = "[\"tokenized\", true]" ]'
check "rft: the actual trained and rollout tokens within the estimate's upper bounds" \
  '[ "$(py "$e2" "0 < d[\"actual\"][\"trained_tokens\"] <= d[\"trained_tokens\"] and 0 < d[\"actual\"][\"rollout_tokens\"] <= d[\"rollout_tokens\"]")" = true ]'
echo "$passes passed, $fails failed"
[ "$fails" = 0 ]
