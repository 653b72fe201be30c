-- 0026_estimate_methods: a dry run counts the tokens of DPO and reinforcement (GRPO) files for real too
-- (gateway/estimate.c, with the trainer's own line readers, executor/train/data), and the estimate prices
-- reinforcement's rollouts.
--   dpo            the count's tokens are both sequences of every pair (prompt + chosen, prompt + rejected,
--                  cut as the trainer cuts): what its steps push through the policy and what it meters as
--                  trained tokens. The reference pass (the base's log-probs of every pair, once per run) is
--                  not metered and not counted here; its time is in the throughput finished dpo jobs measured.
--   reinforcement  the count is the prompts the trainer keeps (those within max_seq_len - max_tokens; for
--                  this method file_token_counts.max_seq_len holds that prompt limit, which the count
--                  depends on) and their tokens; p_rollout is the trainer's rollout settings ({n, max_tokens,
--                  ppo_epochs}, scheduler/jobsize/trainer_settings.c). Every response taken at max_tokens
--                  gives upper bounds, stated in the estimate (trained_tokens_upper_bound,
--                  rollout_tokens_upper_bound):
--                    rollout_tokens  prompts x n x max_tokens an epoch (the completion tokens metered), priced
--                                    at the price book's rollout_completion_tokens_1m (line item rollout_tokens)
--                    trained_tokens  n x ppo_epochs x (prompt tokens + prompts x max_tokens) an epoch: each
--                                    update pass takes every sequence, prompt and response
--                  without a count the prompts are the file's lines and their tokens a quarter of its bytes.
-- A count is told from the lookup key by its "source" (or "error"); otherwise as 0022.
DROP FUNCTION whet_job_estimate(text, jsonb, text, jsonb, jsonb, jsonb);
CREATE FUNCTION whet_job_estimate(p_base text, p_method jsonb, p_file text, p_whet jsonb, p_counted jsonb DEFAULT NULL,
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
  prev AS (SELECT j.trained_tokens::float8 / nullif(j.total_steps, 0) AS per_step FROM jobs j, hp
           WHERE j.tenant_id = whet_current_tenant() AND j.training_file = p_file AND j.status = 'succeeded'
             AND j.method ->> 'type' = hp.method AND j.trained_tokens > 0 AND j.total_steps > 0
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
