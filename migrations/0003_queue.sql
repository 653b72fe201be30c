-- 0003_queue: what a tenant sees of a job beyond its status: its place in the queue while it waits
-- and when it should finish while it runs. The scheduler's cycle keeps both current, in the same
-- transaction as wait_reason.

-- 1-based place among the jobs waiting for a device, in the order placement considered them in the
-- last cycle (priority, then fair share between tenants, then arrival: policy "whet"); NULL when the
-- job is not waiting in that queue (running, paused, finished, or too big for any node of the fleet,
-- which wait_reason then says).
ALTER TABLE jobs ADD COLUMN queue_position integer CHECK (queue_position > 0);

-- When a running attempt should end, in Unix seconds, from its rate so far: the seconds since the
-- attempt started over the steps it made (from its resume step), times the steps left. NULL until it
-- has made a step and knows its total.
CREATE FUNCTION whet_estimated_finish(p_step integer, p_total_steps integer, p_resume_step integer,
                                      p_started_at double precision) RETURNS bigint LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN p_step > 0 AND p_total_steps > p_step THEN
    whet_now() + ((whet_now() - p_started_at) / greatest(p_step - p_resume_step, 1) * (p_total_steps - p_step))::bigint
  END
$$;

-- The cycle clears these on jobs that stopped waiting or running, every second: it finds them here
-- rather than by scanning every finished job.
CREATE INDEX jobs_public_state ON jobs(status)
  WHERE queue_position IS NOT NULL OR wait_reason IS NOT NULL OR estimated_finish IS NOT NULL;
