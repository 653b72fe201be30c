-- 0045_admin_pages: the operator's node and queue lists (gateway/admin_fleet.c) are paged by a key
-- these indexes hold in order, so a page reads its own rows, not the fleet's or the queue's.
--
-- Nodes go by (dc, pool, id): the console shows them by pool, and a dc or a dc and pool filter is a
-- range of the same index.
CREATE INDEX nodes_admin_page ON nodes (dc, pool, id);

-- Jobs that have not ended go waiting first (validating_files, queued), then started (running,
-- paused); the waiting ones by the place the scheduler stored (queue_position, rewritten when it moved
-- by more than a tenth: public_state.c), those with none after them, ties by seq. The expressions are
-- the ones gateway/admin_fleet.c writes (QUEUE_KEY), so its ORDER BY and row comparison use them. A
-- second index leads with the tenant, for the tenant filter.
CREATE INDEX jobs_admin_queue ON jobs ((status IN ('running', 'paused')), (coalesce(queue_position, 2147483647)), seq)
  WHERE status IN ('validating_files', 'queued', 'running', 'paused');
CREATE INDEX jobs_admin_queue_tenant
  ON jobs (tenant_id, (status IN ('running', 'paused')), (coalesce(queue_position, 2147483647)), seq)
  WHERE status IN ('validating_files', 'queued', 'running', 'paused');
