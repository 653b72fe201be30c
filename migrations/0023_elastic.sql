-- 0023_elastic: elastic jobs (whet.min_gpus < whet.max_gpus) resized by checkpoint, stop and restart
-- (issue 14). When placement grows a running elastic job into idle devices, or shrinks it to make room
-- for a job of higher priority, the scheduler stops its attempt (it checkpoints) and records the size
-- it restarts at here; placement then sizes the queued job with it instead of with sizing's choice
-- (scheduler/service/cycle.c). NULL: never resized.
ALTER TABLE jobs ADD COLUMN resize_to int CHECK (resize_to > 0);
