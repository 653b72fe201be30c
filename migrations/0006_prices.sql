-- 0006_prices: the operator's price book and what usage costs under it.
--
-- A price book version holds every price from its effective time until the next version's: usage is
-- priced by the version in effect when it was recorded (an attempt's usage is recorded when it ends),
-- storage by the version in effect at the start of each day it is kept. A SKU a version does not list
-- costs nothing; usage before the first version costs nothing either (its lines carry no version).
CREATE TABLE price_books (
  version        integer PRIMARY KEY CHECK (version > 0),
  effective_from bigint NOT NULL UNIQUE,            -- Unix seconds
  currency       text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),  -- ISO 4217
  note           text,
  created_at     bigint NOT NULL DEFAULT whet_now()
);

-- device_hour is per device type ('' prices the types not listed); the token SKUs are per million.
CREATE TABLE prices (
  version     integer NOT NULL REFERENCES price_books(version) ON DELETE CASCADE,
  sku         text NOT NULL CHECK (sku IN ('device_hour', 'trained_tokens_1m', 'rollout_prompt_tokens_1m',
                'rollout_completion_tokens_1m', 'inference_prompt_tokens_1m', 'inference_completion_tokens_1m',
                'storage_gb_month')),
  device_type text NOT NULL DEFAULT '' CHECK (device_type = '' OR sku = 'device_hour'),
  unit_price  numeric NOT NULL CHECK (unit_price >= 0),
  PRIMARY KEY (version, sku, device_type)
);
GRANT SELECT ON price_books, prices TO whet_app;

-- The price of one SKU (and device type) at time p_at: the version in effect, its unit price (NULL when
-- the version does not list it) and currency; no row before the first version.
CREATE FUNCTION whet_price(p_sku text, p_device text, p_at bigint)
  RETURNS TABLE (version integer, unit_price numeric, currency text) LANGUAGE sql STABLE AS $$
  SELECT b.version,
         coalesce((SELECT p.unit_price FROM prices p WHERE p.version = b.version AND p.sku = p_sku
                   AND p.device_type = coalesce(p_device, '')),
                  (SELECT p.unit_price FROM prices p WHERE p.version = b.version AND p.sku = p_sku AND p.device_type = '')),
         b.currency
  FROM price_books b WHERE b.effective_from <= p_at ORDER BY b.effective_from DESC LIMIT 1
$$;

-- The currency costs are reported in when there are no lines: the newest version's, else USD.
CREATE FUNCTION whet_currency() RETURNS text LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT b.currency FROM price_books b ORDER BY b.effective_from DESC LIMIT 1), 'USD')
$$;

