-- 0015_serving: deleting a fine-tuned model (DELETE /v1/models/{model}) and metering inference.
--
-- A deleted model is no longer listed nor served, and neither are its checkpoints' models
-- (ft:…:ckpt-step-N); its job stays, with its checkpoints and their files (a job's history: they are
-- listed and downloadable as before, and their storage is metered as before). No process deletes the
-- objects yet: an operator who wants the space back removes the job's prefix from the object store
-- (jobs/<job id>/) once the tenant no longer needs its files.
ALTER TABLE jobs ADD COLUMN model_deleted_at bigint;

-- Inference metering: one row per answer of a model worker through the gateway (gateway/inference.c),
-- with the prompt and completion tokens of the answer's own `usage`. `model` is the name the tenant
-- asked for (a base, `ft:…` or `ft:…:ckpt-step-N`), `base_model` the base that served it.
CREATE TABLE inference_usage (
  seq               bigserial PRIMARY KEY,
  tenant_id         text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  model             text NOT NULL,
  base_model        text NOT NULL,
  request_id        text NOT NULL,
  prompt_tokens     bigint NOT NULL CHECK (prompt_tokens >= 0),
  completion_tokens bigint NOT NULL CHECK (completion_tokens >= 0),
  created_at        bigint NOT NULL DEFAULT whet_now()
);
CREATE INDEX inference_usage_tenant ON inference_usage(tenant_id, created_at);
ALTER TABLE inference_usage ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON inference_usage TO whet_app USING (tenant_id = whet_current_tenant())
  WITH CHECK (tenant_id = whet_current_tenant());
GRANT SELECT, INSERT ON inference_usage TO whet_app;
GRANT USAGE ON SEQUENCE inference_usage_seq_seq TO whet_app;

-- The cost lines of migration 0006, plus two per inference answer (line items inference_prompt_tokens
-- and inference_completion_tokens, priced per million by the SKUs of the same names with _1m, by the
-- version in effect when the answer was recorded; no job, no device type) and a `model` column (the
-- model an inference line is for, NULL on the others). Only the column list changed for the others.
DROP FUNCTION whet_cost_lines(text, text, bigint, bigint);
CREATE FUNCTION whet_cost_lines(p_tenant text, p_job text, p_start bigint, p_end bigint)
  RETURNS TABLE (tenant_id text, job_id text, at bigint, day bigint, line_item text, sku text, device_type text,
                 quantity numeric, unit text, unit_price numeric, amount numeric, currency text,
                 price_version integer, charge text, model text)
  LANGUAGE sql STABLE AS $$
  WITH u AS (
    SELECT * FROM usage_records u WHERE p_job IS NOT NULL AND u.job_id = p_job
      AND u.created_at >= p_start AND u.created_at < p_end
    UNION ALL
    SELECT * FROM usage_records u WHERE p_job IS NULL AND p_tenant IS NOT NULL AND u.tenant_id = p_tenant
      AND u.created_at >= p_start AND u.created_at < p_end
    UNION ALL
    SELECT * FROM usage_records u WHERE p_job IS NULL AND p_tenant IS NULL
      AND u.created_at >= p_start AND u.created_at < p_end),
  c AS (
    SELECT * FROM checkpoints c WHERE p_job IS NOT NULL AND c.job_id = p_job AND c.bytes > 0
    UNION ALL
    SELECT * FROM checkpoints c WHERE p_job IS NULL AND (p_tenant IS NULL OR c.tenant_id = p_tenant) AND c.bytes > 0),
  i AS (
    SELECT * FROM inference_usage i WHERE p_job IS NULL AND p_tenant IS NOT NULL AND i.tenant_id = p_tenant
      AND i.created_at >= p_start AND i.created_at < p_end
    UNION ALL
    SELECT * FROM inference_usage i WHERE p_job IS NULL AND p_tenant IS NULL
      AND i.created_at >= p_start AND i.created_at < p_end),
  q AS (
    SELECT u.tenant_id, u.job_id, u.created_at AS at, v.line_item, v.sku, u.device_type, v.quantity, v.unit, v.sign,
           v.charge, NULL::text AS model
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
           coalesce((SELECT min(r.device_type) FROM usage_records r WHERE r.job_id = c.job_id), ''),
           c.bytes::numeric / 1e9
             * (least(d.day + 86400, p_end, whet_now()) - greatest(d.day, c.created_at, p_start))::numeric / 3600 / 730,
           'GB-month', 1, 'usage', NULL
    FROM c, LATERAL generate_series(greatest(c.created_at, p_start) / 86400 * 86400, least(p_end, whet_now()) - 1, 86400) d(day)
    WHERE least(d.day + 86400, p_end, whet_now()) > greatest(d.day, c.created_at, p_start)
    UNION ALL
    SELECT i.tenant_id, NULL, i.created_at, v.line_item, v.line_item || '_1m', '', v.quantity, '1M tokens', 1, 'usage',
           i.model
    FROM i, LATERAL (VALUES
      ('inference_prompt_tokens', i.prompt_tokens::numeric / 1000000),
      ('inference_completion_tokens', i.completion_tokens::numeric / 1000000)
    ) v(line_item, quantity)
    WHERE v.quantity > 0),
  books AS (
    SELECT b.version, b.currency, b.effective_from AS lo,
           coalesce(lead(b.effective_from) OVER (ORDER BY b.effective_from), 9223372036854775807) AS hi
    FROM price_books b)
  SELECT q.tenant_id, q.job_id, q.at, q.at / 86400 * 86400, q.line_item, q.sku, q.device_type, round(q.quantity, 9),
         q.unit, coalesce(pd.unit_price, pa.unit_price),
         round(q.sign * q.quantity * coalesce(pd.unit_price, pa.unit_price, 0), 9), coalesce(b.currency, whet_currency()),
         b.version, q.charge, q.model
  FROM q LEFT JOIN books b ON q.at >= b.lo AND q.at < b.hi
  LEFT JOIN prices pd ON pd.version = b.version AND pd.sku = q.sku AND pd.device_type = q.device_type
  LEFT JOIN prices pa ON pa.version = b.version AND pa.sku = q.sku AND pa.device_type = ''
$$;
