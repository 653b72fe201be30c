// harness.mjs - the resource tests' stack, on the gateway harness (tests/integration/lib/gateway.mjs):
// a fresh database on the suite's PostgreSQL (WHET_TEST_DATABASE_URL, set by tests/run.sh), `whet
// migrate`, `whet gateway` on a free port with a file:// object store in a temp dir, two tenants
// (created through the operator API, with rate limits out of the way: the rate limit has its own
// tests) and the base model `whet-tiny` in the catalog. stop() removes everything and reports a
// gateway that did not exit cleanly (a sanitizer report). Shared by tests/integration/api and
// tests/integration/openai_sdk.
import { mkdtempSync, rmSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import * as lib from '../lib/gateway.mjs';

// Every regular file under `dir`, as paths relative to it.
export function listFiles(dir) {
  const out = [];
  const walk = (d, prefix) => {
    let entries;
    try { entries = readdirSync(d); } catch { return; }
    for (const e of entries) {
      const p = join(d, e);
      if (statSync(p).isDirectory()) walk(p, prefix + e + '/');
      else out.push(prefix + e);
    }
  };
  walk(dir, '');
  return out;
}

export async function startStack({ tenants = ['alpha', 'beta'], env = {} } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'whet-api-'));
  let s;
  try {
    s = await lib.startStack({ env: { WHET_OBJECT_STORE: `file://${dir}/objects`, ...env } });
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  // Returns null, or why the stack did not stop cleanly.
  const stop = async () => {
    try {
      await s.stop();
      return null;
    } catch (e) {
      return String(e.message || e);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
  try {
    const keys = {};
    for (const t of tenants) keys[t] = (await s.createTenant(t, { rate_per_s: 100000, rate_burst: 100000 })).key;
    s.psql(`INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
            VALUES ('whet-tiny', 'llama', 1000000, 'models/whet-tiny', '00', '{}')`);
    return { url: s.url, keys, dbUrl: s.databaseUrl, dir, objects: join(dir, 'objects'), psql: s.psql, stop, logTail: s.logTail,
             adminToken: () => s.adminToken() };
  } catch (e) {
    await stop();
    throw e;
  }
}

export { checker } from '../lib/check.mjs';

// fetch with the tenant's key; returns {status, headers, text, json}.
export function client(stack, tenant) {
  return async (method, path, { json, body, headers = {}, key } = {}) => {
    const h = { ...headers };
    const k = key !== undefined ? key : stack.keys[tenant];
    if (k) h.authorization = `Bearer ${k}`;
    if (json !== undefined) {
      h['content-type'] = 'application/json';
      body = typeof json === 'string' ? json : JSON.stringify(json);
    }
    const res = await fetch(stack.url + path, { method, headers: h, body });
    const text = await res.text();
    let parsed;
    try { parsed = JSON.parse(text); } catch { parsed = undefined; }
    return { status: res.status, headers: res.headers, text, json: parsed };
  };
}

// A multipart body built by hand (so tests control every byte), with its content type.
export function multipart(fields, boundary = '----whet-test-boundary-42') {
  const chunks = [];
  for (const f of fields) {
    let head = `--${boundary}\r\nContent-Disposition: form-data; name="${f.name}"`;
    if (f.filename !== undefined) head += `; filename="${f.filename}"`;
    head += '\r\n';
    if (f.type) head += `Content-Type: ${f.type}\r\n`;
    chunks.push(Buffer.from(head + '\r\n'), Buffer.from(f.value), Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(chunks), type: `multipart/form-data; boundary=${boundary}` };
}

export const SFT_LINE = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }] });
export const DPO_LINE = JSON.stringify({
  input: { messages: [{ role: 'user', content: 'hi' }] },
  preferred_output: [{ role: 'assistant', content: 'hello' }],
  non_preferred_output: [{ role: 'assistant', content: 'go away' }],
});
export const RFT_LINE = JSON.stringify({ messages: [{ role: 'user', content: '2+2?' }], answer: '4' });
