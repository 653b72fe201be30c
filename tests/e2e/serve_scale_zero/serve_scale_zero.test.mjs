// Model workers placed by the scheduler (migration 0021, scheduler/service/serving.h): `whet up` with a
// scheduler and one executor of one simulated device, and no worker of whet-tiny named to the gateway
// (`whet up --placed-workers` starts no worker of its own). The first chat completion through the official SDK waits for a cold start (the gateway records the
// demand, the scheduler places a worker on the executor's device, the executor runs `whet serve` and
// reports its address) and is answered; the worker is in model_workers with its node; after
// WHET_SERVE_IDLE_S without requests it is stopped (its process gone, its row gone) and the next
// request starts one again. Several rounds, to show it is not flaky; time to first token cold and warm
// is printed. The worker runs in the trainers' sandbox (its own namespaces, seccomp). A request while a
// job of the default priority holds the one device preempts it (it checkpoints and waits); once the
// worker idles out, the job resumes and finishes, and its fine-tuned model answers (the worker's sandbox
// reads the adapter from the object store). A training session's create from zero waits for the
// cold start as completions do. A worker killed (SIGKILL) before its executor reports it: the gateway finds it
// refusing connections, marks it unreachable and answers 503 with retry-after 1 (never the proxy's 502), which
// the official SDK retries by itself: the retry waits for a new worker's cold start and is answered. Last, a
// worker dies with its executor when that is killed with SIGKILL.
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { until, holdTrainer, releaseWhenSignalled } from '../lib.mjs';
import { psql } from '../../integration/lib/gateway.mjs';
import OpenAI from 'openai';
import { startServing, workers as rows, refuses } from './stack.mjs';

const IDLE_S = 4, ROUNDS = 3;
const { work, db, client, log } = await startServing({ executors: 1, env: { WHET_SERVE_IDLE_S: String(IDLE_S) } });
const dump = (t) => t.after(() => { if (t.passed === false) console.error(log().split('\n').slice(-60).join('\n')); });
const workers = () => rows(db);
// The `whet serve` processes the executor runs (their cache dirs are under its work dir).
const servePids = () => {
  try {
    return execFileSync('pgrep', ['-f', `${work}/executors/.*/workers/worker-`], { encoding: 'utf8' }).trim().split('\n').filter((l) => l);
  } catch { return []; } // pgrep: none
};
const nodes = () => psql(db.url, `SELECT id FROM nodes WHERE state = 'ready'`).split('\n').filter((l) => l);
const status = (pid, field) => new RegExp(`^${field}:\\s*(\\S+)`, 'm').exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
// The namespaces a process does not share with this test (the host's).
const ownNamespaces = (pid) => ['user', 'pid', 'mnt', 'net', 'ipc', 'uts']
  .filter((kind) => fs.readlinkSync(`/proc/${pid}/ns/${kind}`) !== fs.readlinkSync(`/proc/self/ns/${kind}`));

// Milliseconds to the first token of a streamed answer, and the answer.
async function firstToken() {
  const start = Date.now();
  const stream = await client.chat.completions.create({ model: 'whet-tiny', messages: [{ role: 'user', content: 'Name a colour.' }],
    max_tokens: 8, temperature: 0, stream: true });
  let ms = 0, text = '';
  for await (const chunk of stream) {
    const piece = chunk.choices[0]?.delta?.content;
    if (piece && !ms) ms = Date.now() - start;
    text += piece ?? '';
  }
  return { ms, text };
}

