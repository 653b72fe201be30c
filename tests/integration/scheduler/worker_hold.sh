#!/usr/bin/env bash
# worker_hold.sh - a model worker's device takes no job, even when the cycle reads the workers while an
# attempt still runs there and the running attempts after it ended (scheduler/service/cycle.c,
# hold_workers_devices). The real scheduler against a real PostgreSQL; a node of one device that only the
# database knows (nothing runs what is placed on it). Job a runs there; a worker is placed on its device
# (as a preemption for a model worker does). A session locks a row the cycle's read of the running
# attempts deletes, so the cycle stops between the two reads; meanwhile the attempt ends and the job is
# queued again (as the victim's FinishJob does); then the lock goes. The job must not be placed on the
# worker's device (before the fix it was, in that very cycle: e2e_serve_scale_zero saw the job and a
# worker start on one device); once the worker's row goes, it is. Then a worker wanted while every device is
# taken preempts a job that holds its device alone, never a member of a co-training group.
. "$(dirname "$0")/lib.sh" workerhold
m1=$(free_port)
seed_tenant
q "INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms, last_heartbeat)
     VALUES ('n1', 'dc-a', 'dc-a', '[{\"type\":\"H100\",\"memory_mib\":81920,\"index\":0}]', 'H100', 1, 8000, 65536,
             3600000, extract(epoch FROM clock_timestamp()));
   INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed)
     VALUES ('ftjob-a', 't1', 'tiny', 'tiny', 'file-1', '{\"type\":\"supervised\"}', 1);"
"$WHET_BIN" scheduler --lease-ms 3000 --metrics "127.0.0.1:$m1" >"$work/s1.log" 2>&1 & pids+=($!)
running_on_n1="SELECT count(*) FROM job_attempts WHERE node_id = 'n1' AND ended_at IS NULL"
check "job a is placed on the node's one device" "wait_for 30 \"$running_on_n1\" 1"

# A worker on that device, stopping (its deployment is idle): it holds the device until its row goes.
q "INSERT INTO serving_deployments (base_model, last_request_at) VALUES ('tiny', 0);
   INSERT INTO model_workers (id, base_model, pool, node_id, device_index, state) VALUES ('worker-1', 'tiny', '', 'n1', 0, 'stopping')"
# A row of running_changes that a later cycle deletes, locked by a session until it is terminated.
q "INSERT INTO running_changes (job_id) VALUES ('marker')"
PGAPPNAME=holder psql -qtAX "$WHET_DATABASE_URL" >/dev/null 2>&1 <<<"BEGIN;
  SELECT 1 FROM running_changes WHERE job_id = 'marker' FOR UPDATE; SELECT pg_sleep(600);" &
pids+=($!)
wait_for 30 "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'holder' AND query LIKE '%pg_sleep%'" 1
cycle_waits="SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%DELETE FROM running_changes%'"
check "a cycle waits on the lock between its read of the workers and that of the running attempts" \
  "wait_for 30 \"$cycle_waits\" 1"
q "BEGIN; UPDATE job_attempts SET ended_at = whet_now() WHERE job_id = 'ftjob-a';
   UPDATE jobs SET status = 'queued' WHERE id = 'ftjob-a'; COMMIT"
cycles=$(metric $m1 whet_scheduler_cycle_duration_seconds_count)
q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'holder'" >/dev/null
cycled() { [ "$(metric $m1 whet_scheduler_cycle_duration_seconds_count)" -ge $((cycles + 3)) ]; }
check "three cycles after the lock went" 'eventually 30 cycled'
not_placed() { [ "$(q "$running_on_n1")" = 0 ] && [ "$(q "SELECT status FROM jobs WHERE id = 'ftjob-a'")" = queued ]; }
check "job a is not placed on the worker's device" not_placed
q "DELETE FROM model_workers"
check "once the worker's row goes, job a is placed there again" \
  "wait_for 30 \"SELECT count(*) || '/' || max(attempt) FROM job_attempts WHERE node_id = 'n1' AND ended_at IS NULL\" 1/2"

# A worker wanted with every device taken preempts a job that holds its device alone: job a on n1, not a
# member of the co-training group that shares n2's device (both newer than job a, so the newest-first
# choice would take one of them: stopping it frees no device, and the worker would wait for the group).
q "INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms, last_heartbeat)
     VALUES ('n2', 'dc-a', 'dc-a', '[{\"type\":\"H100\",\"memory_mib\":81920,\"index\":0}]', 'H100', 1, 8000, 65536,
             3600000, extract(epoch FROM clock_timestamp()));
   INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, attempt, node_id)
     SELECT 'ftjob-g' || i, 't1', 'tiny', 'tiny', 'file-1', '{\"type\":\"supervised\"}', 1, 'running', 1, 'n2'
     FROM generate_series(1, 2) i;
   INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, gpu_mask, gpu_milli, device_type, cotrain_group,
                             started_at)
     SELECT 'ftjob-g' || i, 1, 't1', 'n2', 1, CASE i WHEN 1 THEN 1000 ELSE 0 END, 'H100', 'group-1',
            extract(epoch FROM clock_timestamp()) + 60 FROM generate_series(1, 2) i;
   UPDATE serving_deployments SET last_request_at = extract(epoch FROM clock_timestamp()) + 3600"
check "the worker's preemption stops job a" \
  "wait_for 30 \"SELECT string_agg(job_id, ' ') FROM node_commands WHERE kind = 'stop'\" ftjob-a"
check "and places the worker on job a's device" \
  '[ "$(q "SELECT node_id || '"'"':'"'"' || device_index FROM model_workers")" = n1:0 ]'
check "no member of the co-training group is told to stop" \
  '[ "$(q "SELECT count(*) FROM jobs WHERE id LIKE '"'"'ftjob-g%'"'"' AND preempt_requested")" = 0 ]'

[ $fails -eq 0 ] || tail -n 15 "$work"/*.log >&2
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
