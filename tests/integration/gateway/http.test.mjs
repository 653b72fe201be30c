// http.test.mjs - what every route shares: request ids (accepted when sane, generated otherwise,
// always echoed), OpenAI error bodies for unknown paths (404), wrong methods (405), malformed JSON
// (400) and oversize bodies (413, before authentication), /healthz, /readyz, and /metrics with
// per-route counters, a duration histogram and database pool gauges aggregated over threads.
import test from 'node:test';
import assert from 'node:assert/strict';
import { startStack, errorOf, dumpLogOnFailure } from '../lib/gateway.mjs';

const stack = await startStack({ threads: 2 });
test.after(async () => { dumpLogOnFailure(stack); await stack.stop(); });
const admin = stack.adminToken();

test('x-request-id is echoed, generated when absent or unacceptable', async () => {
  let res = await stack.request('GET', '/healthz', { headers: { 'x-request-id': 'abc-123.X_y:z' } });
  assert.equal(res.headers.get('x-request-id'), 'abc-123.X_y:z');
  res = await stack.request('GET', '/healthz');
  const generated = res.headers.get('x-request-id');
  assert.match(generated, /^req_[A-Za-z0-9]{24}$/);
  assert.notEqual((await stack.request('GET', '/healthz')).headers.get('x-request-id'), generated);
  res = await stack.request('GET', '/healthz', { headers: { 'x-request-id': 'x'.repeat(200) } });
  assert.match(res.headers.get('x-request-id'), /^req_/);
  res = await stack.request('GET', '/v1/whoami', { headers: { 'x-request-id': 'trace-401' } });
  assert.equal(res.status, 401);
  assert.equal(res.headers.get('x-request-id'), 'trace-401', 'errors carry it too');
  // Request lines are written at the end of the loop iteration that answered, just after the answer.
  const logged = () => stack.gateway.lines.some((l) => l.includes('request_id=trace-401') && l.includes('status=401') &&
                                                     l.includes('route="/v1/whoami"'));
  for (let i = 0; i < 100 && !logged(); i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(logged(), 'one log line with the request id');
});

test('unknown paths 404, wrong methods 405, with OpenAI error bodies', async () => {
  let res = await stack.request('GET', '/v1/nope', { key: 'x' });
  assert.equal(res.status, 404);
  assert.equal(errorOf(res).type, 'invalid_request_error');
  res = await stack.request('DELETE', '/healthz');
  assert.equal(res.status, 405);
  errorOf(res);
});

test('malformed JSON and non-object bodies are 400 invalid_request_error', async () => {
  for (const body of ['{"name": ', '[1,2]', '', '{"name":"a","name":"b"}']) {
    const res = await stack.request('POST', '/admin/v1/tenants', { token: admin, body, headers: { 'content-type': 'application/json' } });
    assert.equal(res.status, 400, `body ${JSON.stringify(body)}: ${res.text}`);
    const e = errorOf(res);
    assert.equal(e.type, 'invalid_request_error');
    assert.equal(e.code, 'invalid_json');
  }
  const res = await stack.request('POST', '/admin/v1/tenants', { token: admin, body: { name: 'ok', weight: 'heavy' } });
  assert.equal(res.status, 400);
  assert.equal(errorOf(res).param, 'weight');
});

test('oversize bodies are 413 with an OpenAI body, before authentication', async () => {
  const big = JSON.stringify({ name: 'x', pad: 'y'.repeat(2 << 20) });
  for (const opts of [{ token: admin }, {}]) {
    const res = await stack.request('POST', '/admin/v1/tenants', { ...opts, body: big, headers: { 'content-type': 'application/json' } });
    assert.equal(res.status, 413, res.text.slice(0, 200));
    assert.equal(errorOf(res).type, 'invalid_request_error');
  }
  assert.equal(stack.psql("SELECT count(*) FROM tenants WHERE name = 'x'"), '0');
});

test('healthz and readyz', async () => {
  let res = await stack.request('GET', '/healthz');
  assert.deepEqual([res.status, res.json.status], [200, 'ok']);
  res = await stack.request('GET', '/readyz');
  assert.deepEqual([res.status, res.json.status], [200, 'ready']);
});

test('metrics count requests by route and code, with histograms and pool gauges', async () => {
  for (let i = 0; i < 7; i++) await stack.request('GET', '/v1/whoami');
  const res = await stack.request('GET', '/metrics');
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/plain/);
  const m = res.text.match(/^whet_http_requests_total\{route="\/v1\/whoami",code="401"\} (\d+)$/m);
  assert.ok(m && Number(m[1]) >= 7, 'whoami 401s counted over all threads');
  const inf = res.text.match(/^whet_http_request_duration_seconds_bucket\{route="\/v1\/whoami",le="\+Inf"\} (\d+)$/m);
  const count = res.text.match(/^whet_http_request_duration_seconds_count\{route="\/v1\/whoami"\} (\d+)$/m);
  assert.ok(inf && count && inf[1] === count[1] && Number(count[1]) >= 7);
  assert.match(res.text, /^whet_db_connections_up\{pool="tenant"\} 4$/m, '2 threads x 2 tenant connections');
  assert.match(res.text, /^whet_db_connections\{pool="admin"\} 2$/m);
  assert.match(res.text, /^whet_http_requests_total\{route="unmatched",code="404"\} \d+$/m);
  const byCode = res.text.match(/^whet_http_errors_total\{code="missing_authorization"\} (\d+)$/m);
  assert.ok(byCode && Number(byCode[1]) >= 7, 'error answers counted by their code');
});
