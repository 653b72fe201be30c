// tenants.mjs - many tenants' fine-tuned models on one worker, through the gateway, at once: 16 adapters
// of 4 tenants (each tenant's own prompt) served by one `whet serve` with fewer KV slots and fewer
// cached adapters than requests (so requests queue and adapters are evicted and fetched again), whole
// and streamed together. Every answer equals `whet sample` of its own adapter and prompt alone: no
// tenant's prompt, adapter or output reaches another's answer. A tenant asking for another's model is
// a 404, and each tenant's usage rows hold exactly its own answers.
import OpenAI from 'openai';
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startStack, client, multipart, checker, SFT_LINE } from '../api/harness.mjs';
import { startWorker, stopAll, usageRows } from './worker.mjs';

const { check, summary, failed } = checker();
const whet = process.env.WHET_BIN;
const [makeAdapters, putDir] = process.argv.slice(2);
const TENANTS = ['t0', 't1', 't2', 't3'], PER_TENANT = 4, MAX_TOKENS = 12;
const dir = mkdtempSync(join(tmpdir(), 'whet-serve-tenants-'));
const model = join(dir, 'tiny');
execFileSync(whet, ['model', 'init', '--out', model, '--preset', 'tiny']);
execFileSync(makeAdapters, [model, join(dir, 'adapter-'), String(TENANTS.length * PER_TENANT)]);
const store = `file://${join(dir, 'objects')}`;
// adapter k belongs to tenant k / PER_TENANT, which asks its own question
const adapters = [...Array(TENANTS.length * PER_TENANT).keys()].map((k) => {
  const tenant = TENANTS[Math.floor(k / PER_TENANT)];
  execFileSync(putDir, [`jobs/ftjob-${k}/final`, join(dir, 'adapter-' + k)], { env: { ...process.env, WHET_OBJECT_STORE: store } });
  return { k, tenant, ft: `ft:whet-tiny:${tenant}::ftjob-${k}`, prompt: `Tenant ${tenant} asks: name colour number ${k}.` };
});
const run = promisify(execFile);
await Promise.all(adapters.map(async (a) => {
  a.want = (await run(whet, ['sample', '--model', model, '--adapter', join(dir, 'adapter-' + a.k), '--prompt', a.prompt,
    '--max-tokens', String(MAX_TOKENS), '--temperature', '0'])).stdout.replace(/\n$/, '');
}));
check(new Set(adapters.map((a) => a.want)).size > adapters.length / 2, 'the adapters answer differently (the test can tell them apart)',
  adapters.map((a) => a.want));

const worker = await startWorker(dir, model, 'whet-tiny', '--slots', '6', '--cache', '5', '--max-len', '128', '--object-store', store,
  '--cache-dir', join(dir, 'cache'));

let stack;
try {
  stack = await startStack({ tenants: TENANTS, env: { WHET_SERVE_WORKERS: `whet-tiny=${worker.at}` } });
  // each tenant's succeeded jobs, one per adapter
  for (const t of TENANTS) {
    const c = client(stack, t);
    const m = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: 'd.jsonl', value: `${SFT_LINE}\n` }]);
    const file = (await c('POST', '/v1/files', { body: m.body, headers: { 'content-type': m.type } })).json.id;
    for (const a of adapters.filter((x) => x.tenant === t)) {
      const job = (await c('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: file } })).json.id;
      stack.psql(`UPDATE jobs SET status = 'succeeded', fine_tuned_model = '${a.ft}', final_object_prefix = 'jobs/ftjob-${a.k}/final'
                  WHERE id = '${job}'`);
    }
  }
  await new Promise((r) => setTimeout(r, 100)); // psql blocked the loop: let pooled sockets settle
  const sdk = Object.fromEntries(TENANTS.map((t) => [t, new OpenAI({ apiKey: stack.keys[t], baseURL: `${stack.url}/v1`, maxRetries: 0 })]));

  // every adapter twice, whole and streamed, all at once
  const ask = async (a, stream) => {
    const r = await sdk[a.tenant].chat.completions.create({ model: a.ft, messages: [{ role: 'user', content: a.prompt }],
      max_tokens: MAX_TOKENS, temperature: 0, ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}) });
    if (!stream) return { text: r.choices[0].message.content, usage: r.usage, model: r.model };
    let text = '', usage = null, name = null;
    for await (const c of r) {
      for (const ch of c.choices) text += ch.delta?.content ?? '';
      if (c.usage) usage = c.usage;
      name = c.model;
    }
    return { text, usage, model: name };
  };
  const jobs = adapters.flatMap((a) => [false, true].map((stream) => ({ a, stream })));
  const answers = await Promise.all(jobs.map(({ a, stream }) => ask(a, stream).catch((e) => ({ error: String(e.message || e) }))));
  const wrong = jobs.map((j, i) => ({ ...j, got: answers[i] })).filter(({ a, got }) => got.text !== a.want || got.model !== a.ft);
  check(wrong.length === 0, `${jobs.length} concurrent answers of 16 adapters of 4 tenants each equal its adapter alone`,
    wrong.map(({ a, stream, got }) => ({ model: a.ft, stream, got, want: a.want })));

  // another tenant's model is a 404
  for (const [i, t] of TENANTS.entries()) {
    const theirs = adapters.find((a) => a.tenant === TENANTS[(i + 1) % TENANTS.length]);
    try {
      await sdk[t].chat.completions.create({ model: theirs.ft, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
      check(false, `${t} cannot use ${theirs.ft}`);
    } catch (e) {
      check(e.status === 404 && e.code === 'model_not_found', `${t} cannot use ${theirs.ft}: 404`, { status: e.status, code: e.code });
    }
  }

  // each tenant's usage rows are its own answers' usage
  const want = TENANTS.map((t) => jobs.map((j, i) => ({ ...j, u: answers[i].usage })).filter((j) => j.a.tenant === t && j.u)
    .map((j) => `${t}|${j.a.ft}|${j.u.prompt_tokens}|${j.u.completion_tokens}`)).flat().sort();
  const rows = await usageRows(stack, want.length);
  check(want.length === jobs.length && JSON.stringify(rows) === JSON.stringify(want), 'each tenant is metered its own answers',
    { rows, want });
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  await stopAll(stack, worker, dir, { check, failed });
}
process.exit(summary());
