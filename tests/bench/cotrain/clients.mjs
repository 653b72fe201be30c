// clients.mjs - the benchmark's training sessions: JOBS clients at once on one `whet serve --training`
// worker, each its own session doing the SFT steps of its `whet train` twin (STEPS steps of B examples cut
// to L tokens: cross_entropy forward_backward, then optim_step at a constant learning rate). The
// examples are tokenized by the worker (/v1/tokenize with the messages, the chat template) before the
// clock starts. The loss weights every target alike (1 / the step's targets) where the trainer's weights
// only the assistant's: the same work, another loss. Prints one JSON line per job (its wall time) and one
// for all of them, with the worker's CPU seconds meanwhile (from its /proc/PID/stat).
// Usage: node clients.mjs URL DATA_PREFIX JOBS STEPS B L LR WORKER_STAT CLK_TCK
import { readFileSync } from 'node:fs';

const [url, prefix, jobs, steps, B, L, lr, stat, tick] = process.argv.slice(2).map((x, i) => (i < 2 || i === 7 ? x : Number(x)));
// user + system CPU seconds of the worker so far
const cpu = () => readFileSync(stat, 'utf8').split(') ')[1].split(' ').slice(11, 13).reduce((a, x) => a + Number(x), 0) / tick;
const post = async (path, body) => {
  const res = await fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const json = await res.json();
  if (res.status !== 200) throw new Error(`${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
};

// every job's batches: steps x B token sequences of L tokens (L - 1 targets each), loss the mean over them
const batches = [];
for (let j = 0; j < jobs; j++) {
  const lines = readFileSync(`${prefix}${j}.jsonl`, 'utf8').trim().split('\n').slice(0, steps * B);
  const ids = [];
  for (const line of lines) {
    const tokens = (await post('/v1/tokenize', { messages: JSON.parse(line).messages })).tokens;
    if (tokens.length < L) throw new Error(`job ${j}: an example of ${tokens.length} tokens, fewer than ${L}`);
    ids.push(tokens.slice(0, L));
  }
  const w = new Array(L - 1).fill(1 / (B * (L - 1)));
  batches.push(Array.from({ length: steps }, (_, s) => ids.slice(s * B, (s + 1) * B).map((x) => ({
    model_input: x.slice(0, -1), loss_fn_inputs: { target_tokens: x.slice(1), weights: w } }))));
}

const job = async (j) => {
  const t0 = performance.now();
  const id = (await post('/v1/training_sessions', { lora: { r: 8, alpha: 16, seed: 1 } })).id;
  let loss;
  for (let s = 0; s < steps; s++) {
    loss = (await post(`/v1/training_sessions/${id}/forward_backward`, { loss_fn: 'cross_entropy', data: batches[j][s] })).loss;
    await post(`/v1/training_sessions/${id}/optim_step`, { adam_params: { learning_rate: lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, grad_clip_norm: 1 } });
  }
  const seconds = (performance.now() - t0) / 1000;
  console.log(JSON.stringify({ label: 'session', job: j, seconds, tokens: steps * B * L, last_loss: loss }));
  return seconds;
};
const t0 = performance.now(), cpu0 = cpu();
await Promise.all(Array.from({ length: jobs }, (_, j) => job(j)));
const seconds = (performance.now() - t0) / 1000;
console.log(JSON.stringify({ label: 'sessions', seconds, cpu_s: cpu() - cpu0, tokens: jobs * steps * B * L }));
