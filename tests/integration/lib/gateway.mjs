// gateway.mjs - the integration-test harness for the gateway (node 20, no dependencies): a fresh
// database on the suite's PostgreSQL (WHET_TEST_DATABASE_URL, a superuser URL that tests/run.sh
// exports), `whet migrate`, `whet gateway` on a free port, operator and tenant credentials, an HTTP
// helper, and teardown. Tests use node:test:
//
//   import test from 'node:test';
//   import assert from 'node:assert/strict';
//   import { startStack } from '../lib/gateway.mjs';
//
//   const stack = await startStack();                  // database + migrations + gateway
//   test.after(() => stack.stop());
//   const acme = await stack.createTenant('acme');     // via POST /admin/v1/tenants: {id, name, key}
//   const res = await stack.request('GET', '/v1/whoami', { key: acme.key });
//   assert.equal(res.status, 200);
//
// startStack options: env (extra gateway environment, e.g. WHET_JWT_ALG), threads (default 2), jwt
// (false: no WHET_JWT_KEY), databaseUrl (use this database instead of creating one; it must be
// migrated). Set WHET_TEST_VERBOSE=1 to see the gateway's log on stderr; on a failed test the harness
// prints its last lines anyway (stack.logTail()).
//
// Importing this module holds every answer the tests fetch from a gateway to gateway/openapi.json
// (./openapi.mjs): an answer the document does not describe fails the request.
//
// startPostgres() starts a private PostgreSQL (for tests that stop and restart it); run as the
// `postgres` user when root, like tests/run.sh.
import { spawn, execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import './openapi.mjs';

export const WHET_BIN = process.env.WHET_BIN;
// For sanitizer builds: leaks inside libh2o-evloop that it cannot release (see the file).
const LSAN_SUPPRESSIONS = new URL('./lsan.supp', import.meta.url).pathname;
const PG_BIN = process.env.WHET_TEST_PG_BIN || (fs.existsSync('/usr/lib/postgresql')
  ? path.join('/usr/lib/postgresql', fs.readdirSync('/usr/lib/postgresql').sort().pop(), 'bin') : '');

function pgTool(name) { return PG_BIN ? path.join(PG_BIN, name) : name; }

export function requireEnv() {
  if (!WHET_BIN) throw new Error('WHET_BIN is not set (ctest sets it; by hand: WHET_BIN=build/whet)');
  if (!process.env.WHET_TEST_DATABASE_URL)
    throw new Error('WHET_TEST_DATABASE_URL is not set; run through tests/run.sh, or start a PostgreSQL with ' +
                    'eval "$(tests/integration/lib/pg.sh start /tmp/pg)"');
}

// Runs SQL with psql; returns the unaligned output.
export function psql(url, sql) {
  return execFileSync(pgTool('psql'), ['-qAtX', '-v', 'ON_ERROR_STOP=1', url, '-c', sql],
                      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
}

export function databaseUrl(baseUrl, name) {
  const u = new URL(baseUrl);
  u.pathname = '/' + name;
  return u.toString();
}

export function createDatabase(baseUrl = process.env.WHET_TEST_DATABASE_URL) {
  const name = `whet_t_${process.pid}_${crypto.randomBytes(4).toString('hex')}`;
  psql(baseUrl, `CREATE DATABASE ${name}`);
  return {
    name,
    url: databaseUrl(baseUrl, name),
    drop() { try { psql(baseUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`); } catch { /* server gone */ } },
  };
}

export function migrate(url) {
  execFileSync(WHET_BIN, ['migrate'], { env: { ...process.env, WHET_DATABASE_URL: url }, stdio: ['ignore', 'pipe', 'pipe'] });
}

// A port free now, outside the ephemeral range that other tests' connections draw from: free_port.py
// says why, and is the one place that picks (the shell tests use it too).
const FREE_PORT_PY = path.join(path.dirname(new URL(import.meta.url).pathname), 'free_port.py');
export async function freePort() {
  return Number(execFileSync('python3', [FREE_PORT_PY], { encoding: 'utf8' }).trim());
}

// ---- JWTs ------------------------------------------------------------------------------------------

export function b64url(data) { return Buffer.from(data).toString('base64url'); }

// Signs header.payload with alg HS256 (key: secret string or Buffer), RS256 or ES256 (key: private
// KeyObject or PEM); `header` overrides the header (to forge `alg: none` and friends).
export function signJwt(payload, { alg = 'HS256', key, header } = {}) {
  const h = b64url(JSON.stringify(header || { alg, typ: 'JWT' }));
  const p = b64url(JSON.stringify(payload));
  const input = `${h}.${p}`;
  let sig;
  if (alg === 'HS256') sig = crypto.createHmac('sha256', key).update(input).digest();
  else if (alg === 'RS256') sig = crypto.sign('sha256', Buffer.from(input), key);
  else if (alg === 'ES256') sig = crypto.sign('sha256', Buffer.from(input), { key, dsaEncoding: 'ieee-p1363' });
  else if (alg === 'none') sig = Buffer.alloc(0);
  else throw new Error(`signJwt: unsupported alg ${alg}`);
  return `${input}.${b64url(sig)}`;
}

export const now = () => Math.floor(Date.now() / 1000);

// ---- The gateway process ---------------------------------------------------------------------------

// Starts `whet gateway` on a free port; resolves once it listens.
export function startGateway({ databaseUrl: dbUrl, env = {}, threads = 2, args = [] }) {
  return new Promise((resolve, reject) => {
    const proc = spawn(WHET_BIN, ['gateway', '--http', '127.0.0.1:0', '--threads', String(threads), ...args], {
      env: { LSAN_OPTIONS: `suppressions=${LSAN_SUPPRESSIONS}`, ...process.env, WHET_DATABASE_URL: dbUrl, ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    const lines = [];
    let url = null, buffered = '';
    const verbose = !!process.env.WHET_TEST_VERBOSE;
    proc.stderr.on('data', (chunk) => {
      if (verbose) process.stderr.write(chunk);
      buffered += chunk.toString();
      let nl;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        lines.push(line);
        if (lines.length > 2000) lines.shift();
        const m = line.match(/gateway listening on (https?:\/\/\S+)/);
        if (m && !url) { url = m[1]; resolve(gw); }
      }
    });
    const exited = new Promise((res) => proc.on('exit', (code, signal) => res({ code, signal })));
    proc.on('exit', (code) => { if (!url) reject(new Error(`whet gateway exited (${code}) before listening:\n${lines.join('\n')}`)); });
    const gw = {
      proc,
      get url() { return url; },
      lines,
      logTail(n = 40) { return lines.slice(-n).join('\n'); },
      exited,
      // SIGTERM and wait; resolves with {code, signal}.
      async stop() {
        if (proc.exitCode !== null || proc.signalCode !== null) return exited;
        proc.kill('SIGTERM');
        const timer = setTimeout(() => proc.kill('SIGKILL'), 15000);
        const r = await exited;
        clearTimeout(timer);
        // a sanitizer report, or a failed shutdown: show what the gateway said last
        if (r.code !== 0) process.stderr.write(`--- whet gateway exited ${r.code} (${r.signal}) ---\n${gw.logTail(80)}\n`);
        return r;
      },
    };
  });
}

// ---- HTTP --------------------------------------------------------------------------------------------

// request(base, method, path, {key | token, body (object: JSON; string/Buffer: raw), headers})
//   -> {status, headers, text, json}
export async function request(base, method, urlPath, { key, token, body, headers = {} } = {}) {
  const h = { ...headers };
  if (key || token) h.authorization = `Bearer ${key || token}`;
  let payload;
  if (body !== undefined) {
    if (typeof body === 'string' || Buffer.isBuffer(body)) payload = body;
    else { payload = JSON.stringify(body); h['content-type'] = h['content-type'] || 'application/json'; }
  }
  const res = await fetch(base + urlPath, { method, headers: h, body: payload });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}

// Asserts an OpenAI-shaped error body; returns the error object.
export function errorOf(res) {
  const e = res.json && res.json.error;
  if (!e || typeof e.message !== 'string' || typeof e.type !== 'string' || !('param' in e) || !('code' in e))
    throw new Error(`not an OpenAI error body (status ${res.status}): ${res.text}`);
  return e;
}

// ---- The stack -------------------------------------------------------------------------------------

export async function startStack({ env = {}, threads = 2, jwt = true, databaseUrl: given } = {}) {
  requireEnv();
  const db = given ? null : createDatabase();
  const dbUrl = given || db.url;
  if (db) migrate(dbUrl);
  const jwtSecret = crypto.randomBytes(24).toString('hex');
  const gwEnv = jwt ? { WHET_JWT_ALG: 'HS256', WHET_JWT_KEY: jwtSecret, ...env } : { ...env };
  let gw;
  try {
    gw = await startGateway({ databaseUrl: dbUrl, env: gwEnv, threads });
  } catch (e) {
    if (db) db.drop();
    throw e;
  }
  const stack = {
    db, databaseUrl: dbUrl, gateway: gw, jwtSecret,
    get url() { return gw.url; },
    logTail: (n) => gw.logTail(n),
    psql: (sql) => psql(dbUrl, sql),
    // Tokens carry WHET_JWT_ISSUER / WHET_JWT_AUDIENCE when the stack was started with them.
    claims(extra) {
      const c = {};
      if (gwEnv.WHET_JWT_ISSUER) c.iss = gwEnv.WHET_JWT_ISSUER;
      if (gwEnv.WHET_JWT_AUDIENCE) c.aud = gwEnv.WHET_JWT_AUDIENCE;
      return { ...c, exp: now() + 600, ...extra };
    },
    adminToken(extra = {}) { return signJwt(stack.claims({ sub: 'admin', admin: true, ...extra }), { key: jwtSecret }); },
    tenantToken(name, extra = {}) { return signJwt(stack.claims({ tenant: name, ...extra }), { key: jwtSecret }); },
    request: (method, p, opts) => request(gw.url, method, p, opts),
    // Creates a tenant through the operator API; fields: weight, rate_per_s, rate_burst, max_active_jobs.
    async createTenant(name, fields = {}) {
      const res = await request(gw.url, 'POST', '/admin/v1/tenants', { token: stack.adminToken(), body: { name, ...fields } });
      if (res.status !== 200) throw new Error(`createTenant ${name}: ${res.status} ${res.text}`);
      return { id: res.json.id, name, key: res.json.api_key, keyId: res.json.api_key_id };
    },
    // Stops the gateway (SIGTERM) and drops the database; rejects unless the gateway exited 0, so a
    // sanitizer report or an unclean shutdown fails the test file.
    async stop() {
      const r = await gw.stop();
      if (db) db.drop();
      if (r.code !== 0) throw new Error(`whet gateway exited with ${r.code} (${r.signal}) on SIGTERM`);
      return r;
    },
  };
  return stack;
}

// Prints the gateway's last log lines when a test of this file failed (call from test.after).
export function dumpLogOnFailure(stack) {
  if (process.exitCode && stack) process.stderr.write(`--- gateway log (last lines) ---\n${stack.logTail(60)}\n`);
}

// ---- A private PostgreSQL ----------------------------------------------------------------------------

export async function startPostgres() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'whet-pg-'));
  fs.chmodSync(dir, 0o755);
  const asRoot = process.getuid && process.getuid() === 0;
  const run = (tool, args) => {
    const cmd = asRoot ? 'runuser' : pgTool(tool);
    const argv = asRoot ? ['-u', 'postgres', '--', pgTool(tool), ...args] : args;
    return execFileSync(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
  };
  if (asRoot) execFileSync('chown', ['postgres:', dir]);
  const port = await freePort();
  const data = path.join(dir, 'data');
  run('initdb', ['-D', data, '-U', 'postgres', '-A', 'trust', '--no-sync']);
  const opts = `-c listen_addresses=127.0.0.1 -c port=${port} -c unix_socket_directories=${dir} -c fsync=off`;
  const pg = {
    dir, port,
    url: `postgresql://postgres@127.0.0.1:${port}/postgres`,
    start() { run('pg_ctl', ['-D', data, '-l', path.join(dir, 'log'), '-w', '-o', opts, 'start']); },
    stop(mode = 'fast') { run('pg_ctl', ['-D', data, '-m', mode, '-w', 'stop']); },
    destroy() {
      try { pg.stop('immediate'); } catch { /* already stopped */ }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  pg.start();
  return pg;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
