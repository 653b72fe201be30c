-- 0040_checkpoint_retention: what the object store stops keeping (issue 15's growth; issue 12's deleted models).
--
-- Every checkpoint of every job was kept for ever, metered and billed as storage, and a deleted fine-tuned
-- model's files stayed until an operator removed them by hand. Now the scheduler's leader applies two rules
-- the operator sets (`whet scheduler --checkpoint-keep N --deleted-model-keep S`):
--   * keep the newest N step checkpoints of each job (by step), every pinned one and the final model
--     (`jobs/<id>/final`, listed as a checkpoint when the last step had none); 0 keeps every checkpoint;
--   * S seconds after a tenant deleted a fine-tuned model (DELETE /v1/models), all of its job's
--     checkpoints and its final model go, pinned or not (S NULL: a deleted model's files follow the first
--     rule only).
-- A checkpoint that a job not yet ended continues from (jobs.init_checkpoint) stays until that job ends.
--
-- A deleted checkpoint's row moves from `checkpoints` to `checkpoint_deletions` in one statement, so every
-- reader of `checkpoints` (the lists, the downloads, a create's or a completion's model lookup, resume)
-- stops seeing it at once, while its storage stays metered up to `deleted_at` (the view checkpoint_storage
-- is what the storage lines read). The leader then removes the objects and stamps `purged_at`; a failed
-- removal is tried again on its next pass.
--
-- What to look at is queued, not searched for: a trigger queues a job when it gains a checkpoint, when one of
-- its checkpoints is unpinned, when its model is deleted and when a job continuing from one of its
-- checkpoints ends; so a pass costs O(the jobs that changed), never O(every checkpoint). A change of the
-- settings queues every job with checkpoints once (checkpoint_retention_settings remembers what was applied,
-- starting with the defaults).

ALTER TABLE checkpoints ADD COLUMN pinned boolean NOT NULL DEFAULT false;

CREATE TABLE checkpoint_deletions (
  id            text PRIMARY KEY,             -- the checkpoint's id, or 'final:' || job id for a final model without one
  tenant_id     text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  job_id        text NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  step_number   integer,
  object_prefix text NOT NULL,
  bytes         bigint NOT NULL DEFAULT 0,
  created_at    bigint NOT NULL,
  deleted_at    bigint NOT NULL DEFAULT whet_now(),
  reason        text NOT NULL CHECK (reason IN ('keep_last', 'model_deleted')),
  purged_at     bigint                        -- when its objects were removed
);
CREATE INDEX checkpoint_deletions_job ON checkpoint_deletions(job_id);
CREATE INDEX checkpoint_deletions_tenant ON checkpoint_deletions(tenant_id);
CREATE INDEX checkpoint_deletions_unpurged ON checkpoint_deletions(deleted_at) WHERE purged_at IS NULL;
ALTER TABLE checkpoint_deletions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON checkpoint_deletions TO whet_app USING (tenant_id = whet_current_tenant());
GRANT SELECT ON checkpoint_deletions TO whet_app;

-- Every checkpoint that is or was stored: deleted_at is NULL while it is.
CREATE VIEW checkpoint_storage WITH (security_invoker = true) AS
  SELECT tenant_id, job_id, bytes, created_at, NULL::bigint AS deleted_at FROM checkpoints
  UNION ALL
  SELECT tenant_id, job_id, bytes, created_at, deleted_at FROM checkpoint_deletions;
GRANT SELECT ON checkpoint_storage TO whet_app;

