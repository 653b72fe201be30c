-- 0051_partitioned_usage: metering (usage_records) lives in monthly partitions, as job events do since
-- 0044, so that an operator can drop billing history a month at a time past a retention
-- (whet_partitions_maintain, `whet scheduler --usage-retention-days`) instead of deleting rows one by one.
--
-- The partition key is the month of the JOB's creation (job_created_at, a copy of jobs.created_at on each
-- row), not of the report. A partitioned table's unique keys must hold its partition key, and metering is
-- idempotent through (job_id, attempt, report_seq): every writer's retry (FinishJob's, a gang rank's, a
-- lost node's) is an INSERT ... ON CONFLICT DO NOTHING on it. jobs.created_at never changes, so a job's rows
-- all carry one job_created_at, and (job_id, attempt, report_seq, job_created_at) is unique exactly when
-- (job_id, attempt, report_seq) is: the constraint stays a constraint, a retry finds its first try in the
-- same partition however many months apart the two ran, and no writer needs a lock or a lookup (0044 had to
-- replace the events' unique key with an advisory lock, because an event's month is that of its report).
-- The foreign key (job_id, job_created_at) -> jobs (id, created_at) holds every writer to it. A job's rows
-- are in one partition: a job's reads (its cost, its throughput) could be pruned to it by its created_at.
-- A month's partition is dropped only when no row in it was recorded within the retention, so a job that
-- runs for longer than the retention keeps its metering (see whet_partitions_maintain).
--
-- A DEFAULT partition takes the rows of a month that has no partition (a job created in a month whose
-- partition retention dropped, and metered again), and maintenance moves them to a new one, as for events.

-- The foreign key's target: jobs' id with its creation time.
CREATE UNIQUE INDEX jobs_id_created ON jobs (id, created_at);

-- The new table takes the old one's columns, defaults (seq's sequence) and checks; the old one is read once
-- more, whole, then dropped: its keys, indexes, triggers and policy go now, leaving their names.
ALTER TABLE usage_records RENAME TO usage_records_unpartitioned;
ALTER TABLE usage_records_unpartitioned DROP CONSTRAINT usage_records_pkey,
  DROP CONSTRAINT usage_records_job_id_attempt_report_seq_key, DROP CONSTRAINT usage_records_tenant_id_fkey,
  DROP CONSTRAINT usage_records_job_id_fkey;
DROP INDEX usage_tenant;
DROP TRIGGER usage_records_throughput_insert ON usage_records_unpartitioned;
DROP TRIGGER usage_records_throughput_update ON usage_records_unpartitioned;
DROP TRIGGER usage_records_throughput_delete ON usage_records_unpartitioned;
DROP POLICY tenant_isolation ON usage_records_unpartitioned;
ALTER SEQUENCE usage_records_seq_seq OWNED BY NONE;

CREATE TABLE usage_records (
  LIKE usage_records_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
  job_created_at bigint NOT NULL,              -- the job's created_at: the partition key
  PRIMARY KEY (seq, job_created_at),
  CONSTRAINT usage_records_once UNIQUE (job_id, attempt, report_seq, job_created_at),
  FOREIGN KEY (tenant_id) REFERENCES tenants(id) ON DELETE CASCADE,
  CONSTRAINT usage_records_job_fkey FOREIGN KEY (job_id, job_created_at) REFERENCES jobs (id, created_at)
    ON DELETE CASCADE
) PARTITION BY RANGE (job_created_at);
ALTER SEQUENCE usage_records_seq_seq OWNED BY usage_records.seq;
CREATE TABLE usage_records_default PARTITION OF usage_records DEFAULT;
CREATE INDEX usage_tenant ON usage_records (tenant_id, created_at);

ALTER TABLE usage_records ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON usage_records TO whet_app USING (tenant_id = whet_current_tenant())
  WITH CHECK (tenant_id = whet_current_tenant());
GRANT SELECT ON usage_records TO whet_app;

-- The partition of the jobs created in the month starting at p_month, made when missing (false: it was
-- there); that month's rows in the DEFAULT partition move into it (as whet_events_partition).
CREATE FUNCTION whet_usage_partition(p_month bigint) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  v_next bigint := extract(epoch FROM to_timestamp(p_month) AT TIME ZONE 'UTC' + interval '1 month')::bigint;
  v_name text := 'usage_records_' || to_char(to_timestamp(p_month) AT TIME ZONE 'UTC', 'YYYYMM');
