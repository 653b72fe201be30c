// sdk.mjs - the official OpenAI Node SDK (openai@6, from tests/node_modules), unchanged, with baseURL
// at the gateway: files.create/list/retrieve/content/delete, fineTuning.jobs.create/list/retrieve/
// cancel/pause/resume/listEvents, jobs.checkpoints.list, alpha.graders.validate and models.list, with
// the SDK's own auto-pagination (which follows has_more and the last id as `after`) and typed errors.
import OpenAI, { toFile } from 'openai';
import { startStack, checker, SFT_LINE, DPO_LINE } from '../api/harness.mjs';

const { check, summary, failed } = checker();
const stack = await startStack();
try {
  const client = new OpenAI({ apiKey: stack.keys.alpha, baseURL: `${stack.url}/v1` });
  const other = new OpenAI({ apiKey: stack.keys.beta, baseURL: `${stack.url}/v1`, maxRetries: 0 });

  // ---- files
  const content = `${SFT_LINE}\n${SFT_LINE}\n`;
  const file = await client.files.create({ file: await toFile(Buffer.from(content), 'train.jsonl'), purpose: 'fine-tune' });
  check(file.object === 'file' && file.purpose === 'fine-tune' && file.bytes === Buffer.byteLength(content) &&
        file.filename === 'train.jsonl', 'files.create', file);
  const prefs = await client.files.create({ file: await toFile(Buffer.from(DPO_LINE + '\n'), 'prefs.jsonl'), purpose: 'fine-tune' });
  const scratch = await client.files.create({ file: await toFile(Buffer.from('hello'), 'notes.txt'), purpose: 'user_data' });

  const listed = [];
  for await (const f of client.files.list({ limit: 1 })) listed.push(f.id); // one per page: follows the cursor
  check(JSON.stringify(listed) === JSON.stringify([scratch.id, prefs.id, file.id]), 'files.list auto-paginates newest first', listed);
  const tuneFiles = await client.files.list({ purpose: 'fine-tune' });
  check(tuneFiles.data.length === 2 && tuneFiles.data.every((f) => f.purpose === 'fine-tune'), 'files.list purpose filter', tuneFiles.data);
  const got = await client.files.retrieve(file.id);
  check(got.id === file.id && got.bytes === file.bytes, 'files.retrieve', got);
  const body = await (await client.files.content(file.id)).text();
  check(body === content, 'files.content', body);

  try {
    await client.files.create({ file: await toFile(Buffer.from('{"messages": 1}\n'), 'bad.jsonl'), purpose: 'fine-tune' });
    check(false, 'an invalid file is refused');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'file' && /line 1: messages/.test(e.message),
          'an invalid file: BadRequestError naming the line', { status: e.status, param: e.param, message: e.message });
  }
  try {
    await other.files.retrieve(file.id);
    check(false, 'another tenant\'s file is hidden');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, 'another tenant\'s file: NotFoundError', String(e));
  }

  // ---- fine-tuning jobs
  const job = await client.fineTuning.jobs.create({
    model: 'whet-tiny', training_file: file.id, suffix: 'sdk', seed: 7, metadata: { source: 'sdk-test' },
    method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 2 } } },
  });
  check(job.object === 'fine_tuning.job' && job.status === 'queued' && job.seed === 7 &&
        job.method?.supervised?.hyperparameters?.n_epochs === 2 && job.metadata?.source === 'sdk-test', 'jobs.create', job);
  const dpoJob = await client.fineTuning.jobs.create({
    model: 'whet-tiny', training_file: prefs.id, method: { type: 'dpo', dpo: { hyperparameters: { beta: 0.3 } } },
  });
  check(dpoJob.method?.dpo?.hyperparameters?.beta === 0.3, 'jobs.create dpo', dpoJob.method);
  try {
    await client.fineTuning.jobs.create({ model: 'whet-tiny', training_file: file.id, hyperparameters: { n_epochs: 0 } });
    check(false, 'out-of-range hyperparameters are refused');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.param === 'hyperparameters.n_epochs', 'bad hyperparameters: BadRequestError with param',
          { param: e.param, message: e.message });
  }
  check(stack.psql('SELECT count(*) FROM jobs') === '2', 'the SDK\'s retries with its Idempotency-Key created no duplicates');

  const jobIds = [];
  for await (const j of client.fineTuning.jobs.list({ limit: 1 })) jobIds.push(j.id);
  check(JSON.stringify(jobIds) === JSON.stringify([dpoJob.id, job.id]), 'jobs.list auto-paginates newest first', jobIds);
  const filtered = await client.fineTuning.jobs.list({ metadata: { source: 'sdk-test' } });
  check(filtered.data.length === 1 && filtered.data[0].id === job.id, 'jobs.list metadata filter', filtered.data.map((j) => j.id));
  const again = await client.fineTuning.jobs.retrieve(job.id);
  check(again.id === job.id && again.training_file === file.id, 'jobs.retrieve', again);

  const paused = await client.fineTuning.jobs.pause(job.id);
  check(paused.status === 'paused', 'jobs.pause', paused.status);
  const resumed = await client.fineTuning.jobs.resume(job.id);
  check(resumed.status === 'queued', 'jobs.resume', resumed.status);
  const cancelled = await client.fineTuning.jobs.cancel(job.id);
  check(cancelled.status === 'cancelled', 'jobs.cancel', cancelled.status);

  const events = [];
  for await (const e of client.fineTuning.jobs.listEvents(job.id, { limit: 2 })) events.push(e.message);
  check(events.length === 4 && events[0] === 'Fine-tuning job cancelled' && events[3] === `Created fine-tuning job: ${job.id}`,
        'jobs.listEvents auto-paginates newest first', events);

  for (const step of [5, 10]) {
    stack.psql(`INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint, metrics, object_prefix)
                SELECT 'ftckpt-sdk-${step}', tenant_id, id, ${step}, 'ft:whet-tiny:alpha:sdk:x:ckpt-step-${step}',
                '{"step": ${step}, "train_loss": 0.5}', 'ckpt/${step}' FROM jobs WHERE id = '${dpoJob.id}'`);
  }
  const ckpts = [];
  for await (const c of client.fineTuning.jobs.checkpoints.list(dpoJob.id, { limit: 1 })) ckpts.push(c);
  check(ckpts.length === 2 && ckpts[0].step_number === 10 && ckpts[0].object === 'fine_tuning.job.checkpoint' &&
        ckpts[0].metrics.train_loss === 0.5 && ckpts[1].step_number === 5, 'jobs.checkpoints.list', ckpts);

  // ---- graders
  const grader = { type: 'string_check', name: 'exact', input: '{{sample.output_text}}', reference: '{{item.answer}}', operation: 'eq' };
  const validated = await client.fineTuning.alpha.graders.validate({ grader });
  check(validated.grader?.name === 'exact', 'alpha.graders.validate', validated);

  // ---- models
  stack.psql(`UPDATE jobs SET status = 'succeeded', fine_tuned_model = 'ft:whet-tiny:alpha:sdk:x' WHERE id = '${dpoJob.id}'`);
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  check(models.includes('whet-tiny') && models.includes('ft:whet-tiny:alpha:sdk:x'), 'models.list: catalog and own models', models);
  const otherModels = [];
  for await (const m of other.models.list()) otherModels.push(m.id);
  check(!otherModels.includes('ft:whet-tiny:alpha:sdk:x'), 'models.list: not another tenant\'s', otherModels);

  // ---- delete
  const deleted = await client.files.delete(scratch.id);
  check(deleted.deleted === true && deleted.id === scratch.id, 'files.delete', deleted);
  try {
    await client.files.retrieve(scratch.id);
    check(false, 'a deleted file is gone');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, 'a deleted file: NotFoundError', String(e));
  }
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
}
process.exit(summary());
