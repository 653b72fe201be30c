-- 0043_key_spends: the key lists (GET /v1/api_keys, GET /admin/v1/tenants/{id}/api_keys) showed each key's
-- month spend through whet_key_spend, which makes the tenant's month of cost lines (0035): a tenant with K
-- keys paid K of those per listing. whet_tenant_key_spends makes them once and groups them by key: the same
-- four parts as whet_key_spend (the month's job lines but storage, the storage's closed form, the running
-- cost of jobs with an unended attempt, the key's inference and session lines), so the same sums.
CREATE FUNCTION whet_tenant_key_spends(p_tenant text) RETURNS TABLE (key_id text, spent numeric)
  LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_start bigint := whet_month_start();
BEGIN
  RETURN QUERY
  WITH job_lines AS (
    SELECT j.api_key_id, sum(l.amount) AS amount
    FROM whet_job_cost_lines(p_tenant, NULL, v_start, 9223372036854775807) l JOIN jobs j ON j.id = l.job_id
    WHERE j.api_key_id IS NOT NULL AND l.sku IS DISTINCT FROM 'storage_gb_month'
    GROUP BY j.api_key_id),
  storage AS (
    SELECT j.api_key_id, sum(s.amount) AS amount
    FROM whet_storage_cost(p_tenant, v_start, 9223372036854775807) s JOIN jobs j ON j.id = s.job_id
    WHERE j.api_key_id IS NOT NULL
    GROUP BY j.api_key_id),
  running AS (
    SELECT j.api_key_id, sum(whet_running_cost(j.tenant_id, j.id)) AS amount
    FROM jobs j
    WHERE j.tenant_id = p_tenant AND j.api_key_id IS NOT NULL
      AND EXISTS (SELECT 1 FROM job_attempts a WHERE a.job_id = j.id AND a.ended_at IS NULL)
    GROUP BY j.api_key_id)
  SELECT k.id,
         coalesce(jl.amount, 0) + coalesce(st.amount, 0) + coalesce(ru.amount, 0)
         + coalesce((SELECT sum(l.amount) FROM whet_inference_cost_lines(NULL, k.id, v_start, 9223372036854775807) l), 0)
  FROM api_keys k
  LEFT JOIN job_lines jl ON jl.api_key_id = k.id
  LEFT JOIN storage st ON st.api_key_id = k.id
  LEFT JOIN running ru ON ru.api_key_id = k.id
  WHERE k.tenant_id = p_tenant;
END
$$;
