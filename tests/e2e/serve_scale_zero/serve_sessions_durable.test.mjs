// Training sessions on placed model workers (gateway/training_sessions.c, migration 0030): `whet up` with a
// scheduler and two executors of one simulated device each, at most two replicas, a per-replica capacity of
// 1 token/s (any completion makes a second replica start), WHET_SERVE_IDLE_S 4 and sessions that expire after
// WHET_SESSION_IDLE_S 30; an s3:// object store (tests/run.sh's s3rver: a sandboxed worker writes to it, as it
// cannot to a file:// one) with encryption at rest (a session's state is sealed with its tenant's key).
//  - With two replicas, a session's calls all reach the worker it was created on: two forward_backward calls
//    accumulate their gradients there before each optim_step, and every loss and log-prob equals a reference
//    session's (same LoRA seed, same calls), which no restore would leave so; no worker restores a session.
//  - Scale-down keeps the replica that holds the live session (the one the default order, newest first, stops).
//  - A session deleted while its worker holds it: its state is gone from the store at once (the worker's doing).
//  - SIGKILL of that worker: a call made the moment it is dead (before its executor reports it) is a 503 with
//    retry-after 1, never a 502, and marks the worker unreachable; a session deleted then is answered at once;
//    the next forward_backward waits for a cold start, the session is re-created on the new worker from the
//    state its last optim_step wrote, and that call and the next step's equal the reference within 1e-5.
//  - The worker is not idled out while the session is live; once it expired its calls are 404s and the worker
//    idles out; the gateway's sweep (WHET_SESSION_SWEEP_S 2) removes the state of the expired session and of the
//    one deleted while its worker was gone, and records it; the session's save (a model) stays whole.
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { until } from '../lib.mjs';
import { psql } from '../../integration/lib/gateway.mjs';
import { startServing, workers as rows, refuses } from './stack.mjs';

const IDLE_S = 4, SESSION_IDLE_S = 30, SWEEP_S = 2;
if (!process.env.WHET_TEST_S3_ENDPOINT) throw new Error('WHET_TEST_S3_ENDPOINT is not set (tests/run.sh starts s3rver)');
const keyDir = fs.mkdtempSync(path.join(os.tmpdir(), 'whet-session-keys-'));
fs.writeFileSync(path.join(keyDir, 'keys'), `k1 ${crypto.randomBytes(32).toString('hex')}\n`, { mode: 0o600 });
test.after(() => fs.rmSync(keyDir, { recursive: true, force: true }));
const ROOT = `sessions-durable-${process.pid}`;
const { work, db, client, log } = await startServing({ executors: 2, env: { WHET_SERVE_IDLE_S: String(IDLE_S),
  WHET_SESSION_IDLE_S: String(SESSION_IDLE_S), WHET_SESSION_SWEEP_S: String(SWEEP_S), WHET_SERVE_MAX_REPLICAS: '2',
  WHET_SERVE_TOKENS_PER_S_PER_REPLICA: '1', WHET_OBJECT_STORE: `s3://whet-test/${ROOT}`,
  WHET_S3_ENDPOINT: process.env.WHET_TEST_S3_ENDPOINT,
  AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER', AWS_REGION: 'us-east-1',
  WHET_DATA_KEY_FILE: path.join(keyDir, 'keys') } });
const dump = (t) => t.after(() => { if (t.passed === false) console.error(log().split('\n').slice(-80).join('\n')); });
const workers = () => rows(db).filter((w) => w.state !== 'stopping');
const pinned = (id) => psql(db.url, `SELECT worker_id FROM training_sessions WHERE id = '${id}'`);
// Each worker's `whet serve` log, and its process
const serveLogs = () => execFileSync('sh', ['-c', `cat ${work}/executors/*/workers/*/serve.log 2>/dev/null || true`],
  { encoding: 'utf8', maxBuffer: 1 << 26 });
