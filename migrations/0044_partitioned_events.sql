-- 0044_partitioned_events: a job's events (its messages, and its metric series: events of type
-- 'metrics', migration 0005) live in monthly partitions by created_at, so that the scheduler's leader
-- can drop a whole month past the operator's retention (whet_partitions_maintain) instead of deleting
-- rows one by one, and so that the pages of a job read a few small indexes however long the history.
-- Monthly, not weekly: with retention off (the default) partitions accumulate, and every read by event
-- id alone probes each one; a month also matches how long a job and its reports live.
--
-- Keys: a partitioned table's unique indexes must hold created_at. The primary key becomes
-- (id, created_at): an id is unique in its partition and random across them, and its index serves the
-- events page's cursor (found by id alone: one probe per partition). seq stays unique through its
-- sequence alone; no query looks it up but a job's pages, through (job_id, seq). The executors'
-- idempotency, (job_id, attempt, report_seq), can no longer be a unique index (a retry recorded in a
-- later month than the first try would be a new row): whet_report_event dedups under an advisory lock
-- instead, through the same index made plain.
--
-- A DEFAULT partition takes what no month does (maintenance that lagged for over a month, a clock far
-- off), so an insert never fails; whet_partitions_maintain moves such rows into their months' own
-- partitions, so that they too can be dropped and a new month's partition never meets rows of its range.

-- The first second (UTC) of the month holding p_t.
CREATE FUNCTION whet_month_of(p_t bigint) RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
  $$ SELECT extract(epoch FROM date_trunc('month', to_timestamp(p_t) AT TIME ZONE 'UTC'))::bigint $$;

-- The new table takes the old one's columns, defaults (seq's sequence among them), generated column and
-- checks; the old one is read once more, whole, then dropped: its keys and indexes go now, leaving their
-- names to the new table's.
ALTER TABLE job_events RENAME TO job_events_unpartitioned;
ALTER TABLE job_events_unpartitioned DROP CONSTRAINT job_events_pkey, DROP CONSTRAINT job_events_seq_key,
  DROP CONSTRAINT job_events_tenant_id_fkey, DROP CONSTRAINT job_events_job_id_fkey;
DROP INDEX job_events_job, job_events_report, job_events_metric_step;
ALTER SEQUENCE job_events_seq_seq OWNED BY NONE;

CREATE TABLE job_events (
  LIKE job_events_unpartitioned INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS,
  PRIMARY KEY (id, created_at),
  FOREIGN KEY (tenant_id) REFERENCES tenants(id) ON DELETE CASCADE,
  FOREIGN KEY (job_id) REFERENCES jobs(id) ON DELETE CASCADE
) PARTITION BY RANGE (created_at);
ALTER SEQUENCE job_events_seq_seq OWNED BY job_events.seq;
CREATE TABLE job_events_default PARTITION OF job_events DEFAULT;
CREATE INDEX job_events_job ON job_events (job_id, seq);
CREATE INDEX job_events_report ON job_events (job_id, attempt, report_seq) WHERE report_seq IS NOT NULL;
-- seq DESC: a step run again after a lost attempt appears twice; the latest report wins.
CREATE INDEX job_events_metric_step ON job_events (job_id, metric_step, seq DESC) WHERE metric_step IS NOT NULL;

-- The partitions' tenants are the parent's: whet_app is granted only the parent, whose policy applies
-- to every row it reads through it.
ALTER TABLE job_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON job_events TO whet_app USING (tenant_id = whet_current_tenant())
  WITH CHECK (tenant_id = whet_current_tenant());
GRANT SELECT, INSERT, UPDATE, DELETE ON job_events TO whet_app;

-- The partition of the month starting at p_month, made when missing (false: it was there). Rows of that
-- month in the DEFAULT partition move into it: PostgreSQL refuses a partition whose rows the DEFAULT
-- one holds.
CREATE FUNCTION whet_events_partition(p_month bigint) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  v_next bigint := extract(epoch FROM to_timestamp(p_month) AT TIME ZONE 'UTC' + interval '1 month')::bigint;
  v_name text := 'job_events_' || to_char(to_timestamp(p_month) AT TIME ZONE 'UTC', 'YYYYMM');
