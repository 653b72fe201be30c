-- 0060_throughput_queue: a job's success no longer folds its throughput into the aggregate (0011, 0020,
-- 0056, 0058) in its own transaction: it names the job in throughput_queue, and the leader's maintenance
-- thread folds the named jobs in batches (whet_throughput_fold, scheduler/service/throughput.c, every few
-- seconds). Under job churn in tests/bench/scale (1k nodes, ~200 finishes/s) the fold took 2.3 ms of
-- FinishJob's 7.4 ms job UPDATE, and its upsert of the shared throughput_groups rows made the finishes of one
-- base model wait on each other. The estimate then learns a success a pass later. A usage row written late
-- for a succeeded job (or one that had throughput) names its job the same way; a deleted job's throughput
-- still goes at once (whet_throughput_jobs_deleted: deletions are rare, and the job's rows go with it).
CREATE TABLE throughput_queue (
  job_id    text PRIMARY KEY,
  queued_at bigint NOT NULL DEFAULT whet_now()
);

CREATE FUNCTION whet_throughput_enqueue(p_jobs text[]) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  INSERT INTO throughput_queue (job_id) SELECT DISTINCT j FROM unnest(p_jobs) j ON CONFLICT (job_id) DO NOTHING;
END
$$;

CREATE OR REPLACE FUNCTION whet_throughput_job() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  PERFORM whet_throughput_enqueue(ARRAY[NEW.id]);
  RETURN NULL;
END
$$;

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
    PERFORM whet_throughput_enqueue(ids);
  END IF;
  RETURN NULL;
END
$$;

-- Folds up to p_limit queued jobs (the oldest named first; rows another fold holds are skipped) and returns
-- how many it took. A job named again while it is folded is queued anew and folded by the next call.
CREATE FUNCTION whet_throughput_fold(p_limit integer) RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
DECLARE
  ids text[];
BEGIN
  WITH taken AS (
    DELETE FROM throughput_queue WHERE job_id IN (SELECT job_id FROM throughput_queue ORDER BY queued_at, job_id
                                                  LIMIT p_limit FOR UPDATE SKIP LOCKED)
    RETURNING job_id)
  SELECT array_agg(job_id ORDER BY job_id) INTO ids FROM taken;
  IF ids IS NULL THEN
    RETURN 0;
  END IF;
  PERFORM whet_throughput_refresh(ids);
  RETURN cardinality(ids);
END
$$;
