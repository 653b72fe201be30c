-- 0028_session_usage: training sessions metered per token, as Tinker bills them (train, prefill, sample).
--
-- One row per forward_backward or sample a session's model worker answered 200 through the gateway
-- (gateway/training_sessions.c), with the tokens the worker reports for the call (the numbers of its
-- answer's `usage`): a forward_backward's train tokens (every datum's model_input), a sample's prefill
-- tokens (its prompt, once however many sequences) and sample tokens (every sequence's). optim_step,
-- save, create and delete are not metered. Rows carry the API key that asked (NULL: a tenant token), as
-- inference_usage rows do (migration 0024), so the key's monthly limit counts them too.
CREATE TABLE session_usage (
  seq            bigserial PRIMARY KEY,
  tenant_id      text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  session_id     text NOT NULL REFERENCES training_sessions(id) ON DELETE CASCADE,
  base_model     text NOT NULL,
  call           text NOT NULL CHECK (call IN ('forward_backward', 'sample')),
  request_id     text NOT NULL,
  train_tokens   bigint NOT NULL DEFAULT 0 CHECK (train_tokens >= 0),
  prefill_tokens bigint NOT NULL DEFAULT 0 CHECK (prefill_tokens >= 0),
  sample_tokens  bigint NOT NULL DEFAULT 0 CHECK (sample_tokens >= 0),
  api_key_id     text REFERENCES api_keys(id) ON DELETE SET NULL,
  created_at     bigint NOT NULL DEFAULT whet_now()
);
CREATE INDEX session_usage_tenant ON session_usage(tenant_id, created_at);
CREATE INDEX session_usage_api_key ON session_usage(api_key_id, created_at) WHERE api_key_id IS NOT NULL;
ALTER TABLE session_usage ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON session_usage TO whet_app USING (tenant_id = whet_current_tenant())
  WITH CHECK (tenant_id = whet_current_tenant());
GRANT SELECT, INSERT ON session_usage TO whet_app;
GRANT USAGE ON SEQUENCE session_usage_seq_seq TO whet_app;

-- The token lines outside jobs, of tenant p_tenant (NULL: any) or of key p_key (NULL: any), recorded in
-- [p_start, p_end): up to three per session call, then the answers' lines of migration 0024 (that function
-- renamed whet_answer_cost_lines, unchanged). whet_cost_lines and whet_key_spend (0024) call this one by name,
-- so everything that reads cost lines (GET /v1/costs, /v1/usage's costs, budgets, an API key's spend, the
-- FOCUS export) sees the sessions' lines. A session line's `model` is the session's id (what the line is
-- for; the FOCUS export's ResourceId). Train tokens are priced as a job's (trained_tokens_1m), prefill and
-- sample tokens as inference's prompt and completion tokens (inference_prompt_tokens_1m,
-- inference_completion_tokens_1m), in the version in effect when the call was recorded.
ALTER FUNCTION whet_inference_cost_lines(text, text, bigint, bigint) RENAME TO whet_answer_cost_lines;
CREATE FUNCTION whet_inference_cost_lines(p_tenant text, p_key text, p_start bigint, p_end bigint)
  RETURNS TABLE (tenant_id text, job_id text, at bigint, day bigint, line_item text, sku text, device_type text,
                 quantity numeric, unit text, unit_price numeric, amount numeric, currency text,
                 price_version integer, charge text, model text)
  LANGUAGE sql STABLE AS $$
  SELECT s.tenant_id, NULL, s.created_at, s.created_at / 86400 * 86400, v.line_item, v.sku, '',
         round(v.quantity, 9), '1M tokens', p.unit_price, round(v.quantity * coalesce(p.unit_price, 0), 9),
         coalesce(p.currency, whet_currency()), p.version, 'usage', s.session_id
  FROM session_usage s
  CROSS JOIN LATERAL (VALUES ('session_train_tokens', 'trained_tokens_1m', s.train_tokens::numeric / 1000000),
                             ('session_prefill_tokens', 'inference_prompt_tokens_1m', s.prefill_tokens::numeric / 1000000),
                             ('session_sample_tokens', 'inference_completion_tokens_1m', s.sample_tokens::numeric / 1000000))
    v(line_item, sku, quantity)
  LEFT JOIN LATERAL whet_price(v.sku, '', s.created_at) p ON true
  WHERE (p_tenant IS NULL OR s.tenant_id = p_tenant) AND (p_key IS NULL OR s.api_key_id = p_key)
    AND s.created_at >= p_start AND s.created_at < p_end AND v.quantity > 0
  UNION ALL
  SELECT * FROM whet_answer_cost_lines(p_tenant, p_key, p_start, p_end)
$$;
