// audit.mjs - the audit log (migration 0014, gateway/audit.c) against a real gateway and PostgreSQL:
// each audited action (tenant create/update/disable/enable, operator and tenant API key create and
// revoke, quotas, budget, a price book, failed authentications past the threshold) is read back at
// GET /admin/v1/audit with its actor, target, tenant, request id and detail; the filters (tenant,
// action, actor, time range) and keyset pages, at once (the answer waits for its row); a failure or a
// read is not recorded; tenants cannot read the log; and no role can rewrite it: the application role
// lacks UPDATE and DELETE, and the trigger refuses them (and TRUNCATE) even for the owner.
import { startStack, client, checker } from './harness.mjs';
import { sleep } from '../lib/gateway.mjs';

const { check, summary, failed } = checker();
const stack = await startStack();
try {
  const a = client(stack, 'alpha');
  const op = (method, path, opts = {}) => a(method, path, { ...opts, key: stack.adminToken() });
  const audit = async (query = '') => (await op('GET', `/admin/v1/audit${query}`)).json;
  // An audited action is answered once its row is committed, so it is read back at once; an
  // auth.failures row is written alongside the 401: wait until `n` entries match the query.
  const until = async (query, n) => {
    for (let i = 0; i < 100; i++) {
      const r = await audit(query);
      if (r?.data?.length >= n) return r;
      await sleep(50);
    }
    return audit(query);
  };
  const t0 = Math.floor(Date.now() / 1000);
  const alphaId = stack.psql(`SELECT id FROM tenants WHERE name = 'alpha'`);

  let r = await op('POST', '/admin/v1/tenants', { json: { name: 'gamma', weight: 2 }, headers: { 'x-request-id': 'req-audit-create' } });
  check(r.status === 200, 'tenant created', r.text);
  const gamma = r.json.id, gammaKey = r.json.api_key_id;
  let l = await audit('?action=tenant.create&tenant=gamma');
  let e = l.data[0];
  check(l.data.length === 1 && e.object === 'audit_entry' && e.actor === 'operator' && e.target === gamma &&
        e.tenant_id === gamma && e.request_id === 'req-audit-create' && e.detail.request?.name === 'gamma' &&
        e.detail.request.weight === 2 && e.at >= t0 - 1, 'tenant.create: actor, target, tenant, request id, detail', l);
  check(!JSON.stringify(l).includes('sk-whet-'), 'the new key is not in the log', l);

  check((await op('POST', '/admin/v1/tenants/gamma', { json: { rate_per_s: 7 } })).status === 200, 'tenant updated');
  check((await op('POST', '/admin/v1/tenants/gamma/disable')).status === 200, 'tenant disabled');
  check((await op('POST', '/admin/v1/tenants/gamma/enable')).status === 200, 'tenant enabled');
  r = await op('POST', '/admin/v1/tenants/gamma/api_keys', { json: { name: 'ci' } });
  check(r.status === 200, 'operator key created', r.text);
  const opKey = r.json.id;
  check((await op('DELETE', `/admin/v1/tenants/gamma/api_keys/${opKey}`)).status === 200, 'operator key revoked');
  check((await op('PUT', '/admin/v1/tenants/gamma/quotas', { json: { quotas: { cpu: 2 } } })).status === 200, 'quotas set');
  check((await op('PUT', '/admin/v1/tenants/gamma/budget', { json: { monthly_limit: 10 } })).status === 200, 'budget set');
  r = await op('POST', '/admin/v1/prices', { json: { effective_from: 0, currency: 'EUR', prices: { device_hour: { cpu: 1 } } } });
  check(r.status === 200, 'price book created', r.text);
  const book = String(r.json.version);
  // A tenant's own keys: the actor is the key that acted.
  r = await a('POST', '/v1/api_keys', { json: { name: 'mine' } });
  check(r.status === 200, 'tenant key created', r.text);
  const mine = r.json.id;
  check((await a('DELETE', `/v1/api_keys/${mine}`)).status === 200, 'tenant key revoked');
  // Not recorded: failures and reads.
  check((await op('POST', '/admin/v1/tenants/nobody/disable')).status === 404, 'disabling an unknown tenant: 404');
  check((await op('GET', '/admin/v1/tenants/gamma')).status === 200, 'a read');

  l = await audit('?tenant=gamma');
  const actions = l.data.map((x) => x.action);
  check(JSON.stringify(actions) === JSON.stringify(['budget.set', 'quota.set', 'api_key.revoke', 'api_key.create',
    'tenant.enable', 'tenant.disable', 'tenant.update', 'tenant.create']), 'gamma: every action, newest first', actions);
  check(l.data.every((x) => x.tenant_id === gamma && x.actor === 'operator'), 'gamma: by id though named by name', l.data);
  const by = (act) => l.data.find((x) => x.action === act);
  check(by('tenant.update')?.detail.request?.rate_per_s === 7 && by('tenant.update').target === 'gamma', 'update: the fields', by('tenant.update'));
  check(by('api_key.create')?.target === opKey && by('api_key.revoke')?.target === opKey, 'operator key: create and revoke target it', l.data);
  check(by('quota.set')?.detail.request?.quotas?.cpu === 2 && by('budget.set')?.detail.request?.monthly_limit === 10,
        'quota and budget: the values', l.data);
  check(new Set(l.data.map((x) => x.request_id)).size === 8, 'each entry has its own request id', l.data);
  l = await audit('?action=price_book.create');
  check(l.data.length === 1 && l.data[0].target === book && l.data[0].tenant_id === null, 'price book: no tenant', l.data);
  l = await audit(`?tenant=${alphaId}&action=api_key.create`);
  const tenantCreates = l.data.filter((x) => x.target === mine);
  const alphaKeys = stack.psql(`SELECT string_agg(id, ',') FROM api_keys WHERE tenant_id = '${alphaId}' AND id <> '${mine}'`).split(',');
  check(tenantCreates.length === 1 && alphaKeys.includes(tenantCreates[0].actor), 'tenant key create: the key that acted is the actor', l.data);
  const alphaKeyId = tenantCreates[0]?.actor;
  l = await audit(`?actor=${alphaKeyId}`);
  check(l.data.length === 2 && l.data.map((x) => x.action).join() === 'api_key.revoke,api_key.create' &&
        l.data.every((x) => x.tenant_id === alphaId), 'filter by actor: the tenant key\'s two actions', l.data);
  check((await audit('?action=tenant.disable')).data.length === 1, 'the 404 disable is not recorded');

  // Failed authentications: one entry when an address reaches 5 in a minute, none before.
  for (let i = 0; i < 4; i++) check((await a('GET', '/v1/files', { key: 'sk-whet-nope' })).status === 401, `bad key ${i}: 401`);
  await sleep(300);
  check((await audit('?action=auth.failures')).data.length === 0, '4 failures: not yet recorded');
  check((await a('GET', '/v1/models', { key: 'not-a-token' })).status === 401, 'bad key 5: 401');
  for (let i = 0; i < 3; i++) await a('GET', '/v1/files', { key: 'sk-whet-nope' });
  l = await until('?action=auth.failures', 1);
  await sleep(300);
  l = await audit('?action=auth.failures');
  e = l.data[0];
  check(l.data.length === 1 && e.actor === 'anonymous' && /^(127\.0\.0\.1|::1|::ffff:127\.0\.0\.1)$/.test(e.target) &&
        e.detail.failures === 5 && e.detail.window_s === 60, 'auth.failures: one entry naming the address', l.data);

  // Time range and keyset pages over everything.
  const all = (await audit('?limit=1000')).data;
  check(all.length >= 13, 'all entries', all.length);
  check((await audit(`?until=${t0 - 5}`)).data.length === 0 && (await audit(`?since=${t0 - 5}&limit=1000`)).data.length === all.length,
        'time range: since and until');
  check((await audit(`?since=${Math.floor(Date.now() / 1000) + 60}`)).data.length === 0, 'since in the future: nothing');
  const pages = [];
  let after = '';
  for (let i = 0; i < 100; i++) {
    const p = await audit(`?limit=3${after}`);
    check(p.data.length <= 3, 'a page holds at most limit', p.data.length);
    pages.push(...p.data.map((x) => x.id));
    if (!p.has_more) { check(p.last_id === p.data.at(-1)?.id || p.data.length === 0, 'last page: last_id'); break; }
    after = `&after=${p.last_id}`;
  }
  check(JSON.stringify(pages) === JSON.stringify(all.map((x) => x.id)), 'pages of 3 walk every entry once, newest first', [pages, all.map((x) => x.id)]);
  r = await op('GET', '/admin/v1/audit?limit=0');
  check(r.status === 400 && r.json?.error?.param === 'limit', 'limit=0: 400', r.json);
  r = await op('GET', '/admin/v1/audit?since=soon');
  check(r.status === 400 && r.json?.error?.param === 'since', 'since=soon: 400', r.json);
  r = await a('GET', '/admin/v1/audit');
  check(r.status === 401, 'a tenant key cannot read the log', r.status);

  // Append-only: the application role lacks the privilege, and the trigger refuses even the owner.
  const refused = (sql) => { try { stack.psql(sql); return ''; } catch (err) { return String(err.stderr || err.message); } };
  const count = () => stack.psql('SELECT count(*) FROM audit_log');
  const before = count();
  for (const sql of ["UPDATE audit_log SET action = 'forged'", 'DELETE FROM audit_log', 'TRUNCATE audit_log']) {
    const asApp = refused(`SET ROLE whet_app; ${sql}`);
    check(/permission denied/.test(asApp), `whet_app: ${sql} refused`, asApp);
    const asOwner = refused(sql);
    check(/append-only/.test(asOwner), `owner: ${sql} refused by the trigger`, asOwner);
  }
  check(/permission denied/.test(refused('SET ROLE whet_app; SELECT count(*) FROM audit_log')), 'whet_app cannot read the log');
  check(stack.psql("SET ROLE whet_app; INSERT INTO audit_log (actor, action, request_id) VALUES ('x', 'test.insert', 'r') ; SELECT 1") === '1',
        'whet_app may append');
  check(count() === String(Number(before) + 1) && stack.psql("SELECT count(*) FROM audit_log WHERE action = 'forged'") === '0',
        'nothing changed but the append', count());
} catch (err) {
  check(false, 'unexpected exception', err.stack);
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
}
process.exit(summary());
