-- 0011_request_path: the statements a job create, a GET and the list pages run read a bounded number of
-- rows whatever the tables hold (tests/integration/scale/plans.mjs checks the executed plans).

-- The create's model lookup: a tenant's fine-tuned model, or one of its checkpoints, by name.
CREATE INDEX jobs_fine_tuned_model ON jobs(tenant_id, fine_tuned_model) WHERE fine_tuned_model IS NOT NULL;
CREATE INDEX checkpoints_name ON checkpoints(tenant_id, fine_tuned_model_checkpoint);
-- The estimate's "tenant's last succeeded job on this file".
CREATE INDEX jobs_succeeded_file ON jobs(tenant_id, training_file, seq) WHERE status = 'succeeded';
-- The checkpoints page of a job, newest first (as job_events_job serves the events page).
CREATE INDEX checkpoints_job ON checkpoints(job_id, seq);

-- whet_throughput (migration 0008) aggregated every succeeded job's usage on each estimate, so each job
-- create read the whole usage history. The aggregate is now kept: throughput_jobs holds each succeeded
-- job's contribution per device type, throughput_groups their sums; whet_throughput_refresh swaps jobs'
-- old contributions for their current ones whenever their status or their usage rows change. The sums
-- are numeric so that taking a contribution out leaves exactly what was there before it.
CREATE TABLE throughput_groups (
  base_model    text NOT NULL,
  device_type   text NOT NULL,
  method        text NOT NULL,
  tokens        numeric NOT NULL,
  seconds       numeric NOT NULL,
  jobs          bigint NOT NULL,
  PRIMARY KEY (base_model, device_type, method)
);
CREATE TABLE throughput_jobs (
  job_id        text NOT NULL,
  device_type   text NOT NULL,
  base_model    text NOT NULL,
  method        text NOT NULL,
  tokens        numeric NOT NULL,
  seconds       numeric NOT NULL,
  PRIMARY KEY (job_id, device_type)
);

