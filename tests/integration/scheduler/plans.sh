#!/usr/bin/env bash
# The leader's cycle reads a bounded number of rows whatever the history holds and however many jobs
# run (issue 15): with tens of thousands of finished jobs, ended attempts, sent commands and
# checkpoints, 1000 running jobs, and a few that wait or were asked to pause or cancel, the scheduler
# runs a few cycles with auto_explain loaded into its sessions and sent to it as warnings (libpq prints
# them on its stderr; whet_pg_connect lets warnings through): JSON with row counts, nested statements
# (triggers, functions) included. No scan of a big table may be sequential or read more than
# READ_BOUND rows, except the leader's first read of every running attempt (running.c); the cycle's
# hot statements (the running attempts' and the nodes' changes, pause and cancel, the placement batch)
# must have run.
# And the running attempts' changes are read whatever the order in which their transactions commit.
. "$(dirname "$0")/lib.sh" plans
READ_BOUND=500
HISTORY=20000 RUNNING=1000

t1=tenant-acme
q "INSERT INTO tenants (id, name) VALUES ('$t1', 'acme');
   INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
     VALUES ('tiny', 'LlamaForCausalLM', 1000, 'models/tiny', 'abc', '{}');
   INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key)
     VALUES ('file-1', '$t1', 'fine-tune', 'train.jsonl', 10, 'x', 'files/file-1');
   INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms)
     VALUES ('node-1', 'dc-a', 'dc-a', '[{\"type\":\"H100\",\"memory_mib\":81920,\"index\":0}]', 'H100', 8, 64000,
             512000, 600000);
   -- The history: jobs that finished (half of them cancelled or paused on request), each with an ended
   -- attempt, its START and a checkpoint.
   INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, attempt, desired)
     SELECT 'ftjob-h' || i, '$t1', 'tiny', 'tiny', 'file-1', '{}', 1,
            CASE i % 3 WHEN 0 THEN 'succeeded' WHEN 1 THEN 'cancelled' ELSE 'paused' END, 1,
            CASE i % 3 WHEN 0 THEN 'run' WHEN 1 THEN 'cancel' ELSE 'pause' END
     FROM generate_series(1, $HISTORY) i;
   INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, gpu_mask, device_type, ended_at, outcome)
     SELECT 'ftjob-h' || i, 1, '$t1', 'node-1', 1, 'H100', extract(epoch FROM now()), 'stopped' FROM generate_series(1, $HISTORY) i;
   INSERT INTO node_commands (node_id, job_id, attempt, kind, delivered_at)
     SELECT 'node-1', 'ftjob-h' || i, 1, 'start', extract(epoch FROM now()) FROM generate_series(1, $HISTORY) i;
   INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint, metrics, object_prefix, bytes)
     SELECT 'ckpt-h' || i, '$t1', 'ftjob-h' || i, 10, 'ft:tiny:acme::ftjob-h' || i || ':ckpt-step-10', '{}',
            'jobs/ftjob-h' || i || '/ckpt-10', 1 FROM generate_series(1, $HISTORY) i;
   -- Now: a full fleet of 125 nodes running 1000 jobs; on node-1, two running (one asked to pause), one
   -- queued and asked to cancel, three waiting.
   INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms)
     SELECT 'node-r' || n, 'dc-a', 'dc-a', '[{\"type\":\"H100\",\"memory_mib\":81920,\"index\":0}]', 'H100', 8, 64000,
            512000, 600000 FROM generate_series(1, $RUNNING / 8) n;
   INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, attempt, priority)
     SELECT 'ftjob-run' || i, '$t1', 'tiny', 'tiny', 'file-1', '{}', 1, 'running', 1, 100 FROM generate_series(0, $RUNNING - 1) i;
   INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, gpu_mask, device_type)
     SELECT 'ftjob-run' || i, 1, '$t1', 'node-r' || (i / 8 + 1), 1 << (i % 8), 'H100' FROM generate_series(0, $RUNNING - 1) i;
   INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, attempt, desired) VALUES
     ('ftjob-r1', '$t1', 'tiny', 'tiny', 'file-1', '{}', 1, 'running', 1, 'run'),
     ('ftjob-r2', '$t1', 'tiny', 'tiny', 'file-1', '{}', 1, 'running', 1, 'pause'),
     ('ftjob-c1', '$t1', 'tiny', 'tiny', 'file-1', '{}', 1, 'queued', 0, 'cancel');
   INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, gpu_mask, device_type) VALUES
     ('ftjob-r1', 1, '$t1', 'node-1', 1, 'H100'), ('ftjob-r2', 1, '$t1', 'node-1', 2, 'H100');
   INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed)
     SELECT 'ftjob-q' || i, '$t1', 'tiny', 'tiny', 'file-1', '{\"type\":\"supervised\"}', 1 FROM generate_series(1, 3) i" >/dev/null
