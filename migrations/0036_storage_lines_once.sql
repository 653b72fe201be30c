-- 0036_storage_lines_once: whet_job_cost_lines (0006's whet_cost_lines, renamed by 0015) looked up a
-- checkpoint's device type (its job's usage records) in every one of its storage lines, one per day: at a
-- month's end a tenant with 2,000 checkpoints has 64,000 lines, and the lookups were ~0.5 s of every
-- budget status and key spend (psql, EXPLAIN ANALYZE). Now once per checkpoint. The lines are unchanged.
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
  -- the lookup ran for every day of every checkpoint).
  c AS MATERIALIZED (
    SELECT c.*, coalesce((SELECT min(r.device_type) FROM usage_records r WHERE r.job_id = c.job_id), '') AS job_device_type
    FROM (SELECT * FROM checkpoints c WHERE p_job IS NOT NULL AND c.job_id = p_job AND c.bytes > 0
          UNION ALL
          SELECT * FROM checkpoints c WHERE p_job IS NULL AND (p_tenant IS NULL OR c.tenant_id = p_tenant) AND c.bytes > 0) c),
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
             * (least(d.day + 86400, p_end, whet_now()) - greatest(d.day, c.created_at, p_start))::numeric / 3600 / 730,
           'GB-month', 1, 'usage'
    FROM c, LATERAL generate_series(greatest(c.created_at, p_start) / 86400 * 86400, least(p_end, whet_now()) - 1, 86400) d(day)
    WHERE least(d.day + 86400, p_end, whet_now()) > greatest(d.day, c.created_at, p_start)),
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
