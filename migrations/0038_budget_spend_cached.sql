-- 0038_budget_spend_cached: the budget guard (0029, 0032) computed the month's spend of a limited tenant or
-- API key for every progress write of each of its running jobs: each call reads the tenant's whole month of
-- cost lines (60-80 ms in psql for 2,000 checkpoints and 1,500 usage records early in the month; more as
-- the month goes on), so a budgeted tenant with a hundred running jobs cost PostgreSQL over a core on the
-- heartbeat path. The guard now takes a spend at most 30 s old from budget_spend_cache (whet_cached_spend),
-- computing it when it is older; a statement that finds another computing it (an advisory lock held)
-- uses the last value, or decides nothing this time when there is none: no heartbeat waits on another. The limits are read fresh: raising or lowering one takes effect at the next heartbeat;
-- spend newer than 30 s can pass a limit before the pause (a job's own 30 s at most). Creates, the budget
-- and usage endpoints compute the spend as before.
--
-- whet_budget_status is split so the guard can pass a spend in: whet_tenant_spend (the month's cost lines,
-- their storage summed as 0035's whet_storage_cost sums it, and the running attempts: 0034's `s`) and
-- whet_budget_status_of (the object); unchanged results.
CREATE FUNCTION whet_tenant_spend(p_tenant text) RETURNS numeric LANGUAGE plpgsql STABLE
  SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_start bigint := whet_month_start();
BEGIN
  RETURN coalesce((SELECT sum(l.amount) FROM whet_cost_lines(p_tenant, NULL, v_start, 9223372036854775807) l
                   WHERE l.sku IS DISTINCT FROM 'storage_gb_month'), 0)
       + coalesce((SELECT sum(s.amount) FROM whet_storage_cost(p_tenant, v_start, 9223372036854775807) s), 0)
       + whet_running_cost(p_tenant, NULL);
END
$$;

CREATE FUNCTION whet_budget_status_of(p_tenant text, p_spent numeric) RETURNS jsonb LANGUAGE plpgsql STABLE
  SET plan_cache_mode = force_generic_plan SET jit = off AS $$ BEGIN RETURN (
  WITH b AS (SELECT monthly_limit, soft_limit FROM budgets WHERE tenant_id = p_tenant)
  SELECT jsonb_build_object(
    'object', 'budget', 'month_start', whet_month_start(), 'spent', p_spent, 'currency', whet_currency(),
    'monthly_limit', (SELECT monthly_limit FROM b), 'soft_limit', (SELECT soft_limit FROM b),
    'soft_alert', coalesce(p_spent >= (SELECT soft_limit FROM b), false),
    'hard_cap_reached', coalesce(p_spent >= (SELECT monthly_limit FROM b), false))); END
$$;

CREATE OR REPLACE FUNCTION whet_budget_status(p_tenant text) RETURNS jsonb LANGUAGE sql STABLE AS $$
  SELECT whet_budget_status_of(p_tenant, whet_tenant_spend(p_tenant))
$$;

CREATE TABLE budget_spend_cache (
  subject     text PRIMARY KEY,           -- 'tenant:ID' or 'key:ID'
  spent       numeric NOT NULL,
  computed_at double precision NOT NULL   -- epoch seconds
);

-- The spend of a tenant (p_kind 'tenant') or API key ('key') this month, at most 30 s old; NULL when none of
-- this month is cached and another statement is computing it now.
CREATE FUNCTION whet_cached_spend(p_kind text, p_id text) RETURNS numeric LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
DECLARE
  v_subject text := p_kind || ':' || p_id;
  v_now double precision := extract(epoch FROM clock_timestamp());
  c record;
  this_month boolean;
  v numeric;
BEGIN
  SELECT spent, computed_at INTO c FROM budget_spend_cache WHERE subject = v_subject;
  -- a month's first statements must not use the last month's spend
  this_month := FOUND AND c.computed_at >= whet_month_start();
  IF this_month AND c.computed_at > v_now - 30 THEN
    RETURN c.spent;
  END IF;
  IF NOT pg_try_advisory_xact_lock(hashtext('whet_cached_spend'), hashtext(v_subject)) THEN
    RETURN CASE WHEN this_month THEN c.spent END;
  END IF;
  v := CASE p_kind WHEN 'key' THEN whet_key_spend(p_id) ELSE whet_tenant_spend(p_id) END;
  INSERT INTO budget_spend_cache VALUES (v_subject, v, v_now)
    ON CONFLICT (subject) DO UPDATE SET spent = EXCLUDED.spent, computed_at = EXCLUDED.computed_at;
  RETURN v;
END
$$;
REVOKE ALL ON FUNCTION whet_cached_spend FROM PUBLIC;

CREATE OR REPLACE FUNCTION whet_budget_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  j record;
  b jsonb;
  spent numeric;
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

