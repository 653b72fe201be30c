-- The budget guard (0029) runs twice per statement that writes progress (an upsert fires the INSERT and
-- the UPDATE statement triggers), for every batch of heartbeats: in tests/bench/scale its per-job query was
-- the second most frequent statement, ~14% of the heartbeat statement's time, with no budget anywhere. It
-- now returns at once while no tenant has a monthly limit and no API key one (the partial indexes make
-- that two index probes however many tenants and keys there are); the checks are otherwise unchanged.
CREATE INDEX budgets_limited ON budgets (tenant_id) WHERE monthly_limit IS NOT NULL;
CREATE INDEX api_keys_limited ON api_keys (id) WHERE monthly_limit IS NOT NULL;

CREATE OR REPLACE FUNCTION whet_budget_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  j record;
  b jsonb;
  pause boolean;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM budgets WHERE monthly_limit IS NOT NULL)
     AND NOT EXISTS (SELECT 1 FROM api_keys WHERE monthly_limit IS NOT NULL) THEN
    RETURN NULL;
  END IF;
  FOR j IN SELECT jobs.id, jobs.tenant_id, jobs.api_key_id FROM progressed n JOIN jobs ON jobs.id = n.job_id
           WHERE jobs.status = 'running' AND jobs.desired = 'run'
             AND (EXISTS (SELECT 1 FROM api_keys k WHERE k.id = jobs.api_key_id AND k.monthly_limit IS NOT NULL)
                  OR EXISTS (SELECT 1 FROM budgets WHERE tenant_id = jobs.tenant_id AND monthly_limit IS NOT NULL))
  LOOP
    pause := EXISTS (SELECT 1 FROM api_keys k WHERE k.id = j.api_key_id AND k.monthly_limit IS NOT NULL
                     AND whet_key_spend(k.id) >= k.monthly_limit);
    IF pause THEN
      INSERT INTO job_events (id, tenant_id, job_id, level, message, data)
      VALUES ('ftevent-' || md5(random()::text || j.id), j.tenant_id, j.id, 'warn',
              'Pausing: this month''s spend of the API key that created the job reached its monthly limit; resume the '
              'job once the limit is raised', jsonb_build_object('api_key_id', j.api_key_id));
    ELSIF EXISTS (SELECT 1 FROM budgets WHERE tenant_id = j.tenant_id AND monthly_limit IS NOT NULL) THEN
      b := whet_budget_status(j.tenant_id);
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
