-- 0008_estimates: what a job would take and cost before it runs (POST /v1/fine_tuning/jobs with
-- whet.dry_run). Throughput is learned from finished jobs: trained tokens per device-second of every
-- succeeded job's attempts that were not lost, per base model, device type and method. A view, so it
-- is current as soon as a job's usage is recorded; it aggregates every tenant's jobs and shows no job.
CREATE VIEW whet_throughput AS
  SELECT j.base_model, u.device_type, j.method ->> 'type' AS method,
         sum(u.trained_tokens)::float8 / sum(u.device_seconds) AS tokens_per_device_s, count(DISTINCT j.id) AS jobs
  FROM usage_records u JOIN jobs j ON j.id = u.job_id
  WHERE j.status = 'succeeded' AND NOT u.lost AND u.device_seconds > 0 AND u.trained_tokens > 0
  GROUP BY 1, 2, 3;

-- The estimate for the tenant of the session (whet.tenant_id) of a job on p_base with the resolved
-- method (p_method, OpenAI's method object) over p_file, and its whet object p_whet:
--   steps           n_epochs * ceil(examples / batch_size), or whet.max_steps
--   trained_tokens  the tokens a step took in the tenant's last succeeded job of this method on this
--                   file, times the steps; without one, the file's bytes / 4 per epoch (a stated guess)
--   device_type     the first of whet.gpu_types, else the most common type of the fleet's ready nodes
--   device_count    1: the scheduler sizes the gang when it places the job (scheduler/placement/sizing.h)
--   duration        trained tokens over the throughput of finished jobs: same model, device type and
--                   method; else same model and device type; else same device type; else 1000 tokens/s
--   cost            the device hours and trained tokens at the prices in effect now
-- SECURITY DEFINER to read the fleet's nodes; it reads only the session tenant's file and jobs.
CREATE FUNCTION whet_job_estimate(p_base text, p_method jsonb, p_file text, p_whet jsonb) RETURNS jsonb
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$
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
  FROM est, price
$$;
REVOKE ALL ON FUNCTION whet_job_estimate FROM PUBLIC;
GRANT EXECUTE ON FUNCTION whet_job_estimate TO whet_app;
