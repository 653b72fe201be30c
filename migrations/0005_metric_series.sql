-- 0005_metric_series: every step's metrics, as GET /v1/fine_tuning/jobs/{id}/metrics reads them. The
-- executor reports each step as a job event of type 'metrics' whose data holds "step" and the figures;
-- the series is read by step, so the step is a column of its own, indexed per job over those events.
-- It is a stored generated column rather than an index on an expression: the tenant's queries run
-- under row-level security, where only leakproof comparisons become index conditions, and a plain
-- integer column compares leakproof while the expression (a cast, a regular expression) does not.
-- The expression never fails (a non-integer "step" gives NULL): a column that raised would refuse the
-- event itself.
CREATE FUNCTION whet_metric_step(p_data jsonb) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN jsonb_typeof(p_data -> 'step') = 'number' AND (p_data ->> 'step') ~ '^[0-9]{1,9}$'
              THEN (p_data ->> 'step')::integer END
$$;
ALTER TABLE job_events ADD COLUMN metric_step integer
  GENERATED ALWAYS AS (CASE WHEN type = 'metrics' THEN whet_metric_step(data) END) STORED;
-- seq DESC: a step run again after a lost attempt appears twice; the latest report wins.
CREATE INDEX job_events_metric_step ON job_events (job_id, metric_step, seq DESC) WHERE metric_step IS NOT NULL;
