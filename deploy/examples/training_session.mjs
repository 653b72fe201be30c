// training_session.mjs - a custom training loop on whet's training sessions, from the client (Node 18+,
// fetch only): GRPO on the copy task (the model is asked to repeat a word; reward = the share of the
// word's characters it got right at their places), then a DPO step whose loss is written here, from the
// log-probs the session returns.
//
//   WHET_URL=http://127.0.0.1:8080 WHET_API_KEY=sk-… node deploy/examples/training_session.mjs [STEPS]
//
// The base model's worker must run training sessions (`whet serve --training`). WHET_MODEL names the
// base (default whet-tiny). Each GRPO step samples a group of answers per prompt with the current
// weights, turns the group's rewards into advantages (reward minus the group's mean, over its standard
// deviation), and trains with Tinker's importance_sampling loss on the answers' tokens.
const url = process.env.WHET_URL ?? 'http://127.0.0.1:8080';
const key = process.env.WHET_API_KEY;
const base = process.env.WHET_MODEL ?? 'whet-tiny';
const steps = Number(process.argv[2] ?? 20);
const GROUP = 4;
const WORDS = ['apple', 'river', 'stone', 'cloud', 'green', 'seven', 'table', 'light'];

async function call(method, path, body) {
  const res = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await res.json();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${json.error?.message}`);
  return json;
}

// Position i of the input predicts token i + 1: the datum of a prompt and an answer, the loss inputs
// given for the answer's tokens (zero on the prompt's).
function datum(prompt, answer, inputs) {
  const tokens = [...prompt, ...answer];
  const pad = (values) => [...new Array(prompt.length - 1).fill(0), ...values];
  const loss_fn_inputs = { target_tokens: tokens.slice(1) };
  for (const [name, values] of Object.entries(inputs)) loss_fn_inputs[name] = pad(values);
  return { model_input: tokens.slice(0, -1), loss_fn_inputs };
}

const reward = (word, text) => [...word].filter((c, i) => text.trim()[i] === c).length / word.length;
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

const session = await call('POST', '/v1/training_sessions', { base_model: base, lora: { r: 8, alpha: 16 } });
console.log(`session ${session.id}: ${session.trainable_parameters} trainable parameters`);
try {
  const prompts = await Promise.all(WORDS.map(async (word) => ({
    word,
    tokens: (await call('POST', '/v1/tokenize', { model: base, messages: [{ role: 'user', content: `Repeat exactly: ${word}` }] })).tokens,
  })));

  // ---- GRPO
  for (let step = 0; step < steps; step++) {
    const data = [], rewards = [];
    for (const p of prompts) {
      const { sequences } = await call('POST', `/v1/training_sessions/${session.id}/sample`,
        { prompt: p.tokens, max_tokens: 8, temperature: 1, n: GROUP, seed: step * 1000 + data.length });
      const r = sequences.map((s) => reward(p.word, s.text));
      rewards.push(...r);
      const m = mean(r), sd = Math.sqrt(mean(r.map((x) => (x - m) ** 2)));
      sequences.forEach((s, i) => {
        if (s.tokens.length === 0 || sd === 0) return; // an answer of nothing, or a group with no signal
        const advantage = (r[i] - m) / (sd + 1e-6);
        data.push(datum(p.tokens, s.tokens, { logprobs: s.logprobs, advantages: s.tokens.map(() => advantage) }));
      });
    }
    if (data.length) {
      await call('POST', `/v1/training_sessions/${session.id}/forward_backward`, { loss_fn: 'importance_sampling', data });
      await call('POST', `/v1/training_sessions/${session.id}/optim_step`, { adam_params: { learning_rate: 1e-3 } });
    }
    console.log(`grpo step ${step + 1}: mean reward ${mean(rewards).toFixed(3)} (${data.length} answers trained)`);
  }

  // ---- DPO, the loss written here: -log σ(β·((lc − lc_ref) − (lr − lr_ref))) of a preference pair, where
  // l is an answer's summed log-prob. Its gradient with respect to each answer token's log-prob is
  // −β·σ(−z) for the chosen answer and +β·σ(−z) for the rejected one: cross_entropy with those weights
  // (loss −Σ w·lp) has exactly that gradient. The reference log-probs are the session's before the step.
  const beta = 0.1, p = prompts[0];
  const chosen = (await call('POST', '/v1/tokenize', { model: base, text: p.word })).tokens;
  const rejected = (await call('POST', '/v1/tokenize', { model: base, text: 'banana' })).tokens;
  const logprobs = async (weights) => {
    const r = await call('POST', `/v1/training_sessions/${session.id}/forward_backward`, {
      loss_fn: 'cross_entropy',
      data: [datum(p.tokens, chosen, { weights: chosen.map(() => weights[0]) }),
        datum(p.tokens, rejected, { weights: rejected.map(() => weights[1]) })],
    });
    const answer = (lp, n) => lp.slice(-n).reduce((a, b) => a + b, 0);
    return [answer(r.logprobs[0], chosen.length), answer(r.logprobs[1], rejected.length)];
  };
  const ref = await logprobs([0, 0]); // weights 0: the log-probs, and no gradient
  for (let step = 0; step < 3; step++) {
    const now = await logprobs([0, 0]);
    const z = beta * ((now[0] - ref[0]) - (now[1] - ref[1]));
    const g = beta / (1 + Math.exp(z)); // β·σ(−z)
    await logprobs([g, -g]);
    await call('POST', `/v1/training_sessions/${session.id}/optim_step`, { adam_params: { learning_rate: 1e-3 } });
    console.log(`dpo step ${step + 1}: loss ${Math.log1p(Math.exp(-z)).toFixed(4)}, margin ${(z / beta).toFixed(4)}`);
  }

  const saved = await call('POST', `/v1/training_sessions/${session.id}/save`, {});
  console.log(`saved the adapter at ${saved.checkpoint} (step ${saved.step}), served as ${saved.model}`);
} finally {
  await call('DELETE', `/v1/training_sessions/${session.id}`);
}
