// Model workers scaled by load (scheduler/service/serving.h): `whet up` with a scheduler and two
// executors of one simulated device each, workers of one sequence slot (WHET_SERVE_SLOTS=1) so that
// concurrent requests wait for it, at most two replicas (WHET_SERVE_MAX_REPLICAS=2), and no worker named
// to the gateway. Concurrent clients through the official SDK make the one worker's queue grow: a
// second replica starts on the other node and both answer; with one client at a time the extra replica
// stops after WHET_SERVE_IDLE_S without a queue while every request is still answered (it finishes what
// it has before it is stopped), and once no request comes the last one stops too.
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { until } from '../lib.mjs';
import { psql } from '../../integration/lib/gateway.mjs';
import { startServing, workers as rows } from './stack.mjs';

const IDLE_S = 4;
// An s3:// object store (tests/run.sh's s3rver): the workers' sandbox then runs them as nobody under a
// root executor, their network the store's endpoint (serve_scale_zero's file:// store covers the other
// case); with encryption at rest, whose operator keyring (mode 0600) a worker reads at start.
if (!process.env.WHET_TEST_S3_ENDPOINT) throw new Error('WHET_TEST_S3_ENDPOINT is not set (tests/run.sh starts s3rver)');
const keyDir = fs.mkdtempSync(path.join(os.tmpdir(), 'whet-scale-keys-'));
fs.writeFileSync(path.join(keyDir, 'keys'), `k1 ${crypto.randomBytes(32).toString('hex')}\n`, { mode: 0o600 });
test.after(() => fs.rmSync(keyDir, { recursive: true, force: true }));
// The queue alone scales here: a per-replica capacity of tokens/s no worker reaches (serve_scale_tokens
// covers tokens/s).
const { work, db, client, log } = await startServing({ executors: 2, env: { WHET_SERVE_IDLE_S: String(IDLE_S), WHET_SERVE_SLOTS: '1',
  WHET_SERVE_MAX_REPLICAS: '2', WHET_SERVE_TOKENS_PER_S_PER_REPLICA: '1000000000', WHET_OBJECT_STORE: `s3://whet-test/scale-up-${process.pid}`,
  WHET_S3_ENDPOINT: process.env.WHET_TEST_S3_ENDPOINT, AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER',
  AWS_REGION: 'us-east-1', WHET_DATA_KEY_FILE: path.join(keyDir, 'keys') } });
// whet-tiny's workers that are not stopping
const workers = () => rows(db).filter((w) => w.state !== 'stopping');
const ask = () => client.chat.completions.create({ model: 'whet-tiny', messages: [{ role: 'user', content: 'Name a colour.' }],
  max_tokens: 64, temperature: 1, seed: 7 });

// `n` clients asking one after the other until stop() (resolves to the errors they met); every load
// ends with the test, also one that fails.
const loads = [];
function load(n) {
  let stopped = false;
  loads.push(() => { stopped = true; });
  const errors = [];
  const one = async () => {
    while (!stopped) {
      try {
        const r = await ask();
        if (!r.choices[0].message) errors.push('an answer without a message');
      } catch (e) { errors.push(String(e.message || e)); }
    }
  };
  const all = Promise.all(Array.from({ length: n }, one));
  return async () => { stopped = true; await all; return errors; };
}

test('a second replica for a queue, back to one without it, none when idle', async (t) => {
  t.after(() => {
    for (const stop of loads) stop();
    if (t.passed === false) console.error(log().split('\n').slice(-80).join('\n'));
  });
  await ask();
  assert.equal(workers().length, 1, 'one worker after the first request');
  if (process.getuid() === 0) {
    // a root executor's worker with an s3 store runs as nobody (its cache dir names it)
    const [pid] = execFileSync('pgrep', ['-f', `${work}/executors/.*/workers/worker-`], { encoding: 'utf8' }).trim().split('\n');
    assert.match(fs.readFileSync(`/proc/${pid}/status`, 'utf8'), /^Uid:\s+65534\s/m, 'the worker runs as uid 65534');
  }
  const heavy = load(4);
  await until('a second replica for the queue', () => workers().filter((w) => w.state === 'ready').length === 2, 120000, 200);
  const two = workers();
  assert.notEqual(two[0].node, two[1].node, `the replicas are on both nodes: ${JSON.stringify(two)}`);
  assert.deepEqual(await heavy(), [], 'every request under load answered');
  const light = load(1);
  await until('back to one replica without a queue', () => workers().length === 1, IDLE_S * 1000 + 60000, 200);
  // the stopped replica's end, with the light load still going: one request at a time is no queue
  await new Promise((r) => setTimeout(r, (IDLE_S + 2) * 1000));
  assert.deepEqual(await light(), [], 'every request answered while the extra replica stopped');
  assert.equal(workers().length, 1, 'the remaining replica serves');
  await until('no replica once idle', () => psql(db.url, `SELECT count(*) FROM model_workers`) === '0', IDLE_S * 1000 + 30000, 200);
});
