#!/usr/bin/env bash
# retention.sh - checkpoint retention (migration 0040, scheduler/service/checkpoint_retention.c) against a real
# PostgreSQL, the real scheduler and a file:// object store: with --checkpoint-keep 2 the leader deletes a
# job's older step checkpoints (rows and files), keeps the pinned one, the final model and one a queued job
# continues from until that job ends, and an unpinned one goes; a deleted model's checkpoints and final
# model go once --deleted-model-keep has passed, not before; a deleted checkpoint's storage is metered up to
# its deletion (the cost lines and their closed form agree); new settings look at every job again; a reported
# checkpoint queues its job only when the settings keep the last N (migration 0055).
. "$(dirname "$0")/lib.sh" retention
m1=$(free_port)

q "INSERT INTO tenants (id, name) VALUES ('t1', 'acme');
   INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
     VALUES ('tiny', 'LlamaForCausalLM', 1000, 'models/tiny', 'abc', '{}');
   INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key)
     VALUES ('file-1', 't1', 'fine-tune', 'train.jsonl', 10, 'x', 'files/file-1');
   -- Storage prices that change a day and a bit ago (inside every checkpoint's life).
   INSERT INTO price_books (version, effective_from, currency) VALUES (1, 0, 'USD'), (2, whet_now() - 91234, 'USD');
   INSERT INTO prices (version, sku, device_type, unit_price) VALUES (1, 'storage_gb_month', '', 0.1),
     (2, 'storage_gb_month', '', 0.23);"
# job(ID, STATUS): a job whose model is ft:ID and whose final model is at jobs/ID/final (stored).
job() {
  q "INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, fine_tuned_model,
                       final_object_prefix)
     VALUES ('$1', 't1', 'tiny', 'tiny', 'file-1', '{\"type\":\"supervised\"}', 1, '$2', 'ft:$1', 'jobs/$1/final')"
  stored "jobs/$1/final"
}
stored() { mkdir -p "$work/objects/$1" && head -c 1000 /dev/urandom >"$work/objects/$1/model.safetensors"; }
# ckpt(JOB, STEP [, PREFIX]): a 1 GB checkpoint made two days ago, its files stored.
ckpt() {
  local prefix=${3:-jobs/$1/checkpoints/step-$2}
  q "INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint, object_prefix, bytes,
                              created_at)
     VALUES ('ck-$1-$2', 't1', '$1', $2, 'ft:$1:ckpt-step-$2', '$prefix', 1000000000, whet_now() - 172800)"
  stored "$prefix"
}
has_files() { [ -n "$(find "$work/objects/$1" -type f 2>/dev/null)" ]; }
steps() { q "SELECT string_agg(step_number::text, ',' ORDER BY step_number) FROM checkpoints WHERE job_id = '$1'"; }

job job-a succeeded
for s in 10 20 30 40 50; do ckpt job-a $s; done
ckpt job-a 60 jobs/job-a/final
q "UPDATE checkpoints SET pinned = true WHERE id = 'ck-job-a-20'"
# job-b continues from job-a's step 10 (its init_checkpoint) and has not run yet.
q "INSERT INTO jobs (id, tenant_id, model, base_model, init_checkpoint, training_file, method, seed)
   VALUES ('job-b', 't1', 'ft:job-a:ckpt-step-10', 'tiny', 'ck-job-a-10', 'file-1', '{\"type\":\"supervised\"}', 1)"
# job-c's model was deleted long ago; job-d's just now. Both had their last step checkpointed (no final row).
for j in job-c job-d; do job $j succeeded; ckpt $j 1; ckpt $j 2; done
q "UPDATE jobs SET model_deleted_at = whet_now() - 100 WHERE id = 'job-c';
   UPDATE jobs SET model_deleted_at = whet_now() WHERE id = 'job-d'"
# A job the scheduler would place: held paused, so nothing else happens.
q "UPDATE jobs SET status = 'paused' WHERE id = 'job-b'"
check "under keep 0 (the settings before any scheduler) a reported checkpoint queues its job for nothing: not queued" \
  '[ "$(q "SELECT count(*) FROM checkpoint_retention_queue WHERE job_id = '"'job-a'"'")" = 0 ]'

"$WHET_BIN" scheduler --checkpoint-keep 2 --deleted-model-keep 30 --metrics "127.0.0.1:$m1" >"$work/s1.log" 2>&1 &
pids+=($!)
s1=$!
check "keep 2: step 30 deleted; 10 (a paused job continues from it), 20 (pinned), 40, 50 and the final kept" \
  'wait_for 20 "$(printf "SELECT string_agg(step_number::text, %s ORDER BY step_number) FROM checkpoints WHERE job_id = %s" "'"','"'" "'"'job-a'"'")" "10,20,40,50,60"'
check "the deleted checkpoint's files are removed and stamped purged" \
  'wait_for 20 "SELECT count(*) FROM checkpoint_deletions WHERE id = '"'ck-job-a-30'"' AND purged_at IS NOT NULL AND reason = '"'keep_last'"'" 1 &&
   ! has_files jobs/job-a/checkpoints/step-30'
check "the kept checkpoints' files stay" \
  'has_files jobs/job-a/checkpoints/step-10 && has_files jobs/job-a/checkpoints/step-20 && has_files jobs/job-a/final'

