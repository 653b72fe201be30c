// ratelimit.test.mjs - per-tenant token buckets (tenants.rate_per_s, rate_burst) shared by every
// event loop: a burst passes, the next request is a 429 with an OpenAI body and a retry-after header,
// the bucket refills at the tenant's rate, and another tenant is not affected.
import test from 'node:test';
import assert from 'node:assert/strict';
import { startStack, errorOf, sleep, dumpLogOnFailure } from '../lib/gateway.mjs';

const stack = await startStack({ threads: 2 });
test.after(async () => { dumpLogOnFailure(stack); await stack.stop(); });

test('burst, then 429 with retry-after, then refill; tenants are independent', async () => {
  const slow = await stack.createTenant('slow', { rate_per_s: 2, rate_burst: 5 });
  const other = await stack.createTenant('other', { rate_per_s: 2, rate_burst: 5 });
  // Parallel requests land on both loops: the limit must hold for the process, not per thread.
  const first = await Promise.all(Array.from({ length: 8 }, () => stack.request('GET', '/v1/whoami', { key: slow.key })));
  const ok = first.filter((r) => r.status === 200).length;
  const limited = first.filter((r) => r.status === 429);
  assert.equal(ok, 5, `burst of 5 allowed, got ${first.map((r) => r.status)}`);
  assert.equal(limited.length, 3);
  for (const res of limited) {
    const e = errorOf(res);
    assert.equal(e.type, 'rate_limit_error');
    assert.equal(e.code, 'rate_limit_exceeded');
    const retry = Number(res.headers.get('retry-after'));
    assert.ok(Number.isInteger(retry) && retry >= 1 && retry <= 2, `retry-after ${res.headers.get('retry-after')}`);
  }
  assert.equal((await stack.request('GET', '/v1/whoami', { key: other.key })).status, 200, 'other tenant unaffected');
  await sleep(1100); // 2 tokens per second
  assert.equal((await stack.request('GET', '/v1/whoami', { key: slow.key })).status, 200, 'refilled');
  // the operator raises the limit: applied at once (the auth cache is invalidated)
  const res = await stack.request('POST', `/admin/v1/tenants/${slow.id}`, { token: stack.adminToken(), body: { rate_per_s: 1000, rate_burst: 1000 } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.json.rate_burst, 1000);
  const after = await Promise.all(Array.from({ length: 20 }, () => stack.request('GET', '/v1/whoami', { key: slow.key })));
  assert.ok(after.every((r) => r.status === 200), `after raising: ${after.map((r) => r.status)}`);
  const metrics = (await stack.request('GET', '/metrics')).text;
  assert.match(metrics, /^whet_http_requests_total\{route="\/v1\/whoami",code="429"\} 3$/m);
});
