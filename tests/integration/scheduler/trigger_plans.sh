#!/usr/bin/env bash
# The statement triggers on usage_records and job_progress read a bounded number of rows whatever came
# before them in their session (migration 0056). A session's first statement writes thousands of rows (a
# lease expiry ends a node's attempts, a restart's first heartbeats report every job at once) while few
# jobs have succeeded; then 20,000 jobs succeed (another session); then one row is written, as FinishJob
# and a heartbeat write it. The session's plans are generic (plan_cache_mode, what a long-lived session
# runs after five calls) and the one-row statements run with auto_explain (JSON, row counts, nested
# statements sent to the client as warnings): none of their plans may scan jobs or job_progress
# sequentially or read more than READ_BOUND rows of them (the old plans hashed every succeeded job, or
# walked the partial index of succeeded jobs, to look up one). (throughput_jobs, empty when the session
# planned, is scanned whole by its plans until autovacuum analyzes it, at 10% more rows: the part of jobs
# that has succeeded can grow from none to 10% of all jobs before that.) And the triggers still do their
# work: a succeeded job's throughput follows a usage row written late (once the queue it names the job in is
# folded, as the scheduler's maintenance does: migration 0060), and a running job of a tenant past its monthly
# limit is paused by a one-row progress write.
. "$(dirname "$0")/lib.sh" trigger_plans
READ_BOUND=100
HISTORY=20000 BULK=3000
seed_tenant
q "INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, attempt)
     SELECT 'ftjob-r' || i, 't1', 'tiny', 'tiny', 'file-1', '{\"type\":\"supervised\"}', 1, 'running', 1
     FROM generate_series(1, $BULK + 1) i;
   INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, attempt)
     VALUES ('ftjob-h0', 't1', 'tiny', 'tiny', 'file-1', '{\"type\":\"supervised\"}', 1, 'succeeded', 1)" >/dev/null
q "VACUUM ANALYZE" # as autovacuum would have by now

usage_row() { # JOB ATTEMPT
  echo "INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens,
          rollout_tokens, job_created_at) SELECT tenant_id, id, $2, 0, 'H100', 10, 1000, 0, created_at FROM jobs WHERE id = '$1';"
}
# The history, written by another session once this one has planned: succeeded jobs with their usage (so
# throughput_jobs holds them all).
cat >"$work/history.sql" <<SQL
INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, attempt)
  SELECT 'ftjob-h' || i, 't1', 'tiny', 'tiny', 'file-1', '{"type":"supervised"}', 1, 'succeeded', 1
  FROM generate_series(1, $HISTORY) i;
INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens,
                           rollout_tokens, job_created_at)
  SELECT 't1', id, 1, 0, 'H100', 10, 1000, 0, created_at FROM jobs WHERE status = 'succeeded' AND id <> 'ftjob-h0';
DO \$\$ BEGIN PERFORM whet_throughput_fold(100000); END \$\$;
SQL
psql -qX -v ON_ERROR_STOP=1 "$WHET_DATABASE_URL" >"$work/session.log" 2>&1 <<SQL
SET plan_cache_mode = force_generic_plan;
BEGIN;
INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens,
                           rollout_tokens, job_created_at)
  SELECT tenant_id, id, 1, 0, 'H100', 10, 1000, 0, created_at FROM jobs WHERE id LIKE 'ftjob-r%';
ROLLBACK;
$(usage_row ftjob-h0 1)
DO \$\$ BEGIN PERFORM whet_throughput_fold(1000); END \$\$;
INSERT INTO budgets (tenant_id, monthly_limit) VALUES ('t1', 1000000);
BEGIN;
INSERT INTO job_progress (job_id, tenant_id, attempt, last_step) SELECT id, tenant_id, 1, 1 FROM jobs WHERE id LIKE 'ftjob-r%';
ROLLBACK;
UPDATE budgets SET monthly_limit = 0;
\! psql -qX -v ON_ERROR_STOP=1 "$WHET_DATABASE_URL" -f "$work/history.sql"
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0; SET auto_explain.log_format = json; SET auto_explain.log_analyze = on;
SET auto_explain.log_timing = off; SET auto_explain.log_nested_statements = on; SET auto_explain.log_level = warning;
$(usage_row ftjob-r1 1)
$(usage_row ftjob-h1 2)
DO \$\$ BEGIN PERFORM whet_throughput_fold(1000); END \$\$;
INSERT INTO job_progress (job_id, tenant_id, attempt, last_step) VALUES ('ftjob-r2', 't1', 1, 1);
SQL
check "the history's throughput is kept" '[ "$(q "SELECT jobs FROM whet_throughput")" = $((HISTORY + 1)) ]'
python3 "$(dirname "$0")/plan_check.py" "$work/session.log" "$READ_BOUND" jobs,job_progress \
  >"$work/plans.txt"
echo "  $(wc -l <"$work/plans.txt") plans logged"
grep '^BAD' "$work/plans.txt" | sort | uniq -c | sed 's/^/  /' >&2 || true
check "the one-row statements and their triggers were logged" \
  'grep -q "^ok INSERT INTO usage_records" "$work/plans.txt" && grep -q "^ok INSERT INTO job_progress" "$work/plans.txt" &&
   grep -q "whet_throughput_refresh" "$work/plans.txt"'
check "no trigger statement after a bulk first call scans sequentially or reads past $READ_BOUND rows" \
  '! grep -q "^BAD" "$work/plans.txt"'
check "a succeeded job's late usage row counts in its throughput" \
  '[ "$(q "SELECT tokens FROM throughput_jobs WHERE job_id = '"'"'ftjob-h1'"'"'")" = 2000 ]'
check "a running job's usage row is not throughput" \
  '[ "$(q "SELECT count(*) FROM throughput_jobs WHERE job_id = '"'"'ftjob-r1'"'"'")" = 0 ]'
check "a progress write of a job past its tenant's monthly limit pauses it" \
  '[ "$(q "SELECT desired FROM jobs WHERE id = '"'"'ftjob-r2'"'"'")" = pause ]'
check "and of no other job" '[ "$(q "SELECT count(*) FROM jobs WHERE desired = '"'"'pause'"'"'")" = 1 ]'

[ $fails -eq 0 ] || tail -n 15 "$work/session.log" >&2
echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
