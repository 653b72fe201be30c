-- 0018_gangs: a job whose gang spans nodes runs as ONE attempt of N ranks, one trainer process per
-- device (the trainer config's `distributed` object). The attempt's row keeps rank 0's node and
-- devices (node_id, gpu_mask); gang_ranks says which node runs which rank. The attempt number is the
-- gang's generation: every restart of the gang is a new attempt, and a trainer of another generation
-- is refused by its peers.
--
-- Start: rank 0 gets its START at placement; it publishes its rendezvous address (PublishRendezvous),
-- and only then do the other ranks get theirs, with the address. Rank 0 that has not published by
-- rendezvous_deadline fails the attempt. End: each rank reports its own FinishJob (metered apart:
-- usage_records' report_seq is the rank, so an attempt's device-seconds are ranks x seconds); rank 0's
-- success, stop or cancel ends the attempt and decides the job; a rank that fails, or a node that
-- loses its lease, ends the attempt at once (whet_gang_fail): the other ranks get CANCEL and the job
-- resumes from its last complete checkpoint, possibly on other nodes, with an event naming the rank
-- and the node; after 3 failed attempts of a gang the job fails.

ALTER TABLE nodes ADD COLUMN address text NOT NULL DEFAULT '127.0.0.1';

ALTER TABLE job_attempts ADD COLUMN world_size integer NOT NULL DEFAULT 1 CHECK (world_size >= 1),
  ADD COLUMN rendezvous text,                       -- rank 0's HOST:PORT once published
  ADD COLUMN rendezvous_deadline double precision;  -- a gang whose rank 0 has not published by then fails

CREATE TABLE gang_ranks (
  job_id          text NOT NULL,
  attempt         integer NOT NULL,
  rank            integer NOT NULL CHECK (rank >= 0),
  node_id         text NOT NULL REFERENCES nodes(id),
  gpu_mask        integer NOT NULL,                 -- the one device of the node it runs on
  manifest        jsonb NOT NULL,                   -- its START (ranks > 0: rendezvous filled in when sent)
  started_at      double precision,                 -- its START was queued for the node
  ended_at        double precision,
  outcome         text CHECK (outcome IN ('succeeded', 'failed', 'stopped', 'cancelled', 'lost')),
  PRIMARY KEY (job_id, attempt, rank),
  FOREIGN KEY (job_id, attempt) REFERENCES job_attempts(job_id, attempt) ON DELETE CASCADE
);
CREATE INDEX gang_ranks_running ON gang_ranks(node_id) WHERE ended_at IS NULL;

-- Ends a running gang attempt because rank p_rank on node p_node failed (p_outcome 'failed') or its
-- node was lost ('lost'): ranks never started end with it, the nodes of the ranks still running get
-- CANCEL, and the job goes back to the queue (paused or cancelled when the tenant asked; failed after
-- the gang's third failure) with an event naming the rank and node. Returns true when it requeued the
-- job, false when the attempt had already ended or the job did not go back to the queue.
CREATE FUNCTION whet_gang_fail(p_job text, p_attempt integer, p_node text, p_rank integer, p_message text,
                               p_outcome text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  v_world integer;
  v_failures integer;
  v_status text;
BEGIN
  UPDATE job_attempts SET ended_at = extract(epoch FROM clock_timestamp()), outcome = p_outcome
    WHERE job_id = p_job AND attempt = p_attempt AND ended_at IS NULL RETURNING world_size INTO v_world;
  IF NOT FOUND THEN RETURN false; END IF;
  UPDATE gang_ranks SET ended_at = extract(epoch FROM clock_timestamp()), outcome = 'cancelled'
    WHERE job_id = p_job AND attempt = p_attempt AND started_at IS NULL AND ended_at IS NULL;
  INSERT INTO node_commands (node_id, job_id, attempt, kind, grace_ms, reason)
    SELECT DISTINCT node_id, p_job, p_attempt, 'cancel', 30000, 'gang_failed' FROM gang_ranks
    WHERE job_id = p_job AND attempt = p_attempt AND ended_at IS NULL;
  SELECT count(*) INTO v_failures FROM job_attempts WHERE job_id = p_job AND world_size > 1 AND outcome = 'failed';
  UPDATE jobs j SET node_id = NULL, preempt_requested = false, estimated_finish = NULL,
      status = CASE j.desired WHEN 'cancel' THEN 'cancelled' WHEN 'pause' THEN 'paused'
               ELSE CASE WHEN v_failures >= 3 THEN 'failed' ELSE 'queued' END END,
      finished_at = CASE WHEN j.desired = 'cancel' OR (j.desired = 'run' AND v_failures >= 3) THEN whet_now() END,
      error = CASE WHEN j.desired = 'run' AND v_failures >= 3 THEN jsonb_build_object('code', 'gang_failed',
               'message', 'rank ' || p_rank || ' on node ' || p_node || ': ' || p_message, 'param', NULL) END
    WHERE j.id = p_job AND j.status IN ('running', 'queued') RETURNING j.status INTO v_status;
  INSERT INTO job_events (id, tenant_id, job_id, level, message, data)
    SELECT 'ftevent-' || md5(random()::text || p_job || p_rank), j.tenant_id, j.id,
      CASE WHEN v_status = 'failed' THEN 'error' ELSE 'warn' END,
      'Rank ' || p_rank || ' of ' || v_world || ' on node ' || p_node || ' failed: ' || p_message ||
      CASE WHEN p_outcome = 'lost' THEN '' /* the node's message says what follows */
        WHEN v_status = 'queued' THEN '; the gang stopped and the job resumes from its last checkpoint'
        WHEN v_status = 'failed' THEN '; the gang failed ' || v_failures || ' times, so the job fails' ELSE '' END,
      jsonb_build_object('rank', p_rank, 'node', p_node, 'attempt', p_attempt, 'world_size', v_world,
                         'last_step', j.last_step)
    FROM jobs j WHERE j.id = p_job;
  RETURN coalesce(v_status = 'queued', false);
END
$$;

-- 0002's requeue of a gone node, for gangs too: a single-process attempt on the node ends as before;
-- a gang with a rank there loses those ranks (metered per rank, flagged lost) and fails as a whole
-- (whet_gang_fail), wherever its rank 0 runs.
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
    INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, lost)
    SELECT tenant_id, job_id, attempt, 0, device_type, seconds, true FROM ended
    ON CONFLICT (job_id, attempt, report_seq) DO NOTHING),
  requeued AS (
    UPDATE jobs j SET node_id = NULL, preempt_requested = false,
      status = CASE j.desired WHEN 'cancel' THEN 'cancelled' WHEN 'pause' THEN 'paused' ELSE 'queued' END
    FROM ended WHERE j.id = ended.job_id AND j.status IN ('running', 'queued')
    RETURNING j.id, j.tenant_id, j.last_step),
  evented AS (
    INSERT INTO job_events (id, tenant_id, job_id, level, message, data)
    SELECT 'ftevent-' || md5(random()::text || id), tenant_id, id, 'warn', p_message,
           jsonb_build_object('node', p_node, 'last_step', last_step)
    FROM requeued RETURNING job_id)
  SELECT job_id FROM evented;

  FOR g IN
    WITH lost AS (
      UPDATE gang_ranks r SET ended_at = extract(epoch FROM clock_timestamp()), outcome = 'lost'
      WHERE r.node_id = p_node AND r.ended_at IS NULL
      RETURNING r.job_id, r.attempt, r.rank, r.started_at, r.ended_at),
    metered AS (
      INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, lost)
      SELECT a.tenant_id, l.job_id, l.attempt, l.rank, a.device_type, l.ended_at - l.started_at, true
      FROM lost l JOIN job_attempts a ON a.job_id = l.job_id AND a.attempt = l.attempt
      WHERE l.started_at IS NOT NULL
      ON CONFLICT (job_id, attempt, report_seq) DO NOTHING)
    SELECT job_id, attempt, min(rank) AS rank FROM lost GROUP BY job_id, attempt ORDER BY job_id
  LOOP
    IF whet_gang_fail(g.job_id, g.attempt, p_node, g.rank, p_message, 'lost') THEN
      RETURN NEXT g.job_id;
    END IF;
  END LOOP;
END
$$;
