-- 0050_attempt_gc: the files of ended attempts that nothing references leave the object store (issue 15).
--
-- Since 0046 each attempt writes under `jobs/<job>/attempt-<N>/`. An attempt declared lost whose trainer ran
-- on uploads checkpoints whose reports are refused, and a late final model that is refused (a newer attempt
-- had checkpointed) stays with its results.csv; an attempt stopped before its first checkpoint leaves partial
-- uploads. None of it is listed, served, metered or resumed from. The leader's maintenance thread
-- (scheduler/service/attempt_gc.c) removes what lies under such a prefix once the attempt ended and a grace
-- period has passed (`whet scheduler --attempt-gc-grace S`: uploads under way when it ended land before
-- that), all but what is referenced:
--   * a checkpoint row of the job (a job continuing from one names that row in jobs.init_checkpoint, and the
--     retention of 0040 keeps it while that job runs),
--   * the job's final model (jobs.final_object_prefix, which a job continuing from the fine-tuned model
--     loads), and the job's result files (jobs.result_files: results.csv).
-- An attempt with none of these goes whole. An attempt that has not ended is never looked at, and neither is
-- one declared lost while its job lives on and no newer attempt has recorded a checkpoint: its late success
-- may still be taken (FinishJob, scheduler/service/handlers.c), and then its final model is the job's. The
-- pass reads the job's row FOR SHARE, so a late success (which takes it FOR UPDATE) is ordered with the
-- decision: once a newer checkpoint exists or the job ended, that success is refused; and an ended attempt
-- records no checkpoint, so what is referenced cannot grow after the decision.
--
-- What to look at is queued, not searched for: a trigger queues an attempt when it ends, every attempt of a
-- job when the job ends (a fenced trainer may have uploaded after its attempt was looked at), and the lost
-- attempts of a job when a newer attempt records its first checkpoint; so a pass costs O(what changed). A
-- decided prefix moves to attempt_gc_removals with what it keeps, a table only the pass writes: removing
-- objects (S3 round trips) holds no lock anyone else waits on.

CREATE TABLE attempt_gc_queue (
  job_id    text NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  attempt   integer NOT NULL,
  queued_at bigint NOT NULL DEFAULT whet_now(),   -- looked at once the grace period has passed since
  PRIMARY KEY (job_id, attempt)
);
CREATE INDEX attempt_gc_queue_due ON attempt_gc_queue(queued_at);

CREATE TABLE attempt_gc_removals (
  object_prefix text PRIMARY KEY,                 -- jobs/<job_id>/attempt-<attempt>
  job_id        text NOT NULL,
  attempt       integer NOT NULL,
  keep          text[] NOT NULL DEFAULT '{}',   -- referenced keys under it, each a key or a folder of keys
  decided_at    bigint NOT NULL DEFAULT whet_now()
);

-- Queues attempts of a job; a queued one waits out the grace period again from now.
CREATE FUNCTION whet_attempt_gc_enqueue(p_job text, p_attempts integer[]) RETURNS void LANGUAGE sql
  SECURITY DEFINER SET search_path = public AS $$
  INSERT INTO attempt_gc_queue (job_id, attempt) SELECT p_job, a FROM unnest(p_attempts) a
  ON CONFLICT (job_id, attempt) DO UPDATE SET queued_at = greatest(attempt_gc_queue.queued_at, EXCLUDED.queued_at)
$$;

CREATE FUNCTION whet_attempt_gc_changed() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  IF TG_TABLE_NAME = 'job_attempts' THEN
    PERFORM whet_attempt_gc_enqueue(NEW.job_id, ARRAY[NEW.attempt]);
  ELSIF TG_TABLE_NAME = 'jobs' THEN
    PERFORM whet_attempt_gc_enqueue(NEW.id, ARRAY(SELECT a.attempt FROM job_attempts a WHERE a.job_id = NEW.id));
  ELSIF NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.job_id = NEW.job_id AND c.attempt = NEW.attempt
                    AND c.id <> NEW.id) THEN
    -- a newer attempt's first checkpoint: the lost attempts before it can no longer succeed late
    PERFORM whet_attempt_gc_enqueue(NEW.job_id, ARRAY(SELECT a.attempt FROM job_attempts a
      WHERE a.job_id = NEW.job_id AND a.attempt < NEW.attempt AND a.outcome = 'lost'));
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER job_attempts_gc_ended AFTER UPDATE OF ended_at ON job_attempts FOR EACH ROW
  WHEN (OLD.ended_at IS NULL AND NEW.ended_at IS NOT NULL) EXECUTE FUNCTION whet_attempt_gc_changed();
