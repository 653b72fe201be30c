-- 0049_job_slot_after_insert: a job create checks the tenant's active-job limit after its insert, not before.
-- whet_job_slot (0010) locks the tenant's counter row before the insert, so one tenant's concurrent creates
-- ran one at a time from their first row lock to their commit: the whole insert (the job's row, its 16
-- indexes, its event) under the lock. pgbench, 32 connections of one tenant on 2 cores: 1,470 creates/s
-- with the slot taken first against 2,650/s with no check at all. Now the insert runs unlocked; its
-- statement trigger bumps the counter (locking the row only from there to the commit, as any insert did),
-- and whet_job_slot_check, the next statement of the same transaction, fails the transaction when that
-- took the tenant past its limit: the job, its event and the counter's bump roll back together. Exact
-- still: a create that waited on the row lock bumps the counter as the one before it committed it.
-- whet_job_slot stays for writers that check first.
CREATE FUNCTION whet_job_slot_check(p_tenant text) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  IF NOT coalesce((SELECT c.active <= t.max_active_jobs FROM tenant_active_jobs c JOIN tenants t ON t.id = c.tenant_id
                   WHERE c.tenant_id = p_tenant AND coalesce(whet_current_tenant() = p_tenant, true)), false) THEN
    -- SQLSTATE WJ429 (whet's own class WJ): the gateway answers it 429.
    RAISE EXCEPTION 'tenant % is at its active-job limit', p_tenant USING ERRCODE = 'WJ429';
  END IF;
END
$$;
GRANT EXECUTE ON FUNCTION whet_job_slot_check TO whet_app;
