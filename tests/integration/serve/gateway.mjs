// gateway.mjs - a tenant's models answered through the gateway: POST /v1/chat/completions and
// /v1/completions with the official OpenAI SDK at the gateway, which resolves `model` (the catalog base,
// the tenant's fine-tuned model, one of its checkpoints) and hands the request to the `whet serve` worker
// of the base (WHET_SERVE_WORKERS) with the adapter's object-store prefix. Greedy answers equal
// `whet sample` with the same adapter; a stream comes through as it is made; another tenant's model and
// an unknown one are 404s; a base without a worker is a 503. Every answer is metered: the usage rows
// equal the answers' usage, /v1/usage and /v1/costs show them priced, and the worker's report never
// reaches the client. Cold start: a request for a worker not up yet waits for it (it comes up during
// the wait) and is answered; one that never comes up is a 503 with retry-after after the wait (a training
// session's create too). A worker
// killed mid-stream ends the stream with an error; one found gone (refusing or dropping the connection) is a
// 503 with retry-after 1, not the proxy's 502; either way the next request waits for it again. n with a
// seed, log-probs, bad parameters (400s naming them). A tenant or API key past its monthly limit: 429
// insufficient_quota; an API key's spend counts its answers. DELETE /v1/models/{model}: then neither listed nor served.
import OpenAI from 'openai';
import { execFileSync } from 'node:child_process';
import { createServer, connect } from 'node:net';
import { createServer as createHttpServer } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startStack, client, multipart, checker, SFT_LINE } from '../api/harness.mjs';
import { startWorker, usageRows, sleep } from './worker.mjs';
import { freePort } from '../lib/gateway.mjs';

const { check, summary, failed } = checker();
const whet = process.env.WHET_BIN;
const [makeAdapters, putDir] = process.argv.slice(2);
const dir = mkdtempSync(join(tmpdir(), 'whet-serve-gw-'));
const model = join(dir, 'tiny');
execFileSync(whet, ['model', 'init', '--out', model, '--preset', 'tiny']);
execFileSync(makeAdapters, [model, join(dir, 'adapter-'), '2']);
const sample = (adapter) => execFileSync(whet, ['sample', '--model', model, '--prompt', 'Name a colour.', '--max-tokens', '10',
  '--temperature', '0', ...(adapter !== undefined ? ['--adapter', join(dir, 'adapter-' + adapter)] : [])]).toString().replace(/\n$/, '');
const want = { base: sample(), 0: sample(0), 1: sample(1) };
// the final adapter of a job and a checkpoint, stored where executors store them
const store = `file://${join(dir, 'objects')}`;
const put = (prefix, k) => execFileSync(putDir, [prefix, join(dir, 'adapter-' + k)], { env: { ...process.env, WHET_OBJECT_STORE: store } });
put('checkpoints/ftjob-x/final', 0);
put('checkpoints/ftjob-x/step-10', 1);

const worker = await startWorker(dir, model, 'whet-tiny', '--slots', '4', '--max-len', '128', '--object-store', store, '--cache-dir', join(dir, 'cache'));

// Cold start: the gateway knows late-base at a port where nothing listens until a test opens it, as a
// relay to a worker started (and loaded) beforehand, so when the worker "comes up" does not depend on
// how long a worker takes to load here.
const latePort = await freePort();
const COLD_START_MS = 6000;
let late = null, relay = null;
const openRelay = (target) => new Promise((resolve) => {
  const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
  relay = createServer((client) => {
    const up = connect(port, host);
    client.pipe(up).pipe(client);
    up.on('close', () => client.destroy());
    client.on('close', () => up.destroy());
    up.on('error', () => {});
    client.on('error', () => {});
  }).listen(latePort, '127.0.0.1', resolve);
});
// A stand-in worker for fake-base: its stream comes in pieces cut anywhere (the usage report split in
// two), its whole answer carries a malformed report.
const FAKE_EVENTS = ['data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n',
  'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"lo"}}]}\n\n', ': x-whet-usage 7 3\n\n',
  'data: [DONE]\n\n'];
