#!/usr/bin/env bash
# The chaos loop of issue 15: SIGKILL the executor running a job and start it again in the same work dir,
# six times in a row, each time once the new attempt has reported a step (its trainer then held with
# SIGSTOP, so a slow machine cannot let it run ahead to the job's end before the kill). A trainer (and its sandbox)
# dies with its executor: no trainer of the node is left one second after each kill, and a sampler that
# counts the node's trainers every 100 ms through the whole loop never sees two. A second executor on a
# work dir in use refuses to start, naming the work dir. The job then succeeds from its last checkpoint;
# usage is exact: one row per attempt, the killed attempts' seconds flagged lost, the last attempt's not.
# The kills are placed by the job's own progress (a step reported by the attempt), never by sleeps.
set -euo pipefail
: "${WHET_BIN:?set by ctest}" "${WHET_SOURCE_DIR:?set by ctest}"
unset WHET_DATABASE_URL WHET_OBJECT_STORE WHET_JWT_KEY WHET_DATA_DIR
. "$(dirname "$0")/../lib.sh"
fleet chaos
until_is() { for _ in $(seq $(($1 * 5))); do [ "$(q "$2")" = "$3" ] && return 0; sleep 0.2; done; return 1; }
trainers() { pgrep -f -- "train --config $dir/e1/" | wc -l; }

# Counts the node's trainers every 100 ms until told to stop; the most it saw at once is in $dir/most.
( most=0; while [ ! -e "$dir/stop-sampler" ]; do n=$(trainers); [ "$n" -gt "$most" ] && most=$n && echo "$most" >"$dir/most"; sleep 0.1; done ) &
pids+=($!)

executor 1
check "the executor registers" 'until_is 30 "SELECT count(*) FROM nodes WHERE state = '"'"'ready'"'"'" 1'
timeout 30 "$WHET_BIN" executor --data-dir "$dir" --dc dc-1 --pool dc-1 --devices sim:H100:2 --work-dir "$dir/e1" >"$dir/second.log" 2>&1 &&
  second=0 || second=$?
check "a second executor on the same work dir refuses to start, naming it" \
  '[ "$second" != 0 ] && grep -q "$dir/e1" "$dir/second.log" && grep -qi "another executor" "$dir/second.log"'

# attempt_trains N: true once attempt N has reported a step of its own (an attempt's first step is written at
# once), false at once if the job ended first.
attempt_trains() {
  local v
  for _ in $(seq 600); do
    v=$(q "SELECT CASE WHEN j.status IN ('succeeded', 'failed', 'cancelled') THEN j.status
                       ELSE (p.attempt = $1 AND p.last_step > p.resume_step)::text END
           FROM jobs j LEFT JOIN job_progress p ON p.job_id = j.id WHERE j.id = '$job'")
    case "$v" in
      true) return 0 ;;
      succeeded | failed | cancelled) echo "  the job ended ($v) before attempt $1 trained" >&2; return 1 ;;
    esac
    sleep 0.2
  done
  return 1
}
job=$(create '{"max_steps":300,"checkpoint_every_steps":5}')
for round in 1 2 3 4 5 6; do
  check "round $round: attempt $round runs and trains" "attempt_trains $round"
  # Held where it is (SIGSTOP), so that however slow this machine is to kill it, the job cannot run ahead
  # to its end; a stopped tree dies with its executor all the same.
  pkill -STOP -f -- "train --config $dir/e1/" || true
  check "round $round: one trainer runs on the node" '[ "$(trainers)" = 1 ]'
  kill -9 "$e1"
  wait "$e1" 2>/dev/null || true
  check "round $round: its trainer dies with the executor" 'for _ in $(seq 50); do [ "$(trainers)" = 0 ] && break; sleep 0.1; done; [ "$(trainers)" = 0 ]'
  executor 1
  [ "$fails" = 0 ] || break
done
check "the job succeeds after six kills" '[ "$(finish "$job")" = succeeded ]'
touch "$dir/stop-sampler"
check "never two trainers of the node at once" '[ "$(cat "$dir/most" 2>/dev/null || echo 0)" -le 1 ]'
check "seven attempts" '[ "$(q "SELECT attempt FROM jobs WHERE id = '"'$job'"'")" = 7 ]'
check "usage: one row per attempt" \
  '[ "$(q "SELECT count(DISTINCT attempt) || '"'/'"' || count(*) FROM usage_records WHERE job_id = '"'$job'"'")" = 7/7 ]'
check "usage: the six killed attempts flagged lost, the seventh not" \
  '[ "$(q "SELECT string_agg(attempt::text || '"':'"' || lost, '"','"' ORDER BY attempt) FROM usage_records WHERE job_id = '"'$job'"'")" = "1:true,2:true,3:true,4:true,5:true,6:true,7:false" ]'
check "the success came from the seventh attempt" \
  '[ "$(q "SELECT attempt || '"':'"' || outcome FROM job_attempts WHERE job_id = '"'$job'"' AND outcome = '"'succeeded'"'")" = 7:succeeded ]'
[ "$fails" = 0 ] || { q "SELECT attempt, node_id, outcome, started_at, ended_at FROM job_attempts ORDER BY attempt" >&2
                      tail -n 30 "$dir/e1.log" >&2; grep -v 'msg=request' "$dir/up.err" | tail -n 30 >&2; }
echo "$passes passed, $fails failed"
[ "$fails" = 0 ]
