-- 0054_estimate_lean: every job create runs whet_job_estimate (gateway/estimate.c's jobs_estimate), and 0037's
-- body was one statement of thirteen CTEs: a plan of ~90 nodes (each reference to prev an InitPlan of its own;
-- all three levels of throughput and four whet_price calls set up and run on every call), ~390 us of
-- PostgreSQL CPU a call (pgbench, one connection). The same computation now reads its inputs with a few small
-- statements, each run only when its answer is used: the file with its kept count, the previous job and the
-- token prices in one; the fleet's most common device type only when neither the sizing nor whet.gpu_types
-- names one; this model's throughput on the device (by this method, else by any) with the device's hourly
-- price in one; every model's throughput on the device only when this model has none: ~200 us a call. The
-- arithmetic is 0037's, expression for expression and type for type (float8 where it was float8, the same
-- numeric casts and roundings), so the answers are the same text: compared with 0037's function over 21,600
-- argument sets in each of five states of the tables (prices; none; a future book only; throughput summed
-- over several rows; no fleet, nothing measured), none differed. (A sum of float8 throughputs adds its rows
-- in the order its plan reads them, as 0037's did in its own plan's order.)
--
-- Two SQL functions that cannot be inlined (they read tables; the second is SECURITY DEFINER) were planned
-- again on every call, each statement's executor state being new: whet_currency (0006), ~60 us in the
-- estimate without a price book in effect and in whet_job_cost (0052) on every job object without usage, the
-- create's insert included; whet_sizing_pools (0037), in every create's estimate_inputs, ~50 us. As PL/pgSQL
-- their plans are kept; the same bodies.
CREATE OR REPLACE FUNCTION whet_currency() RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN coalesce((SELECT b.currency FROM price_books b ORDER BY b.effective_from DESC LIMIT 1), 'USD');
END
$$;

CREATE OR REPLACE FUNCTION whet_sizing_pools() RETURNS jsonb LANGUAGE plpgsql STABLE SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  RETURN (SELECT coalesce(jsonb_agg(jsonb_build_object('dc', dc, 'device_type', device_type, 'device_mib', device_mib,
                                                       'devices', devices) ORDER BY dc, device_type, device_mib), '[]')
          FROM sizing_pools WHERE nodes > 0);
END
$$;

