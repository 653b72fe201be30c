// stack.mjs - what the model-worker scaling tests share: `whet up` with a scheduler and `executors`
// executors of one simulated device each, a tenant and its OpenAI client, and no worker of whet-tiny
// named to the gateway (--placed-workers: `whet up` starts no worker of its own, the scheduler places
// them). Removed when the test file ends.
import test from 'node:test';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { until } from '../lib.mjs';
import { requireEnv, createDatabase, freePort, psql, WHET_BIN } from '../../integration/lib/gateway.mjs';

// { work (its data dir), db, client, log() (its output's tail) }
export async function startServing({ executors, env: extra }) {
  requireEnv();
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'whet-serving-'));
  fs.chmodSync(work, 0o755);
  const db = createDatabase();
  const httpPort = await freePort(), grpcPort = await freePort();
  const env = {
    ...process.env, WHET_DATABASE_URL: db.url, WHET_DATA_DIR: work, WHET_SERVE_COLD_START_MS: '120000', ...extra,
  };
  let log = '';
  const up = spawn(WHET_BIN, ['up', '--data-dir', work, '--http', `127.0.0.1:${httpPort}`, '--grpc', `127.0.0.1:${grpcPort}`,
                              '--executors', String(executors), '--devices', 'sim:H100:1', '--placed-workers'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  up.stdout.on('data', (d) => { log = (log + d).slice(-60000); });
  up.stderr.on('data', (d) => { log = (log + d).slice(-60000); });
  test.after(() => {
    up.kill('SIGTERM');
    db.drop();
    fs.rmSync(work, { recursive: true, force: true });
  });
  await until('whet up to be ready', () => log.includes('whet: ready'), 120000)
    .catch((e) => { console.error(log); throw e; });
  const key = execFileSync(WHET_BIN, ['tenant', 'create', 'scale', '--data-dir', work], { env, encoding: 'utf8' }).trim();
  const client = new OpenAI({ apiKey: key, baseURL: `http://127.0.0.1:${httpPort}/v1`, maxRetries: 0, timeout: 180000 });
  return { work, db, client, log: () => log };
}

// whet-tiny's workers in the scheduler's table: [{id, node, address, state}].
export const workers = (db) => psql(db.url, `SELECT id, node_id, coalesce(address, ''), state FROM model_workers
                                             WHERE base_model = 'whet-tiny' ORDER BY id`)
  .split('\n').filter((l) => l).map((l) => { const [id, node, address, state] = l.split('|'); return { id, node, address, state }; });

// Whether HOST:PORT refuses a connection (nothing listens there any more)
export const refuses = (address) => new Promise((resolve) => {
  const [host, port] = [address.slice(0, address.lastIndexOf(':')), Number(address.slice(address.lastIndexOf(':') + 1))];
  const sock = net.connect({ host, port });
  sock.once('connect', () => { sock.destroy(); resolve(false); });
  sock.once('error', (e) => resolve(e.code === 'ECONNREFUSED'));
});
