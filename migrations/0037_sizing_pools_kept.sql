-- 0037_sizing_pools_kept: whet_sizing_pools (0022), read by every job create's estimate, grouped all the
-- fleet's ready nodes on each call (and parsed each node's devices JSON): 15 ms a call at 10,000 nodes in
-- psql, O(fleet) on the request path. Now the pools are kept in sizing_pools by a trigger on nodes that
-- fires only when a column that places a node in a pool is written (a registration, a node declared
-- lost, its devices): a heartbeat's UPDATE names last_heartbeat alone, so it never fires it. Reading is
-- O(pools). A node that changes pools updates its two rows in key order, so two such changes at once
-- cannot deadlock; a registration that changes nothing (the usual one) locks no row of sizing_pools.
-- whet_job_estimate (0029, with 0033's plan settings) read the fleet too, for a job the sizing gave no
-- device type (the fleet's most common type, and whether there is a fleet): from sizing_pools now, the
-- same answers (its node counts are the ready nodes').
CREATE TABLE sizing_pools (
  dc          text NOT NULL,
  device_type text NOT NULL,
  device_mib  integer NOT NULL,  -- the first device's memory (0: not reported)
  nodes       integer NOT NULL,  -- ready nodes; a row at 0 stays (deleting it would race the next node)
  devices     bigint NOT NULL,
  PRIMARY KEY (dc, device_type, device_mib)
);

-- A node's device memory as its pool counts it: the first device's (0: not reported).
CREATE FUNCTION whet_first_device_mib(p_devices jsonb) RETURNS integer LANGUAGE sql IMMUTABLE AS
  $$ SELECT coalesce((p_devices -> 0 ->> 'memory_mib')::int, 0) $$;

CREATE FUNCTION whet_sizing_pool_add(p_dc text, p_type text, p_mib integer, p_nodes integer, p_devices bigint)
  RETURNS void LANGUAGE sql AS $$
  INSERT INTO sizing_pools AS p VALUES (p_dc, p_type, p_mib, p_nodes, p_devices)
  ON CONFLICT (dc, device_type, device_mib)
  DO UPDATE SET nodes = p.nodes + EXCLUDED.nodes, devices = p.devices + EXCLUDED.devices
$$;

CREATE FUNCTION whet_sizing_pools_apply() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
DECLARE
  was boolean := TG_OP <> 'INSERT' AND OLD.state = 'ready';
  now_in boolean := TG_OP <> 'DELETE' AND NEW.state = 'ready';
  o_mib integer;
  n_mib integer;
BEGIN
  IF was THEN o_mib := whet_first_device_mib(OLD.devices); END IF;
  IF now_in THEN n_mib := whet_first_device_mib(NEW.devices); END IF;
  IF was AND now_in AND (OLD.dc, OLD.device_type, o_mib) = (NEW.dc, NEW.device_type, n_mib) THEN
    IF NEW.gpus <> OLD.gpus THEN
      PERFORM whet_sizing_pool_add(NEW.dc, NEW.device_type, n_mib, 0, NEW.gpus - OLD.gpus);
    END IF;
  ELSIF was AND now_in AND (NEW.dc, NEW.device_type, n_mib) < (OLD.dc, OLD.device_type, o_mib) THEN
    PERFORM whet_sizing_pool_add(NEW.dc, NEW.device_type, n_mib, 1, NEW.gpus);
    PERFORM whet_sizing_pool_add(OLD.dc, OLD.device_type, o_mib, -1, -OLD.gpus);
  ELSE
    IF was THEN PERFORM whet_sizing_pool_add(OLD.dc, OLD.device_type, o_mib, -1, -OLD.gpus); END IF;
    IF now_in THEN PERFORM whet_sizing_pool_add(NEW.dc, NEW.device_type, n_mib, 1, NEW.gpus); END IF;
  END IF;
  RETURN NULL;
END
$$;

-- The trigger first: its lock on nodes holds off every change until the rows below are counted.
CREATE TRIGGER nodes_sizing_pools AFTER INSERT OR DELETE OR UPDATE OF state, dc, device_type, devices, gpus
  ON nodes FOR EACH ROW EXECUTE FUNCTION whet_sizing_pools_apply();
INSERT INTO sizing_pools
  SELECT dc, device_type, whet_first_device_mib(devices), count(*), sum(gpus)
  FROM nodes WHERE state = 'ready' GROUP BY 1, 2, 3;

CREATE OR REPLACE FUNCTION whet_sizing_pools() RETURNS jsonb LANGUAGE sql STABLE SECURITY DEFINER
  SET search_path = public AS $$
  SELECT coalesce(jsonb_agg(jsonb_build_object('dc', dc, 'device_type', device_type, 'device_mib', device_mib,
                                               'devices', devices) ORDER BY dc, device_type, device_mib), '[]')
  FROM sizing_pools WHERE nodes > 0
$$;

CREATE OR REPLACE FUNCTION whet_job_estimate(p_base text, p_method jsonb, p_file text, p_whet jsonb, p_counted jsonb DEFAULT NULL,
                                  p_sizing jsonb DEFAULT NULL, p_rollout jsonb DEFAULT NULL)
  RETURNS jsonb LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public
  SET plan_cache_mode = force_generic_plan SET jit = off AS $$ BEGIN RETURN (
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
                          (SELECT p.device_type FROM sizing_pools p WHERE p.nodes > 0 GROUP BY p.device_type
                           ORDER BY sum(p.nodes) DESC, p.device_type LIMIT 1), 'cpu') AS device_type,
                 CASE WHEN p_sizing ->> 'device_type' IS NOT NULL THEN 'sizing'
                      WHEN p_whet -> 'gpu_types' ->> 0 IS NOT NULL THEN 'whet.gpu_types'
                      WHEN EXISTS (SELECT 1 FROM sizing_pools WHERE nodes > 0) THEN 'fleet' ELSE 'default' END AS source,
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