check "a model deleted 100 s ago (keep 30 s): every checkpoint and the final model deleted, files removed" \
  'wait_for 20 "SELECT count(*) FROM checkpoints WHERE job_id = '"'job-c'"'" 0 &&
   wait_for 20 "SELECT string_agg(id, '"','"' ORDER BY id) FROM checkpoint_deletions WHERE job_id = '"'job-c'"' AND reason = '"'model_deleted'"' AND purged_at IS NOT NULL" "ck-job-c-1,ck-job-c-2,final:job-c" &&
   ! has_files jobs/job-c/final && ! has_files jobs/job-c/checkpoints/step-1'
check "its job no longer names a final model" '[ "$(q "SELECT final_object_prefix IS NULL FROM jobs WHERE id = '"'job-c'"'")" = t ]'
check "a model deleted just now waits out its 30 s: nothing deleted, due when they pass" \
  'wait_for 20 "SELECT r.due_at = j.model_deleted_at + 30 FROM checkpoint_retention_queue r JOIN jobs j ON j.id = r.job_id WHERE j.id = '"'job-d'"'" t &&
   [ "$(steps job-d)" = 1,2 ] && has_files jobs/job-d/final'

q "UPDATE jobs SET status = 'cancelled', desired = 'cancel' WHERE id = 'job-b'"
check "the job continuing from step 10 ended: step 10 deleted" 'wait_for 20 "SELECT count(*) FROM checkpoints WHERE id = '"'ck-job-a-10'"'" 0'
q "UPDATE checkpoints SET pinned = false WHERE id = 'ck-job-a-20'"
check "step 20 unpinned: deleted" 'wait_for 20 "SELECT count(*) FROM checkpoints WHERE id = '"'ck-job-a-20'"'" 0'
check "files of both removed" 'eventually 20 "! has_files jobs/job-a/checkpoints/step-10 && ! has_files jobs/job-a/checkpoints/step-20"'

# Storage: a deleted checkpoint is metered up to its deletion, a kept one up to now (one transaction: one now).
check "storage lines = each checkpoint's bytes x its stored time, deleted ones up to deleted_at" \
  '[ "$(q "SELECT abs((SELECT sum(quantity) FROM whet_job_cost_lines(NULL, '"'job-a'"', 0, 9223372036854775807) WHERE sku = '"'storage_gb_month'"')
            - (SELECT sum(bytes::numeric / 1e9 * (coalesce(deleted_at, whet_now()) - created_at) / 3600 / 730)
               FROM checkpoint_storage WHERE job_id = '"'job-a'"')) < 1e-6
          AND (SELECT count(*) FROM checkpoint_storage WHERE job_id = '"'job-a'"' AND deleted_at IS NOT NULL) = 3")" = t ]'
check "the closed form of the storage spend equals its lines' sum" \
  '[ "$(q "SELECT (SELECT sum(amount) FROM whet_storage_cost('"'t1'"', 0, 9223372036854775807))
          = (SELECT sum(amount) FROM whet_job_cost_lines('"'t1'"', NULL, 0, 9223372036854775807) WHERE sku = '"'storage_gb_month'"')
          AND (SELECT sum(amount) FROM whet_storage_cost('"'t1'"', 0, 9223372036854775807)) > 0")" = t ]'
metric() { curl -fsS "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n {print $2}'; }
check "metrics: the deletions counted" '[ "$(metric $m1 whet_scheduler_checkpoints_deleted_total)" -ge 5 ]'
check "the leader logged what it deleted" 'grep -q "checkpoints deleted by retention" "$work/s1.log"'

# New settings: every job is looked at again (keep 1: step 40 goes; 50 and the final stay).
kill "$s1"
wait "$s1" 2>/dev/null || true
"$WHET_BIN" scheduler --checkpoint-keep 1 --deleted-model-keep never >"$work/s2.log" 2>&1 &
pids+=($!)
check "keep 1 after a restart: job-a keeps step 50 and the final" 'wait_for 20 "$(printf "SELECT string_agg(step_number::text, %s ORDER BY step_number) FROM checkpoints WHERE job_id = %s" "'"','"'" "'"'job-a'"'")" "50,60"'
ckpt job-a 55
check "under keep 1 a newly reported checkpoint queues its job: step 50 goes, 55 and the final stay" \
  'wait_for 20 "$(printf "SELECT string_agg(step_number::text, %s ORDER BY step_number) FROM checkpoints WHERE job_id = %s" "'"','"'" "'"'job-a'"'")" "55,60"'
check "deleted models never: job-d keeps its newest checkpoint and its final model" \
  'wait_for 20 "SELECT string_agg(step_number::text, '"','"') FROM checkpoints WHERE job_id = '"'job-d'"'" 2 && has_files jobs/job-d/final &&
   has_files jobs/job-d/checkpoints/step-2'
check "bad settings are refused with the flag named" \
  '! "$WHET_BIN" scheduler --checkpoint-keep -1 2>"$work/bad.err" && grep -q -- "--checkpoint-keep" "$work/bad.err" &&
   ! "$WHET_BIN" scheduler --deleted-model-keep soon 2>"$work/bad.err" && grep -q -- "--deleted-model-keep" "$work/bad.err"'

echo "$passes passed, $fails failed"
[ "$fails" = 0 ]
