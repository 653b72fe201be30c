// auth.test.mjs - the gateway's front door against a real PostgreSQL: every way credentials can be
// wrong is a 401 with an OpenAI error body (API keys: missing, malformed, unknown, revoked, disabled
// tenant; JWTs: alg none, algorithm confusion with the RS256 public key as HMAC secret, wrong key,
// tampered payload, expired, not yet valid, no exp, wrong issuer or audience, unknown tenant), the
// operator API refuses tenant credentials and operator tokens stay out of the tenant API, RS256 and
// ES256 tokens verify with their pinned public keys, and each request's database session is scoped to
// its own tenant (whet.tenant_id) even when tenants interleave on the same connections.
import test from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startStack, startGateway, signJwt, now, request, errorOf, dumpLogOnFailure } from '../lib/gateway.mjs';

const ISS = 'whet-test-issuer', AUD = 'whet-test-api';
const stack = await startStack({ env: { WHET_JWT_ISSUER: ISS, WHET_JWT_AUDIENCE: AUD } });
const extra = [];
test.after(async () => {
  dumpLogOnFailure(stack);
  for (const g of extra) await g.stop();
  const { code } = await stack.stop();
  assert.equal(code, 0, 'the gateway exits 0 on SIGTERM');
});

const acme = await stack.createTenant('acme');
const globex = await stack.createTenant('globex');

function expect401(res, what, messagePart) {
  assert.equal(res.status, 401, `${what}: status ${res.status} ${res.text}`);
  const e = errorOf(res);
  assert.equal(e.type, 'authentication_error', what);
  assert.equal(res.headers.get('www-authenticate'), 'Bearer', what);
  if (messagePart) assert.match(e.message, messagePart, what);
  // nothing about other tenants leaks into a refusal
  assert.ok(!res.text.includes(globex.id) && !res.text.includes('globex'), `${what}: mentions another tenant`);
  return e;
}

const whoami = (opts) => stack.request('GET', '/v1/whoami', opts);

test('valid API key and tenant token are accepted, scoped to their tenant', async () => {
  let res = await whoami({ key: acme.key });
  assert.equal(res.status, 200, res.text);
  assert.deepEqual([res.json.tenant_id, res.json.tenant, res.json.auth, res.json.database_tenant],
                   [acme.id, 'acme', 'key', acme.id]);
  res = await whoami({ token: stack.tenantToken('globex') });
  assert.equal(res.status, 200, res.text);
  assert.deepEqual([res.json.tenant_id, res.json.auth, res.json.database_tenant], [globex.id, 'jwt', globex.id]);
  res = await whoami({ token: stack.tenantToken('globex', { tenant: undefined, sub: 'acme' }) });
  assert.equal(res.json.tenant_id, acme.id, 'sub names the tenant when there is no tenant claim');
});