test('a worker starts on the first request, stops when idle, and starts again', async (t) => {
  dump(t);
  assert.deepEqual(workers(), [], 'no worker before the first request');
  let answer;
  for (let round = 1; round <= ROUNDS; round++) {
    const cold = await firstToken();
    assert.ok(cold.ms > 0 && cold.text.length > 0, `round ${round}: the cold request is answered`);
    if (answer === undefined) answer = cold.text;
    assert.equal(cold.text, answer, `round ${round}: greedy answers agree across workers`);
    const w = workers();
    assert.equal(w.length, 1, `round ${round}: one worker of whet-tiny: ${JSON.stringify(w)}`);
    assert.equal(w[0].state, 'ready');
    assert.ok(nodes().includes(w[0].node), `round ${round}: it runs on the executor's node ${w[0].node}`);
    assert.match(w[0].address, /^127\.0\.0\.1:\d+$/);
    assert.equal(servePids().length, 1, `round ${round}: one whet serve process`);
    if (round === 1) {
      // the trainers' sandbox: its own namespaces but the host's network (it listens for the gateway),
      // the seccomp filter, no new privileges
      const [pid] = servePids();
      assert.deepEqual(ownNamespaces(pid), ['user', 'pid', 'mnt', 'ipc', 'uts'], 'whet serve runs in its own namespaces');
      assert.equal(status(pid, 'Seccomp'), '2', 'whet serve runs under a seccomp filter');
      assert.equal(status(pid, 'NoNewPrivs'), '1');
    }
    const warmStart = Date.now();
    const warm = await firstToken();
    assert.equal(warm.text, answer, `round ${round}: the warm answer is the same`);
    assert.deepEqual(workers().map((x) => x.id), [w[0].id], `round ${round}: the warm request went to the same worker`);
    console.log(`round ${round}: time to first token cold ${cold.ms} ms, warm ${warm.ms} ms (worker ${w[0].id} at ${w[0].address})`);
    // idle: stopped within the idle period plus a few heartbeats and cycles, not before it (the gateway
    // records a request at most once a second: the last one recorded came at most 1 s before the warm one)
    await until(`round ${round}: the idle worker to be gone`, () => workers().length === 0 && servePids().length === 0,
      IDLE_S * 1000 + 30000, 200);
    const stoppedAfter = Date.now() - warmStart;
    assert.ok(stoppedAfter >= (IDLE_S - 1) * 1000, `round ${round}: not stopped before the idle period (${stoppedAfter} ms)`);
    assert.ok(await refuses(w[0].address), `round ${round}: nothing listens at the stopped worker's address`);
  }
  const deployments = psql(db.url, `SELECT base_model, desired FROM serving_deployments`);
  assert.equal(deployments, 'whet-tiny|0', 'the deployment wants no replica once idle');
});

test('a worker preempts a job of the default priority, which resumes once the worker idles out', async (t) => {
  dump(t);
  const training = await client.files.create({ file: fs.createReadStream(path.join(process.env.WHET_FIXTURES, 'sft', 'train.jsonl')),
                                               purpose: 'fine-tune' });
  const job = await client.fineTuning.jobs.create({ model: 'whet-tiny', training_file: training.id,
    method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 50, batch_size: 2 } } },
    whet: { max_steps: 30, checkpoint_every_steps: 5 } });
  const pids = await holdTrainer(t, path.join(work, 'executors', 'executor-1', 'jobs', `${job.id}-1`));
  const answer = firstToken();
  await releaseWhenSignalled(pids);
  const { text } = await answer;
  assert.ok(text.length > 0, 'the request is answered once the job made room');
  const events = [];
  for await (const e of client.fineTuning.jobs.listEvents(job.id, { limit: 100 })) events.push(e.message);
  assert.ok(events.some((m) => /preempted for a model worker/.test(m)), `a preemption event: ${JSON.stringify(events)}`);
  await until('the job to finish after the worker idled out', async () =>
    (await client.fineTuning.jobs.retrieve(job.id)).status === 'succeeded', 300000, 500);
  assert.deepEqual(workers(), [], 'no worker left');
  assert.equal(psql(db.url, `SELECT count(*) FROM job_attempts WHERE job_id = '${job.id}'`), '2',
               'the job ran twice: before the preemption and after the worker');
  // the fine-tuned model answers through a placed worker: its sandbox reads the adapter from the store
  const { fine_tuned_model: model } = await client.fineTuning.jobs.retrieve(job.id);
  const tuned = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Name a colour.' }],
    max_tokens: 8, temperature: 0 });
  // (what it says is up to 30 steps of a tiny model: a greedy reply may end at once; an adapter the worker
  // could not read would fail the request)
  assert.equal(tuned.model, model, `the fine-tuned model ${model} answers: ${JSON.stringify(tuned)}`);
  assert.ok(tuned.choices.length === 1 && ['stop', 'length'].includes(tuned.choices[0].finish_reason),
            JSON.stringify(tuned));
});

