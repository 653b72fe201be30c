#!/usr/bin/env bash
# Data-parallel training over two nodes, through the API: `whet up` without executors of its own and
# separate executors of 2 simulated H100s each. An SFT job pinned to 4 devices (whet.min_gpus =
# whet.max_gpus = 4) runs as one attempt of 4 ranks, 2 per node, and succeeds with the losses of the
# same job trained in one process; then, with a third executor standing by, one executor of a running
# gang is SIGKILLed: the gang stops, restarts from its last checkpoint on the remaining nodes, and the
# job succeeds with unique, increasing checkpoints and an event naming the failed rank's node.
set -euo pipefail
: "${WHET_BIN:?set by ctest}" "${WHET_SOURCE_DIR:?set by ctest}"
unset WHET_DATABASE_URL WHET_OBJECT_STORE WHET_JWT_KEY WHET_DATA_DIR
. "$(dirname "$0")/../lib.sh"
fleet gang
executor 1; executor 2
for _ in $(seq 100); do [ "$(q "SELECT count(*) FROM nodes WHERE state = 'ready'")" = 2 ] && break; sleep 0.1; done
losses() { # losses JOB: the train_loss column of its result file
  local f
  f=$(api "http://$http/v1/fine_tuning/jobs/$1" | json "['result_files'][0]")
  api "http://$http/v1/files/$f/content" | python3 -c 'import csv,sys; print(" ".join(r["train_loss"] for r in csv.DictReader(sys.stdin)))'
}

gang=$(create '{"min_gpus":4,"max_gpus":4,"max_steps":12,"checkpoint_every_steps":4}')
check "the gang's job succeeds" '[ "$(finish "$gang")" = succeeded ]'
check "one attempt of 4 ranks, 2 on each node" \
  '[ "$(q "SELECT a.world_size || '"'"' '"'"' || count(DISTINCT r.node_id) FROM job_attempts a JOIN gang_ranks r USING (job_id, attempt) WHERE a.job_id = '"'"'$gang'"'"' GROUP BY a.world_size")" = "4 2" ]'
check "each rank metered" '[ "$(q "SELECT count(*) FROM usage_records WHERE job_id = '"'"'$gang'"'"' AND device_seconds > 0")" = 4 ]'
one=$(create '{"max_gpus":1,"max_steps":12,"checkpoint_every_steps":4}')
check "the same job in one process succeeds" '[ "$(finish "$one")" = succeeded ]'
l4=$(losses "$gang") l1=$(losses "$one")
echo "  4 ranks:   $l4"
echo "  1 process: $l1"
check "the losses of 4 ranks match one process (relative 1e-4)" \
  'python3 -c "import sys; a, b = [list(map(float, s.split())) for s in sys.argv[1:]]; sys.exit(not (len(a) == len(b) == 12 and all(abs(x - y) <= 1e-4 * abs(y) for x, y in zip(a, b))))" "$l4" "$l1"'

# A gang loses a node mid-run and restarts on the remaining ones.
executor 3
for _ in $(seq 100); do [ "$(q "SELECT count(*) FROM nodes WHERE state = 'ready'")" = 3 ] && break; sleep 0.1; done
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
