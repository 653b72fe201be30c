#!/usr/bin/env bash
# A data center cut off from the scheduler past its lease (issue 15, data centers on a WAN): `whet up`
# without executors of its own (3 s leases) and one executor in each of dc-a and dc-b. A job runs in dc-a;
# dc-a freezes (SIGSTOP of its executor and everything it runs: the sandbox and the trainer), its node is
# declared lost and the job moves to dc-b, where it resumes from dc-a's checkpoint and records its own.
# Then dc-a comes back: first its sandbox and trainer, which train to the end and write the final model
# while the executor still cannot speak (as a trainer does behind a partition), then the executor, whose every
# report of that stale attempt is refused: its events and checkpoints record nothing, and its success,
# reported late, is refused because the new attempt has written checkpoints. Asserts: the job succeeds
# once, with dc-b's attempt's final model (its prefix jobs/JOB/attempt-2/final, the bytes served are what
# dc-b's trainer wrote) while dc-a's sits unreferenced under its own prefix; every checkpoint names the
# attempt that wrote it and lies under that attempt's prefix, and none of dc-a's came after the move;
# usage has one record per attempt, dc-a's flagged lost. Then the garbage collection of ended attempts removes
# dc-a's refused final model and keeps every recorded checkpoint and the job's final model.
#
# Nothing races the CPU: each trainer is held (SIGSTOP) once it has written a checkpoint, and each step
# waits for a state, with generous bounds.
set -euo pipefail
: "${WHET_BIN:?set by ctest}" "${WHET_SOURCE_DIR:?set by ctest}"
unset WHET_DATABASE_URL WHET_OBJECT_STORE WHET_JWT_KEY WHET_DATA_DIR
. "$(dirname "$0")/../lib.sh"
fleet partition
# until_is SECONDS QUERY VALUE: polls the query until it prints the value
until_is() { for _ in $(seq $(($1 * 5))); do [ "$(q "$2")" = "$3" ] && return 0; sleep 0.2; done; return 1; }
# waits SECONDS COMMAND: polls the command until it succeeds
waits() { for _ in $(seq $(($1 * 5))); do eval "$2" && return 0; sleep 0.2; done; return 1; }
trainer() { pgrep -f "train --config $1/trainer.json" || true; }
# hold DIR: stops the trainer running in the attempt dir DIR once it has written a checkpoint (polling
# often: it must not get far past it), and leaves its pids in DIR.held.
hold() {
  local t=
  until ls "$1/out/checkpoints" 2>/dev/null | grep -qx 'step-[0-9]*' && t=$(trainer "$1") && [ -n "$t" ]; do
    sleep 0.02
  done
  kill -STOP $t
  echo $t >"$1.held"
}
# tree PID: the process and its descendants, parents first (a whole data center's processes here)
tree() {
  local c
  echo "$1"
  for c in $(pgrep -P "$1"); do tree "$c"; done
}
# settled PID...: each process has ended (gone, or a zombie its frozen parent has not reaped)
settled() {
  local p s
  for p in "$@"; do s=$(ps -o stat= -p "$p" || true); [[ -z $s || $s == Z* ]] || return 1; done
}
ckpts() { q "SELECT count(*) FROM checkpoints WHERE job_id = '$job' AND attempt = $1"; }
events() { q "SELECT count(*) FROM job_events WHERE job_id = '$job' AND attempt = $1"; }

executor 1 dc-a
check "dc-a's executor registers" 'until_is 30 "SELECT count(*) FROM nodes WHERE state = '"'"'ready'"'"'" 1'
# 42 steps, checkpoints every 5: the last step has none, so the final model is listed as its own checkpoint.
job=$(create '{"max_steps":42,"checkpoint_every_steps":5}')
a1=$dir/e1/jobs/$job-1 a2=$dir/e2/jobs/$job-2
hold "$a1" &
pids+=($!)
check "attempt 1 runs in dc-a and records a checkpoint" \
  'waits 300 "[ -s $a1.held ]" && waits 60 "[ \$(ckpts 1) -ge 1 ]"'

# dc-a freezes past its lease: its node is lost and the job moves to dc-b.
frozen=$(tree "$e1")
kill -STOP $frozen 2>/dev/null || true
executor 2 dc-b
check "dc-a's node is declared lost" 'until_is 60 "SELECT state FROM nodes WHERE dc = '"'"'dc-a'"'"'" lost'
lost_ckpts=$(ckpts 1) lost_events=$(events 1)
hold "$a2" &
pids+=($!)
check "attempt 2 runs in dc-b, resumed from dc-a's checkpoint, and records its own" \
  'waits 300 "[ -s $a2.held ]" && waits 60 "[ \$(ckpts 2) -ge 1 ]" &&
   [ "$(q "SELECT resume_step FROM job_attempts WHERE job_id = '"'"'$job'"'"' AND attempt = 2")" = \
     "$(q "SELECT max(step_number) FROM checkpoints WHERE job_id = '"'"'$job'"'"' AND attempt = 1")" ]'

