-- 0046_attempt_fencing: which attempt of a job wrote each checkpoint (issue 15, data centers on a WAN).
--
-- A node cut off from the scheduler loses its lease and its attempts move elsewhere, while its trainers
-- may run on. When the partition heals, the scheduler refuses every report of such a stale attempt
-- (scheduler/service/handlers.c), and each attempt writes under its own object prefix
-- (`jobs/<job>/attempt-<N>/`, scheduler/service/manifest.c). The attempt recorded here is what FinishJob
-- asks when an attempt declared lost reports its success late: the success is taken only while no newer
-- attempt has recorded a checkpoint, so a job's checkpoints and its final model never mix two attempts.
-- Rows written before this migration have none (NULL): their attempt is not known.
ALTER TABLE checkpoints ADD COLUMN attempt integer;
