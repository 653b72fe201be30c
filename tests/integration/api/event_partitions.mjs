// event_partitions.mjs - job_events in monthly partitions (migration 0044). A database migrated to the
// version before it, holding four months of a job's events and metric steps among many of another job,
// is migrated: every row lands in its month's partition with its seq, and through the gateway the
// job's events page by cursor across the months and its metric series reads every step once. An
// executor's report is recorded once, also when its first try landed in an earlier month. The page's
// cursor and rows are read through indexes of the partitions, not sequentially. whet_partitions_maintain
// moves rows that fell into the DEFAULT partition to partitions of their own, keeps this and next month's
// partitions, and with a retention drops exactly the months that ended before it (a month partly inside
// it stays); and the leading scheduler, started with --event-retention-days, runs it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as lib from '../lib/gateway.mjs';
import { leaderRun, migrateBefore, monthPartition, monthStart, partitionsOf } from '../lib/partitions.mjs';
import { checker } from './harness.mjs';

const DAY = 86400;
const { check, summary, failed } = checker();
const db = lib.createDatabase();
const q = (sql) => lib.psql(db.url, sql);
const work = mkdtempSync(join(tmpdir(), 'whet-partitions-'));
let stack;

const partitions = () => partitionsOf(db.url, 'job_events');
const partitionName = (t) => monthPartition('job_events', t);

