// estimate.mjs - POST /v1/fine_tuning/jobs with whet.dry_run against a real gateway and PostgreSQL: the
// create's own checks (the same 400s and 404s naming the field), nothing created (no job, event or
// Idempotency-Key), the plan (examples, steps, trained tokens) from the file and the resolved
// hyperparameters, the device type from whet.gpu_types or the fleet, the duration from the throughput
// finished jobs measured (else the stated fallback) and the cost at the prices in effect.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { WHET_BIN } from '../lib/gateway.mjs';
import { startStack, client, multipart, checker, SFT_LINE } from './harness.mjs';

const { check, summary, failed } = checker();
// A dry run tokenizes at most 4000 bytes here, so a larger file shows the extrapolation.
const stack = await startStack({ env: { WHET_ESTIMATE_TOKENIZE_MAX_BYTES: '4000' } });
const near = (x, y, eps = 1e-3) => typeof x === 'number' && Math.abs(x - y) <= eps * Math.max(1, Math.abs(y));
try {
  const a = client(stack, 'alpha');
  const op = (method, path, opts = {}) => a(method, path, { ...opts, key: stack.adminToken() });
  let r = await op('POST', '/admin/v1/prices', { json: { effective_from: 0, currency: 'USD',
    prices: { device_hour: { H100: 3.6, cpu: 0.36 }, trained_tokens_1m: 10 } } });
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
  stack.psql(`UPDATE jobs SET status = 'succeeded', trained_tokens = 800, total_steps = 8 WHERE id = '${real}';
              INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens)
              SELECT tenant_id, id, 1, 0, 'H100', 0.4, 800 FROM jobs WHERE id = '${real}';
              INSERT INTO nodes (id, dc, pool, devices, device_type, gpus, cpu_milli, memory_mib, lease_ms)
              VALUES ('n1', 'dc', 'p', '[]', 'H100', 8, 1000, 1024, 10000);
              INSERT INTO job_attempts (job_id, attempt, tenant_id, node_id, device_type, started_at, ended_at, outcome)
              SELECT id, 1, tenant_id, 'n1', 'H100', 1000, 1012.5, 'succeeded' FROM jobs WHERE id = '${real}';
              UPDATE jobs SET finished_at = whet_now() WHERE id = '${real}'`);
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
  execFileSync(WHET_BIN, ['model', 'init', '--preset', 'tiny', '--out', modelDir], cli);
  execFileSync(WHET_BIN, ['model', 'register', 'whet-real', modelDir], cli);
  const real_ = (file, whet = {}) => a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-real', training_file: file,
    whet: { dry_run: true, ...whet }, method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 2, batch_size: 3 } } } } });
  r = await real_(file);
  const t = r.json.tokenization;
  check(r.status === 200 && r.json.trained_tokens_source === 'tokenized' && t?.examples === 10 && t.tokens > 10 &&
        t.tokens % 10 === 0 && r.json.trained_tokens === 2 * t.tokens && t.max_seq_len === 512 && t.bytes_tokenized === bytes,
        'tokenized: ten equal examples, two epochs of their tokens', r.json);
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
} catch (err) {
  check(false, 'exception', String(err.stack || err));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
}
process.exit(summary());