BEGIN
  IF to_regclass(v_name) IS NOT NULL THEN
    RETURN false;
  END IF;
  IF EXISTS (SELECT 1 FROM usage_records_default WHERE job_created_at >= p_month AND job_created_at < v_next) THEN
    CREATE TEMP TABLE whet_moved_usage ON COMMIT DROP AS
      WITH d AS (DELETE FROM usage_records_default WHERE job_created_at >= p_month AND job_created_at < v_next
                 RETURNING *)
      SELECT * FROM d;
    EXECUTE format('CREATE TABLE %I PARTITION OF usage_records FOR VALUES FROM (%s) TO (%s)', v_name, p_month, v_next);
    INSERT INTO usage_records (seq, tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens,
                               rollout_tokens, storage_byte_hours, lost, created_at, job_created_at)
      SELECT seq, tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens, rollout_tokens,
             storage_byte_hours, lost, created_at, job_created_at
      FROM whet_moved_usage;
    DROP TABLE whet_moved_usage;
  ELSE
    EXECUTE format('CREATE TABLE %I PARTITION OF usage_records FOR VALUES FROM (%s) TO (%s)', v_name, p_month, v_next);
  END IF;
  RETURN true;
END $$;

-- The existing rows, each into the partition of its job's month. The throughput triggers come after: the
-- aggregate (0011) already counts these rows.
SELECT whet_usage_partition(m) FROM (
  SELECT DISTINCT whet_month_of(j.created_at) AS m FROM usage_records_unpartitioned u JOIN jobs j ON j.id = u.job_id
  UNION SELECT whet_month_start() UNION SELECT whet_month_of(whet_month_start() + 32 * 86400)) months;
INSERT INTO usage_records (seq, tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens,
                           rollout_tokens, storage_byte_hours, lost, created_at, job_created_at)
  SELECT u.seq, u.tenant_id, u.job_id, u.attempt, u.report_seq, u.device_type, u.device_seconds, u.trained_tokens,
         u.rollout_tokens, u.storage_byte_hours, u.lost, u.created_at, j.created_at
  FROM usage_records_unpartitioned u JOIN jobs j ON j.id = u.job_id;
DROP TABLE usage_records_unpartitioned;
ANALYZE usage_records;

CREATE TRIGGER usage_records_throughput_insert AFTER INSERT ON usage_records REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION whet_throughput_usage();
CREATE TRIGGER usage_records_throughput_update AFTER UPDATE ON usage_records
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION whet_throughput_usage();
CREATE TRIGGER usage_records_throughput_delete AFTER DELETE ON usage_records REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION whet_throughput_usage();

-- 0044's maintenance, now of both tables, with a retention of its own for usage (p_usage_retention_days;
-- 0, the default, keeps it for ever: it is what tenants were billed for). Events as in 0044. Usage: this
-- and next month's partitions exist, rows in the DEFAULT partition move to their months', and with a
-- retention every month that ended more than that many days ago is dropped whole unless one of its rows was
-- recorded (created_at) within the retention: a job's late metering (one running for longer than the
-- retention, or resumed) keeps its month, which is looked at again on the next pass. Partitions are
-- named <table>_YYYYMM; the DEFAULT ones are never dropped.
DROP FUNCTION whet_partitions_maintain(integer);
-- The partitions of p_parent whose range ends at or before p_before, by name (the DEFAULT partition's
-- bound has no TO: never among them).
CREATE FUNCTION whet_partitions_ended(p_parent regclass, p_before bigint) RETURNS SETOF text LANGUAGE sql STABLE AS $$
  SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
  WHERE i.inhparent = p_parent
    AND (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''?(-?[0-9]+)''?\)'))[1]::bigint <= p_before
  ORDER BY 1
$$;
CREATE FUNCTION whet_partitions_maintain(p_retention_days integer, p_usage_retention_days integer DEFAULT 0)
  RETURNS TABLE (action text, partition_name text) LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
