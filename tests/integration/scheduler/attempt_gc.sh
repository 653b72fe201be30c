#!/usr/bin/env bash
# attempt_gc.sh - the garbage collection of ended attempts' files (migration 0050, scheduler/service/attempt_gc.c)
# against a real PostgreSQL, the real scheduler and a file:// object store. Attempts are made as fencing makes
# them (scheduler_fencing and e2e_partition show the real thing): a node's attempt declared lost while its
# trainer ran on and uploaded a checkpoint whose report was refused and a final model that was refused; a
# late success that was taken; an attempt stopped before its first checkpoint. Within the grace period
# nothing is decided; after it, what nothing references goes, whole prefixes and the unreported parts of
# referenced ones, and everything referenced stays: checkpoints (also one a paused job continues from), the
# final model and its result file, a running attempt, a lost attempt whose late success may still be taken
# (until a newer attempt checkpoints), and the layout from before 0046.
. "$(dirname "$0")/lib.sh" attempt_gc
m1=$(free_port)
# The object store: a file:// one, or with `s3` an S3 server's (tests/run.sh starts s3rver; it takes requests
# unsigned, so curl puts and lists). stored_key KEY stores an object; has_files PREFIX: one lies under it.
if [ "${1:-}" = s3 ]; then
  : "${WHET_TEST_S3_ENDPOINT:?set by tests/run.sh}"
  root="gc-$$-$RANDOM"
  export WHET_OBJECT_STORE="s3://whet-test/$root" WHET_S3_ENDPOINT="$WHET_TEST_S3_ENDPOINT"
  export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
  stored_key() { head -c 1000 /dev/urandom | curl -fsS -T - "$WHET_S3_ENDPOINT/whet-test/$root/$1" >/dev/null; }
  has_files() { curl -fsS "$WHET_S3_ENDPOINT/whet-test?list-type=2&prefix=$root/$1" | grep "<Key>$root/$1" >/dev/null; }
else
  stored_key() { mkdir -p "$(dirname "$work/objects/$1")" && head -c 1000 /dev/urandom >"$work/objects/$1"; }
  has_files() { [ -n "$(find "$work/objects/$1" -type f 2>/dev/null)" ]; }
fi
stored() { stored_key "$1/model.safetensors"; } # stored PREFIX: a folder of one file
seed_tenant
q "INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms, state)
     VALUES ('n-a', 'dc-a', 'dc-a', '[]', 'H100', 1, 1000, 1000, 1000, 'lost'),
            ('n-b', 'dc-b', 'dc-b', '[]', 'H100', 1, 1000, 1000, 1000, 'lost');"
