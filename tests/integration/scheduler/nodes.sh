#!/usr/bin/env bash
# nodes.sh - the leader keeps the ready nodes between cycles and reads again only those node_changes names
# (scheduler/service/nodes.c, migrations/0059_node_changes.sql); placement must still follow every change.
# The real scheduler against a real PostgreSQL, nodes of one device that only the database knows (nothing
# runs what is placed on them): a node registered after the leader's first read takes a job; a node
# cordoned takes none; a node's change whose transaction commits after later changes were read is still
# read; a node given a second device takes a second job; a node silent for half its lease takes none until
# it answers again.
. "$(dirname "$0")/lib.sh" nodes
m1=$(free_port)
seed_tenant
node_sql() { # ID STATE: a node of one device, heard from now
  echo "INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms, last_heartbeat, state)
          VALUES ('$1', 'dc-a', 'dc-a', '[{\"type\":\"H100\",\"memory_mib\":81920,\"index\":0}]', 'H100', 1, 8000,
                  65536, 600000, extract(epoch FROM clock_timestamp()), '$2')"
}
job() { # ID
  q "INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed)
       VALUES ('$1', 't1', 'tiny', 'tiny', 'file-1', '{\"type\":\"supervised\"}', 1); NOTIFY whet_jobs"
}
finish() { # JOB: its attempt ends, its device is free
  q "BEGIN; UPDATE job_attempts SET ended_at = whet_now(), outcome = 'succeeded' WHERE job_id = '$1';
     UPDATE jobs SET status = 'succeeded' WHERE id = '$1'; COMMIT"
}
placed_on() { echo "SELECT coalesce(string_agg(node_id, ','), '') FROM job_attempts WHERE job_id = '$1'"; }
cycles_count() { metric $m1 whet_scheduler_cycle_duration_seconds_count; }
# True once three more cycles than at the call have run (the job in question had them to be placed in).
three_cycles() {
  local from
  from=$(cycles_count)
  eventually 30 '[ "$(cycles_count)" -ge $((from + 3)) ]'
}

q "$(node_sql n1 ready)"
"$WHET_BIN" scheduler --lease-ms 600000 --metrics "127.0.0.1:$m1" >"$work/s1.log" 2>&1 & pids+=($!)
job ftjob-1
check "a job goes on the one node" "wait_for 30 \"$(placed_on ftjob-1)\" n1"

q "$(node_sql n2 ready)"
job ftjob-2
check "a node registered after the leader's first read takes the next job" "wait_for 30 \"$(placed_on ftjob-2)\" n2"

q "UPDATE nodes SET state = 'cordoned' WHERE id = 'n2'"
finish ftjob-2
job ftjob-3
check "a cordoned node takes no job, free as its device is" \
  "three_cycles && [ \"\$(q \"$(placed_on ftjob-3)\")\" = '' ]"

# n2 made ready again by a transaction that waits on an advisory lock before it commits, while a later
# change (node n3, cordoned) commits and cycles read it.
PGAPPNAME=holder psql -qtAX "$WHET_DATABASE_URL" >/dev/null 2>&1 <<<"SELECT pg_advisory_lock(4242); SELECT pg_sleep(600);" &
pids+=($!)
wait_for 30 "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'holder' AND query LIKE '%pg_sleep%'" 1
PGAPPNAME=late psql -qtAX "$WHET_DATABASE_URL" >/dev/null 2>&1 <<<"BEGIN;
  UPDATE nodes SET state = 'ready' WHERE id = 'n2'; SELECT pg_advisory_lock(4242); COMMIT;" &
late=$!
wait_for 30 "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'late' AND wait_event_type = 'Lock'" 1
q "$(node_sql n3 cordoned)"
check "while that transaction is open, the job still waits" \
  "three_cycles && [ \"\$(q \"$(placed_on ftjob-3)\")\" = '' ]"
q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'holder'" >/dev/null
wait "$late"
check "the change committed after later ones were read is read: the job goes on n2" \
  "wait_for 30 \"$(placed_on ftjob-3)\" n2"

q "UPDATE nodes SET gpus = 2, devices = devices || '[{\"type\":\"H100\",\"memory_mib\":81920,\"index\":1}]' WHERE id = 'n1'"
job ftjob-4
check "a node given a second device takes a second job" "wait_for 30 \"$(placed_on ftjob-4)\" n1"

# n1 silent for 400 s of its 600 s lease (not yet past it: it is not lost), one of its devices free.
q "UPDATE nodes SET last_heartbeat = extract(epoch FROM clock_timestamp()) - 400 WHERE id = 'n1'"
finish ftjob-4
job ftjob-5
check "a node silent for half its lease takes no job" \
  "three_cycles && [ \"\$(q \"$(placed_on ftjob-5)\")\" = '' ] && [ \"\$(q \"SELECT state FROM nodes WHERE id = 'n1'\")\" = ready ]"
q "UPDATE nodes SET last_heartbeat = extract(epoch FROM clock_timestamp()) WHERE id = 'n1'"
check "once it answers again, it does" "wait_for 30 \"$(placed_on ftjob-5)\" n1"

[ $fails -eq 0 ] || tail -n 20 "$work/s1.log" >&2
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
