// billing.mjs - the price book, costs and the FOCUS export against a real gateway and PostgreSQL:
// /admin/v1/prices (versions, effective times, refusals naming the field), /v1/prices, /v1/costs
// (OpenAI's organization costs shape: daily buckets, group_by, pagination) over March 2025 with a price
// change on the 11th, a lost attempt credited back, storage per day, usage rows' and the job's costs,
// the FOCUS 1.2 export (columns, types, one row per tenant, SKU, resource and day, the credit row,
// totals equal to /v1/costs and the usage rows), and tenant isolation. Usage is written the way the scheduler writes it (usage_records at an attempt's
// end), at chosen times.
import { parquetMetadata, parquetReadObjects } from 'hyparquet';
import { startStack, client, multipart, checker, SFT_LINE } from './harness.mjs';

const { check, summary, failed } = checker();
const stack = await startStack();
const near = (x, y, eps = 1e-6) => typeof x === 'number' && Math.abs(x - y) <= eps;
const DAY = 86400;
const T0 = Date.UTC(2025, 2, 1) / 1000; // 2025-03-01T00:00:00Z
try {
  const a = client(stack, 'alpha'), b = client(stack, 'beta');
  const admin = client(stack, 'alpha');
  const op = (method, path, opts = {}) => admin(method, path, { ...opts, key: stack.adminToken() });
  const upload = async (api) => {
    const m = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: 'd.jsonl', value: `${SFT_LINE}\n` }]);
    return (await api('POST', '/v1/files', { body: m.body, headers: { 'content-type': m.type } })).json.id;
  };
  const fa = await upload(a), fb = await upload(b);
  const newJob = async (api, file) => (await api('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: file } })).json.id;
  const jobA = await newJob(a, fa), jobB = await newJob(a, fa), jobC = await newJob(b, fb);

  // ---- the price book
  let r = await op('POST', '/admin/v1/prices', { json: {
    effective_from: T0 - 10 * DAY, currency: 'USD', note: 'launch',
    prices: { device_hour: { H100: 2, '*': 1 }, trained_tokens_1m: 0.5, rollout_completion_tokens_1m: 0.25, storage_gb_month: 0.1 },
  } });
  check(r.status === 200 && r.json.version === 1 && r.json.currency === 'USD' && r.json.prices.device_hour.H100 === 2 &&
        r.json.prices.device_hour['*'] === 1 && r.json.prices.trained_tokens_1m === 0.5 && r.json.effective_until === null,
        'price book v1', r.json);
  r = await op('POST', '/admin/v1/prices', { json: {
    effective_from: T0 + 10 * DAY, prices: { device_hour: { H100: 3 }, trained_tokens_1m: 1, storage_gb_month: 0.2 },
  } });
  check(r.status === 200 && r.json.version === 2 && r.json.currency === 'USD' && r.json.prices.device_hour['*'] === undefined,
        'price book v2 from the 11th keeps the currency', r.json);
  for (const [body, status, param] of [
    [{ prices: { bogus_sku: 1 } }, 400, 'prices.bogus_sku'],
    [{ prices: { trained_tokens_1m: -1 } }, 400, 'prices.trained_tokens_1m'],
    [{ prices: { trained_tokens_1m: '1' } }, 400, 'prices.trained_tokens_1m'],
    [{ prices: { device_hour: { 'H 100': 1 } } }, 400, 'prices.device_hour.H 100'],
    [{ prices: {} }, 400, 'prices'],
    [{}, 400, 'prices'],
    [{ currency: 'usd', prices: { trained_tokens_1m: 1 } }, 400, 'currency'],
    [{ currency: 'EUR', prices: { trained_tokens_1m: 1 } }, 400, 'currency'],
    [{ effective_from: -5, prices: { trained_tokens_1m: 1 } }, 400, 'effective_from'],
    [{ effective_from: 'soon', prices: { trained_tokens_1m: 1 } }, 400, 'effective_from'],
    [{ effective_from: T0 + 10 * DAY, prices: { trained_tokens_1m: 1 } }, 409, 'effective_from'],
    [{ surprise: 1, prices: { trained_tokens_1m: 1 } }, 400, 'surprise'],
  ]) {
    r = await op('POST', '/admin/v1/prices', { json: body });
    check(r.status === status && r.json?.error?.param === param, `price book refused: ${JSON.stringify(body)}: ${status} ${param}`, r.json);
  }
  r = await op('GET', '/admin/v1/prices');
  check(r.status === 200 && r.json.data.length === 2 && r.json.data[0].version === 2 && r.json.data[1].effective_until === T0 + 10 * DAY,
        'versions newest first, each with its end', r.json);
  r = await a('POST', '/admin/v1/prices', { json: { prices: { trained_tokens_1m: 0 } } });
  check(r.status === 401 || r.status === 403, 'a tenant cannot write prices', r.status);
  r = await a('GET', `/v1/prices?at=${T0 + 11 * DAY}`);
  check(r.status === 200 && r.json.version === 2, 'a tenant reads the book in effect', r.json);
  r = await a('GET', `/v1/prices?at=${T0 - 20 * DAY}`);
  check(r.status === 404 && r.json?.error?.param === 'at', 'before the first version: 404', r.json);

  // ---- usage as the scheduler records it
  const usage = (job, attempt, at, device, seconds, trained, rollout, lost = false) => stack.psql(`
    INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens,
                               rollout_tokens, lost, created_at, job_created_at)
    SELECT tenant_id, id, ${attempt}, 0, '${device}', ${seconds}, ${trained}, ${rollout}, ${lost}, ${at}, created_at FROM jobs WHERE id = '${job}'`);
  usage(jobA, 1, T0 + 5 * DAY + 3600, 'H100', 3600, 2000000, 0);             // v1: 2 + 1 = 3
  usage(jobA, 2, T0 + 5 * DAY + 7200, 'H100', 1800, 0, 0, true);             // v1: 1, credited back: 0
  usage(jobA, 3, T0 + 12 * DAY, 'H100', 7200, 1000000, 0);                   // v2: 6 + 1 = 7
  usage(jobB, 1, T0 + 6 * DAY, 'cpu', 3600, 0, 4000000);                     // v1: 1 + 1 = 2
  usage(jobB, 2, T0 + 15 * DAY, 'cpu', 3600, 0, 0);                          // v2 lists no "*": 0
  usage(jobC, 1, T0 + 3 * DAY, 'H100', 3600, 0, 0);                          // beta, v1: 2
  // 1 GB kept from the 10th to the end of March (and on): 24/730 GB-month a day, at 0.1 on the 10th, 0.2 after.
  stack.psql(`INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint, object_prefix, bytes, created_at)
              SELECT 'ftckpt-bill', tenant_id, id, 10, 'ft:x', 'p', 1000000000, ${T0 + 9 * DAY} FROM jobs WHERE id = '${jobA}'`);
  const storageMarch = 24 / 730 * (0.1 + 21 * 0.2);

  // ---- /v1/costs
  const march = `start_time=${T0}&end_time=${T0 + 31 * DAY}`;
  r = await a('GET', `/v1/costs?${march}&limit=31`);
  check(r.status === 200 && r.json.object === 'page' && r.json.data.length === 31 && r.json.has_more === false && r.json.next_page === null,
        'a page of 31 daily buckets', r.json && { n: r.json.data?.length, more: r.json.has_more });
  const bucketSum = (bk) => bk.results.reduce((s, x) => s + x.amount.value, 0);
  const days = r.json.data;
  check(days[0].object === 'bucket' && days[0].start_time === T0 && days[0].end_time === T0 + DAY && days[0].results.length === 0,
        'a day without costs: an empty bucket', days[0]);
  check(near(bucketSum(days[5]), 3) && days[5].results[0].amount.currency === 'usd' &&
        days[5].results[0].object === 'organization.costs.result' && days[5].results[0].line_item === null,
        'the 6th: 3 USD (the lost attempt is credited back)', days[5]);
  check(near(bucketSum(days[6]), 2), 'the 7th: cpu and rollout tokens at v1', days[6]);
  check(near(bucketSum(days[12]), 7 + 0.2 * 24 / 730), 'the 13th: at v2 after the change, and storage', days[12]);
  check(near(bucketSum(days[9]), 0.1 * 24 / 730) && near(bucketSum(days[10]), 0.2 * 24 / 730), 'storage priced per day across the change', [days[9], days[10]]);
  const total = days.reduce((s, bk) => s + bucketSum(bk), 0);
  check(near(total, 3 + 7 + 2 + storageMarch), 'March total for alpha', total);

  r = await a('GET', `/v1/costs?${march}&limit=31&group_by=line_item`);
  const items = Object.fromEntries(r.json.data[5].results.map((x) => [x.line_item, x.amount.value]));
  check(near(items['device_hours:H100'], 3) && near(items.trained_tokens, 1) && near(items['lost_attempt_credit:H100'], -1),
        'group_by=line_item: the lost attempt metered and credited as its own line', items);
  r = await a('GET', `/v1/costs?${march}&limit=31&group_by=job_id`);
  const byJob = {};
  for (const bk of r.json.data) for (const x of bk.results) byJob[x.job_id] = (byJob[x.job_id] || 0) + x.amount.value;
  check(near(byJob[jobA], 10 + storageMarch) && near(byJob[jobB], 2) && Object.keys(byJob).length === 2, 'group_by=job_id', byJob);
  r = await a('GET', `/v1/costs?${march}&group_by=line_item,job_id&limit=31`);
  check(r.status === 200 && r.json.data[5].results.every((x) => x.job_id === jobA && x.line_item), 'group_by both', r.json.data[5]);

  // Pages of 7 days cover the month once.
  let pages = 0, paged = 0, url = `/v1/costs?${march}&limit=7`;
  const starts = [];
  for (;;) {
    r = await a('GET', url);
    if (r.status !== 200) break;
    pages++;
    for (const bk of r.json.data) { starts.push(bk.start_time); paged += bucketSum(bk); }
    if (!r.json.has_more) break;
    url = `/v1/costs?${march}&limit=7&page=${r.json.next_page}`;
  }
  check(pages === 5 && starts.length === 31 && new Set(starts).size === 31 && near(paged, total), 'pagination: 5 pages, every day once', { pages, n: starts.length, paged });
  r = await a('GET', `/v1/costs?start_time=${T0 + 3600}&end_time=${T0 + DAY + 60}`);
  check(r.json.data.length === 2 && r.json.data[0].start_time === T0, 'buckets are UTC days: times round out to midnights', r.json.data.map((x) => x.start_time));

  for (const [q, param] of [['', 'start_time'], [`start_time=x`, 'start_time'], [`${march}&bucket_width=1h`, 'bucket_width'],
    [`${march}&group_by=project_id`, 'group_by'], [`start_time=${T0}&end_time=${T0 - DAY}`, 'end_time'],
    [`${march}&limit=0`, 'limit'], [`${march}&limit=181`, 'limit'], [`${march}&page=abc`, 'page'], [`${march}&page=${T0 + 5}`, 'page'],
    [`${march}&page=${T0 + 40 * DAY}`, 'page']]) {
    r = await a('GET', `/v1/costs?${q}`);
    check(r.status === 400 && r.json?.error?.param === param, `/v1/costs?${q}: 400 naming ${param}`, r.json);
  }
  r = await b('GET', `/v1/costs?${march}&limit=31`);
  check(near(r.json.data.reduce((s, bk) => s + bucketSum(bk), 0), 2), 'beta sees only its own costs', r.json.data.filter((x) => x.results.length));

  // ---- usage rows and the job's whet.cost
  r = await a('GET', `/v1/usage?${march}`);
  const rowsTotal = r.json.data.reduce((s, x) => s + x.cost.amount, 0);
  check(r.status === 200 && near(rowsTotal, total) && r.json.data.every((x) => x.cost.currency === 'USD'), 'usage rows\' costs add up to /v1/costs', r.json.data);
  const rowA = r.json.data.find((x) => x.job_id === jobA);
  check(near(rowA.cost.line_items.storage, storageMarch) && near(rowA.cost.line_items['lost_attempt_credit:H100'], -1), 'a usage row\'s line items', rowA.cost);
  r = await a('GET', `/v1/fine_tuning/jobs/${jobA}`);
  const cost = r.json.whet?.cost;
  check(cost && cost.currency === 'USD' && near(cost.line_items['device_hours:H100'], 9) && near(cost.line_items.trained_tokens, 2) &&
        cost.line_items.storage > storageMarch && cost.running_amount === 0 && near(cost.amount, 10 + cost.line_items.storage),
        'whet.cost on the job: everything so far, storage to now', cost);
  // A running attempt costs its device time so far, at the price in effect now: 2 H100s for an hour at 3.
  stack.psql(`INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms)
              VALUES ('node-bill', 'dc1', 'p', '[]', 'H100', 2, 1000, 1024, 10000);
              INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, gpu_mask, device_type, started_at)
              SELECT id, 3, tenant_id, 'node-bill', 3, 'H100', extract(epoch FROM now()) - 3600 FROM jobs WHERE id = '${jobB}'`);
  r = await a('GET', `/v1/fine_tuning/jobs/${jobB}`);
  check(near(r.json.whet?.cost?.running_amount, 6, 0.02) && near(r.json.whet.cost.amount, 8, 0.02), 'a running job\'s cost is live', r.json.whet?.cost);
  r = await a('GET', '/v1/fine_tuning/jobs');
  check(r.status === 200 && r.json.data.every((j) => j.whet.cost && typeof j.whet.cost.amount === 'number'), 'listed jobs carry their cost', r.json.data.map((j) => j.whet.cost));

  // ---- the FOCUS 1.2 export of March
  r = await op('GET', '/admin/v1/billing/focus?period=2025-03');
  check(r.status === 200 && /^text\/csv/.test(r.headers.get('content-type')) &&
        /whet-focus-2025-03\.csv/.test(r.headers.get('content-disposition') || ''), 'FOCUS: a CSV file', r.status);
  const parseCsv = (text) => text.trim().split('\n').map((line) => {
    const out = [];
    let cur = '', quoted = false;
    for (let i = 0; i < line.length; i++) {
      const ch = line[i];
      if (quoted) {
        if (ch === '"' && line[i + 1] === '"') { cur += '"'; i++; } else if (ch === '"') quoted = false; else cur += ch;
      } else if (ch === '"') quoted = true;
      else if (ch === ',') { out.push(cur); cur = ''; } else cur += ch;
    }
    out.push(cur);
    return out;
  });
  const [header, ...lines] = parseCsv(r.text);
  const rows = lines.map((l) => Object.fromEntries(header.map((h, i) => [h, l[i]])));
  const mandatory = ['BilledCost', 'BillingAccountId', 'BillingAccountName', 'BillingCurrency', 'BillingPeriodStart',
    'BillingPeriodEnd', 'ChargeCategory', 'ChargeClass', 'ChargeDescription', 'ChargePeriodStart', 'ChargePeriodEnd',
    'ContractedCost', 'EffectiveCost', 'InvoiceIssuerName', 'ListCost', 'PricingQuantity', 'PricingUnit', 'ProviderName',
    'PublisherName', 'ServiceCategory', 'ServiceName'];
  const extra = ['ConsumedQuantity', 'ConsumedUnit', 'SkuId', 'ResourceId', 'SubAccountId'];
  check(mandatory.length === 21 && [...mandatory, ...extra].every((c) => header.includes(c)), 'FOCUS: the 21 mandatory columns and the extra ones', header);
  check(lines.every((l) => l.length === header.length) && rows.length > 0, 'FOCUS: every row has every column', lines.length);
  const decimal = /^-?[0-9]+(\.[0-9]+)?$/, datetime = /^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$/;
  const typed = rows.every((x) => ['BilledCost', 'ContractedCost', 'EffectiveCost', 'ListCost', 'PricingQuantity'].every((c) => decimal.test(x[c])) &&
    ['BillingPeriodStart', 'BillingPeriodEnd', 'ChargePeriodStart', 'ChargePeriodEnd'].every((c) => datetime.test(x[c])) &&
    x.BillingPeriodStart === '2025-03-01T00:00:00Z' && x.BillingPeriodEnd === '2025-04-01T00:00:00Z' &&
    ['Usage', 'Credit'].includes(x.ChargeCategory) && x.ChargeClass === '' && x.BillingCurrency === 'USD' &&
    x.ServiceCategory === 'AI and Machine Learning' && x.ProviderName && x.PublisherName && x.InvoiceIssuerName &&
    x.BillingAccountId && x.SubAccountId === x.BillingAccountId && x.ResourceId.startsWith('ftjob-') && x.SkuId && x.PricingUnit &&
    (x.ChargeCategory === 'Credit' ? x.ConsumedQuantity === '' : decimal.test(x.ConsumedQuantity) && x.ConsumedUnit) &&
    x.BilledCost === x.EffectiveCost && x.BilledCost === x.ListCost && x.BilledCost === x.ContractedCost &&
    Date.parse(x.ChargePeriodEnd) - Date.parse(x.ChargePeriodStart) === DAY * 1000);
  check(typed, 'FOCUS: every value typed as the spec says', rows.slice(0, 3));
  const keys = rows.map((x) => [x.SubAccountId, x.SkuId, x.ResourceId, x.ChargePeriodStart, x.ChargeCategory].join('|'));
  check(new Set(keys).size === keys.length, 'FOCUS: one row per tenant, SKU, resource, day and charge category', keys);
  const credit = rows.filter((x) => x.ChargeCategory === 'Credit');
  check(credit.length === 1 && near(Number(credit[0].BilledCost), -1) && credit[0].ResourceId === jobA && credit[0].SkuId === 'device_hour:H100' &&
        credit[0].ChargePeriodStart === '2025-03-06T00:00:00Z', 'FOCUS: the lost attempt\'s credit is a row of its own', credit);
  const tokens = rows.find((x) => x.SkuId === 'trained_tokens_1m' && x.ChargePeriodStart === '2025-03-06T00:00:00Z');
  check(tokens && near(Number(tokens.PricingQuantity), 2) && tokens.PricingUnit === '1000000 Tokens' &&
        near(Number(tokens.ConsumedQuantity), 2000000) && tokens.ConsumedUnit === 'Tokens', 'FOCUS: pricing and consumed quantities', tokens);
  const storageRows = rows.filter((x) => x.SkuId === 'storage_gb_month');
  check(storageRows.length === 22 && near(storageRows.reduce((s2, x) => s2 + Number(x.BilledCost), 0), storageMarch), 'FOCUS: storage per day', storageRows.length);
  const tenantTotal = (id) => rows.filter((x) => x.SubAccountId === id).reduce((s2, x) => s2 + Number(x.BilledCost), 0);
  const alphaId = stack.psql("SELECT id FROM tenants WHERE name = 'alpha'"), betaId = stack.psql("SELECT id FROM tenants WHERE name = 'beta'");
  check(near(tenantTotal(alphaId), total) && near(tenantTotal(betaId), 2), 'FOCUS: each tenant\'s BilledCost equals its /v1/costs', [tenantTotal(alphaId), total]);
  check(near(tenantTotal(alphaId), rowsTotal), 'FOCUS: and its usage rows', [tenantTotal(alphaId), rowsTotal]);
  r = await op('GET', `/admin/v1/billing/focus?period=2025-03&tenant_id=${betaId}`);
  check(parseCsv(r.text).length === 2, 'FOCUS: one tenant', r.text);
  r = await op('GET', '/admin/v1/billing/focus?period=2025-02');
  check(r.status === 200 && parseCsv(r.text).length === 1, 'FOCUS: a month without usage: the header only', r.text);
  for (const q of ['', 'period=2025-3', 'period=2025-13', 'period=25-03-01', 'period=2025-+3', 'period=2025-03&format=xml']) {
    r = await op('GET', `/admin/v1/billing/focus?${q}`);
    check(r.status === 400 && ['period', 'format'].includes(r.json?.error?.param), `FOCUS ?${q}: 400`, r.json);
  }
  r = await a('GET', '/admin/v1/billing/focus?period=2025-03');
  check(r.status === 401 || r.status === 403, 'FOCUS: not for tenants', r.status);

  // ---- the same export as Parquet, read back by hyparquet (an independent reader): the same rows, typed
  // columns (decimals as DOUBLE, times as UTC millisecond timestamps, strings as UTF-8), nulls as nulls.
  const res = await fetch(`${stack.url}/admin/v1/billing/focus?period=2025-03&format=parquet`,
                          { headers: { authorization: `Bearer ${stack.adminToken()}` } });
  const buf = await res.arrayBuffer();
  check(res.status === 200 && res.headers.get('content-type') === 'application/vnd.apache.parquet' &&
        /whet-focus-2025-03\.parquet/.test(res.headers.get('content-disposition') || ''), 'FOCUS Parquet: a Parquet file', res.status);
  const meta = parquetMetadata(buf);
  const schema = Object.fromEntries(meta.schema.slice(1).map((e) => [e.name, e]));
  check(meta.row_groups.length === 1 && Number(meta.num_rows) === rows.length && meta.schema.length === header.length + 1 &&
        header.every((c) => schema[c]), 'FOCUS Parquet: one row group, the CSV\'s rows and columns', meta.schema.map((e) => e.name));
  const decimals = ['BilledCost', 'ContractedCost', 'EffectiveCost', 'ListCost', 'PricingQuantity', 'ConsumedQuantity'];
  const times = ['BillingPeriodStart', 'BillingPeriodEnd', 'ChargePeriodStart', 'ChargePeriodEnd'];
  check(decimals.every((c) => schema[c].type === 'DOUBLE') &&
        times.every((c) => schema[c].type === 'INT64' && schema[c].logical_type?.type === 'TIMESTAMP' &&
                           schema[c].logical_type.isAdjustedToUTC === true && schema[c].logical_type.unit === 'MILLIS') &&
        header.filter((c) => !decimals.includes(c) && !times.includes(c))
          .every((c) => schema[c].type === 'BYTE_ARRAY' && schema[c].logical_type?.type === 'STRING'),
        'FOCUS Parquet: columns typed as FOCUS says', meta.schema.slice(1, 6));
  const prows = await parquetReadObjects({ file: buf });
  const same = prows.length === rows.length && prows.every((p, i) => header.every((c) => {
    const want = rows[i][c];
    if (decimals.includes(c)) return want === '' ? p[c] === null : near(p[c], Number(want), 1e-9);
    if (times.includes(c)) return p[c] instanceof Date && p[c].getTime() === Date.parse(want);
    return want === '' ? p[c] === null : p[c] === want;
  }));
  check(same, 'FOCUS Parquet: every value equals the CSV\'s (empty: null)', [prows[0], rows[0]]);
  check(prows.every((p) => p.ChargeClass === null) && prows.filter((p) => p.ChargeCategory === 'Credit').every((p) => p.ConsumedQuantity === null),
        'FOCUS Parquet: ChargeClass and a credit\'s consumed quantity are null', prows.filter((p) => p.ChargeCategory === 'Credit'));
  const empty = await (await fetch(`${stack.url}/admin/v1/billing/focus?period=2025-02&format=parquet`,
                                   { headers: { authorization: `Bearer ${stack.adminToken()}` } })).arrayBuffer();
  check((await parquetReadObjects({ file: empty })).length === 0, 'FOCUS Parquet: a month without usage: no rows', empty.byteLength);
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
}
process.exit(summary());
