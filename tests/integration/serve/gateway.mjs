// gateway.mjs - a tenant's models answered through the gateway: POST /v1/chat/completions and
// /v1/completions with the official OpenAI SDK at the gateway, which resolves `model` (the catalog base,
// the tenant's fine-tuned model, one of its checkpoints) and hands the request to the `whet serve` worker
// of the base (WHET_SERVE_WORKERS) with the adapter's object-store prefix. Greedy answers equal
// `whet sample` with the same adapter; a stream comes through as it is made; another tenant's model and
// an unknown one are 404s; a base without a worker is a 503, one whose worker is down a 502.
import OpenAI from 'openai';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startStack, client, multipart, checker, SFT_LINE } from '../api/harness.mjs';

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

const addressFile = join(dir, 'address');
const worker = spawn(whet, ['serve', '--model', model, '--name', 'whet-tiny', '--http', '127.0.0.1:0', '--address-file',
  addressFile, '--slots', '4', '--max-len', '128', '--object-store', store, '--cache-dir', join(dir, 'cache')],
  { stdio: ['ignore', 'inherit', 'inherit'] });
const workerGone = new Promise((resolve) => worker.on('exit', resolve));
for (let i = 0; i < 1200 && !(existsSync(addressFile) && readFileSync(addressFile, 'utf8').trim()); i++) await new Promise((r) => setTimeout(r, 50));
const workerAt = readFileSync(addressFile, 'utf8').trim();

let stack;
try {
  stack = await startStack({ env: { WHET_SERVE_WORKERS: `whet-tiny=${workerAt},dead-base=127.0.0.1:1` } });
  // alpha's succeeded job: its fine-tuned model and a checkpoint of it
  const a = client(stack, 'alpha');
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
                     ('dead-base', 'llama', 1000000, 'models/dead', '00', '{}')`);
  await new Promise((r) => setTimeout(r, 100)); // psql blocked the loop: let pooled sockets settle

  const alpha = new OpenAI({ apiKey: stack.keys.alpha, baseURL: `${stack.url}/v1`, maxRetries: 0 });
  const beta = new OpenAI({ apiKey: stack.keys.beta, baseURL: `${stack.url}/v1`, maxRetries: 0 });
  const ask = (c, name, extra = {}) => c.chat.completions.create({ model: name, messages: [{ role: 'user', content: 'Name a colour.' }],
    max_tokens: 10, temperature: 0, ...extra });
  for (const [name, key] of [['whet-tiny', 'base'], [ft, 0], [ckpt, 1]]) {
    const r = await ask(alpha, name);
    check(r.choices[0].message.content === want[key] && r.model === name, `${name} through the gateway equals whet sample`,
      { got: r.choices[0].message.content, want: want[key] });
  }
  const stream = await ask(alpha, ft, { stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null;
  for await (const c of stream) {
    for (const ch of c.choices) text += ch.delta?.content ?? '';
    if (c.usage) usage = c.usage;
  }
  check(text === want[0] && usage?.completion_tokens > 0, 'a stream comes through the gateway', { text, usage });
  const done = await alpha.completions.create({ model: ft, prompt: 'Once upon a time', max_tokens: 5, temperature: 0 });
  check(done.object === 'text_completion' && done.choices[0].text.length > 0, 'completions through the gateway', done.choices[0]);

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
  await refused('a base whose worker does not answer', alpha, 'dead-base', 502);
  const noModel = await a('POST', '/v1/chat/completions', { json: { messages: [] } });
  check(noModel.status === 400 && noModel.json?.error?.param === 'model', 'no model: 400 naming it', noModel.json);

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
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  if (stack) {
    const stopped = await stack.stop();
    check(stopped === null, 'the gateway exits cleanly', stopped);
    if (failed()) console.error(stack.logTail(60));
  }
  worker.kill('SIGTERM');
  check((await workerGone) === 0, 'the worker exits 0');
  rmSync(dir, { recursive: true, force: true });
}
process.exit(summary());
