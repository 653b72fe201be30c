#!/usr/bin/env bash
# The scheduler service against a real PostgreSQL and real executors over gRPC: leader election and
# takeover, registration, placement into an attempt and a START command, an attempt that fails with a
# clear reason (its base model is not in the object store) and is metered, pause and cancel of queued
# jobs, a node declared lost when its lease runs out, and a restarted node whose attempt is requeued;
# a mass silence (most nodes of every data center past their lease at once) that declares none lost,
# and a partition (one data center silent, another answering) that does;
# both schedulers and the executor serve Prometheus metrics (--metrics) that follow all of it.
. "$(dirname "$0")/lib.sh" sched
m1=$(free_port) m2=$(free_port) m3=$(free_port)
fetch_failures='whet_executor_object_store_failures_total{op="fetch"}'
seed_tenant
q "INSERT INTO idempotency_keys (tenant_id, route, key, request_sha256, status, response, created_at)
     VALUES ('t1', 'POST /v1/files', 'expired', 'x', 200, '{}', whet_now() - 86401),
            ('t1', 'POST /v1/files', 'live', 'x', 200, '{}', whet_now() - 86000)"
newjob() { q "INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, whet)
              VALUES ('$1', 't1', 'tiny', 'tiny', 'file-1', '{\"type\":\"supervised\"}', 1, '${2:-{\}}');
              NOTIFY whet_jobs"; }

# Leader election: the second scheduler stands by, and takes over when the first dies. Each step waits
# for what it needs, however slow the machine (the first leads before the second starts).
leads() { grep -q '"leading"' "$work/$1.log"; }
stands_by() { grep -q "standing by" "$work/$1.log"; }
"$WHET_BIN" scheduler --lease-ms 1500 --metrics "127.0.0.1:$m1" >"$work/s1.log" 2>&1 & pids+=($!); s1=$!
eventually 30 'leads s1'
WHET_SCHEDULER_METRICS="127.0.0.1:$m2" "$WHET_BIN" scheduler --lease-ms 1500 >"$work/s2.log" 2>&1 & pids+=($!)
check "one leader, one standby" 'eventually 30 "stands_by s2" && leads s1'
check "the leader deletes an idempotency key older than 24 h, keeps a younger one" \
  'wait_for 10 "SELECT string_agg(key, '"'"','"'"') FROM idempotency_keys" live'
leader_metric() { [ "$(metric "$1" whet_scheduler_leader 2>/dev/null)" = "$2" ]; }
check "metrics: the leader says it leads, the standby that it does not" \
  'eventually 30 "leader_metric $m2 0" && leader_metric $m1 1'
check "metrics: cycles counted and timed" 'eventually 10 "[ \"\$(metric $m1 whet_scheduler_cycle_duration_seconds_count)\" -gt 0 ]" &&
  curl -fsS "http://127.0.0.1:$m1/metrics" | grep "^# TYPE whet_scheduler_cycle_duration_seconds histogram$" >/dev/null'
check "metrics: another path is a 404" '[ "$(curl -s -o /dev/null -w "%{http_code}" "http://127.0.0.1:$m1/")" = 404 ]'

"$WHET_BIN" executor --dc dc-a --pool dc-a --devices sim:H100:2:80 --work-dir "$work/e1" --metrics "127.0.0.1:$m3" \
  >"$work/e1.log" 2>&1 & pids+=($!); e1=$!
check "executor registers its devices" 'wait_for 10 "SELECT state || gpus || device_type FROM nodes" "ready2H100"'
registered_idle() { [ "$(metric $m3 whet_executor_registered)" = 1 ] && [ "$(metric $m3 whet_executor_jobs_running)" = 0 ] &&
  [ "$(metric $m3 "$fetch_failures")" = 0 ]; }
check "metrics: the executor is registered and runs nothing" 'eventually 10 registered_idle'

# A job whose base model is missing from the object store: placed, started, failed with the reason.
newjob ftjob-a
check "job placed on the node" 'wait_for 10 "SELECT count(*) FROM job_attempts WHERE job_id = '"'"'ftjob-a'"'"'" 1'
check "start command delivered" 'wait_for 10 "SELECT count(*) FROM node_commands WHERE job_id = '"'"'ftjob-a'"'"' AND kind = '"'"'start'"'"' AND delivered_at IS NOT NULL" 1'
check "attempt fails with a clear reason" 'wait_for 15 "SELECT status FROM jobs WHERE id = '"'"'ftjob-a'"'"'" failed'
err=$(q "SELECT error->>'message' FROM jobs WHERE id = 'ftjob-a'")
check "error names the missing model" '[[ "$err" == *"base model tiny"* ]]'
check "placement event" '[ "$(q "SELECT count(*) FROM job_events WHERE job_id = '"'"'ftjob-a'"'"' AND message LIKE '"'"'Job placed on node % in dc-a%'"'"'")" = 1 ]'
check "metrics: the executor counted the failed fetch" '[ "$(metric $m3 "$fetch_failures")" = 1 ]'
check "attempt metered once" '[ "$(q "SELECT count(*) FROM usage_records WHERE job_id = '"'"'ftjob-a'"'"' AND device_type = '"'"'H100'"'"'")" = 1 ]'

# A job pinned to a GPU type nobody has waits, with a reason; pause and cancel act on queued jobs.
newjob ftjob-b '{"gpu_types":["B200"]}'
check "unplaceable job waits with a reason" 'wait_for 10 "SELECT wait_reason IS NOT NULL FROM jobs WHERE id = '"'"'ftjob-b'"'"'" t'
one_ready_one_queued() { [ "$(metric $m1 whet_scheduler_nodes_ready)" = 1 ] && [ "$(metric $m1 whet_scheduler_jobs_queued)" = 1 ]; }
check "metrics: one node ready, one job queued" 'eventually 10 one_ready_one_queued'
q "UPDATE jobs SET desired = 'pause' WHERE id = 'ftjob-b'; NOTIFY whet_jobs"
check "queued job pauses" 'wait_for 10 "SELECT status FROM jobs WHERE id = '"'"'ftjob-b'"'"'" paused'
q "UPDATE jobs SET desired = 'cancel', status = 'queued' WHERE id = 'ftjob-b'; NOTIFY whet_jobs"
check "queued job cancels" 'wait_for 10 "SELECT status FROM jobs WHERE id = '"'"'ftjob-b'"'"'" cancelled'

# The leader dies: the standby takes over and keeps the node.
kill -9 $s1
check "standby takes over" 'eventually 30 "leads s2"'
check "node still ready after failover" 'wait_for 10 "SELECT state FROM nodes" ready'

# An attempt running on a node that restarts is requeued (the new process never saw it).
node=$(q "SELECT id FROM nodes")
q "INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, attempt, desired)
     VALUES ('ftjob-c', 't1', 'tiny', 'tiny', 'file-1', '{}', 1, 'running', 1, 'pause');
   INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, gpu_mask, device_type) VALUES ('ftjob-c', 1, 't1', '$node', 1, 'H100')"
