// Reinforcement fine-tuning end to end, as a tenant meets it: `whet up` with one executor, the official
// OpenAI SDK uploading an RFT dataset (a small verifiable task, graded by a string_check) and creating a
// `reinforcement` job with whet's GRPO settings; the scheduler maps it onto a grpo trainer config, the
// executor runs it in the sandbox. Checked: the job succeeds; its step events carry the reward metrics
// and show that the settings reached the trainer (group size, response length, eval interval); its
// checkpoints are listed; the tenant's usage meters the generated (rollout) tokens exactly; a grader
// training could not run is a 400 naming the field.
//
// Kept short for 2 busy cores: whet-tiny, 4 steps of 2 prompts x 4 responses of at most 8 tokens.
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { until } from '../lib.mjs';
import { requireEnv, createDatabase, freePort, WHET_BIN } from '../../integration/lib/gateway.mjs';

requireEnv();
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'whet-grpo-'));
fs.chmodSync(work, 0o755);
const db = createDatabase();
const httpPort = await freePort(), grpcPort = await freePort();
const env = { ...process.env, WHET_DATABASE_URL: db.url, WHET_LEASE_MS: '3000', WHET_DATA_DIR: work };
let log = '';
const up = spawn(WHET_BIN, ['up', '--data-dir', work, '--http', `127.0.0.1:${httpPort}`, '--grpc', `127.0.0.1:${grpcPort}`,
                            '--executors', '1', '--devices', 'sim:H100:1'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
up.stdout.on('data', (d) => { log = (log + d).slice(-30000); });
up.stderr.on('data', (d) => { log = (log + d).slice(-30000); });
test.after(() => {
  up.kill('SIGTERM');
  db.drop();
  fs.rmSync(work, { recursive: true, force: true });
});
const dump = (t) => t.after(() => { if (t.passed === false) console.error(log.split('\n').slice(-40).join('\n')); });

await until('whet up to be ready', () => log.includes('whet: ready'), 120000)
  .catch((e) => { console.error(log); throw e; });
const whet = (...args) => execFileSync(WHET_BIN, [...args, '--data-dir', work], { env, encoding: 'utf8' });
const key = whet('tenant', 'create', 'rft').trim();
const base = `http://127.0.0.1:${httpPort}`;
const client = new OpenAI({ apiKey: key, baseURL: `${base}/v1`, maxRetries: 2 });

// The task: answer with a word that holds a given letter; the grader checks the letter is in the
// answer (string_check "like" is a substring test). Random answers of an untrained model pass some of
// the time, so groups have rewards that differ and GRPO has something to learn from.
function rftFile(name, letters) {
  const lines = letters.map((l) => JSON.stringify({
    messages: [{ role: 'user', content: `Say a word with the letter ${l}.` }], answer: l,
  }));
  const p = path.join(work, name);
  fs.writeFileSync(p, lines.join('\n') + '\n');
  return p;
}
const upload = (p) => client.files.create({ file: fs.createReadStream(p), purpose: 'fine-tune' });
const training = await upload(rftFile('train.jsonl', ['e', 'a', 'o', 't', 'i', 'n', 's', 'r']));
const validation = await upload(rftFile('valid.jsonl', ['e', 'a', 'o']));
let stringCheckSteps = null;
const grader = { type: 'string_check', name: 'has_letter', input: '{{sample.output_text}}',
                 reference: '{{item.answer}}', operation: 'like' };

async function finished(id, timeoutMs = 300000) {
  return until(`job ${id} to finish`, async () => {
    const job = await client.fineTuning.jobs.retrieve(id);
    return ['succeeded', 'failed', 'cancelled'].includes(job.status) ? job : null;
  }, timeoutMs, 300);
}

async function allEvents(id) {
  const events = [];
  for await (const e of client.fineTuning.jobs.listEvents(id, { limit: 100 })) events.push(e);
  return events;
}

test('a grader training could not run is refused at create with the path of the field', async () => {
  const bad = [
    [{ ...grader, operation: 'contains' }, 'method.reinforcement.grader.operation'],
    [{ type: 'multi', name: 'm', graders: { a: grader }, calculate_output: 'a +' }, 'method.reinforcement.grader.calculate_output'],
    [{ ...grader, reference: undefined }, 'method.reinforcement.grader.reference'],
  ];
  for (const [g, param] of bad) {
    const e = await client.fineTuning.jobs.create({
      model: 'whet-tiny', training_file: training.id, method: { type: 'reinforcement', reinforcement: { grader: g } },
    }).then(() => null, (err) => err);
    assert.ok(e instanceof OpenAI.BadRequestError, `refused: ${JSON.stringify(g)}`);
    assert.equal(e.status, 400);
    assert.equal(e.param, param, e.message);
  }
  // The GRPO settings are checked too, and only reinforcement jobs take them.
  const e = await client.fineTuning.jobs.create({
    model: 'whet-tiny', training_file: training.id, method: { type: 'reinforcement', reinforcement: { grader } },
    whet: { group_size: 4, loss_agg: 'mean' },
  }).then(() => null, (err) => err);
  assert.equal(e?.status, 400);
  assert.equal(e.param, 'whet.loss_agg', e.message);
});

test('a reinforcement job created with the OpenAI SDK trains with GRPO and succeeds', async (t) => {
  dump(t);
  const t0 = Date.now();
  const created = await client.fineTuning.jobs.create({
    model: 'whet-tiny', training_file: training.id, validation_file: validation.id, suffix: 'rft', seed: 7,
    method: {
      type: 'reinforcement',
      reinforcement: {
        grader,
        hyperparameters: { n_epochs: 1, batch_size: 2, learning_rate_multiplier: 10, eval_interval: 2, eval_samples: 2,
                           reasoning_effort: 'low' },
      },
    },
    whet: { group_size: 4, max_tokens: 8, kl_coef: 0.01, checkpoint_every_steps: 2 },
  });
  assert.equal(created.object, 'fine_tuning.job');
  assert.equal(created.seed, 7);
  assert.equal(created.method.type, 'reinforcement');
  assert.equal(created.method.reinforcement.grader.name, 'has_letter');
  const job = await finished(created.id);
  console.log(`  ${job.id}: ${job.status} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  assert.equal(job.status, 'succeeded', JSON.stringify(job.error));
  assert.equal(job.fine_tuned_model, `ft:whet-tiny:rft:rft:${job.id}`);

  // One metrics event per step, each carrying what GRPO measured.
  const events = await allEvents(job.id);
  const steps = events.filter((e) => e.type === 'metrics').map((e) => e.data).sort((a, b) => a.step - b.step);
  for (const m of steps)
    console.log(`  step ${m.step}: reward_mean ${m.reward_mean} reward_std ${m.reward_std} pass_rate ${m.pass_rate} kl ${m.kl} ` +
                `loss ${m.loss} rollout_tokens ${m.rollout_tokens} response_length_mean ${m.response_length_mean} ` +
                `valid_reward_mean ${m.valid_reward_mean}`);
  // batch_size counts prompts: 1 epoch of 8 prompts in batches of 2 is ceil(8/2) = 4 steps.
  assert.deepEqual(steps.map((m) => m.step), [1, 2, 3, 4]);
  const data = events.find((e) => e.message === 'Training data loaded' && e.data?.file?.endsWith('train.jsonl'))?.data;
  assert.deepEqual([data?.examples, data?.steps_per_epoch, data?.total_steps], [8, 4, 4], JSON.stringify(data));
  for (const m of steps) {
    for (const f of ['reward_mean', 'reward_std', 'pass_rate', 'kl', 'entropy', 'clip_frac', 'response_length_mean',
                     'rollout_tokens', 'time_rollout_s', 'time_grading_s'])
      assert.equal(typeof m[f], 'number', `step ${m.step}: ${f} in ${JSON.stringify(m)}`);
    assert.ok(m.reward_mean >= 0 && m.reward_mean <= 1, `reward_mean ${m.reward_mean}`);
    assert.ok(m.pass_rate >= 0 && m.pass_rate <= 1, `pass_rate ${m.pass_rate}`);
    // The settings reached the trainer: 2 prompts x group_size 4 responses of at most max_tokens 8.
    assert.ok(m.rollout_tokens > 0 && m.rollout_tokens <= 2 * 4 * 8, `rollout_tokens ${m.rollout_tokens}`);
    assert.ok(m.response_length_mean > 0 && m.response_length_mean <= 8, `response_length_mean ${m.response_length_mean}`);
  }
  // The task gives GRPO a signal (rewards differ within groups), and the policy moves: the adapter starts
  // at zero, so step 1 samples from the reference itself (KL 0); after updates it differs from it.
  assert.ok(steps.some((m) => m.reward_std > 0), 'rewards that differ');
  assert.ok(steps[0].kl < 1e-6, `KL at step 1: ${steps[0].kl}`);
  assert.ok(steps[3].kl > 0, `KL at step 4: ${steps[3].kl}`);
  // eval_interval 2: validation rewards at steps 2 and 4.
  for (const s of [2, 4]) assert.equal(typeof steps[s - 1].valid_reward_mean, 'number', `valid_reward_mean at step ${s}`);
  assert.equal(steps[0].valid_reward_mean, undefined, 'no validation at step 1');
  assert.ok(events.some((e) => /^Step \d+:/.test(e.message)), 'progress messages');

  const checkpoints = [];
  for await (const c of client.fineTuning.jobs.checkpoints.list(job.id)) checkpoints.push(c);
  assert.deepEqual(checkpoints.map((c) => c.step_number).sort((a, b) => a - b).slice(0, 2), [2, 4]);
  for (const c of checkpoints) {
    assert.equal(c.metrics.step, c.step_number);
    const m = steps[c.step_number - 1];
    assert.equal(c.metrics.train_reward_mean, m.reward_mean, `checkpoint ${c.step_number} reward`);
    assert.equal(c.metrics.train_pass_rate, m.pass_rate, `checkpoint ${c.step_number} pass rate`);
    assert.equal(c.metrics.valid_reward_mean, m.valid_reward_mean, `checkpoint ${c.step_number} validation reward`);
  }
  // The result file is the step metrics as CSV, with the reward columns of a reinforcement job.
  const done = await client.fineTuning.jobs.retrieve(job.id);
  assert.equal(done.result_files.length, 1);
  const csv = (await (await client.files.content(done.result_files[0])).text()).trim().split('\n');
  assert.equal(csv[0], 'step,train_loss,train_reward_mean,train_pass_rate,valid_reward_mean,valid_pass_rate');
  assert.equal(csv.length, steps.length + 1);
  const row2 = csv[2].split(',');
  assert.equal(Number(row2[0]), 2);
  assert.ok(Math.abs(Number(row2[2]) - steps[1].reward_mean) < 1e-5, csv[2]);
  assert.ok(Math.abs(Number(row2[4]) - steps[1].valid_reward_mean) < 1e-5, csv[2]);
  assert.equal(csv[1].split(',')[4], '', 'no validation at step 1');

  // Metering: the tenant's usage has the generated tokens, exactly those the steps reported.
  const usage = await (await fetch(`${base}/v1/usage`, { headers: { authorization: `Bearer ${key}` } })).json();
  const rows = usage.data.filter((u) => u.job_id === job.id);
  assert.ok(rows.length >= 1, JSON.stringify(usage));
  const rollout = rows.reduce((s, u) => s + u.rollout_tokens, 0);
  assert.equal(rollout, steps.reduce((s, m) => s + m.rollout_tokens, 0), JSON.stringify(rows));
  stringCheckSteps = steps;
});

// The same task graded by tenant code: the trainer runs the python grader in sandboxes nested in its
// own. Same seed and settings, so step 1 samples the same responses from the untouched model: the
// python grader, which computes what the string_check does, must give them the same rewards.
test('a reinforcement job grading with a python grader succeeds, scoring as the string_check did', async (t) => {
  dump(t);
  assert.ok(stringCheckSteps, 'the string_check job ran');
  const t0 = Date.now();
  const created = await client.fineTuning.jobs.create({
    model: 'whet-tiny', training_file: training.id, seed: 7,
    method: {
      type: 'reinforcement',
      reinforcement: {
        grader: { type: 'python', name: 'has_letter_py',
                  source: 'def grade(sample, item):\n    return 1.0 if item["answer"] in sample["output_text"] else 0.0\n' },
        hyperparameters: { batch_size: 2, learning_rate_multiplier: 10 },
      },
    },
    whet: { group_size: 4, max_tokens: 8, kl_coef: 0.01, max_steps: 2, checkpoint_every_steps: 2 },
  });
  const job = await finished(created.id);
  console.log(`  ${job.id}: ${job.status} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  assert.equal(job.status, 'succeeded', JSON.stringify(job.error));
  const events = await allEvents(job.id);
  const steps = events.filter((e) => e.type === 'metrics').map((e) => e.data).sort((a, b) => a.step - b.step);
  assert.deepEqual(steps.map((m) => m.step), [1, 2]);
  // A python grader that could not run would fail every sample (python_grader_server_error, reward 0);
  // here it fails exactly the samples the string_check failed on too (responses the sample object
  // cannot hold), and agrees on the rest.
  const [py, sc] = [steps[0], stringCheckSteps[0]];
  console.log(`  step 1: python grader reward_mean ${py.reward_mean} grader_errors ${py.grader_errors} ` +
              `grading ${py.time_grading_s} s; string_check ${sc.reward_mean}, ${sc.grader_errors}, ${sc.time_grading_s} s`);
  assert.equal(py.grader_errors, sc.grader_errors, `grader errors at step 1; events: ${events.map((e) => e.message).join(' | ')}`);
  assert.ok(py.grader_errors < 2 * 4, 'some responses graded');
  assert.equal(py.reward_mean, sc.reward_mean);
  assert.equal(py.pass_rate, sc.pass_rate);
});
