-- 0056_trigger_plans: a statement trigger's query over its transition table is planned once per session,
-- with the row count of the first call's table. A first call with many rows (a lease expiry ending a node's
-- attempts, a bulk delete) left a plan that hashed every succeeded job and all of throughput_jobs to look
-- up the one job of each later FinishJob: its usage insert took 19.7 ms a call in tests/bench/scale under
-- job churn (1k nodes, ~130 finishes/s; 18.2 ms of it this trigger query), 24.6 ms by hand after a
-- 3,000-row insert in the same session against 0.1 ms after a 1-row one, and it grows with the jobs table.
-- Both triggers now take only the job ids from the transition table and read each job by its key alone,
-- its status tested after: a generic plan for "id = $1 AND status = 'succeeded'" made while few jobs had
-- succeeded scans the partial index of succeeded jobs (jobs_succeeded_file) with id as a filter, and reads
-- every succeeded job once they are many (8.0 ms a call in the same bench). The budget guard (0038) joined
-- its transition table to jobs the same way, and whet_throughput_refresh (0020) read its jobs with the
-- status in the same scan (now a materialized read by key first). Same answers.
CREATE OR REPLACE FUNCTION whet_throughput_usage() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
DECLARE
  changed text[];
  ids text[] := '{}';
  v_job text;
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT array_agg(DISTINCT job_id) INTO changed FROM new_rows;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT array_agg(DISTINCT job_id) INTO changed FROM old_rows;
  ELSE
    SELECT array_agg(job_id) INTO changed FROM (SELECT job_id FROM old_rows UNION SELECT job_id FROM new_rows) c;
  END IF;
  FOREACH v_job IN ARRAY coalesce(changed, '{}') LOOP
    IF (SELECT status FROM jobs WHERE id = v_job) = 'succeeded'
       OR EXISTS (SELECT 1 FROM throughput_jobs WHERE job_id = v_job) THEN
      ids := ids || v_job;
    END IF;
  END LOOP;
  IF cardinality(ids) > 0 THEN
    PERFORM whet_throughput_refresh(ids);
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION whet_throughput_refresh(p_jobs text[]) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  IF p_jobs IS NULL THEN
    RETURN;
  END IF;
  -- One refresh of a job at a time (the jobs' row locks, in one order): the second then sees the
  -- first's rows.
  PERFORM 1 FROM jobs WHERE id = ANY (p_jobs) ORDER BY id FOR NO KEY UPDATE;
  WITH old AS (DELETE FROM throughput_jobs WHERE job_id = ANY (p_jobs) RETURNING *),
  d AS (SELECT base_model, device_type, method, shard, sum(tokens) AS tokens, sum(seconds) AS seconds, count(*) AS jobs
        FROM old GROUP BY 1, 2, 3, 4)
  UPDATE throughput_groups g SET tokens = g.tokens - d.tokens, seconds = g.seconds - d.seconds, jobs = g.jobs - d.jobs
    FROM d WHERE g.base_model = d.base_model AND g.device_type = d.device_type AND g.method = d.method
      AND g.shard = d.shard;
  WITH js AS MATERIALIZED (SELECT id, created_at, base_model, method, status FROM jobs WHERE id = ANY (p_jobs)),
  new AS (
    INSERT INTO throughput_jobs (job_id, device_type, base_model, method, tokens, seconds, shard)
    SELECT j.id, u.device_type, j.base_model, j.method ->> 'type', sum(u.trained_tokens), sum(u.device_seconds::numeric),
           hashtext(j.id) & 31
    FROM js j JOIN usage_records u ON u.job_id = j.id AND u.job_created_at = j.created_at
    WHERE j.status = 'succeeded' AND NOT u.lost AND u.device_seconds > 0 AND u.trained_tokens > 0
    GROUP BY j.id, u.device_type, j.base_model, j.method ->> 'type'
    RETURNING *)
  INSERT INTO throughput_groups AS g (base_model, device_type, method, shard, tokens, seconds, jobs)
    SELECT base_model, device_type, method, shard, sum(tokens), sum(seconds), count(*) FROM new GROUP BY 1, 2, 3, 4
    ON CONFLICT (base_model, device_type, method, shard) DO UPDATE
    SET tokens = g.tokens + excluded.tokens, seconds = g.seconds + excluded.seconds, jobs = g.jobs + excluded.jobs;
END
$$;

CREATE OR REPLACE FUNCTION whet_budget_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_job text;
  j record;
  b jsonb;
  spent numeric;
  pause boolean;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM budgets WHERE monthly_limit IS NOT NULL)
     AND NOT EXISTS (SELECT 1 FROM api_keys WHERE monthly_limit IS NOT NULL) THEN
    RETURN NULL;
  END IF;
  FOR v_job IN SELECT DISTINCT job_id FROM progressed LOOP
    SELECT jobs.id, jobs.tenant_id, jobs.api_key_id, jobs.status, jobs.desired INTO j FROM jobs WHERE jobs.id = v_job;
    CONTINUE WHEN NOT FOUND OR j.status <> 'running' OR j.desired <> 'run'
      OR NOT (EXISTS (SELECT 1 FROM api_keys k WHERE k.id = j.api_key_id AND k.monthly_limit IS NOT NULL)
              OR EXISTS (SELECT 1 FROM budgets WHERE tenant_id = j.tenant_id AND monthly_limit IS NOT NULL));
    pause := EXISTS (SELECT 1 FROM api_keys k WHERE k.id = j.api_key_id AND k.monthly_limit IS NOT NULL
                     AND whet_cached_spend('key', k.id) >= k.monthly_limit);
    IF pause THEN
      INSERT INTO job_events (id, tenant_id, job_id, level, message, data)
      VALUES ('ftevent-' || md5(random()::text || j.id), j.tenant_id, j.id, 'warn',
              'Pausing: this month''s spend of the API key that created the job reached its monthly limit; resume the '
              'job once the limit is raised', jsonb_build_object('api_key_id', j.api_key_id));
    ELSIF EXISTS (SELECT 1 FROM budgets WHERE tenant_id = j.tenant_id AND monthly_limit IS NOT NULL) THEN
      spent := whet_cached_spend('tenant', j.tenant_id);
      CONTINUE WHEN spent IS NULL; -- being computed by another statement, never before: next time
      b := whet_budget_status_of(j.tenant_id, spent);
      IF (b ->> 'soft_alert')::boolean AND NOT EXISTS (SELECT 1 FROM job_events e WHERE e.job_id = j.id
          AND e.level = 'warn' AND e.data ->> 'object' = 'budget' AND (e.data ->> 'month_start')::bigint = (b ->> 'month_start')::bigint) THEN
        INSERT INTO job_events (id, tenant_id, job_id, level, message, data)
        VALUES ('ftevent-' || md5(random()::text || j.id), j.tenant_id, j.id, 'warn',
                'This month''s spend passed the soft budget', b);
      END IF;
      pause := (b ->> 'hard_cap_reached')::boolean;
      IF pause THEN
        INSERT INTO job_events (id, tenant_id, job_id, level, message, data)
        VALUES ('ftevent-' || md5(random()::text || j.id), j.tenant_id, j.id, 'warn',
                'Pausing: this month''s spend reached the monthly limit; resume the job once the limit is raised', b);
      END IF;
    END IF;
    IF pause THEN
      UPDATE jobs SET desired = 'pause' WHERE id = j.id;
    END IF;
  END LOOP;
  RETURN NULL;
END
$$;