-- A job continuing from a checkpoint holds it (the retention's check; a handful of rows match).
CREATE INDEX jobs_init_checkpoint ON jobs(init_checkpoint) WHERE init_checkpoint IS NOT NULL;

CREATE TABLE checkpoint_retention_queue (
  job_id text PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
  due_at bigint NOT NULL DEFAULT whet_now()
);
CREATE INDEX checkpoint_retention_queue_due ON checkpoint_retention_queue(due_at);

CREATE TABLE checkpoint_retention_settings (
  only_row            boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  keep                integer NOT NULL,
  deleted_model_keep_s bigint                 -- NULL: never
);
-- The defaults (`whet scheduler` without either setting) need no look at every job: they keep every
-- checkpoint but those of deleted models, and the models deleted before this migration are queued below.
INSERT INTO checkpoint_retention_settings (keep, deleted_model_keep_s) VALUES (0, 0);

-- Queues a job for the leader's next pass (or sooner than it was due). SECURITY DEFINER: the gateway
-- (whet_app) unpins checkpoints and deletes models, and owns no queue.
CREATE FUNCTION whet_checkpoint_retention_enqueue(p_job text) RETURNS void LANGUAGE sql SECURITY DEFINER
  SET search_path = public AS $$
  INSERT INTO checkpoint_retention_queue (job_id) VALUES (p_job)
  ON CONFLICT (job_id) DO UPDATE SET due_at = least(checkpoint_retention_queue.due_at, EXCLUDED.due_at)
$$;

CREATE FUNCTION whet_checkpoint_retention_changed() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  IF TG_TABLE_NAME = 'checkpoints' THEN
    PERFORM whet_checkpoint_retention_enqueue(NEW.job_id);
  ELSIF NEW.model_deleted_at IS NOT NULL AND OLD.model_deleted_at IS NULL THEN
    PERFORM whet_checkpoint_retention_enqueue(NEW.id);
  ELSE -- a job continuing from a checkpoint ended: that checkpoint is free to go
    PERFORM whet_checkpoint_retention_enqueue(c.job_id) FROM checkpoints c WHERE c.id = NEW.init_checkpoint;
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER checkpoints_retention_insert AFTER INSERT ON checkpoints FOR EACH ROW
  EXECUTE FUNCTION whet_checkpoint_retention_changed();
CREATE TRIGGER checkpoints_retention_unpin AFTER UPDATE OF pinned ON checkpoints FOR EACH ROW
  WHEN (OLD.pinned AND NOT NEW.pinned) EXECUTE FUNCTION whet_checkpoint_retention_changed();
CREATE TRIGGER jobs_retention_model_deleted AFTER UPDATE OF model_deleted_at ON jobs FOR EACH ROW
  WHEN (NEW.model_deleted_at IS NOT NULL AND OLD.model_deleted_at IS NULL)
  EXECUTE FUNCTION whet_checkpoint_retention_changed();
CREATE TRIGGER jobs_retention_init_ended AFTER UPDATE OF status ON jobs FOR EACH ROW
  WHEN (NEW.init_checkpoint IS NOT NULL AND NEW.status IN ('succeeded', 'failed', 'cancelled')
        AND OLD.status NOT IN ('succeeded', 'failed', 'cancelled'))
  EXECUTE FUNCTION whet_checkpoint_retention_changed();
INSERT INTO checkpoint_retention_queue (job_id) SELECT id FROM jobs WHERE model_deleted_at IS NOT NULL;

-- One pass of the leader over at most p_batch queued jobs that are due: moves the checkpoints the rules
-- let go to checkpoint_deletions; returns how many jobs it looked at and how many checkpoints moved. Queued
-- jobs another pass holds are skipped.
CREATE FUNCTION whet_checkpoint_retention(p_keep integer, p_deleted_model_keep_s bigint, p_batch integer,
                                          OUT looked_at integer, OUT moved integer) LANGUAGE plpgsql AS $$
DECLARE
  v_now bigint := whet_now();
  v_gone boolean; -- the job's model was deleted long enough ago (never when either is NULL): everything goes
  v_n integer;
  q record;
BEGIN
  looked_at := 0;
  moved := 0;
  -- New settings: every job with checkpoints is looked at again, once.
  IF NOT EXISTS (SELECT 1 FROM checkpoint_retention_settings
                 WHERE keep = p_keep AND deleted_model_keep_s IS NOT DISTINCT FROM p_deleted_model_keep_s) THEN
    INSERT INTO checkpoint_retention_settings (keep, deleted_model_keep_s) VALUES (p_keep, p_deleted_model_keep_s)
    ON CONFLICT (only_row) DO UPDATE SET keep = EXCLUDED.keep, deleted_model_keep_s = EXCLUDED.deleted_model_keep_s;
    INSERT INTO checkpoint_retention_queue (job_id) SELECT DISTINCT job_id FROM checkpoints
    ON CONFLICT (job_id) DO UPDATE SET due_at = least(checkpoint_retention_queue.due_at, EXCLUDED.due_at);
  END IF;
  FOR q IN SELECT r.job_id, j.tenant_id, j.model_deleted_at, j.final_object_prefix
           FROM checkpoint_retention_queue r JOIN jobs j ON j.id = r.job_id
           WHERE r.due_at <= v_now ORDER BY r.due_at LIMIT p_batch FOR UPDATE OF r SKIP LOCKED
  LOOP
    looked_at := looked_at + 1;
    IF q.model_deleted_at + p_deleted_model_keep_s > v_now THEN
      UPDATE checkpoint_retention_queue SET due_at = q.model_deleted_at + p_deleted_model_keep_s
      WHERE job_id = q.job_id;
      CONTINUE;
    END IF;
    v_gone := coalesce(q.model_deleted_at + p_deleted_model_keep_s <= v_now, false);
    DELETE FROM checkpoint_retention_queue WHERE job_id = q.job_id;
    -- A deleted model goes whole or waits whole: its final model is what a job continuing from it loads.
    IF v_gone AND EXISTS (
         SELECT 1 FROM checkpoints c JOIN jobs u ON u.init_checkpoint = c.id
         WHERE c.job_id = q.job_id AND u.status NOT IN ('succeeded', 'failed', 'cancelled')) THEN
      CONTINUE;
    END IF;
    WITH ranked AS (
      SELECT c.id, c.pinned, c.object_prefix LIKE '%/final' AS final,
             row_number() OVER (PARTITION BY c.object_prefix LIKE '%/final' ORDER BY c.step_number DESC) AS newest
      FROM checkpoints c WHERE c.job_id = q.job_id),
    doomed AS (
      SELECT r.id FROM ranked r
      WHERE (v_gone OR (p_keep > 0 AND NOT r.pinned AND NOT r.final AND r.newest > p_keep))
        AND NOT EXISTS (SELECT 1 FROM jobs u WHERE u.init_checkpoint = r.id
                        AND u.status NOT IN ('succeeded', 'failed', 'cancelled'))),
    gone AS (DELETE FROM checkpoints c USING doomed d WHERE c.id = d.id RETURNING c.*)
    INSERT INTO checkpoint_deletions (id, tenant_id, job_id, step_number, object_prefix, bytes, created_at, deleted_at,
                                      reason)
    SELECT g.id, g.tenant_id, g.job_id, g.step_number, g.object_prefix, g.bytes, g.created_at, v_now,
           CASE WHEN v_gone THEN 'model_deleted' ELSE 'keep_last' END
    FROM gone g;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    moved := moved + v_n;
    IF v_gone AND q.final_object_prefix IS NOT NULL THEN
      -- The final model's files, when no checkpoint row named them (the last step had its own checkpoint).
      INSERT INTO checkpoint_deletions (id, tenant_id, job_id, object_prefix, created_at, deleted_at, reason)
      SELECT 'final:' || q.job_id, q.tenant_id, q.job_id, q.final_object_prefix, v_now, v_now, 'model_deleted'
      WHERE NOT EXISTS (SELECT 1 FROM checkpoint_deletions d
                        WHERE d.job_id = q.job_id AND d.object_prefix = q.final_object_prefix)
      ON CONFLICT (id) DO NOTHING;
      UPDATE jobs SET final_object_prefix = NULL WHERE id = q.job_id;
    END IF;
  END LOOP;
END
$$;

-- The storage lines (0036's whet_job_cost_lines, restated whole as CREATE OR REPLACE must) read every
-- checkpoint stored in the window, each up to its deletion.
CREATE OR REPLACE FUNCTION whet_job_cost_lines(p_tenant text, p_job text, p_start bigint, p_end bigint)
  RETURNS TABLE (tenant_id text, job_id text, at bigint, day bigint, line_item text, sku text, device_type text,
                 quantity numeric, unit text, unit_price numeric, amount numeric, currency text,
                 price_version integer, charge text)
  LANGUAGE sql STABLE AS $$
  -- The records by job, else by tenant, else all: one branch each, so that each uses its index even in
  -- a plan made for any arguments (a job's cost is read for every job a list shows).
  WITH u AS (
    SELECT * FROM usage_records u WHERE p_job IS NOT NULL AND u.job_id = p_job
      AND u.created_at >= p_start AND u.created_at < p_end
    UNION ALL
    SELECT * FROM usage_records u WHERE p_job IS NULL AND p_tenant IS NOT NULL AND u.tenant_id = p_tenant
      AND u.created_at >= p_start AND u.created_at < p_end
    UNION ALL
    SELECT * FROM usage_records u WHERE p_job IS NULL AND p_tenant IS NULL
      AND u.created_at >= p_start AND u.created_at < p_end),
  -- Each checkpoint with its job's device type, looked up once per checkpoint (MATERIALIZED: inlined,
  -- the lookup ran for every day of every checkpoint), and the end of its storage.
  c AS MATERIALIZED (
    SELECT c.tenant_id, c.job_id, c.bytes, c.created_at, coalesce(c.deleted_at, whet_now()) AS stored_until,
           coalesce((SELECT min(r.device_type) FROM usage_records r WHERE r.job_id = c.job_id), '') AS job_device_type
    FROM (SELECT * FROM checkpoint_storage c WHERE p_job IS NOT NULL AND c.job_id = p_job AND c.bytes > 0
          UNION ALL
          SELECT * FROM checkpoint_storage c WHERE p_job IS NULL AND (p_tenant IS NULL OR c.tenant_id = p_tenant)
            AND c.bytes > 0) c),
  q AS (
    SELECT u.tenant_id, u.job_id, u.created_at AS at, v.line_item, v.sku, u.device_type, v.quantity, v.unit, v.sign,
           v.charge
    FROM u, LATERAL (VALUES
      ('device_hours:' || u.device_type, 'device_hour', u.device_seconds::numeric / 3600, 'device-hour', 1, 'usage'),
      ('trained_tokens', 'trained_tokens_1m', u.trained_tokens::numeric / 1000000, '1M tokens', 1, 'usage'),
      ('rollout_tokens', 'rollout_completion_tokens_1m', u.rollout_tokens::numeric / 1000000, '1M tokens', 1, 'usage'),
      ('lost_attempt_credit:' || u.device_type, 'device_hour',
       CASE WHEN u.lost THEN u.device_seconds::numeric / 3600 ELSE 0 END, 'device-hour', -1, 'credit')
    ) v(line_item, sku, quantity, unit, sign, charge)
    WHERE v.quantity > 0
    UNION ALL
    SELECT c.tenant_id, c.job_id, d.day, 'storage', 'storage_gb_month',
           c.job_device_type,
           c.bytes::numeric / 1e9
             * (least(d.day + 86400, p_end, c.stored_until) - greatest(d.day, c.created_at, p_start))::numeric / 3600 / 730,
           'GB-month', 1, 'usage'
    FROM c, LATERAL generate_series(greatest(c.created_at, p_start) / 86400 * 86400, least(p_end, c.stored_until) - 1, 86400) d(day)
    WHERE least(d.day + 86400, p_end, c.stored_until) > greatest(d.day, c.created_at, p_start)),
  -- Each version's time range; a line takes its SKU's price for its device type, else for any type.
  books AS (
    SELECT b.version, b.currency, b.effective_from AS lo,
           coalesce(lead(b.effective_from) OVER (ORDER BY b.effective_from), 9223372036854775807) AS hi
    FROM price_books b)
  SELECT q.tenant_id, q.job_id, q.at, q.at / 86400 * 86400, q.line_item, q.sku, q.device_type, round(q.quantity, 9),
         q.unit, coalesce(pd.unit_price, pa.unit_price),
         round(q.sign * q.quantity * coalesce(pd.unit_price, pa.unit_price, 0), 9), coalesce(b.currency, whet_currency()),
         b.version, q.charge
  FROM q LEFT JOIN books b ON q.at >= b.lo AND q.at < b.hi
  LEFT JOIN prices pd ON pd.version = b.version AND pd.sku = q.sku AND pd.device_type = q.device_type
  LEFT JOIN prices pa ON pa.version = b.version AND pa.sku = q.sku AND pa.device_type = ''
$$;

-- 0035's closed form of the same storage lines, each checkpoint up to its deletion.
CREATE OR REPLACE FUNCTION whet_storage_cost(p_tenant text, p_start bigint, p_end bigint)
  RETURNS TABLE (job_id text, amount numeric) LANGUAGE sql STABLE AS $$
  WITH books AS (
    SELECT b.version, b.effective_from AS lo,
           coalesce(lead(b.effective_from) OVER (ORDER BY b.effective_from), 9223372036854775807) AS hi
    FROM price_books b),
  c AS MATERIALIZED (
    SELECT c.job_id, c.bytes,
           coalesce((SELECT min(r.device_type) FROM usage_records r WHERE r.job_id = c.job_id), '') AS device_type,
           greatest(c.created_at, p_start) AS lo, least(p_end, coalesce(c.deleted_at, whet_now())) AS hi
    FROM checkpoint_storage c
    WHERE c.tenant_id = p_tenant AND c.bytes > 0
      AND least(p_end, coalesce(c.deleted_at, whet_now())) > greatest(c.created_at, p_start)),
  d AS (SELECT c.*, c.lo / 86400 * 86400 AS d0, (c.hi - 1) / 86400 * 86400 AS dl FROM c),
  -- A checkpoint's days in runs of one length: its first, its last (when another), the whole days between.
  runs AS (
    SELECT d.job_id, d.bytes, d.device_type, d0 AS first_day, d0 AS last_day, least(d0 + 86400, d.hi) - d.lo AS secs
    FROM d
    UNION ALL
    SELECT d.job_id, d.bytes, d.device_type, dl, dl, d.hi - dl FROM d WHERE dl > d0
    UNION ALL
    SELECT d.job_id, d.bytes, d.device_type, d0 + 86400, dl - 86400, 86400 FROM d WHERE dl - d0 >= 2 * 86400),
  -- Each run's days under each price version (a day's line takes the version in force at its start): the
  -- run's days from the version's first day start on to its last before the next version.
  priced AS (
    SELECT r.job_id, r.bytes, r.device_type, r.secs, b.version,
           (least(r.last_day, (least(b.hi, r.last_day + 86400) + 86399) / 86400 * 86400 - 86400)
            - greatest(r.first_day, (b.lo + 86399) / 86400 * 86400)) / 86400 + 1 AS days
    FROM runs r JOIN books b ON b.lo <= r.last_day AND b.hi > r.first_day)
  SELECT p.job_id, sum(p.days * round(1 * (p.bytes::numeric / 1e9 * p.secs::numeric / 3600 / 730)
                                      * coalesce(pd.unit_price, pa.unit_price, 0), 9))
  FROM priced p
  LEFT JOIN prices pd ON pd.version = p.version AND pd.sku = 'storage_gb_month' AND pd.device_type = p.device_type
  LEFT JOIN prices pa ON pa.version = p.version AND pa.sku = 'storage_gb_month' AND pa.device_type = ''
  WHERE p.days > 0
  GROUP BY p.job_id
$$;
