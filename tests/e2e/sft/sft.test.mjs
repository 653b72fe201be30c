// The product end to end, as a tenant meets it: `whet up` with a scheduler and two executors in two
// data centers (simulated H100s whose training runs on the CPU), the official OpenAI SDK uploading a
// dataset (with a byte-order mark and CRLF line ends) and running SFT jobs on whet-tiny, and the
// failures a fleet sees: an executor killed with SIGKILL mid-training, pause and resume, cancel.
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { until, holdTrainer, releaseWhenSignalled, trainerCheckpointed, whetProcesses } from '../lib.mjs';
import { requireEnv, createDatabase, freePort, WHET_BIN } from '../../integration/lib/gateway.mjs';

requireEnv();
const FIXTURES = process.env.WHET_FIXTURES;
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'whet-e2e-'));
fs.chmodSync(work, 0o755);
const db = createDatabase();
const httpPort = await freePort(), grpcPort = await freePort();
const env = { ...process.env, WHET_DATABASE_URL: db.url, WHET_LEASE_MS: '3000', WHET_DATA_DIR: work };
const { children, logs, start, dump: dumpLogs } = whetProcesses(WHET_BIN, env);

const up = start('up', ['up', '--data-dir', work, '--http', `127.0.0.1:${httpPort}`, '--grpc', `127.0.0.1:${grpcPort}`,
                        '--executors', '0']);
await until('whet up to be ready', () => logs.up.includes('whet: ready'), 120000)
  .catch((e) => { dumpLogs(); throw e; });
const executors = {
  'dc-a': start('executor-a', ['executor', '--data-dir', work, '--dc', 'dc-a', '--pool', 'dc-a', '--devices', 'sim:H100:2:80',
                               '--work-dir', path.join(work, 'ex-a')]),
  'dc-b': start('executor-b', ['executor', '--data-dir', work, '--dc', 'dc-b', '--pool', 'dc-b', '--devices', 'sim:H100:2:80',
                               '--work-dir', path.join(work, 'ex-b')]),
};
const whet = (...args) => execFileSync(WHET_BIN, [...args, '--data-dir', work], { env, encoding: 'utf8' });
const key = whet('tenant', 'create', 'e2e').trim();
const adminToken = whet('token', '--admin').trim();
const base = `http://127.0.0.1:${httpPort}`;
const client = new OpenAI({ apiKey: key, baseURL: `${base}/v1`, maxRetries: 2 });

test.after(() => {
  for (const c of children) c.kill('SIGKILL');
  db.drop();
  fs.rmSync(work, { recursive: true, force: true });
});

async function finished(id, timeoutMs = 400000) {
  let last = '';
  return until(`job ${id} to finish`, async () => {
    const job = await client.fineTuning.jobs.retrieve(id);
    const line = `${job.status} step=${job.whet_progress?.step ?? '-'}`;
    if (line !== last) { console.log(`  ${id}: ${line}`); last = line; }
    return ['succeeded', 'failed', 'cancelled'].includes(job.status) ? job : null;
  }, timeoutMs, 500);
}

// The directory of a job's first attempt on whichever executor took it, once it has started there.
const startedJobDir = (id) => {
  const dirs = ['ex-a', 'ex-b'].map((ex) => path.join(work, ex, 'jobs', `${id}-1`));
  return until(`job ${id} to start`, () => dirs.find((d) => fs.existsSync(d)), 300000, 20);
};

async function allEvents(id) {
  const events = [];
  for await (const e of client.fineTuning.jobs.listEvents(id, { limit: 100 })) events.push(e);
  return events;
}

// Uploaded as a Windows editor saves it (a UTF-8 byte-order mark, CRLF line ends): the gateway and the
// trainer read the same examples.
const windowsText = `\ufeff${fs.readFileSync(path.join(FIXTURES, 'sft', 'train.jsonl'), 'utf8').replace(/\n/g, '\r\n')}`;
const training = await client.files.create({ file: new File([windowsText], 'train.jsonl'), purpose: 'fine-tune' });
// 24 examples a step: about the tokens of two full 512-token rows.
const sftMethod = { type: 'supervised', supervised: { hyperparameters: { n_epochs: 50, batch_size: 24, learning_rate_multiplier: 5 } } };

