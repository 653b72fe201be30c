-- 0033_request_plans: the database time of a GET, a list and a create, measured with pg_stat_statements in
-- tests/bench/gateway (one tenant, 32 clients): whet.cost took ~2.3 ms per job object and the estimate
-- ~0.9 ms per create, nearly all of it planning. PL/pgSQL keeps a statement's plan, but its plan cache
-- judged the generic plan of these big statements costlier than a custom one (it cannot know a job id is
-- given) and so planned afresh on every call; and a forced generic plan is costed high enough (the branches
-- a NULL argument switches off are priced as scans) to be JIT-compiled, a second per call. With the generic
-- plan and no JIT each runs in ~0.4 ms, and a job that never ran answers without any of it.
-- (A later CREATE OR REPLACE of these functions must keep the SET clauses.)

-- whet.cost of a job that has no attempt, no usage and no checkpoint (every queued job, most of a list):
-- the zero the full computation would return, after three index probes. Otherwise the full cost, as before.
ALTER FUNCTION whet_job_cost(text) RENAME TO whet_job_cost_recorded;
ALTER FUNCTION whet_job_cost_recorded(text) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION whet_job_cost_recorded(text) SET jit = off;
CREATE FUNCTION whet_job_cost(p_job text) RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM job_attempts WHERE job_id = p_job) OR EXISTS (SELECT 1 FROM usage_records WHERE job_id = p_job)
     OR EXISTS (SELECT 1 FROM checkpoints WHERE job_id = p_job) THEN
    RETURN whet_job_cost_recorded(p_job);
  END IF;
  RETURN jsonb_build_object('amount', 0, 'currency', whet_currency(), 'running_amount', 0, 'run_seconds', 0,
                            'line_items', '{}'::jsonb);
END
$$;

ALTER FUNCTION whet_job_estimate(text, jsonb, text, jsonb, jsonb, jsonb, jsonb) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION whet_job_estimate(text, jsonb, text, jsonb, jsonb, jsonb, jsonb) SET jit = off;


-- whet_job_slot as in 0010, in PL/pgSQL: a SQL function that cannot be inlined (SECURITY DEFINER) is
-- planned again by every statement that calls it.
CREATE OR REPLACE FUNCTION whet_job_slot(p_tenant text) RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  RETURN coalesce((SELECT c.active < t.max_active_jobs FROM tenant_active_jobs c JOIN tenants t ON t.id = c.tenant_id
                   WHERE c.tenant_id = p_tenant AND coalesce(whet_current_tenant() = p_tenant, true)
                   FOR UPDATE OF c), false);
END
$$;
