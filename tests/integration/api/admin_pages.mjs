// admin_pages.mjs - the operator's fleet, queue and tenants a page at a time (gateway/admin_fleet.c): walking
// GET /admin/v1/nodes, /admin/v1/queue and /admin/v1/tenants (by creation, then id) by `after` with several
// limits and every filter gives the list the database orders (nodes by dc, pool, id; jobs not ended: waiting ones by their stored
// place, those with none after them, then running and paused ones, ties by seq) with no job or node
// twice or missing, `has_more` false on the last page only and first_id/last_id the page's ends; bad
// limits, cursors and filters are OpenAI 400s naming the parameter; GET /admin/v1/pools equals a
// grouping of the full lists. (The plans of the pages on big tables: tests/integration/scale/plans.mjs.)
import { startStack, checker } from './harness.mjs';

const { check, summary, failed } = checker();
const stack = await startStack();
const token = stack.adminToken();
const get = async (path) => {
  const r = await fetch(stack.url + path, { headers: { authorization: `Bearer ${token}` } });
  return { status: r.status, json: await r.json() };
};

// Every item of the list at `path` (with its filters), a page of `limit` at a time; checks each page.
async function walk(path, limit) {
  const items = [];
  let after = null;
  for (let pages = 0; pages < 1000; pages++) {
    const sep = path.includes('?') ? '&' : '?';
    const r = await get(`${path}${sep}limit=${limit}${after ? `&after=${encodeURIComponent(after)}` : ''}`);
    if (!check(r.status === 200, `GET ${path} limit ${limit} after ${after}: 200`, r.json)) return items;
    const { data, has_more: more, first_id: first, last_id: last } = r.json;
    check(data.length <= limit && (!more || data.length === limit), `${path}: a page holds limit items unless it is the last`,
          { limit, n: data.length, more });
    check(first === (data[0]?.id ?? null) && last === (data.at(-1)?.id ?? null), `${path}: first_id and last_id are the page's ends`,
          { first, last });
    items.push(...data);
    if (!more) return items;
    after = last;
  }
  check(false, `${path}: the walk ends`);
  return items;
}

// The walk at several limits equals `want` (ids in order); returns the items of the largest page.
async function walksTo(path, want) {
  let full = [];
  for (const limit of [1, 3, 7, 1000]) {
    const items = await walk(path, limit);
    const ids = items.map((x) => x.id);
    check(new Set(ids).size === ids.length, `${path} by ${limit}: no item twice`, ids);
    check(JSON.stringify(ids) === JSON.stringify(want), `${path} by ${limit}: the database's order, nothing missing`,
          { got: ids, want });
    full = items;
  }
  return full;
}

const ids = (sql) => { const out = stack.psql(sql); return out ? out.split('\n') : []; };

