// Co-training through the API: `whet up` with one executor (WHET_COTRAIN=1, 8 simulated devices), two
// tenants creating four LoRA SFT jobs and a LoRA DPO job on whet-tiny with the official OpenAI SDK
// (different seeds, batch sizes, learning rates and step counts) and a sixth that is cancelled mid-run. The
// six run in ONE `whet train --cotrain` process on the executor; each of the five succeeds with its own
// fine-tuned model, checkpoints and metrics, and each one's per-step losses equal its trainer config run
// alone (`whet train` on the job's own trainer.json) within 1e-5; the cancelled one ends cancelled while
// the others go on; usage charges each job its share of the process's device-seconds and its own tokens.
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { until } from '../lib.mjs';
import { WHET_BIN } from '../../integration/lib/gateway.mjs';
import { cotrainStack } from './stack.mjs';

const FIXTURES = process.env.WHET_FIXTURES;
const { work, env, tenants, start, logs, dumpLogs, finished, allEvents, usage } =
  await cotrainStack('whet-cotrain-', { WHET_COTRAIN: '1', WHET_COTRAIN_WINDOW_S: '5' });
start('executor', ['executor', '--data-dir', work, '--dc', 'dc-a', '--pool', 'dc-a', '--devices', 'sim:H100:8:80',
                   '--work-dir', path.join(work, 'ex')]);

test('four LoRA SFT jobs and a DPO one of two tenants co-trained on one worker equal each alone; one cancelled alone', async (t) => {
  t.after(() => { if (t.passed === false) dumpLogs(); });
  const files = await Promise.all(tenants.map((tn) => tn.client.files.create({
    file: fs.createReadStream(path.join(FIXTURES, 'sft', 'train.jsonl')), purpose: 'fine-tune' })));
  const pairs = await tenants[1].client.files.create({
    file: fs.createReadStream(path.join(FIXTURES, 'dpo', 'train.jsonl')), purpose: 'fine-tune' });
  const specs = [0, 1, 2, 3].map((i) => ({ tenant: tenants[i % 2], file: files[i % 2], seed: 11 + i, steps: 8 + 2 * i,
    method: 'supervised', hp: { batch_size: 2 + i, learning_rate_multiplier: 1 + i, n_epochs: 50 } }));
  specs.push({ tenant: tenants[1], file: pairs, seed: 21, steps: 7, method: 'dpo',
               hp: { batch_size: 3, beta: 0.1, n_epochs: 50 } });
  specs.push({ tenant: tenants[0], file: files[0], seed: 99, steps: 1000, method: 'supervised',
               hp: { batch_size: 4, n_epochs: 50 }, cancel: true });
  const t0 = Date.now();
  const jobs = await Promise.all(specs.map((s) => s.tenant.client.fineTuning.jobs.create({
    model: 'whet-tiny', training_file: s.file.id, seed: s.seed, suffix: s.tenant.name,
    method: { type: s.method, [s.method]: { hyperparameters: s.hp } },
    whet: { max_steps: s.steps, checkpoint_every_steps: 5 } })));
  // the long one is cancelled once it has trained a few steps beside the others
  const L = specs.length - 1, long = specs[L];
  await until('the long job to train', async () =>
    (await allEvents(long.tenant.client, jobs[L].id)).filter((e) => e.type === 'metrics').length >= 3, 300000, 200);
  await long.tenant.client.fineTuning.jobs.cancel(jobs[L].id);
  const done = await Promise.all(jobs.map((j, i) => finished(specs[i].tenant.client, j.id)));
  const wallCo = (Date.now() - t0) / 1000;
  assert.equal(done[L].status, 'cancelled');
  for (let i = 0; i < L; i++) {
    assert.equal(done[i].status, 'succeeded', `${done[i].id}: ${JSON.stringify(done[i].error)}`);
    assert.equal(done[i].fine_tuned_model, `ft:whet-tiny:${specs[i].tenant.name}:${specs[i].tenant.name}:${done[i].id}`);
  }
  // one process: the executor's log says so, with the six jobs
  assert.match(logs.executor, /msg="co-training started" leader=\S+ jobs=6/);

  let alone = 0;
  for (let i = 0; i < L; i++) {
    const { client } = specs[i].tenant;
    const id = done[i].id;
    const steps = (await allEvents(client, id)).filter((e) => e.type === 'metrics').map((e) => e.data)
      .sort((a, b) => a.step - b.step);
    assert.deepEqual(steps.map((s) => s.step), Array.from({ length: specs[i].steps }, (_, k) => k + 1));
    const checkpoints = [];
    for await (const c of client.fineTuning.jobs.checkpoints.list(id)) checkpoints.push(c.step_number);
    assert.ok(checkpoints.includes(5) && checkpoints.includes(specs[i].steps), checkpoints.join(','));
    // the same trainer config alone
    const dir = path.join(work, 'ex', 'jobs', `${id}-1`);
    const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'trainer.json'), 'utf8'));
    cfg.output_dir = path.join(work, `alone-${i}`);
    fs.writeFileSync(path.join(work, `alone-${i}.json`), JSON.stringify(cfg));
    const a0 = Date.now();
    execFileSync(WHET_BIN, ['train', '--config', path.join(work, `alone-${i}.json`), '--quiet'],
                 { env: { ...env, OMP_NUM_THREADS: '1' } });
    alone += (Date.now() - a0) / 1000;
    const ref = fs.readFileSync(path.join(cfg.output_dir, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(ref.length, steps.length);
    for (let k = 0; k < ref.length; k++)
      assert.ok(Math.abs(ref[k].loss - steps[k].loss) <= 1e-5 * Math.abs(ref[k].loss),
                `${id} step ${k + 1}: alone ${ref[k].loss}, co-trained ${steps[k].loss}`);
  }
  // usage: each job is charged its share of the process (by tokens) and the tokens it trained
  const sum = await usage();
  const seconds = done.map((j) => sum(j.id, 'device_seconds'));
  for (let i = 0; i <= L; i++) {
    assert.ok(seconds[i] > 0, `${done[i].id}: ${seconds[i]} device-seconds`);
    const tokens = (await allEvents(specs[i].tenant.client, done[i].id)).filter((e) => e.type === 'metrics')
      .reduce((s, e) => s + e.data.tokens, 0);
    assert.equal(sum(done[i].id, 'trained_tokens'), tokens, `${done[i].id}: usage tokens`);
  }
  // together no more than the process's devices held for the whole run
  assert.ok(seconds.reduce((a, b) => a + b) <= wallCo * 8, `${seconds} vs ${wallCo} s x 8 devices`);
  console.log(`  co-trained: ${L + 1} jobs through the API in ${wallCo.toFixed(1)} s; the ${L} finished ones alone ` +
              `(whet train, one after another) ${alone.toFixed(1)} s; device-seconds ${seconds.map((x) => x.toFixed(2)).join(' ')}`);
});