test('API key failures', async () => {
  expect401(await whoami({}), 'no header', /missing Authorization/);
  expect401(await whoami({ headers: { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` } }), 'basic auth');
  expect401(await whoami({ headers: { authorization: 'Bearer ' } }), 'empty bearer');
  expect401(await whoami({ key: 'sk-whet-' + 'A'.repeat(43) }), 'unknown key', /invalid API key/);
  expect401(await whoami({ key: acme.key.slice(0, -1) + (acme.key.endsWith('A') ? 'B' : 'A') }), 'same prefix, other key');
  expect401(await whoami({ key: 'sk-whet-short' }), 'malformed key');
});

test('a revoked key stops working at once; other keys of the tenant keep working', async () => {
  const admin = stack.adminToken();
  let res = await stack.request('POST', `/admin/v1/tenants/${acme.id}/api_keys`, { token: admin });
  assert.equal(res.status, 200, res.text);
  const second = res.json;
  assert.match(second.key, /^sk-whet-[A-Za-z0-9_-]{43}$/);
  for (let i = 0; i < 4; i++) assert.equal((await whoami({ key: second.key })).status, 200); // cached on the loops
  res = await stack.request('DELETE', `/admin/v1/tenants/${acme.id}/api_keys/${second.id}`, { token: admin });
  assert.equal(res.status, 200, res.text);
  assert.equal(typeof res.json.revoked_at, 'number');
  for (let i = 0; i < 4; i++) expect401(await whoami({ key: second.key }), 'revoked key', /revoked/);
  assert.equal((await whoami({ key: acme.key })).status, 200);
});

test('a disabled tenant is refused with key and token, and admitted again once enabled', async () => {
  const admin = stack.adminToken();
  const t = await stack.createTenant('initech');
  assert.equal((await whoami({ key: t.key })).status, 200);
  let res = await stack.request('POST', `/admin/v1/tenants/${t.id}/disable`, { token: admin });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.json.disabled, true);
  expect401(await whoami({ key: t.key }), 'disabled (key)', /disabled/);
  expect401(await whoami({ token: stack.tenantToken('initech') }), 'disabled (token)', /disabled/);
  res = await stack.request('POST', `/admin/v1/tenants/${t.id}/enable`, { token: admin });
  assert.equal(res.status, 200);
  assert.equal((await whoami({ key: t.key })).status, 200);
});

test('JWT failures (HS256 pinned)', async () => {
  const key = stack.jwtSecret;
  const good = stack.claims({ tenant: 'acme' });
  const [h, p] = signJwt(good, { key }).split('.');
  expect401(await whoami({ token: signJwt(good, { alg: 'none', header: { alg: 'none', typ: 'JWT' } }) }), 'alg none');
  expect401(await whoami({ token: `${h.replace(/./g, (c) => c)}.${p}.` }), 'stripped signature');
  const noneHeader = Buffer.from(JSON.stringify({ alg: 'none' })).toString('base64url');
  expect401(await whoami({ token: `${noneHeader}.${p}.${signJwt(good, { key }).split('.')[2]}` }), 'alg none, HS sig');
  expect401(await whoami({ token: signJwt(good, { key: 'another-secret-of-some-length' }) }), 'wrong secret', /signature/);
  const tampered = Buffer.from(JSON.stringify({ ...good, tenant: 'globex' })).toString('base64url');
  expect401(await whoami({ token: `${h}.${tampered}.${signJwt(good, { key }).split('.')[2]}` }), 'tampered payload');
  expect401(await whoami({ token: signJwt({ ...good, exp: now() - 3600 }, { key }) }), 'expired', /expired/);
  const { exp, ...noExp } = good;
  expect401(await whoami({ token: signJwt(noExp, { key }) }), 'no exp', /exp/);
  expect401(await whoami({ token: signJwt({ ...good, exp: 'tomorrow' }, { key }) }), 'exp not a number');
  expect401(await whoami({ token: signJwt({ ...good, nbf: now() + 3600 }, { key }) }), 'nbf in the future', /not valid before/);
  expect401(await whoami({ token: signJwt({ ...good, iss: 'someone-else' }, { key }) }), 'wrong issuer', /issuer/);
  const { iss, ...noIss } = good;
  expect401(await whoami({ token: signJwt(noIss, { key }) }), 'no issuer', /issuer/);
  expect401(await whoami({ token: signJwt({ ...good, aud: 'other-api' }, { key }) }), 'wrong audience', /audience/);
  expect401(await whoami({ token: signJwt({ ...good, aud: ['x', 'y'] }, { key }) }), 'audience list without ours');
  assert.equal((await whoami({ token: signJwt({ ...good, aud: ['x', AUD] }, { key }) })).status, 200, 'audience list with ours');
  expect401(await whoami({ token: signJwt({ ...good, tenant: 'no-such-tenant' }, { key }) }), 'unknown tenant');
  expect401(await whoami({ token: signJwt({ ...good, tenant: undefined }, { key }) }), 'no tenant claim');
  expect401(await whoami({ token: 'not.a.jwt' }), 'garbage');
  expect401(await whoami({ token: 'onlyonepart' }), 'one part');
});

test('the operator API refuses tenant credentials; tenant routes refuse operator tokens', async () => {
  for (const [what, opts] of [['api key', { key: acme.key }], ['tenant token', { token: stack.tenantToken('acme') }],
                              ['forged admin claim', { token: signJwt(stack.claims({ admin: true }), { key: 'wrong-secret-wrong-secret' }) }],
                              ['no credentials', {}]]) {
    expect401(await stack.request('GET', '/admin/v1/tenants', opts), `admin list with ${what}`);
    expect401(await stack.request('POST', '/admin/v1/tenants', { ...opts, body: { name: 'evil' } }), `admin create with ${what}`);
  }
  assert.equal((await stack.request('GET', '/admin/v1/tenants/evil', { token: stack.adminToken() })).status, 404);
  expect401(await whoami({ token: stack.adminToken() }), 'operator token on the tenant API', /operator tokens/);
  expect401(await stack.request('GET', '/admin/v1/tenants', { token: stack.adminToken({ exp: now() - 10000 }) }), 'expired admin');
});

test('each request runs in its own tenant scope while tenants interleave on shared connections', async () => {
  const tenants = [acme, globex];
  const results = await Promise.all(Array.from({ length: 60 }, (_, i) => whoami({ key: tenants[i % 2].key })));
  results.forEach((res, i) => {
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.tenant_id, tenants[i % 2].id);
    assert.equal(res.json.database_tenant, tenants[i % 2].id, `request ${i} ran in another tenant's scope`);
  });
});

test('RS256 pinned: RSA tokens verify; HS256 signed with the public key PEM (algorithm confusion) does not', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'whet-jwt-'));
  const { publicKey, privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const pem = publicKey.export({ type: 'spki', format: 'pem' });
  fs.writeFileSync(path.join(dir, 'rsa.pub.pem'), pem);
  const gw = await startGateway({ databaseUrl: stack.databaseUrl, env: { WHET_JWT_ALG: 'RS256',
    WHET_JWT_KEY: path.join(dir, 'rsa.pub.pem'), WHET_JWT_ISSUER: '', WHET_JWT_AUDIENCE: '' } });
  extra.push(gw);
  const claims = { tenant: 'acme', exp: now() + 600 };
  let res = await request(gw.url, 'GET', '/v1/whoami', { token: signJwt(claims, { alg: 'RS256', key: privateKey }) });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.json.tenant_id, acme.id);
  expect401(await request(gw.url, 'GET', '/v1/whoami', { token: signJwt(claims, { alg: 'HS256', key: pem }) }), 'confusion', /RS256/);
  const other = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
  expect401(await request(gw.url, 'GET', '/v1/whoami', { token: signJwt(claims, { alg: 'RS256', key: other }) }), 'other RSA key');
  expect401(await request(gw.url, 'GET', '/v1/whoami', { token: signJwt(claims, { alg: 'none', header: { alg: 'none' } }) }), 'none');
  expect401(await request(gw.url, 'GET', '/v1/whoami', { token: signJwt({ ...claims, exp: now() - 100 }, { alg: 'RS256', key: privateKey }) }), 'expired RS256');
  fs.rmSync(dir, { recursive: true, force: true });
});

