#!/usr/bin/env bash
# continued.sh - a cycle's placements left to the next cycles (scheduler/service/cycle.c, kept_plan). The real
# scheduler with --cycle-target-ms 1 (a cycle is past its target once it has read the fleet and the queue, and a
# cycle that continues a plan writes one batch of 256 placements, then stops), a real PostgreSQL and scale_fleet
# (tests/bench/scale/fleet.c) for 120 nodes of 8 devices. 600 queued jobs of one device each: the first cycle
# decides them all and keeps its plan, and the next three write it, a batch each, without reading the fleet
# and the queue again. Checks that the plan was kept and written whole, that
# every job is placed exactly once, with one START, and that no device holds two running attempts.
#
#   continued.sh SCALE_FLEET
. "$(dirname "$0")/lib.sh" continued
fleet=${1:?usage: continued.sh SCALE_FLEET}
seed_tenant
"$WHET_BIN" scheduler --lease-ms 10000 --cycle-target-ms 1 >"$work/s1.log" 2>&1 & pids+=($!)
eventually 30 'grep -q leading "$work/s1.log"'
"$fleet" --scheduler "$WHET_GRPC" --nodes 120 --gpus 8 --run-s 600:900 >"$work/fleet.json" 2>"$work/fleet.err" &
pids+=($!)
wait_for 30 "SELECT count(*) FROM nodes WHERE state = 'ready'" 120

queued() { # queued PREFIX COUNT: queued jobs of one device each
  q "INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed)
     SELECT '$1' || lpad(i::text, 4, '0'), 't1', 'tiny', 'tiny', 'file-1', '{\"type\":\"supervised\"}', 1
     FROM generate_series(1, $2) i; NOTIFY whet_jobs"
}
queued ftjob-a 600
wait_for 60 "SELECT count(*) FROM job_attempts" 600
check "the first cycle, past its target, left its placements to the next cycles" \
  'grep -q "placements left to the next cycles.* placed=0 left=600" "$work/s1.log"'
check "the next cycles wrote the kept placements" 'grep -q "placements left by a cycle written.* placements=600" "$work/s1.log"'
check "every job placed exactly once" \
  '[ "$(q "SELECT count(DISTINCT job_id) || '"'"' '"'"' || count(*) FROM job_attempts")" = "600 600" ]'
# Each attempt holds one device (a one-bit mask): two running on one node with one mask would share it.
check "no device holds two running attempts" \
  '[ "$(q "SELECT count(*) FROM (SELECT node_id, gpu_mask FROM job_attempts WHERE ended_at IS NULL
                                   GROUP BY 1, 2 HAVING count(*) > 1) d")" = 0 ]'
check "one START per job" '[ "$(q "SELECT count(*) FROM node_commands WHERE kind = '"'"'start'"'"'")" = 600 ]'
echo "  $(grep -c "placements left to the next cycles" "$work/s1.log") plans kept," \
     "$(grep -c "placements left by a cycle written" "$work/s1.log") written whole," \
     "$(grep -c "placements left by a cycle decided anew" "$work/s1.log") decided anew"
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
