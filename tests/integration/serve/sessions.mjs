// sessions.mjs - training sessions (a custom training loop on a shared model worker, after Tinker's API):
// `whet serve --training` on its own and behind the gateway. A session started from an adapter reports
// the log-probs `whet score` computes for it; cross_entropy steps lower the loss; sample and save answer
// in Tinker's shapes (the save lands in the object store and is a fine-tuned model of the tenant: listed,
// served, deletable, another tenant's 404); POST /v1/tokenize through the gateway equals
// the worker's; another tenant's session and a deleted one are 404s, and so is another tenant's
// init_checkpoint; bad input is a 400 naming the field; the client cannot name the worker's headers; past
// the tenant's monthly limit a create and the passes are 429 insufficient_quota. Calls are metered per
// token (train, prefill, sample), priced, in usage, costs, the FOCUS export and an API key's spend.
// Training beside completions changes no answer; calls of sessions at once equal each alone; idle
// sessions expire; the example client loop (deploy/examples/training_session.mjs) runs.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, existsSync, writeFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startStack, client, multipart, checker, SFT_LINE } from '../api/harness.mjs';
import { stopAll } from './worker.mjs';

const { check, summary, failed } = checker();
const whet = process.env.WHET_BIN;
const [makeAdapters, putDir] = process.argv.slice(2);
const dir = mkdtempSync(join(tmpdir(), 'whet-sessions-'));
const model = join(dir, 'tiny');
execFileSync(whet, ['model', 'init', '--out', model, '--preset', 'tiny']);
execFileSync(makeAdapters, [model, join(dir, 'adapter-'), '1']);
const store = `file://${join(dir, 'objects')}`;
execFileSync(putDir, ['checkpoints/ftjob-s/final', join(dir, 'adapter-0')], { env: { ...process.env, WHET_OBJECT_STORE: store } });

// A worker with --training (and these options); its address and the promise of its exit status.
const startWorker = async (name, extra = []) => {
  const addressFile = join(dir, `${name}.address`);
  const proc = spawn(whet, ['serve', '--model', model, '--name', 'whet-tiny', '--http', '127.0.0.1:0', '--address-file',
    addressFile, '--slots', '4', '--max-len', '128', '--object-store', store, '--cache-dir', join(dir, 'cache'), '--training',
    ...extra], { stdio: ['ignore', 'inherit', 'inherit'] });
  const gone = new Promise((resolve) => proc.on('exit', resolve));
  for (let i = 0; i < 1200 && !(existsSync(addressFile) && readFileSync(addressFile, 'utf8').trim()); i++) await new Promise((r) => setTimeout(r, 50));
  return { proc, gone, at: readFileSync(addressFile, 'utf8').trim() };
};
const worker = await startWorker('main');
const workerAt = worker.at;
const to = (at) => async (method, path, json, headers = {}) => {
  const res = await fetch(`http://${at}${path}`, { method, headers: { 'content-type': 'application/json', ...headers },
    body: json === undefined ? undefined : JSON.stringify(json) });
  const text = await res.text();
  let parsed;
  try { parsed = JSON.parse(text); } catch { parsed = undefined; }
  return { status: res.status, json: parsed, text };
};
const direct = to(workerAt);
// Tinker's datum of a token sequence: each position predicts the next token.
const datum = (ids, extra = {}) => ({ model_input: ids.slice(0, -1), loss_fn_inputs: { target_tokens: ids.slice(1), ...extra } });
const sum = (a) => a.reduce((x, y) => x + y, 0);