kill -9 $e1
"$WHET_BIN" executor --dc dc-a --pool dc-a --devices sim:H100:2:80 --work-dir "$work/e1" >"$work/e1b.log" 2>&1 & pids+=($!); e1=$!
check "restarted node's attempt ends as lost" 'wait_for 10 "SELECT outcome FROM job_attempts WHERE job_id = '"'"'ftjob-c'"'"'" lost'
check "its job is paused, as the tenant asked" 'wait_for 5 "SELECT status FROM jobs WHERE id = '"'"'ftjob-c'"'"'" paused'
check "lost seconds metered" '[ "$(q "SELECT count(*) FROM usage_records WHERE job_id = '"'"'ftjob-c'"'"' AND lost")" = 1 ]'

# A silent node loses its lease.
kill -9 $e1
check "silent node declared lost" 'wait_for 10 "SELECT state FROM nodes" lost'
# The gauges follow the row a moment later: the cycle that marked the node lost sets them after its
# snapshot (checked at once, this failed now and then on a loaded machine). The counter counts every loss
# the leader declared (its log lines): on a loaded machine the restart above can outlast the 1.5 s lease,
# so the node may have been lost once already.
lost_counted() {
  local lost
  lost=$(metric $m2 whet_scheduler_nodes_lost_total)
  [ "$(metric $m2 whet_scheduler_leader)" = 1 ] && [ "${lost:-0}" -ge 1 ] &&
    [ "$lost" = "$(grep -c 'msg="node lost"' "$work/s2.log")" ] && [ "$(metric $m2 whet_scheduler_nodes_ready)" = 0 ]
}
check "metrics: the new leader counted the lost node" \
  'eventually 10 lost_counted'

# A mass silence: 12 nodes in each of two data centers, all past their lease at once. The scheduler takes
# itself (or its database) for the cause and declares none lost (leases.c).
fake_nodes() { # PREFIX DC LEASE_MS SILENT_S
  q "INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms, last_heartbeat)
     SELECT '$1-' || i, '$2', '$2', '[{\"type\":\"H100\",\"memory_mib\":81920,\"index\":0}]', 'H100', 1, 8000,
       65536, $3, extract(epoch FROM clock_timestamp()) - $4 FROM generate_series(1, 12) i"
}
fake_nodes silent-x dc-x 1500 60
fake_nodes silent-y dc-y 1500 60
check "a mass silence declares no node lost" 'for _ in $(seq 50); do grep -q "mass silence:" "$work/s2.log" && break;
  sleep 0.1; done; sleep 2.5; [ "$(q "SELECT count(*) FROM nodes WHERE state = '"'"'ready'"'"'")" = 24 ]'
check "metrics: the mass silence shows" '[ "$(metric $m2 whet_scheduler_mass_silence)" = 1 ]'
# dc-y answers again (12 of its nodes heard from): dc-x's silence is now a partition, and dc-y's silent
# nodes are under the threshold there: every silent node is lost, the live ones are kept.
fake_nodes live-y dc-y 3600000 0
check "after a partition, the silent nodes are lost" \
  'wait_for 10 "SELECT count(*) FROM nodes WHERE state = '"'"'lost'"'"' AND id LIKE '"'"'silent-%'"'"'" 24'
check "the answering nodes are kept" '[ "$(q "SELECT count(*) FROM nodes WHERE state = '"'"'ready'"'"'")" = 12 ] &&
  grep -q "mass silence over" "$work/s2.log" && [ "$(metric $m2 whet_scheduler_mass_silence)" = 0 ]'

[ $fails -eq 0 ] || tail -n 15 "$work"/*.log >&2
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
