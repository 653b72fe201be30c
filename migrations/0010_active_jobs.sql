-- 0010_active_jobs: each tenant's active jobs (validating_files, queued, running, paused) kept in one
-- counter row, so a job create checks max_active_jobs in O(1) instead of counting the tenant's jobs
-- (which slowed creates as the queue grew, and let two concurrent creates both pass the last slot).
-- The counter changes in the transaction that changes a job's activity (the triggers below: inserts,
-- status changes, deletes), so it is exact once that transaction commits; a create locks the row while
-- it checks (whet_job_slot), so concurrent creates of one tenant take the slots one at a time.
-- Only transitions that start or end a job's activity touch the row: placing, pausing and resuming a
-- job leave it alone, so the scheduler's cycle does not contend with creates on it.
CREATE TABLE tenant_active_jobs (
  tenant_id     text PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
  active        integer NOT NULL DEFAULT 0 CHECK (active >= 0)
);

CREATE FUNCTION whet_job_is_active(p_status text) RETURNS boolean LANGUAGE sql IMMUTABLE AS
  $$ SELECT p_status IN ('validating_files', 'queued', 'running', 'paused') $$;

-- Recounts every tenant's active jobs: the migration's starting point, and the repair after jobs were
-- written with triggers off (session_replication_role = replica, a restore with --disable-triggers).
CREATE FUNCTION whet_active_jobs_recount() RETURNS void LANGUAGE sql AS $$
  UPDATE tenant_active_jobs c
  SET active = (SELECT count(*) FROM jobs j WHERE j.tenant_id = c.tenant_id AND whet_job_is_active(j.status))
$$;
INSERT INTO tenant_active_jobs (tenant_id) SELECT id FROM tenants;
SELECT whet_active_jobs_recount();

CREATE FUNCTION whet_tenant_active_jobs_row() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  INSERT INTO tenant_active_jobs (tenant_id) VALUES (NEW.id);
  RETURN NULL;
END
$$;
CREATE TRIGGER tenants_active_jobs_row AFTER INSERT ON tenants FOR EACH ROW
  EXECUTE FUNCTION whet_tenant_active_jobs_row();

-- Inserts and deletes are counted per statement (one counter update per tenant and statement, from the
-- transition table): a row trigger would update the same counter row once per job, and a transaction
-- that updates one row n times pays O(n^2) for the row versions it leaves behind (a bulk insert of 40k
-- jobs took 50 s instead of 3). Status changes are counted per row, and only those that start or end a
-- job's activity (the WHEN clause keeps the trigger from running at all for the others); they come one
-- job at a time from the gateway and the scheduler.
-- The statement's inserted or deleted jobs are the transition table changed_jobs.
CREATE FUNCTION whet_count_active_written() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  UPDATE tenant_active_jobs c SET active = c.active + CASE TG_OP WHEN 'INSERT' THEN d.n ELSE -d.n END
    FROM (SELECT tenant_id, count(*) AS n FROM changed_jobs WHERE whet_job_is_active(status) GROUP BY tenant_id) d
    WHERE c.tenant_id = d.tenant_id;
  RETURN NULL;
END
$$;
CREATE FUNCTION whet_count_active_changed() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  IF whet_job_is_active(OLD.status) THEN
    UPDATE tenant_active_jobs SET active = active - 1 WHERE tenant_id = OLD.tenant_id;
  END IF;
  IF whet_job_is_active(NEW.status) THEN
    UPDATE tenant_active_jobs SET active = active + 1 WHERE tenant_id = NEW.tenant_id;
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER jobs_count_active_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS changed_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION whet_count_active_written();
CREATE TRIGGER jobs_count_active_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS changed_jobs
  FOR EACH STATEMENT EXECUTE FUNCTION whet_count_active_written();
CREATE TRIGGER jobs_count_active_update AFTER UPDATE OF status, tenant_id ON jobs FOR EACH ROW
  WHEN (whet_job_is_active(OLD.status) <> whet_job_is_active(NEW.status) OR OLD.tenant_id <> NEW.tenant_id)
  EXECUTE FUNCTION whet_count_active_changed();

-- Whether the tenant may start one more job: locks its counter row until the transaction ends, so the
-- insert that follows (and bumps the counter through the trigger) is seen by the next create. Only for
-- the session's own tenant when the caller is scoped to one (whet_app).
CREATE FUNCTION whet_job_slot(p_tenant text) RETURNS boolean LANGUAGE sql SECURITY DEFINER
  SET search_path = public AS $$
  SELECT coalesce((SELECT c.active < t.max_active_jobs FROM tenant_active_jobs c JOIN tenants t ON t.id = c.tenant_id
                   WHERE c.tenant_id = p_tenant AND coalesce(whet_current_tenant() = p_tenant, true)
                   FOR UPDATE OF c), false)
$$;
GRANT EXECUTE ON FUNCTION whet_job_slot TO whet_app;

-- The counter replaces the count this index served.
DROP INDEX jobs_tenant_active;
