-- FinishJob's cost in the throughput triggers of migration 0011 (measured with pgbench on a copy of
-- tests/bench/scale's database: 10000 running jobs, 100000 queued, FinishJob's statements):
--   * its usage insert runs the statement trigger on usage_records, which found the job not yet
--     succeeded (FinishJob marks it so afterwards) and still called the refresh, in three queries;
--     now one query, and the refresh only when a job is to be refreshed;
--   * the job then succeeding refreshed it in full (its row locked again, its former contribution
--     deleted and subtracted); a job that enters 'succeeded' has no contribution yet (the refresh
--     adds only succeeded jobs, and takes out a job that leaves 'succeeded'), so its rows are now
--     added in one statement.
CREATE OR REPLACE FUNCTION whet_throughput_usage() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
DECLARE
  ids text[];
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT array_agg(DISTINCT c.job_id) INTO ids FROM new_rows c
      WHERE EXISTS (SELECT 1 FROM jobs j WHERE j.id = c.job_id AND j.status = 'succeeded')
         OR EXISTS (SELECT 1 FROM throughput_jobs t WHERE t.job_id = c.job_id);
  ELSIF TG_OP = 'DELETE' THEN
    SELECT array_agg(DISTINCT c.job_id) INTO ids FROM old_rows c
      WHERE EXISTS (SELECT 1 FROM jobs j WHERE j.id = c.job_id AND j.status = 'succeeded')
         OR EXISTS (SELECT 1 FROM throughput_jobs t WHERE t.job_id = c.job_id);
  ELSE
    SELECT array_agg(c.job_id) INTO ids FROM (SELECT job_id FROM old_rows UNION SELECT job_id FROM new_rows) c
      WHERE EXISTS (SELECT 1 FROM jobs j WHERE j.id = c.job_id AND j.status = 'succeeded')
         OR EXISTS (SELECT 1 FROM throughput_jobs t WHERE t.job_id = c.job_id);
  END IF;
  IF ids IS NOT NULL THEN
    PERFORM whet_throughput_refresh(ids);
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION whet_throughput_job() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  IF NEW.status <> 'succeeded' THEN
    PERFORM whet_throughput_refresh(ARRAY[NEW.id]);
    RETURN NULL;
  END IF;
  WITH new AS (
    INSERT INTO throughput_jobs (job_id, device_type, base_model, method, tokens, seconds, shard)
    SELECT NEW.id, u.device_type, NEW.base_model, NEW.method ->> 'type', sum(u.trained_tokens), sum(u.device_seconds::numeric),
           hashtext(NEW.id) & 31
    FROM usage_records u
    WHERE u.job_id = NEW.id AND NOT u.lost AND u.device_seconds > 0 AND u.trained_tokens > 0
    GROUP BY u.device_type
    RETURNING *)
  INSERT INTO throughput_groups AS g (base_model, device_type, method, shard, tokens, seconds, jobs)
    SELECT base_model, device_type, method, shard, sum(tokens), sum(seconds), count(*) FROM new GROUP BY 1, 2, 3, 4
    ON CONFLICT (base_model, device_type, method, shard) DO UPDATE
    SET tokens = g.tokens + excluded.tokens, seconds = g.seconds + excluded.seconds, jobs = g.jobs + excluded.jobs;
  RETURN NULL;
END
$$;

-- The serving cycle's check that no preemption is under way (scheduler/service/serving.c) read every
-- job to find those with preempt_requested (a sequential scan of jobs each cycle,
-- tests/integration/scheduler/plans.sh); the few asked to stop are found by this index.
CREATE INDEX jobs_preempt_requested ON jobs (id) WHERE preempt_requested;
