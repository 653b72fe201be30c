-- 0022_estimate_tokens: a dry run's estimate counts the training file's tokens for real (gateway/estimate.c
-- tokenizes it with the base model's tokenizer and chat template, cut at max_seq_len as the trainer cuts,
-- SFT only), and every estimate sizes the job's gang as the scheduler will (scheduler/jobsize). The count
-- is kept per file, base model and max_seq_len, so the create that follows the dry run carries the same
-- estimate without tokenizing again; it goes with its file.
CREATE TABLE file_token_counts (
  file_id     text NOT NULL REFERENCES files(id) ON DELETE CASCADE,
  tenant_id   text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  base_model  text NOT NULL,
  max_seq_len integer NOT NULL,
  counted     jsonb NOT NULL,   -- {examples, tokens (one epoch's), source, …}: what estimate.c measured
  created_at  bigint NOT NULL DEFAULT whet_now(),
  PRIMARY KEY (file_id, base_model, max_seq_len)
);
ALTER TABLE file_token_counts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON file_token_counts TO whet_app USING (tenant_id = whet_current_tenant())
  WITH CHECK (tenant_id = whet_current_tenant());
GRANT SELECT, INSERT, UPDATE ON file_token_counts TO whet_app;

-- whet_job_estimate as in 0008 (made plpgsql by 0011), with p_counted: a dry run's count ({examples,
-- tokens, …}, or {error} when there is none), or {max_seq_len} for a create: the kept count for this file,
-- model and max_seq_len, if any.
-- With a count, steps use its examples (those with a trained token left after the cut, which the trainer
-- keeps) and trained_tokens is one epoch's tokens times the epochs the steps cover: what the trainer
-- counts (sum of every step's real tokens, after truncation), exactly when the steps are whole epochs.
--   trained_tokens_source  tokenized | tokenized_prefix (a file larger than the gateway's cap: the rest
--                          extrapolated from the tokens per byte of the part read) | previous_job | file_bytes
--   tokenization           the count itself, or why there is none (its error)
-- and with p_sizing, the gateway's sizing over the fleet's pools ({device_type, device_count, …}):
--   device_type            the sized pool's type when its device memory is known (source "sizing"), else
--                          as before (whet.gpu_types, the fleet's most common type, cpu)
--   device_count           the gang; the duration is the device time over the gang (data parallel taken
--                          as linear), the cost the device time itself, whatever the gang
DROP FUNCTION whet_job_estimate(text, jsonb, text, jsonb);
CREATE FUNCTION whet_job_estimate(p_base text, p_method jsonb, p_file text, p_whet jsonb, p_counted jsonb DEFAULT NULL,
                                  p_sizing jsonb DEFAULT NULL)
  RETURNS jsonb LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public AS $$ BEGIN RETURN (
  WITH hp AS (
    SELECT p_method ->> 'type' AS method,
           greatest(coalesce((p_method -> (p_method ->> 'type') -> 'hyperparameters' ->> 'n_epochs')::int, 1), 1) AS epochs,
           greatest(coalesce((p_method -> (p_method ->> 'type') -> 'hyperparameters' ->> 'batch_size')::int, 1), 1) AS batch,
           (p_whet ->> 'max_steps')::int AS max_steps),
  counted AS (SELECT CASE WHEN p_counted ? 'tokens' OR p_counted ? 'error' THEN p_counted
                          ELSE (SELECT c.counted FROM file_token_counts c
                                WHERE c.file_id = p_file AND c.base_model = p_base AND c.tenant_id = whet_current_tenant()
                                  AND c.max_seq_len = (p_counted ->> 'max_seq_len')::int) END AS c),
  f AS (SELECT f.bytes, coalesce((SELECT (c ->> 'examples')::bigint FROM counted WHERE c ? 'tokens' AND hp.method = 'supervised'),
                                 greatest(coalesce(f.line_count, 0), 0)) AS examples
        FROM files f, hp WHERE f.id = p_file AND f.tenant_id = whet_current_tenant()),
  plan AS (SELECT hp.*, f.bytes, f.examples, ceil(f.examples::numeric / hp.batch)::bigint AS per_epoch,
                  coalesce(hp.max_steps, hp.epochs * ceil(f.examples::numeric / hp.batch)::bigint) AS steps
           FROM hp, f),
  prev AS (SELECT j.trained_tokens::float8 / nullif(j.total_steps, 0) AS per_step FROM jobs j, hp
           WHERE j.tenant_id = whet_current_tenant() AND j.training_file = p_file AND j.status = 'succeeded'
             AND j.method ->> 'type' = hp.method AND j.trained_tokens > 0 AND j.total_steps > 0
           ORDER BY j.seq DESC LIMIT 1),
  tok AS (SELECT CASE WHEN ct.tokens IS NOT NULL THEN ct.tokens * plan.steps / greatest(plan.per_epoch, 1)
                      WHEN (SELECT per_step FROM prev) IS NOT NULL THEN (SELECT per_step FROM prev) * plan.steps
                      ELSE plan.bytes / 4.0 * plan.steps / greatest(plan.per_epoch, 1) END AS tokens,
                 CASE WHEN ct.tokens IS NOT NULL THEN ct.source
                      WHEN (SELECT per_step FROM prev) IS NOT NULL THEN 'previous_job' ELSE 'file_bytes' END AS source
          FROM plan LEFT JOIN (SELECT (c ->> 'tokens')::float8 AS tokens, c ->> 'source' AS source FROM counted, hp
                               WHERE c ? 'tokens' AND hp.method = 'supervised') ct ON true),
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
  est AS (SELECT plan.*, tok.tokens, tok.source AS tokens_source, dev.device_type, dev.source AS device_source,
                 dev.n AS devices, tp.rate, tp.source AS rate_source, tok.tokens / tp.rate AS device_seconds,
                 tok.tokens / tp.rate / dev.n AS seconds FROM plan, tok, dev, tp),
  price AS (SELECT (SELECT unit_price FROM whet_price('device_hour', est.device_type, whet_now())) AS device_hour,
                   (SELECT unit_price FROM whet_price('trained_tokens_1m', NULL, whet_now())) AS tokens_1m,
                   (SELECT currency FROM whet_price('trained_tokens_1m', NULL, whet_now())) AS currency FROM est)
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
      'amount', round((est.device_seconds / 3600 * coalesce(price.device_hour, 0) + est.tokens / 1e6 * coalesce(price.tokens_1m, 0))::numeric, 6),
      'currency', coalesce(price.currency, whet_currency()),
      'line_items', jsonb_build_object(
        'device_hours:' || est.device_type, round((est.device_seconds / 3600 * coalesce(price.device_hour, 0))::numeric, 6),
        'trained_tokens', round((est.tokens / 1e6 * coalesce(price.tokens_1m, 0))::numeric, 6))))
  FROM est, price); END $$;
REVOKE ALL ON FUNCTION whet_job_estimate FROM PUBLIC;
GRANT EXECUTE ON FUNCTION whet_job_estimate TO whet_app;

-- The pools sizing chooses among, as the scheduler's cycle builds them (scheduler/service/cycle.c,
-- load_pools): ready nodes grouped by data center, device type and device memory (0: unknown), with their
-- devices in all. SECURITY DEFINER to read the fleet, which tenants do not see; it names no node.
CREATE FUNCTION whet_sizing_pools() RETURNS jsonb LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public AS $$
  SELECT coalesce(jsonb_agg(jsonb_build_object('dc', dc, 'device_type', device_type, 'device_mib', mib,
                                               'devices', devices) ORDER BY dc, device_type, mib), '[]')
  FROM (SELECT dc, device_type, coalesce((devices -> 0 ->> 'memory_mib')::int, 0) AS mib, sum(gpus) AS devices
        FROM nodes WHERE state = 'ready' GROUP BY 1, 2, 3) p
$$;
REVOKE ALL ON FUNCTION whet_sizing_pools FROM PUBLIC;
GRANT EXECUTE ON FUNCTION whet_sizing_pools TO whet_app;