-- p_jobs NULL: nothing to refresh.
CREATE FUNCTION whet_throughput_refresh(p_jobs text[]) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  IF p_jobs IS NULL THEN
    RETURN;
  END IF;
  -- One refresh of a job at a time (the jobs' row locks, in one order): the second then sees the
  -- first's rows.
  PERFORM 1 FROM jobs WHERE id = ANY (p_jobs) ORDER BY id FOR NO KEY UPDATE;
  WITH old AS (DELETE FROM throughput_jobs WHERE job_id = ANY (p_jobs) RETURNING *),
  d AS (SELECT base_model, device_type, method, sum(tokens) AS tokens, sum(seconds) AS seconds, count(*) AS jobs
        FROM old GROUP BY 1, 2, 3)
  UPDATE throughput_groups g SET tokens = g.tokens - d.tokens, seconds = g.seconds - d.seconds, jobs = g.jobs - d.jobs
    FROM d WHERE g.base_model = d.base_model AND g.device_type = d.device_type AND g.method = d.method;
  WITH new AS (
    INSERT INTO throughput_jobs (job_id, device_type, base_model, method, tokens, seconds)
    SELECT j.id, u.device_type, j.base_model, j.method ->> 'type', sum(u.trained_tokens), sum(u.device_seconds::numeric)
    FROM jobs j JOIN usage_records u ON u.job_id = j.id
    WHERE j.id = ANY (p_jobs) AND j.status = 'succeeded'
      AND NOT u.lost AND u.device_seconds > 0 AND u.trained_tokens > 0
    GROUP BY j.id, u.device_type, j.base_model, j.method ->> 'type'
    RETURNING *)
  INSERT INTO throughput_groups AS g (base_model, device_type, method, tokens, seconds, jobs)
    SELECT base_model, device_type, method, sum(tokens), sum(seconds), count(*) FROM new GROUP BY 1, 2, 3
    ON CONFLICT (base_model, device_type, method) DO UPDATE
    SET tokens = g.tokens + excluded.tokens, seconds = g.seconds + excluded.seconds, jobs = g.jobs + excluded.jobs;
END
$$;

-- Per statement (a row trigger would update a group row once per job: O(n^2) in a bulk statement),
-- and only the jobs that are succeeded or were counted: a running job's reports cost an index probe.
CREATE FUNCTION whet_throughput_usage() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
DECLARE
  ids text[];
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT array_agg(DISTINCT job_id) INTO ids FROM new_rows;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT array_agg(DISTINCT job_id) INTO ids FROM old_rows;
  ELSE
    SELECT array_agg(DISTINCT job_id) INTO ids FROM (SELECT job_id FROM old_rows UNION SELECT job_id FROM new_rows) c;
  END IF;
  SELECT array_agg(u.job) INTO ids FROM unnest(ids) u(job)
    WHERE EXISTS (SELECT 1 FROM jobs j WHERE j.id = u.job AND j.status = 'succeeded')
       OR EXISTS (SELECT 1 FROM throughput_jobs t WHERE t.job_id = u.job);
  PERFORM whet_throughput_refresh(ids);
  RETURN NULL;
END
$$;
CREATE TRIGGER usage_records_throughput_insert AFTER INSERT ON usage_records REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION whet_throughput_usage();
CREATE TRIGGER usage_records_throughput_update AFTER UPDATE ON usage_records
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION whet_throughput_usage();
CREATE TRIGGER usage_records_throughput_delete AFTER DELETE ON usage_records REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION whet_throughput_usage();

CREATE FUNCTION whet_throughput_job() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  PERFORM whet_throughput_refresh(ARRAY[NEW.id]);
  RETURN NULL;
END
$$;
CREATE FUNCTION whet_throughput_jobs_deleted() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  PERFORM whet_throughput_refresh((SELECT array_agg(id) FROM old_jobs WHERE status = 'succeeded'));
  RETURN NULL;
END
$$;
CREATE TRIGGER jobs_throughput_status AFTER UPDATE OF status ON jobs FOR EACH ROW
  WHEN ((OLD.status = 'succeeded') <> (NEW.status = 'succeeded')) EXECUTE FUNCTION whet_throughput_job();
CREATE TRIGGER jobs_throughput_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS old_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION whet_throughput_jobs_deleted();

INSERT INTO throughput_jobs (job_id, device_type, base_model, method, tokens, seconds)
  SELECT j.id, u.device_type, j.base_model, j.method ->> 'type', sum(u.trained_tokens), sum(u.device_seconds::numeric)
  FROM jobs j JOIN usage_records u ON u.job_id = j.id
  WHERE j.status = 'succeeded' AND NOT u.lost AND u.device_seconds > 0 AND u.trained_tokens > 0
  GROUP BY j.id, u.device_type, j.base_model, j.method ->> 'type';
INSERT INTO throughput_groups (base_model, device_type, method, tokens, seconds, jobs)
  SELECT base_model, device_type, method, sum(tokens), sum(seconds), count(*) FROM throughput_jobs GROUP BY 1, 2, 3;

CREATE OR REPLACE VIEW whet_throughput AS
  SELECT base_model, device_type, method, (tokens / seconds)::float8 AS tokens_per_device_s, jobs
  FROM throughput_groups WHERE jobs > 0 AND seconds > 0;

-- whet.cost on every job object (GET, lists, the create's answer, migration 0006) and the create's
-- estimate (migration 0008): as sql functions their bodies were planned afresh on every call (about
-- 2 ms each, most of a GET's and a create's database time). Each becomes a plpgsql function returning
-- the same body's result as one statement, whose plan the session keeps; everything else about them
-- (arguments, volatility, SECURITY DEFINER, search_path, grants) stays as it was.
DO $$
DECLARE
  f regprocedure;
  def text;
BEGIN
  FOREACH f IN ARRAY ARRAY['whet_job_cost(text)', 'whet_job_estimate(text, jsonb, text, jsonb)']::regprocedure[] LOOP
    def := pg_get_functiondef(f);
    IF position(' LANGUAGE sql' IN def) = 0 OR position('AS $function$' IN def) = 0 THEN
      RAISE EXCEPTION 'migration 0011: unexpected definition of %: %', f, def;
    END IF;
    def := replace(def, ' LANGUAGE sql', ' LANGUAGE plpgsql');
    def := replace(def, 'AS $function$', 'AS $function$ BEGIN RETURN (');
    def := regexp_replace(def, '\$function\$\s*$', '); END $function$');
    EXECUTE def;
  END LOOP;
END
$$;