let first;
test('an SFT job created with the OpenAI SDK succeeds, with events, checkpoints and metrics', async (t) => {
  t.after(() => { if (t.passed === false) dumpLogs(); });
  const created = await client.fineTuning.jobs.create({
    model: 'whet-tiny', training_file: training.id, suffix: 'e2e', method: sftMethod,
    whet: { max_steps: 30, checkpoint_every_steps: 10 },
  });
  assert.equal(created.object, 'fine_tuning.job');
  first = await finished(created.id);
  if (first.status !== 'succeeded') dumpLogs();
  assert.equal(first.status, 'succeeded', JSON.stringify(first.error));
  assert.equal(first.fine_tuned_model, `ft:whet-tiny:e2e:e2e:${first.id}`);
  assert.ok(first.trained_tokens > 0);
  const events = await allEvents(first.id);
  assert.ok(events.some((e) => /^Job placed on node \S+ in dc-[ab]/.test(e.message)), 'placement event');
  const metrics = events.filter((e) => e.type === 'metrics');
  assert.ok(metrics.length >= 25, `metrics events: ${metrics.length}`);
  const checkpoints = [];
  for await (const c of client.fineTuning.jobs.checkpoints.list(first.id)) checkpoints.push(c);
  assert.deepEqual(checkpoints.map((c) => c.step_number).sort((a, b) => a - b).slice(0, 3), [10, 20, 30]);
  assert.ok(checkpoints.every((c) => typeof c.metrics.train_loss === 'number'));
});

test('the adapter downloads and scores lower loss than the base model on the training data', async () => {
  assert.ok(first, 'first job');
  const files = await (await fetch(`${base}/v1/fine_tuning/jobs/${first.id}/checkpoints/final/files`,
                                   { headers: { authorization: `Bearer ${key}` } })).json();
  const names = files.data.map((f) => f.name);
  assert.ok(names.includes('adapter_model.safetensors') && names.includes('adapter_config.json'), names.join(','));
  const adapter = path.join(work, 'adapter');
  fs.mkdirSync(adapter, { recursive: true });
  for (const name of ['adapter_model.safetensors', 'adapter_config.json']) {
    const res = await fetch(`${base}/v1/fine_tuning/jobs/${first.id}/checkpoints/final/files/${name}`,
                            { headers: { authorization: `Bearer ${key}` } });
    assert.equal(res.status, 200);
    fs.writeFileSync(path.join(adapter, name), Buffer.from(await res.arrayBuffer()));
  }
  // The assistant answers of the training set, tokenized with the model's own tokenizer.
  const model = path.join(work, 'models', 'whet-tiny');
  const texts = fs.readFileSync(path.join(FIXTURES, 'sft', 'train.jsonl'), 'utf8').trim().split('\n')
    .map((l) => JSON.parse(l).messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join(''));
  const ids = execFileSync(WHET_BIN, ['tokenize', '--tokenizer', path.join(model, 'tokenizer.json'), '--json'],
                           { input: texts.map((t) => JSON.stringify(t)).join('\n') + '\n', encoding: 'utf8' });
  const data = path.join(work, 'score.jsonl');
  fs.writeFileSync(data, ids.trim().split('\n').map((l) => JSON.stringify({ input_ids: JSON.parse(l) })).join('\n') + '\n');
  const mean = (out) => { const r = out.trim().split('\n').map((l) => JSON.parse(l)); return r.reduce((s, x) => s + x.loss * x.tokens, 0) / r.reduce((s, x) => s + x.tokens, 0); };
  const baseLoss = mean(execFileSync(WHET_BIN, ['score', '--model', model, '--data', data], { encoding: 'utf8' }));
  const tunedLoss = mean(execFileSync(WHET_BIN, ['score', '--model', model, '--adapter', adapter, '--data', data], { encoding: 'utf8' }));
  console.log(`  mean loss on the training data: base ${baseLoss.toFixed(4)}, fine-tuned ${tunedLoss.toFixed(4)}`);
  assert.ok(tunedLoss < baseLoss * 0.9, `fine-tuned ${tunedLoss} vs base ${baseLoss}`);
});

