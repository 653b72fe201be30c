// admin.test.mjs - the operator API: tenants (create returns the API key once; list; get by id or
// name; update; disable), API keys (create, list without secrets, revoke), quotas (replace, get), with
// 400 for invalid input, 404 for unknown tenants and keys, 409 for a duplicate name.
import test from 'node:test';
import assert from 'node:assert/strict';
import { startStack, errorOf, dumpLogOnFailure } from '../lib/gateway.mjs';

const stack = await startStack({ threads: 1 });
test.after(async () => { dumpLogOnFailure(stack); await stack.stop(); });
const token = stack.adminToken();
const call = (method, path, body) => stack.request(method, path, { token, body });

test('tenants: create, list, get, update, duplicate, invalid', async () => {
  let res = await call('POST', '/admin/v1/tenants', { name: 'umbrella', weight: 2.5, rate_per_s: 7, rate_burst: 9, max_active_jobs: 3 });
  assert.equal(res.status, 200, res.text);
  const t = res.json;
  assert.match(t.id, /^tenant-/);
  assert.deepEqual([t.object, t.name, t.weight, t.rate_per_s, t.rate_burst, t.max_active_jobs, t.disabled],
                   ['tenant', 'umbrella', 2.5, 7, 9, 3, false]);
  assert.match(t.api_key, /^sk-whet-/);
  // the key is stored hashed, only its prefix in clear
  assert.equal(stack.psql(`SELECT key_prefix = '${t.api_key.slice(0, 16)}' AND key_hash = sha256('${t.api_key}'::bytea) FROM api_keys WHERE tenant_id = '${t.id}'`), 't');
  assert.equal((await stack.request('GET', '/v1/whoami', { key: t.api_key })).status, 200);

  res = await call('GET', '/admin/v1/tenants');
  assert.equal(res.status, 200);
  assert.equal(res.json.object, 'list');
  assert.ok(res.json.data.some((x) => x.id === t.id && !('api_key' in x)));
  for (const ref of [t.id, 'umbrella']) {
    res = await call('GET', `/admin/v1/tenants/${ref}`);
    assert.equal(res.status, 200);
    assert.equal(res.json.id, t.id);
  }
  res = await call('POST', `/admin/v1/tenants/umbrella`, { weight: 4, disabled: true });
  assert.deepEqual([res.status, res.json.weight, res.json.disabled, res.json.rate_burst], [200, 4, true, 9]);

  res = await call('POST', '/admin/v1/tenants', { name: 'umbrella' });
  assert.equal(res.status, 409);
  assert.equal(errorOf(res).param, 'name');
  for (const [body, param] of [[{}, 'name'], [{ name: 'bad name!' }, 'name'], [{ name: 'x'.repeat(65) }, 'name'],
                               [{ name: 'ok1', weight: 0 }, 'weight'], [{ name: 'ok2', rate_burst: 1.5 }, 'rate_burst'],
                               [{ name: 'ok3', colour: 'red' }, 'colour']]) {
    res = await call('POST', '/admin/v1/tenants', body);
    assert.equal(res.status, 400, JSON.stringify(body));
    assert.equal(errorOf(res).param, param);
  }
  assert.equal(stack.psql("SELECT count(*) FROM tenants WHERE name LIKE 'ok%'"), '0', 'rejected creates left no row');
  assert.equal((await call('GET', '/admin/v1/tenants/nobody')).status, 404);
  assert.equal((await call('POST', '/admin/v1/tenants/nobody/disable')).status, 404);
});

test('API keys: create, list without secrets, revoke', async () => {
  const t = await stack.createTenant('keys-co');
  let res = await call('POST', `/admin/v1/tenants/${t.name}/api_keys`);
  assert.equal(res.status, 200, res.text);
  const k = res.json;
  assert.match(k.key, /^sk-whet-/);
  assert.equal(k.tenant_id, t.id);
  res = await call('GET', `/admin/v1/tenants/${t.id}/api_keys`);
  assert.equal(res.status, 200);
  assert.equal(res.json.data.length, 2);
  assert.ok(res.json.data.every((x) => !('key' in x) && x.prefix.length === 16));
  res = await call('DELETE', `/admin/v1/tenants/${t.id}/api_keys/${k.id}`);
  assert.equal(res.status, 200);
  assert.equal((await call('DELETE', `/admin/v1/tenants/${t.id}/api_keys/key-doesnotexist`)).status, 404);
  const other = await stack.createTenant('keys-other');
  assert.equal((await call('DELETE', `/admin/v1/tenants/${other.id}/api_keys/${t.keyId}`)).status, 404,
               "a key is revoked only through its own tenant");
  assert.equal((await stack.request('GET', '/v1/whoami', { key: t.key })).status, 200);
  assert.equal((await call('GET', '/admin/v1/tenants/nobody/api_keys')).status, 404);
  assert.equal((await call('POST', '/admin/v1/tenants/nobody/api_keys')).status, 404);
});

test('quotas: replace and get', async () => {
  const t = await stack.createTenant('quota-co');
  let res = await call('GET', `/admin/v1/tenants/${t.id}/quotas`);
  assert.deepEqual([res.status, res.json.quotas], [200, {}]);
  res = await call('PUT', `/admin/v1/tenants/${t.id}/quotas`, { quotas: { H100: 8, A100: 4 } });
  assert.deepEqual([res.status, res.json.quotas], [200, { A100: 4, H100: 8 }]);
  res = await call('PUT', `/admin/v1/tenants/quota-co/quotas`, { quotas: { L4: 2 } });
  assert.deepEqual(res.json.quotas, { L4: 2 }, 'replaced, not merged');
  for (const body of [{ quotas: { H100: -1 } }, { quotas: { H100: 1.5 } }, { quotas: [] }, { H100: 2 }]) {
    res = await call('PUT', `/admin/v1/tenants/${t.id}/quotas`, body);
    assert.equal(res.status, 400, JSON.stringify(body));
  }
  assert.deepEqual((await call('GET', `/admin/v1/tenants/${t.id}/quotas`)).json.quotas, { L4: 2 }, 'bad puts changed nothing');
  assert.equal((await call('PUT', '/admin/v1/tenants/nobody/quotas', { quotas: { H100: 1 } })).status, 404);
  assert.equal(stack.psql("SELECT count(*) FROM quotas WHERE gpu_type = 'H100'"), '0');
});