CREATE OR REPLACE FUNCTION whet_job_estimate(p_base text, p_method jsonb, p_file text, p_whet jsonb, p_counted jsonb DEFAULT NULL,
                                  p_sizing jsonb DEFAULT NULL, p_rollout jsonb DEFAULT NULL)
  RETURNS jsonb LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public
  SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  -- the method's settings (0037's hp)
  v_method text := p_method ->> 'type';
  v_epochs integer := greatest(coalesce((p_method -> (p_method ->> 'type') -> 'hyperparameters' ->> 'n_epochs')::int, 1), 1);
  v_batch integer := greatest(coalesce((p_method -> (p_method ->> 'type') -> 'hyperparameters' ->> 'batch_size')::int, 1), 1);
  v_rl boolean := p_method ->> 'type' = 'reinforcement';
  v_n float8 := (p_rollout ->> 'n')::float8;
  v_max_tokens float8 := (p_rollout ->> 'max_tokens')::float8;
  -- the count (counted; ct's columns when it has a source), the file (f), the plan (plan)
  v_counted jsonb;
  v_ct_tokens float8;
  v_ct_prompt_tokens float8;
  v_ct_source text;
  v_bytes bigint;
  v_examples bigint;
  v_per_epoch bigint;
  v_steps bigint;
  -- the previous job's tokens a step (prev) and the job's (epoch, tok)
  v_per_step float8;
  v_tokens float8;
  v_rollout float8;
  -- the device (dev) and its throughput (tp)
  v_device text := coalesce(p_sizing ->> 'device_type', p_whet -> 'gpu_types' ->> 0);
  v_device_source text;
  v_devices integer := greatest(coalesce((p_sizing ->> 'device_count')::int, 1), 1);
  v_rate float8;
  v_model_rate float8;
  v_rate_source text;
  -- the price book version in effect and its prices (whet_price)
  v_version integer;
  v_currency text;
  v_device_hour numeric;
  v_tokens_1m numeric;
  v_rollout_1m numeric;
BEGIN
  SELECT c.c, CASE WHEN c.c ? 'source' THEN (c.c ->> 'tokens')::float8 END,
         CASE WHEN c.c ? 'source' THEN (c.c ->> 'prompt_tokens')::float8 END, CASE WHEN c.c ? 'source' THEN c.c ->> 'source' END,
         f.bytes, coalesce(CASE WHEN c.c ? 'source' THEN (c.c ->> 'examples')::bigint END, greatest(coalesce(f.line_count, 0), 0)),
         prev.per_step, pb.version, pb.currency, pb.tokens_1m, pb.rollout_1m
    INTO v_counted, v_ct_tokens, v_ct_prompt_tokens, v_ct_source, v_bytes, v_examples, v_per_step,
         v_version, v_currency, v_tokens_1m, v_rollout_1m
  FROM files f
  -- a dry run's count (or why it failed) as given, else the one a dry run kept
  LEFT JOIN file_token_counts k
    ON k.file_id = p_file AND k.base_model = p_base AND k.tenant_id = whet_current_tenant()
   AND k.max_seq_len = CASE WHEN p_counted ? 'source' OR p_counted ? 'error' THEN NULL
                            ELSE (p_counted ->> 'max_seq_len')::int END
  CROSS JOIN LATERAL (SELECT CASE WHEN p_counted ? 'source' OR p_counted ? 'error' THEN p_counted ELSE k.counted END AS c
                      OFFSET 0) c
  LEFT JOIN LATERAL (SELECT p.trained_tokens::float8 / nullif(p.total_steps, 0) AS per_step FROM jobs j
                     JOIN job_progress p ON p.job_id = j.id
                     WHERE j.tenant_id = whet_current_tenant() AND j.training_file = p_file AND j.status = 'succeeded'
                       AND j.method ->> 'type' = v_method AND p.trained_tokens > 0 AND p.total_steps > 0
                     ORDER BY j.seq DESC LIMIT 1) prev ON true
  LEFT JOIN LATERAL (SELECT b.version, b.currency,
                            (SELECT p.unit_price FROM prices p WHERE p.version = b.version AND p.sku = 'trained_tokens_1m'
                               AND p.device_type = '') AS tokens_1m,
                            (SELECT p.unit_price FROM prices p WHERE p.version = b.version
                               AND p.sku = 'rollout_completion_tokens_1m' AND p.device_type = '') AS rollout_1m
                     FROM price_books b WHERE b.effective_from <= whet_now() ORDER BY b.effective_from DESC LIMIT 1) pb ON true
  WHERE f.id = p_file AND f.tenant_id = whet_current_tenant();
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  v_per_epoch := ceil(v_examples::numeric / v_batch)::bigint;
  v_steps := coalesce((p_whet ->> 'max_steps')::int, v_epochs * ceil(v_examples::numeric / v_batch)::bigint);
  -- one epoch's trained tokens from the count, else from the file's bytes; else the previous job's a step
  v_tokens := CASE WHEN v_ct_source IS NOT NULL OR v_per_step IS NULL
                   THEN CASE WHEN v_rl THEN v_n * coalesce((p_rollout ->> 'ppo_epochs')::float8, 1)
                                            * (coalesce(v_ct_prompt_tokens, v_bytes / 4.0) + v_examples * v_max_tokens)
                             ELSE coalesce(v_ct_tokens, v_bytes / 4.0) END * v_steps / greatest(v_per_epoch, 1)
                   ELSE v_per_step * v_steps END;
  v_rollout := CASE WHEN v_rl THEN v_examples * v_n * v_max_tokens * v_steps / greatest(v_per_epoch, 1) ELSE 0 END;

  -- The sizing's device type, else whet.gpu_types' first, else the fleet's most common, else cpu.
  IF p_sizing ->> 'device_type' IS NOT NULL THEN
    v_device_source := 'sizing';
  ELSIF v_device IS NOT NULL THEN
    v_device_source := 'whet.gpu_types';
  ELSE
    SELECT p.device_type INTO v_device FROM sizing_pools p WHERE p.nodes > 0 GROUP BY p.device_type
      ORDER BY sum(p.nodes) DESC, p.device_type LIMIT 1;
    v_device_source := CASE WHEN v_device IS NOT NULL THEN 'fleet' ELSE 'default' END;
    v_device := coalesce(v_device, 'cpu');
  END IF;

  -- Tokens a device-second: this model's on the device by this method, else by any method (weighted by jobs),
  -- else every model's on the device, else 1000; with the device's hourly price in the version in effect.
  SELECT max(w.tokens_per_device_s) FILTER (WHERE w.method = v_method), sum(w.tokens_per_device_s * w.jobs) / sum(w.jobs),
         coalesce((SELECT p.unit_price FROM prices p WHERE p.version = v_version AND p.sku = 'device_hour'
                     AND p.device_type = v_device),
                  (SELECT p.unit_price FROM prices p WHERE p.version = v_version AND p.sku = 'device_hour'
                     AND p.device_type = ''))
    INTO v_rate, v_model_rate, v_device_hour
    FROM whet_throughput w WHERE w.base_model = p_base AND w.device_type = v_device;
  IF v_rate IS NOT NULL THEN
    v_rate_source := 'model_device_method';
  ELSIF v_model_rate IS NOT NULL THEN
    v_rate := v_model_rate;
    v_rate_source := 'model_device';
  ELSE
    SELECT sum(w.tokens_per_device_s * w.jobs) / sum(w.jobs) INTO v_rate FROM whet_throughput w WHERE w.device_type = v_device;
    v_rate_source := CASE WHEN v_rate IS NOT NULL THEN 'device' ELSE 'fallback_1000_tokens_per_s' END;
    v_rate := coalesce(v_rate, 1000);
  END IF;

  RETURN jsonb_build_object(
    'object', 'fine_tuning.job.estimate', 'method', v_method, 'training_examples', v_examples,
    'n_epochs', v_epochs, 'batch_size', v_batch, 'steps', v_steps,
    'trained_tokens', round(v_tokens)::bigint,
    'trained_tokens_source', coalesce(v_ct_source, CASE WHEN v_per_step IS NOT NULL THEN 'previous_job' ELSE 'file_bytes' END),
    'tokenization', v_counted,
    'device_type', v_device, 'device_type_source', v_device_source, 'device_count', v_devices,
    'sizing', p_sizing,
    'tokens_per_device_s', round(v_rate::numeric, 3), 'throughput_source', v_rate_source,
    'expected_duration_s', ceil(v_tokens / v_rate / v_devices)::bigint,
    'cost', jsonb_build_object(
      'amount', round((v_tokens / v_rate / 3600 * coalesce(v_device_hour, 0) + v_tokens / 1e6 * coalesce(v_tokens_1m, 0)
                       + v_rollout / 1e6 * coalesce(v_rollout_1m, 0))::numeric, 6),
      'currency', coalesce(v_currency, whet_currency()),
      'line_items', jsonb_build_object('device_hours:' || v_device,
                                       round((v_tokens / v_rate / 3600 * coalesce(v_device_hour, 0))::numeric, 6),
                                       'trained_tokens', round((v_tokens / 1e6 * coalesce(v_tokens_1m, 0))::numeric, 6))
                    || CASE WHEN v_rl THEN jsonb_build_object('rollout_tokens',
                                                              round((v_rollout / 1e6 * coalesce(v_rollout_1m, 0))::numeric, 6))
                            ELSE '{}' END))
    || CASE WHEN v_rl THEN jsonb_build_object(
         'rollout_tokens', round(v_rollout)::bigint, 'rollout_tokens_upper_bound', true,
         'trained_tokens_upper_bound', true, 'rollout', p_rollout) ELSE '{}' END;
END
$$;
