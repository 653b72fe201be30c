// jobs.mjs - /v1/fine_tuning/jobs and /v1/models against a real gateway and PostgreSQL: create (every
// method, the model and file checks, hyperparameters resolved, the created event, NOTIFY whet_jobs),
// refusals with the field in `param` that leave no row behind, Idempotency-Key replays (also under a
// race), list with cursors and metadata filters, cancel/pause/resume from every state, events and
// checkpoints pages, the job's usage (reals in their shortest form), the active-job limit, and tenant
// isolation everywhere (including a job naming another tenant's file).
import { spawn } from 'node:child_process';
import { startStack, client, multipart, checker, SFT_LINE, DPO_LINE, RFT_LINE } from './harness.mjs';

const { check, summary, failed } = checker();
const stack = await startStack();
const ids = (list) => JSON.stringify(list.map((x) => x.id));
try {
  const a = client(stack, 'alpha'), b = client(stack, 'beta');
  const upload = async (api, purpose, content) => {
    const m = multipart([{ name: 'purpose', value: purpose }, { name: 'file', filename: 'd.jsonl', value: content }]);
    const r = await api('POST', '/v1/files', { body: m.body, headers: { 'content-type': m.type } });
    if (r.status !== 200) throw new Error(`upload failed: ${r.text}`);
    return r.json.id;
  };
  const sft = await upload(a, 'fine-tune', `${SFT_LINE}\n${SFT_LINE}\n${SFT_LINE}\n`);
  const dpo = await upload(a, 'fine-tune', `${DPO_LINE}\n`);
  const rft = await upload(a, 'fine-tune', `${RFT_LINE}\n`);
  const notes = await upload(a, 'user_data', 'plain text');
  const betaFile = await upload(b, 'fine-tune', `${SFT_LINE}\n`);
  const jobRows = () => Number(stack.psql('SELECT count(*) FROM jobs'));
  const eventRows = () => Number(stack.psql('SELECT count(*) FROM job_events'));

  // Listen on whet_jobs the way the scheduler does, through a psql session kept open.
  const listener = spawn('psql', ['-qX', stack.dbUrl], { stdio: ['pipe', 'pipe', 'pipe'] });
  let notifications = '';
  listener.stdout.on('data', (d) => { notifications += d.toString(); });
  listener.stdin.write("LISTEN whet_jobs;\nSELECT 'listening';\n");
  for (let i = 0; i < 100 && !notifications.includes('listening'); i++) await new Promise((res) => setTimeout(res, 50));

  // ---- create
  let r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: sft } });
  check(r.status === 200, 'create: 200', r.text);
  const j1 = r.json;
  check(j1.object === 'fine_tuning.job' && /^ftjob-/.test(j1.id) && j1.status === 'queued', 'create: a queued job', j1);
  check(j1.model === 'whet-tiny' && j1.training_file === sft && j1.validation_file === null, 'create: fields', j1);
  // "auto" as OpenAI resolves it: 3 lines would be 9 examples seen, fewer than 100, so 100 / 3 epochs,
  // rounded down and capped at 25; batches of 0.2% of 3 examples, at least 1.
  check(j1.method?.type === 'supervised' && j1.method.supervised.hyperparameters.n_epochs === 25 &&
        j1.method.supervised.hyperparameters.batch_size === 1 &&
        j1.method.supervised.hyperparameters.learning_rate_multiplier === 1, 'create: auto hyperparameters resolved for 3 lines', j1.method);
  check(j1.hyperparameters?.n_epochs === 25 && j1.hyperparameters.batch_size === 1, 'create: deprecated hyperparameters mirror the method', j1.hyperparameters);
  check(Number.isInteger(j1.seed) && j1.seed >= 0, 'create: a seed is chosen', j1.seed);
  check(j1.fine_tuned_model === null && j1.finished_at === null && j1.error === null && Array.isArray(j1.result_files),
        'create: OpenAI null fields', j1);
  check(Array.isArray(j1.integrations) && j1.whet?.priority === 0, 'create: integrations and whet', j1);
  check(stack.psql(`SELECT message FROM job_events WHERE job_id = '${j1.id}'`) === `Created fine-tuning job: ${j1.id}`,
        'create: the created event is written');
  check(stack.psql(`SELECT base_model || ' ' || status || ' ' || desired FROM jobs WHERE id = '${j1.id}'`) === 'whet-tiny queued run',
        'create: row');
  listener.stdin.write('SELECT 1;\n');
  await new Promise((res) => setTimeout(res, 300));
  check(notifications.includes(`"whet_jobs" with payload "${j1.id}"`), 'create: NOTIFY whet_jobs with the job id', notifications);
  listener.stdin.end();

  r = await a('POST', '/v1/fine_tuning/jobs', {
    json: {
      model: 'whet-tiny', training_file: sft, validation_file: sft, suffix: 'my-run', seed: 42,
      metadata: { team: 'nlp', run: '7' }, integrations: [],
      method: { type: 'supervised', supervised: { hyperparameters: { n_epochs: 2, batch_size: 'auto' } } },
      whet: { priority: 5, lora: { r: 8, alpha: 16, target_modules: ['q_proj', 'v_proj'] }, gpu_types: ['H100'] },
    },
  });
  check(r.status === 200, 'create full: 200', r.text);
  const j2 = r.json;
  check(j2.seed === 42 && j2.user_provided_suffix === 'my-run' && j2.metadata?.team === 'nlp' && j2.validation_file === sft,
        'create full: fields kept', j2);
  check(j2.method.supervised.hyperparameters.n_epochs === 2 && j2.whet.priority === 5 && j2.whet.lora?.r === 8,
        'create full: given values kept', j2);
  check(stack.psql(`SELECT priority FROM jobs WHERE id = '${j2.id}'`) === '5', 'create full: priority column');

  r = await a('POST', '/v1/fine_tuning/jobs', {
    json: { model: 'whet-tiny', training_file: dpo, metadata: { team: 'rl' }, method: { type: 'dpo', dpo: { hyperparameters: { beta: 0.2 } } } },
  });
  check(r.status === 200 && r.json.method.dpo.hyperparameters.beta === 0.2, 'create dpo', r.text);
  const j3 = r.json;
  const grader = { type: 'string_check', name: 'exact', input: '{{sample.output_text}}', reference: '{{item.answer}}', operation: 'eq' };
  r = await a('POST', '/v1/fine_tuning/jobs', {
    json: { model: 'whet-tiny', training_file: rft, method: { type: 'reinforcement', reinforcement: { grader } }, whet: { group_size: 4 } },
  });
  check(r.status === 200 && r.json.method.reinforcement.grader.name === 'exact', 'create reinforcement', r.text);
  const j4 = r.json;

  // ---- refusals: the right status and param, and no row or event left behind
  const before = [jobRows(), eventRows()];
  const refusals = [
    [{ training_file: sft }, 400, 'model'],
    [{ model: 'whet-tiny' }, 400, 'training_file'],
    [{ model: 'whet-tiny', training_file: 7 }, 400, 'training_file'],
    [{ model: 'whet-tiny', training_file: sft, seed: 'x' }, 400, 'seed'],
    [{ model: 'whet-tiny', training_file: sft, suffix: 'a'.repeat(65) }, 400, 'suffix'],
    [{ model: 'whet-tiny', training_file: sft, nonsense: true }, 400, 'nonsense'],
    [{ model: 'whet-tiny', training_file: sft, method: { type: 'dpo', dpo: { hyperparameters: { beta: 5 } } } }, 400, 'method.dpo.hyperparameters.beta'],
    [{ model: 'whet-tiny', training_file: rft, method: { type: 'reinforcement', reinforcement: { grader: { type: 'string_check', name: 'g' } } } }, 400, 'method.reinforcement.grader.input'],
    [{ model: 'whet-tiny', training_file: sft, integrations: [{ type: 'wandb', wandb: { project: 'p' } }] }, 400, 'integrations'],
    [{ model: 'no-such-model', training_file: sft }, 404, 'model'],
    [{ model: 'whet-tiny', training_file: 'file-nope' }, 404, 'training_file'],
    [{ model: 'whet-tiny', training_file: betaFile }, 404, 'training_file'],
    [{ model: 'whet-tiny', training_file: sft, validation_file: betaFile }, 404, 'validation_file'],
    [{ model: 'whet-tiny', training_file: notes }, 400, 'training_file'],
    [{ model: 'whet-tiny', training_file: dpo }, 400, 'training_file'],
    [{ model: 'whet-tiny', training_file: sft, method: { type: 'dpo' } }, 400, 'training_file'],
    [{ model: 'whet-tiny', training_file: rft, validation_file: sft, method: { type: 'reinforcement', reinforcement: { grader } } }, 400, 'validation_file'],
    [{ model: 'whet-tiny', training_file: rft, method: { type: 'reinforcement', reinforcement: { grader: {
      type: 'multi', name: 'm', calculate_output: 'j',
      graders: { j: { type: 'score_model', name: 'j', model: 'no-such-judge', input: [{ role: 'user', content: 'Rate {{sample.output_text}}' }] } },
    } } } }, 404, 'method.reinforcement.grader'],
  ];
  for (const [body, status, param] of refusals) {
    r = await a('POST', '/v1/fine_tuning/jobs', { json: body });
    check(r.status === status && r.json?.error?.param === param && r.json.error.type === 'invalid_request_error',
          `refused ${JSON.stringify(body).slice(0, 90)}: ${status} param ${param}`, r.json);
  }
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: betaFile } });
  check(r.json?.error?.message === `no such file: ${betaFile}`, 'another tenant\'s file: a plain "no such file"', r.json);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: dpo } });
  check(/holds dpo examples; a supervised job needs sft examples/.test(r.json?.error?.message), 'format mismatch explained', r.json);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: '{"model": "whet-tiny", "training_file": ' });
  check(r.status === 400 && r.json?.error?.code === 'invalid_json', 'malformed JSON: 400', r.text);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: '[1, 2]' });
  check(r.status === 400, 'array body: 400', r.text);
  r = await a('POST', '/v1/fine_tuning/jobs', { body: '', headers: { 'content-type': 'application/json' } });
  check(r.status === 400, 'empty body: 400', r.text);
  r = await a('POST', '/v1/fine_tuning/jobs', {
    json: { model: 'whet-tiny', training_file: sft, metadata: { pad: 'x'.repeat(500) }, junk: 'y'.repeat(2 << 20) },
  });
  check(r.status === 413, 'oversize body: 413', r.status);
  check(jobRows() === before[0] && eventRows() === before[1], 'refused creates leave no job and no event', [jobRows(), eventRows()]);

  // ---- Idempotency-Key: a retried create answers like the first, even when racing.
  const idemBody = { model: 'whet-tiny', training_file: sft, suffix: 'idem' };
  r = await a('POST', '/v1/fine_tuning/jobs', { json: idemBody, headers: { 'idempotency-key': 'key-1' } });
  const first = r.json;
  check(r.status === 200, 'idempotent create: 200', r.text);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: idemBody, headers: { 'idempotency-key': 'key-1' } });
  check(r.status === 200 && r.json.id === first.id && r.headers.get('idempotent-replayed') === 'true', 'retry: same job, replayed', r.text);
  check(JSON.stringify(r.json) === JSON.stringify(first), 'retry: identical answer', r.json);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { ...idemBody, suffix: 'other' }, headers: { 'idempotency-key': 'key-1' } });
  check(r.status === 422 && r.json?.error?.code === 'idempotency_key_reused', 'same key, different body: 422', r.text);
  r = await b('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: betaFile }, headers: { 'idempotency-key': 'key-1' } });
  check(r.status === 200 && r.json.id !== first.id, 'keys are per tenant', r.text);
  const betaJob = r.json;
  const race = await Promise.all([...Array(6)].map(() =>
    a('POST', '/v1/fine_tuning/jobs', { json: idemBody, headers: { 'idempotency-key': 'key-race' } })));
  const raceIds = new Set(race.filter((x) => x.status === 200).map((x) => x.json.id));
  check(raceIds.size === 1, 'racing retries: one job id among the answers', race.map((x) => [x.status, x.json?.id || x.json?.error?.code]));
  check(race.every((x) => x.status === 200 || (x.status === 409 && x.json?.error?.code === 'idempotency_key_in_use')),
        'racing retries: 200 or "in progress" 409 only', race.map((x) => x.status));
  check(stack.psql("SELECT count(*) FROM jobs WHERE suffix = 'idem'") === '2', 'racing retries: one row per key');
  r = await a('POST', '/v1/fine_tuning/jobs', { json: idemBody, headers: { 'idempotency-key': 'bad key with spaces' } });
  check(r.status === 400, 'malformed Idempotency-Key: 400', r.text);

  // ---- list: newest first, cursors, metadata filters
  r = await a('GET', '/v1/fine_tuning/jobs');
  check(r.status === 200 && r.json.object === 'list' && r.json.has_more === false, 'list: 200', r.text);
  const all = r.json.data;
  check(all.length === 6 && all[all.length - 1].id === j1.id && all[all.length - 2].id === j2.id, 'list: all six, newest first', ids(all));
  r = await a('GET', '/v1/fine_tuning/jobs?limit=2');
  check(ids(r.json.data) === ids(all.slice(0, 2)) && r.json.has_more === true, 'list: limit', r.json);
  r = await a('GET', `/v1/fine_tuning/jobs?limit=2&after=${all[1].id}`);
  check(ids(r.json.data) === ids(all.slice(2, 4)) && r.json.has_more === true, 'list: after', r.json);
  r = await a('GET', `/v1/fine_tuning/jobs?limit=100&after=${all[3].id}`);
  check(ids(r.json.data) === ids(all.slice(4)) && r.json.has_more === false, 'list: last page', r.json);
  r = await a('GET', '/v1/fine_tuning/jobs?metadata[team]=nlp');
  check(ids(r.json.data) === ids([j2]), 'list: metadata filter', r.json);
  r = await a('GET', '/v1/fine_tuning/jobs?metadata[team]=nlp&metadata[run]=8');
  check(r.json.data.length === 0, 'list: every metadata filter must match', r.json);
  r = await a('GET', '/v1/fine_tuning/jobs?limit=101');
  check(r.status === 400 && r.json.error.param === 'limit', 'list: limit over 100 refused', r.text);
  r = await b('GET', '/v1/fine_tuning/jobs');
  check(ids(r.json.data) === ids([betaJob]), 'list: beta sees only its own job', r.json);

  // ---- retrieve
  r = await a('GET', `/v1/fine_tuning/jobs/${j3.id}`);
  check(r.status === 200 && r.json.id === j3.id && r.json.method.type === 'dpo', 'retrieve', r.text);

  // ---- cancel, pause, resume
  const post = (api, id, action) => api('POST', `/v1/fine_tuning/jobs/${id}/${action}`);
  r = await post(a, j1.id, 'pause');
  check(r.status === 200 && r.json.status === 'paused', 'pause a queued job: paused', r.text);
  r = await post(a, j1.id, 'pause');
  check(r.status === 200 && r.json.status === 'paused', 'pause again: still paused (a retry answers alike)', r.text);
  r = await post(a, j1.id, 'resume');
  check(r.status === 200 && r.json.status === 'queued', 'resume: queued', r.text);
  r = await post(a, j1.id, 'resume');
  check(r.status === 200 && r.json.status === 'queued', 'resume again: queued', r.text);
  r = await post(a, j1.id, 'cancel');
  check(r.status === 200 && r.json.status === 'cancelled' && Number.isInteger(r.json.finished_at), 'cancel: cancelled', r.text);
  r = await post(a, j1.id, 'cancel');
  check(r.status === 200 && r.json.status === 'cancelled', 'cancel again: 200', r.text);
  for (const action of ['pause', 'resume']) {
    r = await post(a, j1.id, action);
    check(r.status === 409 && r.json?.error?.code === 'invalid_job_state', `${action} a cancelled job: 409`, r.text);
  }
  check(stack.psql(`SELECT desired FROM jobs WHERE id = '${j1.id}'`) === 'cancel', 'cancel: desired recorded');
  // A running job: the scheduler carries pause and cancel out; the gateway records the wish.
  stack.psql(`UPDATE jobs SET status = 'running' WHERE id = '${j2.id}'`);
  r = await post(a, j2.id, 'pause');
  check(r.status === 200 && r.json.status === 'running' &&
        stack.psql(`SELECT desired FROM jobs WHERE id = '${j2.id}'`) === 'pause', 'pause a running job: pause requested', r.text);
  r = await post(a, j2.id, 'resume');
  check(r.status === 200 && stack.psql(`SELECT desired FROM jobs WHERE id = '${j2.id}'`) === 'run', 'resume a pausing job: withdrawn', r.text);
  r = await post(a, j2.id, 'cancel');
  check(r.status === 200 && r.json.status === 'running' &&
        stack.psql(`SELECT desired FROM jobs WHERE id = '${j2.id}'`) === 'cancel', 'cancel a running job: requested', r.text);
  stack.psql(`UPDATE jobs SET status = 'succeeded', fine_tuned_model = 'ft:whet-tiny:alpha:my-run:abc123', finished_at = whet_now() WHERE id = '${j2.id}'`);
  for (const action of ['cancel', 'pause', 'resume']) {
    r = await post(a, j2.id, action);
    check(r.status === 409, `${action} a succeeded job: 409`, r.text);
  }

  // ---- events: newest first, paginated
  r = await a('GET', `/v1/fine_tuning/jobs/${j1.id}/events`);
  check(r.status === 200 && r.json.object === 'list', 'events: 200', r.text);
  const ev = r.json.data;
  check(ev.length === 4 && ev[ev.length - 1].message === `Created fine-tuning job: ${j1.id}` && ev[0].message === 'Fine-tuning job cancelled',
        'events: created, paused, resumed, cancelled (no event for the no-op retries), newest first', ev.map((e) => e.message));
  check(ev[0].object === 'fine_tuning.job.event' && ev[0].level === 'info' && ev[0].type === 'message' && 'data' in ev[0] &&
        Number.isInteger(ev[0].created_at), 'events: shape', ev[0]);
  r = await a('GET', `/v1/fine_tuning/jobs/${j1.id}/events?limit=2`);
  check(ids(r.json.data) === ids(ev.slice(0, 2)) && r.json.has_more === true, 'events: limit', r.json);
  r = await a('GET', `/v1/fine_tuning/jobs/${j1.id}/events?limit=2&after=${ev[1].id}`);
  check(ids(r.json.data) === ids(ev.slice(2, 4)), 'events: after', r.json);

  // ---- checkpoints
  for (const step of [10, 20, 30]) {
    stack.psql(`INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint, metrics, object_prefix)
                SELECT 'ftckpt-${step}', tenant_id, id, ${step}, 'ft:whet-tiny:alpha:my-run:abc123:ckpt-step-${step}',
                '{"step": ${step}, "train_loss": 1.5}', 'ckpt/${step}' FROM jobs WHERE id = '${j2.id}'`);
  }
  r = await a('GET', `/v1/fine_tuning/jobs/${j2.id}/checkpoints`);
  check(r.status === 200 && ids(r.json.data) === ids([{ id: 'ftckpt-30' }, { id: 'ftckpt-20' }, { id: 'ftckpt-10' }]), 'checkpoints: newest first', r.json);
  const c0 = r.json.data[0];
  check(c0.object === 'fine_tuning.job.checkpoint' && c0.step_number === 30 && c0.fine_tuning_job_id === j2.id &&
        c0.metrics.train_loss === 1.5 && c0.fine_tuned_model_checkpoint.endsWith('ckpt-step-30'), 'checkpoints: shape', c0);
  r = await a('GET', `/v1/fine_tuning/jobs/${j2.id}/checkpoints?limit=1&after=ftckpt-30`);
  check(ids(r.json.data) === ids([{ id: 'ftckpt-20' }]) && r.json.has_more === true, 'checkpoints: after and limit', r.json);
  check(c0.whet?.pinned === false, 'checkpoints: not pinned unless asked', c0);
  // Pinning (a whet extension): the operator's retention of a job's newest checkpoints keeps a pinned one.
  const pin = (verb, ckpt, client = a, job = j2.id) => client('POST', `/v1/fine_tuning/jobs/${job}/checkpoints/${ckpt}/${verb}`);
  r = await pin('pin', 'ftckpt-10');
  check(r.status === 200 && r.json.id === 'ftckpt-10' && r.json.whet.pinned === true && r.json.step_number === 10, 'pin: the pinned checkpoint', r.text);
  r = await pin('pin', 'ftckpt-10');
  check(r.status === 200 && r.json.whet.pinned === true, 'pin: again answers the same', r.text);
  r = await pin('unpin', 'ftckpt-20');
  check(r.status === 200 && r.json.whet.pinned === false, 'unpin: one not pinned stays so', r.text);
  r = await a('GET', `/v1/fine_tuning/jobs/${j2.id}/checkpoints`);
  check(r.json.data.map((c) => `${c.id}:${c.whet.pinned}`).join() === 'ftckpt-30:false,ftckpt-20:false,ftckpt-10:true',
        'checkpoints: the list shows which is pinned', r.json);
  r = await pin('pin', 'ftckpt-nope');
  check(r.status === 404 && r.json.error.param === 'checkpoint', 'pin: an unknown checkpoint is a 404 naming it', r.text);
  r = await pin('pin', 'ftckpt-10', a, j1.id);
  check(r.status === 404, 'pin: another job\'s checkpoint is a 404', r.text);
  r = await pin('pin', 'ftckpt-20', b);
  check(r.status === 404 && stack.psql(`SELECT pinned FROM checkpoints WHERE id = 'ftckpt-20'`) === 'f',
        'pin: another tenant\'s checkpoint is a 404 and stays unpinned', r.text);

  // ---- usage: reals in their shortest form (8.601, not jansson's %.17g 8.6010000000000009)
  stack.psql(`INSERT INTO usage_records (tenant_id, job_id, attempt, report_seq, device_type, device_seconds, trained_tokens,
                                         job_created_at)
              SELECT tenant_id, id, 1, 1, 'H100', 8.601, 42, created_at FROM jobs WHERE id = '${j1.id}'`);
  r = await a('GET', `/v1/usage?job_id=${j1.id}`);
  check(r.status === 200 && r.json?.data?.length === 1 && r.json.data[0].device_seconds === 8.601, 'usage: the metered row', r.text);
  check(r.text.includes('"device_seconds":8.601,') && !/\d\.\d{15,}/.test(r.text), 'usage: no 17-digit artifacts', r.text);

  // ---- models: the catalog plus the tenant's own fine-tuned models
  r = await a('GET', '/v1/models');
  check(r.status === 200 && r.json.object === 'list', 'models: 200', r.text);
  const mine = r.json.data.find((m) => m.id === 'ft:whet-tiny:alpha:my-run:abc123');
  check(r.json.data.some((m) => m.id === 'whet-tiny' && m.object === 'model' && m.owned_by === 'whet' && Number.isInteger(m.created)),
        'models: base model listed', r.json);
  check(mine && mine.owned_by === 'alpha', 'models: the fine-tuned model is listed for its tenant', r.json);
  r = await b('GET', '/v1/models');
  check(!r.json.data.some((m) => m.id.startsWith('ft:')), 'models: not for another tenant', r.json);
  r = await a('GET', '/v1/models/ft:whet-tiny:alpha:my-run:abc123');
  check(r.status === 200 && r.json.id === 'ft:whet-tiny:alpha:my-run:abc123', 'models: retrieve own', r.text);
  r = await a('GET', '/v1/models/whet-tiny');
  check(r.status === 200 && r.json.owned_by === 'whet', 'models: retrieve base', r.text);
  r = await b('GET', '/v1/models/ft:whet-tiny:alpha:my-run:abc123');
  check(r.status === 404, 'models: another tenant\'s model is 404', r.text);
  // Continuing from a fine-tuned model or a checkpoint.
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'ft:whet-tiny:alpha:my-run:abc123', training_file: sft } });
  check(r.status === 200 && stack.psql(`SELECT base_model || ' ' || init_checkpoint FROM jobs WHERE id = '${r.json.id}'`) === 'whet-tiny ftckpt-30',
        'create from a fine-tuned model: base model and last checkpoint', r.text);
  const fromModel = r.json.id;
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'ft:whet-tiny:alpha:my-run:abc123:ckpt-step-20', training_file: sft } });
  check(r.status === 200 && stack.psql(`SELECT init_checkpoint FROM jobs WHERE id = '${r.json.id}'`) === 'ftckpt-20',
        'create from a checkpoint', r.text);
  const fromCheckpoint = r.json.id;
  r = await b('POST', '/v1/fine_tuning/jobs', { json: { model: 'ft:whet-tiny:alpha:my-run:abc123', training_file: betaFile } });
  check(r.status === 404 && r.json.error.param === 'model', 'another tenant\'s fine-tuned model: 404', r.text);
  // Retention (migration 0040; the scheduler's leader calls it with --checkpoint-keep 1): step 30 is the newest,
  // 20 a queued job continues from, 10 pinned: all stay. Unpinned, 10 goes; its model is no longer there.
  const retain = () => stack.psql(`SELECT moved FROM whet_checkpoint_retention(1, NULL, 100)`);
  check(retain() === '0' && (await a('GET', `/v1/fine_tuning/jobs/${j2.id}/checkpoints`)).json.data.map((c) => c.id).join() === 'ftckpt-30,ftckpt-20,ftckpt-10',
        'retention: the newest, a pinned one and one a queued job continues from stay');
  r = await pin('unpin', 'ftckpt-10');
  check(r.status === 200 && r.json.whet.pinned === false && retain() === '1', 'retention: unpinned, it goes', r.text);
  r = await a('GET', `/v1/fine_tuning/jobs/${j2.id}/checkpoints`);
  check(r.json.data.map((c) => c.id).join() === 'ftckpt-30,ftckpt-20', 'retention: the deleted checkpoint is no longer listed', r.json);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'ft:whet-tiny:alpha:my-run:abc123:ckpt-step-10', training_file: sft } });
  check(r.status === 404 && r.json.error.param === 'model', 'retention: a deleted checkpoint\'s model is a 404', r.text);
  r = await pin('pin', 'ftckpt-10');
  check(r.status === 404, 'retention: a deleted checkpoint cannot be pinned', r.text);
  // A deleted model's checkpoints go whole once --deleted-model-keep has passed (0 here), pinned or not, but wait
  // whole while a job continues from one of them.
  r = await a('DELETE', '/v1/models/ft:whet-tiny:alpha:my-run:abc123');
  check(r.status === 200 && r.json.deleted === true, 'retention: the model deleted', r.text);
  await pin('pin', 'ftckpt-20');
  const purge = () => stack.psql(`SELECT moved FROM whet_checkpoint_retention(1, 0, 100)`);
  check(purge() === '0', 'retention: a deleted model waits while queued jobs continue from its checkpoints');
  for (const id of [fromModel, fromCheckpoint]) await a('POST', `/v1/fine_tuning/jobs/${id}/cancel`);
  check(purge() === '2' && stack.psql(`SELECT string_agg(id || ':' || reason, ',' ORDER BY id) FROM checkpoint_deletions
                                       WHERE job_id = '${j2.id}'`) === 'ftckpt-10:keep_last,ftckpt-20:model_deleted,ftckpt-30:model_deleted',
        'retention: once those jobs ended, every checkpoint of the deleted model goes, the pinned one too');
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'ft:whet-tiny:alpha:my-run:abc123', training_file: sft } });
  check(r.status === 404 && r.json.error.param === 'model', 'retention: a deleted model whose files are gone is a 404', r.text);

  // ---- isolation: alpha's job is a 404 for beta on every route
  for (const [method, path] of [['GET', ''], ['POST', '/cancel'], ['POST', '/pause'], ['POST', '/resume'], ['GET', '/events'], ['GET', '/checkpoints']]) {
    r = await b(method, `/v1/fine_tuning/jobs/${j3.id}${path}`);
    check(r.status === 404 && r.json?.error?.message === `no such fine-tuning job: ${j3.id}`, `isolation: ${method} job${path} is 404 for beta`, r.text);
  }
  check(stack.psql(`SELECT status FROM jobs WHERE id = '${j3.id}'`) === 'queued', 'isolation: beta changed nothing');
  r = await b('GET', `/v1/fine_tuning/jobs?after=${j3.id}`);
  check(r.status === 200 && r.json.data.length === 0, 'isolation: another tenant\'s cursor yields nothing', r.json);

  // ---- isolation under load: both tenants' creates, lists and reads at once, interleaved. The gateway sends
  // the requests of one loop iteration in one transaction, each led by its tenant's setting where another's is
  // in effect (gateway/db.c): every request must still act as its own tenant alone.
  const betaBurstFile = await upload(b, 'fine-tune', `${SFT_LINE}\n`);
  const burst = [];
  for (let i = 0; i < 24; i++) {
    const [api, tenant, file] = i % 2 ? [b, 'beta', betaBurstFile] : [a, 'alpha', sft];
    burst.push(api('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: file, suffix: `burst-${i}` } })
      .then((x) => ({ kind: 'create', tenant, x })));
    burst.push(api('GET', '/v1/fine_tuning/jobs?limit=100').then((x) => ({ kind: 'list', tenant, x })));
    burst.push(api('GET', `/v1/fine_tuning/jobs/${j3.id}`).then((x) => ({ kind: 'get', tenant, x })));
  }
  const answers = await Promise.all(burst);
  const owners = new Map(stack.psql("SELECT j.id || ' ' || t.name FROM jobs j JOIN tenants t ON t.id = j.tenant_id")
    .split('\n').map((line) => line.split(' ')));
  const owner = (id) => owners.get(id);
  const created = answers.filter((x) => x.kind === 'create');
  check(created.every((c) => c.x.status === 200 && owner(c.x.json.id) === c.tenant),
        'isolation under load: every create is its tenant\'s job', created.map((c) => [c.tenant, c.x.status, c.x.json?.id]));
  const lists = answers.filter((x) => x.kind === 'list');
  check(lists.every((l) => l.x.status === 200 && l.x.json.data.length > 0 && l.x.json.data.every((j) => owner(j.id) === l.tenant)),
        'isolation under load: every list holds its tenant\'s jobs alone', lists.map((l) => [l.tenant, l.x.status, l.x.json?.data?.length]));
  const gets = answers.filter((x) => x.kind === 'get');
  check(gets.every((g) => g.x.status === (g.tenant === 'alpha' ? 200 : 404)),
        'isolation under load: alpha\'s job reads as 200 for alpha, 404 for beta', gets.map((g) => [g.tenant, g.x.status]));
  check(owner(j3.id) === 'alpha', 'isolation under load: the job read is alpha\'s');
  for (const c of created.filter((c) => c.x.status === 200)) await (c.tenant === 'alpha' ? a : b)('POST', `/v1/fine_tuning/jobs/${c.x.json.id}/cancel`);

  // ---- graders/validate: the create's grader check on its own
  r = await a('POST', '/v1/fine_tuning/alpha/graders/validate', { json: { grader } });
  check(r.status === 200 && r.json.grader?.name === 'exact', 'graders/validate: a good grader', r.text);
  r = await a('POST', '/v1/fine_tuning/alpha/graders/validate', { json: { grader: { ...grader, operation: 'contains' } } });
  check(r.status === 400 && r.json?.error?.param === 'grader.operation', 'graders/validate: the bad field named', r.text);
  r = await a('POST', '/v1/fine_tuning/alpha/graders/validate', { json: {} });
  check(r.status === 400 && r.json?.error?.param === 'grader', 'graders/validate: missing grader', r.text);

  // ---- a file used by a job cannot be deleted
  r = await a('DELETE', `/v1/files/${dpo}`);
  check(r.status === 409 && r.json?.error?.code === 'file_in_use', 'deleting a file a job uses: 409', r.text);

  // ---- the tenant's active-job limit
  stack.psql("UPDATE tenants SET max_active_jobs = 1 WHERE name = 'beta'");
  r = await b('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: betaFile }, headers: { 'idempotency-key': 'over' } });
  check(r.status === 429 && Number(r.headers.get('retry-after')) > 0, 'over the active-job limit: 429 with retry-after', r.text);
  check(stack.psql("SELECT count(*) FROM idempotency_keys WHERE key = 'over'") === '0', 'a refused create keeps no idempotency key');
  check(stack.psql(`SELECT count(*) FROM jobs WHERE training_file = '${betaFile}'`) === '1', 'over the limit: no row');

  void j4;
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
}
process.exit(summary());
