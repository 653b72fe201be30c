-- 0052_usage_by_job_month: a job's usage is read from its month's partition alone (issue 15's growth).
-- Since 0051 usage_records is partitioned by the month its job was created in, and a read by job_id alone
-- probes every month's index: each job object's cost (whet_job_cost, on every GET and list of jobs) grew by a
-- probe per month kept. The job's created_at names its partition. whet_job_cost reads it into a variable
-- first: a PL/pgSQL variable is a parameter of the plan, so PostgreSQL drops the other months' scans as the
-- statement starts (pgbench, a job without usage among 27 partitions: 230 -> 158 us of CPU a call).
-- whet_job_cost_lines (0040's, restated whole as CREATE OR REPLACE must) names it by a subquery, whose
-- value prunes the other months' scans as they would run (they are still set up); nothing else changes.

CREATE OR REPLACE FUNCTION whet_job_cost(p_job text) RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_created bigint := (SELECT j.created_at FROM jobs j WHERE j.id = p_job);
BEGIN
  IF EXISTS (SELECT 1 FROM job_attempts WHERE job_id = p_job)
     OR EXISTS (SELECT 1 FROM usage_records WHERE job_id = p_job AND job_created_at = v_created)
     OR EXISTS (SELECT 1 FROM checkpoints WHERE job_id = p_job) THEN
    RETURN whet_job_cost_recorded(p_job);
  END IF;
  RETURN jsonb_build_object('amount', 0, 'currency', whet_currency(), 'running_amount', 0, 'run_seconds', 0,
                            'line_items', '{}'::jsonb);
END
$$;

CREATE OR REPLACE FUNCTION whet_job_cost_lines(p_tenant text, p_job text, p_start bigint, p_end bigint)
  RETURNS TABLE (tenant_id text, job_id text, at bigint, day bigint, line_item text, sku text, device_type text,
                 quantity numeric, unit text, unit_price numeric, amount numeric, currency text,
                 price_version integer, charge text)
  LANGUAGE sql STABLE AS $$
  -- The records by job, else by tenant, else all: one branch each, so that each uses its index even in
  -- a plan made for any arguments (a job's cost is read for every job a list shows).
  WITH u AS (
    SELECT * FROM usage_records u WHERE p_job IS NOT NULL AND u.job_id = p_job
      AND u.job_created_at = (SELECT j.created_at FROM jobs j WHERE j.id = p_job)
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
           coalesce((SELECT min(r.device_type) FROM usage_records r WHERE r.job_id = c.job_id
                     AND r.job_created_at = (SELECT j.created_at FROM jobs j WHERE j.id = c.job_id)), '') AS job_device_type
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