const restores = () => serveLogs().split('\n').filter((l) => l.includes('training session restored'));
const servePid = (id) => execFileSync('pgrep', ['-f', `${work}/executors/.*/workers/${id}/`], { encoding: 'utf8' }).trim();
// The store's keys under a prefix of the test's root (s3rver's ListObjectsV2)
async function stored(prefix) {
  const url = `${process.env.WHET_TEST_S3_ENDPOINT}/whet-test?list-type=2&prefix=${encodeURIComponent(`${ROOT}/${prefix}`)}`;
  const res = await fetch(url);
  assert.equal(res.status, 200, `listing ${url}`);
  return [...(await res.text()).matchAll(/<Key>([^<]*)<\/Key>/g)].map((m) => m[1]);
}
const stateOf = (id) => stored(`sessions/${id}/state/`);

const post = (p, body) => client.post(p, { body });
const { tokens } = await (async () => {
  await until('a worker for the tokenizer', async () => post('/tokenize', { model: 'whet-tiny', text: 'warm' }).then(() => true, () => false),
    120000, 500);
  return post('/tokenize', { model: 'whet-tiny', text: 'The quick brown fox jumps over the lazy dog, twice and again.' });
})();
const datum = (shift) => {
  const ids = tokens.slice(shift, shift + 12);
  return { model_input: ids.slice(0, -1), loss_fn_inputs: { target_tokens: ids.slice(1), weights: ids.slice(1).map(() => 1) } };
};
const fb = (id, shift) => post(`/training_sessions/${id}/forward_backward`, { loss_fn: 'cross_entropy', data: [datum(shift)] });
const step = (id) => post(`/training_sessions/${id}/optim_step`, { adam_params: { learning_rate: 0.05 } });
const create = () => post('/training_sessions', { base_model: 'whet-tiny', lora: { r: 2, seed: 7 } });
// Two rounds of two forward_backward calls (gradients accumulated) and an optim_step: the answers.
async function rounds(id) {
  const out = [];
  for (let r = 0; r < 2; r++) {
    out.push(await fb(id, r), await fb(id, r + 1));
    const o = await step(id);
    assert.equal(o.state_saved, true, `optim_step kept the session's state: ${JSON.stringify(o)}`);
  }
  return out;
}
function assertClose(got, want, what) {
  assert.ok(Math.abs(got.loss - want.loss) <= 1e-5, `${what}: loss ${got.loss} vs ${want.loss}`);
  assert.equal(got.logprobs.length, want.logprobs.length);
  got.logprobs.forEach((row, d) => row.forEach((lp, i) =>
    assert.ok(Math.abs(lp - want.logprobs[d][i]) <= 1e-5, `${what}: logprob [${d}][${i}] ${lp} vs ${want.logprobs[d][i]}`)));
}

let session, reference;
test('two replicas: a session\'s calls all reach its worker, which scale-down keeps', async (t) => {
  dump(t);
  await until('a second replica for the tokens/s', async () => {
    await client.chat.completions.create({ model: 'whet-tiny', messages: [{ role: 'user', content: 'Name a colour.' }],
      max_tokens: 32, temperature: 1 });
    return workers().filter((w) => w.state === 'ready').length === 2;
  }, 120000, 200);
  // the reference, on either worker; then the session, on the replica scale-down would stop first without it
  const ref = await create();
  reference = { rounds: await rounds(ref.id) };
  reference.after = await fb(ref.id, 3);
  await step(ref.id);
  reference.next = await fb(ref.id, 4);
  assert.ok((await stateOf(ref.id)).length > 0, 'the reference session keeps its state in the store');
  await client.delete(`/training_sessions/${ref.id}`);
  assert.deepEqual(await stateOf(ref.id), [], 'its worker removed the deleted session\'s state');
  const [, newest] = psql(db.url, `SELECT id FROM model_workers WHERE state = 'ready' ORDER BY ready_at, started_at`).split('\n');
  for (let i = 0; i < 16 && !session; i++) {
    const s = await create();
    if (pinned(s.id) === newest) session = s;
    else await client.delete(`/training_sessions/${s.id}`);
  }
  assert.ok(session, `a session created on the newest replica ${newest}`);
  const got = await rounds(session.id);
  got.forEach((r, i) => assertClose(r, reference.rounds[i], `forward_backward ${i}`));
  assert.equal(pinned(session.id), newest, 'still pinned to its worker');
  assert.deepEqual(restores(), [], 'no worker restored a session: every call reached the worker holding it');
  await until('back to one replica', () => workers().length === 1, IDLE_S * 1000 + 60000, 200);
  assert.equal(workers()[0].id, newest, 'the replica holding the live session is the one kept');
});

