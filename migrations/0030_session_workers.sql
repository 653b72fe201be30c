-- 0030_session_workers: a training session pinned to the model worker that holds it, and kept alive by its calls
-- (gateway/training_sessions.c, scheduler/service/serving.c).
--
-- The gateway sends every call of a session to the worker recorded here (worker_id: the model_workers row of
-- a worker the scheduler placed, NULL for one of WHET_SERVE_WORKERS; worker_address: HOST:PORT), and when
-- that worker is gone (stopped, lost with its node, killed) re-creates the session on a ready worker of the
-- base from the state the session keeps in the object store and records the new one. last_call_at is when
-- its last call came: a session idle for WHET_SESSION_IDLE_S has expired (its calls are 404s), and while it
-- has not, the scheduler neither idles its worker out nor stops it before the replicas holding none.
ALTER TABLE training_sessions ADD COLUMN worker_id text, ADD COLUMN worker_address text,
  ADD COLUMN last_call_at double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp());
CREATE INDEX training_sessions_worker ON training_sessions (worker_id, last_call_at) WHERE deleted_at IS NULL;