test('ES256 pinned: EC tokens verify, RS256 ones do not', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'whet-jwt-'));
  const { publicKey, privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  fs.writeFileSync(path.join(dir, 'ec.pub.pem'), publicKey.export({ type: 'spki', format: 'pem' }));
  const gw = await startGateway({ databaseUrl: stack.databaseUrl, env: { WHET_JWT_ALG: 'ES256',
    WHET_JWT_KEY: path.join(dir, 'ec.pub.pem'), WHET_JWT_ISSUER: '', WHET_JWT_AUDIENCE: '' } });
  extra.push(gw);
  const claims = { tenant: 'globex', exp: now() + 600 };
  const res = await request(gw.url, 'GET', '/v1/whoami', { token: signJwt(claims, { alg: 'ES256', key: privateKey }) });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.json.tenant_id, globex.id);
  const rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
  expect401(await request(gw.url, 'GET', '/v1/whoami', { token: signJwt(claims, { alg: 'RS256', key: rsa }) }), 'RS256 on ES256');
  const tampered = signJwt(claims, { alg: 'ES256', key: privateKey }).split('.');
  tampered[1] = Buffer.from(JSON.stringify({ ...claims, tenant: 'acme' })).toString('base64url');
  expect401(await request(gw.url, 'GET', '/v1/whoami', { token: tampered.join('.') }), 'tampered ES256');
  fs.rmSync(dir, { recursive: true, force: true });
});