# job(ID, STATUS, ATTEMPTS [, INIT_CHECKPOINT]): a job with attempts 1..ATTEMPTS, all running until ended below.
job() {
  q "INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, attempt, init_checkpoint)
     VALUES ('$1', 't1', 'tiny', 'tiny', 'file-1', '{\"type\":\"supervised\"}', 1, '$2', $3, ${4:-NULL});
     INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, device_type)
     SELECT '$1', a, 't1', CASE WHEN a % 2 = 1 THEN 'n-a' ELSE 'n-b' END, 'H100' FROM generate_series(1, $3) a"
}
# ended(JOB, ATTEMPT, OUTCOME): the attempt ends as the scheduler ends one (a lost lease, a FinishJob).
ended() { q "UPDATE job_attempts SET ended_at = extract(epoch FROM clock_timestamp()), outcome = '$3'
             WHERE job_id = '$1' AND attempt = $2"; }
# ckpt(JOB, ATTEMPT, STEP): the attempt's checkpoint, reported and recorded, its files stored.
ckpt() {
  local prefix="jobs/$1/attempt-$2/checkpoints/step-$3"
  q "INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint, object_prefix, attempt)
     VALUES ('ck-$1-$3', 't1', '$1', $3, 'ft:$1:ckpt-step-$3', '$prefix', $2)"
  stored "$prefix"
}

# job-f (paused) ran attempt 1 on n-a, declared lost: its trainer ran on, uploaded step 20 (report refused)
# and a final model with its results.csv (refused: attempt 2 had checkpointed). Attempt 2, lost too,
# recorded step 10 and uploaded step 15 unreported. Attempt 3 runs, its step 30 uploading.
job job-f paused 3
stored jobs/job-f/attempt-1/checkpoints/step-20
stored jobs/job-f/attempt-1/final
stored_key jobs/job-f/attempt-1/results.csv
ended job-f 1 lost
ckpt job-f 2 10
stored jobs/job-f/attempt-2/checkpoints/step-15
ended job-f 2 lost
stored jobs/job-f/attempt-3/checkpoints/step-30
stored jobs/job-f/checkpoints/step-1 # the layout from before 0046
# job-g (paused): attempt 1 lost with step 5 uploaded unreported; attempt 2 runs and has not checkpointed, so
# attempt 1's late success may still be taken.
job job-g paused 2
stored jobs/job-g/attempt-1/checkpoints/step-5
ended job-g 1 lost
# job-h succeeded by attempt 1's late success (its final model at attempt-1/final); attempt 2 was cancelled
# by it after uploading part of step 5.
job job-h running 2
stored jobs/job-h/attempt-1/final
stored jobs/job-h/attempt-2/checkpoints/step-5
ended job-h 1 lost
ended job-h 2 cancelled
q "UPDATE jobs SET status = 'succeeded', final_object_prefix = 'jobs/job-h/attempt-1/final' WHERE id = 'job-h'"
# job-k was cancelled during attempt 1, before its first checkpoint completed.
job job-k running 1
stored jobs/job-k/attempt-1/checkpoints/step-2
ended job-k 1 cancelled
q "UPDATE jobs SET status = 'cancelled' WHERE id = 'job-k'"
# job-i: attempt 1 preempted (stopped) after step 3, which paused job-j continues from; attempt 2 succeeded,
# with its final model and result file.
job job-i running 2
ckpt job-i 1 3
ended job-i 1 stopped
stored jobs/job-i/attempt-2/final
stored_key jobs/job-i/attempt-2/results.csv
q "INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key)
     VALUES ('file-r', 't1', 'fine-tune-results', 'step_metrics.csv', 10, 'x', 'jobs/job-i/attempt-2/results.csv');
   UPDATE jobs SET result_files = '[\"file-r\"]' WHERE id = 'job-i'"
ended job-i 2 succeeded
q "UPDATE jobs SET status = 'succeeded', final_object_prefix = 'jobs/job-i/attempt-2/final' WHERE id = 'job-i'"
job job-j paused 0 "'ck-job-i-3'"

check "ended attempts are queued, not searched for" \
  '[ "$(q "SELECT string_agg(job_id || '"':'"' || attempt, '"','"' ORDER BY job_id, attempt) FROM attempt_gc_queue")" = \
     job-f:1,job-f:2,job-g:1,job-h:1,job-h:2,job-i:1,job-i:2,job-k:1 ]'
check "within the grace period nothing is decided" \
  '[ "$(q "SELECT looked_at || '"'/'"' || doomed FROM whet_attempt_gc(3600, 100)")" = 0/0 ] &&
   [ "$(q "SELECT count(*) FROM attempt_gc_queue")" = 8 ]'

"$WHET_BIN" scheduler --attempt-gc-grace 1 --metrics "127.0.0.1:$m1" >"$work/s1.log" 2>&1 & pids+=($!)
removed() { [ "$(metric $m1 whet_scheduler_attempt_objects_removed_total 2>/dev/null)" = "$1" ]; }
check "after the grace period: five unreferenced objects removed, the queue empty" \
  'eventually 30 "removed 5" && wait_for 10 "SELECT count(*) FROM attempt_gc_queue" 0 &&
   wait_for 10 "SELECT count(*) FROM attempt_gc_removals" 0'
check "a lost attempt's refused checkpoint, final model and result file go (a newer attempt had checkpointed)" \
  '! has_files jobs/job-f/attempt-1'
check "the attempt cancelled by a late success goes; the late success's final model stays" \
  '! has_files jobs/job-h/attempt-2 && has_files jobs/job-h/attempt-1/final'
check "a job cancelled before its first checkpoint: its partial upload goes" '! has_files jobs/job-k/attempt-1'
check "a lost attempt with a recorded checkpoint stays whole (and its late success is still possible)" \
  'has_files jobs/job-f/attempt-2/checkpoints/step-10 && has_files jobs/job-f/attempt-2/checkpoints/step-15'
check "a running attempt's in-flight upload stays" 'has_files jobs/job-f/attempt-3/checkpoints/step-30'
check "the layout from before 0046 is not touched" 'has_files jobs/job-f/checkpoints/step-1'
check "a lost attempt whose late success may still be taken stays" 'has_files jobs/job-g/attempt-1/checkpoints/step-5'
check "a checkpoint a paused job continues from, a final model and its result file stay" \
  'has_files jobs/job-i/attempt-1/checkpoints/step-3 && has_files jobs/job-i/attempt-2/final &&
   has_files jobs/job-i/attempt-2/results.csv'
check "logged" 'grep -q "ended attempts'"'"' unreferenced files removed" "$work/s1.log"'

# job-g's attempt 2 records its first checkpoint: attempt 1 can no longer succeed late, and goes.
ckpt job-g 2 8
check "a newer attempt's first checkpoint: the lost attempt before it goes" \
  'eventually 30 "removed 6" && ! has_files jobs/job-g/attempt-1 && has_files jobs/job-g/attempt-2/checkpoints/step-8'
# job-f's attempt 3 records the step it was uploading (the in-flight upload landed): attempt 2 can no longer
# succeed late, and its unreported step 15 goes while its step 10 stays. A trainer of the fenced attempt 1
# still running uploads once more; then the job ends: every attempt is looked at again.
ckpt job-f 3 30
stored jobs/job-f/attempt-1/checkpoints/step-40
ended job-f 3 cancelled
q "UPDATE jobs SET status = 'cancelled' WHERE id = 'job-f'"
check "job-f ends: the fenced attempts' unreported uploads go, their recorded checkpoints stay" \
  'wait_for 30 "SELECT count(*) FROM attempt_gc_queue WHERE job_id = '"'job-f'"'" 0 && eventually 30 "removed 8" &&
   ! has_files jobs/job-f/attempt-1 && ! has_files jobs/job-f/attempt-2/checkpoints/step-15 &&
   has_files jobs/job-f/attempt-2/checkpoints/step-10 && has_files jobs/job-f/attempt-3/checkpoints/step-30 &&
   has_files jobs/job-f/checkpoints/step-1'
check "no removal failed" '[ "$(metric $m1 whet_scheduler_attempt_gc_failures_total)" = 0 ] &&
  [ "$(metric $m1 "whet_scheduler_maintenance_failures_total{pass=\"attempt_gc\"}")" = 0 ]'

echo "attempt_gc: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
