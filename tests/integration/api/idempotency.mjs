// idempotency.mjs - Idempotency-Key on every state-changing POST of the tenant API against a real
// gateway and PostgreSQL: POST /v1/files, /v1/uploads, /v1/uploads/{id}/parts, /complete, /cancel and
// /v1/fine_tuning/jobs/{id}/cancel|pause|resume (job create has its own checks in jobs.mjs). For each
// route: a retry with the same key answers the first answer byte for byte, marked replayed, and
// creates or changes nothing (rows, events and stored objects counted); the same key with another
// body is a 422 naming the header; concurrent requests with one key create one object; another
// tenant's or another route's same key is independent; a refused request releases its key.
import { startStack, client, multipart, checker, listFiles, SFT_LINE } from './harness.mjs';

const { check, summary, failed } = checker();
const stack = await startStack();
const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
try {
  const a = client(stack, 'alpha'), b = client(stack, 'beta');
  const count = (sql) => Number(stack.psql(sql));
  const keyRows = (key) => stack.psql(`SELECT count(*) FROM idempotency_keys WHERE key = '${key}'`);
  const objects = () => listFiles(stack.objects).length;
  // Objects of a request that lost a race are deleted on a worker thread after its answer.
  const settled = async (f, want) => {
    for (let i = 0; i < 100 && f() !== want; i++) await sleep(50);
    return f();
  };
  const withKey = (key, extra = {}) => (key === undefined ? extra : { 'idempotency-key': key, ...extra });

  // The first answer, replayed: same status, same bytes, marked; another body: 422 naming the header.
  const checkReplayAndMismatch = async (what, first, again, other) => {
    check(again.status === first.status && again.text === first.text, `${what}: the retry answers the first answer byte for byte`,
          [first.status, again.status, again.text]);
    check(again.headers.get('idempotent-replayed') === 'true', `${what}: the retry is marked idempotent-replayed`);
    check(first.headers.get('idempotent-replayed') === null, `${what}: the first answer is not marked replayed`);
    check(other.status === 422 && other.json?.error?.code === 'idempotency_key_reused' &&
          other.json.error.message.includes('Idempotency-Key'), `${what}: same key, different body: 422 naming the header`, other.text);
  };
  // N concurrent requests with one key: one object id among the answers, every answer 200 or "in progress".
  const race = async (what, n, send) => {
    const rs = await Promise.all([...Array(n)].map(() => send()));
    const ids = new Set(rs.filter((x) => x.status === 200).map((x) => x.json.id));
    check(ids.size === 1, `${what}: concurrent requests with one key answer one object`, rs.map((x) => [x.status, x.json?.id || x.json?.error?.code]));
    check(rs.every((x) => x.status === 200 || (x.status === 409 && x.json?.error?.code === 'idempotency_key_in_use')),
          `${what}: concurrent requests answer 200 or 409 idempotency_key_in_use`, rs.map((x) => x.status));
    return rs;
  };

  // ---- POST /v1/files (multipart): the fingerprint is the parsed form, not the boundary
  const fileForm = (content, boundary) =>
    multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: 'd.jsonl', value: content }], boundary);
  const postFile = (api, content, key, boundary) => {
    const m = fileForm(content, boundary);
    return api('POST', '/v1/files', { body: m.body, headers: withKey(key, { 'content-type': m.type }) });
  };
  const sft = `${SFT_LINE}\n${SFT_LINE}\n`;
  let files0 = count('SELECT count(*) FROM files'), objects0 = objects();
  let r1 = await postFile(a, sft, 'file-1');
  check(r1.status === 200 && /^file-/.test(r1.json?.id), 'files: first upload 200', r1.text);
  let r2 = await postFile(a, sft, 'file-1', '----another-boundary-7');
  let r3 = await postFile(a, `${SFT_LINE}\n`, 'file-1');
  await checkReplayAndMismatch('files', r1, r2, r3);
  check(count('SELECT count(*) FROM files') === files0 + 1, 'files: one row after the first, the retry and the mismatch');
  check(await settled(objects, objects0 + 1) === objects0 + 1, 'files: one stored object', objects());
  const fileId = r1.json.id;

  files0 = count('SELECT count(*) FROM files');
  objects0 = objects();
  await race('files', 6, () => postFile(a, sft, 'file-race'));
  check(count('SELECT count(*) FROM files') === files0 + 1, 'files: six racing uploads with one key make one row',
        count('SELECT count(*) FROM files') - files0);
  check(await settled(objects, objects0 + 1) === objects0 + 1, 'files: the racing losers\' objects are deleted', objects() - objects0);

  r1 = await postFile(b, sft, 'file-1');
  check(r1.status === 200 && r1.json.id !== fileId && r1.headers.get('idempotent-replayed') === null,
        'files: another tenant\'s same key is independent', r1.text);
  check(stack.psql("SELECT count(*) FROM files f JOIN tenants t ON t.id = f.tenant_id WHERE t.name = 'beta'") === '1',
        'files: beta\'s upload is beta\'s');

  // ---- POST /v1/uploads
  const uploadBody = (bytes) => ({ filename: 'big.jsonl', purpose: 'fine-tune', bytes, mime_type: 'text/jsonl' });
  const part = SFT_LINE + '\n';
  const uploads0 = count('SELECT count(*) FROM uploads');
  r1 = await a('POST', '/v1/uploads', { json: uploadBody(part.length * 2), headers: withKey('up-1') });
  check(r1.status === 200 && /^upload_/.test(r1.json?.id), 'uploads: create 200', r1.text);
  r2 = await a('POST', '/v1/uploads', { json: uploadBody(part.length * 2), headers: withKey('up-1') });
  r3 = await a('POST', '/v1/uploads', { json: uploadBody(part.length * 3), headers: withKey('up-1') });
  await checkReplayAndMismatch('uploads', r1, r2, r3);
  check(count('SELECT count(*) FROM uploads') === uploads0 + 1, 'uploads: one row');
  const up = r1.json.id;
  await race('uploads', 6, () => a('POST', '/v1/uploads', { json: uploadBody(part.length * 2), headers: withKey('up-race') }));
  check(count('SELECT count(*) FROM uploads') === uploads0 + 2, 'uploads: six racing creates with one key make one row');
  // The same key on another route names another request.
  r1 = await a('POST', '/v1/uploads', { json: uploadBody(part.length * 2), headers: withKey('file-1') });
  check(r1.status === 200 && r1.headers.get('idempotent-replayed') === null && r1.json.object === 'upload',
        'a key used on /v1/files is new on /v1/uploads', r1.text);
  check(stack.psql("SELECT string_agg(route, ',' ORDER BY route) FROM idempotency_keys k JOIN tenants t ON t.id = k.tenant_id " +
                   "WHERE t.name = 'alpha' AND key = 'file-1'") === 'POST /v1/files,POST /v1/uploads',
        'keys are stored per route');
  r1 = await b('POST', '/v1/uploads', { json: uploadBody(part.length * 2), headers: withKey('up-1') });
  check(r1.status === 200 && r1.json.id !== up, 'uploads: another tenant\'s same key is independent', r1.text);
  // A key lives 24 hours (migration 0039): once its row is older, the key is free again, and the same or
  // another body is a new request (its row replaced, not a second one).
  stack.psql(`UPDATE idempotency_keys k SET created_at = k.created_at - 86401 FROM tenants t
              WHERE t.id = k.tenant_id AND t.name = 'alpha' AND k.key = 'up-1'`);
  r1 = await a('POST', '/v1/uploads', { json: uploadBody(part.length * 3), headers: withKey('up-1') });
  check(r1.status === 200 && r1.json.id !== up && r1.headers.get('idempotent-replayed') === null,
        'uploads: an expired key with another body: a new upload, not a 422', r1.text);
  r2 = await a('POST', '/v1/uploads', { json: uploadBody(part.length * 3), headers: withKey('up-1') });
  check(r2.status === 200 && r2.json.id === r1.json.id && r2.headers.get('idempotent-replayed') === 'true',
        'uploads: the key, taken again, replays its new answer', r2.text);
  check(count('SELECT count(*) FROM uploads') === uploads0 + 5 && keyRows('up-1') === '2',
        'uploads: one new row; the key\'s rows: one each for alpha and beta', [count('SELECT count(*) FROM uploads') - uploads0, keyRows('up-1')]);

  // ---- POST /v1/uploads/{id}/parts
  const postPart = (api, id, data, key, boundary) => {
    const m = multipart([{ name: 'data', filename: 'blob', value: data }], boundary);
    return api('POST', `/v1/uploads/${id}/parts`, { body: m.body, headers: withKey(key, { 'content-type': m.type }) });
  };
  const parts = () => count(`SELECT count(*) FROM upload_parts WHERE upload_id = '${up}'`);
  const objects1 = objects();
  r1 = await postPart(a, up, part, 'part-1');
  check(r1.status === 200 && r1.json?.object === 'upload.part', 'parts: 200', r1.text);
  r2 = await postPart(a, up, part, 'part-1', '----other-boundary');
  r3 = await postPart(a, up, part.replace('hello', 'howdy'), 'part-1');
  await checkReplayAndMismatch('parts', r1, r2, r3);
  check(parts() === 1, 'parts: one row after the first, the retry and the mismatch', parts());
  const part1 = r1.json.id;
  await race('parts', 6, () => postPart(a, up, part, 'part-race'));
  check(parts() === 2, 'parts: six racing parts with one key make one row', parts());
  check(await settled(objects, objects1 + 2) === objects1 + 2, 'parts: two stored objects (the losers\' deleted)', objects() - objects1);
  const part2 = stack.psql(`SELECT id FROM upload_parts WHERE upload_id = '${up}' AND id <> '${part1}'`);

  // ---- POST /v1/uploads/{id}/complete
  const completeBody = { part_ids: [part1, part2] };
  const files1 = count('SELECT count(*) FROM files');
  r1 = await a('POST', `/v1/uploads/${up}/complete`, { json: completeBody, headers: withKey('complete-1') });
  check(r1.status === 200 && r1.json?.status === 'completed' && /^file-/.test(r1.json.file?.id), 'complete: 200 with the file', r1.text);
  r2 = await a('POST', `/v1/uploads/${up}/complete`, { json: completeBody, headers: withKey('complete-1') });
  r3 = await a('POST', `/v1/uploads/${up}/complete`, { json: { part_ids: [part2, part1] }, headers: withKey('complete-1') });
  await checkReplayAndMismatch('complete', r1, r2, r3);
  check(count('SELECT count(*) FROM files') === files1 + 1, 'complete: one file row');

  // Racing completes with one key on a fresh upload: one file.
  let r = await a('POST', '/v1/uploads', { json: uploadBody(part.length), headers: {} });
  const up2 = r.json.id;
  r = await postPart(a, up2, part, undefined);
  const up2part = r.json.id;
  const files2 = count('SELECT count(*) FROM files'), objects2 = objects();
  const rs = await race('complete', 4, () =>
    a('POST', `/v1/uploads/${up2}/complete`, { json: { part_ids: [up2part] }, headers: withKey('complete-race') }));
  check(count('SELECT count(*) FROM files') === files2 + 1, 'complete: racing completes with one key make one file',
        count('SELECT count(*) FROM files') - files2);
  check(new Set(rs.filter((x) => x.status === 200).map((x) => x.json.file.id)).size === 1, 'complete: every 200 names the same file');
  // The part's bytes go once the file is written; the losers' assembled files go too.
  check(await settled(objects, objects2) === objects2, 'complete: one assembled object replaces the part\'s', objects() - objects2);

  // ---- POST /v1/uploads/{id}/cancel
  r = await a('POST', '/v1/uploads', { json: uploadBody(10), headers: {} });
  const up3 = r.json.id;
  r1 = await a('POST', `/v1/uploads/${up3}/cancel`, { headers: withKey('cancel-1') });
  check(r1.status === 200 && r1.json?.status === 'cancelled', 'cancel upload: 200', r1.text);
  r2 = await a('POST', `/v1/uploads/${up3}/cancel`, { headers: withKey('cancel-1') });
  r3 = await a('POST', `/v1/uploads/${up3}/cancel`, { json: {}, headers: withKey('cancel-1') });
  await checkReplayAndMismatch('cancel upload', r1, r2, r3);
  // Refused after the transaction (a completed upload cannot be cancelled): the key is released.
  r1 = await a('POST', `/v1/uploads/${up}/cancel`, { headers: withKey('cancel-refused') });
  check(r1.status === 409 && r1.json?.error?.code === 'invalid_upload_state', 'cancel a completed upload: 409', r1.text);
  check(keyRows('cancel-refused') === '0', 'a refused cancel keeps no key');
  r2 = await a('POST', `/v1/uploads/${up}/cancel`, { headers: withKey('cancel-refused') });
  check(r2.status === 409 && r2.headers.get('idempotent-replayed') === null, 'the refused cancel runs again on retry', r2.text);
  r1 = await b('POST', `/v1/uploads/${up3}/cancel`, { headers: withKey('cancel-1') });
  check(r1.status === 404, 'cancel: another tenant\'s upload is a 404, with the same key too', r1.text);
  check(keyRows('cancel-1') === '1', 'a 404 keeps no key (only alpha\'s cancel-1 is stored)', keyRows('cancel-1'));
  r = await a('POST', '/v1/uploads', { json: uploadBody(10), headers: {} });
  const up4 = r.json.id;
  const cancels = await Promise.all([...Array(6)].map(() => a('POST', `/v1/uploads/${up4}/cancel`, { headers: withKey('cancel-race') })));
  check(cancels.every((x) => (x.status === 200 && x.json.status === 'cancelled') ||
                            (x.status === 409 && x.json?.error?.code === 'idempotency_key_in_use')),
        'cancel upload: racing cancels answer cancelled or in progress', cancels.map((x) => x.status));
  check(stack.psql(`SELECT status FROM idempotency_keys WHERE key = 'cancel-race'`) === '200', 'cancel upload: one stored answer');

  // ---- POST /v1/fine_tuning/jobs/{id}/cancel|pause|resume
  const trainingFile = fileId;
  const newJob = async () => {
    const x = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: trainingFile } });
    if (x.status !== 200) throw new Error(`job create failed: ${x.text}`);
    return x.json.id;
  };
  const events = (id) => count(`SELECT count(*) FROM job_events WHERE job_id = '${id}'`);
  const status = (id) => stack.psql(`SELECT status FROM jobs WHERE id = '${id}'`);
  const job = await newJob();
  r1 = await a('POST', `/v1/fine_tuning/jobs/${job}/pause`, { headers: withKey('pause-1') });
  check(r1.status === 200 && r1.json?.status === 'paused', 'pause: 200', r1.text);
  const ev = events(job);
  // Resumed in between without a key: a retried pause replays the first answer and changes nothing.
  r = await a('POST', `/v1/fine_tuning/jobs/${job}/resume`);
  check(r.status === 200 && r.json.status === 'queued', 'resume without a key: queued', r.text);
  r2 = await a('POST', `/v1/fine_tuning/jobs/${job}/pause`, { headers: withKey('pause-1') });
  r3 = await a('POST', `/v1/fine_tuning/jobs/${job}/pause`, { json: { reason: 'x' }, headers: withKey('pause-1') });
  await checkReplayAndMismatch('pause', r1, r2, r3);
  check(status(job) === 'queued' && events(job) === ev + 1, 'pause: the replay paused nothing again (only resume\'s event added)',
        [status(job), events(job) - ev]);
  // The same key on another job's pause is another route.
  const job2 = await newJob();
  r = await a('POST', `/v1/fine_tuning/jobs/${job2}/pause`, { headers: withKey('pause-1') });
  check(r.status === 200 && r.json.id === job2 && r.headers.get('idempotent-replayed') === null && status(job2) === 'paused',
        'pause: the same key on another job is independent', r.text);

  r1 = await a('POST', `/v1/fine_tuning/jobs/${job2}/resume`, { headers: withKey('resume-1') });
  check(r1.status === 200 && r1.json?.status === 'queued', 'resume: 200', r1.text);
  await a('POST', `/v1/fine_tuning/jobs/${job2}/pause`);
  r2 = await a('POST', `/v1/fine_tuning/jobs/${job2}/resume`, { headers: withKey('resume-1') });
  r3 = await a('POST', `/v1/fine_tuning/jobs/${job2}/resume`, { json: {}, headers: withKey('resume-1') });
  await checkReplayAndMismatch('resume', r1, r2, r3);
  check(status(job2) === 'paused', 'resume: the replay resumed nothing again', status(job2));

  // Racing pauses with one key on a queued job: one "paused" event.
  const job3 = await newJob();
  const pauses = await race('pause', 6, () => a('POST', `/v1/fine_tuning/jobs/${job3}/pause`, { headers: withKey('pause-race') }));
  check(pauses.filter((x) => x.status === 200).every((x) => x.json.status === 'paused'), 'pause race: every 200 says paused');
  check(count(`SELECT count(*) FROM job_events WHERE job_id = '${job3}' AND message = 'Fine-tuning job paused'`) === 1,
        'pause race: one paused event');

  r1 = await a('POST', `/v1/fine_tuning/jobs/${job3}/cancel`, { headers: withKey('jcancel-1') });
  check(r1.status === 200 && r1.json?.status === 'cancelled', 'job cancel: 200', r1.text);
  const evc = events(job3);
  r2 = await a('POST', `/v1/fine_tuning/jobs/${job3}/cancel`, { headers: withKey('jcancel-1') });
  r3 = await a('POST', `/v1/fine_tuning/jobs/${job3}/cancel`, { json: {}, headers: withKey('jcancel-1') });
  await checkReplayAndMismatch('job cancel', r1, r2, r3);
  check(events(job3) === evc, 'job cancel: the retry wrote no event');
  // Refused inside the transaction (a cancelled job cannot be paused): 409, key released.
  r = await a('POST', `/v1/fine_tuning/jobs/${job3}/pause`, { headers: withKey('jpause-refused') });
  check(r.status === 409 && r.json?.error?.code === 'invalid_job_state' && keyRows('jpause-refused') === '0',
        'a refused pause: 409, no key kept', r.text);
  r = await b('POST', `/v1/fine_tuning/jobs/${job3}/cancel`, { headers: withKey('jcancel-1') });
  check(r.status === 404, 'job cancel: another tenant\'s job is a 404, with the same key too', r.text);
  r = await b('POST', '/v1/fine_tuning/jobs/ftjob-nope/cancel', { headers: withKey('jcancel-404') });
  check(r.status === 404 && keyRows('jcancel-404') === '0', 'job cancel: a 404 keeps no key', r.text);

  // ---- malformed keys are refused before anything runs
  const uploadsBefore = count('SELECT count(*) FROM uploads');
  r = await a('POST', '/v1/uploads', { json: uploadBody(1), headers: withKey('has space') });
  check(r.status === 400 && r.json?.error?.message.includes('Idempotency-Key'), 'a malformed key: 400 naming the header', r.text);
  r = await a('POST', '/v1/uploads', { json: uploadBody(1), headers: withKey('k'.repeat(256)) });
  check(r.status === 400, 'a 256-character key: 400', r.text);
  r = await postFile(a, sft, 'bad\tkey');
  check(r.status === 400, 'a malformed key on a multipart upload: 400', r.text);
  check(count('SELECT count(*) FROM uploads') === uploadsBefore, 'malformed keys create nothing');
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
}
process.exit(summary());