test('a second job continues from the first one\'s fine-tuned model; /v1/models lists it', async () => {
  assert.ok(first, 'first job');
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  assert.ok(models.includes('whet-tiny') && models.includes(first.fine_tuned_model), models.join(','));
  const second = await client.fineTuning.jobs.create({ model: first.fine_tuned_model, training_file: training.id,
                                                       method: sftMethod, whet: { max_steps: 5, checkpoint_every_steps: 5 } });
  const done = await finished(second.id);
  assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
  // Each job keeps the estimate it was created with and, once finished, what it took: the second one's
  // tokens come from the first (same file), its throughput from what the first measured.
  for (const [job, steps] of [[first, 30], [done, 5]]) {
    const e = job.whet.estimate;
    assert.equal(e.steps, steps);
    assert.equal(e.actual.trained_tokens, job.trained_tokens);
    console.log(`  estimate vs actual, ${job.id}: steps ${e.steps}; trained tokens ${e.trained_tokens} ` +
                `(${e.trained_tokens_source}) vs ${e.actual.trained_tokens}; duration ${e.expected_duration_s} s ` +
                `(${e.throughput_source}, ${e.tokens_per_device_s} tokens/s on ${e.device_type}) vs ${e.actual.duration_s} s`);
  }
});

// batch_size is OpenAI's: the examples (DPO: preference pairs) of one optimizer step, so an epoch of N
// examples takes ceil(N / batch_size) steps however short they are, and "auto" becomes a number on the
// job. The training file's "data" event says the plan; the metrics events and the result CSV follow it.
async function stepsOf(id) {
  const events = await allEvents(id);
  const data = events.find((e) => e.message === 'Training data loaded')?.data; // no validation file: one event
  const steps = events.filter((e) => e.type === 'metrics').map((e) => e.data.step).sort((a, b) => a - b);
  return { data, steps };
}
// Runs a job to success: the plan in its "data" event, one metrics event and one result CSV row a step.
async function checkSteps(trainingFile, method, examples, perEpoch, total) {
  const created = await client.fineTuning.jobs.create({ model: 'whet-tiny', training_file: trainingFile, method });
  const job = await finished(created.id);
  assert.equal(job.status, 'succeeded', JSON.stringify(job.error));
  const { data, steps } = await stepsOf(job.id);
  assert.deepEqual([data?.examples, data?.steps_per_epoch, data?.total_steps], [examples, perEpoch, total], JSON.stringify(data));
  assert.deepEqual(steps, Array.from({ length: total }, (_, i) => i + 1));
  assert.equal(job.result_files.length, 1);
  const csv = (await (await client.files.content(job.result_files[0])).text()).trim().split('\n');
  assert.equal(csv.length, total + 1, 'a header and one CSV row a step');
}

test('batch_size counts examples: 96 examples, 2 epochs of batch 40 train 2 x ceil(96/40) = 6 steps', async (t) => {
  t.after(() => { if (t.passed === false) dumpLogs(); });
  await checkSteps(training.id, { type: 'supervised', supervised: { hyperparameters: { n_epochs: 2, batch_size: 40 } } },
                   96, 3, 6);
});

test('DPO counts preference pairs: 50 pairs, 1 epoch of batch 20 trains ceil(50/20) = 3 steps', async (t) => {
  t.after(() => { if (t.passed === false) dumpLogs(); });
  // The fixture as it is: OpenAI's output arrays and the older *_completion names (plain text or one
  // message), which the gateway accepts as the trainer reads them.
  const pairs = await client.files.create({ file: fs.createReadStream(path.join(FIXTURES, 'dpo', 'train.jsonl')),
                                           purpose: 'fine-tune' });
  await checkSteps(pairs.id, { type: 'dpo', dpo: { hyperparameters: { n_epochs: 1, batch_size: 20 } } }, 50, 3, 3);
});

