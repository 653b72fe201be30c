// The trainer's sandbox seen from the product: `whet up` with one executor whose trainer is
// fake_trainer.py (`whet executor --trainer`, as an operator deploys a custom trainer build). A
// trainer that opens a network socket is killed by the sandbox, one that writes outside its job dir
// is refused, and each job fails with an error that says so, with nothing written outside. A
// well-behaved trainer's rollout tokens (GRPO's metrics lines) reach the tenant's usage. An attempt
// declared lost that still finishes its model makes the job succeed, and the newer attempt is cancelled.
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { until, whetProcesses } from '../lib.mjs';
import { requireEnv, createDatabase, freePort, psql, WHET_BIN } from '../../integration/lib/gateway.mjs';

requireEnv();
const TRAINER = new URL('./fake_trainer.py', import.meta.url).pathname;
// Not under /tmp: the sandbox gives the trainer a private tmpfs there, so a write to the executor's
// work dir would land in that scratch space (harmless, but no refusal to see).
const work = fs.mkdtempSync(path.join(process.env.WHET_BUILD_DIR || os.tmpdir(), 'e2e-sandbox-'));
fs.chmodSync(work, 0o755);
const db = createDatabase();
const httpPort = await freePort(), grpcPort = await freePort();
const env = { ...process.env, WHET_DATABASE_URL: db.url, WHET_LEASE_MS: '3000', WHET_DATA_DIR: work };
const { children, logs, start, dump: dumpLogs } = whetProcesses(WHET_BIN, env);

const sha = (file) => crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
const trainerSha = sha(TRAINER);

start('up', ['up', '--data-dir', work, '--http', `127.0.0.1:${httpPort}`, '--grpc', `127.0.0.1:${grpcPort}`,
             '--executors', '0']);
await until('whet up to be ready', () => logs.up.includes('whet: ready'), 120000)
  .catch((e) => { dumpLogs(); throw e; });
const exDir = path.join(work, 'ex');
const executor = start('executor', ['executor', '--data-dir', work, '--dc', 'dc-a', '--pool', 'dc-a', '--devices', 'sim:H100:2:80',
                   '--work-dir', exDir, '--trainer', TRAINER]);
const whet = (...args) => execFileSync(WHET_BIN, [...args, '--data-dir', work], { env, encoding: 'utf8' });
const key = whet('tenant', 'create', 'sbx').trim();
const base = `http://127.0.0.1:${httpPort}`;
const client = new OpenAI({ apiKey: key, baseURL: `${base}/v1`, maxRetries: 2 });

test.after(() => {
  for (const c of children) c.kill('SIGKILL');
  db.drop();
  fs.rmSync(work, { recursive: true, force: true });
});

// A training file whose first user message tells fake_trainer.py what to do.
async function upload(mode) {
  const file = path.join(work, `${mode}.jsonl`);
  const line = JSON.stringify({ messages: [{ role: 'user', content: mode }, { role: 'assistant', content: 'ok' }] });
  fs.writeFileSync(file, `${line}\n`.repeat(10));
  return client.files.create({ file: fs.createReadStream(file), purpose: 'fine-tune' });
}

async function createJob(mode) {
  const training = await upload(mode);
  return client.fineTuning.jobs.create({
    model: 'whet-tiny', training_file: training.id, suffix: mode,
    method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 1 } } },
  });
}

async function runJob(mode) {
  const created = await createJob(mode);
  return finished(created.id, mode);
}

function finished(id, mode) {
  return until(`job ${id} (${mode}) to finish`, async () => {
    if (executor.exitCode !== null) throw new Error(`the executor exited with status ${executor.exitCode}`);
    const job = await client.fineTuning.jobs.retrieve(id);
    return ['succeeded', 'failed', 'cancelled'].includes(job.status) ? job : null;
  }, 120000, 300);
}

async function events(id) {
  const out = [];
  for await (const e of client.fineTuning.jobs.listEvents(id, { limit: 100 })) out.push(e);
  return out;
}

