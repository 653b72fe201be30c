// pg_restart.test.mjs - PostgreSQL restarted under a running gateway (its own private server, so the
// suite's shared one is left alone): while it is down every database-backed request fails cleanly
// with 503, an OpenAI body and retry-after (never a crash, never a hang), /healthz stays 200 and
// /readyz says 503; once it is back, the gateway reconnects by itself, prepares its statements again
// and answers 200, and it still stops cleanly.
import test from 'node:test';
import assert from 'node:assert/strict';
import { startPostgres, startStack, createDatabase, migrate, errorOf, sleep, dumpLogOnFailure } from '../lib/gateway.mjs';

const pg = await startPostgres();
const db = createDatabase(pg.url);
migrate(db.url);
const stack = await startStack({ databaseUrl: db.url, threads: 2 });
test.after(async () => { dumpLogOnFailure(stack); await stack.stop(); pg.destroy(); });

async function waitFor(what, fn, ms = 20000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

test('requests fail with 503 while PostgreSQL is down, then recover', async () => {
  const t = await stack.createTenant('survivor', { rate_per_s: 10000, rate_burst: 10000 });
  const whoami = () => stack.request('GET', '/v1/whoami', { key: t.key });
  assert.equal((await whoami()).status, 200);

  pg.stop('fast');
  const during = [];
  const until = Date.now() + 1500;
  while (Date.now() < until) {
    during.push(await whoami());
    during.push(await stack.request('GET', '/v1/whoami', { token: stack.tenantToken('survivor') }));
    during.push(await stack.request('GET', '/admin/v1/tenants', { token: stack.adminToken() }));
    await sleep(20);
  }
  // The first request may still race the shutdown; all others must be clean 503s.
  const statuses = during.map((r) => r.status);
  assert.ok(statuses.slice(3).every((s) => s === 503), `statuses while down: ${statuses}`);
  const last = during[during.length - 1];
  assert.equal(errorOf(last).type, 'server_error');
  assert.ok(Number(last.headers.get('retry-after')) >= 1);
  assert.equal((await stack.request('GET', '/healthz')).status, 200);
  assert.equal((await stack.request('GET', '/readyz')).status, 503);
  assert.equal(stack.gateway.proc.exitCode, null, 'the gateway is still running');

  pg.start();
  await waitFor('whoami to recover', async () => (await whoami()).status === 200);
  // Every connection of both loops back (the metrics count them; a request reaches one loop only, so
  // answered whoamis alone do not show that the other loop has reconnected), then every answer is 200.
  const up = (text, pool) => Number(text.match(new RegExp(`^whet_db_connections_up\\{pool="${pool}"\\} (\\d+)$`, 'm'))?.[1]);
  const configured = (text, pool) => Number(text.match(new RegExp(`^whet_db_connections\\{pool="${pool}"\\} (\\d+)$`, 'm'))?.[1]);
  await waitFor('every connection to be back', async () => {
    const text = (await stack.request('GET', '/metrics')).text;
    return ['tenant', 'admin'].every((pool) => up(text, pool) > 0 && up(text, pool) === configured(text, pool));
  });
  const rs = await Promise.all(Array.from({ length: 12 }, () => whoami()));
  assert.ok(rs.every((r) => r.status === 200 && r.json.database_tenant === t.id), `whoami: ${rs.map((r) => r.status)}`);
  assert.equal((await stack.request('GET', '/readyz')).status, 200);
  assert.equal((await stack.request('GET', '/admin/v1/tenants', { token: stack.adminToken() })).status, 200);
  const metrics = (await stack.request('GET', '/metrics')).text;
  assert.match(metrics, /^whet_db_connections_up\{pool="tenant"\} 4$/m);
  assert.match(metrics, /^whet_http_requests_total\{route="\/v1\/whoami",code="503"\} \d+$/m);
});