CREATE TRIGGER jobs_gc_ended AFTER UPDATE OF status ON jobs FOR EACH ROW
  WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled') AND OLD.status NOT IN ('succeeded', 'failed', 'cancelled'))
  EXECUTE FUNCTION whet_attempt_gc_changed();
CREATE TRIGGER checkpoints_gc_newer_attempt AFTER INSERT ON checkpoints FOR EACH ROW
  WHEN (NEW.attempt > 1) EXECUTE FUNCTION whet_attempt_gc_changed();

-- Attempts that ended before this migration, of jobs that run on or ended less than a day ago (older ones
-- were looked at by an operator, if at all; a prefix of the layout before 0046 is never touched).
INSERT INTO attempt_gc_queue (job_id, attempt, queued_at)
SELECT a.job_id, a.attempt, whet_now() FROM job_attempts a JOIN jobs j ON j.id = a.job_id
WHERE a.ended_at IS NOT NULL AND a.ended_at > extract(epoch FROM clock_timestamp()) - 86400
ON CONFLICT DO NOTHING;

-- One pass over at most p_batch queued attempts whose grace period (p_grace_s) has passed: each leaves the
-- queue, and the prefix of one that may be cleaned moves to attempt_gc_removals with what under it is
-- referenced. Returns how many were looked at and how many prefixes are to be cleaned. Queued attempts
-- another pass holds, and those of a job whose row is locked (a report being applied), are skipped until the
-- next pass.
CREATE FUNCTION whet_attempt_gc(p_grace_s bigint, p_batch integer, OUT looked_at integer, OUT doomed integer)
  LANGUAGE plpgsql AS $$
DECLARE
  v_prefix text;
  q record;
BEGIN
  looked_at := 0;
  doomed := 0;
  FOR q IN SELECT g.job_id, g.attempt, j.status, j.final_object_prefix, j.result_files, a.outcome,
                  a.attempt IS NOT NULL AND a.ended_at IS NULL AS running
           FROM attempt_gc_queue g JOIN jobs j ON j.id = g.job_id
           LEFT JOIN job_attempts a ON a.job_id = g.job_id AND a.attempt = g.attempt
           WHERE g.queued_at <= whet_now() - p_grace_s ORDER BY g.queued_at LIMIT p_batch
           FOR UPDATE OF g SKIP LOCKED FOR SHARE OF j SKIP LOCKED
  LOOP
    looked_at := looked_at + 1;
    DELETE FROM attempt_gc_queue WHERE job_id = q.job_id AND attempt = q.attempt;
    -- Running: queued again when it ends. Lost while its job lives on, no newer checkpoint: queued again when
    -- one comes or the job ends.
    CONTINUE WHEN q.running;
    CONTINUE WHEN q.status NOT IN ('succeeded', 'failed', 'cancelled') AND q.outcome = 'lost'
      AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.job_id = q.job_id AND c.attempt > q.attempt);
    v_prefix := 'jobs/' || q.job_id || '/attempt-' || q.attempt;
    INSERT INTO attempt_gc_removals (object_prefix, job_id, attempt, keep)
    SELECT v_prefix, q.job_id, q.attempt, coalesce(array_agg(DISTINCT k), '{}') FROM (
      SELECT c.object_prefix FROM checkpoints c WHERE c.job_id = q.job_id
      UNION ALL SELECT q.final_object_prefix
      UNION ALL SELECT f.object_key FROM files f
        WHERE f.id IN (SELECT jsonb_array_elements_text(q.result_files))) r(k)
    WHERE starts_with(k, v_prefix || '/')
    ON CONFLICT (object_prefix) DO UPDATE SET keep = EXCLUDED.keep, decided_at = EXCLUDED.decided_at;
    doomed := doomed + 1;
  END LOOP;
END
$$;
