-- 0063_estimate_in_gateway: a create's estimate is computed by the gateway (gateway/job_estimate.c), not by
-- whet_job_estimate inside the create's insert (0054). Under load (tests/bench/gateway, 32 tenants) the
-- function cost ~170 us of PostgreSQL CPU a create, most of it setting up the executor of its few small
-- statements; and within a tenant's shared write transaction it ran under the tenant's active-job counter's
-- row lock. What it read comes to the gateway instead:
--   * what is the tenant's and the file's (the count a dry run kept, the previous job's tokens a step), and the
--     time, from the create's lookup (whet_job_create_lookup's new form, below);
--   * what is shared by every create (the price books in effect and to come, every model's measured
--     throughput), from whet_estimate_inputs(), which a gateway reads once and keeps until the version below
--     changes: the lookup returns the version, and a gateway whose copy is older reads the inputs again first.
--     The version is a row bumped, in the same transaction, by every statement that writes the tables read, so
--     a copy with a version is the state of that version, never a mix.
-- whet_job_estimate stays as the statement of the arithmetic in SQL; tests/integration/api/estimate_sql.mjs
-- checks that the gateway's estimates equal its answers over a grid of inputs.
CREATE TABLE estimate_inputs_version (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  version  bigint NOT NULL
);
INSERT INTO estimate_inputs_version (version) VALUES (1);
GRANT SELECT ON estimate_inputs_version TO whet_app;

CREATE FUNCTION whet_estimate_inputs_changed() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  UPDATE estimate_inputs_version SET version = version + 1;
  RETURN NULL;
END
$$;
CREATE TRIGGER estimate_inputs_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON price_books
  FOR EACH STATEMENT EXECUTE FUNCTION whet_estimate_inputs_changed();
CREATE TRIGGER estimate_inputs_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON prices
  FOR EACH STATEMENT EXECUTE FUNCTION whet_estimate_inputs_changed();
CREATE TRIGGER estimate_inputs_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON throughput_groups
  FOR EACH STATEMENT EXECUTE FUNCTION whet_estimate_inputs_changed();

-- The shared inputs, with their version: the currency of the newest price book (whet_currency, for when none
-- is in effect); the price book in effect and those to come, oldest first, each with the prices an estimate
-- uses as text (numeric, exact), keyed "sku:device_type"; and whet_throughput's rows, [base model, device
-- type, method, tokens a device-second, jobs], in the view's order (the order whet_job_estimate sums one
-- model's rows on a device in). A float8 goes into jsonb as its shortest exact text (extra_float_digits 1).
CREATE FUNCTION whet_estimate_inputs() RETURNS jsonb LANGUAGE plpgsql STABLE SECURITY DEFINER
  SET search_path = public SET extra_float_digits = 1 AS $$
BEGIN
  RETURN jsonb_build_object(
    'version', (SELECT version FROM estimate_inputs_version), 'currency', whet_currency(),
    'books', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                'effective_from', b.effective_from, 'currency', b.currency,
                'prices', (SELECT coalesce(jsonb_object_agg(p.sku || ':' || p.device_type, p.unit_price::text), '{}')
                           FROM prices p WHERE p.version = b.version
                             AND p.sku IN ('device_hour', 'trained_tokens_1m', 'rollout_completion_tokens_1m')))
                ORDER BY b.effective_from), '[]')
              FROM price_books b
              WHERE b.effective_from >= coalesce((SELECT max(effective_from) FROM price_books
                                                  WHERE effective_from <= whet_now()), -9223372036854775808)),
    'throughput', (SELECT coalesce(jsonb_agg(jsonb_build_array(w.base_model, w.device_type, w.method,
                                                               w.tokens_per_device_s, w.jobs)
                                             ORDER BY w.base_model, w.device_type, w.method), '[]')
                   FROM whet_throughput w));
END
$$;
REVOKE ALL ON FUNCTION whet_estimate_inputs FROM PUBLIC;
GRANT EXECUTE ON FUNCTION whet_estimate_inputs TO whet_app;

