// uploads.mjs - /v1/uploads against a real gateway and PostgreSQL: create, add parts, complete in the
// order part_ids gives (the file's bytes are the parts in that order, checked by MD5 and by the JSONL
// rules), retried completes, cancel, the size rules, and that a refused complete stores no file; another
// tenant's upload is a 404 everywhere.
import { createHash } from 'node:crypto';
import { startStack, client, multipart, checker, listFiles, SFT_LINE } from './harness.mjs';

const { check, summary, failed } = checker();
const stack = await startStack();
try {
  const a = client(stack, 'alpha'), b = client(stack, 'beta');
  const addPart = (api, id, bytes) => {
    const m = multipart([{ name: 'data', filename: 'blob', type: 'application/octet-stream', value: bytes }]);
    return api('POST', `/v1/uploads/${id}/parts`, { body: m.body, headers: { 'content-type': m.type } });
  };
  const fileRows = () => Number(stack.psql('SELECT count(*) FROM files'));
  const storedFiles = () => listFiles(stack.objects).filter((p) => p.startsWith('files/')).length;

  // Three parts sent out of order; part_ids puts them back.
  const lines = [0, 1, 2, 3, 4, 5].map((i) => JSON.stringify({ messages: [{ role: 'user', content: `q${i}` }, { role: 'assistant', content: `a${i}` }] }) + '\n');
  const content = lines.join('');
  const chunks = [lines.slice(0, 2).join(''), lines.slice(2, 3).join(''), lines.slice(3).join('')];
  let r = await a('POST', '/v1/uploads', { json: { filename: 'big.jsonl', purpose: 'fine-tune', bytes: Buffer.byteLength(content), mime_type: 'text/jsonl' } });
  check(r.status === 200, 'create: 200', r.text);
  const up = r.json;
  check(up.object === 'upload' && /^upload_/.test(up.id) && up.status === 'pending' && up.file === null, 'create: a pending upload', up);
  check(up.expires_at - up.created_at === 3600 && up.bytes === Buffer.byteLength(content) && up.filename === 'big.jsonl', 'create: fields', up);

  const partIds = [];
  for (const i of [2, 0, 1]) {
    r = await addPart(a, up.id, chunks[i]);
    check(r.status === 200 && r.json.object === 'upload.part' && r.json.upload_id === up.id && /^part_/.test(r.json.id), `part ${i}: 200`, r.text);
    partIds[i] = r.json.id;
  }
  r = await addPart(a, up.id, 'x'.repeat(10));
  check(r.status === 400 && r.json.error.param === 'data', 'a part beyond the declared bytes: 400', r.text);
  r = await b('POST', `/v1/uploads/${up.id}/complete`, { json: { part_ids: partIds } });
  check(r.status === 404, 'isolation: beta cannot complete alpha\'s upload', r.text);
  r = await addPart(b, up.id, 'x');
  check(r.status === 404, 'isolation: beta cannot add parts', r.text);
  r = await b('POST', `/v1/uploads/${up.id}/cancel`);
  check(r.status === 404, 'isolation: beta cannot cancel', r.text);

  // Refused completes: wrong MD5, unknown or repeated part, wrong total; nothing is stored.
  const before = [fileRows(), storedFiles()];
  r = await a('POST', `/v1/uploads/${up.id}/complete`, { json: { part_ids: partIds, md5: '0'.repeat(32) } });
  check(r.status === 400 && r.json.error.param === 'md5', 'wrong md5: 400', r.text);
  r = await a('POST', `/v1/uploads/${up.id}/complete`, { json: { part_ids: [partIds[0], 'part_nope'] } });
  check(r.status === 400 && r.json.error.param === 'part_ids[1]', 'unknown part: 400', r.text);
  r = await a('POST', `/v1/uploads/${up.id}/complete`, { json: { part_ids: [partIds[0], partIds[0]] } });
  check(r.status === 400 && /listed twice/.test(r.json.error.message), 'repeated part: 400', r.text);
  r = await a('POST', `/v1/uploads/${up.id}/complete`, { json: { part_ids: partIds.slice(0, 2) } });
  check(r.status === 400 && /the upload declared/.test(r.json.error.message), 'missing bytes: 400', r.text);
  // In the wrong order the lines still parse, so the MD5 is what catches it.
  const md5 = createHash('md5').update(content).digest('hex');
  r = await a('POST', `/v1/uploads/${up.id}/complete`, { json: { part_ids: [partIds[1], partIds[0], partIds[2]], md5 } });
  check(r.status === 400 && r.json.error.code === 'md5_mismatch', 'parts out of order: md5 mismatch', r.text);
  check(fileRows() === before[0] && storedFiles() === before[1], 'refused completes leave no file row and no object', [fileRows(), storedFiles()]);

  r = await a('POST', `/v1/uploads/${up.id}/complete`, { json: { part_ids: partIds, md5 } });
  check(r.status === 200 && r.json.status === 'completed' && r.json.file?.object === 'file', 'complete: 200 with the file', r.text);
  const file = r.json.file;
  check(file.bytes === Buffer.byteLength(content) && file.filename === 'big.jsonl' && file.purpose === 'fine-tune', 'complete: file fields', file);
  r = await a('GET', `/v1/files/${file.id}/content`);
  check(r.text === content, 'complete: the file is the parts in part_ids order', r.text.slice(0, 100));
  check(stack.psql(`SELECT format || ':' || line_count FROM files WHERE id = '${file.id}'`) === 'sft:6', 'complete: validated and counted');
  r = await a('POST', `/v1/uploads/${up.id}/complete`, { json: { part_ids: partIds, md5 } });
  check(r.status === 200 && r.json.file?.id === file.id, 'a retried complete answers like the first', r.text);
  await new Promise((res) => setTimeout(res, 300));
  check(!listFiles(stack.objects).some((p) => p.startsWith(`uploads/`)), 'complete: the parts\' objects are removed', listFiles(stack.objects));
  r = await addPart(a, up.id, 'x');
  check(r.status === 409, 'no parts after completion', r.text);
  r = await a('POST', `/v1/uploads/${up.id}/cancel`);
  check(r.status === 409, 'a completed upload cannot be cancelled', r.text);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: file.id } });
  check(r.status === 200, 'the assembled file trains', r.text);

  // An invalid fine-tune upload is refused at complete, naming the line; nothing is stored.
  const bad = `${SFT_LINE}\n{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": 3}]}\n`;
  r = await a('POST', '/v1/uploads', { json: { filename: 'bad.jsonl', purpose: 'fine-tune', bytes: Buffer.byteLength(bad), mime_type: 'application/jsonl' } });
  const up2 = r.json;
  const p1 = (await addPart(a, up2.id, bad.slice(0, 30))).json.id, p2 = (await addPart(a, up2.id, bad.slice(30))).json.id;
  const before2 = [fileRows(), storedFiles()];
  r = await a('POST', `/v1/uploads/${up2.id}/complete`, { json: { part_ids: [p1, p2] } });
  check(r.status === 400 && /line 2: messages\[1\]\.content: expected a string or an array/.test(r.json?.error?.message), 'invalid JSONL upload: line and field named', r.text);
  check(fileRows() === before2[0] && storedFiles() === before2[1], 'invalid upload: no file row, no object', [fileRows(), storedFiles()]);
  r = await a('POST', `/v1/uploads/${up2.id}/cancel`);
  check(r.status === 200 && r.json.status === 'cancelled', 'cancel: 200', r.text);
  r = await a('POST', `/v1/uploads/${up2.id}/cancel`);
  check(r.status === 200 && r.json.status === 'cancelled', 'cancel again: 200', r.text);
  await new Promise((res) => setTimeout(res, 300));
  check(!listFiles(stack.objects).some((p) => p.startsWith(`uploads/`)), 'cancel: the parts\' objects are removed', listFiles(stack.objects));
  r = await addPart(a, up2.id, 'x');
  check(r.status === 409, 'no parts after cancel', r.text);

  // Create's rules.
  const creates = [
    [{ filename: 'a.jsonl', purpose: 'fine-tune', bytes: 10 }, 'mime_type'],
    [{ filename: 'a.jsonl', purpose: 'fine-tune', bytes: 10, mime_type: 'image/png' }, 'mime_type'],
    [{ filename: 'a.jsonl', purpose: 'fine-tuning', bytes: 10, mime_type: 'text/jsonl' }, 'purpose'],
    [{ filename: 'a.jsonl', purpose: 'fine-tune', bytes: -1, mime_type: 'text/jsonl' }, 'bytes'],
    [{ filename: 'a.jsonl', purpose: 'fine-tune', bytes: 9e9, mime_type: 'text/jsonl' }, 'bytes'],
    [{ filename: '', purpose: 'fine-tune', bytes: 1, mime_type: 'text/jsonl' }, 'filename'],
    [{ filename: 'a.jsonl', purpose: 'fine-tune', bytes: 1, mime_type: 'text/jsonl', extra: 1 }, 'extra'],
    [{ filename: 'a.jsonl', purpose: 'fine-tune', bytes: 1, mime_type: 'text/jsonl', expires_after: { anchor: 'created_at', seconds: 10 } }, 'expires_after'],
  ];
  const uploadsBefore = stack.psql('SELECT count(*) FROM uploads');
  for (const [body, param] of creates) {
    r = await a('POST', '/v1/uploads', { json: body });
    check(r.status === 400 && r.json?.error?.param === param, `create refused: ${param}`, r.text);
  }
  check(stack.psql('SELECT count(*) FROM uploads') === uploadsBefore, 'refused creates leave no row');
  r = await a('POST', '/v1/uploads', { json: { filename: 'a.jsonl', purpose: 'fine-tune', bytes: 1, mime_type: 'text/jsonl', expires_after: { anchor: 'created_at', seconds: 7200 } } });
  check(r.status === 200 && r.json.expires_at - r.json.created_at === 7200, 'expires_after honoured', r.text);
  // An expired upload takes no parts.
  stack.psql(`UPDATE uploads SET expires_at = whet_now() - 10 WHERE id = '${r.json.id}'`);
  r = await addPart(a, r.json.id, 'x');
  check(r.status === 409 && r.json.error.code === 'upload_expired', 'expired upload: 409', r.text);
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
}
process.exit(summary());
