// budgets.mjs - monthly budgets against a real gateway and PostgreSQL: an operator sets a tenant's
// limits (refusals name the field); the tenant sees this month's spend and the soft alert on /v1/budget
// and /v1/usage; a create whose estimate would pass the hard cap is a 429 insufficient_quota that leaves
// nothing behind (a dry run says so too), and goes through once the cap is raised, with its estimate on
// the job and a warning event past the soft limit; a running job at the cap is paused at its next
// heartbeat and runs on once resumed under a raised cap; other tenants are not affected; an API key's own
// monthly limit refuses its creates and pauses its running jobs, and its spend is listed with it.
import { startStack, client, multipart, checker, SFT_LINE } from './harness.mjs';

const { check, summary, failed } = checker();
const stack = await startStack();
const near = (x, y, eps = 1e-3) => typeof x === 'number' && Math.abs(x - y) <= eps;
try {
  const a = client(stack, 'alpha'), b = client(stack, 'beta');
  const op = (method, path, opts = {}) => a(method, path, { ...opts, key: stack.adminToken() });
  let r = await op('POST', '/admin/v1/prices', { json: { effective_from: 0, currency: 'EUR',
    prices: { device_hour: { cpu: 3.6 }, trained_tokens_1m: 1000 } } });
  check(r.status === 200, 'prices', r.text);
  const upload = async (api) => {
    const m = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: 'd.jsonl', value: `${SFT_LINE}\n`.repeat(10) }]);
    return (await api('POST', '/v1/files', { body: m.body, headers: { 'content-type': m.type } })).json.id;
  };
  const fa = await upload(a), fb = await upload(b);
  const job = (file, whet = {}, headers = {}) => ({ json: { model: 'whet-tiny', training_file: file, whet }, headers });
  r = await a('POST', '/v1/fine_tuning/jobs', job(fa));
  check(r.status === 200 && r.json.whet.estimate?.object === 'fine_tuning.job.estimate', 'a job carries its estimate', r.json?.whet);
  const first = r.json.id;
  // An hour of cpu this month: 3.6 EUR spent.
  stack.psql(`INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, job_created_at)
              SELECT tenant_id, id, 1, 0, 'cpu', 3600, created_at FROM jobs WHERE id = '${first}'`);
  r = await a('POST', '/v1/fine_tuning/jobs', job(fa, { dry_run: true }));
  const est = r.json.cost.amount;
  check(r.status === 200 && est > 0 && r.json.within_budget === true && r.json.budget?.monthly_limit === null,
        'dry run without a budget: within it', r.json);

  r = await op('PUT', '/admin/v1/tenants/alpha/budget', { json: { monthly_limit: 3.6 + est / 2, soft_limit: 1 } });
  check(r.status === 200 && r.json.object === 'budget' && near(r.json.spent, 3.6) && r.json.currency === 'EUR' &&
        r.json.soft_alert === true && r.json.hard_cap_reached === false, 'operator sets a budget: the status', r.json);
  for (const [body, param] of [[{ monthly_limit: -1 }, 'monthly_limit'], [{ soft_limit: 'ten' }, 'soft_limit'], [{ limit: 5 }, 'limit']]) {
    r = await op('PUT', '/admin/v1/tenants/alpha/budget', { json: body });
    check(r.status === 400 && r.json?.error?.param === param, `budget ${JSON.stringify(body)}: 400 naming ${param}`, r.json);
  }
  r = await op('PUT', '/admin/v1/tenants/nobody/budget', { json: { monthly_limit: 1 } });
  check(r.status === 404, 'budget of an unknown tenant: 404', r.status);
  r = await a('GET', '/v1/budget');
  check(r.status === 200 && near(r.json.monthly_limit, 3.6 + est / 2) && r.json.soft_alert === true, 'the tenant reads its budget', r.json);
  r = await a('GET', '/v1/usage');
  check(r.status === 200 && r.json.budget?.soft_alert === true && near(r.json.budget.spent, 3.6), 'the soft alert flag on /v1/usage', r.json?.budget);
  r = await b('GET', '/v1/usage');
  check(r.json.budget?.soft_alert === false && r.json.budget.spent === 0, 'another tenant: no alert', r.json?.budget);

  // Over the hard cap: refused, nothing left behind.
  const rows = () => stack.psql('SELECT (SELECT count(*) FROM jobs) || \' \' || (SELECT count(*) FROM idempotency_keys)');
  const before = rows();
  r = await a('POST', '/v1/fine_tuning/jobs', job(fa, {}, { 'idempotency-key': 'over-budget' }));
  check(r.status === 429 && r.json?.error?.code === 'insufficient_quota' && /monthly limit/.test(r.json.error.message),
        'a create past the hard cap: 429 insufficient_quota', r.json);
  check(rows() === before, 'the refused create leaves no job and no key', [before, rows()]);
  r = await a('POST', '/v1/fine_tuning/jobs', job(fa, { dry_run: true }));
  check(r.status === 200 && r.json.within_budget === false, 'a dry run says it would not fit', r.json?.within_budget);
  r = await b('POST', '/v1/fine_tuning/jobs', job(fb));
  check(r.status === 200, 'another tenant still creates', r.status);

  // The operator raises the cap: the same create goes through, warned past the soft limit.
  r = await op('PUT', '/admin/v1/tenants/alpha/budget', { json: { monthly_limit: 3.6 + est * 3, soft_limit: 1 } });
  check(r.status === 200, 'cap raised', r.text);
  r = await a('POST', '/v1/fine_tuning/jobs', job(fa, {}, { 'idempotency-key': 'over-budget' }));
  check(r.status === 200 && near(r.json.whet.estimate?.cost?.amount, est, 1e-6), 'the create goes through, with its estimate', r.json);
  const warned = stack.psql(`SELECT level || ' ' || (data ->> 'soft_alert') FROM job_events WHERE job_id = '${r.json.id}' AND level = 'warn'`);
  check(warned === 'warn true', 'a warning event on the job past the soft budget', warned);

  // A running job reaching the cap is paused at its next heartbeat (the scheduler's progress update),
  // with an event; resumed once the cap is raised, it keeps running.
  const running = r.json.id;
  stack.psql(`INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms)
              VALUES ('n1', 'dc', 'p', '[]', 'cpu', 0, 1000, 1024, 10000);
              INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, gpu_mask, gpu_milli, device_type, started_at)
              SELECT id, 1, tenant_id, 'n1', 0, 1000, 'cpu', extract(epoch FROM now()) - 7200 FROM jobs WHERE id = '${running}';
              UPDATE jobs SET status = 'running' WHERE id = '${running}';
              DELETE FROM job_events WHERE job_id = '${running}' AND level = 'warn'`); // its create's warning: the running one is checked below
  // A heartbeat's write, as the scheduler makes it (job_progress, migration 0028); the job's desired state after it.
  const progress = (id, step) => stack.psql(`INSERT INTO job_progress (job_id, tenant_id, attempt, last_step)
      SELECT id, tenant_id, attempt, ${step} FROM jobs WHERE id = '${id}'
      ON CONFLICT (job_id) DO UPDATE SET last_step = EXCLUDED.last_step; SELECT desired FROM jobs WHERE id = '${id}'`);
  const heartbeat = (step) => progress(running, step);
  r = await op('PUT', '/admin/v1/tenants/alpha/budget', { json: { monthly_limit: 1000, soft_limit: 1 } });
  check(heartbeat(1) === 'run', 'under the cap: the job runs on');
  r = await a('GET', '/v1/budget');
  check(near(r.json.spent, 3.6 + 7.2, 0.05), 'the running attempt\'s 2 hours count in the spend', r.json);
  r = await op('PUT', '/admin/v1/tenants/alpha/budget', { json: { monthly_limit: 10, soft_limit: 1 } });
  check(r.json.hard_cap_reached === true, 'the spend is past the lowered cap', r.json);
  check(heartbeat(2) === 'pause', 'at the next heartbeat the job is asked to pause');
  const paused = stack.psql(`SELECT count(*) FROM job_events WHERE job_id = '${running}' AND level = 'warn' AND message LIKE 'Pausing:%'`);
  check(paused === '1', 'with an event', paused);
  const soft = stack.psql(`SELECT count(*) FROM job_events WHERE job_id = '${running}' AND message = 'This month''s spend passed the soft budget'`);
  check(soft === '1', 'past the soft limit while running: one warning a month (a create\'s counts), not one a heartbeat', soft);
  r = await op('PUT', '/admin/v1/tenants/alpha/budget', { json: { monthly_limit: 1000, soft_limit: 1 } });
  r = await a('POST', `/v1/fine_tuning/jobs/${running}/resume`);
  check(r.status === 200 && heartbeat(3) === 'run', 'cap raised and resumed: it runs on', r.json);
  // The guard takes the month's spend at most 30 s old (migration 0038): two hours more of usage pass the
  // cap at once, yet the next heartbeat still runs on the spend it took; once that is older, it pauses.
  r = await a('GET', '/v1/budget');
  await op('PUT', '/admin/v1/tenants/alpha/budget', { json: { monthly_limit: r.json.spent + 1, soft_limit: 1 } });
  stack.psql(`INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, job_created_at)
              SELECT tenant_id, id, 1, 99, 'cpu', 7200, created_at FROM jobs WHERE id = '${running}';
              UPDATE budget_spend_cache SET computed_at = extract(epoch FROM clock_timestamp())
              WHERE subject LIKE 'tenant:%'`); // taken just now, however long the test took to get here
  check(heartbeat(4) === 'run', 'past the cap by usage newer than the spend the guard took: runs on');
  stack.psql(`UPDATE budget_spend_cache SET computed_at = computed_at - 31 WHERE subject LIKE 'tenant:%'`);
  check(heartbeat(5) === 'pause', 'once that spend is 30 s old, the next heartbeat pauses the job');
  r = await op('PUT', '/admin/v1/tenants/alpha/budget', { json: { monthly_limit: null, soft_limit: null } });
  check(r.status === 200 && r.json.monthly_limit === null && r.json.soft_alert === false, 'limits removed', r.json);

  // A spend sums a month's storage per checkpoint in runs of days (whet_storage_cost, migration 0035): the
  // same as its daily lines, job by job, over windows that cut days and price versions that start mid-day
  // (checkpoints of the running job at odd times over 45 days; all rolled back).
  const storage = stack.psql(`BEGIN;
    INSERT INTO price_books (version, effective_from, currency)
      SELECT max(version) + 1, extract(epoch FROM now())::bigint - 86400 * 20 - 3777, 'EUR' FROM price_books;
    INSERT INTO prices (version, sku, device_type, unit_price) SELECT max(version), 'storage_gb_month', '', 0.031 FROM price_books;
    INSERT INTO price_books (version, effective_from, currency)
      SELECT max(version) + 1, extract(epoch FROM now())::bigint - 86400 * 3 + 12345, 'EUR' FROM price_books;
    INSERT INTO prices (version, sku, device_type, unit_price) SELECT max(version), 'storage_gb_month', '', 0.017 FROM price_books;
    INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint, object_prefix, bytes, created_at)
      SELECT 'ckpt-storage-' || i, tenant_id, id, 1000 + i, 'x', 'p', 1000000 + i * 7919,
             extract(epoch FROM now())::bigint - (i * 104729) % (86400 * 45)
      FROM jobs, generate_series(1, 40) i WHERE id = '${running}';
    WITH w(s, e) AS (VALUES (0::bigint, 9223372036854775807::bigint),
        (extract(epoch FROM date_trunc('month', now() AT TIME ZONE 'UTC'))::bigint, 9223372036854775807),
        (extract(epoch FROM now())::bigint - 86400 * 33 + 999, extract(epoch FROM now())::bigint - 86400 * 2 - 5),
        (extract(epoch FROM now())::bigint - 86400 * 10, extract(epoch FROM now())::bigint - 86400 * 10 + 3600),
        (extract(epoch FROM now())::bigint - 50, 9223372036854775807))
    SELECT count(*) || ' windows, ' || count(*) FILTER (WHERE NOT same) || ' differ' FROM (SELECT NOT EXISTS (
      SELECT job_id, sum(amount) FROM whet_job_cost_lines(t.id, NULL, w.s, w.e) WHERE sku = 'storage_gb_month' GROUP BY 1
      EXCEPT SELECT job_id, amount FROM whet_storage_cost(t.id, w.s, w.e)) AND NOT EXISTS (
      SELECT job_id, amount FROM whet_storage_cost(t.id, w.s, w.e)
      EXCEPT SELECT job_id, sum(amount) FROM whet_job_cost_lines(t.id, NULL, w.s, w.e) WHERE sku = 'storage_gb_month' GROUP BY 1)
      AS same FROM w, tenants t WHERE t.name = 'alpha') x;
    ROLLBACK`);
  check(storage === '5 windows, 0 differ', 'storage summed in runs of days: the same as its daily lines', storage);

  // An API key's own monthly limit: the jobs it creates count against it.
  r = await op('POST', '/admin/v1/tenants/alpha/api_keys', { json: { scopes: ['jobs'], monthly_limit: est / 2 } });
  check(r.status === 200 && near(r.json.monthly_limit, est / 2, 1e-9) && r.json.spent_this_month === 0, 'a key with a monthly limit', r.json);
  const small = r.json;
  const withKey = (k) => (method, path, opts = {}) => a(method, path, { ...opts, key: k });
  r = await withKey(small.key)('POST', '/v1/fine_tuning/jobs', job(fa));
  check(r.status === 429 && r.json?.error?.code === 'insufficient_quota' && /API key/.test(r.json.error.message),
        'a create past the key\'s limit: 429 naming the key\'s limit', r.json);
  r = await a('POST', '/v1/api_keys', { json: { scopes: ['jobs'], monthly_limit: est * 1.5 } });
  check(r.status === 200 && near(r.json.monthly_limit, est * 1.5, 1e-9), 'the tenant makes a key with a limit', r.json);
  const roomy = r.json;
  r = await withKey(roomy.key)('POST', '/v1/fine_tuning/jobs', job(fa));
  check(r.status === 200, 'within the key\'s limit: created', r.json);
  const keyJob = r.json.id;
  check(stack.psql(`SELECT api_key_id FROM jobs WHERE id = '${keyJob}'`) === roomy.id, 'the job records the key that created it');
  stack.psql(`INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, job_created_at)
              SELECT tenant_id, id, 1, 0, 'cpu', 3600, created_at FROM jobs WHERE id = '${keyJob}'`);
  r = await a('GET', '/v1/api_keys');
  const listed = r.json.data.find((k) => k.id === roomy.id);
  check(near(listed?.spent_this_month, 3.6), 'the key\'s spend this month is listed', listed);
  r = await withKey(roomy.key)('POST', '/v1/fine_tuning/jobs', job(fa));
  check(r.status === 429 && /API key/.test(r.json?.error?.message), 'its spend now passes its limit: 429', r.json);
  r = await withKey(roomy.key)('POST', '/v1/fine_tuning/jobs', job(fa, { dry_run: true }));
  check(r.status === 200 && r.json.within_budget === false, 'a dry run with that key: not within budget', r.json?.within_budget);
  r = await a('POST', '/v1/fine_tuning/jobs', job(fa));
  check(r.status === 200, 'the tenant\'s other credentials are not limited by it', r.status);
  // Running, a job of the key is paused at the key's limit.
  stack.psql(`INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, gpu_mask, gpu_milli, device_type, started_at)
              SELECT id, 2, tenant_id, 'n1', 0, 1000, 'cpu', extract(epoch FROM now()) - 3600 FROM jobs WHERE id = '${keyJob}';
              UPDATE jobs SET status = 'running' WHERE id = '${keyJob}'`);
  r = await a('GET', '/v1/api_keys');
  check(near(r.json.data.find((k) => k.id === roomy.id)?.spent_this_month, 3.6 + 3.6, 0.05),
        'the key\'s running job counts its hour so far, the tenant\'s other running job not', r.json.data);
  // The lists make the tenant's month once for all its keys (0043): the same spends as each key's own.
  const eq = stack.psql(`SELECT count(*) || ' keys, ' || count(*) FILTER (WHERE s.spent > 0) || ' spent, '
                           || count(*) FILTER (WHERE s.spent <> whet_key_spend(s.key_id)) || ' differ'
                         FROM whet_tenant_key_spends((SELECT id FROM tenants WHERE name = 'alpha')) s`);
  const keyCount = stack.psql(`SELECT count(*) FROM api_keys k JOIN tenants t ON t.id = k.tenant_id WHERE t.name = 'alpha'`);
  check(eq === `${keyCount} keys, 2 spent, 0 differ`, 'every key\'s listed spend equals its own whet_key_spend', eq);
  const opList = (await op('GET', '/admin/v1/tenants/alpha/api_keys')).json.data;
  check(opList.length === r.json.data.length &&
        opList.every((k) => near(k.spent_this_month, r.json.data.find((x) => x.id === k.id)?.spent_this_month, 0.05)),
        'the operator\'s list shows the same spends (running jobs\' a second later)', opList);
  const hb = progress(keyJob, 1);
  check(hb === 'pause', 'a running job of a key past its limit is asked to pause', hb);
  r = await op('PUT', '/admin/v1/tenants/alpha/api_keys', { json: {} });
  check(r.status === 405, 'keys are not replaced with PUT', r.status);
  r = await op('POST', '/admin/v1/tenants/alpha/api_keys', { json: { monthly_limit: -3 } });
  check(r.status === 400 && r.json?.error?.param === 'monthly_limit', 'a bad key limit: 400 naming monthly_limit', r.json);
  r = await op('GET', '/admin/v1/tenants/alpha/budget');
  check(r.status === 200 && r.json.tenant_id && r.json.hard_cap_reached === false, 'operator reads a budget', r.json);
} catch (err) {
  check(false, 'exception', String(err.stack || err));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
}
process.exit(summary());
