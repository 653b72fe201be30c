// scopes.mjs - scoped API keys against a real gateway: an operator and a tenant make keys limited to
// read-only, files, jobs or inference, with an optional expiry; each route answers a key without the
// scope it needs with a 403 naming that scope and lets the right one through; a scoped key cannot make
// keys; an expired key is refused (also when it was cached), a revoked one too; bad bodies are 400s
// naming the field. (Every registered route's scope is checked without HTTP by gateway_scopes.)
import { startStack, client, multipart, checker, SFT_LINE } from './harness.mjs';

const { check, summary, failed } = checker();
const stack = await startStack();
const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
try {
  const a = client(stack, 'alpha');
  const op = (method, path, opts = {}) => a(method, path, { ...opts, key: stack.adminToken() });
  const as = (key) => (method, path, opts = {}) => a(method, path, { ...opts, key });
  const makeKey = async (body) => {
    const r = await op('POST', '/admin/v1/tenants/alpha/api_keys', { json: body });
    if (r.status !== 200) throw new Error(`key create: ${r.text}`);
    return r.json;
  };
  const readKey = await makeKey({ scopes: ['read'], name: 'dashboard' });
  check(JSON.stringify(readKey.scopes) === '["read"]' && readKey.name === 'dashboard' && readKey.expires_at === null &&
        /^sk-whet-/.test(readKey.key), 'operator: a read-only key', readKey);
  const filesKey = (await makeKey({ scopes: ['files'] })).key;
  const jobsKey = (await makeKey({ scopes: ['jobs'] })).key;
  const bothKey = (await makeKey({ scopes: ['files', 'jobs'] })).key;
  const infKey = (await makeKey({ scopes: ['inference'] })).key;
  let r = await op('POST', '/admin/v1/tenants/alpha/api_keys');
  check(r.status === 200 && JSON.stringify(r.json.scopes) === '["all"]', 'operator: no body, an unrestricted key', r.json);
  for (const [body, param] of [[{ scopes: ['admin'] }, 'scopes'], [{ scopes: [] }, 'scopes'], [{ scopes: 'read' }, 'scopes'],
    [{ scopes: [1] }, 'scopes'], [{ expires_at: 5 }, 'expires_at'], [{ expires_at: 'tomorrow' }, 'expires_at'],
    [{ name: 7 }, 'name'], [{ colour: 'red' }, 'colour']]) {
    r = await op('POST', '/admin/v1/tenants/alpha/api_keys', { json: body });
    check(r.status === 400 && r.json?.error?.param === param, `operator key ${JSON.stringify(body)}: 400 naming ${param}`, r.json);
  }

  const m = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: 'd.jsonl', value: `${SFT_LINE}\n` }]);
  const upload = (api) => api('POST', '/v1/files', { body: m.body, headers: { 'content-type': m.type } });
  const createJob = (api, file) => api('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: file } });

  // files: upload yes, create a job no (403 naming jobs), read jobs no.
  r = await upload(as(filesKey));
  check(r.status === 200, 'files key: upload', r.text);
  const file = r.json.id;
  r = await createJob(as(filesKey), file);
  check(r.status === 403 && r.json?.error?.code === 'insufficient_scope' && r.json.error.type === 'permission_error' &&
        /needs the scope jobs/.test(r.json.error.message), 'files key: job create is a 403 naming jobs', r.json);
  r = await as(filesKey)('GET', '/v1/fine_tuning/jobs');
  check(r.status === 403 && /read or jobs/.test(r.json?.error?.message), 'files key: job list is a 403 naming read or jobs', r.json);
  // jobs: create a job yes, upload no.
  r = await createJob(as(jobsKey), file);
  check(r.status === 200, 'jobs key: job create', r.text);
  const job = r.json.id;
  r = await upload(as(jobsKey));
  check(r.status === 403 && /needs the scope files/.test(r.json?.error?.message), 'jobs key: upload is a 403 naming files', r.json);
  for (const p of [`/v1/fine_tuning/jobs/${job}`, `/v1/fine_tuning/jobs/${job}/events`, `/v1/fine_tuning/jobs/${job}/metrics`, '/v1/models']) {
    r = await as(jobsKey)('GET', p);
    check(r.status === 200, `jobs key: GET ${p}`, r.status);
  }
  // files and jobs together.
  r = await upload(as(bothKey));
  const r2 = await createJob(as(bothKey), file);
  check(r.status === 200 && r2.status === 200, 'files+jobs key: both', [r.status, r2.status]);
  // read-only: every GET, nothing else.
  for (const p of ['/v1/files', `/v1/files/${file}`, '/v1/fine_tuning/jobs', `/v1/fine_tuning/jobs/${job}/metrics`, '/v1/models',
    '/v1/usage', `/v1/costs?start_time=0&end_time=86400`, '/v1/api_keys', '/v1/whoami']) {
    r = await as(readKey.key)('GET', p);
    check(r.status === 200, `read key: GET ${p}`, [r.status, r.json?.error]);
  }
  for (const [method, p, needed] of [['POST', `/v1/fine_tuning/jobs/${job}/cancel`, 'jobs'], ['DELETE', `/v1/files/${file}`, 'files'],
    ['POST', '/v1/uploads', 'files'], ['POST', '/v1/api_keys', 'all'], ['POST', '/v1/fine_tuning/alpha/graders/validate', 'jobs']]) {
    r = await as(readKey.key)(method, p, { json: {} });
    check(r.status === 403 && r.json.error.message.endsWith(`needs the scope ${needed}`), `read key: ${method} ${p} is a 403 naming ${needed}`, r.json);
  }
  // inference: the model list, nothing of files or jobs.
  r = await as(infKey)('GET', '/v1/models');
  check(r.status === 200, 'inference key: the model list', r.status);
  r = await as(infKey)('GET', '/v1/files');
  check(r.status === 403 && /read or files/.test(r.json?.error?.message), 'inference key: files are a 403', r.json);
  r = await as(infKey)('GET', '/v1/whoami');
  check(r.status === 200 && r.json.tenant === 'alpha', 'any key: whoami', r.json);

  // A tenant makes its own keys with an unrestricted key; a scoped key cannot.
  r = await a('POST', '/v1/api_keys', { json: { scopes: ['jobs'], name: 'ci' } });
  check(r.status === 200 && JSON.stringify(r.json.scopes) === '["jobs"]' && r.json.name === 'ci' && /^sk-whet-/.test(r.json.key),
        'tenant: a jobs key of its own', r.json);
  const ciKey = r.json;
  r = await createJob(as(ciKey.key), file);
  check(r.status === 200, 'tenant-made jobs key works', r.status);
  r = await as(jobsKey)('POST', '/v1/api_keys', { json: { scopes: ['all'] } });
  check(r.status === 403 && /needs the scope all/.test(r.json?.error?.message), 'a scoped key cannot make keys', r.json);
  r = await a('POST', '/v1/api_keys', { json: { scopes: ['root'] } });
  check(r.status === 400 && r.json?.error?.param === 'scopes', 'tenant: a bad scope is a 400', r.json);
  r = await a('GET', '/v1/api_keys');
  check(r.status === 200 && r.json.data.some((k) => k.id === ciKey.id) && r.json.data.every((k) => k.key === undefined && k.tenant_id === ciKey.tenant_id),
        'tenant: its keys listed, never the secrets', r.json);
  r = await client(stack, 'beta')('DELETE', `/v1/api_keys/${ciKey.id}`);
  check(r.status === 404, 'another tenant cannot revoke it', r.status);
  r = await a('DELETE', `/v1/api_keys/${ciKey.id}`);
  check(r.status === 200 && Number.isInteger(r.json.revoked_at), 'tenant: revoke', r.json);
  r = await as(ciKey.key)('GET', '/v1/models');
  check(r.status === 401, 'a revoked key is refused at once', r.status);

  // Expiry: refused once past, also when the gateway has it cached.
  const soon = Math.floor(Date.now() / 1000) + 2;
  r = await a('POST', '/v1/api_keys', { json: { expires_at: soon } });
  check(r.status === 200 && r.json.expires_at === soon, 'a key expiring in 2 s', r.json);
  const shortKey = r.json.key;
  r = await as(shortKey)('GET', '/v1/models');
  check(r.status === 200, 'it works before', r.status);
  while (Date.now() / 1000 < soon + 0.2) await sleep(100);
  r = await as(shortKey)('GET', '/v1/models');
  check(r.status === 401 && r.json?.error?.code === 'api_key_expired', 'and is a 401 after (cached or not)', r.json);
  r = await a('POST', '/v1/api_keys', { json: { expires_at: soon - 10 } });
  check(r.status === 400 && r.json?.error?.param === 'expires_at', 'an expiry in the past is a 400', r.json);
  r = await op('GET', '/admin/v1/tenants/alpha/api_keys');
  check(r.status === 200 && r.json.data.some((k) => k.expires_at === soon) && r.json.data.some((k) => JSON.stringify(k.scopes) === '["files","jobs"]'),
        'operator: scopes and expiry listed', r.json);
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
}
process.exit(summary());