# dc-a comes back: its sandbox and trainer first, which train to the end while its executor cannot speak yet.
sandbox=$(tail -n +2 <<<"$frozen")
kill -CONT $sandbox 2>/dev/null || true
a1_done() { [ -s "$a1/out/final/adapter_model.safetensors" ] && settled $sandbox; }
check "dc-a's trainer writes its final model behind the partition" 'waits 300 a1_done'
kill -CONT "$e1"
a1_ended() { grep -q "job attempt ended\" job=$job attempt=1 " "$dir/e1.log"; }
check "dc-a's executor ends its stale attempt and is told its success is refused" \
  'waits 120 a1_ended && grep -q "refused the end of an attempt that is no longer current\" job=$job attempt=1 " "$dir/e1.log"'
check "the scheduler refused the late success: the new attempt had written checkpoints" \
  'grep -q "late success refused: a newer attempt has written checkpoints\" job=$job attempt=1 " "$dir/up.err"'
check "no checkpoint or event of the stale attempt after the move" \
  '[ "$(ckpts 1)" = "$lost_ckpts" ] && [ "$(events 1)" = "$lost_events" ]'

kill -CONT $(cat "$a2.held") 2>/dev/null || true
check "the job succeeds on attempt 2" '[ "$(finish "$job")" = succeeded ]'
check "once" '[ "$(q "SELECT count(*) FROM job_events WHERE job_id = '"'"'$job'"'"' AND message = '"'"'The job has successfully completed'"'"'")" = 1 ]'
check "attempt 1 lost, attempt 2 succeeded" \
  '[ "$(q "SELECT string_agg(attempt || '"'"':'"'"' || outcome, '"'"','"'"' ORDER BY attempt) FROM job_attempts WHERE job_id = '"'"'$job'"'"'")" = 1:lost,2:succeeded ]'
check "its final model is attempt 2's" \
  '[ "$(q "SELECT final_object_prefix FROM jobs WHERE id = '"'"'$job'"'"'")" = "jobs/$job/attempt-2/final" ]'
check "the final model served is the bytes dc-b's trainer wrote" \
  'api -f -o "$dir/served.safetensors" "http://$http/v1/fine_tuning/jobs/$job/checkpoints/final/files/adapter_model.safetensors" &&
   cmp "$dir/served.safetensors" "$a2/out/final/adapter_model.safetensors"'
check "dc-a's final model lies apart, under its own attempt's prefix, and nothing under the job's old one" \
  '[ -d "$dir/objects/jobs/$job/attempt-1/final" ] && [ ! -e "$dir/objects/jobs/$job/final" ] &&
   [ ! -e "$dir/objects/jobs/$job/checkpoints" ]'
check "every checkpoint lies under its attempt's prefix" \
  '[ "$(q "SELECT count(*) FROM checkpoints WHERE job_id = '"'"'$job'"'"'
           AND object_prefix NOT LIKE '"'"'jobs/$job/attempt-'"'"' || attempt || '"'"'/%'"'"'")" = 0 ]'
check "the final model is attempt 2's last checkpoint, recorded with its end" \
  '[ "$(q "SELECT step_number || '"'"' '"'"' || attempt || '"'"' '"'"' || object_prefix FROM checkpoints WHERE job_id = '"'"'$job'"'"'
           ORDER BY step_number DESC LIMIT 1")" = "42 2 jobs/$job/attempt-2/final" ]'
check "usage: one record per attempt, the stale one flagged lost" \
  '[ "$(q "SELECT string_agg(attempt || '"'"':'"'"' || lost, '"'"','"'"' ORDER BY attempt) FROM usage_records WHERE job_id = '"'"'$job'"'"'")" = 1:true,2:false ]'

# The leader's garbage collection of ended attempts (migration 0050), its grace period cut short: dc-a's
# refused final model and result file go; the checkpoints it recorded (attempt 2 resumed from one), attempt
# 2's final model and result file stay, and the final model is still served.
files_in() { [ -n "$(find "$dir/objects/$1" -type f 2>/dev/null)" ]; }
check "within the grace period dc-a's refused final model and result file are stored" \
  'files_in jobs/$job/attempt-1/final && [ -e "$dir/objects/jobs/$job/attempt-1/results.csv" ]'
q "UPDATE attempt_gc_queue SET queued_at = 0 WHERE job_id = '$job'; NOTIFY whet_maintenance" >/dev/null
recorded_kept() {
  local p
  for p in $(q "SELECT object_prefix FROM checkpoints WHERE job_id = '$job'"); do files_in "$p" || return 1; done
}
check "dc-a's refused final model and result file leave the object store" \
  'waits 60 "! files_in jobs/$job/attempt-1/final && [ ! -e $dir/objects/jobs/$job/attempt-1/results.csv ]"'
check "every recorded checkpoint, attempt 2's final model and result file stay" \
  'recorded_kept && [ $(ckpts 1) -ge 1 ] && files_in jobs/$job/attempt-2/final &&
   [ -e "$dir/objects/jobs/$job/attempt-2/results.csv" ] &&
   api -f -o "$dir/served2.safetensors" "http://$http/v1/fine_tuning/jobs/$job/checkpoints/final/files/adapter_model.safetensors" &&
   cmp "$dir/served2.safetensors" "$a2/out/final/adapter_model.safetensors"'

echo "$passes passed, $fails failed"
[ $fails -eq 0 ] || tail -n 30 "$dir"/e*.log "$dir/up.err" >&2
[ $fails -eq 0 ]
