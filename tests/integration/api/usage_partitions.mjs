// usage_partitions.mjs - usage_records in monthly partitions by the month its job was created (migration
// 0051). A database migrated to the version before it, holding usage of jobs created in six months (one
// job metered over four months) among 20,000 rows of another tenant, is migrated: every row lands in its
// job's month's partition with its seq, and the sums the billing reads make (usage per job and device
// type, the cost lines, each job's cost, a key's spend, the throughput aggregate) are what they were, also
// through GET /v1/usage and the operator's export. A report retried in another month than its first try
// (FinishJob's and a gang rank's statements, a lost node's requeue) is stored once: the unique key still
// holds, and a row cannot name another creation time than its job's. The cost reads of a job and of a
// tenant, as generic plans, read through each partition's indexes. whet_partitions_maintain keeps this and
// next month's partitions, moves rows out of the DEFAULT partition, and with a usage retention drops the
// months that ended before it whose rows were all recorded before it; the leading scheduler, started with
// --usage-retention-days, runs it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as lib from '../lib/gateway.mjs';
import { leaderRun, migrateBefore, monthPartition, monthStart, partitionsOf } from '../lib/partitions.mjs';
import { checker } from './harness.mjs';

const DAY = 86400;
const MAX = '9223372036854775807';
const { check, summary, failed } = checker();
const db = lib.createDatabase();
const q = (sql) => lib.psql(db.url, sql);
const work = mkdtempSync(join(tmpdir(), 'whet-usage-partitions-'));
let stack;

const partitions = () => partitionsOf(db.url, 'usage_records');
const partitionName = (t) => monthPartition('usage_records', t);

// What billing reads, as one comparable text: usage per job and device type, the tenant's cost lines per
// job and line item, each job's cost, the key's spend of this month, and the throughput aggregate.
const billing = () => q(`
  SELECT 'usage', string_agg(x, ';' ORDER BY x) FROM (
    SELECT u.tenant_id || '/' || u.job_id || '/' || u.device_type || '=' || sum(u.device_seconds) || ',' ||
           sum(u.trained_tokens) || ',' || sum(u.rollout_tokens) || ',' || count(*) || ',' || count(*) FILTER (WHERE u.lost) AS x
    FROM usage_records u GROUP BY u.tenant_id, u.job_id, u.device_type) a
  UNION ALL SELECT 'lines', string_agg(x, ';' ORDER BY x) FROM (
    SELECT job_id || '/' || line_item || '=' || sum(amount) AS x
    FROM whet_job_cost_lines('tenant-acme', NULL, 0, ${MAX}) GROUP BY job_id, line_item) b
  UNION ALL SELECT 'cost', string_agg(id || '=' || (whet_job_cost(id) ->> 'amount'), ';' ORDER BY id)
    FROM jobs WHERE tenant_id = 'tenant-acme'
  UNION ALL SELECT 'key', whet_key_spend('key-acme')::text
  UNION ALL SELECT 'throughput', string_agg(x, ';' ORDER BY x) FROM (
    SELECT base_model || '/' || device_type || '/' || method || '=' || tokens_per_device_s || ',' || jobs AS x
    FROM whet_throughput) c`);

// The statements the scheduler meters with (handlers.c's FinishJob, gang.c's rank end), as they run there.
const finishJob = (job, attempt, seconds) => q(`
  INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens,
    rollout_tokens, job_created_at) SELECT tenant_id, id, ${attempt}, 0, 'H100', ${seconds}, 0, 0, created_at
  FROM jobs WHERE id = '${job}' ON CONFLICT (job_id, attempt, report_seq, job_created_at) DO NOTHING`);
const gangRank = (job, attempt, rank, seconds) => q(`
  INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens,
    rollout_tokens, job_created_at) SELECT j.tenant_id, j.id, ${attempt}, ${rank}, 'H100', ${seconds}, 0, 0, j.created_at
  FROM jobs j WHERE j.id = '${job}' ON CONFLICT (job_id, attempt, report_seq, job_created_at) DO NOTHING`);

