// serve.mjs - `whet serve` (the model worker) driven by the official OpenAI Node SDK, unchanged, on the
// tiny model with four random LoRA adapters: greedy chat on the base and on adapters equals
// `whet sample` (with and without --adapter); a stream's deltas add up to the whole answer, with usage
// last; seeds repeat; n choices; stop strings on completions; log-probs (chat, stream, completions);
// eight concurrent requests on four adapters equal the same requests one by one; a client that leaves mid-stream does not stop the worker; bad
// parameters are 400s naming the parameter and an unknown model a 404.
import OpenAI from 'openai';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checker } from '../lib/check.mjs';

const { check, summary } = checker();
const whet = process.env.WHET_BIN;
const [makeAdapters, putDir] = process.argv.slice(2);
const dir = mkdtempSync(join(tmpdir(), 'whet-serve-'));
const model = join(dir, 'tiny');
execFileSync(whet, ['model', 'init', '--out', model, '--preset', 'tiny']);
execFileSync(makeAdapters, [model, join(dir, 'adapter-'), '4']);

// `whet sample`'s answers first: run between requests, a synchronous child blocks node's event loop, so
// on a loaded machine the client's pooled keep-alive socket could outlive the server's idle timeout
// unnoticed and the next request would meet a closed connection.
const sample = (prompt, adapter) => execFileSync(whet, ['sample', '--model', model, '--prompt', prompt, '--max-tokens', '12',
  '--temperature', '0', ...(adapter !== undefined ? ['--adapter', join(dir, 'adapter-' + adapter)] : [])]).toString().replace(/\n$/, '');
const sampled = { base: sample('What is 2 + 3?'), 0: sample('What is 2 + 3?', 0), 2: sample('What is 2 + 3?', 2),
  3: sample('What is 2 + 3?', 3) };
// adapter 2 also as a checkpoint in a file:// object store, where the gateway would name it
const store = `file://${join(dir, 'objects')}`;
execFileSync(putDir, ['checkpoints/job-2/final', join(dir, 'adapter-2')], { env: { ...process.env, WHET_OBJECT_STORE: store } });

const addressFile = join(dir, 'address');
const args = ['serve', '--model', model, '--name', 'whet-tiny', '--http', '127.0.0.1:0', '--address-file', addressFile,
  '--slots', '8', '--max-len', '160', '--cache', '3', '--object-store', store, '--cache-dir', join(dir, 'cache')];
for (let k = 0; k < 4; k++) args.push('--adapter', `ft:whet-tiny:a${k}=${join(dir, 'adapter-' + k)}`);
const worker = spawn(whet, args, { stdio: ['ignore', 'inherit', 'inherit'] });
const gone = new Promise((resolve) => worker.on('exit', resolve));
// the worker loads the model before it listens: slow under a sanitizer on a loaded machine
for (let i = 0; i < 1200 && !(existsSync(addressFile) && readFileSync(addressFile, 'utf8').trim()); i++) await new Promise((r) => setTimeout(r, 50));
const base = `http://${readFileSync(addressFile, 'utf8').trim()}/v1`;
const client = new OpenAI({ apiKey: 'unused', baseURL: base, maxRetries: 0 });

const chat = (model, content, extra = {}) => client.chat.completions.create({
  model, messages: [{ role: 'user', content }], max_tokens: 12, temperature: 0, ...extra });

