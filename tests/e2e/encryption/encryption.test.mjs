// Encryption at rest end to end (README: encryption at rest): `whet up` with an operator keyring
// (WHET_DATA_KEY_FILE) and a file:// store, so the test can look at the bytes a leaked bucket would
// show. A tenant uploads a dataset and trains on it; the dataset and every checkpoint are sealed in the
// store (no plaintext in the objects) and come back byte for byte through the API. The model worker
// (`whet serve --training`, started here with the same keyring) gets the tenant's data key wrapped from
// the gateway: the fine-tuned model answers through the OpenAI SDK from its sealed adapter, a training
// session's save is sealed and loads again (a session started from it samples as the one saved), and a
// worker without the keyring answers a 503 that says so. The operator key is
// then rotated: a new key appended, the service restarted (a data key used is rewrapped on the way),
// `whet migrate` rewraps the others, the old key removed from the file and the service restarted
// again, and the old objects still read. Last, a byte flipped in a
// stored checkpoint file makes its download fail instead of serving other bytes.
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { until } from '../lib.mjs';
import { requireEnv, createDatabase, freePort, psql, WHET_BIN } from '../../integration/lib/gateway.mjs';

requireEnv();
const FIXTURES = process.env.WHET_FIXTURES;
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'whet-e2e-crypt-'));
fs.chmodSync(work, 0o755);
const keyFile = path.join(work, 'operator-keys');
const newKey = (id) => `${id} ${crypto.randomBytes(32).toString('hex')}\n`;
const firstKey = newKey('k1');
fs.writeFileSync(keyFile, firstKey, { mode: 0o600 });
const db = createDatabase();
const httpPort = await freePort(), grpcPort = await freePort(), servePort = await freePort();
// The worker is this test's (with --training): the gateway is pointed at it, whet up starts none.
const env = { ...process.env, WHET_DATABASE_URL: db.url, WHET_DATA_DIR: work, WHET_DATA_KEY_FILE: keyFile,
              WHET_SERVE_WORKERS: `whet-tiny=127.0.0.1:${servePort}`, WHET_SERVE_COLD_START_MS: '60000' };
const base = `http://127.0.0.1:${httpPort}`;
const objects = path.join(work, 'objects');
let up = null, log = '', worker = null, workerLog = '';