try {
  migrateBefore(db.url, 51);
  const now = Number(q('SELECT whet_now()'));
  // acme's jobs, created 155, 115, 85, 40 and 2 days ago (so in five different months at least 30 days
  // apart, and this one); ftjob-long, created 115 days ago, is metered every 30 days up to 2 days ago.
  // beta: 400 jobs over the same 155 days with 50 rows each, so that each month's partition is worth an index.
  const jobs = { 'ftjob-a': 155, 'ftjob-long': 115, 'ftjob-b': 85, 'ftjob-c': 40, 'ftjob-d': 2 };
  q(`INSERT INTO tenants (id, name) VALUES ('tenant-acme', 'acme'), ('tenant-beta', 'beta');
     INSERT INTO api_keys (id, tenant_id, name, key_hash, key_prefix, monthly_limit)
       VALUES ('key-acme', 'tenant-acme', 'k', sha256('k'), 'sk-', 1000000);
     INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
       VALUES ('whet-tiny', 'llama', 1000000, 'models/whet-tiny', '00', '{}');
     INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key)
       VALUES ('file-1', 'tenant-acme', 'fine-tune', 'd.jsonl', 10, 'x', 'files/file-1'),
              ('file-2', 'tenant-beta', 'fine-tune', 'd.jsonl', 10, 'x', 'files/file-2');
     INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, created_at, api_key_id)
       VALUES ${Object.entries(jobs).map(([id, d]) => `('${id}', 'tenant-acme', 'whet-tiny', 'whet-tiny', 'file-1',
               '{"type":"supervised"}', 1, '${d > 2 ? 'succeeded' : 'running'}', ${now - d * DAY}, 'key-acme')`).join(',')};
     INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, created_at)
       SELECT 'ftjob-beta' || i, 'tenant-beta', 'whet-tiny', 'whet-tiny', 'file-2', '{"type":"supervised"}', 1,
              'succeeded', ${now} - (i * 155 / 400) * ${DAY} - 3600 FROM generate_series(1, 400) i;
     INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens,
                                rollout_tokens, lost, created_at)
       SELECT tenant_id, id, a, 0, CASE WHEN a = 2 THEN 'A100' ELSE 'H100' END, 600 * a + 0.125, 1000 * a, 7 * a, a = 1,
              created_at + a * 3600 FROM jobs, generate_series(1, 3) a WHERE tenant_id = 'tenant-acme' AND id <> 'ftjob-long';
     INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens, created_at)
       SELECT 'tenant-acme', 'ftjob-long', a, 0, 'H100', 3600, 5000, ${now} - 2 * ${DAY} - (3 - a) * 30 * ${DAY}
       FROM generate_series(0, 3) a;
     INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens, created_at)
       SELECT tenant_id, id, 1, r, 'H100', 10, 100, created_at + 60 + r FROM jobs, generate_series(0, 49) r
       WHERE tenant_id = 'tenant-beta';
     INSERT INTO price_books (version, effective_from, currency) VALUES (1, 0, 'USD'), (2, ${now - 100 * DAY}, 'USD');
     INSERT INTO prices (version, sku, device_type, unit_price)
       SELECT v, sku, dt, p * v FROM generate_series(1, 2) v, (VALUES ('device_hour', '', 2.0), ('device_hour', 'A100', 1.5),
         ('trained_tokens_1m', '', 4.0), ('rollout_completion_tokens_1m', '', 8.0)) x(sku, dt, p)`);
  const counts = () => q('SELECT count(*), sum(seq), max(seq), sum(device_seconds) FROM usage_records');
  const before = counts();
  const billedBefore = billing();
  const maxSeq = Number(before.split('|')[2]);
  check(/^usage\|.*ftjob-long/.test(billedBefore) && /key\|[1-9]/.test(billedBefore), 'the usage to compare', billedBefore);

  lib.migrate(db.url);
  check(q(`SELECT relkind FROM pg_class WHERE relname = 'usage_records'`) === 'p', 'usage_records is partitioned');
  check(counts() === before, 'every row moved with its seq', { before, after: counts() });
  check(billing() === billedBefore, 'usage, cost lines, job costs, the key\'s spend and throughput are unchanged',
        { before: billedBefore, after: billing() });
  check(Number(q(`SELECT nextval('usage_records_seq_seq')`)) > maxSeq, 'the sequence goes on past the moved rows');
  check(q(`SELECT count(*) FROM usage_records u JOIN jobs j ON j.id = u.job_id WHERE u.job_created_at <> j.created_at
           OR u.tableoid::regclass::text <> 'usage_records_' || to_char(to_timestamp(j.created_at) AT TIME ZONE 'UTC', 'YYYYMM')`)
        === '0', 'each row in the partition of its job\'s month');
  let parts = partitions();
  const months = new Set(Object.values(jobs).map((d) => partitionName(now - d * DAY)));
  check(months.size === 5 && [...months].every((p) => p in parts) && partitionName(monthStart(now, 1)) in parts &&
        parts.usage_records_default === null, 'the jobs\' months, next month and the DEFAULT partition exist',
        Object.keys(parts));

  // Through the gateway: /v1/usage and the operator's export, against the sums taken before the migration.
  stack = await lib.startStack({ databaseUrl: db.url, env: { WHET_OBJECT_STORE: `file://${work}/objects` } });
  const token = stack.tenantToken('acme');
  let r = await stack.request('GET', '/v1/usage', { token });
  const rows = (data) => data.map((u) => `${u.job_id}/${u.device_type}=${u.device_seconds}`).sort().join(';');
  const expected = q(`SELECT string_agg(job_id || '/' || device_type || '=' || s, ';' ORDER BY job_id || '/' || device_type || '=' || s)
                      FROM (SELECT job_id, device_type, sum(device_seconds) AS s FROM usage_records
                            WHERE tenant_id = 'tenant-acme' GROUP BY 1, 2) u`);
  check(r.status === 200 && r.json.data.length === 9 && rows(r.json.data) === expected, 'GET /v1/usage: every job\'s usage',
        { got: r.json?.data && rows(r.json.data), expected });
  const usageCost = r.status === 200 ? r.json.data.reduce((s, u) => s + u.cost.amount, 0) : -1;
  const linesCost = Number(q(`SELECT sum(amount) FROM whet_job_cost_lines('tenant-acme', NULL, 0, ${MAX})`));
  check(usageCost > 0 && Math.abs(usageCost - linesCost) < 1e-6, 'and its cost is the tenant\'s cost lines', { usageCost, linesCost });
  r = await stack.request('GET', `/v1/usage?start_time=${now - 50 * DAY}&end_time=${now}`, { token });
  check(r.status === 200 && rows(r.json.data) === q(`SELECT string_agg(x, ';' ORDER BY x) FROM (SELECT job_id || '/' ||
        device_type || '=' || sum(device_seconds) AS x FROM usage_records WHERE tenant_id = 'tenant-acme'
        AND created_at >= ${now - 50 * DAY} AND created_at < ${now} GROUP BY job_id, device_type) u`),
        'a window of it: the rows recorded then, across the jobs\' months', r.json?.data && rows(r.json.data));
  r = await stack.request('GET', '/admin/v1/usage?format=csv', { token: stack.adminToken() });
  const csvSeconds = r.status === 200 ? r.text.trim().split('\n').slice(1).filter((l) => l.split(',')[2])
    .reduce((s, l) => s + Number(l.split(',')[4]), 0) : -1;
  check(Math.abs(csvSeconds - Number(before.split('|')[3])) < 0.01, 'the billing export sums every row', { csvSeconds, before });

  // Retried reports, stored once. FinishJob of ftjob-b's attempt 9: its first try recorded 50 days ago (a
  // month after the job's), the retry now; a gang rank of ftjob-c's attempt 5 likewise; and a lost node's
  // requeue metering ftjob-d's running attempt 4, run twice.
  q(`INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, created_at, job_created_at)
       SELECT tenant_id, id, 9, 0, 'H100', 42, ${now - 50 * DAY}, created_at FROM jobs WHERE id = 'ftjob-b';
     INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, created_at, job_created_at)
       SELECT tenant_id, id, 5, 1, 'H100', 43, ${now - 20 * DAY}, created_at FROM jobs WHERE id = 'ftjob-c'`);
  finishJob('ftjob-b', 9, 99);
  finishJob('ftjob-b', 9, 99);
  gangRank('ftjob-c', 5, 1, 99);
  gangRank('ftjob-c', 5, 0, 44);
  gangRank('ftjob-c', 5, 0, 44);
  q(`INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms)
       VALUES ('node-1', 'dc-a', 'dc-a', '[]', 'H100', 1, 1000, 1000, 600000);
     INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, device_type, started_at)
       VALUES ('ftjob-d', 4, 'tenant-acme', 'node-1', 'H100', ${now - 3600})`);
  q(`SELECT count(*) FROM whet_requeue_node_attempts('node-1', 'lost')`);
  q(`UPDATE job_attempts SET ended_at = NULL WHERE job_id = 'ftjob-d' AND attempt = 4;
     SELECT count(*) FROM whet_requeue_node_attempts('node-1', 'lost')`);
  check(q(`SELECT string_agg(job_id || ':' || attempt || ':' || report_seq || '=' || n || '/' || s, ',' ORDER BY job_id, attempt, report_seq)
           FROM (SELECT job_id, attempt, report_seq, count(*) AS n, sum(device_seconds) AS s FROM usage_records
                 WHERE (job_id, attempt) IN (('ftjob-b', 9), ('ftjob-c', 5), ('ftjob-d', 4)) GROUP BY 1, 2, 3) c`)
        .replace(/=1\/[0-9.]+,?/g, '=1,') === 'ftjob-b:9:0=1,ftjob-c:5:0=1,ftjob-c:5:1=1,ftjob-d:4:0=1,',
        'each retried report is stored once');
  check(q(`SELECT device_seconds FROM usage_records WHERE job_id = 'ftjob-b' AND attempt = 9`) === '42' &&
        q(`SELECT tableoid::regclass FROM usage_records WHERE job_id = 'ftjob-b' AND attempt = 9`) === partitionName(now - 85 * DAY),
        'the first try kept, in its job\'s month\'s partition');
  check(q(`SELECT tableoid::regclass || ':' || lost FROM usage_records WHERE job_id = 'ftjob-d' AND attempt = 4`) ===
        `${partitionName(now - 2 * DAY)}:true`, 'a lost attempt is metered in its job\'s month');
  const refused = (sql) => { try { q(sql); return null; } catch (e) { return String(e.message || e); } };
  let err = refused(`INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, job_created_at)
                     SELECT tenant_id, id, 9, 0, 'H100', created_at FROM jobs WHERE id = 'ftjob-b'`);
  check(/duplicate key value violates unique constraint "usage_records_\d{6}_job_id_attempt_report_seq_job_created_+key"/.test(err),
        'a second row of a report is a unique violation', err);
  err = refused(`INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, job_created_at)
                 VALUES ('tenant-acme', 'ftjob-b', 9, 0, 'H100', ${now})`);
  check(/usage_records_job_fkey/.test(err), 'a row giving another creation time than its job\'s is refused', err);

  // The cost reads of a job (every job object's whet.cost) and of a tenant (budgets, key spends, the
  // export's lines) as generic plans, as the functions run them: through each partition's indexes, no
  // partition holding rows read sequentially; a job's, in its month's partition alone (migration 0052).
  q('ANALYZE usage_records');
  const scansOf = (sql) => {
    const scans = [];
    const walk = (n) => {
      if (n['Actual Loops'] === 0) return; // a branch a one-time filter turned off
      if (n['Relation Name']) scans.push(`${n['Node Type']} ${n['Index Name'] || ''} ${n['Relation Name']}`);
      for (const c of n.Plans || []) walk(c);
    };
    walk(JSON.parse(q(sql))[0].Plan);
    return scans;
  };
  const full = new Set(q(`SELECT tableoid::regclass FROM usage_records GROUP BY 1 HAVING count(*) >= 1000`).split('\n'));
  for (const [what, args] of [['a job', `'tenant-acme', 'ftjob-b'`], ['a tenant', `'tenant-acme', NULL`]]) {
    const scans = scansOf(`SET plan_cache_mode = force_generic_plan;
      PREPARE lines(text, text, bigint, bigint) AS SELECT sum(amount) FROM whet_job_cost_lines($1, $2, $3, $4) WHERE sku <> 'storage_gb_month';
      EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE lines(${args}, ${now - 30 * DAY}, ${MAX})`).filter((s) => / usage_records_/.test(s));
    const jobMonth = partitionName(Number(q(`SELECT created_at FROM jobs WHERE id = 'ftjob-b'`)));
    check(full.size >= 4 && (what === 'a job' ? scans.every((s) => s.endsWith(` ${jobMonth}`)) && scans.length >= 1
                                              : scans.length >= full.size) &&
          !scans.some((s) => s.startsWith('Seq Scan') && full.has(s.split(' ').at(-1))) &&
          scans.some((s) => /^(Bitmap Heap Scan|Index Scan|Index Only Scan) /.test(s)),
          `the cost lines of ${what}: read by index in ${what === 'a job' ? 'its month\'s partition alone' : 'each partition'}`,
          scans);
  }

  // Maintenance: usage of a job created three years ago (its month has no partition) falls into the DEFAULT
  // partition; a pass gives it its month's partition, a second pass does nothing.
  const old = now - 3 * 365 * DAY;
  q(`INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, created_at)
       VALUES ('ftjob-old', 'tenant-acme', 'whet-tiny', 'whet-tiny', 'file-1', '{"type":"supervised"}', 1, 'running', ${old})`);
  finishJob('ftjob-old', 1, 5);
  check(q(`SELECT tableoid::regclass FROM usage_records WHERE job_id = 'ftjob-old'`) === 'usage_records_default',
        'usage of a month without a partition: in the DEFAULT one');
  let did = q(`SELECT string_agg(action || ' ' || partition_name, ',' ORDER BY partition_name) FROM whet_partitions_maintain(0, 0)`);
  check(did === `created ${partitionName(old)}`, 'a pass makes its month\'s partition', did);
  check(q(`SELECT tableoid::regclass FROM usage_records WHERE job_id = 'ftjob-old'`) === partitionName(old) &&
        q('SELECT count(*) FROM usage_records_default') === '0', 'its row moved there');
  did = q(`SELECT count(*) FROM whet_partitions_maintain(0, 0)`);
  check(did === '0', 'a second pass does nothing', did);
  did = q(`SELECT count(*) FROM whet_partitions_maintain(30, 0) WHERE partition_name LIKE 'usage%'`);
  check(did === '0', 'the events\' retention drops no usage', did);

  // A usage retention of 100 days: the months that ended 100 days ago or earlier go, whole, but for those
  // holding a row recorded within the 100 days (ftjob-long's month; ftjob-old's, metered just now).
  const dropped = (days) => {
    const p = partitions();
    const recent = new Set(q(`SELECT DISTINCT tableoid::regclass FROM usage_records
                              WHERE created_at >= ${now - days * DAY}`).split('\n'));
    return Object.keys(p).filter((n) => p[n] && p[n][1] <= now - days * DAY && !recent.has(n)).sort();
  };
  const doomed = dropped(100);
  const young = q(`SELECT count(*), sum(device_seconds) FROM usage_records WHERE created_at >= ${now - 100 * DAY}`);
  did = q(`SELECT string_agg(partition_name, ',' ORDER BY partition_name) FROM whet_partitions_maintain(0, 100)
           WHERE action = 'dropped'`);
  check(doomed.length >= 1 && doomed.includes(partitionName(now - 155 * DAY)) && did === doomed.join(','),
        'the months that ended before the retention are dropped', { did, doomed });
  parts = partitions();
  check([partitionName(now - 115 * DAY), partitionName(now - 85 * DAY), partitionName(old), partitionName(now),
         partitionName(monthStart(now, 1))].every((p) => p in parts),
        'a month with usage recorded within the retention stays, as do the younger ones', Object.keys(parts));
  check(q(`SELECT count(*), sum(device_seconds) FROM usage_records WHERE created_at >= ${now - 100 * DAY}`) === young,
        'no usage recorded within the retention is lost');
  check(q(`SELECT count(*) FROM usage_records WHERE job_id = 'ftjob-a'`) === '0' &&
        q(`SELECT count(*) FROM usage_records WHERE job_id = 'ftjob-long'`) === '4', 'ftjob-a\'s usage is gone, ftjob-long\'s kept whole');
  r = await stack.request('GET', '/v1/usage', { token });
  check(r.status === 200 && r.json.data.some((u) => u.job_id === 'ftjob-long') && !r.json.data.some((u) => u.job_id === 'ftjob-a'),
        'GET /v1/usage over what is left', r.json?.data && rows(r.json.data));

  // The leader runs it: with --usage-retention-days 30 ftjob-b's month goes (its last row is 50 days old),
  // ftjob-long's stays (its last, 2 days); and it logs each month it drops.
  check(dropped(30).includes(partitionName(now - 85 * DAY)) && !dropped(30).includes(partitionName(now - 115 * DAY)),
        'months past 30 days to drop', dropped(30));
  const logged = (log) => log.some((l) => /msg="usage partition dropped" partition=usage_records_\d{6} retention_days=30/.test(l));
  const log = await leaderRun(db.url, ['--usage-retention-days', '30'], (l) => dropped(30).length === 0 && logged(l),
                              `file://${work}/objects`);
  check(dropped(30).length === 0 && !(partitionName(now - 85 * DAY) in partitions()) &&
        partitionName(now - 115 * DAY) in partitions(), 'the leader drops the months past --usage-retention-days',
        log.slice(-20));
  check(logged(log), 'and logs each', log.slice(-20));
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  if (stack) {
    const r = await stack.stop().catch((e) => ({ code: String(e) }));
    check(r.code === 0, 'the gateway exits cleanly', r);
    if (failed()) console.error(stack.logTail(60));
  }
  db.drop();
  rmSync(work, { recursive: true, force: true });
}
process.exit(summary());
