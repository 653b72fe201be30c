#!/usr/bin/env bash
# Data-parallel training on one node and over two, through the API: `whet up` without executors of its
# own and separate executors of 2 simulated H100s each. With one executor, an SFT job pinned to 2
# devices (whet.min_gpus = whet.max_gpus = 2) runs as one attempt of 2 ranks on that node, one trainer
# process per device; with two, one pinned to 4 runs as one attempt of 4 ranks, 2 per node; both succeed
# with the losses of the same job trained in one process. Then, with a third executor standing by, one
# executor of a running gang is SIGKILLed: the gang stops, restarts from its last checkpoint on the
# remaining nodes, and the job succeeds with unique, increasing checkpoints and an event naming the
# failed rank's node.
set -euo pipefail
: "${WHET_BIN:?set by ctest}" "${WHET_SOURCE_DIR:?set by ctest}"
unset WHET_DATABASE_URL WHET_OBJECT_STORE WHET_JWT_KEY WHET_DATA_DIR
. "$(dirname "$0")/../lib.sh"
fleet gang
nodes_ready() { for _ in $(seq 100); do [ "$(q "SELECT count(*) FROM nodes WHERE state = 'ready'")" = "$1" ] && break; sleep 0.1; done; }
losses() { # losses JOB: the train_loss column of its result file
  local f
  f=$(api "http://$http/v1/fine_tuning/jobs/$1" | json "['result_files'][0]")
  api "http://$http/v1/files/$f/content" | python3 -c 'import csv,sys; print(" ".join(r["train_loss"] for r in csv.DictReader(sys.stdin)))'
}

# A gang on one node: 2 ranks, each its own trainer on its own device.
executor 1
nodes_ready 1
pair=$(create '{"min_gpus":2,"max_gpus":2,"max_steps":12,"checkpoint_every_steps":4}')
check "the job of 2 devices on one node succeeds" '[ "$(finish "$pair")" = succeeded ]'
check "one attempt of 2 ranks, both on that node" \
  '[ "$(q "SELECT a.world_size || '"'"' '"'"' || count(DISTINCT r.node_id) || '"'"' '"'"' || count(*) FROM job_attempts a JOIN gang_ranks r USING (job_id, attempt) WHERE a.job_id = '"'"'$pair'"'"' GROUP BY a.world_size")" = "2 1 2" ] &&
   [ "$(q "SELECT count(*) FROM job_events WHERE job_id = '"'"'$pair'"'"' AND message LIKE '"'"'Job placed on a gang of 2 ranks: node % (ranks 0-1) in dc-1'"'"'")" = 1 ]'
check "each rank ran its own trainer on its own device and joined the gang over Gloo" \
  '[ "$(grep -o "msg=\"starting job\" job=$pair attempt=1 rank=[01]/2 devices=0x[0-9a-f]*" "$dir/e1.log" | sed "s/.*devices=//" | sort | tr "\n" " ")" = "0x1 0x2 " ] &&
   grep -q "rank 0 of 2 joined the gang in .* (gloo)" "$dir/e1/jobs/$pair-1-rank0/trainer.log" &&
   grep -q "rank 1 of 2 joined the gang in .* (gloo)" "$dir/e1/jobs/$pair-1-rank1/trainer.log"'
check "both ranks metered" '[ "$(q "SELECT count(*) FROM usage_records WHERE job_id = '"'"'$pair'"'"' AND device_seconds > 0")" = 2 ]'

executor 2
nodes_ready 2
gang=$(create '{"min_gpus":4,"max_gpus":4,"max_steps":12,"checkpoint_every_steps":4}')
check "the gang's job succeeds" '[ "$(finish "$gang")" = succeeded ]'
check "one attempt of 4 ranks, 2 on each node" \
  '[ "$(q "SELECT a.world_size || '"'"' '"'"' || count(DISTINCT r.node_id) FROM job_attempts a JOIN gang_ranks r USING (job_id, attempt) WHERE a.job_id = '"'"'$gang'"'"' GROUP BY a.world_size")" = "4 2" ]'
check "each rank metered" '[ "$(q "SELECT count(*) FROM usage_records WHERE job_id = '"'"'$gang'"'"' AND device_seconds > 0")" = 4 ]'
one=$(create '{"max_gpus":1,"max_steps":12,"checkpoint_every_steps":4}')
check "the same job in one process succeeds" '[ "$(finish "$one")" = succeeded ]'
l2=$(losses "$pair") l4=$(losses "$gang") l1=$(losses "$one")
echo "  2 ranks:   $l2"
echo "  4 ranks:   $l4"
echo "  1 process: $l1"
# match A B TOLERANCE: 12 losses each, equal within the relative tolerance
match() { python3 -c "import sys; a, b = [list(map(float, s.split())) for s in sys.argv[1:3]]; sys.exit(not (len(a) == len(b) == 12 and all(abs(x - y) <= float(sys.argv[3]) * abs(y) for x, y in zip(a, b))))" "$@"; }
check "the losses of 2 ranks on one node match one process (relative 1e-5)" 'match "$l2" "$l1" 1e-5'
check "the losses of 4 ranks match one process (relative 1e-4)" 'match "$l4" "$l1" 1e-4'

# A gang loses a node mid-run and restarts on the remaining ones.
executor 3
nodes_ready 3
long=$(create '{"min_gpus":4,"max_gpus":4,"max_steps":40,"checkpoint_every_steps":5}')
for _ in $(seq 3000); do [ "$(q "SELECT count(*) FROM checkpoints WHERE job_id = '$long'")" -ge 1 ] && break; sleep 0.1; done
victim=
for n in 1 2 3; do ls -d "$dir/e$n/jobs/$long-1-rank"* >/dev/null 2>&1 && victim=$n; done
victim_node=$(cat "$dir/e${victim:-1}/node_id")
check "the gang checkpointed before a node is killed" '[ -n "$victim" ] && [ "$(q "SELECT status FROM jobs WHERE id = '"'"'$long'"'"'")" = running ]'
eval "kill -9 \$e$victim"
check "the job still succeeds" '[ "$(finish "$long")" = succeeded ]'
check "the gang restarted from a checkpoint" \
  '[ "$(q "SELECT count(*) FROM job_attempts WHERE job_id = '"'"'$long'"'"' AND resume_step > 0 AND outcome = '"'"'succeeded'"'"'")" = 1 ]'
check "an event names the failed node" \
  '[ "$(q "SELECT count(*) FROM job_events WHERE job_id = '"'"'$long'"'"' AND message LIKE '"'"'Rank % of 4 on node % failed: %'"'"'")" -ge 1 ] &&
   [ "$(q "SELECT count(*) FROM gang_ranks WHERE job_id = '"'"'$long'"'"' AND node_id = '"'"'$victim_node'"'"' AND outcome = '"'"'lost'"'"'")" -ge 1 ]'
check "checkpoints unique and increasing" \
  '[ "$(q "SELECT count(*) FROM (SELECT step_number, lag(step_number) OVER (ORDER BY created_at, step_number) AS prev FROM checkpoints WHERE job_id = '"'"'$long'"'"') c WHERE prev >= step_number")" = 0 ] &&
   [ "$(q "SELECT count(*) - count(DISTINCT step_number) FROM checkpoints WHERE job_id = '"'"'$long'"'"'")" = 0 ]'

[ $fails -eq 0 ] || tail -n 30 "$dir"/e*.log "$dir/up.err" >&2
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
