-- 0027_cotrain_groups: co-training groups placed by the scheduler (issue 16). LoRA jobs of one base model
-- that placement packs onto one device share one `whet train --cotrain` process there
-- (scheduler/placement/cotrain.c); each member's attempt names its group, so the scheduler knows, when it
-- reloads the running attempts, which of them share a device (one holds it, the others ride along), and
-- the executor groups the members by it (the START manifest's "cotrain"). NULL: a trainer of its own.
ALTER TABLE job_attempts ADD COLUMN cotrain_group text;
