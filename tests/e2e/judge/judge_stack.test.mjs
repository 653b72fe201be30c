// A reinforcement job graded by a score_model whose judge is a catalog model, through the whole stack:
// `whet up` with one executor, the OpenAI SDK creating the job, the scheduler listing the judge in the
// manifest, the executor fetching it like the base model and the trainer (in its sandbox) loading it.
// Checked: the job succeeds with one metrics event per step whose rewards lie inside the grader's
// range, and every response was graded (grader errors, if any, are replies of the random whet-tiny
// judge holding no number, at most one per response).
//
// Kept short for 2 busy cores: whet-tiny judging whet-tiny, 2 steps of 2 prompts x 4 responses.
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
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'whet-judge-'));
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

await until('whet up to be ready', () => log.includes('whet: ready'), 120000)
  .catch((e) => { console.error(log); throw e; });
const whet = (...args) => execFileSync(WHET_BIN, [...args, '--data-dir', work], { env, encoding: 'utf8' });
const key = whet('tenant', 'create', 'judged').trim();
const client = new OpenAI({ apiKey: key, baseURL: `http://127.0.0.1:${httpPort}/v1`, maxRetries: 2 });

const lines = ['red', 'blue', 'green', 'white'].map((w) => JSON.stringify({
  messages: [{ role: 'user', content: `Reply with the word ${w}.` }], answer: w,
}));
const trainPath = path.join(work, 'train.jsonl');
fs.writeFileSync(trainPath, lines.join('\n') + '\n');
const training = await client.files.create({ file: fs.createReadStream(trainPath), purpose: 'fine-tune' });

test('a score_model grader judges with a catalog model in the trainer', async (t) => {
  t.after(() => { if (t.passed === false) console.error(log.split('\n').slice(-40).join('\n')); });
  const grader = { type: 'score_model', name: 'judge', model: 'whet-tiny', range: [0, 10],
                   sampling_params: { max_completions_tokens: 4 },
                   input: [{ role: 'system', content: 'You grade answers.' },
                           { role: 'user', content: 'Expected {{item.answer}}; got {{sample.output_text}}.' }] };
  const created = await client.fineTuning.jobs.create({
    model: 'whet-tiny', training_file: training.id, seed: 3,
    method: { type: 'reinforcement', reinforcement: { grader, hyperparameters: { batch_size: 2 } } },
    whet: { group_size: 4, max_tokens: 6, max_steps: 2 },
  });
  const job = await until(`job ${created.id} to finish`, async () => {
    const j = await client.fineTuning.jobs.retrieve(created.id);
    return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : null;
  }, 240000, 300);
  assert.equal(job.status, 'succeeded', JSON.stringify(job.error));
  const events = [];
  for await (const e of client.fineTuning.jobs.listEvents(job.id, { limit: 100 })) events.push(e);
  const steps = events.filter((e) => e.type === 'metrics').map((e) => e.data).sort((a, b) => a.step - b.step);
  for (const m of steps) console.log(`  step ${m.step}: reward_mean ${m.reward_mean} grader_errors ${m.grader_errors}`);
  assert.deepEqual(steps.map((m) => m.step), [1, 2]);
  for (const m of steps) {
    assert.ok(m.reward_mean >= 0 && m.reward_mean <= 10, `reward_mean ${m.reward_mean}`);
    assert.ok(m.time_grading_s > 0, `time_grading_s ${m.time_grading_s}`);
    // 2 prompts x 4 responses, each graded once: a "not supported" judge would still count 8, so
    // the success of the job (the trainer refuses to start without its judge) is what shows it ran.
    assert.ok(Number.isInteger(m.grader_errors) && m.grader_errors <= 8, `grader_errors ${m.grader_errors}`);
  }
});