DECLARE
  v_month bigint;
  v_part text;
  v_cutoff bigint;
  v_recent boolean;
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtext('whet_partitions_maintain'), 0) THEN
    RETURN;
  END IF;
  FOR v_month IN
    SELECT whet_month_start() UNION SELECT whet_month_of(whet_month_start() + 32 * 86400)
    UNION SELECT DISTINCT whet_month_of(created_at) FROM job_events_default ORDER BY 1
  LOOP
    IF whet_events_partition(v_month) THEN
      action := 'created';
      partition_name := 'job_events_' || to_char(to_timestamp(v_month) AT TIME ZONE 'UTC', 'YYYYMM');
      RETURN NEXT;
    END IF;
  END LOOP;
  FOR v_month IN
    SELECT whet_month_start() UNION SELECT whet_month_of(whet_month_start() + 32 * 86400)
    UNION SELECT DISTINCT whet_month_of(job_created_at) FROM usage_records_default ORDER BY 1
  LOOP
    IF whet_usage_partition(v_month) THEN
      action := 'created';
      partition_name := 'usage_records_' || to_char(to_timestamp(v_month) AT TIME ZONE 'UTC', 'YYYYMM');
      RETURN NEXT;
    END IF;
  END LOOP;
  IF p_retention_days > 0 THEN
    FOR v_part IN SELECT whet_partitions_ended('job_events', whet_now() - p_retention_days::bigint * 86400) LOOP
      EXECUTE format('DROP TABLE %I', v_part);
      action := 'dropped';
      partition_name := v_part;
      RETURN NEXT;
    END LOOP;
  END IF;
  IF p_usage_retention_days > 0 THEN
    v_cutoff := whet_now() - p_usage_retention_days::bigint * 86400;
    FOR v_part IN SELECT whet_partitions_ended('usage_records', v_cutoff) LOOP
      EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE created_at >= $1)', v_part) INTO v_recent USING v_cutoff;
      IF NOT v_recent THEN
        EXECUTE format('DROP TABLE %I', v_part);
        action := 'dropped';
        partition_name := v_part;
        RETURN NEXT;
      END IF;
    END LOOP;
  END IF;
END $$;

-- The writers in SQL, as 0029 left them but for the job's created_at on their rows and in their conflict
-- targets: a node declared lost meters its attempts' seconds, once.
CREATE OR REPLACE FUNCTION whet_requeue_node_attempts(p_node text, p_message text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
  g record;
BEGIN
  RETURN QUERY
  WITH ended AS (
    UPDATE job_attempts a SET ended_at = extract(epoch FROM clock_timestamp()), outcome = 'lost'
    WHERE a.node_id = p_node AND a.ended_at IS NULL AND a.world_size = 1
    RETURNING a.job_id, a.attempt, a.tenant_id, a.device_type, a.ended_at - a.started_at AS seconds),
  dropped AS (DELETE FROM node_commands c WHERE c.node_id = p_node AND c.delivered_at IS NULL),
  metered AS (
    INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, lost, job_created_at)
    SELECT e.tenant_id, e.job_id, e.attempt, 0, e.device_type, e.seconds, true, j.created_at
    FROM ended e JOIN jobs j ON j.id = e.job_id
    ON CONFLICT (job_id, attempt, report_seq, job_created_at) DO NOTHING),
  requeued AS (
    UPDATE jobs j SET node_id = NULL, preempt_requested = false,
      status = CASE j.desired WHEN 'cancel' THEN 'cancelled' WHEN 'pause' THEN 'paused' ELSE 'queued' END
    FROM ended WHERE j.id = ended.job_id AND j.status IN ('running', 'queued')
    RETURNING j.id, j.tenant_id),
  evented AS (
    INSERT INTO job_events (id, tenant_id, job_id, level, message, data)
    SELECT 'ftevent-' || md5(random()::text || r.id), r.tenant_id, r.id, 'warn', p_message,
           jsonb_build_object('node', p_node, 'last_step', coalesce(p.last_step, 0))
    FROM requeued r LEFT JOIN job_progress p ON p.job_id = r.id RETURNING job_id)
  SELECT job_id FROM evented;

  FOR g IN
    WITH lost AS (
      UPDATE gang_ranks r SET ended_at = extract(epoch FROM clock_timestamp()), outcome = 'lost'
      WHERE r.node_id = p_node AND r.ended_at IS NULL
      RETURNING r.job_id, r.attempt, r.rank, r.started_at, r.ended_at),
    metered AS (
      INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, lost,
                                 job_created_at)
      SELECT a.tenant_id, l.job_id, l.attempt, l.rank, a.device_type, l.ended_at - l.started_at, true, j.created_at
      FROM lost l JOIN job_attempts a ON a.job_id = l.job_id AND a.attempt = l.attempt JOIN jobs j ON j.id = l.job_id
      WHERE l.started_at IS NOT NULL
      ON CONFLICT (job_id, attempt, report_seq, job_created_at) DO NOTHING)
    SELECT job_id, attempt, min(rank) AS rank FROM lost GROUP BY job_id, attempt ORDER BY job_id
  LOOP
    IF whet_gang_fail(g.job_id, g.attempt, p_node, g.rank, p_message, 'lost') THEN
      RETURN NEXT g.job_id;
    END IF;
  END LOOP;
END
$$;
