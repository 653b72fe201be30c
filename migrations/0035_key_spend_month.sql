-- 0035_key_spend_month: whet_key_spend (0024) summed, for EVERY job the API key ever created, that job's
-- cost lines of the month (whet_cost_lines called once per job) and its running cost: O(the key's jobs
-- ever), ~3.2 s a call in psql for a key with 2,000 jobs, while the budget guard calls it on the
-- heartbeats of a limited key's running jobs and every create with such a key calls it too. Now the
-- tenant's job cost lines of the month are made once and summed over the key's jobs (a key's jobs are
-- its tenant's), and the running cost is taken only of the key's jobs with an unended attempt: O(the
-- tenant's month), as whet_budget_status. Same sum: the same lines, each rounded as before, added in
-- numeric. PL/pgSQL with a generic plan and no JIT, as 0033.
CREATE OR REPLACE FUNCTION whet_key_spend(p_key text) RETURNS numeric LANGUAGE plpgsql STABLE
  SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_start bigint := extract(epoch FROM date_trunc('month', now() AT TIME ZONE 'UTC'))::bigint;
  v_tenant text := (SELECT tenant_id FROM api_keys WHERE id = p_key);
BEGIN
  IF v_tenant IS NULL THEN -- no such key: nothing refers to it (a deleted key's jobs and answers lose it)
    RETURN 0;
  END IF;
  RETURN coalesce((SELECT sum(l.amount) FROM whet_job_cost_lines(v_tenant, NULL, v_start, 9223372036854775807) l
                   JOIN jobs j ON j.id = l.job_id WHERE j.api_key_id = p_key), 0)
       + coalesce((SELECT sum(whet_running_cost(j.tenant_id, j.id)) FROM jobs j
                   WHERE j.api_key_id = p_key
                     AND EXISTS (SELECT 1 FROM job_attempts a WHERE a.job_id = j.id AND a.ended_at IS NULL)), 0)
       + coalesce((SELECT sum(l.amount) FROM whet_inference_cost_lines(NULL, p_key, v_start, 9223372036854775807) l), 0);
END
$$;
