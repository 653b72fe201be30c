// Scheduler-placed co-training groups beyond SFT and DPO: `whet up` with no executor, two tenants create a
// LoRA SFT job and two GRPO jobs on whet-tiny, one graded by a python grader (tenant code, run by the
// trainer in sandboxes nested in its own), the other by the string_check computing the same; then ONE
// executor with ONE device joins (its co-training passes of at most 512 tokens: WHET_COTRAIN_PASS_TOKENS, which
// the scheduler sizes its groups by too). The three are placed as one group and run in one `whet train --cotrain`
// process whose sandbox gives each member what its own would (the python grader's nested sandboxes). Each
// succeeds with the result it has alone: its per-step figures and its adapter equal its own trainer
// config run alone (`whet train`) within e2e_cotrain's tolerances, and the python grader scores as the
// string_check does. Then a job created while a group runs joins it: the scheduler places it into the
// running group, the executor hands it to the group's process (no second process), and it succeeds with
// its result alone. A GRPO job with a python grader placed into that running group cannot join its process
// (whose sandbox nests no python sandboxes): the executor starts a process of the group's for it on the same
// device instead (the join's fallback), and it succeeds.
//
// Kept short for 2 busy cores: 4 SFT steps, 2 GRPO steps of 2 prompts x 4 responses of at most 8 tokens.
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { until } from '../lib.mjs';
import { psql, WHET_BIN } from '../../integration/lib/gateway.mjs';
import { cotrainStack } from './stack.mjs';

const FIXTURES = process.env.WHET_FIXTURES;
const { work, env, db, tenants, start, logs, dumpLogs, finished, allEvents } =
  await cotrainStack('whet-cotrain-group-', { WHET_COTRAIN: undefined, WHET_COTRAIN_PASS_TOKENS: '512' });

// The task of tests/e2e/grpo: answer with a word holding a given letter.
const rftPath = path.join(work, 'rft.jsonl');
fs.writeFileSync(rftPath, ['e', 'a', 'o', 't', 'i', 'n', 's', 'r'].map((l) => JSON.stringify({
  messages: [{ role: 'user', content: `Say a word with the letter ${l}.` }], answer: l })).join('\n') + '\n');
const GRADERS = {
  python: { type: 'python', name: 'has_letter_py',
            source: 'def grade(sample, item):\n    return 1.0 if item["answer"] in sample["output_text"] else 0.0\n' },
  string: { type: 'string_check', name: 'has_letter', input: '{{sample.output_text}}', reference: '{{item.answer}}',
            operation: 'like' },
};

// A GRPO job on the letter task: 2 steps of 2 prompts x 4 responses of at most 8 tokens.
const grpo = (tn, file, grader) => tn.client.fineTuning.jobs.create({
  model: 'whet-tiny', training_file: file.id, seed: 7,
  method: { type: 'reinforcement', reinforcement: { grader, hyperparameters: { batch_size: 2, learning_rate_multiplier: 10 } } },
  whet: { group_size: 4, max_tokens: 8, kl_coef: 0.01, max_steps: 2, checkpoint_every_steps: 2 } });

const metricsOf = async (client, id) => (await allEvents(client, id)).filter((e) => e.type === 'metrics')
  .map((e) => e.data).sort((a, b) => a.step - b.step);

// The tensors of a safetensors file (f32), by name.
function tensors(file) {
  const raw = fs.readFileSync(file);
  const n = Number(raw.readBigUInt64LE(0));
  const head = JSON.parse(raw.subarray(8, 8 + n).toString());
  const out = {};
  for (const [name, t] of Object.entries(head)) {
    if (name === '__metadata__') continue;
    const [lo, hi] = t.data_offsets;
    const b = raw.subarray(8 + n + lo, 8 + n + hi);
    out[name] = new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
  }
  return out;
}