async function startUp() {
  log = '';
  up = spawn(WHET_BIN, ['up', '--data-dir', work, '--http', `127.0.0.1:${httpPort}`, '--grpc', `127.0.0.1:${grpcPort}`,
                        '--executors', '1', '--devices', 'sim:H100:1'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const keep = (d) => { log = (log + d).slice(-40000); };
  up.stdout.on('data', keep);
  up.stderr.on('data', keep);
  await until('whet up to be ready', () => log.includes('whet: ready'), 120000)
    .catch((e) => { console.error(log); throw e; });
}

async function stopUp() {
  const exited = new Promise((resolve) => up.on('exit', resolve));
  up.kill('SIGTERM');
  await exited;
}

// `whet serve` for whet up's bundled base, on the port the gateway knows, with `workerEnv` and a cache dir.
async function startWorker(workerEnv, cache) {
  workerLog = '';
  worker = spawn(WHET_BIN, ['serve', '--model', path.join(work, 'models', 'whet-tiny'), '--name', 'whet-tiny',
                            '--http', `127.0.0.1:${servePort}`, '--object-store', `file://${objects}`,
                            '--cache-dir', path.join(work, cache), '--training'],
                 { env: workerEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  const keep = (d) => { workerLog = (workerLog + d).slice(-20000); };
  worker.stdout.on('data', keep);
  worker.stderr.on('data', keep);
  await until('the model worker to listen', () => workerLog.includes('msg="serving"') || worker.exitCode !== null, 60000);
  assert.equal(worker.exitCode, null, workerLog);
}

async function stopWorker() {
  const exited = new Promise((resolve) => worker.on('exit', resolve));
  worker.kill('SIGTERM');
  await exited;
}

await startUp();
const whet = (...args) => execFileSync(WHET_BIN, [...args, '--data-dir', work], { env, encoding: 'utf8' });
const key = whet('tenant', 'create', 'sealed').trim();
const auth = { authorization: `Bearer ${key}` };
const api = async (method, p, body) => {
  const res = await fetch(base + p, { method, headers: { ...auth, ...(body ? { 'content-type': 'application/json' } : {}) },
                                      body: body ? JSON.stringify(body) : undefined });
  return res.json();
};
const get = async (p) => {
  const res = await fetch(base + p, { headers: auth });
  return { status: res.status, bytes: Buffer.from(await res.arrayBuffer()) };
};
const sha256 = (b) => crypto.createHash('sha256').update(b).digest('hex');

test.after(async () => {
  if (up && up.exitCode === null) up.kill('SIGKILL');
  if (worker && worker.exitCode === null) worker.kill('SIGKILL');
  db.drop();
  fs.rmSync(work, { recursive: true, force: true });
});

// Every stored object under `prefix` (relative paths).
function stored(prefix) {
  const out = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (!e.name.startsWith('.')) out.push(p);
    }
  };
  walk(path.join(objects, prefix));
  return out;
}

const text = fs.readFileSync(path.join(FIXTURES, 'sft', 'train.jsonl'));
let fileId, job, finalFiles, finalPrefix;

test('a dataset is sealed in the store and trained on', async () => {
  const form = new FormData();
  form.append('purpose', 'fine-tune');
  form.append('file', new Blob([text]), 'train.jsonl');
  const res = await fetch(`${base}/v1/files`, { method: 'POST', headers: auth, body: form });
  const file = await res.json();
  assert.equal(res.status, 200, JSON.stringify(file));
  fileId = file.id;
  const [raw] = stored('files').filter((p) => p.endsWith(fileId));
  const rawBytes = fs.readFileSync(raw);
  assert.equal(rawBytes.subarray(0, 8).toString(), 'WHETSEAL');
  assert.ok(!rawBytes.includes(text.subarray(0, 40)), 'the raw object holds plaintext');
  const content = await get(`/v1/files/${fileId}/content`);
  assert.equal(content.status, 200);
  assert.ok(content.bytes.equals(text), 'the content reads back as uploaded');

  const created = await api('POST', '/v1/fine_tuning/jobs', {
    model: 'whet-tiny', training_file: fileId,
    method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 5, batch_size: 8 } } },
    whet: { max_steps: 4, checkpoint_every_steps: 2 },
  });
  assert.ok(created.id, JSON.stringify(created));
  job = await until(`job ${created.id} to finish`, async () => {
    const j = await api('GET', `/v1/fine_tuning/jobs/${created.id}`);
    return ['succeeded', 'failed', 'cancelled'].includes(j.status) ? j : null;
  }, 400000, 500);
  if (job.status !== 'succeeded') console.error(log);
  assert.equal(job.status, 'succeeded', JSON.stringify(job.error));
});

test('checkpoints are sealed in the store and download as their plaintext', async () => {
  assert.ok(job, 'the job');
  const list = await api('GET', `/v1/fine_tuning/jobs/${job.id}/checkpoints/final/files`);
  finalFiles = list.data;
  assert.ok(finalFiles.some((f) => f.name === 'adapter_model.safetensors'), JSON.stringify(list));
  // Where the attempt that trained it wrote the final model (jobs/JOB/attempt-N/final).
  finalPrefix = psql(db.url, `SELECT final_object_prefix FROM jobs WHERE id = '${job.id}'`);
  for (const f of finalFiles) {
    const got = await get(`/v1/fine_tuning/jobs/${job.id}/checkpoints/final/files/${f.name}`);
    assert.equal(got.status, 200, f.name);
    assert.equal(got.bytes.length, f.bytes, f.name);
    assert.equal(sha256(got.bytes), f.sha256, `${f.name}: the manifest's checksum`);
    const raw = fs.readFileSync(path.join(objects, finalPrefix, f.name));
    assert.equal(raw.subarray(0, 8).toString(), 'WHETSEAL', f.name);
    assert.ok(raw.length > got.bytes.length && !raw.includes(got.bytes.subarray(0, Math.min(64, got.bytes.length))), f.name);
  }
  // safetensors: an 8-byte header length, then JSON naming LoRA tensors.
  const adapter = (await get(`/v1/fine_tuning/jobs/${job.id}/checkpoints/final/files/adapter_model.safetensors`)).bytes;
  const header = JSON.parse(adapter.subarray(8, 8 + Number(adapter.readBigUInt64LE(0))).toString());
  assert.ok(Object.keys(header).some((k) => k.includes('lora_A')), Object.keys(header).join(','));
  // Every object of the job (step checkpoints, manifests, results) is sealed.
  for (const p of stored(path.join('jobs', job.id)))
    assert.equal(fs.readFileSync(p).subarray(0, 8).toString(), 'WHETSEAL', p);
});