q "VACUUM ANALYZE" # as autovacuum would have by now: statistics, and the visibility map index-only scans use

PGOPTIONS='-c session_preload_libraries=auto_explain -c auto_explain.log_min_duration=0 -c auto_explain.log_format=json
           -c auto_explain.log_analyze=on -c auto_explain.log_timing=off -c auto_explain.log_nested_statements=on
           -c auto_explain.log_level=warning' \
  "$WHET_BIN" scheduler --lease-ms 600000 >"$work/sched.log" 2>&1 & pids+=($!)
check "the waiting jobs are placed" 'wait_for 20 "SELECT count(*) FROM job_attempts WHERE job_id LIKE '"'"'ftjob-q%'"'"'" 3'
check "the running job asked to pause gets its STOP" \
  'wait_for 10 "SELECT count(*) FROM node_commands WHERE job_id = '"'"'ftjob-r2'"'"' AND kind = '"'"'stop'"'"'" 1'
check "the queued job asked to cancel is cancelled" 'wait_for 10 "SELECT status FROM jobs WHERE id = '"'"'ftjob-c1'"'"'" cancelled'

# A change that commits late is not missed: a transaction takes node-1's free devices for a running
# attempt and commits only after cycles have read later changes (a checkpoint of another job); a job
# queued after it must then find no device.
free=$(q "SELECT 255 & ~coalesce(bit_or(gpu_mask), 0) FROM job_attempts WHERE node_id = 'node-1' AND ended_at IS NULL")
psql -qtAX "$WHET_DATABASE_URL" >/dev/null <<SQL &
BEGIN;
INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, attempt, priority)
  VALUES ('ftjob-late', '$t1', 'tiny', 'tiny', 'file-1', '{}', 1, 'running', 1, 100);
INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, gpu_mask, device_type) VALUES ('ftjob-late', 1, '$t1', 'node-1', $free, 'H100');
SELECT pg_sleep(3);
COMMIT;
SQL
late=$!
sleep 1
q "INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint, object_prefix)
     VALUES ('ckpt-r1', '$t1', 'ftjob-r1', 1, 'ft:tiny:acme::ftjob-r1:ckpt-step-1', 'jobs/ftjob-r1/ckpt-1')"
wait "$late"
q "INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed)
     VALUES ('ftjob-after', '$t1', 'tiny', 'tiny', 'file-1', '{\"type\":\"supervised\"}', 1); NOTIFY whet_jobs"
check "a late commit is read: the job queued after it waits, with a reason" \
  'wait_for 10 "SELECT (wait_reason IS NOT NULL)::text FROM jobs WHERE id = '"'"'ftjob-after'"'"'" true &&
   [ "$(q "SELECT count(*) FROM job_attempts WHERE job_id = '"'"'ftjob-after'"'"'")" = 0 ]'
sleep 2 # a few more cycles, with the changes above read from running_changes
kill "${pids[@]}"
wait 2>/dev/null || true

# Every plan in the log: the statement, and each scan of a big table that is sequential or reads more
# than the bound (rows returned and filtered out, times loops).
# (running_changes is not one of the big tables: it holds the changes since the previous cycle, and the
# history's, made before the scheduler started, are all read once; the first cycle reads every running
# attempt, once: running.c.)
python3 "$(dirname "$0")/plan_check.py" "$work/sched.log" "$READ_BOUND" jobs,job_attempts,node_commands,checkpoints,job_events \
  'SELECT a.job_id, a.attempt' >"$work/plans.txt"
echo "  $(wc -l <"$work/plans.txt") plans logged"
grep '^BAD' "$work/plans.txt" | sort | uniq -c | sed 's/^/  /' >&2 || true
check "plans logged" '[ "$(wc -l <"$work/plans.txt")" -gt 20 ]'
check "no cycle statement scans a big table sequentially or reads past $READ_BOUND rows" '! grep -q "^BAD" "$work/plans.txt"'
check "the running attempts read as changes" 'grep -q "^ok WITH ch AS (SELECT DISTINCT job_id FROM running_changes" "$work/plans.txt"'
check "the nodes read as changes" 'grep -q "^ok WITH ch AS (SELECT DISTINCT node_id FROM node_changes" "$work/plans.txt"'
check "pause and cancel requests read" \
  'grep -q "^ok INSERT INTO node_commands (node_id, job_id, attempt, kind, grace_ms, reason) SELECT n.node_id" "$work/plans.txt"'
check "placements written in one batch" 'grep -q "^ok WITH p AS (SELECT \* FROM jsonb_to_recordset" "$work/plans.txt"'

[ $fails -eq 0 ] || tail -n 15 "$work/sched.log" >&2
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
