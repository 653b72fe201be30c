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
-- any time (an index on desired alone would hold every job ever cancelled); and the commands already
-- sent for an attempt (node_commands grows by a START per placement).
CREATE INDEX jobs_stop_requested ON jobs (id) WHERE desired IN ('pause', 'cancel') AND status IN ('queued', 'running');
CREATE INDEX node_commands_job ON node_commands (job_id, attempt);
