// A job's life beyond the happy path, on a stack whose object store is a real S3 server (s3rver) and
// whose one executor has a single simulated device, so jobs compete for it: pause and resume, cancel
// while running, a high-priority job preempting a low-priority one (which resumes and finishes), and
// the scheduler killed mid-run (whet up restarts it; nothing is lost or duplicated).
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { until, holdTrainer, releaseWhenSignalled } from '../lib.mjs';
import { requireEnv, createDatabase, freePort, psql, WHET_BIN } from '../../integration/lib/gateway.mjs';

requireEnv();
if (!process.env.WHET_TEST_S3_ENDPOINT) throw new Error('WHET_TEST_S3_ENDPOINT is not set (tests/run.sh starts s3rver)');
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'whet-life-'));
fs.chmodSync(work, 0o755);
const db = createDatabase();
const httpPort = await freePort(), grpcPort = await freePort();
// The default lease (10 s): the scheduler killed below must come back and hear the executor again
// before the node would be declared lost, and with a 3 s lease a loaded machine missed that window
// (the node was lost, its attempt's usage marked lost).
const env = {
  ...process.env, WHET_DATABASE_URL: db.url, WHET_DATA_DIR: work,
  WHET_OBJECT_STORE: `s3://whet-test/life-${crypto.randomBytes(4).toString('hex')}`,
  WHET_S3_ENDPOINT: process.env.WHET_TEST_S3_ENDPOINT, AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER',
  AWS_REGION: 'us-east-1',
  // Checkpoint retention on the S3 store: each job keeps its newest two step checkpoints (resume needs one).
  WHET_CHECKPOINT_KEEP: '2',
};
let log = '';
const up = spawn(WHET_BIN, ['up', '--data-dir', work, '--http', `127.0.0.1:${httpPort}`, '--grpc', `127.0.0.1:${grpcPort}`,
                            '--executors', '1', '--devices', 'sim:H100:1'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
up.stdout.on('data', (d) => { log = (log + d).slice(-30000); });
up.stderr.on('data', (d) => { log = (log + d).slice(-30000); });

await until('whet up to be ready', () => log.includes('whet: ready'), 120000)
  .catch((e) => { console.error(log); throw e; });
const whet = (...args) => execFileSync(WHET_BIN, [...args, '--data-dir', work], { env, encoding: 'utf8' });
const key = whet('tenant', 'create', 'life').trim();
const client = new OpenAI({ apiKey: key, baseURL: `http://127.0.0.1:${httpPort}/v1`, maxRetries: 2 });
test.after(() => {
  up.kill('SIGTERM');
  db.drop();
  fs.rmSync(work, { recursive: true, force: true });
});
const dump = (t) => t.after(() => { if (t.passed === false) console.error(log.split('\n').slice(-40).join('\n')); });

const training = await client.files.create({ file: fs.createReadStream(path.join(process.env.WHET_FIXTURES, 'sft', 'train.jsonl')),
                                             purpose: 'fine-tune' });
const create = (whetExt) => client.fineTuning.jobs.create({
  model: 'whet-tiny', training_file: training.id,
  method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 50, batch_size: 2 } } }, whet: whetExt,
});
const status = async (id) => (await client.fineTuning.jobs.retrieve(id)).status;
const messages = async (id) => {
  const out = [];
  for await (const e of client.fineTuning.jobs.listEvents(id, { limit: 100 })) out.push(e.message);
  return out;
};

// The trainer of a job's first attempt on the one executor (tests/e2e/lib.mjs holds it while the test acts).
const jobDir = (id) => path.join(work, 'executors', 'executor-1', 'jobs', `${id}-1`);

