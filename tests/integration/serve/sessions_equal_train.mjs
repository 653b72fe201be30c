// sessions_equal_train.mjs - an adapter trained through a training session equals the one `whet train`
// makes from the same data, seed, LoRA settings and constant learning rate. The trainer's SFT step takes
// batch_size examples and its loss is the mean over their trained (assistant) tokens; here every step takes
// the whole file (batch_size = its examples, so the trainer's shuffle changes only the rows' order) and
// every example is longer than max_seq_len, so each is cut to exactly max_seq_len tokens, one packed row.
// The client sends the same rows: the chat template's tokens (POST /v1/tokenize), cut the same way,
// weights 1/(trained tokens of the step) on the assistant's tokens (those after the prompt with its
// generation prompt), then optim_step with the trainer's AdamW settings. The two adapters agree within 1e-4
// (L2, relative, as e2e_cotrain compares adapters): the same math in another row order, and AdamW's
// normalised steps move an element whose gradient is within rounding of zero by up to its learning rate
// either way, so the largest single difference is no measure.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checker } from '../api/harness.mjs';
import { startTrainingWorker, stopTrainingWorker } from './training_worker.mjs';

const { check, summary } = checker();
const whet = process.env.WHET_BIN;
const dir = mkdtempSync(join(tmpdir(), 'whet-equal-'));
const model = join(dir, 'tiny');
execFileSync(whet, ['model', 'init', '--out', model, '--preset', 'tiny']);
const L = 48, STEPS = 4, LR = 1e-3, SEED = 7, LORA = { r: 4, alpha: 8 };
const words = 'alpha beta gamma river stone cloud seven paper green window'.split(' ');
const examples = [0, 1, 2, 3].map((e) => [{ role: 'user', content: `Example ${e}.` },
  { role: 'assistant', content: Array.from({ length: 60 }, (_, i) => words[(i * (e + 3)) % words.length]).join(' ') }]);
writeFileSync(join(dir, 'train.jsonl'), examples.map((messages) => JSON.stringify({ messages })).join('\n') + '\n');
writeFileSync(join(dir, 'train.json'), JSON.stringify({ method: 'sft', model, training_file: join(dir, 'train.jsonl'),
  output_dir: join(dir, 'out'), seed: SEED, lora: LORA, max_steps: STEPS,
  hyperparameters: { batch_size: examples.length, n_epochs: STEPS, learning_rate: LR, lr_scheduler: 'constant', warmup_steps: 0,
    max_seq_len: L, max_grad_norm: 0 } }));
execFileSync(whet, ['train', '--config', join(dir, 'train.json'), '--quiet'], { env: { ...process.env, OMP_NUM_THREADS: '1' } });

const store = `file://${join(dir, 'objects')}`;
const worker = await startTrainingWorker(model, dir, ['--object-store', store, '--cache-dir', join(dir, 'cache')],
  { OMP_NUM_THREADS: '1' });
const post = worker.post;
// a safetensors file's F32 tensors by name
const tensors = (path) => {
  const b = readFileSync(path), n = Number(b.readBigUInt64LE(0)), header = JSON.parse(b.subarray(8, 8 + n).toString());
  const out = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const [s, e] = t.data_offsets;
    out[name] = new Float32Array(b.buffer.slice(b.byteOffset + 8 + n + s, b.byteOffset + 8 + n + e));
  }
  return out;
};

try {
  const rows = [];
  for (const messages of examples) {
    const ids = (await post('/v1/tokenize', { messages })).tokens.slice(0, L);
    const prompt = (await post('/v1/tokenize', { messages: messages.slice(0, 1) })).tokens.length;
    check(ids.length === L && prompt < L - 8, 'an example is cut to max_seq_len inside its answer', { n: ids.length, prompt });
    rows.push({ ids, trained: (i) => i + 1 >= prompt }); // position i predicts token i + 1
  }
  const total = rows.reduce((a, r) => a + r.ids.slice(1).filter((_, i) => r.trained(i)).length, 0);
  const data = rows.map((r) => ({ model_input: r.ids.slice(0, -1), loss_fn_inputs: { target_tokens: r.ids.slice(1),
    weights: r.ids.slice(1).map((_, i) => (r.trained(i) ? 1 / total : 0)) } }));
  const id = (await post('/v1/training_sessions', { lora: { ...LORA, seed: SEED } })).id;
  const losses = [];
  for (let s = 0; s < STEPS; s++) {
    losses.push((await post(`/v1/training_sessions/${id}/forward_backward`, { loss_fn: 'cross_entropy', data })).loss);
    await post(`/v1/training_sessions/${id}/optim_step`, { adam_params: { learning_rate: LR, beta1: 0.9, beta2: 0.999, eps: 1e-8 } });
  }
  const trainer = readFileSync(join(dir, 'out', 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l).loss);
  check(losses.every((x, i) => Math.abs(x - trainer[i]) < 1e-4 * Math.abs(trainer[i])), 'each step\'s loss is the trainer\'s', { losses, trainer });
  const saved = await post(`/v1/training_sessions/${id}/save`, {});
  const mine = tensors(join(dir, 'objects', saved.checkpoint, 'adapter_model.safetensors'));
  const theirs = tensors(join(dir, 'out', 'final', 'adapter_model.safetensors'));
  let worst = 0, diffSq = 0, normSq = 0;
  for (const [name, t] of Object.entries(theirs)) {
    const m = mine[name] ?? [];
    check(m.length === t.length, `${name} in both`);
    for (let i = 0; i < t.length; i++) {
      worst = Math.max(worst, Math.abs(m[i] - t[i]));
      diffSq += (m[i] - t[i]) ** 2, normSq += t[i] ** 2;
    }
  }
  const l2 = Math.sqrt(diffSq / normSq);
  console.log(`${Object.keys(theirs).length} tensors, |diff| ${l2} of their norm, largest difference ${worst}`);
  check(Object.keys(mine).length === Object.keys(theirs).length && normSq > 0 && l2 < 1e-4,
    'the session\'s adapter equals whet train\'s within 1e-4 (L2, relative)', { l2, worst });
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  await stopTrainingWorker(worker, dir, check);
}
process.exit(summary());
