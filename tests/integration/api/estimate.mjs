// estimate.mjs - POST /v1/fine_tuning/jobs with whet.dry_run against a real gateway and PostgreSQL: the
// create's own checks (the same 400s and 404s naming the field), nothing created (no job, event or
// Idempotency-Key), the plan (examples, steps, trained tokens) from the file and the resolved
// hyperparameters, the device type from whet.gpu_types or the fleet, the duration from the throughput
// finished jobs measured (else the stated fallback) and the cost at the prices in effect. With the base
// model's files in the store, SFT, DPO and reinforcement files are tokenized for real, the counts checked
// against transformers.js (@lenml/tokenizers) rendering the model's own Jinja chat template; a line the
// trainer would refuse is a 400 naming it.
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { promisify } from 'node:util';
import { WHET_BIN } from '../lib/gateway.mjs';
import { startStack, client, multipart, checker, SFT_LINE } from './harness.mjs';

const { TokenizerLoader } = createRequire(import.meta.url)('@lenml/tokenizers');
// The CLI runs without blocking the event loop: a keep-alive connection the gateway closes meanwhile
// (model init takes long under ASan) is then seen closed, not reused ("fetch failed").
const whet = (args, opts) => promisify(execFile)(WHET_BIN, args, opts);
const { check, summary, failed } = checker();
// A dry run tokenizes at most 4000 bytes here, so a larger file shows the extrapolation.
const stack = await startStack({ env: { WHET_ESTIMATE_TOKENIZE_MAX_BYTES: '4000' } });
const near = (x, y, eps = 1e-3) => typeof x === 'number' && Math.abs(x - y) <= eps * Math.max(1, Math.abs(y));
try {
  const a = client(stack, 'alpha');
  const op = (method, path, opts = {}) => a(method, path, { ...opts, key: stack.adminToken() });
  let r = await op('POST', '/admin/v1/prices', { json: { effective_from: 0, currency: 'USD',
    prices: { device_hour: { H100: 3.6, cpu: 0.36 }, trained_tokens_1m: 10, rollout_completion_tokens_1m: 20 } } });
  check(r.status === 200, 'prices', r.text);
  const content = `${SFT_LINE}\n`.repeat(10);
  const m = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: 'd.jsonl', value: content }]);
  r = await a('POST', '/v1/files', { body: m.body, headers: { 'content-type': m.type } });
  const file = r.json.id;
  const bytes = Buffer.byteLength(content);
  const counts = () => stack.psql('SELECT (SELECT count(*) FROM jobs) || \' \' || (SELECT count(*) FROM job_events) || \' \' || (SELECT count(*) FROM idempotency_keys)');
  const before = counts();
  const body = (whet = {}) => ({ model: 'whet-tiny', training_file: file, whet: { dry_run: true, ...whet },
    method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 2, batch_size: 3 } } } });

  r = await a('POST', '/v1/fine_tuning/jobs', { json: body(), headers: { 'idempotency-key': 'dry-1' } });
  const e = r.json;
  check(r.status === 200 && e.object === 'fine_tuning.job.estimate' && e.dry_run === true && e.model === 'whet-tiny' &&
        e.training_file === file, 'a dry run answers an estimate', e);
  check(e.training_examples === 10 && e.n_epochs === 2 && e.batch_size === 3 && e.steps === 8, 'steps: 2 epochs of ceil(10 / 3)', e);
  const tokens = bytes / 4 * 2;
  check(Math.abs(e.trained_tokens - tokens) <= 1 && e.trained_tokens_source === 'file_bytes', 'tokens: a quarter of the bytes an epoch, stated', e);
  check(/models\/whet-tiny\/tokenizer\.json/.test(e.tokenization?.error), 'a model without its files in the store: why nothing was counted', e.tokenization);
  check(e.device_type === 'cpu' && e.device_type_source === 'default' && e.device_count === 1, 'no fleet: cpu', e);
  check(e.throughput_source === 'fallback_1000_tokens_per_s' && e.expected_duration_s === Math.ceil(tokens / 1000), 'no finished job: the fallback throughput', e);
  check(near(e.cost.amount, tokens / 1000 / 3600 * 0.36 + tokens / 1e6 * 10, 1e-3) && e.cost.currency === 'USD', 'cost at the prices in effect', e.cost);
  check(counts() === before, 'nothing created: no job, no event, no Idempotency-Key', [before, counts()]);

  // The create's own checks, with the field named.
  for (const [b, status, param] of [
    [{ ...body(), model: 'nope' }, 404, 'model'],
    [{ ...body(), training_file: 'file-nope' }, 404, 'training_file'],
    [{ ...body(), method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 0 } } } }, 400, 'method.supervised.hyperparameters.n_epochs'],
    [{ ...body(), whet: { dry_run: 'yes' } }, 400, 'whet.dry_run'],
    [{ ...body(), whet: { dry_run: true, priority: 1000 } }, 400, 'whet.priority'],
  ]) {
    r = await a('POST', '/v1/fine_tuning/jobs', { json: b });
    check(r.status === status && r.json?.error?.param === param, `dry run refused like a create: ${param}`, r.json);
  }
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { ...body(), whet: { dry_run: false } } });
  check(r.status === 200 && r.json.object === 'fine_tuning.job', 'dry_run false: a real create', r.json?.object);
  const real = r.json.id;

  // Learned throughput and tokens: the real job succeeded with 100 tokens a step, 2000 tokens/s on H100.
  stack.psql(`UPDATE jobs SET status = 'succeeded' WHERE id = '${real}';
              INSERT INTO job_progress (job_id, tenant_id, attempt, last_step, total_steps, trained_tokens)
              SELECT id, tenant_id, 1, 8, 8, 800 FROM jobs WHERE id = '${real}';
              INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens,
                                         job_created_at)
              SELECT tenant_id, id, 1, 0, 'H100', 0.4, 800, created_at FROM jobs WHERE id = '${real}';
              INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms)
              VALUES ('n1', 'dc', 'p', '[]', 'H100', 8, 1000, 1024, 10000);
              INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, device_type, started_at, ended_at, outcome)
              SELECT id, 1, tenant_id, 'n1', 'H100', 1000, 1012.5, 'succeeded' FROM jobs WHERE id = '${real}';
              UPDATE jobs SET finished_at = whet_now() WHERE id = '${real}';
              SELECT whet_throughput_fold(100) -- the scheduler's maintenance does (migration 0060)`);
  r = await a('GET', `/v1/fine_tuning/jobs/${real}`);
  const actual = r.json.whet?.estimate?.actual;
  check(r.json.whet.estimate.object === 'fine_tuning.job.estimate' && r.json.whet.estimate.steps === 8, 'the job keeps its estimate', r.json.whet);
  check(actual && actual.trained_tokens === 800 && actual.duration_s === 12.5 && near(actual.cost, 0.4 / 3600 * 3.6 + 800 / 1e6 * 10, 1e-6),
        'a finished job compares its estimate with the actual', actual);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: body() });
  check(r.json.device_type === 'H100' && r.json.device_type_source === 'fleet', 'the fleet\'s device type', r.json);
  check(r.json.trained_tokens === 800 && r.json.trained_tokens_source === 'previous_job', 'tokens from the last job on this file', r.json);
  check(r.json.tokens_per_device_s === 2000 && r.json.throughput_source === 'model_device_method' && r.json.expected_duration_s === 1,
        'throughput measured by finished jobs', r.json);
  check(near(r.json.cost.line_items['device_hours:H100'], 0.4 / 3600 * 3.6, 1e-2) && near(r.json.cost.line_items.trained_tokens, 0.008),
        'cost line items', r.json.cost);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { ...body({ gpu_types: ['A100'] }),
    method: { type: 'dpo', dpo: { hyperparameters: { n_epochs: 1, batch_size: 5 } } } } });
  check(r.status === 400 && r.json?.error?.param === 'training_file', 'a dpo dry run on an sft file: refused as a create', r.json);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: body({ gpu_types: ['A100'] }) });
  check(r.json.device_type === 'A100' && r.json.device_type_source === 'whet.gpu_types' && r.json.throughput_source === 'fallback_1000_tokens_per_s',
        'whet.gpu_types chooses the device; nothing measured on it yet', r.json);

  // A base model with its files in the store: the dry run tokenizes the file with its tokenizer and chat
  // template (tests/e2e/console checks the count against a real job's trained tokens).
  const modelDir = path.join(stack.dir, 'tiny');
  const cli = { env: { ...process.env, WHET_DATABASE_URL: stack.dbUrl, WHET_OBJECT_STORE: `file://${stack.objects}` } };
  await whet(['model', 'init', '--preset', 'tiny', '--out', modelDir], cli);
  await whet(['model', 'register', 'whet-real', modelDir], cli);
  const real_ = (file, whet = {}) => a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-real', training_file: file,
    whet: { dry_run: true, ...whet }, method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 2, batch_size: 3 } } } } });
  r = await real_(file);
  const t = r.json.tokenization;
  check(r.status === 200 && r.json.trained_tokens_source === 'tokenized' && t?.examples === 10 && t.tokens > 10 &&
        t.tokens % 10 === 0 && r.json.trained_tokens === 2 * t.tokens && t.max_seq_len === 512 && t.bytes_tokenized === bytes,
        'tokenized: ten equal examples, two epochs of their tokens', r.json);
  check(t?.tokenizer === 'loaded', 'the first dry run on a model loads its tokenizer', t);
  const cut = t.tokens / 10 - 2; // two tokens short of each example
  r = await real_(file, { max_seq_len: cut });
  check(r.json.tokenization?.truncated_examples === 10 && r.json.tokenization.truncated_tokens === 20 &&
        r.json.tokenization.tokens === 10 * cut && r.json.trained_tokens === 20 * cut,
        'cut at whet.max_seq_len as the trainer cuts', r.json.tokenization);
  // A create without dry_run carries the count the dry run kept for this file, model and max_seq_len.
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-real', training_file: file, whet: { max_seq_len: cut },
    method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 2, batch_size: 3 } } } } });
  check(r.status === 200 && r.json.whet?.estimate?.trained_tokens === 20 * cut && r.json.whet.estimate.trained_tokens_source === 'tokenized',
        'the create keeps the dry run\'s count', r.json.whet?.estimate);
  // Past the cap the rest is extrapolated from the part read: 200 equal lines, ~4000 bytes of them read.
  const bigContent = `${SFT_LINE}\n`.repeat(200);
  const bm = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: 'big.jsonl', value: bigContent }]);
  r = await a('POST', '/v1/files', { body: bm.body, headers: { 'content-type': bm.type } });
  r = await real_(r.json.id);
  const bt = r.json.tokenization;
  check(r.json.trained_tokens_source === 'tokenized_prefix' && bt.bytes_tokenized < Buffer.byteLength(bigContent) &&
        bt.examples === 200 && Math.abs(bt.tokens - 20 * t.tokens) <= 0.02 * 20 * t.tokens,
        'a file past the cap: extrapolated from the part read, within 2%', bt);

  // DPO and reinforcement: the counts transformers.js makes of the same conversations.
  const tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(path.join(modelDir, 'tokenizer.json'), 'utf8')),
    tokenizerConfig: JSON.parse(fs.readFileSync(path.join(modelDir, 'tokenizer_config.json'), 'utf8')) });
  const ntok = (messages, add_generation_prompt = false) =>
    tok.encode(tok.apply_chat_template(messages, { tokenize: false, add_generation_prompt }), { add_special_tokens: false }).length;
  const upload = async (name, lines) => {
    const u = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: name, value: lines.map((l) => JSON.stringify(l)).join('\n') + '\n' }]);
    const res = await a('POST', '/v1/files', { body: u.body, headers: { 'content-type': u.type } });
    check(res.status === 200, `upload ${name}`, res.json);
    return res.json.id;
  };
  const dry = (file, method, whet = {}) => a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-real', training_file: file,
    whet: { dry_run: true, ...whet }, method } });
  const say = (role, content) => ({ role, content });
  const pairs = [
    [[say('user', 'hi')], 'hello', 'go away'],
    [[say('system', 'Be brief.'), say('user', 'What is the capital of France?')], 'Paris.',
     'I think it might be Lyon, or perhaps Marseille; it is hard to say without looking it up.'],
    [[say('user', 'count to three'), say('assistant', 'one two'), say('user', 'all of it')], 'one two three', 'no'],
  ];
  const sides = pairs.map(([prompt, chosen, rejected]) => [ntok([...prompt, say('assistant', chosen)]), ntok([...prompt, say('assistant', rejected)])]);
  const dpoTokens = sides.reduce((sum, [c, rj]) => sum + c + rj, 0);
  const dpoFile = await upload('dpo.jsonl', pairs.map(([prompt, chosen, rejected]) => ({ input: { messages: prompt },
    preferred_output: [say('assistant', chosen)], non_preferred_output: [say('assistant', rejected)] })));
  const dpo = { type: 'dpo', dpo: { hyperparameters: { n_epochs: 2, batch_size: 2 } } };
  r = await dry(dpoFile, dpo);
  let k = r.json.tokenization;
  check(r.status === 200 && r.json.trained_tokens_source === 'tokenized' && k?.examples === 3 && k.tokens === dpoTokens &&
        r.json.steps === 4 && r.json.trained_tokens === 2 * dpoTokens,
        `dpo: prompt + chosen and prompt + rejected of each pair, ${dpoTokens} tokens an epoch, as transformers.js counts them`, [r.json, sides]);
  check(k?.tokenizer === 'cached', 'a later dry run on the model: its tokenizer kept, not read again', k);
  check(near(r.json.cost.amount, r.json.trained_tokens / 1000 / 3600 * 0.36 + r.json.trained_tokens / 1e6 * 10, 1e-3) &&
        r.json.rollout_tokens === undefined, 'dpo cost: device time and trained tokens', r.json.cost);
  // Cut as the trainer cuts a pair (dpo_data.h): a side within half of max_seq_len kept whole, the other the rest.
  const L = Math.max(...sides.map(([c, rj]) => c + rj)) - 4;
  const cutPair = ([c, rj]) => {
    if (c + rj <= L) return c + rj;
    const half = Math.floor(L / 2), kc = c <= half ? c : rj <= half ? L - rj : half;
    return kc + Math.min(L - kc, rj);
  };
  r = await dry(dpoFile, dpo, { max_seq_len: L });
  k = r.json.tokenization;
  check(k?.tokens === sides.reduce((sum, s) => sum + cutPair(s), 0) && k.truncated_examples === sides.filter(([c, rj]) => c + rj > L).length &&
        k.truncated_tokens === dpoTokens - k.tokens && k.max_seq_len === L, `dpo: pairs cut at whet.max_seq_len ${L}`, k);
  // The create carries the count the dry run kept; its result compares it with the actual.
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-real', training_file: dpoFile, method: dpo } });
  const dpoJob = r.json.id;
  check(r.status === 200 && r.json.whet?.estimate?.trained_tokens === 2 * dpoTokens && r.json.whet.estimate.trained_tokens_source === 'tokenized',
        'a dpo create carries the dry run\'s count', r.json.whet?.estimate);

  const prompts = [[say('user', '2+2?')], [say('system', 'Answer with a number.'), say('user', 'What is 6 times 7?')],
    [say('user', 'Spell out every number from one to twenty, separated by commas, then say which of them are prime.')]];
  const promptTokens = prompts.map((m) => ntok(m, true));
  const rftFile = await upload('rft.jsonl', prompts.map((messages, i) => ({ messages, answer: String(i) })));
  const grader = { type: 'string_check', name: 'exact', input: '{{sample.output_text}}', reference: '{{item.answer}}', operation: 'eq' };
  const rft = { type: 'reinforcement', reinforcement: { grader, hyperparameters: { n_epochs: 1, batch_size: 2 } } };
  r = await dry(rftFile, rft, { group_size: 4, max_tokens: 16 });
  k = r.json.tokenization;
  const sumPrompts = promptTokens.reduce((x, y) => x + y, 0);
  check(r.status === 200 && r.json.trained_tokens_source === 'tokenized' && k?.examples === 3 && k.prompt_tokens === sumPrompts &&
        k.prompts_too_long === 0 && k.max_prompt_len === 512, `rft: ${sumPrompts} prompt tokens, as transformers.js counts them`, [r.json, promptTokens]);
  check(r.json.steps === 2 && r.json.rollout_tokens === 3 * 4 * 16 && r.json.rollout_tokens_upper_bound === true &&
        r.json.rollout?.n === 4 && r.json.rollout.max_tokens === 16,
        'rft: rollout tokens at most prompts x group size x max_tokens, stated as an upper bound', r.json);
  check(r.json.trained_tokens === 4 * (sumPrompts + 3 * 16) && r.json.trained_tokens_upper_bound === true,
        'rft: trained tokens at most every sequence (prompt + max_tokens) of every group', r.json);
  check(near(r.json.cost.line_items.rollout_tokens, 192 / 1e6 * 20, 1e-3) &&
        near(r.json.cost.amount, r.json.trained_tokens / 1000 / 3600 * 0.36 + r.json.trained_tokens / 1e6 * 10 + 192 / 1e6 * 20, 1e-3),
        'rft cost: the rollout tokens at the price book\'s rollout line', r.json.cost);
  // A prompt longer than max_seq_len - max_tokens is left out, as the trainer leaves it out.
  r = await dry(rftFile, rft, { group_size: 4, max_tokens: 16, max_seq_len: 16 + promptTokens[2] - 1 });
  k = r.json.tokenization;
  check(k?.examples === 2 && k.prompts_too_long === 1 && k.prompt_tokens === promptTokens[0] + promptTokens[1] &&
        r.json.rollout_tokens === 2 * 4 * 16, 'rft: a prompt past max_seq_len - max_tokens left out', r.json);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-real', training_file: rftFile, method: rft, whet: { group_size: 4, max_tokens: 16 } } });
  const rftJob = r.json.id;
  check(r.status === 200 && r.json.whet?.estimate?.rollout_tokens === 192 && r.json.whet.estimate.trained_tokens_source === 'tokenized',
        'an rft create carries the dry run\'s count', r.json.whet?.estimate);
  stack.psql(`UPDATE jobs SET status = 'succeeded', finished_at = whet_now() WHERE id IN ('${dpoJob}', '${rftJob}');
              INSERT INTO job_progress (job_id, tenant_id, attempt, last_step, total_steps, trained_tokens)
              SELECT id, tenant_id, 1, 4, 4, 900 FROM jobs WHERE id IN ('${dpoJob}', '${rftJob}');
              INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens, rollout_tokens,
                                         job_created_at)
              SELECT tenant_id, id, 1, 0, 'cpu', 2, 900, 150, created_at FROM jobs WHERE id = '${rftJob}'`);
  for (const id of [dpoJob, rftJob]) {
    r = await a('GET', `/v1/fine_tuning/jobs/${id}`);
    const act = r.json.whet?.estimate?.actual;
    check(act?.trained_tokens === 900 && act.rollout_tokens === (id === rftJob ? 150 : undefined),
          `${r.json.method?.type}: the finished job compares its estimate with the actual`, r.json.whet?.estimate);
  }

  // Dry runs at once share the kept tokenizer (the gateway's workers count in parallel) and count alike.
  const many = await Promise.all([...Array(6)].map((_, i) => (i % 2 ? dry(dpoFile, dpo) : dry(rftFile, rft, { group_size: 4, max_tokens: 16 }))));
  check(many.every((x, i) => x.status === 200 && x.json.tokenization?.tokenizer === 'cached' &&
                   (i % 2 ? x.json.tokenization.tokens === dpoTokens : x.json.tokenization.prompt_tokens === sumPrompts)),
        'six dry runs at once: the same counts, one tokenizer', many.map((x) => x.json?.tokenization));
  // The gateway keeps the tokenizers of four models, the least recently used dropped.
  for (const name of ['whet-k1', 'whet-k2', 'whet-k3', 'whet-k4']) await whet(['model', 'register', name, modelDir], cli);
  const onModel = (model) => a('POST', '/v1/fine_tuning/jobs', { json: { model, training_file: dpoFile, whet: { dry_run: true }, method: dpo } });
  const kept = [];
  for (const model of ['whet-k1', 'whet-k2', 'whet-k3', 'whet-k4', 'whet-real', 'whet-k4', 'whet-k1']) {
    r = await onModel(model);
    kept.push(r.json.tokenization?.tokenizer);
  }
  check(kept.join() === 'loaded,loaded,loaded,loaded,loaded,cached,loaded',
        'four models kept: whet-real dropped by the fourth new one, whet-k1 by whet-real', kept);

  // Lines the trainer would refuse (which the upload's checks let through): a 400 naming the line.
  const badDpo = await upload('bad_dpo.jsonl', [
    { input: { messages: [say('user', 'hi')] }, preferred_output: [say('assistant', 'a')], non_preferred_output: [say('assistant', 'b')] },
    { input: { messages: [say('user', 'hi')], tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }] },
      preferred_output: [say('assistant', 'a')], non_preferred_output: [say('assistant', 'b')] }]);
  r = await dry(badDpo, dpo);
  check(r.status === 400 && r.json?.error?.param === 'training_file' && /line 2: input\.tools/.test(r.json.error.message),
        'dpo: a line the trainer refuses is a 400 with its line number', r.json);
  const badRft = await upload('bad_rft.jsonl', [{ messages: [say('user', 'a')] }, { messages: [say('user', 'b')] },
    { messages: [say('user', 'c'), { role: 'assistant', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: '1' }, say('user', 'd')] }]);
  r = await dry(badRft, rft);
  check(r.status === 400 && r.json?.error?.param === 'training_file' && /line 3: messages\[1\]/.test(r.json.error.message),
        'rft: a line the trainer refuses is a 400 with its line number', r.json);
  fs.rmSync(modelDir, { recursive: true, force: true });

  // Sizing as the scheduler sizes: a 70B model's LoRA job on a pool of 80 GiB A100s takes a gang of several,
  // which the duration divides the device time by; whet-tiny takes one device.
  stack.psql(`INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
              VALUES ('big-70b', 'llama', 70000000000, 'models/big-70b', '00', '{}');
              INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms)
              VALUES ('n2', 'dc', 'a100', '[{"type": "A100", "memory_mib": 81920, "index": 0}]', 'A100', 8, 1000, 1024, 10000)`);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { ...body({ gpu_types: ['A100'] }), model: 'big-70b' } });
  const big = r.json;
  check(r.status === 200 && big.device_count > 1 && big.device_count <= 8 && big.sizing?.fits === true &&
        big.device_type === 'A100' && big.device_type_source === 'sizing' && big.sizing.device_bytes <= 0.9 * 81920 * 2 ** 20,
        'a 70B model: a gang of A100s, each within 90% of its memory', big);
  check(big.expected_duration_s === Math.ceil(big.trained_tokens / big.tokens_per_device_s / big.device_count),
        'the duration is the device time over the gang', big);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { ...body({ gpu_types: ['A100'], max_gpus: 1 }), model: 'big-70b' } });
  check(r.json.device_count === big.device_count && r.json.sizing?.fits === false,
        'whet.max_gpus 1: the gang it needs, and that it would not fit (the scheduler keeps it waiting)', r.json);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: body({ gpu_types: ['A100'] }) });
  check(r.json.device_count === 1 && r.json.device_type === 'A100', 'whet-tiny: one device', r.json);

  // The pools estimates read are kept as nodes change (migration 0037): the same as grouping the fleet now.
  const fleetNow = `SELECT coalesce(jsonb_agg(jsonb_build_object('dc', dc, 'device_type', device_type, 'device_mib', mib,
      'devices', devices, 'nodes', nodes) ORDER BY dc, device_type, mib), '[]') FROM (SELECT dc, device_type,
      coalesce((devices -> 0 ->> 'memory_mib')::int, 0) AS mib, sum(gpus) AS devices, count(*) AS nodes FROM nodes
      WHERE state = 'ready'
      GROUP BY 1, 2, 3) p`;
  const poolsKept = () => stack.psql(`SELECT whet_sizing_pools() = (${fleetNow})`);
  check(poolsKept() === 't', 'the kept pools: as the fleet after the inserts', stack.psql('SELECT whet_sizing_pools()'));
  stack.psql(`INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms)
              VALUES ('n3', 'dc2', 'a100', '[{"type": "A100", "memory_mib": 40960, "index": 0}]', 'A100', 4, 1000, 1024, 10000);
              UPDATE nodes SET last_heartbeat = last_heartbeat + 1`);
  check(poolsKept() === 't', 'a new pool; a heartbeat changes nothing', stack.psql('SELECT whet_sizing_pools()'));
  stack.psql(`UPDATE nodes SET state = 'lost' WHERE id = 'n1'; UPDATE nodes SET gpus = 2 WHERE id = 'n2';
              UPDATE nodes SET dc = 'dc', devices = '[{"type": "A100", "memory_mib": 81920, "index": 0}]' WHERE id = 'n3'`);
  check(poolsKept() === 't', 'a node lost, one with fewer devices, one moved to another pool', stack.psql('SELECT whet_sizing_pools()'));
  stack.psql(`UPDATE nodes SET state = 'ready' WHERE id = 'n1'; DELETE FROM nodes WHERE id = 'n3'`);
  check(poolsKept() === 't', 'a node back, one deleted', stack.psql('SELECT whet_sizing_pools()'));

  // The whole estimate, key for key and number for number (the API's bytes: the gateway keeps the database's
  // key order and rounding), with every input in play: a kept count (or the previous job's tokens a step), the
  // sizing's device, this model's throughput on it by another method only, and a newer price book.
  stack.psql(`INSERT INTO price_books (version, effective_from, currency) VALUES (2, 1, 'EUR');
              INSERT INTO prices (version, sku, device_type, unit_price) VALUES (2, 'device_hour', 'A100', 2.5),
                (2, 'device_hour', '', 9), (2, 'trained_tokens_1m', '', 7), (2, 'rollout_completion_tokens_1m', '', 3);
              INSERT INTO throughput_groups (base_model, device_type, method, tokens, seconds, jobs)
                VALUES ('whet-tiny', 'A100', 'dpo', 3000, 2, 1);
              INSERT INTO file_token_counts (file_id, tenant_id, base_model, max_seq_len, counted)
                SELECT id, tenant_id, 'whet-tiny', 300, '{"examples": 9, "tokens": 1234, "source": "tokenized", "max_seq_len": 300}'
                FROM files WHERE id = '${file}'`);
  const exact = { model: 'whet-tiny', training_file: file, whet: { gpu_types: ['A100'], max_seq_len: 300 },
    method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 2, batch_size: 3 } } } };
  r = await a('POST', '/v1/fine_tuning/jobs', { json: exact });
  const sizing = r.json?.whet?.estimate?.sizing;
  // 9 kept examples: 2 epochs of ceil(9 / 3) steps; 1234 tokens an epoch; 1500 tokens/s (whet-tiny's dpo on
  // A100); 2468 / 1500 device-seconds at 2.5 EUR an hour, 2468 tokens at 7 EUR a million.
  const fromCount = { cost: { amount: 0.018419, currency: 'EUR', line_items: { trained_tokens: 0.017276, 'device_hours:A100': 0.001143 } },
    steps: 6, method: 'supervised', object: 'fine_tuning.job.estimate', sizing, n_epochs: 2, batch_size: 3,
    device_type: 'A100', device_count: 1, tokenization: { source: 'tokenized', tokens: 1234, examples: 9, max_seq_len: 300 },
    trained_tokens: 2468, throughput_source: 'model_device', training_examples: 9, device_type_source: 'sizing',
    expected_duration_s: 2, tokens_per_device_s: 1500, trained_tokens_source: 'tokenized' };
  check(r.status === 200 && sizing?.device_type === 'A100' && JSON.stringify(r.json.whet.estimate) === JSON.stringify(fromCount),
        'a create\'s estimate from the kept count, exactly', [r.json?.whet?.estimate, fromCount]);
  // A dry run counts again (whet-tiny's files are not in the store, so it says why): the previous job's 100
  // tokens a step, 8 steps of the file's 10 lines.
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { ...exact, whet: { ...exact.whet, dry_run: true } } });
  const { model: _m, training_file: _f, dry_run: _d, budget: _b, within_budget: _w, tokenization: why, ...estimated } = r.json ?? {};
  const previous = { cost: { amount: 0.00597, currency: 'EUR', line_items: { trained_tokens: 0.0056, 'device_hours:A100': 0.00037 } },
    steps: 8, method: 'supervised', object: 'fine_tuning.job.estimate', sizing, n_epochs: 2, batch_size: 3,
    device_type: 'A100', device_count: 1, trained_tokens: 800, throughput_source: 'model_device', training_examples: 10,
    device_type_source: 'sizing', expected_duration_s: 1, tokens_per_device_s: 1500, trained_tokens_source: 'previous_job' };
  check(r.status === 200 && typeof why?.error === 'string' && JSON.stringify(estimated) === JSON.stringify(previous) &&
        r.text.includes('"tokens_per_device_s":1500.0,') && r.text.includes('"amount":0.00597,'),
        'a dry run\'s estimate from the previous job, exactly', [r.json, previous]);

  // A training file deleted between the create's lookup and its estimate (the estimate's statement held on a
  // lock of budgets meanwhile): a 404 naming the field, as the lookup's own, and no job.
  const late = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: 'late.jsonl', value: content }]);
  const lateFile = (await a('POST', '/v1/files', { body: late.body, headers: { 'content-type': late.type } })).json.id;
  const holder = spawn('psql', ['-qX', stack.dbUrl], { stdio: ['pipe', 'ignore', 'ignore'],
                                                       env: { ...process.env, PGAPPNAME: 'estimate-holder' } });
  holder.stdin.write('BEGIN; LOCK TABLE budgets IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(600);\n');
  const waitFor = async (what, sql) => {
    for (let i = 0; i < 300 && stack.psql(sql) !== '1'; i++) await new Promise((done) => setTimeout(done, 100));
    check(stack.psql(sql) === '1', what);
  };
  await waitFor('the lock is held', `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'estimate-holder'
                                     AND query LIKE '%pg_sleep%'`);
  const pending = a('POST', '/v1/fine_tuning/jobs', { json: { ...body(), training_file: lateFile, whet: {} } });
  await waitFor('the estimate waits for it', `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
                                              AND query LIKE '%whet_budget_status(%'`);
  stack.psql(`DELETE FROM files WHERE id = '${lateFile}'`);
  stack.psql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'estimate-holder'`);
  r = await pending;
  check(r.status === 404 && r.json?.error?.code === 'file_not_found' && r.json.error.param === 'training_file',
        'a training file gone before the estimate: a 404 naming it', r.text);
  check(stack.psql(`SELECT count(*) FROM jobs WHERE training_file = '${lateFile}'`) === '0', 'and no job', lateFile);
} catch (err) {
  check(false, 'exception', String(err.stack || err));
} finally {
  // a failed check must not leave the estimate's lock held (nothing left to end when it passed)
  stack.psql(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'estimate-holder'`);
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
}
process.exit(summary());
