-- 0024_inference_key: an API key's spend counts its inference, a model worker's tokens/s, and training
-- sessions' saves as models.
--
-- inference_usage rows carry the API key that asked (NULL: a tenant token), as jobs do (migration 0009),
-- so an API key's monthly limit counts the tokens it had answered: whet_key_spend adds the key's
-- inference cost lines of the month to its jobs'. The inference half of whet_cost_lines (migration
-- 0015) becomes whet_inference_cost_lines, by tenant or by key, so both price tokens the same way.
ALTER TABLE inference_usage ADD COLUMN api_key_id text REFERENCES api_keys(id) ON DELETE SET NULL;
CREATE INDEX inference_usage_api_key ON inference_usage(api_key_id, created_at) WHERE api_key_id IS NOT NULL;

-- Two lines per answer (prompt and completion tokens) of tenant p_tenant (NULL: any) or of key p_key
-- (NULL: any), recorded in [p_start, p_end); the columns of whet_cost_lines.
CREATE FUNCTION whet_inference_cost_lines(p_tenant text, p_key text, p_start bigint, p_end bigint)
  RETURNS TABLE (tenant_id text, job_id text, at bigint, day bigint, line_item text, sku text, device_type text,
                 quantity numeric, unit text, unit_price numeric, amount numeric, currency text,
                 price_version integer, charge text, model text)
  LANGUAGE sql STABLE AS $$
  SELECT i.tenant_id, NULL, i.created_at, i.created_at / 86400 * 86400, v.line_item, v.line_item || '_1m', '',
         round(v.quantity, 9), '1M tokens', p.unit_price, round(v.quantity * coalesce(p.unit_price, 0), 9),
         coalesce(p.currency, whet_currency()), p.version, 'usage', i.model
  FROM inference_usage i
  CROSS JOIN LATERAL (VALUES ('inference_prompt_tokens', i.prompt_tokens::numeric / 1000000),
                             ('inference_completion_tokens', i.completion_tokens::numeric / 1000000))
    v(line_item, quantity)
  LEFT JOIN LATERAL whet_price(v.line_item || '_1m', '', i.created_at) p ON true
  WHERE (p_tenant IS NULL OR i.tenant_id = p_tenant) AND (p_key IS NULL OR i.api_key_id = p_key)
    AND i.created_at >= p_start AND i.created_at < p_end AND v.quantity > 0
$$;

CREATE OR REPLACE FUNCTION whet_cost_lines(p_tenant text, p_job text, p_start bigint, p_end bigint)
  RETURNS TABLE (tenant_id text, job_id text, at bigint, day bigint, line_item text, sku text, device_type text,
                 quantity numeric, unit text, unit_price numeric, amount numeric, currency text,
                 price_version integer, charge text, model text)
  LANGUAGE sql STABLE AS $$
  SELECT l.*, NULL::text FROM whet_job_cost_lines(p_tenant, p_job, p_start, p_end) l
  UNION ALL
  SELECT * FROM whet_inference_cost_lines(p_tenant, NULL, p_start, p_end) WHERE p_job IS NULL
$$;

-- This month's spend of an API key: the jobs it created (migration 0009) and the answers it was given.
CREATE OR REPLACE FUNCTION whet_key_spend(p_key text) RETURNS numeric LANGUAGE sql STABLE AS $$
  WITH m AS (SELECT extract(epoch FROM date_trunc('month', now() AT TIME ZONE 'UTC'))::bigint AS start)
  SELECT coalesce((SELECT sum(s.amount) FROM jobs j, m,
    LATERAL (SELECT coalesce((SELECT sum(l.amount)
                              FROM whet_cost_lines(j.tenant_id, j.id, m.start, 9223372036854775807) l), 0)
             + whet_running_cost(j.tenant_id, j.id) AS amount) s
    WHERE j.api_key_id = p_key), 0)
  + coalesce((SELECT sum(l.amount) FROM m, whet_inference_cost_lines(NULL, p_key, m.start, 9223372036854775807) l), 0)
$$;

-- The generated tokens per second of a ready model worker over its last heartbeat interval (the
-- executor's two last reads of its /metrics), a measure of load beside requests_waiting
-- (scheduler/service/serving.c).
ALTER TABLE model_workers ADD COLUMN tokens_per_s real NOT NULL DEFAULT 0;

-- A training session's saves as fine-tuned models (POST /v1/training_sessions/{id}/save,
-- gateway/training_sessions.c): the gateway names the save (ft:BASE:TENANT:SESSION:save-HEX, where it
-- goes: sessions/SESSION/save-HEX) and records it before the worker writes it, and forgets it when the
-- save failed. Listed in GET /v1/models, retrievable, served by chat/completions and completions, an
-- init_checkpoint of a new session, deletable (DELETE /v1/models/{model}: neither listed nor served
-- afterwards; its objects stay, as a deleted job's model's do, migration 0015). A save outlives its
-- session.
CREATE TABLE session_models (
  model         text PRIMARY KEY,
  tenant_id     text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  session_id    text NOT NULL REFERENCES training_sessions(id) ON DELETE CASCADE,
  base_model    text NOT NULL,
  object_prefix text NOT NULL,
  created_at    bigint NOT NULL DEFAULT whet_now(),
  deleted_at    bigint
);
CREATE INDEX session_models_tenant ON session_models (tenant_id, created_at);
ALTER TABLE session_models ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON session_models TO whet_app USING (tenant_id = whet_current_tenant())
  WITH CHECK (tenant_id = whet_current_tenant());
GRANT SELECT, INSERT, UPDATE, DELETE ON session_models TO whet_app;
