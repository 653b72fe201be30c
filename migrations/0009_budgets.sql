-- 0009_budgets: a tenant's monthly spending limits. The month is the calendar month in UTC; its spend
-- is the cost lines since the month began plus the running attempts' device time so far (the costs
-- everything else reports, migration 0006). Past soft_limit the tenant is warned (a flag on /v1/usage
-- and an event on the job whose create crossed it); a create whose estimate would take the spend past
-- monthly_limit is refused (429 insufficient_quota), and a running job is paused once the spend reaches
-- it (below). NULL: no limit.
CREATE TABLE budgets (
  tenant_id     text PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
  monthly_limit numeric CHECK (monthly_limit >= 0),
  soft_limit    numeric CHECK (soft_limit >= 0),
  updated_at    bigint NOT NULL DEFAULT whet_now()
);
ALTER TABLE budgets ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON budgets TO whet_app USING (tenant_id = whet_current_tenant());
GRANT SELECT ON budgets TO whet_app;

-- The estimate a job was created with (whet.estimate on the job object), to compare with what it took,
-- and the API key that created it (NULL: a tenant token), whose own monthly limit it counts against.
ALTER TABLE jobs ADD COLUMN estimate jsonb, ADD COLUMN api_key_id text REFERENCES api_keys(id) ON DELETE SET NULL;
CREATE INDEX jobs_api_key ON jobs(api_key_id) WHERE api_key_id IS NOT NULL;

-- This month's spend of the jobs an API key created (their cost lines since the month began, and their
-- running attempts so far).
CREATE FUNCTION whet_key_spend(p_key text) RETURNS numeric LANGUAGE sql STABLE AS $$
  SELECT coalesce(sum(s.amount), 0) FROM jobs j,
    LATERAL (SELECT coalesce((SELECT sum(l.amount) FROM whet_cost_lines(j.tenant_id, j.id,
               extract(epoch FROM date_trunc('month', now() AT TIME ZONE 'UTC'))::bigint, 9223372036854775807) l), 0)
             + whet_running_cost(j.tenant_id, j.id) AS amount) s
  WHERE j.api_key_id = p_key
$$;

CREATE FUNCTION whet_budget_status(p_tenant text) RETURNS jsonb LANGUAGE sql STABLE AS $$
  WITH m AS (SELECT extract(epoch FROM date_trunc('month', now() AT TIME ZONE 'UTC'))::bigint AS start),
  s AS (SELECT coalesce((SELECT sum(l.amount) FROM m, whet_cost_lines(p_tenant, NULL, m.start, 9223372036854775807) l), 0)
               + whet_running_cost(p_tenant, NULL) AS spent),
  b AS (SELECT monthly_limit, soft_limit FROM budgets WHERE tenant_id = p_tenant)
  SELECT jsonb_build_object(
    'object', 'budget', 'month_start', m.start, 'spent', s.spent, 'currency', whet_currency(),
    'monthly_limit', (SELECT monthly_limit FROM b), 'soft_limit', (SELECT soft_limit FROM b),
    'soft_alert', coalesce(s.spent >= (SELECT soft_limit FROM b), false),
    'hard_cap_reached', coalesce(s.spent >= (SELECT monthly_limit FROM b), false))
  FROM m, s
$$;

-- The limits on running jobs: each heartbeat's progress update of a running job (the scheduler sets
-- last_step) checks its tenant's spend, when the tenant has a monthly limit: past the soft limit the
-- job gets a warning event (once a month: the create's warning counts), at the monthly limit it asks for
-- a pause (desired = 'pause': the scheduler stops the attempt at a checkpoint, as for a tenant's pause)
-- with an event; so does a job whose API key has reached its own monthly limit. The tenant resumes it once the limit is raised; a job resumed while the spend is
-- still past the limit is paused again at its next heartbeat.
CREATE FUNCTION whet_budget_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  b jsonb;
BEGIN
  IF NEW.status = 'running' AND NEW.desired = 'run' AND NEW.api_key_id IS NOT NULL
     AND EXISTS (SELECT 1 FROM api_keys k WHERE k.id = NEW.api_key_id AND k.monthly_limit IS NOT NULL
                 AND whet_key_spend(k.id) >= k.monthly_limit) THEN
    NEW.desired := 'pause';
    INSERT INTO job_events (id, tenant_id, job_id, level, message, data)
    VALUES ('ftevent-' || md5(random()::text || NEW.id), NEW.tenant_id, NEW.id, 'warn',
            'Pausing: this month''s spend of the API key that created the job reached its monthly limit; resume the '
            'job once the limit is raised', jsonb_build_object('api_key_id', NEW.api_key_id));
  END IF;
  IF NEW.status = 'running' AND NEW.desired = 'run'
     AND EXISTS (SELECT 1 FROM budgets WHERE tenant_id = NEW.tenant_id AND monthly_limit IS NOT NULL) THEN
    b := whet_budget_status(NEW.tenant_id);
    IF (b ->> 'soft_alert')::boolean AND NOT EXISTS (SELECT 1 FROM job_events e WHERE e.job_id = NEW.id
        AND e.level = 'warn' AND e.data ->> 'object' = 'budget' AND (e.data ->> 'month_start')::bigint = (b ->> 'month_start')::bigint) THEN
      INSERT INTO job_events (id, tenant_id, job_id, level, message, data)
      VALUES ('ftevent-' || md5(random()::text || NEW.id), NEW.tenant_id, NEW.id, 'warn',
              'This month''s spend passed the soft budget', b);
    END IF;
    IF (b ->> 'hard_cap_reached')::boolean THEN
      NEW.desired := 'pause';
      INSERT INTO job_events (id, tenant_id, job_id, level, message, data)
      VALUES ('ftevent-' || md5(random()::text || NEW.id), NEW.tenant_id, NEW.id, 'warn',
              'Pausing: this month''s spend reached the monthly limit; resume the job once the limit is raised', b);
    END IF;
  END IF;
  RETURN NEW;
END
$$;
CREATE TRIGGER jobs_budget_guard BEFORE UPDATE OF last_step ON jobs FOR EACH ROW EXECUTE FUNCTION whet_budget_guard();
