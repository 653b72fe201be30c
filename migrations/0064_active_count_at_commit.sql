-- 0064_active_count_at_commit: a create bumps its tenant's active-job counter at its commit, not at its insert.
-- The bump (0057: the insert's statement trigger) locks the tenant's counter row from the insert to the
-- commit. The gateway runs a loop iteration's requests as one transaction (gateway/db.c's shared segments), so
-- one tenant's creates on other connections waited for that lock through every later statement of the
-- transaction: 489 us of a create's 706 us in jobs_create (one tenant, 1k queued, pg_stat_statements under
-- bench.sh's load), nearly all of it waiting. Now a tenant-scoped insert of an active job (the gateway's
-- creates) queues an event for a deferred constraint trigger, which bumps the counter and checks the limit
-- when the transaction commits: the row is locked only from there to the commit's end. Still exact: the
-- bump's UPDATE waits for the row and counts from the value committed before it, and a count past
-- max_active_jobs raises WJ429 at the commit, which rolls back the job, its event and the bump together (the
-- gateway reads the commit's error as the request's: gateway/db.c). Writers not scoped to a tenant (the
-- scheduler, operators' SQL, restores) are counted per statement as before and never refused. A row trigger
-- updates the counter once a job, so a tenant-scoped transaction inserting n jobs pays O(n^2) in row versions
-- (0010): the gateway's insert one job a request, at most DB_PIPELINE_MAX requests a transaction.
CREATE FUNCTION whet_count_active_created() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
DECLARE
  v_over boolean;
BEGIN
  WITH c AS (UPDATE tenant_active_jobs SET active = active + 1 WHERE tenant_id = NEW.tenant_id RETURNING active)
  SELECT c.active > t.max_active_jobs INTO v_over FROM c JOIN tenants t ON t.id = NEW.tenant_id;
  IF v_over THEN
    -- SQLSTATE WJ429 (whet's own class WJ): the gateway answers it 429.
    RAISE EXCEPTION 'tenant % is at its active-job limit', NEW.tenant_id USING ERRCODE = 'WJ429';
  END IF;
  RETURN NULL;
END
$$;
-- The WHEN clause is evaluated at the insert: the session's tenant scope then, the job's status as inserted.
CREATE CONSTRAINT TRIGGER jobs_count_active_created AFTER INSERT ON jobs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN (whet_current_tenant() IS NOT NULL AND whet_job_is_active(NEW.status))
  EXECUTE FUNCTION whet_count_active_created();

-- The statement trigger counts every other write: tenant-scoped inserts are the constraint trigger's.
CREATE OR REPLACE FUNCTION whet_count_active_written() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  IF TG_OP = 'INSERT' AND whet_current_tenant() IS NOT NULL THEN
    RETURN NULL;
  END IF;
  UPDATE tenant_active_jobs c SET active = c.active + CASE TG_OP WHEN 'INSERT' THEN d.n ELSE -d.n END
    FROM (SELECT tenant_id, count(*) AS n FROM changed_jobs WHERE whet_job_is_active(status) GROUP BY tenant_id) d
    WHERE c.tenant_id = d.tenant_id;
  RETURN NULL;
END
$$;

-- Gateways of before 0057 check the limit with this statement after their insert, and expect its WJ429 there:
-- it runs the transaction's pending bumps first (SET CONSTRAINTS ... IMMEDIATE fires them now, and later
-- inserts of the transaction bump at once), so their creates are counted and refused as they were. Gateways of
-- 0057 to 0063 expect the WJ429 from the insert: during an upgrade they see it at the commit, which their
-- db.c takes for a broken connection (a 503 where a 429 was due); the limit holds all the same.
CREATE OR REPLACE FUNCTION whet_job_slot_check(p_tenant text) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  SET CONSTRAINTS jobs_count_active_created IMMEDIATE;
  IF NOT coalesce((SELECT c.active <= t.max_active_jobs FROM tenant_active_jobs c JOIN tenants t ON t.id = c.tenant_id
                   WHERE c.tenant_id = p_tenant AND coalesce(whet_current_tenant() = p_tenant, true)), false) THEN
    RAISE EXCEPTION 'tenant % is at its active-job limit', p_tenant USING ERRCODE = 'WJ429';
  END IF;
END
$$;
