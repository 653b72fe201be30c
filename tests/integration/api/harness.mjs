// harness.mjs - a throwaway whet stack for the API tests: a fresh database on the suite's PostgreSQL
// (WHET_TEST_DATABASE_URL, set by tests/run.sh), `whet migrate`, two tenants with API keys, a base
// model row, a file:// object store in a temp dir and `whet gateway` on a free loopback port.
// Everything is removed by stop(). Shared by tests/integration/api and tests/integration/openai_sdk.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';

export function need(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`${name} is not set (tests/run.sh and ctest set it)`);
    process.exit(1);
  }
  return v;
}

function psqlRaw(url, sql) {
  return execFileSync('psql', ['-qtAX', '-v', 'ON_ERROR_STOP=1', url, '-c', sql], { encoding: 'utf8' }).trim();
}

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

export async function startStack({ tenants = ['alpha', 'beta'], env: extraEnv = {} } = {}) {
  const bin = need('WHET_BIN');
  const base = need('WHET_TEST_DATABASE_URL');
  const db = `whet_api_${process.pid}_${Math.floor(Math.random() * 1e9)}`;
  psqlRaw(base, `CREATE DATABASE ${db}`);
  const u = new URL(base);
  u.pathname = `/${db}`;
  const dbUrl = u.toString();
  const dir = mkdtempSync(join(tmpdir(), 'whet-api-'));
  const env = {
    ...process.env,
    WHET_DATABASE_URL: dbUrl,
    WHET_OBJECT_STORE: `file://${dir}/objects`,
    WHET_JWT_ALG: 'HS256',
    WHET_JWT_KEY: 'api-test-secret-0123456789abcdef0123456789abcdef',
    WHET_HTTP: '127.0.0.1:0',
    WHET_GATEWAY_THREADS: '2',
    WHET_LOG_LEVEL: process.env.WHET_LOG_LEVEL || 'warn',
    ...extraEnv,
  };
  delete env.WHET_DATA_DIR;
  const psql = (sql) => psqlRaw(dbUrl, sql);
  let gateway;
  const stop = async () => {
    if (gateway && gateway.exitCode === null) {
      gateway.kill('SIGTERM');
      await new Promise((res) => { gateway.once('exit', res); setTimeout(res, 5000); });
    }
    try { psqlRaw(base, `DROP DATABASE IF EXISTS ${db} WITH (FORCE)`); } catch (e) { console.error(String(e)); }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    execFileSync(bin, ['migrate'], { env, stdio: ['ignore', 'ignore', 'inherit'] });
    const keys = {};
    for (const t of tenants) {
      const out = execFileSync(bin, ['tenant', 'create', t], { env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
      const m = out.match(/api key: (\S+)/);
      if (!m) throw new Error(`whet tenant create ${t}: no key in ${JSON.stringify(out)}`);
      keys[t] = m[1];
    }
    // The tests send bursts of requests; the rate limit has its own tests.
    psql(`UPDATE tenants SET rate_per_s = 100000, rate_burst = 100000`);
    psql(`INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
          VALUES ('whet-tiny', 'llama', 1000000, 'models/whet-tiny', '00', '{}')`);
    gateway = spawn(bin, ['gateway'], { env, stdio: ['ignore', 'inherit', 'pipe'] });
    const url = await new Promise((resolve, reject) => {
      let buf = '', url_found = false;
      const timer = setTimeout(() => reject(new Error(`gateway did not start: ${buf}`)), 15000);
      gateway.stderr.on('data', (chunk) => {
        const text = chunk.toString();
        if (!url_found) process.stderr.write(text);
        buf += text;
        const m = buf.match(/listening on (http:\/\/[0-9.:]+)/);
        if (m && !url_found) {
          url_found = true;
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
      gateway.once('exit', (code) => reject(new Error(`gateway exited (${code}): ${buf}`)));
    });
    // Keep forwarding the gateway's log (warnings and errors) after start.
    gateway.stderr.on('data', (chunk) => process.stderr.write(chunk));
    return { url, keys, dbUrl, dir, objects: join(dir, 'objects'), psql, stop, env };
  } catch (e) {
    await stop();
    throw e;
  }
}

// A tiny assertion counter that prints the summary line the other suites print.
export function checker() {
  let passed = 0, failed = 0;
  const check = (cond, what, detail) => {
    if (cond) passed++;
    else {
      failed++;
      console.error(`FAIL: ${what}${detail !== undefined ? ': ' + JSON.stringify(detail) : ''}`);
    }
    return cond;
  };
  const summary = () => {
    console.log(`${passed} passed, ${failed} failed`);
    return failed ? 1 : 0;
  };
  return { check, summary };
}

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
