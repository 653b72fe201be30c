-- 0020_scheduler_scale: what the scheduler's cycle needs to stay under a second at fleet scale
-- (issue 15, tests/bench/scale).

-- The running attempts as placement sees them (scheduler/service/running.c) are kept by the leader
-- between cycles and brought up to date from the jobs named here since its last read, instead of
-- read in full every cycle (1.3-1.5 s at 80000 running attempts). A row names a job whose running
-- attempts, or what placement reads of them (node and devices, priority, a stop requested, the last
-- checkpoint's time), changed in transaction `xid`. The leader reads the rows of transactions not
-- yet finished at its previous read (xid >= that read's snapshot xmin) and deletes the older ones,
-- which that read saw: a transaction that commits late is never missed, whatever the order of commits.
CREATE TABLE running_changes (
  xid     xid8 NOT NULL DEFAULT pg_current_xact_id(),
  job_id  text NOT NULL
);
CREATE INDEX running_changes_xid ON running_changes (xid);

-- Per statement where the table allows (a bulk insert of attempts adds one row per job, not per row
-- trigger call); jobs' two columns per row, only when they changed (most job updates touch neither).
CREATE FUNCTION whet_running_changed_rows() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    INSERT INTO running_changes (job_id) SELECT DISTINCT job_id FROM old_rows;
  ELSE
    INSERT INTO running_changes (job_id) SELECT DISTINCT job_id FROM new_rows;
  END IF;
  RETURN NULL;
END
$$;
CREATE FUNCTION whet_running_changed_job() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  INSERT INTO running_changes (job_id) VALUES (NEW.id);
  RETURN NULL;
END
$$;
CREATE TRIGGER job_attempts_running_insert AFTER INSERT ON job_attempts REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION whet_running_changed_rows();
CREATE TRIGGER job_attempts_running_update AFTER UPDATE ON job_attempts REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION whet_running_changed_rows();
CREATE TRIGGER job_attempts_running_delete AFTER DELETE ON job_attempts REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION whet_running_changed_rows();
CREATE TRIGGER gang_ranks_running_insert AFTER INSERT ON gang_ranks REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION whet_running_changed_rows();
CREATE TRIGGER checkpoints_running_insert AFTER INSERT ON checkpoints REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION whet_running_changed_rows();
CREATE TRIGGER jobs_running_changed AFTER UPDATE OF priority, preempt_requested ON jobs FOR EACH ROW
  WHEN (OLD.priority IS DISTINCT FROM NEW.priority OR OLD.preempt_requested IS DISTINCT FROM NEW.preempt_requested)
  EXECUTE FUNCTION whet_running_changed_job();

-- The cycle's pause and cancel requests: the jobs asked to stop that still wait or run, a handful at
-- any time, found among those ever asked to stop by (desired, status); and the commands already sent
-- for an attempt (node_commands grows by a START per placement). The planner learns from
-- jobs_desired_status that desired and status go together (nearly every job asked to stop has
-- stopped): taken as independent, two thirds of the active jobs seemed asked to stop, and it read
-- every active job instead (tests/integration/scheduler/plans.sh).
CREATE INDEX jobs_stop_requested ON jobs (desired, status) WHERE desired <> 'run';
CREATE STATISTICS jobs_desired_status (mcv) ON desired, status FROM jobs;
CREATE INDEX node_commands_job ON node_commands (job_id, attempt);

-- The rest of the cycle's reads, each of which read every waiting or running job per cycle (10000
-- nodes x 8 devices held, 100000 queued, in tests/bench/scale): the head of the queue in arrival order
-- (227 ms: the whole queue sorted for its first 10000), the running jobs whose estimated_finish is
-- missing though they made steps (125 ms), and the gangs past their rendezvous deadline (58 ms).
CREATE INDEX jobs_queued ON jobs (seq) WHERE status = 'queued' AND desired = 'run';
CREATE INDEX jobs_estimate_missing ON jobs (id) WHERE status = 'running' AND estimated_finish IS NULL AND last_step > 0;
CREATE INDEX job_attempts_rendezvous_due ON job_attempts (rendezvous_deadline)
  WHERE ended_at IS NULL AND world_size > 1 AND rendezvous IS NULL;

-- FinishJob of a succeeded job adds its throughput to its group's row (migration 0011), and every
-- job of a base model, device type and method shares that row: concurrent FinishJobs queued on its
-- lock until each commit (3.5-8.6 ms per FinishJob in tests/bench/scale). A group is now the sum of
-- 32 rows (shards), a job adding to the one its id hashes to (kept in throughput_jobs, so that
-- its contribution leaves the row it went to; the contributions made before this migration are in
-- shard 0, where they were summed).
ALTER TABLE throughput_jobs ADD COLUMN shard smallint NOT NULL DEFAULT 0;
ALTER TABLE throughput_groups ADD COLUMN shard smallint NOT NULL DEFAULT 0;
ALTER TABLE throughput_groups DROP CONSTRAINT throughput_groups_pkey;
ALTER TABLE throughput_groups ADD PRIMARY KEY (base_model, device_type, method, shard);

CREATE OR REPLACE VIEW whet_throughput AS
  SELECT base_model, device_type, method, (sum(tokens) / sum(seconds))::float8 AS tokens_per_device_s,
         sum(jobs)::bigint AS jobs
  FROM throughput_groups GROUP BY base_model, device_type, method HAVING sum(jobs) > 0 AND sum(seconds) > 0;

CREATE OR REPLACE FUNCTION whet_throughput_refresh(p_jobs text[]) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  IF p_jobs IS NULL THEN
    RETURN;
  END IF;
  -- One refresh of a job at a time (the jobs' row locks, in one order): the second then sees the
  -- first's rows.
  PERFORM 1 FROM jobs WHERE id = ANY (p_jobs) ORDER BY id FOR NO KEY UPDATE;
  WITH old AS (DELETE FROM throughput_jobs WHERE job_id = ANY (p_jobs) RETURNING *),
  d AS (SELECT base_model, device_type, method, shard, sum(tokens) AS tokens, sum(seconds) AS seconds, count(*) AS jobs
        FROM old GROUP BY 1, 2, 3, 4)
  UPDATE throughput_groups g SET tokens = g.tokens - d.tokens, seconds = g.seconds - d.seconds, jobs = g.jobs - d.jobs
    FROM d WHERE g.base_model = d.base_model AND g.device_type = d.device_type AND g.method = d.method
      AND g.shard = d.shard;
  WITH new AS (
    INSERT INTO throughput_jobs (job_id, device_type, base_model, method, tokens, seconds, shard)
    SELECT j.id, u.device_type, j.base_model, j.method ->> 'type', sum(u.trained_tokens), sum(u.device_seconds::numeric),
           hashtext(j.id) & 31
    FROM jobs j JOIN usage_records u ON u.job_id = j.id
    WHERE j.id = ANY (p_jobs) AND j.status = 'succeeded'
      AND NOT u.lost AND u.device_seconds > 0 AND u.trained_tokens > 0
    GROUP BY j.id, u.device_type, j.base_model, j.method ->> 'type'
    RETURNING *)
  INSERT INTO throughput_groups AS g (base_model, device_type, method, shard, tokens, seconds, jobs)
    SELECT base_model, device_type, method, shard, sum(tokens), sum(seconds), count(*) FROM new GROUP BY 1, 2, 3, 4
    ON CONFLICT (base_model, device_type, method, shard) DO UPDATE
    SET tokens = g.tokens + excluded.tokens, seconds = g.seconds + excluded.seconds, jobs = g.jobs + excluded.jobs;
END
$$;
