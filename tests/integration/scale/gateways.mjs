// gateways.mjs - two gateway replicas on one database, as behind a load balancer (issue 15): the
// active-job limit holds for the tenant as a whole (creates racing through both replicas take exactly
// the free slots: the counter row is in PostgreSQL), the rate limit too (each live replica enforces
// half of it, the whole once it is alone), and a key revoked or a tenant disabled through one
// replica, or in SQL, is refused by the other within seconds although its auth cache would trust the
// credentials for ten minutes (the whet_auth notification empties it: gateway/replica.h).
import { startStack, startGateway, request, sleep } from '../lib/gateway.mjs';
import { checker } from '../lib/check.mjs';

const { check, summary, failed } = checker();
const TTL = { WHET_GATEWAY_AUTH_CACHE_MS: '600000' };
const stack = await startStack({ env: TTL });
let gw2;
try {
  gw2 = await startGateway({ databaseUrl: stack.databaseUrl,
                             env: { WHET_JWT_ALG: 'HS256', WHET_JWT_KEY: stack.jwtSecret, ...TTL } });
  const gateways = [stack.url, gw2.url];
  const limits = { rate_per_s: 100000, rate_burst: 100000 };
  // Several fresh connections, so that every event loop of the replica has the key cached (or refuses).
  const whoami = async (url, key) => {
    const out = [];
    for (let i = 0; i < 6; i++) out.push((await request(url, 'GET', '/v1/whoami', { key, headers: { connection: 'close' } })).status);
    return out;
  };
  // Polls until every answer of the replica is 401; returns the milliseconds that took, or -1.
  const refusedWithin = async (url, key, ms) => {
    const t0 = Date.now();
    while (Date.now() - t0 < ms) {
      if ((await whoami(url, key)).every((s) => s === 401)) return Date.now() - t0;
      await sleep(50);
    }
    return -1;
  };

  // ---- a key revoked through replica 1's operator API is refused by replica 2
  const a = await stack.createTenant('multi-a', limits);
  for (const url of gateways) check((await whoami(url, a.key)).every((s) => s === 200), `key admitted (and cached) by ${url}`);
  let r = await request(stack.url, 'DELETE', `/admin/v1/tenants/${a.id}/api_keys/${a.keyId}`, { token: stack.adminToken() });
  check(r.status === 200, 'revoke through replica 1', r.text);
  let ms = await refusedWithin(gw2.url, a.key, 5000);
  check(ms >= 0, 'replica 2 refuses the key revoked through replica 1 within 5 s (cache TTL 600 s)', ms);

  // ---- a key revoked in SQL, and a tenant disabled in SQL, are refused by both
  const b = await stack.createTenant('multi-b', limits), c = await stack.createTenant('multi-c', limits);
  for (const url of gateways) {
    check((await whoami(url, b.key)).every((s) => s === 200), 'key b cached');
    check((await whoami(url, c.key)).every((s) => s === 200), 'key c cached');
  }
  stack.psql(`UPDATE api_keys SET revoked_at = whet_now() WHERE id = '${b.keyId}'`);
  stack.psql(`UPDATE tenants SET disabled = true WHERE id = '${c.id}'`);
  for (const url of gateways) {
    check((ms = await refusedWithin(url, b.key, 5000)) >= 0, `${url} refuses a key revoked in SQL within 5 s`, ms);
    check((ms = await refusedWithin(url, c.key, 5000)) >= 0, `${url} refuses a tenant disabled in SQL within 5 s`, ms);
  }
  r = await request(gw2.url, 'GET', '/v1/whoami', { key: c.key });
  check(r.status === 401 && /disabled/.test(r.json?.error?.message), 'the disabled tenant is told so', r.text);

  // ---- the active-job limit holds across replicas
  const d = await stack.createTenant('multi-d', { ...limits, max_active_jobs: 7 });
  stack.psql(`INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
                VALUES ('whet-tiny', 'llama', 1000000, 'models/whet-tiny', '00', '{}');
              INSERT INTO files (id, tenant_id, purpose, filename, bytes, sha256, object_key, format, line_count)
                VALUES ('file-multi', '${d.id}', 'fine-tune', 'train.jsonl', 100, '00', 'k', 'sft', 10)`);
  const create = (url) => request(url, 'POST', '/v1/fine_tuning/jobs', { key: d.key, body: { model: 'whet-tiny', training_file: 'file-multi' } });
  const answers = await Promise.all(Array.from({ length: 24 }, (_, i) => create(gateways[i % 2])));
  const made = answers.filter((x) => x.status === 200).length, refused = answers.filter((x) => x.status === 429).length;
  check(made === 7 && refused === 17, '24 creates racing through two replicas at a limit of 7: 7 made, 17 refused',
        { made, refused, other: answers.filter((x) => x.status !== 200 && x.status !== 429).map((x) => x.text) });
  check(stack.psql(`SELECT active FROM tenant_active_jobs WHERE tenant_id = '${d.id}'`) === '7', 'the shared counter says 7');

  // ---- the rate limit is split between the live replicas: bursts of 10 for the tenant, 5 per replica
  const live = () => Number(stack.psql("SELECT count(*) FROM gateway_replicas WHERE seen_at > now() - interval '3 seconds'"));
  for (let i = 0; i < 50 && live() < 2; i++) await sleep(100);
  check(live() === 2, 'both replicas mark themselves alive', live());
  await sleep(2200); /* a heartbeat of each has counted the other */
  const e = await stack.createTenant('multi-e', { rate_per_s: 0.1, rate_burst: 10 });
  const statuses = [];
  for (let i = 0; i < 20; i++) statuses.push((await request(gateways[i % 2], 'GET', '/v1/whoami', { key: e.key })).status);
  const admitted = statuses.filter((x) => x === 200).length;
  check(admitted >= 10 && admitted <= 11 && statuses.filter((x) => x === 429).length === 20 - admitted,
        '20 requests spread over two replicas with bursts of 10: 10 admitted (5 each), the rest 429', statuses);
  const stopped = await gw2.stop();
  gw2 = null;
  check(stopped.code === 0, 'replica 2 exits cleanly');
  for (let i = 0; i < 50 && live() > 1; i++) await sleep(100);
  check(live() === 1, 'a stopped replica forgets itself', live());
  await sleep(2200); /* replica 1 has counted itself alone: its share is the whole burst again */
  let more = 0;
  for (let i = 0; i < 8; i++) more += (await request(stack.url, 'GET', '/v1/whoami', { key: e.key })).status === 200;
  check(more >= 5 && more <= 6, 'alone, replica 1 admits the other half of the burst', more);
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  if (gw2) check((await gw2.stop()).code === 0, 'replica 2 exits cleanly');
  try {
    await stack.stop();
  } catch (e) {
    check(false, 'replica 1 exits cleanly', String(e.message || e));
  }
  if (failed()) console.error(stack.logTail(40), '\n--- replica 2 ---\n', gw2 ? gw2.logTail(40) : '');
}
process.exit(summary());
