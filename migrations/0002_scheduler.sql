-- 0002_scheduler: what the scheduler service keeps: executors (nodes) and their leases, the commands
-- waiting for a node's next heartbeat, each attempt of a job, and idempotency for executor reports.

CREATE TABLE nodes (
  id              text PRIMARY KEY,
  dc              text NOT NULL,
  pool            text NOT NULL,
  devices         jsonb NOT NULL,             -- [{"type","memory_mib","index"}]
  device_type     text NOT NULL,              -- the type of its accelerators ("cpu" for CPU slots)
  gpus            integer NOT NULL CHECK (gpus >= 0),
  cpu_milli       bigint NOT NULL,
  memory_mib      bigint NOT NULL,
  cached_models   jsonb NOT NULL DEFAULT '[]',
  version         text NOT NULL DEFAULT '',
  state           text NOT NULL DEFAULT 'ready' CHECK (state IN ('ready', 'lost', 'cordoned')),
  registered_at   bigint NOT NULL DEFAULT whet_now(),
  last_heartbeat  double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp()),
  lease_ms        integer NOT NULL
);

-- One row per run of a job on a node. A lost node's attempt ends with outcome 'lost'; the next
-- attempt resumes from the job's last complete checkpoint.
CREATE TABLE job_attempts (
  job_id          text NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  attempt         integer NOT NULL,
  tenant_id       text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
  node_id         text NOT NULL REFERENCES nodes(id),
  gpu_mask        integer NOT NULL DEFAULT 0,
  gpu_milli       integer NOT NULL DEFAULT 1000,
  device_type     text NOT NULL,
  started_at      double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp()),
  ended_at        double precision,
  outcome         text CHECK (outcome IN ('succeeded', 'failed', 'stopped', 'cancelled', 'lost')),
  resume_step     integer NOT NULL DEFAULT 0,
  PRIMARY KEY (job_id, attempt)
);
CREATE INDEX job_attempts_running ON job_attempts(node_id) WHERE ended_at IS NULL;

CREATE TABLE node_commands (
  seq             bigserial PRIMARY KEY,
  node_id         text NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
  job_id          text NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  attempt         integer NOT NULL,
  kind            text NOT NULL CHECK (kind IN ('start', 'checkpoint', 'stop', 'cancel')),
  manifest        jsonb,
  grace_ms        integer NOT NULL DEFAULT 0,
  reason          text NOT NULL DEFAULT '',
  created_at      double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp()),
  delivered_at    double precision
);
CREATE INDEX node_commands_pending ON node_commands(node_id, seq) WHERE delivered_at IS NULL;

-- Executor reports are retried; (job, attempt, seq) makes each event land once.
ALTER TABLE job_events ADD COLUMN attempt integer, ADD COLUMN report_seq integer;
CREATE UNIQUE INDEX job_events_report ON job_events(job_id, attempt, report_seq) WHERE report_seq IS NOT NULL;

ALTER TABLE jobs ADD COLUMN placed_dc text, ADD COLUMN wait_since double precision,
  ADD COLUMN preempt_requested boolean NOT NULL DEFAULT false;

ALTER TABLE job_attempts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON job_attempts TO whet_app USING (tenant_id = whet_current_tenant());
GRANT SELECT ON job_attempts TO whet_app;

-- Where the finished model (adapter or full model dir, manifest-terminated) lives, for downloads and
-- for jobs that continue from it.
ALTER TABLE jobs ADD COLUMN final_object_prefix text;

-- A node that is gone (its lease expired, or it registered again after a restart) takes its running
-- attempts with it: they end as `lost` (their seconds metered and flagged), undelivered commands are
-- dropped, and their jobs go back to the queue (or to paused/cancelled when the tenant asked) with an
-- event carrying p_message. Returns the ids of the jobs it requeued.
CREATE FUNCTION whet_requeue_node_attempts(p_node text, p_message text) RETURNS SETOF text LANGUAGE sql AS $$
  WITH ended AS (
    UPDATE job_attempts a SET ended_at = extract(epoch FROM clock_timestamp()), outcome = 'lost'
    WHERE a.node_id = p_node AND a.ended_at IS NULL
    RETURNING a.job_id, a.attempt, a.tenant_id, a.device_type, a.ended_at - a.started_at AS seconds),
  dropped AS (DELETE FROM node_commands c WHERE c.node_id = p_node AND c.delivered_at IS NULL),
  metered AS (
    INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, lost)
    SELECT tenant_id, job_id, attempt, 0, device_type, seconds, true FROM ended
    ON CONFLICT (job_id, attempt, report_seq) DO NOTHING),
  requeued AS (
    UPDATE jobs j SET node_id = NULL, preempt_requested = false,
      status = CASE j.desired WHEN 'cancel' THEN 'cancelled' WHEN 'pause' THEN 'paused' ELSE 'queued' END
    FROM ended WHERE j.id = ended.job_id AND j.status IN ('running', 'queued')
    RETURNING j.id, j.tenant_id, j.last_step)
  INSERT INTO job_events (id, tenant_id, job_id, level, message, data)
  SELECT 'ftevent-' || md5(random()::text || id), tenant_id, id, 'warn', p_message,
         jsonb_build_object('node', p_node, 'last_step', last_step)
  FROM requeued RETURNING job_id
$$;

-- Unix seconds truncate, as C's time() does (rounding disagreed with the gateway by a second).
CREATE OR REPLACE FUNCTION whet_now() RETURNS bigint LANGUAGE sql STABLE AS
  $$ SELECT floor(extract(epoch FROM now()))::bigint $$;
-- Every job create counts the tenant's active jobs.
CREATE INDEX jobs_tenant_active ON jobs(tenant_id) WHERE status IN ('validating_files', 'queued', 'running', 'paused');
