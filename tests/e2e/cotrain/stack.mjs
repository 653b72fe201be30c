// stack.mjs - what the co-training API tests share: `whet up` without executors on a database and work
// dir of their own (gone when the test file ends), two tenants (acme, globex) with their OpenAI clients,
// and, through the API, a job's end, its events and what usage charges each job. The tests start their
// executors themselves (start), when their jobs should find them.
import test from 'node:test';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { until, whetProcesses } from '../lib.mjs';
import { requireEnv, createDatabase, freePort, WHET_BIN } from '../../integration/lib/gateway.mjs';

// Starts the stack with the environment's variables plus `extraEnv` (WHET_COTRAIN … undefined: unset).
export async function cotrainStack(prefix, extraEnv) {
  requireEnv();
  const work = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  fs.chmodSync(work, 0o755);
  const db = createDatabase();
  const httpPort = await freePort(), grpcPort = await freePort();
  const env = { ...process.env, WHET_DATABASE_URL: db.url, WHET_LEASE_MS: '3000', WHET_DATA_DIR: work,
                OMP_NUM_THREADS: '1', ...extraEnv };
  for (const k of Object.keys(env)) if (env[k] === undefined) delete env[k];
  const { children, logs, start, dump: dumpLogs } = whetProcesses(WHET_BIN, env);
  test.after(() => {
    for (const c of children) c.kill('SIGKILL');
    db.drop();
    fs.rmSync(work, { recursive: true, force: true });
  });
  start('up', ['up', '--data-dir', work, '--http', `127.0.0.1:${httpPort}`, '--grpc', `127.0.0.1:${grpcPort}`,
               '--executors', '0']);
  await until('whet up to be ready', () => logs.up.includes('whet: ready'), 120000).catch((e) => { dumpLogs(); throw e; });
  const whet = (...args) => execFileSync(WHET_BIN, [...args, '--data-dir', work], { env, encoding: 'utf8' });
  const base = `http://127.0.0.1:${httpPort}`;
  const tenants = ['acme', 'globex'].map((name) => {
    const key = whet('tenant', 'create', name).trim();
    return { name, key, client: new OpenAI({ apiKey: key, baseURL: `${base}/v1`, maxRetries: 2 }) };
  });
  // The job once it ended (succeeded, failed or cancelled).
  const finished = (client, id, timeoutMs = 400000) => until(`job ${id} to finish`, async () => {
    const job = await client.fineTuning.jobs.retrieve(id);
    return ['succeeded', 'failed', 'cancelled'].includes(job.status) ? job : null;
  }, timeoutMs, 500);
  const allEvents = async (client, id) => {
    const events = [];
    for await (const e of client.fineTuning.jobs.listEvents(id, { limit: 100 })) events.push(e);
    return events;
  };
  // What usage charges a job in all (the tenants' rows of it summed): usage(id, 'device_seconds'). Through
  // the SDK, which retries: a test that blocked its event loop (execFileSync) may find its kept-alive
  // connection closed by the gateway meanwhile.
  const usage = async () => {
    const rows = [];
    for (const tn of tenants) rows.push(...(await tn.client.get('/usage')).data);
    return (id, k) => rows.filter((u) => u.job_id === id).reduce((s, u) => s + u[k], 0);
  };
  return { work, db, env, tenants, start, logs, dumpLogs, finished, allEvents, usage };
}
