// Model workers scaled by tokens/s (scheduler/service/serving.h): `whet up` with a scheduler and two
// executors of one simulated device each, at most two replicas, and a per-replica capacity of 10
// tokens/s (WHET_SERVE_TOKENS_PER_S_PER_REPLICA) that one client asking one request after the other
// passes. No request ever waits for a sequence slot (the worker has several, one client uses one), so
// the second replica that starts does so for the tokens/s the executor read from the first worker's
// /metrics alone; once the client stops, the base goes back to one replica, then none.
import test from 'node:test';
import assert from 'node:assert/strict';
import { until } from '../lib.mjs';
import { psql } from '../../integration/lib/gateway.mjs';
import { startServing, workers as rows } from './stack.mjs';

const IDLE_S = 4;
const { db, client, log } = await startServing({ executors: 2, env: { WHET_SERVE_IDLE_S: String(IDLE_S),
  WHET_SERVE_MAX_REPLICAS: '2', WHET_SERVE_SLOTS: '4', WHET_SERVE_TOKENS_PER_S_PER_REPLICA: '10' } });
const workers = () => rows(db).filter((w) => w.state !== 'stopping');
const ask = () => client.chat.completions.create({ model: 'whet-tiny', messages: [{ role: 'user', content: 'Name a colour.' }],
  max_tokens: 64, temperature: 1, seed: 7 });

test('a second replica for tokens/s without a queue, back to one, none when idle', async (t) => {
  let stopped = false;
  t.after(() => {
    stopped = true;
    if (t.passed === false) console.error(log().split('\n').slice(-80).join('\n'));
  });
  await ask();
  assert.equal(workers().length, 1, 'one worker after the first request');
  const errors = [];
  const client1 = (async () => {
    while (!stopped) {
      try {
        const r = await ask();
        if (!r.choices[0].message) errors.push('an answer without a message');
      } catch (e) { errors.push(String(e.message || e)); }
    }
  })();
  // the load as the scheduler saw it: the highest tokens/s and requests waiting any replica reported
  let tokens = 0, waiting = 0;
  const seen = () => {
    const [t1, w1] = psql(db.url, `SELECT coalesce(max(tokens_per_s), 0)::int, coalesce(max(requests_waiting), 0)
                                   FROM model_workers`).split('|').map(Number);
    tokens = Math.max(tokens, t1);
    waiting = Math.max(waiting, w1);
  };
  await until('a second replica for the tokens/s', () => {
    seen();
    return workers().filter((w) => w.state === 'ready').length === 2;
  }, 120000, 200);
  assert.ok(tokens >= 10, `a replica reported at least the capacity's tokens/s (${tokens})`);
  assert.equal(waiting, 0, 'no request waited for a sequence slot');
  const two = workers();
  assert.notEqual(two[0].node, two[1].node, `the replicas are on both nodes: ${JSON.stringify(two)}`);
  stopped = true;
  await client1;
  assert.deepEqual(errors, [], 'every request answered');
  await until('back to one replica without the load', () => workers().length <= 1, IDLE_S * 1000 + 60000, 200);
  await until('no replica once idle', () => psql(db.url, `SELECT count(*) FROM model_workers`) === '0', IDLE_S * 1000 + 60000, 200);
});
