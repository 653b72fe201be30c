-- 0015_serving: deleting a fine-tuned model (DELETE /v1/models/{model}).
--
-- A deleted model is no longer listed nor served, and neither are its checkpoints' models
-- (ft:…:ckpt-step-N); its job stays, with its checkpoints and their files (a job's history: they are
-- listed and downloadable as before, and their storage is metered as before). No process deletes the
-- objects yet: an operator who wants the space back removes the job's prefix from the object store
-- (jobs/<job id>/) once the tenant no longer needs its files.
ALTER TABLE jobs ADD COLUMN model_deleted_at bigint;
