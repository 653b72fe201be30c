-- 0058_finish_triggers: two of the trigger functions every FinishJob runs, made cheaper (issue 15: under job
-- churn in tests/bench/scale, 1k nodes and ~250 finishes/s, pg_stat_user_functions put 17 s of one 100 s run in
-- whet_attempt_gc_enqueue and 29 s in whet_throughput_job).
--
-- whet_attempt_gc_enqueue (0050) was an SQL function with SET and SECURITY DEFINER, which PostgreSQL cannot
-- inline: its INSERT was parsed and planned on every call, twice a finish (the attempt's end and the job's).
-- As PL/pgSQL its plan is kept for the session: 65 against 157 us a call by hand (3,000 calls, same table).
CREATE OR REPLACE FUNCTION whet_attempt_gc_enqueue(p_job text, p_attempts integer[]) RETURNS void
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
BEGIN
  INSERT INTO attempt_gc_queue (job_id, attempt) SELECT p_job, a FROM unnest(p_attempts) a
  ON CONFLICT (job_id, attempt) DO UPDATE SET queued_at = greatest(attempt_gc_queue.queued_at, EXCLUDED.queued_at);
END
$$;

-- A job that succeeds adds its throughput (0025): its usage rows are read in its own partition of usage_records
-- (job_created_at is the job's created_at: the foreign key says so), not probed for in every partition.
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
    WHERE u.job_id = NEW.id AND u.job_created_at = NEW.created_at AND NOT u.lost AND u.device_seconds > 0
      AND u.trained_tokens > 0
    GROUP BY u.device_type
    RETURNING *)
  INSERT INTO throughput_groups AS g (base_model, device_type, method, shard, tokens, seconds, jobs)
    SELECT base_model, device_type, method, shard, sum(tokens), sum(seconds), count(*) FROM new GROUP BY 1, 2, 3, 4
    ON CONFLICT (base_model, device_type, method, shard) DO UPDATE
    SET tokens = g.tokens + excluded.tokens, seconds = g.seconds + excluded.seconds, jobs = g.jobs + excluded.jobs;
  RETURN NULL;
END
$$;
