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

-- whet.cost on every job object (GET, lists, the create's answer): as a sql function its body was
-- planned afresh on every call (about 2 ms, most of a GET's database time); plpgsql keeps the plan of
-- the statement for the session. The body is migration 0006's.
CREATE OR REPLACE FUNCTION whet_job_cost(p_job text) RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (
  WITH l AS (SELECT * FROM whet_cost_lines(NULL, p_job, 0, 9223372036854775807)),
  running AS (SELECT whet_running_cost(NULL, p_job) AS amount)
  SELECT jsonb_build_object(
    'amount', coalesce((SELECT sum(amount) FROM l), 0) + (SELECT amount FROM running),
    'currency', coalesce((SELECT min(currency) FROM l), whet_currency()),
    'running_amount', (SELECT amount FROM running),
    'run_seconds', (SELECT coalesce(round(sum(coalesce(a.ended_at, extract(epoch FROM now())) - a.started_at)::numeric, 3), 0)
                    FROM job_attempts a WHERE a.job_id = p_job),
    'line_items', coalesce((SELECT jsonb_object_agg(line_item, amount) FROM
                              (SELECT line_item, sum(amount) AS amount FROM l GROUP BY line_item) g), '{}')));
END
$$;

-- The create's estimate (migration 0008), for the same reason: planned afresh on every create as a sql
-- function; the body is 0008's, run as one plpgsql statement whose plan the session keeps.
CREATE OR REPLACE FUNCTION whet_job_estimate(p_base text, p_method jsonb, p_file text, p_whet jsonb) RETURNS jsonb
  LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public AS $$
BEGIN
  RETURN (
  WITH hp AS (
    SELECT p_method ->> 'type' AS method,
           greatest(coalesce((p_method -> (p_method ->> 'type') -> 'hyperparameters' ->> 'n_epochs')::int, 1), 1) AS epochs,
           greatest(coalesce((p_method -> (p_method ->> 'type') -> 'hyperparameters' ->> 'batch_size')::int, 1), 1) AS batch,
           (p_whet ->> 'max_steps')::int AS max_steps),
  f AS (SELECT f.bytes, greatest(coalesce(f.line_count, 0), 0) AS examples FROM files f
        WHERE f.id = p_file AND f.tenant_id = whet_current_tenant()),
  plan AS (SELECT hp.*, f.bytes, f.examples, ceil(f.examples::numeric / hp.batch)::bigint AS per_epoch,
                  coalesce(hp.max_steps, hp.epochs * ceil(f.examples::numeric / hp.batch)::bigint) AS steps
           FROM hp, f),
  prev AS (SELECT j.trained_tokens::float8 / nullif(j.total_steps, 0) AS per_step FROM jobs j, hp
           WHERE j.tenant_id = whet_current_tenant() AND j.training_file = p_file AND j.status = 'succeeded'
             AND j.method ->> 'type' = hp.method AND j.trained_tokens > 0 AND j.total_steps > 0
           ORDER BY j.seq DESC LIMIT 1),
  tok AS (SELECT CASE WHEN (SELECT per_step FROM prev) IS NOT NULL THEN (SELECT per_step FROM prev) * plan.steps
                      ELSE plan.bytes / 4.0 * plan.steps / greatest(plan.per_epoch, 1) END AS tokens,
                 CASE WHEN (SELECT per_step FROM prev) IS NOT NULL THEN 'previous_job' ELSE 'file_bytes' END AS source
          FROM plan),
  dev AS (SELECT coalesce(p_whet -> 'gpu_types' ->> 0,
                          (SELECT n.device_type FROM nodes n WHERE n.state = 'ready' GROUP BY n.device_type
                           ORDER BY count(*) DESC, n.device_type LIMIT 1), 'cpu') AS device_type,
                 CASE WHEN p_whet -> 'gpu_types' ->> 0 IS NOT NULL THEN 'whet.gpu_types'
                      WHEN EXISTS (SELECT 1 FROM nodes WHERE state = 'ready') THEN 'fleet' ELSE 'default' END AS source),
  tp AS (SELECT t.tokens_per_device_s AS rate, t.source FROM (
           SELECT w.tokens_per_device_s, 'model_device_method' AS source, 1 AS rank FROM whet_throughput w, dev, hp
           WHERE w.base_model = p_base AND w.device_type = dev.device_type AND w.method = hp.method
           UNION ALL SELECT sum(w.tokens_per_device_s * w.jobs) / sum(w.jobs), 'model_device', 2 FROM whet_throughput w, dev
           WHERE w.base_model = p_base AND w.device_type = dev.device_type HAVING count(*) > 0
           UNION ALL SELECT sum(w.tokens_per_device_s * w.jobs) / sum(w.jobs), 'device', 3 FROM whet_throughput w, dev
           WHERE w.device_type = dev.device_type HAVING count(*) > 0
           UNION ALL SELECT 1000, 'fallback_1000_tokens_per_s', 4) t ORDER BY t.rank LIMIT 1),
  est AS (SELECT plan.*, tok.tokens, tok.source AS tokens_source, dev.device_type, dev.source AS device_source,
                 tp.rate, tp.source AS rate_source, tok.tokens / tp.rate AS seconds FROM plan, tok, dev, tp),
  price AS (SELECT (SELECT unit_price FROM whet_price('device_hour', est.device_type, whet_now())) AS device_hour,
                   (SELECT unit_price FROM whet_price('trained_tokens_1m', NULL, whet_now())) AS tokens_1m,
                   (SELECT currency FROM whet_price('trained_tokens_1m', NULL, whet_now())) AS currency FROM est)
  SELECT jsonb_build_object(
    'object', 'fine_tuning.job.estimate', 'method', est.method, 'training_examples', est.examples,
    'n_epochs', est.epochs, 'batch_size', est.batch, 'steps', est.steps,
    'trained_tokens', round(est.tokens)::bigint, 'trained_tokens_source', est.tokens_source,
    'device_type', est.device_type, 'device_type_source', est.device_source, 'device_count', 1,
    'tokens_per_device_s', round(est.rate::numeric, 3), 'throughput_source', est.rate_source,
    'expected_duration_s', ceil(est.seconds)::bigint,
    'cost', jsonb_build_object(
      'amount', round((est.seconds / 3600 * coalesce(price.device_hour, 0) + est.tokens / 1e6 * coalesce(price.tokens_1m, 0))::numeric, 6),
      'currency', coalesce(price.currency, whet_currency()),
      'line_items', jsonb_build_object(
        'device_hours:' || est.device_type, round((est.seconds / 3600 * coalesce(price.device_hour, 0))::numeric, 6),
        'trained_tokens', round((est.tokens / 1e6 * coalesce(price.tokens_1m, 0))::numeric, 6))))
  FROM est, price);
END
$$;