test('a fine-tuned model answers through the OpenAI SDK from its sealed adapter', async () => {
  assert.ok(finalFiles, 'the checkpoint files');
  await startWorker(env, 'serve-cache');
  const client = new OpenAI({ apiKey: key, baseURL: `${base}/v1` });
  const chat = await client.chat.completions.create({
    model: job.fine_tuned_model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 8, temperature: 0 });
  assert.equal(chat.object, 'chat.completion');
  assert.equal(typeof chat.choices[0].message.content, 'string');
  assert.ok(chat.usage.prompt_tokens > 0 && ['stop', 'length'].includes(chat.choices[0].finish_reason), JSON.stringify(chat));
  const stream = await client.chat.completions.create({
    model: job.fine_tuned_model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 8, temperature: 0, stream: true });
  let streamed = '';
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(streamed, chat.choices[0].message.content, 'streamed and whole answers agree (greedy)');
  // The worker opened the sealed adapter: its cached copy is the plaintext the manifest names.
  const cached = path.join(work, 'serve-cache', sha256(Buffer.from(finalPrefix)), 'adapter_model.safetensors');
  assert.equal(sha256(fs.readFileSync(cached)), finalFiles.find((f) => f.name === 'adapter_model.safetensors').sha256);
});

let savedAs;
test('a training session\'s save is sealed, and a session started from it samples as the one saved', async () => {
  assert.ok(worker, 'the model worker');
  const ids = (await api('POST', '/v1/tokenize', { model: 'whet-tiny', text: 'the quick brown fox jumps over the lazy dog' })).tokens;
  assert.ok(ids && ids.length > 4, 'tokens');
  const session = await api('POST', '/v1/training_sessions', { base_model: 'whet-tiny', lora: { r: 4, seed: 1 } });
  assert.ok(session.id, JSON.stringify(session));
  for (let step = 0; step < 3; step++) {
    const fb = await api('POST', `/v1/training_sessions/${session.id}/forward_backward`, { loss_fn: 'cross_entropy',
      data: [{ model_input: ids.slice(0, -1), loss_fn_inputs: { target_tokens: ids.slice(1) } }] });
    assert.ok(Number.isFinite(fb.loss), JSON.stringify(fb));
    await api('POST', `/v1/training_sessions/${session.id}/optim_step`, { adam_params: { learning_rate: 5e-2 } });
  }
  const saved = await api('POST', `/v1/training_sessions/${session.id}/save`, {});
  assert.ok(saved.checkpoint, JSON.stringify(saved));
  const files = stored(saved.checkpoint);
  assert.ok(files.some((p) => p.endsWith('adapter_model.safetensors')), files.join(','));
  for (const p of files) {
    const raw = fs.readFileSync(p);
    assert.equal(raw.subarray(0, 8).toString(), 'WHETSEAL', p);
    assert.ok(!raw.includes('lora_A'), `${p}: plaintext tensor names`);
  }
  // Named as a checkpoint of the tenant's job, the save is an init_checkpoint and a model like any other.
  savedAs = `${job.fine_tuned_model}:ckpt-step-999`;
  psql(db.url, `INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint, object_prefix)
                SELECT 'ftckpt-session-save', tenant_id, id, 999, '${savedAs}', '${saved.checkpoint}' FROM jobs WHERE id = '${job.id}'`);
  const resumed = await api('POST', '/v1/training_sessions', { base_model: 'whet-tiny', init_checkpoint: savedAs });
  assert.ok(resumed.id, JSON.stringify(resumed));
  const sample = (id) => api('POST', `/v1/training_sessions/${id}/sample`, { prompt: ids.slice(0, 3), max_tokens: 8, temperature: 0 });
  const [a, b] = [await sample(session.id), await sample(resumed.id)];
  assert.ok(a.sequences?.[0]?.tokens.length > 0, JSON.stringify(a));
  assert.deepEqual(b.sequences[0].tokens, a.sequences[0].tokens, 'greedy samples of the saved and the resumed session');
  const client = new OpenAI({ apiKey: key, baseURL: `${base}/v1` });
  const chat = await client.completions.create({ model: savedAs, prompt: 'the quick', max_tokens: 4, temperature: 0 });
  assert.ok(chat.usage.prompt_tokens > 0 && typeof chat.choices[0].text === 'string', JSON.stringify(chat));
});

