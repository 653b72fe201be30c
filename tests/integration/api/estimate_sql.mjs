// estimate_sql.mjs - the gateway's estimates (gateway/job_estimate.c, since migration 0063) against
// whet_job_estimate, the same arithmetic in SQL (migration 0054), over a grid: three methods, their
// hyperparameters, whet.max_steps and whet.gpu_types, in four states of what an estimate reads (nothing; a price
// book, measured throughput and a fleet; a newer book in effect and one to come; a previous job on the file and
// counts kept). Dry runs compare as JSON values (jsonb equality); creates compare the stored estimate's text,
// numeric scales included. A change of prices or throughput between creates must be seen by the next create:
// the gateway keeps the shared inputs until their version changes.
import { startStack, client, multipart, checker, SFT_LINE, DPO_LINE, RFT_LINE } from './harness.mjs';

const { check, summary, failed } = checker();
const stack = await startStack();
const sqlText = (v) => (v === null || v === undefined ? 'NULL' : `'${JSON.stringify(v).replace(/'/g, "''")}'::jsonb`);
try {
  const a = client(stack, 'alpha');
  const upload = async (name, line, n) => {
    const m = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: name, value: `${line}\n`.repeat(n) }]);
    const r = await a('POST', '/v1/files', { body: m.body, headers: { 'content-type': m.type } });
    check(r.status === 200, `upload ${name}`, r.json);
    return r.json.id;
  };
  const files = { supervised: await upload('sft.jsonl', SFT_LINE, 17), dpo: await upload('dpo.jsonl', DPO_LINE, 9),
                  reinforcement: await upload('rft.jsonl', RFT_LINE, 13) };
  const tenant = stack.psql(`SELECT tenant_id FROM files WHERE id = '${files.supervised}'`);

  // The requests of the grid: each (method, hyperparameters, whet) once per state.
  const requests = [];
  for (const gpu of [undefined, ['H100'], ['A100'], ['B200'], ['X9']])
    for (const n_epochs of [1, 3])
      for (const batch_size of [1, 4, 7])
        for (const max_steps of [undefined, 5])
          requests.push({ method: { type: 'supervised', supervised: { hyperparameters: { n_epochs, batch_size } } },
                          whet: { ...(gpu && { gpu_types: gpu }), ...(max_steps && { max_steps }) } });
  for (const gpu of [undefined, ['A100']])
    for (const batch_size of [2, 3])
      requests.push({ method: { type: 'dpo', dpo: { hyperparameters: { n_epochs: 2, batch_size } } },
                      whet: gpu ? { gpu_types: gpu } : {} });
  const grader = { type: 'string_check', name: 'exact', input: '{{sample.output_text}}', reference: '{{item.answer}}', operation: 'eq' };
  for (const gpu of [undefined, ['B200']])
    for (const group_size of [2, 4])
      for (const max_tokens of [16, 64])
        requests.push({ method: { type: 'reinforcement', reinforcement: { grader, hyperparameters: { n_epochs: 2, batch_size: 3 } } },
                        whet: { group_size, max_tokens, ...(gpu && { gpu_types: gpu }) } });

  // whet_job_estimate's answer for an estimate the gateway made, from the inputs the estimate shows.
  const sqlCall = (q, e) => `whet_job_estimate('whet-tiny', ${sqlText(q.method)}, '${files[q.method.type]}', ${sqlText(q.whet)}, ` +
    `${sqlText(e.tokenization)}, ${sqlText(e.sizing)}, ${sqlText(e.rollout)})`;
  const compareDryRuns = async (state) => {
    const rows = [];
    for (const q of requests) {
      const r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: files[q.method.type],
        method: q.method, whet: { ...q.whet, dry_run: true } } });
      if (r.status !== 200) {
        check(false, `${state}: a dry run answers`, [q, r.json]);
        return;
      }
      const { model: _m, training_file: _f, dry_run: _d, budget: _b, within_budget: _w, ...e } = r.json;
      rows.push(`(${rows.length}, ${sqlCall(q, e)}, ${sqlText(e)})`);
    }
    const out = stack.psql(`SET whet.tenant_id = '${tenant}';
      SELECT count(*) FILTER (WHERE sql = gateway) || ' ' || count(*) || ' ' ||
             coalesce((array_agg(i || ': ' || sql::text || ' <> ' || gateway::text ORDER BY i) FILTER (WHERE sql IS DISTINCT FROM gateway))[1], '')
      FROM (VALUES ${rows.join(', ')}) v(i, sql, gateway)`);
    const [same, all, ...first] = out.split(' ');
    check(same === all && Number(all) === requests.length, `${state}: ${same} of ${all} dry runs' estimates equal whet_job_estimate's`,
          first.join(' '));
  };
  const compareCreates = async (state, subset) => {
    const rows = [];
    for (const q of subset) {
      const r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: files[q.method.type],
        method: q.method, whet: q.whet } });
      check(r.status === 200, `${state}: a create`, r.json);
      if (r.status === 200) rows.push(`('${r.json.id}', ${sqlCall(q, r.json.whet.estimate)})`);
    }
    const out = stack.psql(`SET whet.tenant_id = '${tenant}';
      SELECT count(*) FILTER (WHERE v.sql::text = j.estimate::text) || ' ' || count(*) || ' ' ||
             coalesce((array_agg(v.sql::text || ' <> ' || j.estimate::text) FILTER (WHERE v.sql::text <> j.estimate::text))[1], '')
      FROM (VALUES ${rows.join(', ')}) v(id, sql) JOIN jobs j ON j.id = v.id`);
    const [same, all, ...first] = out.split(' ');
    check(same === all && Number(all) === subset.length, `${state}: ${same} of ${all} created jobs' estimates are whet_job_estimate's text`,
          first.join(' '));
    // they wait: cancelled, so that the tenant's active-job limit never refuses the grid's later creates
    stack.psql(`UPDATE jobs SET status = 'cancelled', finished_at = whet_now() WHERE status = 'queued'`);
  };
  const every = (n) => requests.filter((_, i) => i % n === 0);

  await compareDryRuns('nothing measured, no prices, no fleet');
  await compareCreates('nothing measured, no prices, no fleet', every(9));

  // A price book in effect, throughput of this model by method (fractional rates), of other models on devices
  // this one has none on (sums exact in any order), and a fleet whose two types tie on nodes.
  stack.psql(`INSERT INTO price_books (version, effective_from, currency) VALUES (1, 0, 'USD');
    INSERT INTO prices (version, sku, device_type, unit_price) VALUES (1, 'device_hour', 'H100', 3.6),
      (1, 'device_hour', '', 0.55), (1, 'trained_tokens_1m', '', 10.125), (1, 'rollout_completion_tokens_1m', '', 20);
    INSERT INTO throughput_groups (base_model, device_type, method, tokens, seconds, jobs) VALUES
      ('whet-tiny', 'H100', 'supervised', 10000, 3, 3), ('whet-tiny', 'H100', 'dpo', 7000, 3.3, 2),
      ('whet-tiny', 'A100', 'dpo', 3001, 2, 1), ('m2', 'B200', 'supervised', 5000, 2, 1),
      ('m3', 'B200', 'dpo', 9000, 2, 3), ('m2', 'A100', 'supervised', 100, 1, 1);
    INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms) VALUES
      ('n1', 'dc', 'p', '[]', 'H100', 8, 1000, 1024, 10000), ('n2', 'dc', 'q', '[]', 'A100', 4, 1000, 1024, 10000)`);
  await compareDryRuns('a price book, throughput, a fleet');
  await compareCreates('a price book, throughput, a fleet', every(7));

  // A newer book in effect (its device_hour without a default line) and one to come; the fleet's ties broken.
  stack.psql(`INSERT INTO price_books (version, effective_from, currency) VALUES (2, 1, 'EUR'), (3, 4000000000, 'GBP');
    INSERT INTO prices (version, sku, device_type, unit_price) VALUES (2, 'device_hour', 'A100', 2.5),
      (2, 'trained_tokens_1m', '', 7), (3, 'trained_tokens_1m', '', 1000);
    INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms) VALUES
      ('n3', 'dc2', 'q', '[]', 'A100', 4, 1000, 1024, 10000)`);
  await compareDryRuns('a newer book in effect, one to come');
  await compareCreates('a newer book in effect, one to come', every(8));

  // A previous succeeded job on each file (its tokens a step), and counts kept for the creates.
  stack.psql(`WITH j AS (SELECT DISTINCT ON (training_file) id, tenant_id FROM jobs ORDER BY training_file, seq)
    INSERT INTO job_progress (job_id, tenant_id, attempt, last_step, total_steps, trained_tokens)
    SELECT id, tenant_id, 1, 7, 7, 2345 FROM j;
    UPDATE jobs SET status = 'succeeded' WHERE id IN (SELECT job_id FROM job_progress);
    INSERT INTO file_token_counts (file_id, tenant_id, base_model, max_seq_len, counted)
    VALUES ('${files.supervised}', '${tenant}', 'whet-tiny', 512, '{"examples": 15, "tokens": 1234, "source": "tokenized", "max_seq_len": 512}'),
           ('${files.reinforcement}', '${tenant}', 'whet-tiny', 448,
            '{"examples": 11, "prompt_tokens": 321, "source": "tokenized", "max_prompt_len": 448}')`);
  await compareDryRuns('a previous job');
  await compareCreates('a previous job and kept counts', every(5));
  const kept = stack.psql(`SELECT count(*) FROM jobs WHERE estimate ->> 'trained_tokens_source' = 'tokenized'`);
  check(Number(kept) > 0, 'some creates estimated from a kept count', kept);

  // Prices changed between two creates: the second sees them (the shared inputs' version moved).
  const q = requests[0];
  const create = () => a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: files.supervised, method: q.method, whet: q.whet } });
  const before = (await create()).json.whet?.estimate?.cost;
  stack.psql(`UPDATE prices SET unit_price = unit_price * 2 WHERE version = 2 AND sku = 'trained_tokens_1m'`);
  const after = (await create()).json.whet?.estimate?.cost;
  check(before && after && after.line_items.trained_tokens === 2 * before.line_items.trained_tokens,
        'a price changed between two creates: the second is estimated at the new price', [before, after]);
} catch (err) {
  check(false, 'exception', String(err.stack || err));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
}
process.exit(summary());
