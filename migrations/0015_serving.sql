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

-- The cost lines of migration 0006 (renamed whet_job_cost_lines, unchanged), plus two per inference
-- answer: line items inference_prompt_tokens and inference_completion_tokens, priced per million by the
-- SKUs of the same names with _1m in the version in effect when the answer was recorded, with no job
-- and no device type; and a `model` column, the model an inference line is for (NULL on the others).
ALTER FUNCTION whet_cost_lines(text, text, bigint, bigint) RENAME TO whet_job_cost_lines;
CREATE FUNCTION whet_cost_lines(p_tenant text, p_job text, p_start bigint, p_end bigint)
  RETURNS TABLE (tenant_id text, job_id text, at bigint, day bigint, line_item text, sku text, device_type text,
                 quantity numeric, unit text, unit_price numeric, amount numeric, currency text,
                 price_version integer, charge text, model text)
  LANGUAGE sql STABLE AS $$
  SELECT l.*, NULL::text FROM whet_job_cost_lines(p_tenant, p_job, p_start, p_end) l
  UNION ALL
  SELECT i.tenant_id, NULL, i.created_at, i.created_at / 86400 * 86400, v.line_item, v.line_item || '_1m', '',
         round(v.quantity, 9), '1M tokens', p.unit_price, round(v.quantity * coalesce(p.unit_price, 0), 9),
         coalesce(p.currency, whet_currency()), p.version, 'usage', i.model
  FROM inference_usage i
  CROSS JOIN LATERAL (VALUES ('inference_prompt_tokens', i.prompt_tokens::numeric / 1000000),
                             ('inference_completion_tokens', i.completion_tokens::numeric / 1000000)) v(line_item, quantity)
  LEFT JOIN LATERAL whet_price(v.line_item || '_1m', '', i.created_at) p ON true
  WHERE p_job IS NULL AND (p_tenant IS NULL OR i.tenant_id = p_tenant) AND i.created_at >= p_start
    AND i.created_at < p_end AND v.quantity > 0
$$;