test('a model worker without the operator keyring refuses a sealed adapter, saying why', async () => {
  assert.ok(savedAs, 'the saved checkpoint');
  await stopWorker();
  const keyless = { ...env };
  delete keyless.WHET_DATA_KEY_FILE;
  await startWorker(keyless, 'serve-cache-keyless');
  const res = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ model: job.fine_tuned_model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }) });
  const body = await res.json();
  assert.equal(res.status, 503, JSON.stringify(body));
  assert.match(body.error.message, /no operator keyring.*WHET_DATA_KEY_FILE/);
  const session = await api('POST', '/v1/training_sessions', { base_model: 'whet-tiny', init_checkpoint: savedAs });
  assert.match(session.error?.message ?? '', /no operator keyring/, JSON.stringify(session));
  // The base model needs no key.
  const base_ = await api('POST', '/v1/chat/completions', { model: 'whet-tiny', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
  assert.equal(base_.object, 'chat.completion', JSON.stringify(base_));
  await stopWorker();
});

test('rotating the operator key: rewrapped as used and by whet migrate, old objects still readable', async () => {
  assert.ok(finalFiles, 'the checkpoint files');
  // A second tenant with a sealed file, whose key nothing uses between the rotation and `whet migrate`.
  const otherKey = whet('tenant', 'create', 'other').trim();
  const otherText = Buffer.from('{"messages":[{"role":"user","content":"other tenant"}]}\n');
  const form = new FormData();
  form.append('purpose', 'user_data');
  form.append('file', new Blob([otherText]), 'other.jsonl');
  const otherFile = await (await fetch(`${base}/v1/files`, { method: 'POST', headers: { authorization: `Bearer ${otherKey}` }, body: form })).json();
  assert.ok(otherFile.id, JSON.stringify(otherFile));
  const wrappedUnder = () => psql(db.url, `SELECT string_agg(t.name || '=' || k.operator_key_id, ',' ORDER BY t.name)
                                           FROM tenant_data_keys k JOIN tenants t ON t.id = k.tenant_id`);
  assert.equal(wrappedUnder(), 'other=k1,sealed=k1');

  const second = newKey('k2');
  fs.appendFileSync(keyFile, second);
  await stopUp();
  await startUp();
  // The gateway unwraps the tenant's key with k1 and rewraps it under k2, the current key, on first use.
  const content = await get(`/v1/files/${fileId}/content`);
  assert.ok(content.status === 200 && content.bytes.equals(text), 'the dataset after the new key was added');
  assert.equal(wrappedUnder(), 'other=k1,sealed=k2');
  assert.match(whet('migrate'), /1 tenant data key rewrapped under operator key "k2"/);
  assert.equal(wrappedUnder(), 'other=k2,sealed=k2');

  fs.writeFileSync(keyFile, second); // the old key is gone
  await stopUp();
  await startUp();
  const again = await get(`/v1/files/${fileId}/content`);
  assert.ok(again.status === 200 && again.bytes.equals(text), 'the dataset after the old key was removed');
  const other = await fetch(`${base}/v1/files/${otherFile.id}/content`, { headers: { authorization: `Bearer ${otherKey}` } });
  assert.ok(Buffer.from(await other.arrayBuffer()).equals(otherText), 'the other tenant\'s file');
  for (const f of finalFiles) {
    const got = await get(`/v1/fine_tuning/jobs/${job.id}/checkpoints/final/files/${f.name}`);
    assert.equal(sha256(got.bytes), f.sha256, `${f.name} after the rotation`);
  }
});

test('a tampered object is refused, not served', async () => {
  assert.ok(finalFiles, 'the checkpoint files');
  const p = path.join(objects, finalPrefix, 'adapter_model.safetensors');
  const raw = fs.readFileSync(p);
  raw[100] ^= 1;
  fs.writeFileSync(p, raw);
  let got = null;
  try {
    got = await get(`/v1/fine_tuning/jobs/${job.id}/checkpoints/final/files/adapter_model.safetensors`);
  } catch { /* the connection was closed mid-body: refused */ }
  assert.ok(!got || got.status !== 200 || sha256(got.bytes) !== finalFiles.find((f) => f.name === 'adapter_model.safetensors').sha256);
  assert.ok(!got || got.status !== 200, `served ${got && got.bytes.length} bytes of a tampered object`);
  await until('the refusal in the log', () => log.includes('fails authentication'), 10000);
});