test('pause checkpoints and stops a running job; resume continues it to the end', async (t) => {
  dump(t);
  const job = await create({ max_steps: 30, checkpoint_every_steps: 5 });
  const pids = await holdTrainer(t, jobDir(job.id));
  const paused = await client.fineTuning.jobs.pause(job.id);
  await releaseWhenSignalled(pids);
  assert.ok(['running', 'paused'].includes(paused.status));
  await until('paused', async () => (await status(job.id)) === 'paused');
  const resumed = await client.fineTuning.jobs.resume(job.id);
  assert.equal(resumed.status, 'queued');
  await until('succeeded', async () => (await status(job.id)) === 'succeeded');
  const m = await messages(job.id);
  assert.ok(m.some((x) => /paused/i.test(x)), 'a pause event');
  assert.ok(m.some((x) => /resuming from step \d+/.test(x)), 'placed again from its checkpoint');
  // Retention: the job keeps its final model (step 30) and its two newest step checkpoints; every older one
  // (the pause's included) is deleted and its files removed from the store.
  const all = psql(db.url, `SELECT string_agg(step_number::text, ',' ORDER BY step_number) FROM (SELECT step_number FROM checkpoints
                            WHERE job_id = '${job.id}' UNION ALL SELECT step_number FROM checkpoint_deletions
                            WHERE job_id = '${job.id}') s`).split(',').map(Number);
  // The pause's checkpoint is at the step the trainer was held at: one of its own, or a regular one when the
  // trainer was caught at a multiple of 5 (a fast machine reached step 5 before the hold: CI saw 5,10,...,30).
  const pausedAt = Number(m.map((x) => /resuming from step (\d+)/.exec(x)).find(Boolean)[1]);
  const steps = all.filter((s) => s < 30);
  assert.deepEqual(steps, [...new Set([5, 10, 15, 20, 25, pausedAt])].sort((a, b) => a - b),
                   `checkpoints every 5 steps and one at the pause (step ${pausedAt}): ${all}`);
  await until('older checkpoints deleted', async () =>
    psql(db.url, `SELECT count(*) FROM checkpoint_deletions WHERE job_id = '${job.id}' AND purged_at IS NOT NULL`) ===
      String(steps.length - 2), 30000);
  const kept = [];
  for await (const c of client.fineTuning.jobs.checkpoints.list(job.id)) kept.push(c.step_number);
  assert.deepEqual(kept.sort((a, b) => a - b), [...steps.slice(-2), 30]);
});

test('cancel stops a running job for good', async (t) => {
  dump(t);
  const job = await create({ max_steps: 500, checkpoint_every_steps: 50 });
  const pids = await holdTrainer(t, jobDir(job.id));
  await client.fineTuning.jobs.cancel(job.id);
  await releaseWhenSignalled(pids);
  await until('cancelled', async () => (await status(job.id)) === 'cancelled');
  const nodes = JSON.parse(psql(db.url, "SELECT coalesce(json_agg(job_id), '[]') FROM job_attempts WHERE ended_at IS NULL"));
  assert.deepEqual(nodes, [], 'no attempt left running');
});

test('a high-priority job preempts a low-priority one, which resumes and finishes', async (t) => {
  dump(t);
  const low = await create({ max_steps: 80, checkpoint_every_steps: 5, priority: 0 });
  const pids = await holdTrainer(t, jobDir(low.id));
  const high = await create({ max_steps: 5, checkpoint_every_steps: 5, priority: 10 });
  await releaseWhenSignalled(pids);
  await until('high succeeded', async () => (await status(high.id)) === 'succeeded');
  await until('low succeeded', async () => (await status(low.id)) === 'succeeded');
  const m = await messages(low.id);
  assert.ok(m.some((x) => /preempted/.test(x)), 'a preemption event');
  assert.ok(m.some((x) => /resuming from step \d+/.test(x)), 'resumed from its checkpoint');
  assert.equal(psql(db.url, `SELECT count(*) FROM job_attempts WHERE job_id = '${low.id}'`), '2',
               'the low-priority job ran twice: before and after the preemption');
  const [h, l] = [await client.fineTuning.jobs.retrieve(high.id), await client.fineTuning.jobs.retrieve(low.id)];
  assert.ok(h.finished_at <= l.finished_at, `the high-priority job finished first (${h.finished_at} vs ${l.finished_at})`);
});

test('the scheduler killed mid-run: the job still succeeds, nothing duplicated', async (t) => {
  dump(t);
  const job = await create({ max_steps: 20, checkpoint_every_steps: 5 });
  await until('running', async () => (await status(job.id)) === 'running');
  const pid = Number(execFileSync('pgrep', ['-f', `whet scheduler --data-dir ${work}`], { encoding: 'utf8' }).trim().split('\n')[0]);
  process.kill(pid, 'SIGKILL');
  await until('succeeded', async () => (await status(job.id)) === 'succeeded');
  const dup = psql(db.url, `SELECT count(*) FROM (SELECT step_number FROM checkpoints WHERE job_id = '${job.id}'
                             GROUP BY step_number HAVING count(*) > 1) d`);
  assert.equal(dup, '0');
  assert.equal(psql(db.url, `SELECT count(*) FROM usage_records WHERE job_id = '${job.id}' AND NOT lost`), '1');
});
