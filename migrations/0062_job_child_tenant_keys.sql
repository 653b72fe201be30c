-- 0062_job_child_tenant_keys: an attempt and an event each carry their job's tenant_id (for row-level security)
-- with two foreign keys, one to the job and one to the tenant. The second checks nothing the first does not: the
-- job's own tenant key holds its tenant, a tenant's deletion cascades through its jobs to their attempts and
-- events, and no path writes a tenant_id other than its job's. Each key is a check per row written (a FOR KEY
-- SHARE of the parent row): in the leader's placement statement, 7 such checks took 27.5 of 63 ms for a batch of
-- 256 placements (auto_explain), and every event an executor reports paid one. The job's key stays.
ALTER TABLE job_attempts DROP CONSTRAINT job_attempts_tenant_id_fkey;
ALTER TABLE job_events DROP CONSTRAINT job_events_tenant_id_fkey;