-- Every cost line of [p_start, p_end) for one tenant (NULL: all) and one job (NULL: all), one per usage
-- record and line item, and one per checkpoint and UTC day for storage. Everything that reports a
-- cost (GET /v1/costs, the usage rows, the job's whet.cost, the FOCUS export) sums these lines, so
-- their totals agree by construction; each line's amount is rounded to 1e-9 once, here.
--   line_item: device_hours:TYPE, trained_tokens, rollout_tokens, storage, lost_attempt_credit:TYPE
--   (an attempt lost with its node is metered, then credited back: the tenant does not pay for it).
--   Rollout tokens are the sampled responses (completion tokens); prompts are not metered yet.
--   Storage is a checkpoint's bytes over the hours of each day it is kept (GB = 1e9 bytes, a month =
--   730 hours), until p_end or now; it is attributed to the job's first device type (for usage rows).
CREATE FUNCTION whet_cost_lines(p_tenant text, p_job text, p_start bigint, p_end bigint)
  RETURNS TABLE (tenant_id text, job_id text, at bigint, day bigint, line_item text, sku text, device_type text,
                 quantity numeric, unit text, unit_price numeric, amount numeric, currency text,
                 price_version integer, charge text)
  LANGUAGE sql STABLE AS $$
  -- The records by job, else by tenant, else all: one branch each, so that each uses its index even in
  -- a plan made for any arguments (a job's cost is read for every job a list shows).
  WITH u AS (
    SELECT * FROM usage_records u WHERE p_job IS NOT NULL AND u.job_id = p_job
      AND u.created_at >= p_start AND u.created_at < p_end
    UNION ALL
    SELECT * FROM usage_records u WHERE p_job IS NULL AND p_tenant IS NOT NULL AND u.tenant_id = p_tenant
      AND u.created_at >= p_start AND u.created_at < p_end
    UNION ALL
    SELECT * FROM usage_records u WHERE p_job IS NULL AND p_tenant IS NULL
      AND u.created_at >= p_start AND u.created_at < p_end),
  c AS (
    SELECT * FROM checkpoints c WHERE p_job IS NOT NULL AND c.job_id = p_job AND c.bytes > 0
    UNION ALL
    SELECT * FROM checkpoints c WHERE p_job IS NULL AND (p_tenant IS NULL OR c.tenant_id = p_tenant) AND c.bytes > 0),
  q AS (
    SELECT u.tenant_id, u.job_id, u.created_at AS at, v.line_item, v.sku, u.device_type, v.quantity, v.unit, v.sign,
           v.charge
    FROM u, LATERAL (VALUES
      ('device_hours:' || u.device_type, 'device_hour', u.device_seconds::numeric / 3600, 'device-hour', 1, 'usage'),
      ('trained_tokens', 'trained_tokens_1m', u.trained_tokens::numeric / 1000000, '1M tokens', 1, 'usage'),
      ('rollout_tokens', 'rollout_completion_tokens_1m', u.rollout_tokens::numeric / 1000000, '1M tokens', 1, 'usage'),
      ('lost_attempt_credit:' || u.device_type, 'device_hour',
       CASE WHEN u.lost THEN u.device_seconds::numeric / 3600 ELSE 0 END, 'device-hour', -1, 'credit')
    ) v(line_item, sku, quantity, unit, sign, charge)
    WHERE v.quantity > 0
    UNION ALL
    SELECT c.tenant_id, c.job_id, d.day, 'storage', 'storage_gb_month',
           coalesce((SELECT min(r.device_type) FROM usage_records r WHERE r.job_id = c.job_id), ''),
           c.bytes::numeric / 1e9
             * (least(d.day + 86400, p_end, whet_now()) - greatest(d.day, c.created_at, p_start))::numeric / 3600 / 730,
           'GB-month', 1, 'usage'
    FROM c, LATERAL generate_series(greatest(c.created_at, p_start) / 86400 * 86400, least(p_end, whet_now()) - 1, 86400) d(day)
    WHERE least(d.day + 86400, p_end, whet_now()) > greatest(d.day, c.created_at, p_start)),
  -- Each version's time range; a line takes its SKU's price for its device type, else for any type.
  books AS (
    SELECT b.version, b.currency, b.effective_from AS lo,
           coalesce(lead(b.effective_from) OVER (ORDER BY b.effective_from), 9223372036854775807) AS hi
    FROM price_books b)
  SELECT q.tenant_id, q.job_id, q.at, q.at / 86400 * 86400, q.line_item, q.sku, q.device_type, round(q.quantity, 9),
         q.unit, coalesce(pd.unit_price, pa.unit_price),
         round(q.sign * q.quantity * coalesce(pd.unit_price, pa.unit_price, 0), 9), coalesce(b.currency, whet_currency()),
         b.version, q.charge
  FROM q LEFT JOIN books b ON q.at >= b.lo AND q.at < b.hi
  LEFT JOIN prices pd ON pd.version = b.version AND pd.sku = q.sku AND pd.device_type = q.device_type
  LEFT JOIN prices pa ON pa.version = b.version AND pa.sku = q.sku AND pa.device_type = ''
$$;

-- The device time of attempts still running (not recorded until they end) at the device-hour price in
-- effect now, for one tenant or job (NULL: all): what whet.cost and budgets add to the recorded lines.
CREATE FUNCTION whet_running_cost(p_tenant text, p_job text) RETURNS numeric LANGUAGE sql STABLE AS $$
  SELECT coalesce(round(sum((whet_now() - a.started_at)::numeric / 3600
                            * CASE WHEN a.gpu_mask <> 0 THEN bit_count(a.gpu_mask::bit(32)) ELSE a.gpu_milli / 1000.0 END
                            * coalesce(p.unit_price, 0)), 9), 0)
  FROM job_attempts a LEFT JOIN LATERAL whet_price('device_hour', a.device_type, whet_now()) p ON true
  WHERE (p_tenant IS NULL OR a.tenant_id = p_tenant) AND (p_job IS NULL OR a.job_id = p_job) AND a.ended_at IS NULL
$$;

-- What a job has cost so far, for whet.cost on the job object: the recorded lines plus its running
-- attempts' device time; run_seconds is the time its attempts have run (to compare with its estimate).
CREATE FUNCTION whet_job_cost(p_job text) RETURNS jsonb LANGUAGE sql STABLE AS $$
  WITH l AS (SELECT * FROM whet_cost_lines(NULL, p_job, 0, 9223372036854775807)),
  running AS (SELECT whet_running_cost(NULL, p_job) AS amount)
  SELECT jsonb_build_object(
    'amount', coalesce((SELECT sum(amount) FROM l), 0) + (SELECT amount FROM running),
    'currency', coalesce((SELECT min(currency) FROM l), whet_currency()),
    'running_amount', (SELECT amount FROM running),
    'run_seconds', (SELECT coalesce(round(sum(coalesce(a.ended_at, extract(epoch FROM now())) - a.started_at)::numeric, 3), 0)
                    FROM job_attempts a WHERE a.job_id = p_job),
    'line_items', coalesce((SELECT jsonb_object_agg(line_item, amount) FROM
                              (SELECT line_item, sum(amount) AS amount FROM l GROUP BY line_item) g), '{}'))
$$;
