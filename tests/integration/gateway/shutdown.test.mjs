// shutdown.test.mjs - SIGTERM while requests are in flight: every request the gateway accepted gets
// a whole answer (200, or 503 with an OpenAI body once it is stopping), the process exits 0 within
// the grace period, idle keep-alive connections do not hold it up, and the port is released.
import test from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startStack, errorOf } from '../lib/gateway.mjs';

test('graceful shutdown under load', async (ctx) => {
  const stack = await startStack({ threads: 2 });
  const t = await stack.createTenant('busy', { rate_per_s: 100000, rate_burst: 100000 });
  // warm keep-alive connections on both loops
  await Promise.all(Array.from({ length: 16 }, () => stack.request('GET', '/v1/whoami', { key: t.key })));
  const port = Number(new URL(stack.url).port);
  // SIGTERM once the gateway is busy answering: the first 20 of 400 requests are back.
  let done = 0, stopped = null, started = 0;
  const inflight = Array.from({ length: 400 }, (_, i) =>
    stack.request('GET', i % 2 ? '/v1/whoami' : '/readyz', { key: t.key }).catch((e) => ({ error: e })).then((r) => {
      if (++done === 20) { started = Date.now(); stopped = stack.stop(); }
      return r;
    }));
  const results = await Promise.all(inflight);
  await stopped; // rejects unless the exit code is 0
  assert.ok(Date.now() - started < 8000, `stopped in ${Date.now() - started} ms`);
  let answered = 0;
  for (const r of results) {
    if (r.error) continue; // never accepted: the listener was already closed
    answered++;
    assert.ok(r.status === 200 || r.status === 503, `status ${r.status}: ${r.text}`);
    if (r.status === 503) assert.equal(errorOf(r).type, 'server_error');
    else assert.ok(r.json && (r.json.status === 'ready' || r.json.tenant === 'busy'), r.text);
  }
  const unavailable = results.filter((r) => r.status === 503).length;
  ctx.diagnostic(`${answered} of ${results.length} requests answered (${unavailable} with 503), the rest refused at connect`);
  assert.ok(answered > 0, 'some requests were answered before the stop');
  await new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    s.on('connect', () => { s.destroy(); reject(new Error('the port still accepts connections')); });
    s.on('error', () => resolve());
  });
});
