#!/usr/bin/env bash
# Elastic jobs through the API: `whet up` without executors of its own, and executors of 2 simulated
# H100s each. A job with whet.min_gpus 2 and whet.max_gpus 4 starts on the one node there is, as a gang
# of 2 ranks (one trainer process per device); a second node joins and the job grows to a gang of 4
# ranks over both (checkpoint, stop, restart at the new size, an event that says why); a job of higher
# priority that needs 2 devices arrives and the elastic job shrinks back to 2 ranks on one node to make
# room, then grows again once that job is done. Its training goes on across every resize: each attempt
# resumes from the checkpoint the last one wrote, the checkpoints' steps only increase, and no step is
# trained twice; every rank of every attempt that ran to a checkpoint joined its gang (Gloo).
set -euo pipefail
: "${WHET_BIN:?set by ctest}" "${WHET_SOURCE_DIR:?set by ctest}"
unset WHET_DATABASE_URL WHET_OBJECT_STORE WHET_JWT_KEY WHET_DATA_DIR
. "$(dirname "$0")/../lib.sh"
fleet elastic
# until SECONDS QUERY VALUE: polls the query until it prints the value
until_is() { for _ in $(seq $(($1 * 5))); do [ "$(q "$2")" = "$3" ] && return 0; sleep 0.2; done; return 1; }
nodes_ready() { until_is 20 "SELECT count(*) FROM nodes WHERE state = 'ready'" "$1"; }
# devices JOB: the devices its running attempt holds (gang ranks, or the one process's mask), "" if none
devices() {
  q "SELECT CASE WHEN a.world_size > 1 THEN (SELECT count(*) FROM gang_ranks r WHERE r.job_id = a.job_id AND r.attempt = a.attempt)
            ELSE length(replace(a.gpu_mask::bit(16)::text, '0', '')) END
     FROM job_attempts a WHERE a.job_id = '$1' AND a.ended_at IS NULL"
}

# ranks_joined JOB ATTEMPT WORLD: each of the WORLD ranks' trainers (their logs in the executors' job dirs)
# joined a gang of WORLD
ranks_joined() {
  local r
  for r in $(seq 0 $(($3 - 1))); do
    grep -qs "rank $r of $3 joined the gang" "$dir"/e*/jobs/"$1-$2-rank$r"/trainer.log || return 1
  done
}
# nodes_of JOB ATTEMPT: how many nodes its ranks ran on
nodes_of() { q "SELECT count(DISTINCT node_id) FROM gang_ranks WHERE job_id = '$1' AND attempt = $2"; }

executor 1
nodes_ready 1
# Long enough to outlast every resize on any machine; the test cancels it at its end.
elastic=$(create '{"min_gpus":2,"max_gpus":4,"max_steps":100000,"checkpoint_every_steps":5}')
check "the elastic job starts on the 2 devices there are" 'until_is 60 "$(echo "SELECT 1 FROM jobs WHERE id = '"'"'$elastic'"'"' AND status = '"'"'running'"'"'")" 1 && [ "$(devices "$elastic")" = 2 ]'
until_is 60 "SELECT count(*) > 0 FROM checkpoints WHERE job_id = '$elastic'" t || true

executor 2
nodes_ready 2
check "a second node joins: the job grows to a gang of 4 ranks" \
  'for _ in $(seq 300); do [ "$(devices "$elastic")" = 4 ] && break; sleep 0.2; done; [ "$(devices "$elastic")" = 4 ]'
check "an event says it grew from 2 to 4 devices" \
  '[ "$(q "SELECT count(*) FROM job_events WHERE job_id = '"'"'$elastic'"'"' AND message LIKE '"'"'The job grows from 2 to 4 devices into idle capacity%'"'"' AND (data->>'"'"'to_gpus'"'"')::int = 4")" = 1 ]'
check "the gang resumed from a checkpoint" \
  'until_is 60 "SELECT count(*) > 0 FROM checkpoints c JOIN job_attempts a ON a.job_id = c.job_id WHERE c.job_id = '"'"'$elastic'"'"' AND a.world_size = 4 AND a.resume_step > 0 AND c.created_at > a.started_at" t'

high=$(create '{"priority":50,"min_gpus":2,"max_gpus":2,"max_steps":12,"checkpoint_every_steps":4}')
check "a job of higher priority arrives: the elastic job shrinks to 2 devices" \
  'for _ in $(seq 300); do [ "$(devices "$elastic")" = 2 ] && break; sleep 0.2; done; [ "$(devices "$elastic")" = 2 ]'
check "an event says it shrank for that job" \
  '[ "$(q "SELECT count(*) FROM job_events WHERE job_id = '"'"'$elastic'"'"' AND message LIKE '"'"'The job shrinks from 4 to 2 devices%'"'"' AND data->>'"'"'for_job'"'"' = '"'"'$high'"'"'")" = 1 ]'
check "the job of higher priority runs beside it and succeeds" 'until_is 120 "SELECT status FROM jobs WHERE id = '"'"'$high'"'"'" succeeded'
check "nobody waits any more: the elastic job grows back to 4" \
  'for _ in $(seq 300); do [ "$(devices "$elastic")" = 4 ] && break; sleep 0.2; done; [ "$(devices "$elastic")" = 4 ]'

api -X POST "http://$http/v1/fine_tuning/jobs/$elastic/cancel" >/dev/null
until_is 60 "SELECT status FROM jobs WHERE id = '$elastic'" cancelled || true
check "its attempts were gangs of 2, 4, 2, 4 ranks, each resuming where the last one checkpointed" \
  '[ "$(q "SELECT string_agg(world_size::text, '"'"' '"'"' ORDER BY attempt) FROM job_attempts WHERE job_id = '"'"'$elastic'"'"'")" = "2 4 2 4" ] &&
   [ "$(q "SELECT count(*) FROM job_attempts a WHERE job_id = '"'"'$elastic'"'"' AND attempt > 1 AND resume_step <= 0")" = 0 ]'
check "the gangs of 2 ran on one node each, the gang of 4 over both" \
  '[ "$(nodes_of "$elastic" 1) $(nodes_of "$elastic" 2) $(nodes_of "$elastic" 3)" = "1 2 1" ]'
check "every rank of the first three attempts ran its own trainer, which joined the gang" \
  'ranks_joined "$elastic" 1 2 && ranks_joined "$elastic" 2 4 && ranks_joined "$elastic" 3 2'
check "checkpoints unique and increasing across the resizes" \
  '[ "$(q "SELECT count(*) FROM (SELECT step_number, lag(step_number) OVER (ORDER BY created_at, step_number) AS prev FROM checkpoints WHERE job_id = '"'"'$elastic'"'"') c WHERE prev >= step_number")" = 0 ] &&
   [ "$(q "SELECT count(*) - count(DISTINCT step_number) FROM checkpoints WHERE job_id = '"'"'$elastic'"'"'")" = 0 ]'
q "SELECT attempt, world_size, resume_step, round((coalesce(ended_at, extract(epoch FROM now())) - started_at)::numeric, 1) AS seconds, outcome FROM job_attempts WHERE job_id = '$elastic' ORDER BY attempt" | sed 's/^/  attempt: /'

[ $fails -eq 0 ] || tail -n 30 "$dir"/e*.log "$dir/up.err" >&2
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