const fake = createHttpServer(async (req, res) => {
  for await (const chunk of req); // the body
  if (req.headers['x-whet-usage'] !== '1') res.setHeader('x-fake-saw', 'no usage request');
  if (req.url === '/v1/completions') {
    res.writeHead(200, { 'content-type': 'application/json', 'x-whet-usage': '5 x' });
    res.end('{"id":"cmpl-fake","object":"text_completion","created":1,"model":"fake-base",' +
            '"choices":[{"index":0,"text":"ok","finish_reason":"stop"}]}');
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  const all = FAKE_EVENTS.join(''), cuts = [5, 40, all.indexOf('usage') + 2, all.indexOf('[DONE]') - 3, all.length];
  for (let i = 0, at = 0; i < cuts.length; at = cuts[i++]) {
    res.write(all.slice(at, cuts[i]));
    await sleep(30);
  }
  res.end();
});
const fakeAt = await new Promise((resolve) => fake.listen(0, '127.0.0.1', () => resolve(`127.0.0.1:${fake.address().port}`)));
const closeRelay = () => new Promise((resolve) => (relay ? relay.close(resolve) : resolve()));

let stack;
try {
  stack = await startStack({ env: { WHET_SERVE_WORKERS: `whet-tiny=${worker.at},dead-base=127.0.0.1:1,late-base=127.0.0.1:${latePort},fake-base=${fakeAt}`,
                                    WHET_SERVE_COLD_START_MS: String(COLD_START_MS) } });
  // alpha's succeeded job: its fine-tuned model and a checkpoint of it
  const a = client(stack, 'alpha'), b = client(stack, 'beta');
  const m = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: 'd.jsonl', value: `${SFT_LINE}\n` }]);
  const file = (await a('POST', '/v1/files', { body: m.body, headers: { 'content-type': m.type } })).json.id;
  const job = (await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: file } })).json.id;
  const ft = 'ft:whet-tiny:alpha::ftjob-x', ckpt = `${ft}:ckpt-step-10`;
  stack.psql(`UPDATE jobs SET status = 'succeeded', fine_tuned_model = '${ft}', final_object_prefix = 'checkpoints/ftjob-x/final'
              WHERE id = '${job}';
              INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint, object_prefix)
              SELECT 'ftckpt-x10', tenant_id, id, 10, '${ckpt}', 'checkpoints/ftjob-x/step-10' FROM jobs WHERE id = '${job}';
              INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
              VALUES ('other-base', 'llama', 1000000, 'models/other', '00', '{}'),
                     ('dead-base', 'llama', 1000000, 'models/dead', '00', '{}'),
                     ('late-base', 'llama', 1000000, 'models/late', '00', '{}'),
                     ('fake-base', 'llama', 1000000, 'models/fake', '00', '{}')`);
  // inference prices: a prompt token costs 1, a completion token 2
  const op = await a('POST', '/admin/v1/prices', { key: stack.adminToken(), json: { effective_from: 0, currency: 'USD',
    prices: { inference_prompt_tokens_1m: 1000000, inference_completion_tokens_1m: 2000000 } } });
  check(op.status === 200 || op.status === 201, 'a price book with inference prices', op.json);
  await new Promise((r) => setTimeout(r, 100)); // psql blocked the loop: let pooled sockets settle

  const alpha = new OpenAI({ apiKey: stack.keys.alpha, baseURL: `${stack.url}/v1`, maxRetries: 0 });
  const beta = new OpenAI({ apiKey: stack.keys.beta, baseURL: `${stack.url}/v1`, maxRetries: 0 });
  const ask = (c, name, extra = {}) => c.chat.completions.create({ model: name, messages: [{ role: 'user', content: 'Name a colour.' }],
    max_tokens: 10, temperature: 0, ...extra });
  const metered = []; // [tenant, model, prompt_tokens, completion_tokens] of every answer
  for (const [name, key] of [['whet-tiny', 'base'], [ft, 0], [ckpt, 1]]) {
    const r = await ask(alpha, name);
    check(r.choices[0].message.content === want[key] && r.model === name, `${name} through the gateway equals whet sample`,
      { got: r.choices[0].message.content, want: want[key] });
    metered.push(['alpha', name, r.usage.prompt_tokens, r.usage.completion_tokens]);
  }
  const stream = await ask(alpha, ft, { stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null;
  for await (const c of stream) {
    for (const ch of c.choices) text += ch.delta?.content ?? '';
    if (c.usage) usage = c.usage;
  }
  check(text === want[0] && usage?.completion_tokens > 0, 'a stream comes through the gateway', { text, usage });
  metered.push(['alpha', ft, usage.prompt_tokens, usage.completion_tokens]);
  // n > 1 with a seed: the same choices again, and not all the same
  const seeded = () => alpha.completions.create({ model: ft, prompt: 'Once upon a time', max_tokens: 8, n: 3, seed: 7,
    temperature: 1 });
  const done = await seeded(), repeated = await seeded();
  const texts = (r) => r.choices.map((c) => c.text);
  check(done.object === 'text_completion' && done.choices.length === 3 && JSON.stringify(texts(done)) === JSON.stringify(texts(repeated)) &&
    new Set(texts(done)).size > 1, 'completions with n and a seed through the gateway: reproducible, choices differ',
    [texts(done), texts(repeated)]);
  for (const r of [done, repeated]) metered.push(['alpha', ft, r.usage.prompt_tokens, r.usage.completion_tokens]);
  // log-probs: the chosen token's and the top ones, as the worker computed them
  const lp = await ask(alpha, ft, { logprobs: true, top_logprobs: 2 });
  const content = lp.choices[0].logprobs?.content ?? [];
  check(content.length === lp.usage.completion_tokens && content.every((t) => t.logprob <= 0 && t.top_logprobs.length === 2 &&
    t.top_logprobs[0].logprob >= t.logprob - 1e-6), 'log-probs through the gateway', lp.choices[0].logprobs);
  metered.push(['alpha', ft, lp.usage.prompt_tokens, lp.usage.completion_tokens]);

  // the worker's usage report stays between it and the gateway: neither a header of a whole answer, nor
  // an event of a stream (which, without include_usage, has no usage chunk either)
  const body = { model: ckpt, messages: [{ role: 'user', content: 'Name a colour.' }], max_tokens: 10, temperature: 0 };
  const whole = await a('POST', '/v1/chat/completions', { json: body });
  check(whole.status === 200 && !whole.headers.has('x-whet-usage'), 'a whole answer carries no usage report', [...whole.headers]);
  metered.push(['alpha', ckpt, whole.json.usage.prompt_tokens, whole.json.usage.completion_tokens]);
  const raw = await a('POST', '/v1/chat/completions', { json: { ...body, stream: true } });
  const events = raw.text.split('\n\n').filter((e) => e);
  check(raw.status === 200 && !raw.text.includes('x-whet-usage') && events.at(-1) === 'data: [DONE]' &&
    events.slice(0, -1).every((e) => e.startsWith('data: ') && !('usage' in JSON.parse(e.slice(6)))),
    'a stream without include_usage: no report, no usage chunk', raw.text);
  metered.push(['alpha', ckpt, whole.json.usage.prompt_tokens, whole.json.usage.completion_tokens]); // greedy: the same answer
  const rebuilt = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)).choices[0]?.delta?.content ?? '').join('');
  check(rebuilt === whole.json.choices[0].message.content, 'the stream is whole', { rebuilt, whole: whole.json.choices[0] });
  // a client cannot name an adapter itself: the gateway drops x-whet-* headers
  const sneaky = await b('POST', '/v1/chat/completions', { json: { ...body, model: 'whet-tiny' },
    headers: { 'x-whet-adapter': 'checkpoints/ftjob-x/final', 'x-whet-usage': '1' } });
  check(sneaky.status === 200 && sneaky.json.choices[0].message.content === want.base,
    'a client\'s x-whet-adapter is ignored', sneaky.json);
  metered.push(['beta', 'whet-tiny', sneaky.json.usage.prompt_tokens, sneaky.json.usage.completion_tokens]);

  // a stream in pieces cut anywhere: the events come through whole and in order, the report split in two
  // is taken out and metered; a malformed report is not metered and not shown either
  const pieces = await a('POST', '/v1/chat/completions', { json: { ...body, model: 'fake-base', stream: true } });
  check(pieces.status === 200 && pieces.text === FAKE_EVENTS.filter((e) => !e.startsWith(':')).join('') &&
    !pieces.headers.has('x-fake-saw'), 'a stream in pieces: the events whole, the report out', pieces.text);
  metered.push(['alpha', 'fake-base', 7, 3]);
  const malformed = await a('POST', '/v1/completions', { json: { model: 'fake-base', prompt: 'x' } });
  check(malformed.status === 200 && malformed.json?.choices?.[0]?.text === 'ok' && !malformed.headers.has('x-whet-usage'),
    'a malformed report: the answer unchanged, the report out', { status: malformed.status, text: malformed.text });

  // the usage rows equal the answers' usage (written as each answer ends: wait for the last)
  const rowsWant = metered.map((m) => m.join('|')).sort();
  const rows = await usageRows(stack, rowsWant.length);
  check(JSON.stringify(rows) === JSON.stringify(rowsWant), 'one usage row per answer, with its usage', { rows, rowsWant });
  const sum = (tenant, model, k) => metered.filter((m) => m[0] === tenant && (!model || m[1] === model)).reduce((s, m) => s + m[k], 0);
  const u = (await a('GET', '/v1/usage')).json;
  for (const model of ['whet-tiny', ft, ckpt, 'fake-base']) {
    const row = u.inference.find((x) => x.model === model);
    const p = sum('alpha', model, 2), c = sum('alpha', model, 3);
    check(row && row.requests === metered.filter((m) => m[0] === 'alpha' && m[1] === model).length && row.prompt_tokens === p &&
      row.completion_tokens === c && row.cost.amount === p + 2 * c && row.cost.line_items.inference_prompt_tokens === p &&
      row.cost.line_items.inference_completion_tokens === 2 * c, `/v1/usage: ${model}'s tokens and cost`, { row, p, c });
  }
  check(u.inference.length === 4, 'alpha sees its own models only', u.inference);
  const bu = (await b('GET', '/v1/usage')).json.inference;
  check(bu.length === 1 && bu[0].model === 'whet-tiny' && bu[0].prompt_tokens === sum('beta', null, 2), 'beta sees its own', bu);
  const now = Math.floor(Date.now() / 1000);
  const costs = (await a('GET', `/v1/costs?start_time=${now - 86400}&end_time=${now + 86400}&group_by=line_item&limit=3`)).json;
  const line = (li) => costs.data.flatMap((d) => d.results).filter((x) => x.line_item === li).reduce((s, x) => s + x.amount.value, 0);
  check(line('inference_prompt_tokens') === sum('alpha', null, 2) && line('inference_completion_tokens') === 2 * sum('alpha', null, 3),
    '/v1/costs: inference line items', costs);
  const csv = (await a('GET', '/admin/v1/usage?format=csv', { key: stack.adminToken() })).text.split('\n');
  check(csv[0].endsWith(',model,requests,prompt_tokens,completion_tokens') &&
    csv.includes(`beta,${(await b('GET', '/v1/whoami')).json?.tenant_id ?? ''},,,,,,,,,whet-tiny,1,${sum('beta', null, 2)},${sum('beta', null, 3)}`),
    'the billing export has inference rows', csv);
  const month = new Date().toISOString().slice(0, 7);
  const focus = (await a('GET', `/admin/v1/billing/focus?period=${month}`, { key: stack.adminToken() })).text.split('\n');
  const focusRow = focus.find((l) => l.includes(`,inference_completion_tokens_1m,${ckpt},Model,`));
  check(focusRow && Number(focusRow.split(',')[0]) === 2 * sum('alpha', ckpt, 3), 'the FOCUS export: a model\'s inference tokens', focus);

  // cold start: a worker that comes up while the request waits answers it
  const settled = (p) => p.then((r) => ({ r }), (e) => ({ e })); // awaited later: no unhandled rejection meanwhile
  const waitsForLate = async (what) => {
    late = await startWorker(dir, model, 'late-base', '--slots', '2', '--max-len', '2048');
    const start = Date.now();
    const answer = settled(ask(alpha, 'late-base'));
    await sleep(500);
    await openRelay(late.at);
    const { r, e } = await answer;
    check(r?.choices[0].message.content === want.base && Date.now() - start >= 500, what, r?.choices[0] ?? e?.message);
    if (r) metered.push(['alpha', 'late-base', r.usage.prompt_tokens, r.usage.completion_tokens]);
  };
  await waitsForLate('a request waits for its worker\'s cold start');
  // a worker killed mid-stream: the stream ends with an error event (the SDK raises it), and the next
  // request waits for the worker to come back
  let chunks = 0, cut = null;
  try {
    const long = await ask(alpha, 'late-base', { max_tokens: 1900, stream: true });
    for await (const c of long) if (++chunks === 2) late.proc.kill('SIGKILL');
  } catch (e) {
    cut = e;
  }
  check(cut && /stopped before the answer was complete/.test(cut.message) && chunks >= 2,
    'a worker killed mid-stream: the stream ends with an error', { chunks, message: cut?.message });
  check((await late.gone) === 'SIGKILL', 'the killed worker is gone');
  await closeRelay();
  await waitsForLate('the next request waits for the worker');
  // a worker found gone, up when last reached: a 503 with retry-after 1 (OpenAI's error; the SDKs retry it),
  // never the proxy's 502, whether it refused the connection (nothing listens: the request reached nothing)
  // or dropped it before answering (the relay still listens, its worker gone); each time the next request
  // waits for the worker again
  const gone = async (what, message, relayOpen) => {
    late.proc.kill('SIGKILL');
    await late.gone;
    if (!relayOpen) await closeRelay();
    const r = await a('POST', '/v1/completions', { json: { model: 'late-base', prompt: 'Once', max_tokens: 2 } });
    check(r.status === 503 && r.headers.get('retry-after') === '1' && r.json?.error?.code === 'service_unavailable' &&
      r.json?.error?.type === 'server_error' && message.test(r.json?.error?.message), what,
      { status: r.status, retry: r.headers.get('retry-after'), body: r.json ?? r.text });
    await closeRelay();
    await waitsForLate(`${what}: the next request waits for the worker`);
  };
  await gone('a worker that refuses the connection: 503 with retry-after 1', /refused the connection: the request did not reach it/, false);
  await gone('a worker that drops the connection: 503 with retry-after 1', /ended before answering \(I\/O error/, true);

  const refused = async (what, c, name, status, code) => {
    try {
      await ask(c, name);
      check(false, `${what} is refused`);
    } catch (e) {
      check(e.status === status && (!code || e.code === code), `${what}: ${status}`, { status: e.status, code: e.code, message: e.message });
    }
  };
  await refused('another tenant\'s model', beta, ft, 404, 'model_not_found');
  await refused('another tenant\'s checkpoint', beta, ckpt, 404, 'model_not_found');
  await refused('an unknown model', alpha, 'ft:nope', 404, 'model_not_found');
  await refused('a base no worker serves', alpha, 'other-base', 503);
  // (the gateway's clock is its loop's, read once per iteration: a little slack)
  const deadStart = Date.now();
  const dead = await a('POST', '/v1/chat/completions', { json: { ...body, model: 'dead-base' } });
  check(dead.status === 503 && Number(dead.headers.get('retry-after')) >= 1 && dead.json?.error?.message?.includes('dead-base') &&
    Date.now() - deadStart >= COLD_START_MS - 100, 'a worker that does not come up: 503 with retry-after after the wait',
    { status: dead.status, retry: dead.headers.get('retry-after'), body: dead.json, ms: Date.now() - deadStart });
  // a training session's create waits for its base's cold start as completions do (no scheduler here
  // places a worker of other-base): then 503 with retry-after
  const sessionStart = Date.now();
  const noWorker = await a('POST', '/v1/training_sessions', { json: { base_model: 'other-base' } });
  check(noWorker.status === 503 && Number(noWorker.headers.get('retry-after')) >= 1 &&
    Date.now() - sessionStart >= COLD_START_MS - 100, 'a session create waits for a cold start, then 503 with retry-after',
    { status: noWorker.status, retry: noWorker.headers.get('retry-after'), body: noWorker.json, ms: Date.now() - sessionStart });
  const noModel = await a('POST', '/v1/chat/completions', { json: { messages: [] } });
  check(noModel.status === 400 && noModel.json?.error?.param === 'model', 'no model: 400 naming it', noModel.json);
  // bad parameters: the worker's 400s, naming them, come through (and are not metered)
  for (const [what, extra, param] of [['a negative max_tokens', { max_tokens: -1 }, 'max_tokens'], ['a huge n', { n: 1000 }, 'n'],
    ['a prompt longer than the context', { messages: [{ role: 'user', content: 'colour '.repeat(400) }] }, 'messages']]) {
    const bad = await a('POST', '/v1/chat/completions', { json: { ...body, ...extra } });
    check(bad.status === 400 && bad.json?.error?.param === param && bad.json?.error?.type === 'invalid_request_error',
      `${what}: 400 naming ${param}`, { status: bad.status, body: bad.json });
  }

  // the budget's hard cap: a tenant whose month's spend reached its monthly limit, or an API key at its own,
  // gets OpenAI's 429 insufficient_quota on chat and completions (not metered); without the limit, answers
  const quota = async (what, call) => {
    try {
      await call();
      check(false, `${what} is refused`);
    } catch (e) {
      check(e.status === 429 && e.code === 'insufficient_quota' && e.type === 'insufficient_quota' && /quota/.test(e.message),
        `${what}: 429 insufficient_quota`, { status: e.status, code: e.code, type: e.type, message: e.message });
    }
  };
  const capped = await a('PUT', '/admin/v1/tenants/alpha/budget', { key: stack.adminToken(), json: { monthly_limit: 1 } });
  check(capped.json?.hard_cap_reached === true, 'alpha\'s spend is past a monthly limit of 1', capped.json);
  await quota('chat past the tenant\'s monthly limit', () => ask(alpha, ft));
  await quota('a stream past the tenant\'s monthly limit', () => ask(alpha, 'whet-tiny', { stream: true }));
  await quota('completions past the tenant\'s monthly limit', () => alpha.completions.create({ model: ft, prompt: 'x', max_tokens: 2 }));
  const served = await ask(beta, 'whet-tiny');
  check(served.choices[0].message.content === want.base, 'another tenant is served', served);
  metered.push(['beta', 'whet-tiny', served.usage.prompt_tokens, served.usage.completion_tokens]);
  await a('PUT', '/admin/v1/tenants/alpha/budget', { key: stack.adminToken(), json: { monthly_limit: null } });
  const uncapped = await ask(alpha, 'whet-tiny');
  check(uncapped.choices[0].message.content === want.base, 'the limit removed, alpha is served again', uncapped);
  metered.push(['alpha', 'whet-tiny', uncapped.usage.prompt_tokens, uncapped.usage.completion_tokens]);
  const limited = await a('POST', '/v1/api_keys', { json: { scopes: ['inference'], monthly_limit: 0 } });
  check(limited.status === 200 && limited.json.monthly_limit === 0, 'a key with a monthly limit of 0', limited.json);
  const keyed = new OpenAI({ apiKey: limited.json.key, baseURL: `${stack.url}/v1`, maxRetries: 0 });
  await quota('chat with an API key at its monthly limit', () => ask(keyed, 'whet-tiny'));

  // the workers' answers are in the gateway's per-route metrics, like its own
  const metricsText = await (await fetch(`${stack.url}/metrics`)).text();
  const answered = (route, code) => Number(metricsText.match(new RegExp(`^whet_http_requests_total\\{route="${route}",code="${code}"\\} (\\d+)$`, 'm'))?.[1] ?? 0);
  check(answered('chat.completions.create', 200) >= 8 && answered('completions.create', 200) >= 2 &&
    answered('chat.completions.create', 400) >= 4 && answered('chat.completions.create', 429) === 3,
    'proxied answers in the gateway\'s per-route metrics', metricsText.split('\n').filter((l) => l.includes('completions')));

  // an API key's spend counts the answers it was given (inference_usage.api_key_id): a key with a small
  // monthly limit is answered once, then 429 insufficient_quota, while another key of alpha still is
  const small = await a('POST', '/v1/api_keys', { json: { scopes: ['inference'], monthly_limit: 5 } });
  const other = await a('POST', '/v1/api_keys', { json: { scopes: ['inference'] } });
  check(small.status === 200 && other.status === 200, 'two more keys of alpha', [small.json, other.json]);
  const smallKey = new OpenAI({ apiKey: small.json.key, baseURL: `${stack.url}/v1`, maxRetries: 0 });
  const otherKey = new OpenAI({ apiKey: other.json.key, baseURL: `${stack.url}/v1`, maxRetries: 0 });
  const first = await ask(smallKey, 'whet-tiny');
  check(first.choices[0].message.content === want.base, 'a key under its monthly limit is answered', first);
  metered.push(['alpha', 'whet-tiny', first.usage.prompt_tokens, first.usage.completion_tokens]);
  const firstCost = first.usage.prompt_tokens + 2 * first.usage.completion_tokens;
  await usageRows(stack, metered.length);
  check(stack.psql(`SELECT api_key_id FROM inference_usage ORDER BY seq DESC LIMIT 1`) === small.json.id,
    'the usage row names the key', small.json.id);
  const keys = (await a('GET', '/v1/api_keys')).json.data;
  const spent = keys.find((k) => k.id === small.json.id)?.spent_this_month;
  check(spent === firstCost, 'the key\'s spend this month is its answer\'s cost', { spent, firstCost });
  await quota('chat with an API key whose inference passed its monthly limit', () => ask(smallKey, 'whet-tiny'));
  await quota('completions with an API key whose inference passed its monthly limit',
    () => smallKey.completions.create({ model: ft, prompt: 'x', max_tokens: 2 }));
  const still = await ask(otherKey, ft);
  check(still.choices[0].message.content === want[0], 'another key of the same tenant is still answered', still);
  metered.push(['alpha', ft, still.usage.prompt_tokens, still.usage.completion_tokens]);

  // DELETE /v1/models/{model}: only the tenant's own fine-tuned model; then neither listed nor served
  const del = async (c, name) => {
    try {
      return await c.models.delete(name);
    } catch (e) {
      return { status: e.status, code: e.code };
    }
  };
  const byBeta = await del(beta, ft);
  check(byBeta.status === 404 && byBeta.code === 'model_not_found', 'another tenant cannot delete the model', byBeta);
  const base = await del(alpha, 'whet-tiny');
  check(base.status === 404, 'a base model cannot be deleted', base);
  const deleted = await del(alpha, ft);
  check(deleted.id === ft && deleted.object === 'model' && deleted.deleted === true, 'the model is deleted', deleted);
  const listed = (await alpha.models.list()).data.map((m) => m.id);
  check(!listed.includes(ft) && listed.includes('whet-tiny'), 'a deleted model is no longer listed', listed);
  const got = await a('GET', `/v1/models/${encodeURIComponent(ft)}`);
  check(got.status === 404, 'a deleted model is not found', got.json);
  await refused('a deleted model', alpha, ft, 404, 'model_not_found');
  await refused('a checkpoint of a deleted model', alpha, ckpt, 404, 'model_not_found');
  const again = await del(alpha, ft);
  check(again.status === 404, 'a second delete is a 404', again);
  const jobAfter = await a('GET', `/v1/fine_tuning/jobs/${job}`);
  check(jobAfter.status === 200 && jobAfter.json.fine_tuned_model === ft, 'the job stays', jobAfter.json);
  const count = Number(stack.psql('SELECT count(*) FROM inference_usage'));
  check(count === metered.length, 'refused requests are not metered', { count, answers: metered.length });
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  if (stack) {
    const stopped = await stack.stop();
    check(stopped === null, 'the gateway exits cleanly', stopped);
    if (failed()) console.error(stack.logTail(60));
  }
  await closeRelay();
  fake.close();
  worker.proc.kill('SIGTERM');
  check((await worker.gone) === 0, 'the worker exits 0');
  if (late) {
    late.proc.kill('SIGTERM');
    check((await late.gone) === 0, 'the late worker exits 0');
  }
  rmSync(dir, { recursive: true, force: true });
}
process.exit(summary());