let saved, orphan;
test('SIGKILL of the session\'s worker: the session goes on from its last optim_step on a new worker', async (t) => {
  dump(t);
  const [held] = workers();
  saved = await post(`/training_sessions/${session.id}/save`, {});
  orphan = await create();
  assert.equal(pinned(orphan.id), held.id, 'the second session is on the only worker');
  process.kill(Number(servePid(held.id)), 'SIGKILL');
  await until('the killed worker\'s port to refuse connections', () => refuses(held.address), 10000, 10);
  // at once: the executor has not reported it yet (its row is still ready), the gateway finds it refusing
  let after;
  try {
    after = await fb(session.id, 3);
  } catch (e) {
    assert.equal(e.status, 503, `the call on a dead worker: ${e.status} ${e.message}`);
    assert.equal(e.headers?.get?.('retry-after'), '1', 'with retry-after 1');
    assert.match(e.message, /is gone and is being replaced: the call did not reach it/);
    assert.equal(e.code ?? e.error?.code, 'service_unavailable');
    // the worker was marked unreachable before that answer: the retry, at once, waits for a new worker instead
    after = await fb(session.id, 3);
  }
  assert.ok(!log().includes('is not marked'), 'the gateway marked the worker unreachable');
  assert.deepEqual(await client.delete(`/training_sessions/${orphan.id}`),
    { id: orphan.id, object: 'training_session.deleted', deleted: true }, 'a session on the dead worker is deleted at once');
  assert.ok((await stateOf(orphan.id)).length > 0, 'its state waits for the sweep');
  await until('the killed worker to be gone', () => !rows(db).some((w) => w.id === held.id), 30000, 100);
  assertClose(after, reference.after, 'the forward_backward after the kill');
  const moved = pinned(session.id);
  assert.ok(moved && moved !== held.id, `re-pinned to the new worker ${moved}`);
  assert.equal(restores().length, 1, 'the new worker restored the session once');
  await step(session.id);
  assertClose(await fb(session.id, 4), reference.next, 'the next step');
});

test('a live session keeps its worker past the idle period; expired, it is a 404 and the worker idles out', async (t) => {
  dump(t);
  const start = Date.now(), [w] = workers();
  await new Promise((r) => setTimeout(r, (IDLE_S + 6) * 1000));
  assert.deepEqual(workers().map((x) => x.id), [w.id], 'the worker holding the live session is not idled out');
  await until('the session to expire', () => Date.now() - start > (SESSION_IDLE_S + 1) * 1000, 60000, 500);
  await assert.rejects(fb(session.id, 0), (e) => e.status === 404, 'an expired session is a 404');
  await assert.rejects(step(session.id), (e) => e.status === 404, 'and stays one');
  await until('the worker to idle out', () => rows(db).length === 0, IDLE_S * 1000 + 30000, 200);
  await until('the sweep to remove the ended sessions\' state',
    async () => (await stateOf(session.id)).length === 0 && (await stateOf(orphan.id)).length === 0, 60000, 500);
  assert.equal(psql(db.url, `SELECT count(*) FROM training_sessions WHERE id IN ('${session.id}', '${orphan.id}')
                             AND state_swept_at IS NOT NULL`), '2', 'the sweep recorded both');
  const files = await stored(`${saved.checkpoint}/`);
  assert.ok(files.some((k) => k.endsWith('adapter_model.safetensors')), `the save stays whole: ${files}`);
});
