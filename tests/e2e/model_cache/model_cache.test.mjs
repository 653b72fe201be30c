// The executor's model cache bounded by --model-cache-max (common/dir_cache.h), through real jobs: `whet up`
// with an executor of its own whose bound holds one tiny base model; an SFT job on whet-tiny, then one on
// tiny-b (another base model): fetching tiny-b evicts whet-tiny, the least recently used, which no job holds
// any more, and the executor's metrics count it; a third job on whet-tiny fetches it again and evicts tiny-b.
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { until, whetProcesses } from '../lib.mjs';
import { requireEnv, createDatabase, freePort, WHET_BIN } from '../../integration/lib/gateway.mjs';

requireEnv();
const FIXTURES = process.env.WHET_FIXTURES;
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'whet-e2e-cache-'));
fs.chmodSync(work, 0o755);
const db = createDatabase();
const httpPort = await freePort(), grpcPort = await freePort(), metricsPort = await freePort();
const env = { ...process.env, WHET_DATABASE_URL: db.url, WHET_DATA_DIR: work };
const { children, logs, start, dump: dumpLogs } = whetProcesses(WHET_BIN, env);
start('up', ['up', '--data-dir', work, '--http', `127.0.0.1:${httpPort}`, '--grpc', `127.0.0.1:${grpcPort}`,
             '--executors', '0']);
await until('whet up to be ready', () => logs.up.includes('whet: ready'), 120000).catch((e) => { dumpLogs(); throw e; });
const whet = (...args) => execFileSync(WHET_BIN, [...args, '--data-dir', work], { env, encoding: 'utf8' });
const otherModel = path.join(work, 'tiny-b-src');
execFileSync(WHET_BIN, ['model', 'init', '--preset', 'tiny', '--seed', '7', '--out', otherModel], { env });
execFileSync(WHET_BIN, ['model', 'register', 'tiny-b', otherModel], { env });
// Room for one model and a half of the larger: the second model pushes the first out.
const modelBytes = (name) => JSON.parse(fs.readFileSync(path.join(work, 'objects', 'models', name, 'MANIFEST.json'), 'utf8'))
  .files.reduce((n, f) => n + f.size, 0);
const bound = Math.floor(1.5 * Math.max(modelBytes('whet-tiny'), modelBytes('tiny-b')));
const exWork = path.join(work, 'ex');
start('executor', ['executor', '--data-dir', work, '--dc', 'dc-1', '--pool', 'dc-1', '--devices', 'sim:H100:1:80',
                   '--work-dir', exWork, '--model-cache-max', String(bound), '--metrics', `127.0.0.1:${metricsPort}`]);
const key = whet('tenant', 'create', 'e2e').trim();
const client = new OpenAI({ apiKey: key, baseURL: `http://127.0.0.1:${httpPort}/v1`, maxRetries: 2 });

test.after(() => {
  for (const c of children) c.kill('SIGKILL');
  db.drop();
  fs.rmSync(work, { recursive: true, force: true });
});

// The base models in the executor's cache, by catalog name (its own hidden files aside).
const cached = () => fs.readdirSync(path.join(exWork, 'models')).filter((d) => !d.startsWith('.'))
  .map((d) => d.replace(/-[0-9a-f]*$/, '')).sort();
const metric = async (name) => {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  return Number(text.match(new RegExp(`^${name} (\\S+)$`, 'm'))?.[1]);
};
const training = await client.files.create({ file: new File([fs.readFileSync(path.join(FIXTURES, 'sft', 'train.jsonl'))],
                                                              'train.jsonl'), purpose: 'fine-tune' });

async function trained(model) {
  const created = await client.fineTuning.jobs.create({
    model, training_file: training.id,
    method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 1, batch_size: 2 } } },
    whet: { max_steps: 2 },
  });
  const job = await until(`job ${created.id} on ${model} to finish`, async () => {
    const j = await client.fineTuning.jobs.retrieve(created.id);
    return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : null;
  }, 300000, 300);
  if (job.status !== 'succeeded') dumpLogs();
  assert.equal(job.status, 'succeeded', JSON.stringify(job.error));
}

test('a job on a second base model evicts the first from a cache with room for one', async (t) => {
  t.after(() => { if (t.passed === false) dumpLogs(); });
  await trained('whet-tiny');
  assert.deepEqual(cached(), ['whet-tiny']);
  assert.equal(await metric('whet_executor_model_cache_max_bytes'), bound);
  assert.equal(await metric('whet_executor_model_cache_evictions_total'), 0);
  await trained('tiny-b');
  assert.deepEqual(cached(), ['tiny-b']);
  assert.equal(await metric('whet_executor_model_cache_evictions_total'), 1);
  assert.ok(await metric('whet_executor_model_cache_bytes') <= bound);
  assert.match(logs.executor, /evicted the least recently used entry" cache="model cache" entry=whet-tiny-/);
  await trained('whet-tiny');
  assert.deepEqual(cached(), ['whet-tiny']);
  assert.equal(await metric('whet_executor_model_cache_evictions_total'), 2);
});