// The job's own trainer config (its dir on the executor) run alone: its per-step figures as co-trained
// (e2e_cotrain's tolerances: losses and norms within 1e-5 relative, a GRPO run's draws and grades exactly)
// and its adapter within 1e-4 in L2 of its norm. The GRPO jobs generate their rollouts together (one batched
// decode), whose products sum in another order than alone's: as in e2e_cotrain, a GRPO run is as alone up to the
// first step whose draws differ (a token flipped where two were within rounding; none has here so far), at
// most two responses' worth apart at that step, then compared by its steps and learning rates only.
function equalsAlone(jobDir, name) {
  const cfg = JSON.parse(fs.readFileSync(path.join(jobDir, 'trainer.json'), 'utf8'));
  const co = cfg.output_dir;
  cfg.output_dir = path.join(work, `alone-${name}`);
  fs.writeFileSync(path.join(work, `alone-${name}.json`), JSON.stringify(cfg));
  execFileSync(WHET_BIN, ['train', '--config', path.join(work, `alone-${name}.json`), '--quiet'],
               { env: { ...env, OMP_NUM_THREADS: '1' } });
  const lines = (dir) => fs.readFileSync(path.join(dir, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  const [a, c] = [lines(cfg.output_dir), lines(co)];
  assert.deepEqual(c.map((r) => r.step), a.map((r) => r.step), name);
  const exact = ['step', 'epoch', 'lr', 'tokens', 'reward_mean', 'reward_std', 'pass_rate', 'response_length_mean',
                 'rollout_tokens', 'grader_errors', 'groups_kept'];
  const draws = exact.slice(4);
  let parted = null; // a GRPO run's first step whose draws differ from alone's
  for (let k = 0; k < a.length; k++) {
    if (cfg.method === 'grpo' && parted === null && draws.some((f) => a[k][f] !== c[k][f])) {
      parted = k + 1;
      const n = cfg.rollout.n * cfg.hyperparameters.batch_size, L = cfg.rollout.max_tokens;
      for (const [f, most] of [['rollout_tokens', 2 * L], ['response_length_mean', 2 * L / n], ['reward_mean', 2 / n],
                               ['pass_rate', 2 / n]]) // at most two responses differ
        assert.ok(Math.abs(a[k][f] - c[k][f]) <= most + 1e-9, `${name} step ${parted} ${f}: alone ${a[k][f]}, co-trained ${c[k][f]}`);
    }
    if (parted !== null) {
      for (const f of ['step', 'epoch', 'lr']) assert.equal(c[k][f], a[k][f], `${name} step ${k + 1} ${f}`);
      continue;
    }
    for (const [f, x] of Object.entries(a[k])) {
      const y = c[k][f];
      if (f.endsWith('_per_s') || f.startsWith('time_') || x === null || typeof x !== 'number') continue;
      if (exact.includes(f)) assert.equal(y, x, `${name} step ${k + 1} ${f}`);
      else if (f.endsWith('accuracy')) assert.ok(Math.abs(x - y) <= 0.05, `${name} step ${k + 1} ${f}: ${x} vs ${y}`);
      else assert.ok(Math.abs(x - y) <= 1e-5 * Math.abs(x), `${name} step ${k + 1} ${f}: alone ${x}, co-trained ${y}`);
    }
  }
  if (parted !== null) {
    console.log(`${name}: draws as alone in ${parted - 1} of ${a.length} steps, then a token flipped`);
    return a;
  }
  const adapter = (dir) => tensors(path.join(dir, 'final', 'adapter_model.safetensors'));
  const [ta, tc] = [adapter(cfg.output_dir), adapter(co)];
  assert.deepEqual(Object.keys(tc).sort(), Object.keys(ta).sort());
  let norm = 0, dist = 0;
  for (const k of Object.keys(ta))
    for (let i = 0; i < ta[k].length; i++) norm += ta[k][i] ** 2, dist += (ta[k][i] - tc[k][i]) ** 2;
  assert.ok(Math.sqrt(dist) <= 1e-4 * Math.sqrt(norm), `${name}: adapter differs by ${Math.sqrt(dist)} (norm ${Math.sqrt(norm)})`);
  return a;
}

let executor1;
test('an SFT job and two GRPO jobs, one with a python grader, placed as one group: each as alone', async (t) => {
  t.after(() => { if (t.passed === false) dumpLogs(); });
  const [acme, globex] = tenants;
  const sftFile = await acme.client.files.create({ file: fs.createReadStream(path.join(FIXTURES, 'sft', 'train.jsonl')),
                                                   purpose: 'fine-tune' });
  const rft = await Promise.all(tenants.map((tn) => tn.client.files.create({ file: fs.createReadStream(rftPath),
                                                                             purpose: 'fine-tune' })));
  const specs = [
    { tenant: acme, create: () => acme.client.fineTuning.jobs.create({
      model: 'whet-tiny', training_file: sftFile.id, seed: 5,
      method: { type: 'supervised', supervised: { hyperparameters: { batch_size: 2, n_epochs: 50 } } },
      whet: { max_steps: 4, checkpoint_every_steps: 2 } }) },
    { tenant: globex, create: () => grpo(globex, rft[1], GRADERS.python) },
    { tenant: acme, create: () => grpo(acme, rft[0], GRADERS.string) },
  ];
  const jobs = [];
  for (const s of specs) jobs.push(await s.create());
  await until('the jobs to wait for an executor', async () => (await Promise.all(jobs.map((j, i) =>
    specs[i].tenant.client.fineTuning.jobs.retrieve(j.id)))).every((j) => j.status === 'queued'), 60000, 200);
  executor1 = start('executor', ['executor', '--data-dir', work, '--dc', 'dc-a', '--pool', 'dc-a', '--devices', 'sim:H100:1:80',
                     '--work-dir', path.join(work, 'ex')]);
  const done = await Promise.all(jobs.map((j, i) => finished(specs[i].tenant.client, j.id)));
  for (const j of done) assert.equal(j.status, 'succeeded', `${j.id}: ${JSON.stringify(j.error)}`);
  // one group, one process
  const groups = new Set();
  for (let i = 0; i < 3; i++) {
    const placed = (await allEvents(specs[i].tenant.client, done[i].id)).filter((e) => e.message.startsWith('Job placed on'));
    assert.equal(placed.length, 1, JSON.stringify(placed));
    assert.match(placed[0].message, /co-trained with 2 other jobs of its base model on one device/);
    groups.add(placed[0].data.cotrain_group);
  }
  assert.equal(groups.size, 1);
  assert.equal(psql(db.url, 'SELECT count(DISTINCT cotrain_group), count(*) FROM job_attempts').trim(), '1|3');
  assert.match(logs.executor, /msg="co-training started" leader=\S+ jobs=3 pass_tokens=512/);
  // the python grader ran in the group's sandbox: it scores as the string_check does, step by step
  const [py, sc] = [await metricsOf(globex.client, done[1].id), await metricsOf(acme.client, done[2].id)];
  assert.deepEqual(py.map((m) => m.step), [1, 2]);
  for (let k = 0; k < 2; k++)
    for (const f of ['reward_mean', 'pass_rate', 'grader_errors']) assert.equal(py[k][f], sc[k][f], `step ${k + 1} ${f}`);
  assert.ok(py[0].grader_errors < 2 * 4, 'some responses graded');
  // and each job's result is its result alone (its dir is in its group's on the executor)
  for (let i = 0; i < 3; i++) equalsAlone(path.join(work, 'ex', 'cotrain', [...groups][0], `${done[i].id}-1`), `g${i}`);
});

test('a job created while a group runs joins its process and ends as alone; one it cannot join runs beside', async (t) => {
  t.after(() => { if (t.passed === false) dumpLogs(); });
  const tn = tenants[1];
  const file = await tn.client.files.create({ file: fs.createReadStream(path.join(FIXTURES, 'sft', 'train.jsonl')),
                                              purpose: 'fine-tune' });
  const sft = (seed, steps, batch) => tn.client.fineTuning.jobs.create({
    model: 'whet-tiny', training_file: file.id, seed,
    method: { type: 'supervised', supervised: { hyperparameters: { batch_size: batch, n_epochs: 50 } } },
    whet: { max_steps: steps, checkpoint_every_steps: steps > 50 ? 50 : 4 } });
  // two long jobs wait together for a device (the first executor goes), then form a group on a new one
  executor1.kill('SIGKILL');
  await until('no executor to be ready',
    () => psql(db.url, "SELECT count(*) FROM nodes WHERE state = 'ready'").trim() === '0', 60000, 300);
  const long = [await sft(41, 150, 2), await sft(42, 150, 3)];
  start('executor2', ['executor', '--data-dir', work, '--dc', 'dc-a', '--pool', 'dc-a', '--devices', 'sim:H100:1:80',
                      '--work-dir', path.join(work, 'ex2')]);
  await until('the two to train together', async () => (await Promise.all(long.map((j) => allEvents(tn.client, j.id))))
    .every((ev) => ev.some((e) => /co-trained with 1 other job/.test(e.message)) && ev.some((e) => e.type === 'metrics')),
  300000, 300);
  // a third, created now, joins their running process; a fourth, python-graded, is placed into their group too
  // but needs what their process's sandbox lacks: the executor starts a process of the group's for it
  const rft = await tn.client.files.create({ file: fs.createReadStream(rftPath), purpose: 'fine-tune' });
  const late = await sft(43, 8, 2);
  // (created once the third is placed: in one cycle with it, the third's event would count it as a member)
  await until('the third to be placed', async () =>
    (await allEvents(tn.client, late.id)).some((e) => e.message.startsWith('Job placed on')), 120000, 200);
  const py = await grpo(tn, rft, GRADERS.python);
  const done = await finished(tn.client, late.id);
  assert.equal(done.status, 'succeeded', JSON.stringify(done.error));
  const events = await allEvents(tn.client, late.id);
  const placed = events.filter((e) => e.message.startsWith('Job placed on'));
  const group = (await allEvents(tn.client, long[0].id)).find((e) => e.message.startsWith('Job placed on')).data.cotrain_group;
  assert.equal(placed.length, 1, JSON.stringify(placed));
  assert.match(placed[0].message, /co-trained with 2 other jobs of its base model on one device/);
  assert.equal(placed[0].data.cotrain_group, group);
  assert.match(logs.executor2, new RegExp(`msg="co-training joined" job=${late.id} group=${group}`));
  assert.match(logs.executor2, /msg="co-training started" leader=\S+ jobs=2 /);
  const steps = events.filter((e) => e.type === 'metrics').map((e) => e.data.step).sort((a, b) => a - b);
  assert.deepEqual(steps, Array.from({ length: 8 }, (_, k) => k + 1));
  const checkpoints = [];
  for await (const c of tn.client.fineTuning.jobs.checkpoints.list(late.id)) checkpoints.push(c.step_number);
  assert.deepEqual(checkpoints.sort((a, b) => a - b), [4, 8]);
  equalsAlone(path.join(work, 'ex2', 'cotrain', group, `${late.id}-1`), 'late');
  // the python-graded one: in the group, not joined to its process, a process of its own beside it
  const pyDone = await finished(tn.client, py.id);
  assert.equal(pyDone.status, 'succeeded', JSON.stringify(pyDone.error));
  const pyPlaced = (await allEvents(tn.client, py.id)).filter((e) => e.message.startsWith('Job placed on'));
  assert.equal(pyPlaced.length, 1, JSON.stringify(pyPlaced));
  assert.equal(pyPlaced[0].data.cotrain_group, group);
  assert.doesNotMatch(logs.executor2, new RegExp(`msg="co-training joined" job=${py.id}`));
  assert.match(logs.executor2, new RegExp(`msg="co-training started" leader=${py.id} jobs=1 pass_tokens=512`));
  assert.equal(logs.executor2.match(/msg="co-training started"/g).length, 2, 'the group\'s process and the python job\'s');
  const pyMetrics = await metricsOf(tn.client, py.id);
  assert.deepEqual(pyMetrics.map((m) => m.step), [1, 2]);
  assert.ok(pyMetrics[0].grader_errors < 2 * 4, 'its python grader ran');
  // the two go on to their end
  for (const j of long) {
    const d = await finished(tn.client, j.id);
    assert.equal(d.status, 'succeeded', `${d.id}: ${JSON.stringify(d.error)}`);
  }
});
