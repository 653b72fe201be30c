-- 0031_session_sweep: what the gateway learns of model workers and ended training sessions
-- (gateway/training_sessions.c, gateway/session_sweep.c).
--
-- unreachable_at: when a gateway found a ready worker refusing connections (it listens from when it is
-- ready until it ends, so it is gone; its executor reports that a moment later and the row goes). The
-- gateway's lookups pass such a worker over from then on: a session pinned to it moves at its next call,
-- and completions go to another replica.
ALTER TABLE model_workers ADD COLUMN unreachable_at double precision;
GRANT UPDATE (unreachable_at) ON model_workers TO whet_app;

-- state_swept_at: when a gateway's sweep removed the state an ended session (deleted, or expired after
-- WHET_SESSION_IDLE_S) kept in the object store (sessions/ID/state/; its saves are models and stay), so
-- that it is swept once. NULL: live, or not swept yet.
ALTER TABLE training_sessions ADD COLUMN state_swept_at bigint;
CREATE INDEX training_sessions_unswept ON training_sessions (last_call_at) WHERE state_swept_at IS NULL;
