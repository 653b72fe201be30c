-- 0035_key_spend_month: whet_key_spend (0024) summed, for EVERY job the API key ever created, that job's
-- cost lines of the month (whet_cost_lines called once per job) and its running cost: O(the key's jobs
-- ever), ~3.3 s a call in psql for a key with 2,000 jobs, while the budget guard calls it on the
-- heartbeats of a limited key's running jobs and every create with such a key calls it too. Now the
-- tenant's job cost lines of the month are made once and summed over the key's jobs (a key's jobs are
-- its tenant's), and the running cost is taken only of the key's jobs with an unended attempt: O(the
-- tenant's month), ~65 ms for the same key. PL/pgSQL with a generic plan and no JIT, as 0033.
--
-- The storage lines, one per checkpoint and day, are most of a month's lines at its end (30 a checkpoint:
-- 0.39 s in psql for 2,000 checkpoints over 29 days). Every whole day of a checkpoint under one price
-- version has the same line (the same bytes, 86,400 s, one price), so whet_storage_cost sums each
-- checkpoint's lines as its first day, its last day and its whole days between counted by price version:
-- O(checkpoints x versions), 47 ms for the same, the same sum as the lines' (each line rounded as
-- whet_job_cost_lines rounds it; api_budgets compares them over windows and price versions that split
-- days). The spends take the other lines as before: the storage lines' branch of whet_job_cost_lines is
-- pruned by the filter on its SKU, never run.
-- The current month's first second (UTC): where a month's spend starts.
CREATE FUNCTION whet_month_start() RETURNS bigint LANGUAGE sql STABLE AS
  $$ SELECT extract(epoch FROM date_trunc('month', now() AT TIME ZONE 'UTC'))::bigint $$;

CREATE FUNCTION whet_storage_cost(p_tenant text, p_start bigint, p_end bigint)
  RETURNS TABLE (job_id text, amount numeric) LANGUAGE sql STABLE AS $$
  WITH books AS (
    SELECT b.version, b.effective_from AS lo,
           coalesce(lead(b.effective_from) OVER (ORDER BY b.effective_from), 9223372036854775807) AS hi
    FROM price_books b),
  c AS MATERIALIZED (
    SELECT c.job_id, c.bytes,
           coalesce((SELECT min(r.device_type) FROM usage_records r WHERE r.job_id = c.job_id), '') AS device_type,
           greatest(c.created_at, p_start) AS lo, least(p_end, whet_now()) AS hi
    FROM checkpoints c
    WHERE c.tenant_id = p_tenant AND c.bytes > 0 AND least(p_end, whet_now()) > greatest(c.created_at, p_start)),
  d AS (SELECT c.*, c.lo / 86400 * 86400 AS d0, (c.hi - 1) / 86400 * 86400 AS dl FROM c),
  -- A checkpoint's days in runs of one length: its first, its last (when another), the whole days between.
  runs AS (
    SELECT d.job_id, d.bytes, d.device_type, d0 AS first_day, d0 AS last_day, least(d0 + 86400, d.hi) - d.lo AS secs
    FROM d
    UNION ALL
    SELECT d.job_id, d.bytes, d.device_type, dl, dl, d.hi - dl FROM d WHERE dl > d0
    UNION ALL
    SELECT d.job_id, d.bytes, d.device_type, d0 + 86400, dl - 86400, 86400 FROM d WHERE dl - d0 >= 2 * 86400),
  -- Each run's days under each price version (a day's line takes the version in force at its start): the
  -- run's days from the version's first day start on to its last before the next version.
  priced AS (
    SELECT r.job_id, r.bytes, r.device_type, r.secs, b.version,
           (least(r.last_day, (least(b.hi, r.last_day + 86400) + 86399) / 86400 * 86400 - 86400)
            - greatest(r.first_day, (b.lo + 86399) / 86400 * 86400)) / 86400 + 1 AS days
    FROM runs r JOIN books b ON b.lo <= r.last_day AND b.hi > r.first_day)
  SELECT p.job_id, sum(p.days * round(1 * (p.bytes::numeric / 1e9 * p.secs::numeric / 3600 / 730)
                                      * coalesce(pd.unit_price, pa.unit_price, 0), 9))
  FROM priced p
  LEFT JOIN prices pd ON pd.version = p.version AND pd.sku = 'storage_gb_month' AND pd.device_type = p.device_type
  LEFT JOIN prices pa ON pa.version = p.version AND pa.sku = 'storage_gb_month' AND pa.device_type = ''
  WHERE p.days > 0
  GROUP BY p.job_id
$$;

CREATE OR REPLACE FUNCTION whet_key_spend(p_key text) RETURNS numeric LANGUAGE plpgsql STABLE
  SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
  v_start bigint := whet_month_start();
  v_tenant text := (SELECT tenant_id FROM api_keys WHERE id = p_key);
BEGIN
  IF v_tenant IS NULL THEN -- no such key: nothing refers to it (a deleted key's jobs and answers lose it)
    RETURN 0;
  END IF;
  RETURN coalesce((SELECT sum(l.amount) FROM whet_job_cost_lines(v_tenant, NULL, v_start, 9223372036854775807) l
                   JOIN jobs j ON j.id = l.job_id
                   WHERE j.api_key_id = p_key AND l.sku IS DISTINCT FROM 'storage_gb_month'), 0)
       + coalesce((SELECT sum(s.amount) FROM whet_storage_cost(v_tenant, v_start, 9223372036854775807) s
                   JOIN jobs j ON j.id = s.job_id WHERE j.api_key_id = p_key), 0)
       + coalesce((SELECT sum(whet_running_cost(j.tenant_id, j.id)) FROM jobs j
                   WHERE j.api_key_id = p_key
                     AND EXISTS (SELECT 1 FROM job_attempts a WHERE a.job_id = j.id AND a.ended_at IS NULL)), 0)
       + coalesce((SELECT sum(l.amount) FROM whet_inference_cost_lines(NULL, p_key, v_start, 9223372036854775807) l), 0);
END
$$;