try {
  const listed = await client.models.list();
  check(listed.data.map((m) => m.id).join(',') === 'whet-tiny,ft:whet-tiny:a0,ft:whet-tiny:a1,ft:whet-tiny:a2,ft:whet-tiny:a3',
    'models.list names the base and the adapters', listed.data);

  // greedy answers equal `whet sample`, on the base and on adapters
  for (const [name, adapter] of [['whet-tiny', undefined], ['ft:whet-tiny:a0', 0], ['ft:whet-tiny:a3', 3]]) {
    const r = await chat(name, 'What is 2 + 3?');
    const want = sampled[adapter ?? 'base'];
    check(r.choices[0].message.content === want && r.object === 'chat.completion' && r.model === name,
      `greedy ${name} equals whet sample`, { got: r.choices[0].message.content, want });
    check(r.usage.completion_tokens <= 12 && r.usage.prompt_tokens > 0 &&
      r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, `usage of ${name}`, r.usage);
  }
  // an adapter named by its object-store prefix (as the gateway names a tenant's model): fetched once
  for (let i = 0; i < 2; i++) {
    const r = await client.chat.completions.create({ model: 'ft:whet-tiny:tenant-model', messages: [{ role: 'user',
      content: 'What is 2 + 3?' }], max_tokens: 12, temperature: 0 }, { headers: { 'x-whet-adapter': 'checkpoints/job-2/final' } });
    check(r.choices[0].message.content === sampled[2] && r.model === 'ft:whet-tiny:tenant-model',
      `an adapter from the object store (${i ? 'cached' : 'fetched'}) equals whet sample with it`, r.choices[0].message.content);
  }
  try {
    await client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] },
      { headers: { 'x-whet-adapter': 'checkpoints/none/final' } });
    check(false, 'an adapter that is not in the store is refused');
  } catch (e) {
    check(e.status === 503 && e.code === 'adapter_unavailable', 'an adapter not in the store: 503', { status: e.status, code: e.code });
  }

  const a0 = (await chat('ft:whet-tiny:a0', 'Name a colour.')).choices[0].message.content;
  const a1 = (await chat('ft:whet-tiny:a1', 'Name a colour.')).choices[0].message.content;
  const plain = (await chat('whet-tiny', 'Name a colour.')).choices[0].message.content;
  check(a0 !== plain || a1 !== plain, 'adapters change the answer', { a0, a1, plain });

  // a stream adds up to the whole answer; usage comes last
  const whole = await chat('ft:whet-tiny:a1', 'Tell me a story.');
  const stream = await chat('ft:whet-tiny:a1', 'Tell me a story.', { stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, chunks = 0, roles = 0;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      text += ch.delta?.content ?? '';
      if (ch.delta?.role === 'assistant') roles++;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  check(text === whole.choices[0].message.content && finish === whole.choices[0].finish_reason && roles === 1,
    'streamed deltas equal the whole answer', { text, whole: whole.choices[0].message.content, finish, roles });
  check(usage && usage.completion_tokens === whole.usage.completion_tokens && chunks > 3, 'the stream ends with usage', usage);

  // seeds repeat; n choices
  const seeded = { temperature: 1, seed: 42, n: 3 };
  const s1 = await chat('ft:whet-tiny:a2', 'Write a haiku.', seeded);
  const s2 = await chat('ft:whet-tiny:a2', 'Write a haiku.', seeded);
  check(s1.choices.length === 3 && s1.choices.map((c) => c.index).join() === '0,1,2', 'n = 3 choices', s1.choices.length);
  check(JSON.stringify(s1.choices) === JSON.stringify(s2.choices), 'the same seed gives the same choices');
  check(new Set(s1.choices.map((c) => c.message.content)).size > 1, 'the choices differ from each other');

  // completions and stop strings: the text ends before the stop string
  const full = await client.completions.create({ model: 'whet-tiny', prompt: 'Once upon a time', max_tokens: 12, temperature: 0 });
  const fullText = full.choices[0].text;
  const stop = fullText.slice(3, 6);
  const cut = await client.completions.create({ model: 'whet-tiny', prompt: 'Once upon a time', max_tokens: 12, temperature: 0, stop });
  check(full.object === 'text_completion' && cut.choices[0].text === fullText.slice(0, fullText.indexOf(stop)) &&
    cut.choices[0].finish_reason === 'stop', 'a stop string cuts a completion', { fullText, stop, cut: cut.choices[0] });

  // eight at once on four adapters (three fit in the cache at a time): each equals itself alone
  const prompts = ['one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight'];
  const alone = [];
  for (let i = 0; i < 8; i++) alone.push((await chat(`ft:whet-tiny:a${i % 4}`, prompts[i])).choices[0].message.content);
  const together = await Promise.all(prompts.map((p, i) => chat(`ft:whet-tiny:a${i % 4}`, p)));
  check(together.every((r, i) => r.choices[0].message.content === alone[i]), 'concurrent requests equal each alone',
    { together: together.map((r) => r.choices[0].message.content), alone });

  // log-probs: of every token, the top ones first (the greedy token is the likeliest), in streams too
  const lp = await chat('ft:whet-tiny:a1', 'Tell me a story.', { logprobs: true, top_logprobs: 2 });
  const entries = lp.choices[0].logprobs?.content ?? [];
  check(entries.length === lp.usage.completion_tokens &&
    entries.every((e) => e.top_logprobs.length === 2 && Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6 &&
      e.top_logprobs[0].token === e.token && e.logprob <= 0 && Array.isArray(e.bytes)),
    'chat logprobs: every token with its top 2, greedy first', entries.slice(0, 2));
  check(Buffer.concat(entries.map((e) => Buffer.from(e.bytes))).toString() === lp.choices[0].message.content,
    'the tokens\' bytes spell the answer');
  const lpStream = await chat('ft:whet-tiny:a1', 'Tell me a story.', { logprobs: true, stream: true });
  const streamed = [];
  for await (const c of lpStream) for (const ch of c.choices) streamed.push(...(ch.logprobs?.content ?? []));
  check(streamed.length === entries.length && streamed.every((e, i) => Math.abs(e.logprob - entries[i].logprob) < 1e-6),
    'streamed logprobs equal the whole answer\'s', { streamed: streamed.length, whole: entries.length });
  const clp = await client.completions.create({ model: 'whet-tiny', prompt: 'Once upon a time', max_tokens: 6, temperature: 0, logprobs: 3 });
  const l = clp.choices[0].logprobs;
  check(l && l.tokens.length === 6 && l.token_logprobs.length === 6 && l.top_logprobs.length === 6 &&
    l.top_logprobs.every((t) => Object.keys(t).length >= 1) && l.text_offset[0] === 0, 'completions logprobs', l);

  // a client that leaves mid-stream: the worker goes on
  const ac = new AbortController();
  const leaving = await client.chat.completions.create({ model: 'whet-tiny', messages: [{ role: 'user', content: 'go' }],
    max_tokens: 100, temperature: 1, stream: true }, { signal: ac.signal });
  try {
    for await (const c of leaving) { ac.abort(); }
  } catch (e) { /* the abort */ }
  const after = await chat('whet-tiny', 'What is 2 + 3?');
  check(after.choices[0].message.content === sampled.base, 'the worker answers after a client left');

  // Prometheus metrics on the worker's own port
  // (the stream the client left goes on until the engine's next step sees the cancel: poll for it)
  let metricsText = '';
  const metric = (name) => Number((metricsText.match(new RegExp(`^${name} (\\S+)$`, 'm')) || [])[1]);
  for (let i = 0; i < 100; i++) {
    metricsText = await (await fetch(base.replace(/\/v1$/, '/metrics'))).text();
    if (metric('whet_serve_requests_running') === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  check(metric('whet_serve_generated_tokens_total') > 100 && metric('whet_serve_time_to_first_token_seconds_count') >= 20 &&
    metric('whet_serve_adapter_evictions_total') >= 1, 'the worker\'s metrics count tokens, first tokens and evictions',
    metricsText.slice(0, 400));
  check(metric('whet_serve_requests_running') === 0, 'the stream the client left was cancelled: nothing runs');

  // errors: OpenAI-shaped, with the parameter
  const expectError = async (what, status, param, body) => {
    try {
      await client.chat.completions.create({ model: 'whet-tiny', messages: [{ role: 'user', content: 'hi' }], ...body });
      check(false, `${what} is refused`);
    } catch (e) {
      check(e.status === status && (param === undefined || e.param === param), `${what}: ${status}`,
        { status: e.status, param: e.param, message: e.message });
    }
  };
  await expectError('an unknown model', 404, 'model', { model: 'ft:someone-else' });
  await expectError('n = 0', 400, 'n', { n: 0 });
  await expectError('n above the batch', 400, 'n', { n: 9 });
  await expectError('negative max_tokens', 400, 'max_tokens', { max_tokens: -1 });
  await expectError('temperature 3', 400, 'temperature', { temperature: 3 });
  await expectError('top_logprobs without logprobs', 400, 'top_logprobs', { top_logprobs: 2 });
  await expectError('top_logprobs above 20', 400, 'top_logprobs', { logprobs: true, top_logprobs: 21 });
  await expectError('tools', 400, 'tools', { tools: [{ type: 'function', function: { name: 'f' } }] });
  await expectError('a prompt longer than the context', 400, 'messages', { messages: [{ role: 'user', content: 'x '.repeat(400) }] });
  await expectError('a bad role', 400, 'messages', { messages: [{ role: 'robot', content: 'hi' }] });
} catch (e) {
  check(false, 'the serving test ran to the end', String(e.stack || e));
} finally {
  worker.kill('SIGTERM');
  const code = await gone;
  check(code === 0, 'whet serve exits 0 on SIGTERM', code);
  rmSync(dir, { recursive: true, force: true });
}
process.exit(summary());