// Every file under the test's data dir outside the job dirs that holds what the hostile trainer writes.
function escapedWrites() {
  const found = [];
  const walk = (dir) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) { if (p !== path.join(exDir, 'jobs')) walk(p); }
      else if (e.isFile() && fs.readFileSync(p).includes('written by a hostile trainer')) found.push(p);
    }
  };
  walk(work);
  return found;
}

test('a trainer that opens a network socket is killed by the sandbox; the job fails saying so', async (t) => {
  t.after(() => { if (t.passed === false) dumpLogs(); });
  const job = await runJob('socket');
  assert.equal(job.status, 'failed', JSON.stringify(job));
  assert.equal(job.error.code, 'sandbox_violation');
  assert.match(job.error.message, /^the trainer was killed by the sandbox: system call socket is not allowed \(a trainer may not open network sockets/);
  // The trainer's own last words (its stderr) follow: what it was doing when it was stopped.
  assert.match(job.error.message, /fake trainer: connecting to 1\.1\.1\.1:80$/);
  assert.doesNotMatch(job.error.message, /connected/);
  const evs = await events(job.id);
  assert.ok(evs.some((e) => e.level === 'error' && e.message.startsWith('The job failed: the trainer was killed by the sandbox')),
            evs.map((e) => e.message).join('\n'));
});

test('a trainer that writes outside its job dir is refused; the job fails saying so, nothing escaped', async (t) => {
  t.after(() => { if (t.passed === false) dumpLogs(); });
  const job = await runJob('write');
  assert.equal(job.status, 'failed', JSON.stringify(job));
  assert.equal(job.error.code, 'training_failed');
  const msg = job.error.message;
  assert.match(msg, /^the trainer exited with status 1: /, msg);
  // Each target was refused: the base-model cache shared by the node's jobs, the executor's work dir,
  // the trainer program. The view is read-only; under a root executor the trainer is also uid 65534,
  // whose lack of permission the kernel reports first for files it does not own.
  const refused = '(Read-only file system|Permission denied)';
  assert.match(msg, new RegExp(`cannot write \\S+/models/whet-tiny-[0-9a-f]+/config\\.json: ${refused}`), msg);
  assert.match(msg, new RegExp(`cannot write ${exDir}/escaped\\.txt: ${refused}`), msg);
  assert.match(msg, new RegExp(`cannot write ${TRAINER}: ${refused}`), msg);
  assert.deepEqual(escapedWrites(), []);
  assert.ok(!fs.existsSync(path.join(exDir, 'escaped.txt')));
  assert.equal(sha(TRAINER), trainerSha);
  // The cached base model is intact: its files match what the object store's manifest lists.
  const cache = fs.readdirSync(path.join(exDir, 'models')).filter((d) => d.startsWith('whet-tiny-'));
  assert.equal(cache.length, 1, cache.join(','));
  assert.ok(!fs.readFileSync(path.join(exDir, 'models', cache[0], 'config.json'), 'utf8').includes('hostile'));
});

test('rollout tokens from the trainer\'s metrics lines are summed per attempt into the tenant\'s usage', async (t) => {
  t.after(() => { if (t.passed === false) dumpLogs(); });
  const job = await runJob('grpo');
  assert.equal(job.status, 'succeeded', JSON.stringify(job.error));
  // Under a root executor the trainer ran as host uid 65534 (nobody): what it wrote is nobody's.
  const written = fs.statSync(path.join(exDir, 'jobs', `${job.id}-1`, 'out', 'final', 'adapter_config.json'));
  assert.equal(written.uid, process.getuid() === 0 ? 65534 : process.getuid());
  // fake_trainer.py's ROLLOUT_TOKENS and TRAINED_TOKENS.
  const usage = await (await fetch(`${base}/v1/usage`, { headers: { authorization: `Bearer ${key}` } })).json();
  const rows = usage.data.filter((r) => r.job_id === job.id);
  assert.equal(rows.length, 1, JSON.stringify(usage));
  assert.equal(rows[0].rollout_tokens, 123 + 456 + 789);
  assert.equal(rows[0].trained_tokens, 10 + 20 + 30);
  assert.ok(rows[0].device_seconds > 0);
  // The failed jobs were metered too, with no rollout tokens.
  const others = usage.data.filter((r) => r.job_id !== job.id);
  assert.equal(others.length, 2, JSON.stringify(usage));
  assert.ok(others.every((r) => r.rollout_tokens === 0));
});

test('an attempt declared lost that finishes its model makes the job succeed; the newer attempt is cancelled', async (t) => {
  t.after(() => { if (t.passed === false) dumpLogs(); });
  const created = await createJob('late');
  const log = (dir, attempt) => path.join(dir, 'jobs', `${created.id}-${attempt}`, 'trainer.log');
  const says = (file, text) => fs.existsSync(file) && fs.readFileSync(file, 'utf8').includes(text);
  // Attempt 1 runs on the first executor and waits; a second executor joins; the first one freezes
  // (SIGSTOP: no heartbeats) until its lease expires and the job moves to the second.
  await until('attempt 1 to wait', () => says(log(exDir, 1), 'waiting for release'), 60000);
  const exB = path.join(work, 'ex-b');
  const second = start('executor-b', ['executor', '--data-dir', work, '--dc', 'dc-a', '--pool', 'dc-a', '--devices',
                                      'sim:H100:2:80', '--work-dir', exB, '--trainer', TRAINER]);
  await until('the second executor to register', () => logs['executor-b'].includes('registered'), 30000);
  executor.kill('SIGSTOP');
  try {
    await until('attempt 2 to wait on the second executor', () => says(log(exB, 2), 'waiting for release'), 60000);
    // Attempt 1 finishes while its executor is frozen; the executor reports it when it wakes up.
    fs.writeFileSync(path.join(exDir, 'jobs', `${created.id}-1`, 'release'), '');
    await until('attempt 1 to write its final model', () => says(log(exDir, 1), 'final model written'), 30000);
  } finally {
    executor.kill('SIGCONT');
  }
  const job = await finished(created.id, 'late');
  assert.equal(job.status, 'succeeded', JSON.stringify(job.error));
  assert.equal(job.fine_tuned_model, `ft:whet-tiny:sbx:late:${job.id}`);
  // The newer attempt is cancelled and ends as such; the lost one stays lost.
  const outcomes = () => psql(db.url, `SELECT string_agg(attempt || ':' || coalesce(outcome, 'running'), ',' ORDER BY attempt)
                                       FROM job_attempts WHERE job_id = '${job.id}'`);
  await until('attempt 2 to end', () => outcomes() === '1:lost,2:cancelled', 30000)
    .catch((e) => { throw new Error(`${e.message}: ${outcomes()}`); });
  assert.ok(!fs.existsSync(log(exB, 2)) || !says(log(exB, 2), 'final model written'));
  const after = await client.fineTuning.jobs.retrieve(job.id);
  assert.equal(after.status, 'succeeded');
  const messages = (await events(job.id)).map((e) => e.message);
  assert.equal(messages.filter((m) => m === 'The job has successfully completed').length, 1, messages.join('\n'));
  assert.ok(messages.some((m) => /^Attempt 1 on node \S+, declared lost, had finished training/.test(m)), messages.join('\n'));
  assert.ok(!messages.some((m) => /cancelled|failed/.test(m)), messages.join('\n'));
  // Both attempts are metered; the lost one flagged, with the tokens its executor reported.
  const usage = await (await fetch(`${base}/v1/usage`, { headers: { authorization: `Bearer ${key}` } })).json();
  const row = usage.data.find((r) => r.job_id === job.id);
  assert.equal(row.attempts, 2, JSON.stringify(row));
  assert.equal(row.rollout_tokens, 2000, JSON.stringify(row));
  assert.ok(row.lost_device_seconds > 0 && row.lost_device_seconds < row.device_seconds, JSON.stringify(row));
  const lost = psql(db.url, `SELECT rollout_tokens || ',' || lost FROM usage_records WHERE job_id = '${job.id}' AND attempt = 1`);
  assert.equal(lost, '1000,true');
  second.kill('SIGKILL');
});