-- The fleet's pools with their ready nodes: the estimate's device type, when neither the sizing nor
-- whet.gpu_types names one, is the type with the most nodes.
CREATE OR REPLACE FUNCTION whet_sizing_pools() RETURNS jsonb LANGUAGE plpgsql STABLE SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  RETURN (SELECT coalesce(jsonb_agg(jsonb_build_object('dc', dc, 'device_type', device_type, 'device_mib', device_mib,
                                                       'devices', devices, 'nodes', nodes)
                                    ORDER BY dc, device_type, device_mib), '[]')
          FROM sizing_pools WHERE nodes > 0);
END
$$;

-- The create's lookup (0057's, called as it is) and the estimate's inputs that are the tenant's: the time
-- (whet_now, which picks the price book in effect), the shared inputs' version, the count a dry run kept for
-- the training file, the base model and p_cut (the count's max_seq_len, or the prompts' limit), and the
-- trained tokens and steps of the tenant's newest succeeded job of this method on the file (integers: its
-- tokens a step are the gateway's float division, exact whatever extra_float_digits the server is set to).
-- Folding these probes into 0057's statement measured no faster (tests/bench/gateway) and copied its body.
-- Generic plans, as whet_job_estimate's, and no bitmap scans: the previous job's probe must walk
-- jobs_succeeded_file in seq order and stop at the first job of the method (the type is a filter there: under
-- the tenant's row-level security a qual that is not leakproof, as ->> is not, cannot be an index condition),
-- with the job's progress read for each job it walks (OFFSET 0: not a join the planner may turn into a hash of
-- them all). Planned for a tenant's own values, or with its rows estimated as a few, it was a bitmap scan of
-- every succeeded job on the file, then a sort (tests/integration/scale/plans.mjs: 2,500 rows read). The
-- lookup's other probes are by key. 0057's five-argument form stays for gateways of before this migration.
CREATE FUNCTION whet_job_create_lookup(p_tenant text, p_model text, p_training text, p_validation text, p_method jsonb,
  p_cut integer,
  OUT base text, OUT ft_base text, OUT ft_checkpoint text, OUT ckpt_base text, OUT ckpt_id text,
  OUT training_purpose text, OUT training_format text, OUT training_lines bigint,
  OUT validation_purpose text, OUT validation_format text, OUT missing_judge text,
  OUT parameters bigint, OUT config jsonb, OUT object_prefix text, OUT model_sha256 text, OUT pools jsonb,
  OUT file_key text, OUT file_sha256 text, OUT file_bytes bigint,
  OUT now bigint, OUT inputs_version bigint, OUT kept_count jsonb, OUT prev_trained_tokens bigint,
  OUT prev_total_steps bigint)
  LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan SET enable_bitmapscan = off AS $$
BEGIN
  SELECT * INTO base, ft_base, ft_checkpoint, ckpt_base, ckpt_id, training_purpose, training_format, training_lines,
                validation_purpose, validation_format, missing_judge, parameters, config, object_prefix, model_sha256,
                pools, file_key, file_sha256, file_bytes
    FROM whet_job_create_lookup(p_tenant, p_model, p_training, p_validation, p_method);
  SELECT whet_now(), ev.version, k.counted, prev.trained_tokens, prev.total_steps
    INTO now, inputs_version, kept_count, prev_trained_tokens, prev_total_steps
    FROM estimate_inputs_version ev
    LEFT JOIN file_token_counts k
      ON k.file_id = p_training AND k.base_model = coalesce(base, ft_base, ckpt_base) AND k.tenant_id = p_tenant
     AND k.max_seq_len = p_cut
    LEFT JOIN LATERAL (SELECT p.trained_tokens, p.total_steps FROM jobs j
                       CROSS JOIN LATERAL (SELECT p.trained_tokens, p.total_steps FROM job_progress p
                                           WHERE p.job_id = j.id AND p.trained_tokens > 0 AND p.total_steps > 0
                                           OFFSET 0) p
                       WHERE j.tenant_id = p_tenant AND j.training_file = p_training AND j.status = 'succeeded'
                         AND j.method ->> 'type' = p_method ->> 'type'
                       ORDER BY j.seq DESC LIMIT 1) prev ON true;
END
$$;
GRANT EXECUTE ON FUNCTION whet_job_create_lookup(text, text, text, text, jsonb, integer) TO whet_app;
