-- A reported checkpoint queues its job for the retention pass only when the settings keep the last N
-- (checkpoint_retention_settings.keep > 0). With keep 0, the default, the keep-last rule deletes nothing, so
-- the pass only re-read each such job to find nothing to do: under job churn (tests/bench/scale, ~200
-- checkpoints and finishes a second on 1k simulated nodes) it ran without pause, and every checkpoint report
-- waited on the queue rows it held. A deleted model's checkpoints are queued by its own trigger as before,
-- and a job continuing from a checkpoint queues that checkpoint's job when it ends, as before. Settings
-- changed to keep N queue every job with checkpoints at the next pass (whet_checkpoint_retention), so a job
-- whose checkpoints were reported under keep 0 is looked at then. With no settings row yet, jobs are queued.
CREATE OR REPLACE FUNCTION whet_checkpoint_retention_changed() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
BEGIN
  IF TG_TABLE_NAME = 'checkpoints' THEN
    IF coalesce((SELECT s.keep FROM checkpoint_retention_settings s), 1) > 0 THEN
      PERFORM whet_checkpoint_retention_enqueue(NEW.job_id);
    END IF;
  ELSIF NEW.model_deleted_at IS NOT NULL AND OLD.model_deleted_at IS NULL THEN
    PERFORM whet_checkpoint_retention_enqueue(NEW.id);
  ELSE -- a job continuing from a checkpoint ended: that checkpoint is free to go
    PERFORM whet_checkpoint_retention_enqueue(c.job_id) FROM checkpoints c WHERE c.id = NEW.init_checkpoint;
  END IF;
  RETURN NULL;
END
$$;