test('a training session create waits for a cold start', async (t) => {
  dump(t);
  await until('no worker', () => workers().length === 0 && servePids().length === 0, IDLE_S * 1000 + 30000, 200);
  const session = await client.post('/training_sessions', { body: { base_model: 'whet-tiny', lora: { r: 2 } } });
  assert.equal(session.object, 'training_session', `the create is answered by a worker: ${JSON.stringify(session)}`);
  assert.deepEqual(workers().map((w) => w.state), ['ready'], 'it waited for the worker the create started');
  await client.delete(`/training_sessions/${session.id}`);
});

test('a worker killed before its executor reports it: a 503 with retry-after 1 the SDK retries, after a cold start', async (t) => {
  dump(t);
  await firstToken();
  const [w] = workers(), [serve] = servePids();
  assert.ok(w && serve, 'a worker runs');
  // its executor (whet serve's parent is its sandbox's init, whose parent is the executor) held stopped, so
  // that the worker's row stays ready after its death: the gateway finds it dead itself
  const executor = Number(status(status(serve, 'PPid'), 'PPid'));
  process.kill(executor, 'SIGSTOP');
  t.after(() => { try { process.kill(executor, 'SIGCONT'); } catch { /* gone */ } });
  process.kill(Number(serve), 'SIGKILL');
  await until('the killed worker\'s port to refuse connections', () => refuses(w.address), 10000, 10);
  // the official SDK with its default retries; every answer it got, with the worker's row as it was then
  const answers = [];
  const sdk = new OpenAI({ apiKey: client.apiKey, baseURL: client.baseURL, timeout: 180000, fetch: async (url, init) => {
    const res = await fetch(url, init);
    const text = res.status === 200 ? '' : await res.clone().text();
    let body = text;
    try { body = JSON.parse(text); } catch { /* the proxy's plain text */ }
    answers.push({ status: res.status, retry: res.headers.get('retry-after'), body,
                   marked: psql(db.url, `SELECT unreachable_at IS NOT NULL FROM model_workers WHERE id = '${w.id}'`) });
    return res;
  } });
  const call = sdk.completions.create({ model: 'whet-tiny', prompt: 'Name a colour.', max_tokens: 8, temperature: 0 });
  call.catch(() => {}); // awaited below
  // once the gateway found the worker refusing connections (it marked it), its executor may report it gone
  // and the scheduler place a new one, whose cold start the SDK's retry waits for
  await until('the first answer', () => answers.length > 0, 30000, 10);
  process.kill(executor, 'SIGCONT');
  const answer = await call;
  assert.equal(answers[0].status, 503, `the call on the dead worker: ${JSON.stringify(answers[0])}`);
  assert.equal(answers[0].retry, '1', 'with retry-after 1');
  assert.equal(answers[0].body?.error?.code, 'service_unavailable', JSON.stringify(answers[0].body));
  assert.match(answers[0].body.error.message, /is gone and is being replaced: the request did not reach it/);
  assert.equal(answers[0].marked, 't', 'the worker was marked unreachable before the 503 went');
  assert.deepEqual(answers.map((a) => a.status), [503, 200], 'the SDK\'s retry is answered');
  assert.ok(answer.object === 'text_completion' && ['stop', 'length'].includes(answer.choices[0].finish_reason),
            JSON.stringify(answer));
  const now = workers().find((x) => x.id !== w.id);
  assert.equal(now?.state, 'ready', `a new worker answered: ${JSON.stringify(workers())}`);
  assert.ok(!log().includes('is not marked'), 'the gateway marked the worker unreachable');
  // the next call goes straight to it
  const next = await firstToken();
  assert.ok(next.text.length > 0, 'the next call is answered');
  assert.deepEqual(workers().map((x) => x.id), [now.id], 'by the new worker');
});

test('a worker dies with its executor when the executor is killed (SIGKILL)', async (t) => {
  dump(t);
  const { text } = await firstToken();
  assert.ok(text.length > 0, 'a worker answers');
  const [serve] = servePids();
  assert.ok(serve, 'whet serve runs');
  // whet serve's parent is its sandbox's init, whose parent is the executor
  const init = status(serve, 'PPid'), executor = status(init, 'PPid');
  assert.match(fs.readFileSync(`/proc/${executor}/cmdline`, 'utf8'), /executor/, 'the grandparent is the executor');
  process.kill(Number(executor), 'SIGKILL');
  await until('whet serve to die with its executor', () => !fs.existsSync(`/proc/${serve}`), 10000, 100);
  assert.deepEqual(servePids().filter((p) => p === serve), [], 'no whet serve of the killed executor is left');
});
