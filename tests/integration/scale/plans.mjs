// plans.mjs - the request path's queries stay independent of the table sizes (issue 15). The gateway
// runs against a private PostgreSQL with auto_explain loaded into its sessions (PGOPTIONS), which logs
// the executed plan of every statement, nested ones (functions, triggers) included, in JSON with
// row counts. The tables hold tens of thousands of rows (thousands of them the tenant's own, and one
// job with thousands of events and checkpoints); the hot requests (job create, GET job, the jobs,
// events, checkpoints and files pages with and without a cursor, cancel) then run seven times each,
// so the plans of both custom and generic prepared statements are seen. So do the operator's node and
// queue pages (3,000 nodes, 1,000 jobs running on them, 17,000 waiting, a tenth with a stored place,
// of 42 tenants) with and without a cursor and with each filter. Every plan must read the big tables without a
// sequential scan, and no scan node may touch more than READ_BOUND rows: keyset pages and O(1)
// checks, whatever the table sizes.
import fs from 'node:fs';
import { join } from 'node:path';
import { startPostgres } from '../lib/gateway.mjs';
import { startStack, client, multipart, checker, SFT_LINE } from '../api/harness.mjs';

const BIG = ['jobs', 'job_progress', 'job_events', 'checkpoints', 'files', 'usage_records', 'idempotency_keys', 'job_attempts'];
/* the operator's pages (gateway/admin_fleet.c) read the fleet's tables too */
const ADMIN = [['operator nodes page', /FROM nodes n WHERE \(n.dc, n.pool, n.id\) >/],
               ['operator queue page', /FROM jobs j JOIN tenants t ON t.id = j.tenant_id WHERE .* AND j.tenant_id = \(SELECT/],
               ['operator queue page', /FROM jobs j JOIN tenants t ON t.id = j.tenant_id WHERE [^$]*\) AND \(\(j.status/]];
const bigFor = (query) => (ADMIN.some(([, re]) => re.test(query)) ? [...BIG, 'nodes'] : BIG);
const READ_BOUND = 250; /* a page is at most 21 rows here; the big tables hold 20k+ rows, the tenant 5k */

const { check, summary, failed } = checker();
const pg = await startPostgres();
process.env.WHET_TEST_DATABASE_URL = pg.url; /* the stack's database on the private server, whose log we read */
const stack = await startStack({
  env: {
    PGOPTIONS: '-c session_preload_libraries=auto_explain -c auto_explain.log_min_duration=0 ' +
               '-c auto_explain.log_format=json -c auto_explain.log_analyze=on -c auto_explain.log_timing=off ' +
               '-c auto_explain.log_nested_statements=on',
  },
});
const logPath = join(pg.dir, 'log');

// Every plan logged since byte `from`: [{query, nodes: [{type, relation, index, read}]}].
function plansSince(from) {
  const text = fs.readFileSync(logPath, 'utf8').slice(from);
  const plans = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    if (!/LOG:  duration: [0-9.]+ ms  plan:$/.test(lines[i])) continue;
    const body = [];
    while (i + 1 < lines.length && lines[i + 1].startsWith('\t')) body.push(lines[++i].slice(1));
    const doc = JSON.parse(body.join('\n'));
    const nodes = [];
    const walk = (n) => {
      // A node that never ran (the branch of a UNION ALL that a one-time filter turned off) reads nothing.
      if (n['Actual Loops'] === 0) return;
      const read = ((n['Actual Rows'] || 0) + (n['Rows Removed by Filter'] || 0) + (n['Rows Removed by Index Recheck'] || 0)) *
                   (n['Actual Loops'] || 1);
      nodes.push({ type: n['Node Type'], relation: n['Relation Name'], index: n['Index Name'], read });
      for (const c of n.Plans || []) walk(c);
    };
    walk(doc.Plan);
    plans.push({ query: doc['Query Text'], nodes });
  }
  return plans;
}

try {
  const a = client(stack, 'alpha');
  const admin = (path) => client(stack, 'alpha')('GET', path, { key: stack.adminToken() });
  const tenant = stack.psql("SELECT id FROM tenants WHERE name = 'alpha'");
  const other = stack.psql("SELECT id FROM tenants WHERE name = 'beta'");
  const m = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: 'd.jsonl', value: `${SFT_LINE}\n` }]);
  let r = await a('POST', '/v1/files', { body: m.body, headers: { 'content-type': m.type } });
  if (r.status !== 200) throw new Error(`upload failed: ${r.text}`);
  const file = r.json.id;
  stack.psql(`UPDATE tenants SET max_active_jobs = 1000000 WHERE id IN ('${tenant}', '${other}')`);

  // ---- big tables: 20k files, 30k jobs (5k the tenant's, half of them finished), 40k events, 20k
  // checkpoints, 20k usage records, 20k idempotency keys; one of the tenant's jobs has 4k events and
  // 4k checkpoints.
  stack.psql(`
    INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key, format, line_count)
      SELECT 'file-big' || i, CASE WHEN i % 4 = 0 THEN '${tenant}' ELSE '${other}' END, 'fine-tune', 'x.jsonl', 100, '00',
             'k' || i, 'sft', 10 FROM generate_series(1, 20000) i;
    INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, fine_tuned_model)
      SELECT 'ftjob-big' || i, CASE WHEN i % 6 = 0 THEN '${tenant}' ELSE '${other}' END, 'whet-tiny', 'whet-tiny',
             CASE WHEN i % 6 = 0 THEN '${file}' ELSE 'file-big1' END, '{"type":"supervised"}', 1,
             CASE WHEN i % 4 < 2 THEN 'succeeded' ELSE 'queued' END,
             CASE WHEN i % 4 < 2 THEN 'ft:whet-tiny:big' || i END
      FROM generate_series(1, 30000) i;
    INSERT INTO job_progress (job_id, tenant_id, attempt, last_step, total_steps, trained_tokens)
      SELECT id, tenant_id, 1, 10, 10, 1000 FROM jobs WHERE id LIKE 'ftjob-big%';
    INSERT INTO job_events (id, tenant_id, job_id, message)
      SELECT 'ftevent-big' || i, j.tenant_id, j.id, 'm' FROM generate_series(1, 36000) i
      JOIN jobs j ON j.id = 'ftjob-big' || (i % 30000 + 1);
    INSERT INTO job_events (id, tenant_id, job_id, message)
      SELECT 'ftevent-one' || i, '${tenant}', 'ftjob-big12', 'm' FROM generate_series(1, 4000) i;
    INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint, object_prefix)
      SELECT 'ftckpt-big' || i, j.tenant_id, j.id, i, j.fine_tuned_model || ':ckpt-step-' || i, 'p'
      FROM generate_series(1, 16000) i JOIN jobs j ON j.id = 'ftjob-big' || (i % 7500 * 4 + 4);
    INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint, object_prefix)
      SELECT 'ftckpt-one' || i, '${tenant}', 'ftjob-big12', 100000 + i, 'ft:whet-tiny:big12:ckpt-step-' || i, 'p'
      FROM generate_series(1, 4000) i;
    INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens,
                               job_created_at)
      SELECT j.tenant_id, j.id, 1, 1, 'cpu', 10, 1000, j.created_at FROM jobs j WHERE j.status = 'succeeded' LIMIT 15000;
    INSERT INTO idempotency_keys (tenant_id, key, route, request_sha256, status, response)
      SELECT '${tenant}', 'k' || i, 'r', 's', 200, '{}' FROM generate_series(1, 20000) i;
    INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms)
      SELECT 'node-big' || i, 'dc-' || i % 3, 'pool-' || i % 4, '[{"type":"H100","memory_mib":81920,"index":0}]', 'H100', 1,
             64000, 512000, 10000 FROM generate_series(1, 3000) i;
    UPDATE jobs SET status = 'running', node_id = 'node-big' || (substr(id, 10)::int / 4 + 1) WHERE id LIKE 'ftjob-big%'
      AND status = 'queued' AND substr(id, 10)::int % 4 = 2 AND substr(id, 10)::int < 4 * 1000;
    INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, gpu_mask, device_type)
      SELECT id, 1, tenant_id, node_id, 1, 'H100' FROM jobs WHERE status = 'running';
    UPDATE jobs SET queue_position = substr(id, 10)::int / 4 + 1, wait_reason = 'needs 1 device' WHERE id LIKE 'ftjob-big%'
      AND status = 'queued' AND substr(id, 10)::int < 4 * 1500;
    -- 40 more tenants with 50 waiting jobs each: with two tenants the planner expects every other job of
    -- the queue to be the one asked for, and walks the whole queue's index rather than the tenant's
    INSERT INTO tenants (id, name) SELECT 'tenant-more' || i, 'more' || i FROM generate_series(1, 40) i;
    INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed)
      SELECT 'ftjob-more' || i, 'tenant-more' || i % 40 + 1, 'whet-tiny', 'whet-tiny', 'file-big1', '{"type":"supervised"}', 1
      FROM generate_series(1, 2000) i`);
  // As autovacuum would have by now: statistics, and the visibility map the jobs page's index-only scan uses.
  stack.psql('VACUUM ANALYZE');
  check(stack.psql(`SELECT active FROM tenant_active_jobs WHERE tenant_id = '${tenant}'`) === '2500',
        "the counter follows the seeded jobs");

  // The kept throughput aggregate (migration 0011) equals what whet_throughput computed from the usage, once the
  // successes queued since are folded (migration 0060: the scheduler's maintenance folds them).
  const fold = () => stack.psql('SELECT whet_throughput_fold(1000000)');
  const throughput = () => stack.psql(`SELECT string_agg(base_model || ' ' || device_type || ' ' || method || ' ' ||
      round(tokens_per_device_s::numeric, 6) || ' ' || jobs, '; ' ORDER BY base_model, device_type, method) FROM whet_throughput`);
  const recomputed = () => stack.psql(`SELECT string_agg(base_model || ' ' || device_type || ' ' || method || ' ' ||
      round(tps::numeric, 6) || ' ' || jobs, '; ' ORDER BY base_model, device_type, method) FROM (
      SELECT j.base_model, u.device_type, j.method ->> 'type' AS method,
             sum(u.trained_tokens)::float8 / sum(u.device_seconds) AS tps, count(DISTINCT j.id) AS jobs
      FROM usage_records u JOIN jobs j ON j.id = u.job_id
      WHERE j.status = 'succeeded' AND NOT u.lost AND u.device_seconds > 0 AND u.trained_tokens > 0 GROUP BY 1, 2, 3) t`);
  fold();
  check(throughput() !== '' && throughput() === recomputed(), 'the kept throughput matches a recomputation',
        [throughput(), recomputed()]);
  stack.psql(`UPDATE jobs SET status = 'failed' WHERE id IN ('ftjob-big4', 'ftjob-big5');
              UPDATE usage_records SET lost = true WHERE job_id = 'ftjob-big8';
              INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens,
                                         job_created_at)
                SELECT tenant_id, id, 2, 1, 'h100', 3.25, 7777, created_at FROM jobs WHERE id IN ('ftjob-big9', 'ftjob-big13', 'ftjob-big12');
              UPDATE jobs SET status = 'succeeded' WHERE id = 'ftjob-big3';
              DELETE FROM jobs WHERE id = 'ftjob-big16'`);
  fold();
  check(throughput() === recomputed(), 'and after failures, lost and new usage, a new success and a deletion',
        [throughput(), recomputed()]);

  // The synchronous seeding kept node's loop from seeing the gateway close idle keep-alive connections;
  // let it, so that the next request does not go out on a dead socket.
  await new Promise((resolve) => setTimeout(resolve, 200));
  const from = fs.statSync(logPath).size;
  const jobs = [];
  for (let round = 0; round < 7; round++) {
    r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: file },
                                                 headers: { 'idempotency-key': `plans-${round}` } });
    check(r.status === 200, 'create', r.text);
    jobs.push(r.json.id);
    check((await a('GET', `/v1/fine_tuning/jobs/${r.json.id}`)).status === 200, 'GET job');
    const page = await a('GET', '/v1/fine_tuning/jobs?limit=20');
    check(page.status === 200 && page.json.data.length === 20 && page.json.has_more, 'jobs page', page.text);
    check((await a('GET', `/v1/fine_tuning/jobs?limit=20&after=${page.json.last_id}`)).json?.data?.length === 20, 'jobs page after');
    for (const [path, n] of [['events', 20], ['checkpoints', 10]]) {
      const p = await a('GET', `/v1/fine_tuning/jobs/ftjob-big12/${path}?limit=${n}`);
      check(p.status === 200 && p.json.data.length === n, `${path} page`, p.text);
      const q = await a('GET', `/v1/fine_tuning/jobs/ftjob-big12/${path}?limit=${n}&after=${p.json.last_id}`);
      check(q.status === 200 && q.json.data.length === n, `${path} page after`, q.text);
    }
    const f = await a('GET', '/v1/files?limit=20');
    check(f.status === 200 && f.json.data.length === 20, 'files page', f.text);
    check((await a('GET', `/v1/files?limit=20&after=${f.json.last_id}`)).json?.data?.length === 20, 'files page after');
    check((await a('POST', `/v1/fine_tuning/jobs/${r.json.id}/cancel`)).status === 200, 'cancel');
    for (const list of ['nodes', 'nodes?dc=dc-1', 'nodes?dc=dc-1&pool=pool-2', 'nodes?state=ready', 'queue', 'queue?tenant=alpha',
                        `queue?tenant=${other}`, 'queue?status=running', 'queue?status=queued']) {
      const sep = list.includes('?') ? '&' : '?';
      const p = await admin(`/admin/v1/${list}${sep}limit=20`);
      check(p.status === 200 && p.json.data.length === 20 && p.json.has_more, `${list} page`, p.text);
      const q = await admin(`/admin/v1/${list}${sep}limit=20&after=${p.json.last_id}`);
      check(q.status === 200 && q.json.data.length === 20, `${list} page after`, q.text);
    }
  }

  const plans = plansSince(from);
  const seen = (re) => plans.some((p) => re.test(p.query));
  check(plans.length > 100, 'auto_explain logged the plans', plans.length);
  for (const [what, re] of [['job insert', /INSERT INTO jobs/],
                            ['active-job count at commit', /WITH c AS \(UPDATE tenant_active_jobs SET active = active \+ 1 WHERE/],
                            ['GET job', /FROM jobs j LEFT JOIN job_progress p ON p.job_id = j.id WHERE j.tenant_id = \$1 AND j.id = \$2/],
                            ['jobs page', /FROM jobs j LEFT JOIN job_progress p ON p.job_id = j.id WHERE j.tenant_id = \$1 AND j.seq = ANY \(ARRAY\(SELECT seq FROM jobs WHERE tenant_id = \$1 AND seq < CASE/],
                            ['events page', /FROM job_events WHERE tenant_id = \$1 AND job_id = \$2/],
                            ['checkpoints page', /FROM checkpoints WHERE tenant_id = \$1 AND job_id = \$2 AND/],
                            ['files page', /FROM files WHERE tenant_id = \$1 AND \(\$2::text IS NULL OR purpose = \$2\) AND seq < CASE/],
                            ...ADMIN])
    check(seen(re), `the ${what} statement was explained`);
  const bad = [];
  // A month's partition of job_events or usage_records (migrations 0044, 0051) counts as its table; a
  // sequential scan that read nothing (an empty partition: next month's, the DEFAULT one) costs nothing.
  const tableOf = (rel) => rel?.replace(/^(usage_records|job_events)_(\d{6}|default)$/, "$1");
  for (const p of plans)
    for (const n of p.nodes) {
      if (!bigFor(p.query).includes(tableOf(n.relation))) continue;
      if ((n.type === 'Seq Scan' && (n.read > 0 || n.relation === tableOf(n.relation))) || n.read > READ_BOUND)
        bad.push(`${n.type} on ${n.relation}${n.index ? ` (${n.index})` : ''} read ${n.read} rows in: ${p.query.replace(/\s+/g, ' ').slice(0, 300)}`);
    }
  check(plans.some((p) => p.nodes.some((n) => /^usage_records_\d{6}$/.test(n.relation || ''))), 'usage partitions were read');
  check(bad.length === 0, 'no sequential scan and no large read on the big tables', [...new Set(bad)]);
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
  pg.destroy();
}
process.exit(summary());
