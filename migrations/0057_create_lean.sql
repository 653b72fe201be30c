-- 0057_create_lean: a job create's insert transaction cost ~650 us of PostgreSQL CPU (pgbench, one connection,
-- the gateway's statements), three times a bare INSERT into jobs; two parts of it were overhead paid anew on
-- every statement rather than work.
--
-- job_events.metric_step is generated from whet_metric_step (0005), an SQL function: the executor prepares a
-- stored generated column's expression afresh for every statement that inserts into the table, and planning
-- that expression inlines the function, which parses and analyzes its body each time. ~90 us of every insert
-- into job_events (a create's "created" event, each event and checkpoint the scheduler records), whatever
-- the row's type. In PL/pgSQL the body's plan is kept and nothing is parsed; the function runs only for rows
-- of type 'metrics' (the column's CASE), one per statement. The same expression, so the same values.
CREATE OR REPLACE FUNCTION whet_metric_step(p_data jsonb) RETURNS integer LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN CASE WHEN jsonb_typeof(p_data -> 'step') = 'number' AND (p_data ->> 'step') ~ '^[0-9]{1,9}$'
              THEN (p_data ->> 'step')::integer END;
END
$$;

-- The active-job limit, checked by the insert's own trigger: a create ran whet_job_slot_check (0049) as a
-- statement of its own after the insert, ~80 us (a statement, a SECURITY DEFINER call with its search_path,
-- the counter read again). The trigger that bumps the counter now returns the new count, and when the
-- session is scoped to a tenant (whet.tenant_id: the gateway's tenant connections, which insert jobs only to
-- create them) it fails the insert with WJ429 once a tenant's count passed its max_active_jobs: the job, its
-- event and the bump roll back together, as with 0049's check. Still exact: the counter's row lock, taken by
-- the UPDATE, is held to the commit, and a create that waited on it counts from the committed value. Writers
-- not scoped to a tenant (the scheduler, operators' SQL, restores) are counted as before and never refused.
CREATE OR REPLACE FUNCTION whet_count_active_written() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public AS $$
DECLARE
  v_over text;
BEGIN
  IF TG_OP = 'INSERT' AND whet_current_tenant() IS NOT NULL THEN
    WITH c AS (UPDATE tenant_active_jobs c SET active = c.active + d.n
                 FROM (SELECT tenant_id, count(*) AS n FROM changed_jobs WHERE whet_job_is_active(status)
                       GROUP BY tenant_id) d
                WHERE c.tenant_id = d.tenant_id RETURNING c.tenant_id, c.active)
    SELECT c.tenant_id INTO v_over FROM c JOIN tenants t ON t.id = c.tenant_id WHERE c.active > t.max_active_jobs
    LIMIT 1;
    IF v_over IS NOT NULL THEN
      -- SQLSTATE WJ429 (whet's own class WJ): the gateway answers it 429.
      RAISE EXCEPTION 'tenant % is at its active-job limit', v_over USING ERRCODE = 'WJ429';
    END IF;
    RETURN NULL;
  END IF;
  UPDATE tenant_active_jobs c SET active = c.active + CASE TG_OP WHEN 'INSERT' THEN d.n ELSE -d.n END
    FROM (SELECT tenant_id, count(*) AS n FROM changed_jobs WHERE whet_job_is_active(status) GROUP BY tenant_id) d
    WHERE c.tenant_id = d.tenant_id;
  RETURN NULL;
END
$$;
-- whet_job_slot_check stays for gateways of before this migration while an upgrade replaces them (their
-- creates then check twice, to the same answer).
