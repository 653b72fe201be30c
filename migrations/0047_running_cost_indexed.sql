-- 0047_running_cost_indexed: whet_running_cost (0006) filtered the running attempts by `(p_job IS NULL OR
-- a.job_id = p_job)`, which no index serves in a plan made for any argument (whet_job_cost_recorded's generic
-- plan, 0033): every call read every running attempt of the fleet (job_attempts_running) to keep one job's
-- (psql: 1,000 rows read for one; 80,000 at 10,000 nodes of 8 devices), for each job object with a cost and
-- each budget. Now one branch per argument, each on its index, as whet_job_cost_lines does: a job's attempts
-- by the primary key, a tenant's running ones by a new partial index, the fleet's by job_attempts_running.
-- Same sums.
CREATE INDEX job_attempts_running_tenant ON job_attempts(tenant_id) WHERE ended_at IS NULL;

CREATE OR REPLACE FUNCTION whet_running_cost(p_tenant text, p_job text) RETURNS numeric LANGUAGE sql STABLE AS $$
  WITH a AS (
    SELECT a.* FROM job_attempts a WHERE p_job IS NOT NULL AND a.job_id = p_job AND a.ended_at IS NULL
      AND (p_tenant IS NULL OR a.tenant_id = p_tenant)
    UNION ALL
    SELECT a.* FROM job_attempts a WHERE p_job IS NULL AND p_tenant IS NOT NULL AND a.tenant_id = p_tenant
      AND a.ended_at IS NULL
    UNION ALL
    SELECT a.* FROM job_attempts a WHERE p_job IS NULL AND p_tenant IS NULL AND a.ended_at IS NULL)
  SELECT coalesce(round(sum((whet_now() - a.started_at)::numeric / 3600
                            * CASE WHEN a.gpu_mask <> 0 THEN bit_count(a.gpu_mask::bit(32)) ELSE a.gpu_milli / 1000.0 END
                            * coalesce(p.unit_price, 0)), 9), 0)
  FROM a LEFT JOIN LATERAL whet_price('device_hour', a.device_type, whet_now()) p ON true
$$;
