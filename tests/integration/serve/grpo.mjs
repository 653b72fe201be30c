// grpo.mjs - a GRPO loop from the client through a training session raises its reward: on a small random
// model, the reward of an answer is the share of its tokens among the 16 of lowest id (a property a LoRA on
// the frozen base learns in a couple dozen steps: here about 0.06 -> 1.0 within 15); each step samples a
// group of answers with the session's current weights, turns the rewards into advantages (reward minus the
// group's mean) and trains with the importance_sampling loss on the sampler's log-probs. The mean reward of answers drawn with fixed seeds
// before and after training must rise by a wide margin.
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checker } from '../api/harness.mjs';
import { startTrainingWorker, stopTrainingWorker } from './training_worker.mjs';

const { check, summary } = checker();
const whet = process.env.WHET_BIN;
const dir = mkdtempSync(join(tmpdir(), 'whet-grpo-'));
const model = join(dir, 'model');
// a small model whose hidden size lets a LoRA make the output peaked (the tiny preset's 256 cannot, its logits
// stay within a few nats of uniform), and a byte-level vocabulary: the 16 rewarded tokens start near 6%
execFileSync(whet, ['model', 'init', '--out', model, '--arch', 'qwen3', '--layers', '2', '--hidden', '512', '--heads', '4',
  '--kv-heads', '2', '--intermediate', '512', '--vocab', '259']);
const GROUP = 8, STEPS = 30, REWARDED = 16, MAX_TOKENS = 8;
const worker = await startTrainingWorker(model, dir, ['--slots', `${GROUP}`]);
const post = worker.post;
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
const reward = (tokens) => tokens.filter((t) => t < REWARDED).length / MAX_TOKENS;

try {
  const id = (await post('/v1/training_sessions', { lora: { r: 8, alpha: 16, seed: 1 } })).id;
  const prompt = (await post('/v1/tokenize', { messages: [{ role: 'user', content: 'Say anything.' }] })).tokens;
  const sample = (seed) => post(`/v1/training_sessions/${id}/sample`, { prompt, max_tokens: MAX_TOKENS, temperature: 1, n: GROUP, seed });
  // the mean reward of 4 groups drawn with the same seeds: before and after training
  const evaluate = async () => mean((await Promise.all([1e6, 1e6 + 1, 1e6 + 2, 1e6 + 3].map(sample))).flatMap((s) => s.sequences.map((q) => reward(q.tokens))));
  const before = await evaluate();
  const trace = [];
  for (let step = 0; step < STEPS; step++) {
    const { sequences } = await sample(step);
    const r = sequences.map((s) => reward(s.tokens)), m = mean(r);
    trace.push(m);
    const data = sequences.flatMap((s, i) => {
      if (!s.tokens.length) return []; // an answer of nothing trains nothing
      const tokens = [...prompt, ...s.tokens], pad = (xs) => [...new Array(prompt.length - 1).fill(0), ...xs];
      return [{ model_input: tokens.slice(0, -1), loss_fn_inputs: { target_tokens: tokens.slice(1), logprobs: pad(s.logprobs),
        advantages: pad(s.tokens.map(() => r[i] - m)) } }];
    });
    const fb = await post(`/v1/training_sessions/${id}/forward_backward`, { loss_fn: 'importance_sampling', data });
    if (step === 0) check(Number.isFinite(fb.loss) && fb.logprobs.length === data.length, 'importance_sampling answers', fb);
    await post(`/v1/training_sessions/${id}/optim_step`, { adam_params: { learning_rate: 1e-2 } });
  }
  const after = await evaluate();
  console.log(`reward before ${before.toFixed(3)}, after ${after.toFixed(3)}; per step ${trace.map((x) => x.toFixed(2)).join(' ')}`);
  check(after > before + 0.4 && after > 0.6, 'GRPO through a session raises the reward', { before, after });
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  await stopTrainingWorker(worker, dir, check);
}
process.exit(summary());
