-- 0029_job_progress: a running job's progress in a narrow table of its own. Every heartbeat wrote
-- last_step, total_steps, trained_tokens and estimated_finish on the job's row; jobs is wide and has a
-- dozen indexes, so none of those updates was HOT (a new index entry in each, ~1.7 ms an update in
-- tests/bench/scale against 0.086 ms for the node's row). job_progress has only its primary key and
-- free room in its pages (fillfactor 50), so a heartbeat's update stays on its page and touches no index.
--
--   attempt                the attempt that reported it (a resumed job's new attempt takes the row over)
--   last_step              the highest step reported, over the job's attempts
--   total_steps            the steps the trainer plans, as its last report says
--   trained_tokens         the highest count reported; FinishJob's at the end
--   resume_step, started_at  the reporting attempt's, from job_attempts: what the estimate needs
--
-- estimated_finish is no longer stored: readers compute it from the step rate of the running attempt
-- (whet_estimated_finish) for a running job whose current attempt reported, null otherwise; nothing
-- has to clear it when a job stops running, nor fill it when an attempt starts.
CREATE TABLE job_progress (
  job_id         text PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,
  tenant_id      text NOT NULL,
  attempt        integer NOT NULL,
  last_step      integer NOT NULL DEFAULT 0,
  total_steps    integer,
  trained_tokens bigint,
  resume_step    integer NOT NULL DEFAULT 0,
  started_at     double precision
) WITH (fillfactor = 50);
ALTER TABLE job_progress ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON job_progress TO whet_app USING (tenant_id = whet_current_tenant());
GRANT SELECT ON job_progress TO whet_app;

INSERT INTO job_progress (job_id, tenant_id, attempt, last_step, total_steps, trained_tokens, resume_step, started_at)
  SELECT j.id, j.tenant_id, j.attempt, j.last_step, j.total_steps, j.trained_tokens, coalesce(a.resume_step, 0),
         a.started_at
  FROM jobs j LEFT JOIN job_attempts a ON a.job_id = j.id AND a.attempt = j.attempt
  WHERE j.last_step > 0 OR j.total_steps IS NOT NULL OR j.trained_tokens IS NOT NULL;

-- 0009's budget guard ran on every update of jobs.last_step; it now runs once per statement that
-- writes progress (a heartbeat's, or a batch of them), on the jobs it names: the same checks, and the
-- pause written on the job.
DROP TRIGGER jobs_budget_guard ON jobs;
CREATE OR REPLACE FUNCTION whet_budget_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  j record;
  b jsonb;
  pause boolean;
BEGIN
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
CREATE TRIGGER job_progress_budget_guard_insert AFTER INSERT ON job_progress REFERENCING NEW TABLE AS progressed
  FOR EACH STATEMENT EXECUTE FUNCTION whet_budget_guard();
CREATE TRIGGER job_progress_budget_guard_update AFTER UPDATE ON job_progress REFERENCING NEW TABLE AS progressed
  FOR EACH STATEMENT EXECUTE FUNCTION whet_budget_guard();

-- The functions that read the moved columns, as 0018 and 0026 left them but for the progress read
-- from job_progress (and no estimate to clear on a requeue).
CREATE OR REPLACE FUNCTION whet_gang_fail(p_job text, p_attempt integer, p_node text, p_rank integer, p_message text,
                               p_outcome text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  v_world integer;
  v_failures integer;
  v_status text;
BEGIN
  UPDATE job_attempts SET ended_at = extract(epoch FROM clock_timestamp()), outcome = p_outcome
    WHERE job_id = p_job AND attempt = p_attempt AND ended_at IS NULL RETURNING world_size INTO v_world;
  IF NOT FOUND THEN RETURN false; END IF;
  UPDATE gang_ranks SET ended_at = extract(epoch FROM clock_timestamp()), outcome = 'cancelled'
    WHERE job_id = p_job AND attempt = p_attempt AND started_at IS NULL AND ended_at IS NULL;
  INSERT INTO node_commands (node_id, job_id, attempt, kind, grace_ms, reason)
    SELECT DISTINCT node_id, p_job, p_attempt, 'cancel', 30000, 'gang_failed' FROM gang_ranks
    WHERE job_id = p_job AND attempt = p_attempt AND ended_at IS NULL;
  SELECT count(*) INTO v_failures FROM job_attempts WHERE job_id = p_job AND world_size > 1 AND outcome = 'failed';
  UPDATE jobs j SET node_id = NULL, preempt_requested = false,
      status = CASE j.desired WHEN 'cancel' THEN 'cancelled' WHEN 'pause' THEN 'paused'
               ELSE CASE WHEN v_failures >= 3 THEN 'failed' ELSE 'queued' END END,
      finished_at = CASE WHEN j.desired = 'cancel' OR (j.desired = 'run' AND v_failures >= 3) THEN whet_now() END,
      error = CASE WHEN j.desired = 'run' AND v_failures >= 3 THEN jsonb_build_object('code', 'gang_failed',
               'message', 'rank ' || p_rank || ' on node ' || p_node || ': ' || p_message, 'param', NULL) END
    WHERE j.id = p_job AND j.status IN ('running', 'queued') RETURNING j.status INTO v_status;
  INSERT INTO job_events (id, tenant_id, job_id, level, message, data)
    SELECT 'ftevent-' || md5(random()::text || p_job || p_rank), j.tenant_id, j.id,
      CASE WHEN v_status = 'failed' THEN 'error' ELSE 'warn' END,
      'Rank ' || p_rank || ' of ' || v_world || ' on node ' || p_node || ' failed: ' || p_message ||
      CASE WHEN p_outcome = 'lost' THEN '' /* the node's message says what follows */
        WHEN v_status = 'queued' THEN '; the gang stopped and the job resumes from its last checkpoint'
        WHEN v_status = 'failed' THEN '; the gang failed ' || v_failures || ' times, so the job fails' ELSE '' END,
      jsonb_build_object('rank', p_rank, 'node', p_node, 'attempt', p_attempt, 'world_size', v_world,
                         'last_step', coalesce(p.last_step, 0))
    FROM jobs j LEFT JOIN job_progress p ON p.job_id = j.id WHERE j.id = p_job;
  RETURN coalesce(v_status = 'queued', false);
END
$$;

CREATE OR REPLACE FUNCTION whet_requeue_node_attempts(p_node text, p_message text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
  g record;
BEGIN
  RETURN QUERY
  WITH ended AS (
    UPDATE job_attempts a SET ended_at = extract(epoch FROM clock_timestamp()), outcome = 'lost'
    WHERE a.node_id = p_node AND a.ended_at IS NULL AND a.world_size = 1
    RETURNING a.job_id, a.attempt, a.tenant_id, a.device_type, a.ended_at - a.started_at AS seconds),
  dropped AS (DELETE FROM node_commands c WHERE c.node_id = p_node AND c.delivered_at IS NULL),
  metered AS (
    INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, lost)
    SELECT tenant_id, job_id, attempt, 0, device_type, seconds, true FROM ended
    ON CONFLICT (job_id, attempt, report_seq) DO NOTHING),
  requeued AS (
    UPDATE jobs j SET node_id = NULL, preempt_requested = false,
      status = CASE j.desired WHEN 'cancel' THEN 'cancelled' WHEN 'pause' THEN 'paused' ELSE 'queued' END
    FROM ended WHERE j.id = ended.job_id AND j.status IN ('running', 'queued')
    RETURNING j.id, j.tenant_id),
  evented AS (
    INSERT INTO job_events (id, tenant_id, job_id, level, message, data)
    SELECT 'ftevent-' || md5(random()::text || r.id), r.tenant_id, r.id, 'warn', p_message,
           jsonb_build_object('node', p_node, 'last_step', coalesce(p.last_step, 0))
    FROM requeued r LEFT JOIN job_progress p ON p.job_id = r.id RETURNING job_id)
  SELECT job_id FROM evented;

  FOR g IN
    WITH lost AS (
      UPDATE gang_ranks r SET ended_at = extract(epoch FROM clock_timestamp()), outcome = 'lost'
      WHERE r.node_id = p_node AND r.ended_at IS NULL
      RETURNING r.job_id, r.attempt, r.rank, r.started_at, r.ended_at),
    metered AS (
      INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, lost)
      SELECT a.tenant_id, l.job_id, l.attempt, l.rank, a.device_type, l.ended_at - l.started_at, true
      FROM lost l JOIN job_attempts a ON a.job_id = l.job_id AND a.attempt = l.attempt
      WHERE l.started_at IS NOT NULL
      ON CONFLICT (job_id, attempt, report_seq) DO NOTHING)
    SELECT job_id, attempt, min(rank) AS rank FROM lost GROUP BY job_id, attempt ORDER BY job_id
  LOOP
    IF whet_gang_fail(g.job_id, g.attempt, p_node, g.rank, p_message, 'lost') THEN
      RETURN NEXT g.job_id;
    END IF;
  END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION whet_job_estimate(p_base text, p_method jsonb, p_file text, p_whet jsonb, p_counted jsonb DEFAULT NULL,
                                  p_sizing jsonb DEFAULT NULL, p_rollout jsonb DEFAULT NULL)
  RETURNS jsonb LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public AS $$ BEGIN RETURN (
  WITH hp AS (
    SELECT p_method ->> 'type' AS method,
           greatest(coalesce((p_method -> (p_method ->> 'type') -> 'hyperparameters' ->> 'n_epochs')::int, 1), 1) AS epochs,
           greatest(coalesce((p_method -> (p_method ->> 'type') -> 'hyperparameters' ->> 'batch_size')::int, 1), 1) AS batch,
           (p_whet ->> 'max_steps')::int AS max_steps,
           p_method ->> 'type' = 'reinforcement' AS rl,
           (p_rollout ->> 'n')::float8 AS n, (p_rollout ->> 'max_tokens')::float8 AS max_tokens,
           coalesce((p_rollout ->> 'ppo_epochs')::float8, 1) AS ppo_epochs),
  counted AS (SELECT CASE WHEN p_counted ? 'source' OR p_counted ? 'error' THEN p_counted
                          ELSE (SELECT c.counted FROM file_token_counts c
                                WHERE c.file_id = p_file AND c.base_model = p_base AND c.tenant_id = whet_current_tenant()
                                  AND c.max_seq_len = (p_counted ->> 'max_seq_len')::int) END AS c),
  ct AS (SELECT (c ->> 'examples')::bigint AS examples, (c ->> 'tokens')::float8 AS tokens,
                (c ->> 'prompt_tokens')::float8 AS prompt_tokens, c ->> 'source' AS source
         FROM counted WHERE c ? 'source'),
  f AS (SELECT f.bytes, coalesce((SELECT examples FROM ct), greatest(coalesce(f.line_count, 0), 0)) AS examples
        FROM files f WHERE f.id = p_file AND f.tenant_id = whet_current_tenant()),
  plan AS (SELECT hp.*, f.bytes, f.examples, ceil(f.examples::numeric / hp.batch)::bigint AS per_epoch,
                  coalesce(hp.max_steps, hp.epochs * ceil(f.examples::numeric / hp.batch)::bigint) AS steps
           FROM hp, f),
  -- One epoch's trained tokens from the count, else from the file's bytes (NULL: no count).
  epoch AS (SELECT CASE WHEN plan.rl THEN plan.n * plan.ppo_epochs * (coalesce(ct.prompt_tokens, plan.bytes / 4.0)
                                                                       + plan.examples * plan.max_tokens)
                        ELSE coalesce(ct.tokens, plan.bytes / 4.0) END AS tokens, ct.source
            FROM plan LEFT JOIN ct ON true),
  prev AS (SELECT p.trained_tokens::float8 / nullif(p.total_steps, 0) AS per_step FROM jobs j
           JOIN job_progress p ON p.job_id = j.id, hp
           WHERE j.tenant_id = whet_current_tenant() AND j.training_file = p_file AND j.status = 'succeeded'
             AND j.method ->> 'type' = hp.method AND p.trained_tokens > 0 AND p.total_steps > 0
           ORDER BY j.seq DESC LIMIT 1),
  tok AS (SELECT CASE WHEN epoch.source IS NOT NULL OR (SELECT per_step FROM prev) IS NULL
                      THEN epoch.tokens * plan.steps / greatest(plan.per_epoch, 1)
                      ELSE (SELECT per_step FROM prev) * plan.steps END AS tokens,
                 coalesce(epoch.source, CASE WHEN (SELECT per_step FROM prev) IS NOT NULL THEN 'previous_job'
                                             ELSE 'file_bytes' END) AS source,
                 CASE WHEN plan.rl THEN plan.examples * plan.n * plan.max_tokens * plan.steps / greatest(plan.per_epoch, 1)
                      ELSE 0 END AS rollout
          FROM plan, epoch),
  dev AS (SELECT coalesce(p_sizing ->> 'device_type', p_whet -> 'gpu_types' ->> 0,
                          (SELECT n.device_type FROM nodes n WHERE n.state = 'ready' GROUP BY n.device_type
                           ORDER BY count(*) DESC, n.device_type LIMIT 1), 'cpu') AS device_type,
                 CASE WHEN p_sizing ->> 'device_type' IS NOT NULL THEN 'sizing'
                      WHEN p_whet -> 'gpu_types' ->> 0 IS NOT NULL THEN 'whet.gpu_types'
                      WHEN EXISTS (SELECT 1 FROM nodes WHERE state = 'ready') THEN 'fleet' ELSE 'default' END AS source,
                 greatest(coalesce((p_sizing ->> 'device_count')::int, 1), 1) AS n),
  tp AS (SELECT t.tokens_per_device_s AS rate, t.source FROM (
           SELECT w.tokens_per_device_s, 'model_device_method' AS source, 1 AS rank FROM whet_throughput w, dev, hp
           WHERE w.base_model = p_base AND w.device_type = dev.device_type AND w.method = hp.method
           UNION ALL SELECT sum(w.tokens_per_device_s * w.jobs) / sum(w.jobs), 'model_device', 2 FROM whet_throughput w, dev
           WHERE w.base_model = p_base AND w.device_type = dev.device_type HAVING count(*) > 0
           UNION ALL SELECT sum(w.tokens_per_device_s * w.jobs) / sum(w.jobs), 'device', 3 FROM whet_throughput w, dev
           WHERE w.device_type = dev.device_type HAVING count(*) > 0
           UNION ALL SELECT 1000, 'fallback_1000_tokens_per_s', 4) t ORDER BY t.rank LIMIT 1),
  est AS (SELECT plan.*, tok.tokens, tok.source AS tokens_source, tok.rollout, dev.device_type,
                 dev.source AS device_source, dev.n AS devices, tp.rate, tp.source AS rate_source,
                 tok.tokens / tp.rate AS device_seconds, tok.tokens / tp.rate / dev.n AS seconds FROM plan, tok, dev, tp),
  price AS (SELECT (SELECT unit_price FROM whet_price('device_hour', est.device_type, whet_now())) AS device_hour,
                   (SELECT unit_price FROM whet_price('trained_tokens_1m', NULL, whet_now())) AS tokens_1m,
                   (SELECT unit_price FROM whet_price('rollout_completion_tokens_1m', NULL, whet_now())) AS rollout_1m,
                   (SELECT currency FROM whet_price('trained_tokens_1m', NULL, whet_now())) AS currency FROM est),
  cost AS (SELECT round((est.device_seconds / 3600 * coalesce(price.device_hour, 0))::numeric, 6) AS device,
                  round((est.tokens / 1e6 * coalesce(price.tokens_1m, 0))::numeric, 6) AS trained,
                  round((est.rollout / 1e6 * coalesce(price.rollout_1m, 0))::numeric, 6) AS rollout FROM est, price)
  SELECT jsonb_build_object(
    'object', 'fine_tuning.job.estimate', 'method', est.method, 'training_examples', est.examples,
    'n_epochs', est.epochs, 'batch_size', est.batch, 'steps', est.steps,
    'trained_tokens', round(est.tokens)::bigint, 'trained_tokens_source', est.tokens_source,
    'tokenization', (SELECT c FROM counted),
    'device_type', est.device_type, 'device_type_source', est.device_source, 'device_count', est.devices,
    'sizing', p_sizing,
    'tokens_per_device_s', round(est.rate::numeric, 3), 'throughput_source', est.rate_source,
    'expected_duration_s', ceil(est.seconds)::bigint,
    'cost', jsonb_build_object(
      'amount', round((est.device_seconds / 3600 * coalesce(price.device_hour, 0) + est.tokens / 1e6 * coalesce(price.tokens_1m, 0)
                       + est.rollout / 1e6 * coalesce(price.rollout_1m, 0))::numeric, 6),
      'currency', coalesce(price.currency, whet_currency()),
      'line_items', jsonb_build_object('device_hours:' || est.device_type, cost.device, 'trained_tokens', cost.trained)
                    || CASE WHEN est.rl THEN jsonb_build_object('rollout_tokens', cost.rollout) ELSE '{}' END))
    || CASE WHEN est.rl THEN jsonb_build_object(
         'rollout_tokens', round(est.rollout)::bigint, 'rollout_tokens_upper_bound', true,
         'trained_tokens_upper_bound', true, 'rollout', p_rollout) ELSE '{}' END
  FROM est, price, cost); END $$;
REVOKE ALL ON FUNCTION whet_job_estimate FROM PUBLIC;
GRANT EXECUTE ON FUNCTION whet_job_estimate TO whet_app;

ALTER TABLE jobs DROP COLUMN last_step, DROP COLUMN total_steps, DROP COLUMN trained_tokens,
  DROP COLUMN estimated_finish;
-- Dropping estimated_finish dropped 0003's index of the jobs with a public state (and 0020's of the
-- running jobs missing an estimate, which nothing needs now): the former without the estimate.
CREATE INDEX jobs_public_state ON jobs(status) WHERE queue_position IS NOT NULL OR wait_reason IS NOT NULL;