try {
  const alpha = stack.psql("SELECT id FROM tenants WHERE name = 'alpha'");
  const beta = stack.psql("SELECT id FROM tenants WHERE name = 'beta'");
  stack.psql(`UPDATE tenants SET max_active_jobs = 1000 WHERE id IN ('${alpha}', '${beta}')`);
  stack.psql(`INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key, format, line_count)
              VALUES ('file-a', '${alpha}', 'fine-tune', 'a.jsonl', 100, '00', 'k', 'sft', 10)`);
  // 23 nodes in two data centers and three pools, one pool with two device types, some lost or
  // cordoned; 11 jobs run on them (each holding two devices), 2 are paused, 40 wait (some with a
  // stored place, two of them tied, the rest without one), 3 validate their files, 5 have ended.
  stack.psql(`
    INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms, state)
      SELECT 'node-' || i, 'dc-' || i % 2, 'pool-' || i % 3,
             (SELECT jsonb_agg(jsonb_build_object('type', CASE WHEN i % 5 = 0 THEN 'A100' ELSE 'H100' END, 'memory_mib', 81920,
                                                  'index', d)) FROM generate_series(0, 3 + i % 2 * 4) d),
             CASE WHEN i % 5 = 0 THEN 'A100' ELSE 'H100' END, 4 + i % 2 * 4, 64000, 512000, 10000,
             CASE WHEN i % 7 = 0 THEN 'lost' WHEN i % 11 = 0 THEN 'cordoned' ELSE 'ready' END
      FROM generate_series(1, 23) i;
    INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed, status, queue_position, wait_reason)
      SELECT 'ftjob-q' || i, CASE WHEN i % 3 = 0 THEN '${beta}' ELSE '${alpha}' END, 'whet-tiny', 'whet-tiny', 'file-a',
             '{"type":"supervised"}', 1,
             CASE WHEN i <= 40 THEN 'queued' WHEN i <= 43 THEN 'validating_files' WHEN i <= 54 THEN 'running'
                  WHEN i <= 56 THEN 'paused' ELSE 'succeeded' END,
             CASE WHEN i <= 25 THEN 26 - i + CASE WHEN i = 7 THEN 1 ELSE 0 END END,
             CASE WHEN i <= 40 THEN 'needs 1 device' END
      FROM generate_series(1, 61) i;
    UPDATE jobs SET node_id = 'node-' || (substr(id, 8)::int - 40) WHERE status = 'running';
    INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, gpu_mask, device_type)
      SELECT id, 1, tenant_id, node_id, 3, 'H100' FROM jobs WHERE status = 'running';`);

  // ---- nodes: every filter, every limit
  const nodeOrder = (where) => ids(`SELECT id FROM nodes WHERE ${where} ORDER BY dc, pool, id`);
  const nodes = await walksTo('/admin/v1/nodes', nodeOrder('true'));
  check(nodes.length === 23, 'all 23 nodes', nodes.length);
  for (const [query, where] of [['dc=dc-1', "dc = 'dc-1'"], ['dc=dc-0&pool=pool-2', "dc = 'dc-0' AND pool = 'pool-2'"],
                                ['pool=pool-1', "pool = 'pool-1'"], ['state=lost', "state = 'lost'"],
                                ['dc=dc-1&state=ready', "dc = 'dc-1' AND state = 'ready'"], ['dc=dc-9', 'false']])
    await walksTo(`/admin/v1/nodes?${query}`, nodeOrder(where));
  const busy = nodes.find((n) => n.id === 'node-4');
  check(JSON.stringify(busy?.running_jobs) === '["ftjob-q44"]', 'a node lists its running job', busy);

  // ---- queue: waiting by stored place (none last), then started, ties by seq; every filter
  const queueOrder = (where) => ids(`SELECT id FROM jobs WHERE status IN ('validating_files', 'queued', 'running', 'paused')
                                     AND ${where} ORDER BY status IN ('running', 'paused'), queue_position NULLS LAST, seq`);
  const queue = await walksTo('/admin/v1/queue', queueOrder('true'));
  check(queue.length === 56 && queue[0].id === 'ftjob-q25' && queue[0].queue_position === 1,
        'the queue starts at place 1 and holds the 56 jobs not ended', queue.slice(0, 2));
  check(queue.findIndex((j) => j.id === 'ftjob-q7') === queue.findIndex((j) => j.id === 'ftjob-q6') + 1,
        'a tie in place goes by seq', queue.map((j) => j.id));
  check(queue.at(-1).status === 'paused' && queue.find((j) => j.id === 'ftjob-q44').node_id === 'node-4',
        'started jobs come last, with their node', queue.slice(-3));
  for (const [query, where] of [['status=queued', "status = 'queued'"], ['status=validating_files', "status = 'validating_files'"],
                                ['status=running', "status = 'running'"], ['status=paused', "status = 'paused'"],
                                [`tenant=${beta}`, `tenant_id = '${beta}'`], ['tenant=alpha', `tenant_id = '${alpha}'`],
                                ['tenant=alpha&status=running', `tenant_id = '${alpha}' AND status = 'running'`],
                                ['tenant=nobody', 'false']])
    await walksTo(`/admin/v1/queue?${query}`, queueOrder(where));
  // A cursor job that has since started continues the walk among the started ones.
  const head = await get('/admin/v1/queue?limit=2');
  stack.psql(`UPDATE jobs SET status = 'running', queue_position = NULL WHERE id = '${head.json.last_id}'`);
  const next = await get(`/admin/v1/queue?limit=100&after=${head.json.last_id}`);
  check(next.status === 200 && next.json.data.every((j) => ['running', 'paused'].includes(j.status)),
        'a cursor job that started running: the walk goes on among the started ones', next.json);
  stack.psql(`UPDATE jobs SET status = 'queued', queue_position = 2 WHERE id = '${head.json.last_id}'`);

  // ---- tenants, in the order they were made (a keyset on (created_at, id)); some made in one second
  stack.psql(`INSERT INTO tenants (id, name, created_at) SELECT 'tenant-page' || i, 'page' || i, 1700000000 + i / 4
              FROM generate_series(1, 25) i`);
  await walksTo('/admin/v1/tenants', ids('SELECT id FROM tenants ORDER BY created_at, id'));

  // ---- bad parameters: OpenAI 400s naming the parameter
  for (const [path, param] of [['/admin/v1/nodes?limit=0', 'limit'], ['/admin/v1/nodes?limit=1001', 'limit'],
                               ['/admin/v1/queue?limit=abc', 'limit'], ['/admin/v1/queue?limit=-1', 'limit'],
                               ['/admin/v1/queue?limit=', 'limit'], ['/admin/v1/nodes?after=node-none', 'after'],
                               ['/admin/v1/queue?after=ftjob-none', 'after'], ['/admin/v1/queue?after=node-1', 'after'],
                               ['/admin/v1/nodes?state=gone', 'state'], ['/admin/v1/queue?status=succeeded', 'status'],
                               ['/admin/v1/tenants?after=tenant-none', 'after'], ['/admin/v1/tenants?limit=0', 'limit']]) {
    const r = await get(path);
    check(r.status === 400 && r.json.error?.param === param && r.json.error?.type === 'invalid_request_error',
          `${path}: 400 naming ${param}`, r.json);
  }
  check((await get('/admin/v1/queue?limit=1000')).status === 200 && (await get('/admin/v1/nodes?limit=1')).status === 200,
        'limits 1 and 1000 are accepted');
  const anonymous = await fetch(`${stack.url}/admin/v1/pools`);
  check(anonymous.status === 401, 'GET /admin/v1/pools without a token: 401', anonymous.status);

  // ---- the summary is a grouping of the full lists
  const pools = await get('/admin/v1/pools');
  check(pools.status === 200, 'GET /admin/v1/pools', pools.json);
  const want = new Map();
  for (const n of nodes) {
    const key = `${n.dc}/${n.pool}/${n.devices[0].type}`;
    const p = want.get(key) || { nodes: { ready: 0, cordoned: 0, lost: 0 }, devices: 0, free_devices: 0, running_jobs: 0 };
    p.nodes[n.state]++;
    p.devices += n.devices.length;
    if (n.state === 'ready') p.free_devices += Math.max(n.devices.length - 2 * n.running_jobs.length, 0);
    p.running_jobs += n.running_jobs.length;
    want.set(key, p);
  }
  const got = new Map(pools.json.data.map((p) => [`${p.dc}/${p.pool}/${p.device_type}`,
    { nodes: p.nodes, devices: p.devices, free_devices: p.free_devices, running_jobs: p.running_jobs }]));
  check(JSON.stringify([...got].sort()) === JSON.stringify([...want].sort()), 'the pools are the node list grouped',
        { got: [...got], want: [...want] });
  check(JSON.stringify(pools.json.data.map((p) => [p.dc, p.pool, p.device_type])) ===
        JSON.stringify(ids(`SELECT dc || '|' || pool || '|' || device_type FROM (SELECT DISTINCT dc, pool, device_type FROM nodes) n
                            ORDER BY dc, pool, device_type`).map((s) => s.split('|'))),
        'pools in (dc, pool, device type) order', pools.json.data);
  const count = (s) => queue.filter((j) => s.includes(j.status)).length;
  const jobs = { waiting: count(['queued', 'validating_files']), running: count(['running']), paused: count(['paused']) };
  check(JSON.stringify(pools.json.jobs) === JSON.stringify(jobs), 'the job counts are the queue grouped by status',
        { got: pools.json.jobs, want: jobs });
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
}
process.exit(summary());