let stack;
try {
  // ---- the worker alone: log-probs against `whet score`
  const text = 'The quick brown fox jumps over the lazy dog.';
  const ids = (await direct('POST', '/v1/tokenize', { text })).json.tokens;
  check(Array.isArray(ids) && ids.length > 4, 'the worker tokenizes', ids);
  writeFileSync(join(dir, 'score.jsonl'), JSON.stringify({ input_ids: ids }) + '\n');
  const score = JSON.parse(execFileSync(whet, ['score', '--model', model, '--adapter', join(dir, 'adapter-0'), '--data',
    join(dir, 'score.jsonl')]).toString());
  const s0 = await direct('POST', '/v1/training_sessions', {}, { 'x-whet-adapter': 'checkpoints/ftjob-s/final' });
  check(s0.status === 200 && s0.json.object === 'training_session' && s0.json.id, 'a session from a stored adapter', s0.text);
  const fb0 = await direct('POST', `/v1/training_sessions/${s0.json.id}/forward_backward`, { loss_fn: 'cross_entropy', data: [datum(ids)] });
  const lp0 = fb0.json?.logprobs?.[0] ?? [];
  check(fb0.status === 200 && lp0.length === ids.length - 1, 'forward_backward: a log-prob per target', fb0.text);
  check(Math.abs(-sum(lp0) / lp0.length - score.loss) < 1e-3, 'the session\'s log-probs equal whet score\'s',
    { session: -sum(lp0) / lp0.length, score: score.loss });
  check(Math.abs(fb0.json.loss + sum(lp0)) < 1e-3, 'cross_entropy with weights 1 is -sum(logprobs)', fb0.json.loss);
  const noSessions = await direct('POST', '/v1/training_sessions/nope/optim_step', {});
  check(noSessions.status === 404 && noSessions.json?.error?.code === 'not_found', 'an unknown session on the worker: 404', noSessions.text);

  // sessions share the worker with completions: a greedy answer is the same while sessions train, and
  // two sessions' forward_backward calls at once (one pass) give what each gives alone
  const ask = () => direct('POST', '/v1/completions', { model: 'whet-tiny', prompt: text, max_tokens: 24, temperature: 0 });
  const alone = (await ask()).json?.choices?.[0]?.text;
  const s1 = (await direct('POST', '/v1/training_sessions', { lora: { r: 2, seed: 9 } })).json.id;
  const call = (sid) => direct('POST', `/v1/training_sessions/${sid}/forward_backward`, { loss_fn: 'cross_entropy', data: [datum(ids)] });
  const lp1 = (await call(s1)).json.logprobs[0];
  const [busy, fa, fb1, fb2] = await Promise.all([ask(), call(s0.json.id), call(s1), call(s1)]);
  check(typeof alone === 'string' && busy.json?.choices?.[0]?.text === alone, 'a completion is unchanged by training beside it',
    { alone, busy: busy.json?.choices?.[0]?.text });
  const near = (x, y) => x.length === y.length && x.every((v, i) => Math.abs(v - y[i]) < 1e-4);
  check(near(fa.json.logprobs[0], lp0) && near(fb1.json.logprobs[0], lp1) && near(fb2.json.logprobs[0], lp1),
    'sessions\' calls at once equal each alone (no optim_step: the weights stay)');

  // a pass holds --max-train-tokens (data padded to the longest): a larger call is a 400, calls of two
  // sessions that do not fit together run one after the other
  const small = await startWorker('small', ['--max-train-tokens', '64']);
  const onSmall = to(small.at);
  const [t1, t2] = await Promise.all([onSmall('POST', '/v1/training_sessions', {}), onSmall('POST', '/v1/training_sessions', {})]);
  const forty = Array.from({ length: 41 }, (_, i) => (i * 37 + 5) % 500);
  const fbOn = (sid, data) => onSmall('POST', `/v1/training_sessions/${sid}/forward_backward`, { loss_fn: 'cross_entropy', data });
  const both = await Promise.all([fbOn(t1.json.id, [datum(forty)]), fbOn(t2.json.id, [datum(forty)])]);
  check(both.every((r) => r.status === 200 && r.json.logprobs[0].length === 40), 'two calls too large to share a pass both run',
    both.map((r) => r.text.slice(0, 100)));
  const tooLarge = await fbOn(t1.json.id, [datum(forty), datum(forty.slice(0, 3))]);
  check(tooLarge.status === 400 && tooLarge.json?.error?.param === 'data', 'a call larger than a pass: 400 naming data', tooLarge.text);
  small.proc.kill('SIGTERM');
  check((await small.gone) === 0, 'that worker exits 0');

  // an idle session expires
  const brief = await startWorker('brief', ['--session-idle', '1']);
  const shortLived = await to(brief.at)('POST', '/v1/training_sessions', {});
  await new Promise((r) => setTimeout(r, 3000));
  const expired = await to(brief.at)('POST', `/v1/training_sessions/${shortLived.json?.id}/optim_step`, {});
  check(shortLived.status === 200 && expired.status === 404, 'an idle session expires', expired.text);
  brief.proc.kill('SIGTERM');
  check((await brief.gone) === 0, 'that worker exits 0');

  // ---- behind the gateway
  stack = await startStack({ env: { WHET_SERVE_WORKERS: `whet-tiny=${workerAt}` } });
  const a = client(stack, 'alpha'), b = client(stack, 'beta');
  const ft = 'ft:whet-tiny:alpha::ftjob-s';
  const m = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: 'd.jsonl', value: `${SFT_LINE}\n` }]);
  const file = (await a('POST', '/v1/files', { body: m.body, headers: { 'content-type': m.type } })).json.id;
  const job = (await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: file } })).json.id;
  stack.psql(`UPDATE jobs SET status = 'succeeded', fine_tuned_model = '${ft}', final_object_prefix = 'checkpoints/ftjob-s/final'
              WHERE id = '${job}'`);
  await new Promise((r) => setTimeout(r, 100)); // psql blocked the loop: let pooled sockets settle

  const tok = await a('POST', '/v1/tokenize', { json: { model: 'whet-tiny', text } });
  check(tok.status === 200 && JSON.stringify(tok.json.tokens) === JSON.stringify(ids), 'tokenize through the gateway equals the worker\'s', tok.text);
  const chat = await a('POST', '/v1/tokenize', { json: { model: ft, messages: [{ role: 'user', content: 'hi' }] } });
  check(chat.status === 200 && chat.json.count === chat.json.tokens.length && chat.json.count > 2, 'tokenize renders messages', chat.text);
  check((await b('POST', '/v1/tokenize', { json: { model: ft, text } })).status === 404, 'another tenant\'s model cannot tokenize: 404');

  // a session from alpha's fine-tuned model: the same log-probs as the worker's session above
  const fromFt = await a('POST', '/v1/training_sessions', { json: { base_model: 'whet-tiny', init_checkpoint: ft } });
  check(fromFt.status === 200, 'a session from the tenant\'s fine-tuned model', fromFt.text);
  const fbFt = await a('POST', `/v1/training_sessions/${fromFt.json?.id}/forward_backward`, { json: { loss_fn: 'cross_entropy', data: [datum(ids)] } });
  const worst = Math.max(...(fbFt.json?.logprobs?.[0] ?? [NaN]).map((x, i) => Math.abs(x - lp0[i])));
  check(fbFt.status === 200 && worst < 1e-4, 'it starts from that adapter', { worst, text: fbFt.text.slice(0, 200) });
  const stolen = await b('POST', '/v1/training_sessions', { json: { base_model: 'whet-tiny', init_checkpoint: ft } });
  check(stolen.status === 404 && stolen.json?.error?.param === 'init_checkpoint', 'another tenant\'s model as init_checkpoint: 404', stolen.text);

  // a fresh adapter, trained: the loss falls
  const created = await a('POST', '/v1/training_sessions', { json: { base_model: 'whet-tiny', lora: { r: 4, alpha: 8, target_modules: 'all-linear', seed: 1 } },
    headers: { 'x-whet-session': 'hijack', 'x-whet-adapter': 'checkpoints/ftjob-s/final' } });
  const id = created.json?.id;
  check(created.status === 200 && id && id !== 'hijack', 'a session; the client cannot name the worker\'s headers', created.text);
  const fb = (d) => a('POST', `/v1/training_sessions/${id}/forward_backward`, { json: { loss_fn: 'cross_entropy', data: d } });
  const losses = [];
  for (let step = 0; step < 8; step++) {
    const r = await fb([datum(ids)]);
    losses.push(r.json?.loss);
    const o = await a('POST', `/v1/training_sessions/${id}/optim_step`, { json: { adam_params: { learning_rate: 1e-2 } } });
    if (step === 0) check(o.status === 200 && o.json.step === 1 && o.json.grad_norm > 0, 'optim_step', o.text);
  }
  check(losses.every(Number.isFinite) && losses[7] < 0.7 * losses[0], 'cross_entropy steps lower the loss', losses);
  // the importance-sampling loss at the current log-probs with advantages 1 is -(number of tokens)
  const cur = (await fb([datum(ids)])).json.logprobs[0];
  const is = await a('POST', `/v1/training_sessions/${id}/forward_backward`, { json: { loss_fn: 'importance_sampling',
    data: [datum(ids, { logprobs: cur, advantages: cur.map(() => 1) })] } });
  check(is.status === 200 && Math.abs(is.json.loss + cur.length) < 1e-2, 'importance_sampling at ratio 1', is.text.slice(0, 200));
  const sample = await a('POST', `/v1/training_sessions/${id}/sample`, { json: { prompt: ids.slice(0, 4), max_tokens: 5, n: 2, temperature: 1, seed: 3 } });
  const seqs = sample.json?.sequences ?? [];
  check(sample.status === 200 && seqs.length === 2 && seqs.every((s) => s.tokens.length === s.logprobs.length && s.tokens.length <= 5 &&
    typeof s.text === 'string'), 'sample: n sequences with tokens, text and log-probs', sample.text);
  const again = await a('POST', `/v1/training_sessions/${id}/sample`, { json: { prompt: ids.slice(0, 4), max_tokens: 5, n: 2, temperature: 1, seed: 3 } });
  check(JSON.stringify(again.json?.sequences) === JSON.stringify(seqs), 'a seeded sample repeats');
  const long = (await a('POST', `/v1/training_sessions/${id}/sample`, { json: { prompt: ids.slice(0, 4), max_tokens: 24, seed: 5 } })).json;
  const full = long.sequences[0].text, stop = full.slice(3, 5);
  const cut = await a('POST', `/v1/training_sessions/${id}/sample`, { json: { prompt: ids.slice(0, 4), max_tokens: 24, seed: 5, stop } });
  check(full.length >= 5 && cut.json?.sequences?.[0]?.text === full.slice(0, full.indexOf(stop)) &&
    cut.json.sequences[0].stop_reason === 'stop', 'sample stops at a stop string', { full, stop, cut: cut.text });
  const msgSample = await a('POST', `/v1/training_sessions/${id}/sample`, { json: { messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 } });
  check(msgSample.status === 200 && msgSample.json.usage.prompt_tokens === chat.json.count, 'sample from messages', msgSample.text);
  const saved = await a('POST', `/v1/training_sessions/${id}/save`, { json: {} });
  const savedModel = saved.json?.model ?? '';
  check(saved.status === 200 && /^sessions\/ts-[0-9A-Za-z]+\/save-[0-9A-Za-z]+$/.test(saved.json.checkpoint) &&
    saved.json.checkpoint.startsWith(`sessions/${id}/`) && saved.json.step === 8 &&
    savedModel === `ft:whet-tiny:alpha:${id}:${saved.json.checkpoint.split('/').pop()}`, 'save: a checkpoint and a model', saved.text);
  const objects = existsSync(join(dir, 'objects', saved.json?.checkpoint ?? '-')) ? readdirSync(join(dir, 'objects', saved.json.checkpoint)) : [];
  check(objects.includes('adapter_model.safetensors') && objects.includes('adapter_config.json'), 'the save is an adapter in the object store', objects);

  // the save is one of alpha's fine-tuned models: listed, retrieved, served (greedy, as the session samples),
  // not another tenant's
  const listedModels = (await a('GET', '/v1/models')).json?.data ?? [];
  check(listedModels.some((m) => m.id === savedModel && m.owned_by === 'alpha'), 'the save is listed in /v1/models', listedModels);
  const gotModel = await a('GET', `/v1/models/${encodeURIComponent(savedModel)}`);
  check(gotModel.status === 200 && gotModel.json.id === savedModel && gotModel.json.object === 'model', 'the save is retrieved', gotModel.text);
  const hi = [{ role: 'user', content: 'hi' }];
  const sessionSays = (await a('POST', `/v1/training_sessions/${id}/sample`, { json: { messages: hi, max_tokens: 6, temperature: 0 } })).json;
  const chatSays = await a('POST', '/v1/chat/completions', { json: { model: savedModel, messages: hi, max_tokens: 6, temperature: 0 } });
  check(chatSays.status === 200 && chatSays.json.model === savedModel &&
    chatSays.json.choices[0].message.content === sessionSays?.sequences?.[0]?.text,
    'chat/completions with the save answers as the session samples', { chat: chatSays.text, session: sessionSays });
  check((await b('GET', `/v1/models/${encodeURIComponent(savedModel)}`)).status === 404, 'another tenant: the save is a 404');
  check(!((await b('GET', '/v1/models')).json?.data ?? []).some((m) => m.id === savedModel), 'another tenant does not list it');
  const bChat = await b('POST', '/v1/chat/completions', { json: { model: savedModel, messages: hi, max_tokens: 2 } });
  check(bChat.status === 404 && bChat.json?.error?.code === 'model_not_found', 'another tenant cannot be served the save', bChat.text);
  check((await b('DELETE', `/v1/models/${encodeURIComponent(savedModel)}`)).status === 404, 'another tenant cannot delete it');
  // a save the worker refused is no model: a session alpha holds that the worker no longer has (as after
  // its restart) answers 404, and the model the gateway recorded for it goes
  stack.psql(`INSERT INTO training_sessions (id, tenant_id, base_model) SELECT 'ts-lost', id, 'whet-tiny' FROM tenants WHERE name = 'alpha'`);
  const lost = await a('POST', '/v1/training_sessions/ts-lost/save', { json: {} });
  let lostModels = '';
  for (let i = 0; i < 100 && (lostModels = stack.psql(`SELECT count(*) FROM session_models WHERE session_id = 'ts-lost'`)) !== '0'; i++)
    await new Promise((r) => setTimeout(r, 50));
  check(lost.status === 404 && lostModels === '0', 'a save the worker refused is no model', { lost: lost.text, lostModels });

  // past the tenant's monthly limit: no new session and no pass (429 insufficient_quota); a save still is
  const capped = await a('PUT', '/admin/v1/tenants/alpha/budget', { key: stack.adminToken(), json: { monthly_limit: 0 } });
  check(capped.json?.hard_cap_reached === true, 'alpha at a monthly limit of 0', capped.json);
  for (const [call, json] of [['forward_backward', { loss_fn: 'cross_entropy', data: [datum(ids)] }], ['optim_step', {}], ['sample', { prompt: ids.slice(0, 4) }]]) {
    const r = await a('POST', `/v1/training_sessions/${id}/${call}`, { json });
    check(r.status === 429 && r.json?.error?.code === 'insufficient_quota' && r.json.error.type === 'insufficient_quota',
      `${call} past the monthly limit: 429 insufficient_quota`, r.text);
  }
  const refusedCreate = await a('POST', '/v1/training_sessions', { json: { base_model: 'whet-tiny' } });
  check(refusedCreate.status === 429 && refusedCreate.json?.error?.code === 'insufficient_quota', 'a create past the monthly limit: 429', refusedCreate.text);
  check((await a('POST', `/v1/training_sessions/${id}/save`, { json: {} })).status === 200, 'a save past the monthly limit');
  await a('PUT', '/admin/v1/tenants/alpha/budget', { key: stack.adminToken(), json: { monthly_limit: null } });
  const resumed = await a('POST', `/v1/training_sessions/${id}/sample`, { json: { prompt: ids.slice(0, 4), max_tokens: 2 } });
  check(resumed.status === 200, 'the limit removed: passes again', resumed.text);

  // metering per token, as Tinker bills: a forward_backward's train tokens (priced as a job's trained
  // tokens), a sample's prefill and sample tokens (priced as inference's prompt and completion tokens), one
  // usage row per call, in /v1/usage, /v1/costs, the API key's spend (past its limit: 429) and the FOCUS
  // export; the worker's report never reaches the client, and another tenant sees none of it
  const book = await a('POST', '/admin/v1/prices', { key: stack.adminToken(), json: { effective_from: 0, currency: 'USD',
    prices: { trained_tokens_1m: 3000000, inference_prompt_tokens_1m: 1000000, inference_completion_tokens_1m: 2000000 } } });
  check(book.status === 200 || book.status === 201, 'a price book: a trained token 3, a prompt token 1, a completion token 2', book.text);
  const K = ids.length - 1, P = 4;
  const metered = await a('POST', '/v1/api_keys', { json: { scopes: ['jobs'], monthly_limit: 3 * K + 1 } });
  check(metered.status === 200, 'an API key whose limit allows a forward_backward and a sample', metered.text);
  const viaKey = (method, path, json) => a(method, path, { json, key: metered.json.key });
  const ms = (await viaKey('POST', '/v1/training_sessions', { base_model: 'whet-tiny', lora: { r: 2, seed: 4 } })).json?.id;
  const mfb = await viaKey('POST', `/v1/training_sessions/${ms}/forward_backward`, { loss_fn: 'cross_entropy', data: [datum(ids)] });
  check(mfb.status === 200 && mfb.json.usage?.train_tokens === K && !mfb.headers.has('x-whet-usage'),
    'forward_backward: its usage is its train tokens; the worker\'s report is not the client\'s', { text: mfb.text.slice(-80), headers: [...mfb.headers] });
  const mbad = await viaKey('POST', `/v1/training_sessions/${ms}/forward_backward`, { loss_fn: 'cross_entropy',
    data: [{ model_input: [1, 99999999], loss_fn_inputs: { target_tokens: [1, 2] } }] });
  check(mbad.status === 400, 'a forward_backward the worker refuses (400; not metered: one call below)', mbad.text);
  const mopt = await viaKey('POST', `/v1/training_sessions/${ms}/optim_step`, {});
  check(mopt.status === 200, 'optim_step under the limit (not metered)', mopt.text);
  const msample = await viaKey('POST', `/v1/training_sessions/${ms}/sample`, { prompt: ids.slice(0, P), max_tokens: 5, n: 2, seed: 7 });
  const M = sum((msample.json?.sequences ?? []).map((q) => q.tokens.length));
  check(msample.status === 200 && M > 0 && msample.json.usage?.prompt_tokens === P && msample.json.usage?.sample_tokens === M &&
    !msample.headers.has('x-whet-usage'), 'sample: its usage is its prefill and sample tokens', msample.text);
  let row;
  for (let i = 0; i < 100; i++) {
    row = (await a('GET', '/v1/usage')).json?.training_sessions?.find((x) => x.session_id === ms);
    if (row?.forward_backward_calls === 1 && row?.sample_calls === 1) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  const want = { session_train_tokens: 3 * K, session_prefill_tokens: P, session_sample_tokens: 2 * M };
  check(row?.object === 'usage.training_session' && row.base_model === 'whet-tiny' && row.forward_backward_calls === 1 &&
    row.sample_calls === 1 && row.train_tokens === K && row.prefill_tokens === P && row.sample_tokens === M &&
    JSON.stringify(row.cost.line_items, Object.keys(want).sort()) === JSON.stringify(want, Object.keys(want).sort()) &&
    Object.keys(row.cost.line_items).length === 3 && row.cost.amount === 3 * K + P + 2 * M && row.cost.currency === 'USD',
    '/v1/usage: the session\'s calls with their tokens, priced', { row, K, P, M });
  const allRows = (await a('GET', '/v1/usage')).json.training_sessions;
  const day = Math.floor(Date.now() / 1000 / 86400) * 86400;
  const costs = (await a('GET', `/v1/costs?start_time=${day}&group_by=line_item`)).json?.data?.[0]?.results ?? [];
  for (const item of Object.keys(want)) {
    const inCosts = costs.find((c) => c.line_item === item)?.amount?.value;
    const inUsage = sum(allRows.map((x) => x.cost.line_items[item] ?? 0));
    check(inCosts >= want[item] && Math.abs(inCosts - inUsage) < 1e-6, `/v1/costs: ${item}, as /v1/usage sums it`, { inCosts, inUsage, costs });
  }
  const tenantSpend = (await a('GET', '/v1/budget')).json?.spent;
  const everything = (await a('GET', '/v1/usage')).json;
  const usageCost = sum(['data', 'inference', 'training_sessions'].flatMap((k) => everything[k].map((x) => x.cost.amount)));
  check(Math.abs(tenantSpend - usageCost) < 1e-6 && sum(allRows.map((x) => x.cost.amount)) >= 3 * K + P + 2 * M,
    'the tenant\'s spend this month counts its sessions\' cost (as /v1/usage sums it)', { tenantSpend, usageCost });
  const keySpend = (await a('GET', '/v1/api_keys')).json.data.find((k) => k.id === metered.json.id)?.spent_this_month;
  check(keySpend === 3 * K + P + 2 * M, 'the key\'s spend this month is its session calls\' cost', { keySpend });
  for (const [call, json] of [['forward_backward', { loss_fn: 'cross_entropy', data: [datum(ids)] }], ['sample', { prompt: ids.slice(0, P) }]]) {
    const r = await viaKey('POST', `/v1/training_sessions/${ms}/${call}`, json);
    check(r.status === 429 && r.json?.error?.code === 'insufficient_quota', `${call} with a key past its monthly limit: 429`, r.text);
  }
  check((await a('POST', `/v1/training_sessions/${ms}/optim_step`, { json: {} })).status === 200,
    'the tenant\'s own token still calls the session');
  const month = new Date().toISOString().slice(0, 7);
  const focus = (await a('GET', `/admin/v1/billing/focus?period=${month}&format=csv`, { key: stack.adminToken() })).text.split('\n');
  const cols = focus[0].split(',');
  const focusRows = focus.slice(1).map((l) => Object.fromEntries(l.split(',').map((v, i) => [cols[i], v])));
  const trainLine = focusRows.find((f) => f.ResourceId === ms && f.SkuId === 'trained_tokens_1m');
  check(trainLine?.ResourceType === 'Training session' && Number(trainLine.ConsumedQuantity) === K &&
    Number(trainLine.BilledCost) === 3 * K && focusRows.some((f) => f.ResourceId === ms && f.SkuId === 'inference_completion_tokens_1m' &&
    Number(f.ConsumedQuantity) === M), 'the FOCUS export bills the session\'s tokens', focus.filter((l) => l.includes(ms)));
  const bUsage = (await b('GET', '/v1/usage')).json;
  const bCosts = (await b('GET', `/v1/costs?start_time=${day}&group_by=line_item`)).json?.data?.[0]?.results ?? [];
  check(Array.isArray(bUsage?.training_sessions) && bUsage.training_sessions.length === 0 &&
    !bCosts.some((c) => c.line_item.startsWith('session_')), 'another tenant sees none of it', { bUsage, bCosts });

  // isolation
  for (const call of ['forward_backward', 'optim_step', 'sample', 'save']) {
    const r = await b('POST', `/v1/training_sessions/${id}/${call}`, { json: call === 'forward_backward' ? { loss_fn: 'cross_entropy', data: [datum(ids)] } : {} });
    check(r.status === 404, `another tenant's ${call}: 404`, r.text);
  }
  check((await b('DELETE', `/v1/training_sessions/${id}`)).status === 404, 'another tenant\'s delete: 404');

  // bad input: 400 naming the field
  const bad = async (what, path, json, param) => {
    const r = await a('POST', path, { json });
    check(r.status === 400 && r.json?.error?.param === param, `${what}: 400 naming ${param}`, r.text);
  };
  const on = (call) => `/v1/training_sessions/${id}/${call}`;
  await bad('no base_model', '/v1/training_sessions', { lora: { r: 4 } }, 'base_model');
  await bad('lora not an object', '/v1/training_sessions', { base_model: 'whet-tiny', lora: 'big' }, 'lora');
  await bad('an unknown field', '/v1/training_sessions', { base_model: 'whet-tiny', rank: 4 }, 'rank');
  await bad('rank 0', '/v1/training_sessions', { base_model: 'whet-tiny', lora: { r: 0 } }, 'lora.r');
  await bad('an unknown module', '/v1/training_sessions', { base_model: 'whet-tiny', lora: { target_modules: ['qq_proj'] } }, 'lora.target_modules');
  await bad('no loss_fn', on('forward_backward'), { data: [datum(ids)] }, 'loss_fn');
  await bad('no data', on('forward_backward'), { loss_fn: 'cross_entropy', data: [] }, 'data');
  await bad('targets of another length', on('forward_backward'), { loss_fn: 'cross_entropy',
    data: [{ model_input: ids.slice(0, 3), loss_fn_inputs: { target_tokens: ids.slice(0, 2) } }] }, 'data[0].loss_fn_inputs.target_tokens');
  await bad('a token outside the vocabulary', on('forward_backward'), { loss_fn: 'cross_entropy',
    data: [{ model_input: [1, 99999999], loss_fn_inputs: { target_tokens: [1, 2] } }] }, 'data[0].model_input');
  await bad('ppo without advantages', on('forward_backward'), { loss_fn: 'ppo', data: [datum(ids, { logprobs: cur })] },
    'data[0].loss_fn_inputs.advantages');
  await bad('a negative learning rate', on('optim_step'), { adam_params: { learning_rate: -1 } }, 'adam_params.learning_rate');
  await bad('max_tokens 0', on('sample'), { prompt: ids, max_tokens: 0 }, 'max_tokens');
  await bad('more sequences than the worker\'s batch', on('sample'), { prompt: ids, n: 5 }, 'n');
  await bad('a prompt of no tokens', on('sample'), { prompt: [] }, 'prompt');
  await bad('tokenize without a model', '/v1/tokenize', { text }, 'model');
  const unknownBase = await a('POST', '/v1/training_sessions', { json: { base_model: 'no-such-base' } });
  check(unknownBase.status === 404 && unknownBase.json?.error?.param === 'base_model', 'an unknown base: 404', unknownBase.text);

  // the example client loop (GRPO, then a DPO loss written client-side) runs through the gateway
  const example = new URL('../../../deploy/examples/training_session.mjs', import.meta.url).pathname;
  const out = await new Promise((resolve) => {
    const p = spawn(process.execPath, [example, '1'], { env: { ...process.env, WHET_URL: stack.url, WHET_API_KEY: stack.keys.alpha } });
    let text = '';
    p.stdout.on('data', (d) => { text += d; });
    p.stderr.on('data', (d) => { text += d; });
    p.on('exit', (code) => resolve({ code, text }));
  });
  check(out.code === 0 && /grpo step 1: mean reward/.test(out.text) && /dpo step 3: loss/.test(out.text) &&
    /saved the adapter at sessions\//.test(out.text), 'the example client loop runs', out.text);

  // delete: the session is gone for its tenant too
  const del = await a('DELETE', `/v1/training_sessions/${id}`);
  check(del.status === 200 && del.json.deleted === true, 'delete', del.text);
  check((await a('POST', on('optim_step'), { json: {} })).status === 404, 'a deleted session: 404');
  const stateDir = join(dir, 'objects', 'sessions', id, 'state');
  const stateLeft = existsSync(stateDir) ? readdirSync(stateDir, { recursive: true, withFileTypes: true })
    .filter((e) => !e.isDirectory()).map((e) => e.name) : []; // (the file:// store leaves empty directories)
  check(stateLeft.length === 0, 'the deleted session\'s state is gone from the object store', stateLeft);
  check(readdirSync(join(dir, 'objects', saved.json.checkpoint)).includes('adapter_model.safetensors'), 'its save stays');
  // a save outlives its session; deleted, it is neither listed nor served
  const outlives = await a('POST', '/v1/chat/completions', { json: { model: savedModel, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 } });
  check(outlives.status === 200, 'the save is served after its session is deleted', outlives.text);
  const delModel = await a('DELETE', `/v1/models/${encodeURIComponent(savedModel)}`);
  check(delModel.status === 200 && delModel.json.id === savedModel && delModel.json.deleted === true, 'the save is deleted', delModel.text);
  check(!((await a('GET', '/v1/models')).json?.data ?? []).some((m) => m.id === savedModel), 'a deleted save is not listed');
  check((await a('GET', `/v1/models/${encodeURIComponent(savedModel)}`)).status === 404, 'a deleted save is a 404');
  const gone = await a('POST', '/v1/chat/completions', { json: { model: savedModel, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 } });
  check(gone.status === 404 && gone.json?.error?.code === 'model_not_found', 'a deleted save is not served', gone.text);
  check((await a('DELETE', `/v1/models/${encodeURIComponent(savedModel)}`)).status === 404, 'a second delete: 404');
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  await stopAll(stack, worker, dir, { check, failed });
}
process.exit(summary());
