-- 0057_create_lean: a job create cost ~1.1 ms of PostgreSQL CPU, three times a bare INSERT into jobs for its
-- insert transaction alone (~650 us, pgbench, one connection, the gateway's statements); much of it was
-- overhead paid anew on every statement rather than work.
--
-- job_events.metric_step is generated from whet_metric_step (0005), an SQL function: the executor prepares a
-- stored generated column's expression afresh for every statement that inserts into the table, and planning
-- that expression inlines the function, which parses and analyzes its body each time. ~90 us of every insert
-- into job_events (a create's "created" event, each event and checkpoint the scheduler records), whatever
-- the row's type. In PL/pgSQL the body's plan is kept and nothing is parsed; the function runs only for rows
-- of type 'metrics' (the column's CASE; the scheduler records one a statement). The same expression, so the
-- same values.
CREATE OR REPLACE FUNCTION whet_metric_step(p_data jsonb) RETURNS integer LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN CASE WHEN jsonb_typeof(p_data -> 'step') = 'number' AND (p_data ->> 'step') ~ '^[0-9]{1,9}$'
              THEN (p_data ->> 'step')::integer END;
END
$$;

-- The active-job limit, checked by the insert's own trigger: a create ran whet_job_slot_check (0049) as a
-- statement of its own after the insert, ~80 us (a statement, a SECURITY DEFINER call with its search_path,
-- the counter read again). The trigger that bumps the counter now returns the new count, and when the
-- session is scoped to a tenant (whet.tenant_id: the gateway's tenant connections, which insert jobs only to
-- create them) it fails the insert with WJ429 once a tenant's count passed its max_active_jobs: the job, its
-- event and the bump roll back together, as with 0049's check. Still exact: the counter's row lock, taken by
-- the UPDATE, is held to the commit, and a create that waited on it counts from the committed value. Writers
-- not scoped to a tenant (the scheduler, operators' SQL, restores) are counted as before and never refused.
CREATE OR REPLACE FUNCTION whet_count_active_written() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
DECLARE
  v_over text;
BEGIN
  IF TG_OP = 'INSERT' AND whet_current_tenant() IS NOT NULL THEN
    WITH c AS (UPDATE tenant_active_jobs c SET active = c.active + d.n
                 FROM (SELECT tenant_id, count(*) AS n FROM changed_jobs WHERE whet_job_is_active(status)
                       GROUP BY tenant_id) d
                WHERE c.tenant_id = d.tenant_id RETURNING c.tenant_id, c.active)
    SELECT c.tenant_id INTO v_over FROM c JOIN tenants t ON t.id = c.tenant_id WHERE c.active > t.max_active_jobs
    LIMIT 1;
    IF v_over IS NOT NULL THEN
      -- SQLSTATE WJ429 (whet's own class WJ): the gateway answers it 429.
      RAISE EXCEPTION 'tenant % is at its active-job limit', v_over USING ERRCODE = 'WJ429';
    END IF;
    RETURN NULL;
  END IF;
  UPDATE tenant_active_jobs c SET active = c.active + CASE TG_OP WHEN 'INSERT' THEN d.n ELSE -d.n END
    FROM (SELECT tenant_id, count(*) AS n FROM changed_jobs WHERE whet_job_is_active(status) GROUP BY tenant_id) d
    WHERE c.tenant_id = d.tenant_id;
  RETURN NULL;
END
$$;
-- whet_job_slot_check stays for gateways of before this migration while an upgrade replaces them (their
-- creates then check twice, to the same answer).

-- The create's lookup (the model, the files, a grader's judge models) and the estimate's inputs (the base
-- model's row, the fleet's pools, the training file's object) were two statements, ~100 and ~70 us: the
-- lookup's plan set up its four probes for a fine-tuned model or checkpoint and its judge-model query on
-- every call, though a create names a base model and no judge nearly always. One function now, ~105 us: a
-- base model, both files and the pools in one statement; the fine-tuned probes only when the model is not a
-- base model, the judge query only when the method names a score_model or label_model grader. The same
-- columns and answers as the two statements (gateway/jobs.c's jobs_lookup, estimate.c's estimate_inputs),
-- read in one snapshot, the probes as jobs_lookup wrote them. SECURITY INVOKER: the tenant's row-level
-- security applies.
CREATE FUNCTION whet_job_create_lookup(p_tenant text, p_model text, p_training text, p_validation text, p_method jsonb,
  OUT base text, OUT ft_base text, OUT ft_checkpoint text, OUT ckpt_base text, OUT ckpt_id text,
  OUT training_purpose text, OUT training_format text, OUT training_lines bigint,
  OUT validation_purpose text, OUT validation_format text, OUT missing_judge text,
  OUT parameters bigint, OUT config jsonb, OUT object_prefix text, OUT model_sha256 text, OUT pools jsonb,
  OUT file_key text, OUT file_sha256 text, OUT file_bytes bigint)
  LANGUAGE plpgsql STABLE AS $$
BEGIN
  SELECT b.id, f.purpose, f.format, f.line_count, v.purpose, v.format, f.object_key, f.sha256, f.bytes,
         b.parameters, b.config, b.object_prefix, b.sha256, whet_sizing_pools()
    INTO base, training_purpose, training_format, training_lines, validation_purpose, validation_format,
         file_key, file_sha256, file_bytes, parameters, config, object_prefix, model_sha256, pools
    FROM (SELECT 1) one
    LEFT JOIN base_models b ON b.id = p_model
    LEFT JOIN files f ON f.tenant_id = p_tenant AND f.id = p_training
    LEFT JOIN files v ON v.tenant_id = p_tenant AND v.id = p_validation;
  IF base IS NULL THEN
    SELECT (SELECT j.base_model FROM jobs j WHERE j.tenant_id = p_tenant AND j.fine_tuned_model = p_model
              AND j.status = 'succeeded'
              AND NOT EXISTS (SELECT 1 FROM checkpoint_deletions d WHERE d.job_id = j.id AND d.reason = 'model_deleted')
            ORDER BY j.seq DESC LIMIT 1),
           (SELECT c.id FROM checkpoints c JOIN jobs j ON j.id = c.job_id WHERE j.tenant_id = p_tenant
              AND j.fine_tuned_model = p_model AND j.status = 'succeeded' ORDER BY c.step_number DESC LIMIT 1),
           (SELECT j.base_model FROM checkpoints c JOIN jobs j ON j.id = c.job_id WHERE c.tenant_id = p_tenant
              AND c.fine_tuned_model_checkpoint = p_model LIMIT 1),
           (SELECT c.id FROM checkpoints c WHERE c.tenant_id = p_tenant AND c.fine_tuned_model_checkpoint = p_model LIMIT 1)
      INTO ft_base, ft_checkpoint, ckpt_base, ckpt_id;
    SELECT b.parameters, b.config, b.object_prefix, b.sha256 INTO parameters, config, object_prefix, model_sha256
      FROM base_models b WHERE b.id = coalesce(ft_base, ckpt_base);
  END IF;
  IF jsonb_path_exists(p_method, 'lax $.** ? (@.type == "score_model" || @.type == "label_model")') THEN
    SELECT m #>> '{}' INTO missing_judge
      FROM jsonb_path_query(p_method, 'lax $.** ? (@.type == "score_model" || @.type == "label_model").model') m
     WHERE NOT EXISTS (SELECT 1 FROM base_models b WHERE b.id = m #>> '{}') LIMIT 1;
  END IF;
END
$$;
GRANT EXECUTE ON FUNCTION whet_job_create_lookup TO whet_app;

-- The cost of a job with nothing recorded yet (no attempt, usage or checkpoint), whet_job_cost's answer for it
-- (0052), in one place: a create answers with it from the new row alone (gateway/jobs.c's NEW_JOB_COLUMNS),
-- without whet_job_cost's three probes (~50 us).
CREATE FUNCTION whet_job_cost_none() RETURNS jsonb LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object('amount', 0, 'currency', whet_currency(), 'running_amount', 0, 'run_seconds', 0,
                            'line_items', '{}'::jsonb)
$$;
CREATE OR REPLACE FUNCTION whet_job_cost(p_job text) RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_created bigint := (SELECT j.created_at FROM jobs j WHERE j.id = p_job);
BEGIN
  IF EXISTS (SELECT 1 FROM job_attempts WHERE job_id = p_job)
     OR EXISTS (SELECT 1 FROM usage_records WHERE job_id = p_job AND job_created_at = v_created)
     OR EXISTS (SELECT 1 FROM checkpoints WHERE job_id = p_job) THEN
    RETURN whet_job_cost_recorded(p_job);
  END IF;
  RETURN whet_job_cost_none();
END
$$;
