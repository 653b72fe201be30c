-- whet_partitions_maintain waits at most 100 ms for a lock, not 5 s. Making or dropping a partition locks
-- job_events (or usage_records) exclusively; while the call waits for statements already reading the table,
-- every statement that comes after queues behind it: an executor's events, a tenant's events page, the
-- usage export. A tenth of a second of that is invisible; five seconds stalled them all. The call fails
-- instead, and the scheduler's maintenance thread tries again 10 s later (scheduler/service/partitions.c):
-- a month's partition is made a month before it is needed, so a busy table defers the work, nothing else.
ALTER FUNCTION whet_partitions_maintain(integer, integer) SET lock_timeout = '100ms';