try {
  migrateBefore(db.url, 44);
  const now = Number(q('SELECT whet_now()'));
  // Job a: one event a day for 120 days, every other one a metric step (steps 1..60); job b: 40,000
  // events over the same days, so that each month's partition is worth an index.
  q(`INSERT INTO tenants (id, name) VALUES ('tenant-acme', 'acme');
     INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
       VALUES ('whet-tiny', 'llama', 1000000, 'models/whet-tiny', '00', '{}');
     INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key)
       VALUES ('file-1', 'tenant-acme', 'fine-tune', 'd.jsonl', 10, 'x', 'files/file-1');
     INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, created_at)
       SELECT id, 'tenant-acme', 'whet-tiny', 'whet-tiny', 'file-1', '{}', 1, 'succeeded', ${now - 121 * DAY}
       FROM unnest(ARRAY['ftjob-a', 'ftjob-b']) id;
     INSERT INTO job_events (id, tenant_id, job_id, type, message, data, created_at, attempt, report_seq)
       SELECT 'ftevent-a' || d, 'tenant-acme', 'ftjob-a', CASE WHEN d % 2 = 0 THEN 'metrics' ELSE 'message' END,
              'Day ' || d, CASE WHEN d % 2 = 0 THEN jsonb_build_object('step', d / 2, 'loss', 1.0 / d) END,
              ${now} - (121 - d) * ${DAY}, 1, d
       FROM generate_series(1, 120) d;
     INSERT INTO job_events (id, tenant_id, job_id, message, created_at)
       SELECT 'ftevent-b' || i, 'tenant-acme', 'ftjob-b', 'filler', ${now - 120 * DAY} + i * 259
       FROM generate_series(1, 40000) i`);
  const before = q('SELECT count(*), sum(seq), max(seq) FROM job_events');
  const [, , maxSeq] = before.split('|').map(Number);

  lib.migrate(db.url);
  check(q(`SELECT relkind FROM pg_class WHERE relname = 'job_events'`) === 'p', 'job_events is partitioned');
  check(q('SELECT count(*), sum(seq), max(seq) FROM job_events') === before, 'every row moved with its seq', before);
  check(Number(q(`SELECT nextval('job_events_seq_seq')`)) > maxSeq, 'the sequence goes on past the moved rows');
  check(q(`SELECT count(*) FROM job_events WHERE tableoid::regclass::text <>
           'job_events_' || to_char(to_timestamp(created_at) AT TIME ZONE 'UTC', 'YYYYMM')`) === '0',
        'each row in its month\'s partition');
  let parts = partitions();
  check(partitionName(now) in parts && partitionName(monthStart(now, 1)) in parts && parts.job_events_default === null,
        'this month\'s, next month\'s and the DEFAULT partition exist', Object.keys(parts));

  // Through the gateway: the events page by page (7 a page, so pages straddle months), and the series.
  stack = await lib.startStack({ databaseUrl: db.url, env: { WHET_OBJECT_STORE: `file://${work}/objects` } });
  const token = stack.tenantToken('acme');
  const get = (path) => stack.request('GET', path, { token });
  const pageAll = async () => {
    const seen = [];
    let after = null, r;
    for (let pages = 0; pages < 100; pages++) {
      r = await get(`/v1/fine_tuning/jobs/ftjob-a/events?limit=7${after ? `&after=${after}` : ''}`);
      if (r.status !== 200) return { error: r.text };
      seen.push(...r.json.data.map((e) => e.id));
      if (!r.json.has_more) return { ids: seen };
      after = r.json.data.at(-1).id;
    }
    return { error: 'more than 100 pages' };
  };
  const expected = () => q(`SELECT string_agg(id, ',' ORDER BY seq DESC) FROM job_events WHERE job_id = 'ftjob-a'`);
  let paged = await pageAll();
  check(paged.ids?.length === 120 && paged.ids.join(',') === expected(), 'the events, newest first, paged by cursor', paged);
  let r = await get('/v1/fine_tuning/jobs/ftjob-a/events?after=ftevent-nope');
  check(r.status === 200 && r.json.data.length === 0, 'an unknown cursor: an empty page', r.json);
  const steps = [];
  for (let after = 0, pages = 0; pages < 10; pages++) {
    r = await get(`/v1/fine_tuning/jobs/ftjob-a/metrics?limit=25&after_step=${after}`);
    if (r.status !== 200) break;
    steps.push(...r.json.data.map((p) => p.step));
    if (!r.json.has_more) break;
    after = r.json.last_step;
  }
  check(steps.length === 60 && steps.every((s, i) => s === i + 1), 'the metric series: every step once, in order', steps);

  // An executor's report, retried: recorded once, also when the first try landed months ago (report 5 of
  // attempt 1) or in an earlier month than the attempt's later reports (attempt 2 started 40 days ago).
  q(`INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms)
       VALUES ('node-1', 'dc-a', 'dc-a', '[]', 'H100', 1, 1000, 1000, 600000);
     INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, device_type, started_at)
       VALUES ('ftjob-a', 2, 'tenant-acme', 'node-1', 'H100', ${now - 40 * DAY});
     INSERT INTO job_events (id, tenant_id, job_id, message, created_at, attempt, report_seq)
       VALUES ('ftevent-a2-1', 'tenant-acme', 'ftjob-a', 'first try', ${now - 39 * DAY}, 2, 1)`);
  const report = (id, attempt, seq) =>
    q(`SELECT whet_report_event('${id}', 'ftjob-a', 'info', 'message', 'retried', NULL, ${attempt}, ${seq})`);
  report('ftevent-r1', 1, 5);
  report('ftevent-r2', 2, 1);
  report('ftevent-r3', 2, 2);
  report('ftevent-r4', 2, 2);
  check(q(`SELECT string_agg(attempt || ':' || report_seq || '=' || count, ',' ORDER BY attempt, report_seq) FROM
           (SELECT attempt, report_seq, count(*) FROM job_events WHERE job_id = 'ftjob-a'
            AND (attempt, report_seq) IN ((1, 5), (2, 1), (2, 2)) GROUP BY 1, 2) c`) === '1:5=1,2:1=1,2:2=1',
        'a retried report is recorded once');
  check(q(`SELECT tableoid::regclass FROM job_events WHERE id = 'ftevent-r3'`) === partitionName(now),
        'a new report lands in this month\'s partition');

  // The page's plan, as the gateway's prepared statement runs it once generic: the cursor found and the
  // rows read through each partition's indexes; no partition that holds rows is read sequentially.
  q('ANALYZE job_events');
  const planJson = q(`SET ROLE whet_app; SET whet.tenant_id = 'tenant-acme'; SET plan_cache_mode = force_generic_plan;
    PREPARE page(text, text, text, int) AS SELECT id, created_at, level, message, data, type FROM job_events
      WHERE tenant_id = $1 AND job_id = $2 AND seq < CASE WHEN $3::text IS NULL THEN 9223372036854775807
      ELSE (SELECT CASE WHEN tenant_id = $1 AND job_id = $2 THEN seq END FROM job_events WHERE id = $3) END
      ORDER BY seq DESC LIMIT $4;
    EXPLAIN (FORMAT JSON) EXECUTE page('tenant-acme', 'ftjob-a', 'ftevent-a60', 7)`);
  const full = new Set(q(`SELECT tableoid::regclass FROM job_events GROUP BY 1 HAVING count(*) >= 1000`).split('\n'));
  const scans = [];
  const walk = (n) => {
    if (n['Relation Name']) scans.push(`${n['Node Type']} ${n['Index Name'] || ''} ${n['Relation Name']}`);
    for (const c of n.Plans || []) walk(c);
  };
  walk(JSON.parse(planJson)[0].Plan);
  check(full.size >= 4 && scans.filter((s) => s.startsWith('Seq Scan') && full.has(s.split(' ').at(-1))).length === 0,
        'no partition holding rows is read sequentially', scans);
  check(scans.some((s) => /^Index Scan job_events_\d{6}_pkey /.test(s)) &&
        scans.some((s) => /^Index Scan job_events_\d{6}_job_id_seq_idx /.test(s)),
        'the cursor by the (id, created_at) key, the page by (job_id, seq)', scans);

  // Maintenance: rows in months without a partition (three years ago, a year ahead) fall into the
  // DEFAULT partition; a pass gives each its month's partition, and a second pass has nothing to do.
  q(`INSERT INTO job_events (id, tenant_id, job_id, message, created_at) VALUES
       ('ftevent-old', 'tenant-acme', 'ftjob-a', 'old', ${now - 3 * 365 * DAY}),
       ('ftevent-ahead', 'tenant-acme', 'ftjob-a', 'ahead', ${now + 400 * DAY})`);
  check(q(`SELECT count(*) FROM job_events_default`) === '2', 'rows of months without a partition: in the DEFAULT one');
  const rows = q('SELECT count(*) FROM job_events');
  let did = q(`SELECT string_agg(action || ' ' || partition_name, ',' ORDER BY partition_name) FROM whet_partitions_maintain(0)`);
  check(did === `created ${partitionName(now - 3 * 365 * DAY)},created ${partitionName(now + 400 * DAY)}`,
        'a pass makes their months\' partitions', did);
  check(q(`SELECT count(*) FROM job_events_default`) === '0' && q('SELECT count(*) FROM job_events') === rows &&
        q(`SELECT tableoid::regclass FROM job_events WHERE id = 'ftevent-old'`) === partitionName(now - 3 * 365 * DAY),
        'their rows moved there, none lost');
  did = q(`SELECT count(*) FROM whet_partitions_maintain(0)`);
  check(did === '0', 'a second pass does nothing', did);

  // Retention of 60 days: the months that ended 60 days ago or earlier go, whole; the month holding the
  // cutoff stays with its older rows; this and next month stay.
  const cutoff = now - 60 * DAY;
  parts = partitions();
  const doomed = Object.keys(parts).filter((p) => parts[p] && parts[p][1] <= cutoff).sort();
  const youngRows = q(`SELECT count(*) FROM job_events WHERE created_at >= ${cutoff}`);
  did = q(`SELECT string_agg(partition_name, ',' ORDER BY partition_name) FROM whet_partitions_maintain(60)
           WHERE action = 'dropped'`);
  check(doomed.length >= 2 && did === doomed.join(','), 'the months that ended before the retention are dropped',
        { did, doomed });
  parts = partitions();
  check(doomed.every((p) => !(p in parts)) && partitionName(now) in parts && partitionName(monthStart(now, 1)) in parts &&
        partitionName(cutoff) in parts, 'the others stay', Object.keys(parts));
  check(q(`SELECT count(*) FROM job_events WHERE created_at >= ${cutoff}`) === youngRows,
        'no row inside the retention is lost');
  check(Number(q(`SELECT count(*) FROM job_events WHERE created_at < ${cutoff}`)) > 0 &&
        Number(q(`SELECT min(created_at) FROM job_events`)) >= monthStart(cutoff),
        'the month holding the cutoff keeps its older rows; nothing older is left');
  paged = await pageAll();
  check(paged.ids?.length > 0 && paged.ids.join(',') === expected(), 'the events page over what is left', paged);

  // The leader runs it: a row three years old (its month dropped above: DEFAULT again) and a retention of
  // 30 days; its pass leaves no month that ended 30 days ago, and an empty DEFAULT partition.
  q(`INSERT INTO job_events (id, tenant_id, job_id, message, created_at)
       VALUES ('ftevent-old2', 'tenant-acme', 'ftjob-a', 'old', ${now - 3 * 365 * DAY})`);
  const stale = () => {
    const p = partitions();
    return Object.keys(p).filter((n) => p[n] && p[n][1] <= now - 30 * DAY).length +
           Number(q('SELECT count(*) FROM job_events_default'));
  };
  const logged = (log) => log.some((l) => /msg="event partition dropped" partition=job_events_\d{6} retention_days=30/.test(l));
  const log = await leaderRun(db.url, ['--event-retention-days', '30'], (l) => stale() === 0 && logged(l),
                              `file://${work}/objects`);
  check(stale() === 0, 'the leader drops the months past --event-retention-days', log.slice(-20));
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
