// files.mjs - /v1/files against a real gateway and PostgreSQL: upload (validated, stored, row written),
// list (purpose, order, after, limit), retrieve, content, delete; malformed uploads are refused with
// the line and field named and leave no row and no object; another tenant's file is a 404 everywhere.
import { startStack, client, multipart, checker, listFiles, SFT_LINE, DPO_LINE } from './harness.mjs';

const { check, summary, failed } = checker();
const stack = await startStack();
try {
  const a = client(stack, 'alpha'), b = client(stack, 'beta');
  const upload = (api, purpose, filename, content) => {
    const fields = [];
    if (purpose !== null) fields.push({ name: 'purpose', value: purpose });
    if (content !== null) fields.push({ name: 'file', filename, type: 'application/jsonl', value: content });
    const m = multipart(fields);
    return api('POST', '/v1/files', { body: m.body, headers: { 'content-type': m.type } });
  };
  const rows = () => Number(stack.psql('SELECT count(*) FROM files'));
  const objects = () => listFiles(stack.objects).length;

  // A valid fine-tune file.
  const content = `${SFT_LINE}\n${SFT_LINE}\n${SFT_LINE}\n`;
  let r = await upload(a, 'fine-tune', 'train.jsonl', content);
  check(r.status === 200, 'upload: 200', r.text);
  const f1 = r.json;
  check(f1.object === 'file' && f1.id.startsWith('file-'), 'upload: file object', f1);
  check(f1.bytes === Buffer.byteLength(content) && f1.filename === 'train.jsonl' && f1.purpose === 'fine-tune', 'upload: fields', f1);
  check(f1.status === 'processed' && typeof f1.created_at === 'number' && 'status_details' in f1, 'upload: status', f1);
  check(stack.psql(`SELECT format || ':' || line_count FROM files WHERE id = '${f1.id}'`) === 'sft:3', 'upload: format and line count stored');
  check(objects() === 1, 'upload: one object stored', listFiles(stack.objects));

  // DPO and a non-fine-tune purpose.
  r = await upload(a, 'fine-tune', 'prefs.jsonl', DPO_LINE + '\n');
  check(r.status === 200, 'dpo upload: 200', r.text);
  const f2 = r.json;
  check(stack.psql(`SELECT format FROM files WHERE id = '${f2.id}'`) === 'dpo', 'dpo upload: format dpo');
  r = await upload(a, 'user_data', 'notes.txt', 'not json at all');
  check(r.status === 200, 'user_data upload is not checked as JSONL', r.text);
  const f3 = r.json;

  // Refused uploads name the line and the field, and leave no row and no object behind.
  const before = [rows(), objects()];
  r = await upload(a, 'fine-tune', 'bad.jsonl', `${SFT_LINE}\n${JSON.stringify({ messages: [{ role: 'user', content: 'a' }, { role: 'robot', content: 'b' }] })}\n`);
  check(r.status === 400 && r.json?.error?.param === 'file', 'invalid line: 400 param file', r.text);
  check(r.json?.error?.message?.includes('line 2: messages[1].role: expected one of'), 'invalid line: line and field named', r.json);
  check(r.json?.error?.type === 'invalid_request_error', 'invalid line: error type', r.json);
  r = await upload(a, 'fine-tune', 'bad.jsonl', '{"messages": [\n');
  check(r.status === 400 && /line 1: invalid JSON/.test(r.json?.error?.message), 'malformed JSON line: 400', r.text);
  r = await upload(a, 'fine-tune', 'empty.jsonl', '');
  check(r.status === 400 && /no examples/.test(r.json?.error?.message), 'empty fine-tune file: 400', r.text);
  r = await upload(a, 'fine-tuning', 'x.jsonl', SFT_LINE);
  check(r.status === 400 && r.json?.error?.param === 'purpose', 'unknown purpose: 400 param purpose', r.text);
  r = await upload(a, null, 'x.jsonl', SFT_LINE);
  check(r.status === 400 && r.json?.error?.param === 'purpose', 'missing purpose: 400', r.text);
  r = await upload(a, 'fine-tune', undefined, SFT_LINE);
  check(r.status === 400 && r.json?.error?.param === 'file', 'file part without a filename: 400', r.text);
  r = await a('POST', '/v1/files', { json: { purpose: 'fine-tune' } });
  check(r.status === 400 && /multipart\/form-data/.test(r.json?.error?.message), 'JSON body instead of multipart: 400', r.text);
  const m = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: 'a.jsonl', value: SFT_LINE }]);
  r = await a('POST', '/v1/files', { body: m.body.subarray(0, m.body.length - 20), headers: { 'content-type': m.type } });
  check(r.status === 400 && /malformed multipart/.test(r.json?.error?.message), 'truncated multipart: 400', r.text);
  check(rows() === before[0] && objects() === before[1], 'refused uploads leave no row and no object', [rows(), objects()]);

  // Retrieve and content.
  r = await a('GET', `/v1/files/${f1.id}`);
  check(r.status === 200 && r.json.id === f1.id && r.json.bytes === f1.bytes, 'retrieve', r.text);
  r = await a('GET', `/v1/files/${f1.id}/content`);
  check(r.status === 200 && r.text === content, 'content returns the bytes', r.text.slice(0, 80));

  // List: newest first by default, purpose filter, ascending order, cursor pagination.
  r = await a('GET', '/v1/files');
  check(r.status === 200 && r.json.object === 'list', 'list: 200', r.text);
  check(JSON.stringify(r.json.data.map((f) => f.id)) === JSON.stringify([f3.id, f2.id, f1.id]), 'list: newest first', r.json);
  check(r.json.has_more === false && r.json.first_id === f3.id && r.json.last_id === f1.id, 'list: envelope', r.json);
  r = await a('GET', '/v1/files?purpose=fine-tune&order=asc');
  check(JSON.stringify(r.json.data.map((f) => f.id)) === JSON.stringify([f1.id, f2.id]), 'list: purpose and asc', r.json);
  r = await a('GET', '/v1/files?limit=1');
  check(r.json.data.length === 1 && r.json.data[0].id === f3.id && r.json.has_more === true, 'list: limit 1 has more', r.json);
  r = await a('GET', `/v1/files?limit=1&after=${f3.id}`);
  check(r.json.data.length === 1 && r.json.data[0].id === f2.id && r.json.has_more === true, 'list: after', r.json);
  r = await a('GET', `/v1/files?limit=5&after=${f2.id}`);
  check(r.json.data.length === 1 && r.json.data[0].id === f1.id && r.json.has_more === false, 'list: last page', r.json);
  r = await a('GET', '/v1/files?limit=0');
  check(r.status === 400 && r.json?.error?.param === 'limit', 'list: limit 0 refused', r.text);
  r = await a('GET', '/v1/files?order=sideways');
  check(r.status === 400 && r.json?.error?.param === 'order', 'list: bad order refused', r.text);

  // A file as a Windows editor saves it: a UTF-8 byte-order mark first and CRLF line ends. Accepted at
  // upload, and again when a job is created on it (validated once more, from the store).
  const windows = `\ufeff${SFT_LINE}\r\n${SFT_LINE}\r\n`;
  r = await upload(a, 'fine-tune', 'windows.jsonl', windows);
  check(r.status === 200, 'BOM and CRLF: upload accepted', r.text);
  const fw = r.json;
  check(fw?.bytes === Buffer.byteLength(windows) &&
        stack.psql(`SELECT format || ':' || line_count FROM files WHERE id = '${fw?.id}'`) === 'sft:2', 'BOM and CRLF: sft, 2 lines', fw);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: fw?.id } });
  check(r.status === 200 && r.json?.status === 'queued', 'BOM and CRLF: a job is created on it', r.text);
  r = await upload(a, 'fine-tune', 'late-bom.jsonl', `${SFT_LINE}\n\ufeff${SFT_LINE}\n`);
  check(r.status === 400 && /line 2: invalid JSON at column 1/.test(r.json?.error?.message), 'a BOM on line 2 is refused', r.text);

  // Tenant isolation: beta sees nothing of alpha's and gets 404s, never 403s.
  r = await b('GET', '/v1/files');
  check(r.status === 200 && r.json.data.length === 0, 'isolation: beta lists nothing', r.json);
  for (const [method, path] of [['GET', `/v1/files/${f1.id}`], ['GET', `/v1/files/${f1.id}/content`], ['DELETE', `/v1/files/${f1.id}`]]) {
    r = await b(method, path);
    check(r.status === 404 && r.json?.error?.message === `no such file: ${f1.id}`, `isolation: ${method} ${path} is 404 for beta`, r.text);
  }
  r = await b('GET', `/v1/files?after=${f2.id}`);
  check(r.status === 200 && r.json.data.length === 0, 'isolation: another tenant\'s cursor reveals nothing', r.json);

  // Unauthenticated.
  r = await a('GET', '/v1/files', { key: '' });
  check(r.status === 401, 'no key: 401', r.text);

  // Delete: row and object go; then 404.
  r = await a('DELETE', `/v1/files/${f3.id}`);
  check(r.status === 200 && r.json.deleted === true && r.json.id === f3.id && r.json.object === 'file', 'delete', r.text);
  check(!listFiles(stack.objects).some((p) => p.includes(f3.id)), 'delete: object removed', listFiles(stack.objects));
  r = await a('GET', `/v1/files/${f3.id}`);
  check(r.status === 404, 'deleted file: 404', r.text);
  r = await a('DELETE', `/v1/files/${f3.id}`);
  check(r.status === 404, 'delete twice: 404', r.text);
  r = await a('GET', '/v1/files/file-doesnotexist');
  check(r.status === 404 && r.json?.error?.code !== undefined, 'unknown id: 404', r.text);
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
}

// An upload over the gateway's body limit is refused with 413 before anything is stored.
const small = await startStack({ tenants: ['alpha'], env: { WHET_GATEWAY_BODY_LIMIT: '65536' } });
try {
  const a = client(small, 'alpha');
  const m = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: 'big.jsonl', value: `${SFT_LINE}\n`.repeat(2000) }]);
  const r = await a('POST', '/v1/files', { body: m.body, headers: { 'content-type': m.type } });
  // (Past the hard limit h2o itself answers, with a plain-text body.)
  check(r.status === 413, 'oversize upload: 413', r.text.slice(0, 200));
  check(small.psql('SELECT count(*) FROM files') === '0' && listFiles(small.objects).length === 0, 'oversize upload: no row, no object');
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  const stopped = await small.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
}
process.exit(summary());