BEGIN
  IF to_regclass(v_name) IS NOT NULL THEN
    RETURN false;
  END IF;
  IF EXISTS (SELECT 1 FROM job_events_default WHERE created_at >= p_month AND created_at < v_next) THEN
    CREATE TEMP TABLE whet_moved_events ON COMMIT DROP AS
      WITH d AS (DELETE FROM job_events_default WHERE created_at >= p_month AND created_at < v_next RETURNING *)
      SELECT * FROM d;
    EXECUTE format('CREATE TABLE %I PARTITION OF job_events FOR VALUES FROM (%s) TO (%s)', v_name, p_month, v_next);
    INSERT INTO job_events (seq, id, tenant_id, job_id, level, type, message, data, created_at, attempt, report_seq)
      SELECT seq, id, tenant_id, job_id, level, type, message, data, created_at, attempt, report_seq
      FROM whet_moved_events;
    DROP TABLE whet_moved_events;
  ELSE
    EXECUTE format('CREATE TABLE %I PARTITION OF job_events FOR VALUES FROM (%s) TO (%s)', v_name, p_month, v_next);
  END IF;
  RETURN true;
END $$;

-- The existing rows, each month's into its own partition.
SELECT whet_events_partition(m) FROM (
  SELECT DISTINCT whet_month_of(created_at) AS m FROM job_events_unpartitioned
  UNION SELECT whet_month_start() UNION SELECT whet_month_of(whet_month_start() + 32 * 86400)) months;
INSERT INTO job_events (seq, id, tenant_id, job_id, level, type, message, data, created_at, attempt, report_seq)
  SELECT seq, id, tenant_id, job_id, level, type, message, data, created_at, attempt, report_seq
  FROM job_events_unpartitioned;
DROP TABLE job_events_unpartitioned;
ANALYZE job_events;

-- What the scheduler's leader runs now and then: this month's and the next month's partitions exist,
-- rows that fell into the DEFAULT partition move to their months', and with p_retention_days > 0 every
-- month that ended more than that many days ago is dropped whole (a month still partly inside the
-- retention is kept: events live between the retention and a month longer). Returns what it did, a row
-- per partition. Another maintainer at work (two schedulers racing for the lead): nothing, at once.
-- DDL on a partition locks job_events itself: a lock not granted within lock_timeout fails the call
-- rather than queueing every reader of job_events behind it; the next call does the work.
CREATE FUNCTION whet_partitions_maintain(p_retention_days integer)
  RETURNS TABLE (action text, partition_name text) LANGUAGE plpgsql SET lock_timeout = '5s' AS $$
DECLARE
  v_month bigint;
  v_part record;
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
  IF p_retention_days > 0 THEN
    FOR v_part IN
      SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = 'job_events'::regclass -- the DEFAULT partition's bound has no TO: never dropped
        AND (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''?(-?[0-9]+)''?\)'))[1]::bigint
            <= whet_now() - p_retention_days::bigint * 86400
      ORDER BY 1
    LOOP
      EXECUTE format('DROP TABLE %I', v_part.relname);
      action := 'dropped';
      partition_name := v_part.relname;
      RETURN NEXT;
    END LOOP;
  END IF;
END $$;

-- An executor's event, recorded once however often its report is retried: (job, attempt, report_seq)
-- is looked up under a lock on the attempt's reports, so that a retry racing its first try waits and
-- then finds it. The lookup reads only the partitions since the attempt started (an event is reported
-- after its attempt was placed, both stamped by this server's clock); an attempt unknown here reads all.
CREATE FUNCTION whet_report_event(p_id text, p_job text, p_level text, p_type text, p_message text, p_data jsonb,
                                  p_attempt integer, p_report_seq integer) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_since bigint := coalesce((SELECT floor(started_at)::bigint FROM job_attempts
                              WHERE job_id = p_job AND attempt = p_attempt), 0);
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('whet_report_event'), hashtext(p_job || ':' || p_attempt));
  INSERT INTO job_events (id, tenant_id, job_id, level, type, message, data, attempt, report_seq)
    SELECT p_id, j.tenant_id, j.id, p_level, p_type, p_message, p_data, p_attempt, p_report_seq FROM jobs j
    WHERE j.id = p_job AND NOT EXISTS (SELECT 1 FROM job_events e WHERE e.job_id = p_job AND e.attempt = p_attempt
                                         AND e.report_seq = p_report_seq AND e.created_at >= v_since);
END $$;