test('"auto" n_epochs and batch_size become numbers on the job (OpenAI\'s rule); the run plans by them', async (t) => {
  t.after(() => { if (t.passed === false) dumpLogs(); });
  // 960 examples (the fixture ten times): 3 epochs (2,880 examples seen is within 100..25,000) and
  // batches of 0.2% of 960 = 1.92 -> 2 examples: 1,440 steps, far more than this test waits for.
  const lines = fs.readFileSync(path.join(FIXTURES, 'sft', 'train.jsonl'), 'utf8');
  const big = path.join(work, 'train960.jsonl');
  fs.writeFileSync(big, lines.repeat(10));
  const file = await client.files.create({ file: fs.createReadStream(big), purpose: 'fine-tune' });
  const created = await client.fineTuning.jobs.create({
    model: 'whet-tiny', training_file: file.id,
    method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 'auto', batch_size: 'auto' } } },
  });
  const hp = created.method.supervised.hyperparameters;
  assert.deepEqual([hp.n_epochs, hp.batch_size], [3, 2], JSON.stringify(hp));
  const got = await client.fineTuning.jobs.retrieve(created.id);
  assert.deepEqual([got.hyperparameters.n_epochs, got.hyperparameters.batch_size], [3, 2]);
  // The trainer plans 3 x 480 steps, and once steps come, the job says when it should finish. It is held
  // after its first step, so however fast the CPU the job cannot end before the test has read the plan,
  // and the estimate (elapsed time / steps done x steps left) only grows while it waits.
  const pids = await holdTrainer(t, await startedJobDir(created.id));
  await until('an estimated_finish in the future', async () => {
    const job = await client.fineTuning.jobs.retrieve(created.id);
    assert.ok(!['succeeded', 'failed', 'cancelled'].includes(job.status), `the job ended: ${job.status}`);
    return job.estimated_finish > Date.now() / 1000 + 1;
  }, 300000, 300);
  const { data } = await stepsOf(created.id);
  assert.deepEqual([data?.examples, data?.steps_per_epoch, data?.total_steps], [960, 480, 1440], JSON.stringify(data));
  await client.fineTuning.jobs.cancel(created.id);
  await releaseWhenSignalled(pids);
  assert.equal((await finished(created.id)).status, 'cancelled');
});

test('SIGKILL of the executor running a job: it resumes elsewhere from its last checkpoint and succeeds', async (t) => {
  t.after(() => { if (t.passed === false) dumpLogs(); });
  const job = await client.fineTuning.jobs.create({ model: 'whet-tiny', training_file: training.id, method: sftMethod,
                                                    whet: { max_steps: 60, checkpoint_every_steps: 5 } });
  // Held once it has published a checkpoint, so the job cannot finish before its executor dies.
  await holdTrainer(t, await startedJobDir(job.id), trainerCheckpointed);
  await until('a checkpoint', async () => (await client.fineTuning.jobs.checkpoints.list(job.id)).data.length > 0, 300000, 300);
  const nodes = await (await fetch(`${base}/admin/v1/nodes`, { headers: { authorization: `Bearer ${adminToken}` } })).json();
  const node = nodes.data.find((n) => n.running_jobs.includes(job.id));
  assert.ok(node, 'the job runs somewhere');
  executors[node.dc].kill('SIGKILL');
  const done = await finished(job.id);
  assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
  const events = await allEvents(job.id);
  assert.ok(events.some((e) => /stopped answering/.test(e.message)), 'a node-lost event');
  const resumed = events.find((e) => /resuming from step \d+/.test(e.message));
  assert.ok(resumed, 'placed again, resuming from a checkpoint');
  const from = Number(resumed.message.match(/resuming from step (\d+)/)[1]);
  assert.ok(from >= 5);
  // Steps continue after the resume rather than start over: the steps up to the checkpoint were trained
  // once (only those after it are trained again), and the run still reaches its last step.
  const steps = events.filter((e) => e.type === 'metrics').map((e) => e.data.step);
  for (let s = 1; s <= from; s++) assert.equal(steps.filter((x) => x === s).length, 1, `step ${s} trained once`);
  assert.ok(steps.includes(60), 'reached step 60');
});
