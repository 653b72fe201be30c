// downloads.mjs - streamed downloads against a real gateway and PostgreSQL, on the store the first
// argument names: `file` (a file:// directory) or `s3` (the s3rver tests/run.sh starts,
// WHET_TEST_S3_ENDPOINT). The second argument is api_put_dir, which stores a checkpoint with the real
// objstore_put_dir. Checked: GET /v1/files/{id}/content and GET .../checkpoints/{ckpt}/files/{name}
// (also `final`) are byte-identical to what was stored (SHA-256) with the right Content-Length, for
// multi-MiB objects that are not a multiple of the chunk, also several at once and through a client
// that pauses; single ranges (206, 416, a cut-off download resumed); clients that hang up mid-download leave a gateway that keeps answering (and exits
// cleanly: a sanitizer build reports leaks there); another tenant gets 404s; and, on file://, an
// object missing before the first byte is a clean 500 while one corrupted on disk is cut off before
// its last byte (the connection closes: the client never sees a complete body). A control character
// in a path parameter (%00 and the like) is a 400.
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { conform } from '../lib/openapi.mjs';
import { startStack, client, multipart, checker, SFT_LINE } from './harness.mjs';

const [storeKind, putDir] = process.argv.slice(2);
if (!['file', 's3'].includes(storeKind) || !putDir) throw new Error('usage: downloads.mjs file|s3 PATH_OF_api_put_dir');
const MiB = 1 << 20;
let storeEnv = {};
if (storeKind === 's3') {
  if (!process.env.WHET_TEST_S3_ENDPOINT) throw new Error('WHET_TEST_S3_ENDPOINT is not set (tests/run.sh starts s3rver)');
  storeEnv = {
    WHET_OBJECT_STORE: `s3://whet-test/downloads-${crypto.randomBytes(4).toString('hex')}`,
    WHET_S3_ENDPOINT: process.env.WHET_TEST_S3_ENDPOINT, AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER',
    AWS_REGION: 'us-east-1',
  };
}

const sha256 = (buf) => crypto.createHash('sha256').update(buf).digest('hex');

// GET with node:http, hashing the body as it comes. Options: pauseMs (stop reading for that long
// after the first MiB), abortAfter (hang up once that many bytes arrived). Resolves with
// {status, headers, bytes, sha, complete, error}.
function download(url, key, { pauseMs = 0, abortAfter = 0 } = {}) {
  return new Promise((resolve) => {
    const req = http.get(url, { headers: { authorization: `Bearer ${key}` } }, (res) => {
      const hash = crypto.createHash('sha256');
      let bytes = 0, paused = false, done = false;
      const json = (res.headers['content-type'] || '').startsWith('application/json') ? [] : null;
      const finish = (extra) => {
        if (done) return;
        done = true;
        // held to gateway/openapi.json like every fetch (an error body in full, a stream by its head)
        if (extra.complete || !json) conform('GET', url, res.statusCode, res.headers['content-type'], json ? Buffer.concat(json).toString() : '');
        resolve({ status: res.statusCode, headers: res.headers, bytes, sha: hash.digest('hex'), ...extra });
      };
      res.on('data', (chunk) => {
        if (json) json.push(chunk);
        hash.update(chunk);
        bytes += chunk.length;
        if (abortAfter && bytes >= abortAfter) {
          req.destroy();
          finish({ complete: false, aborted: true });
        } else if (pauseMs && !paused && bytes >= MiB) {
          paused = true;
          res.pause();
          setTimeout(() => res.resume(), pauseMs);
        }
      });
      res.on('end', () => finish({ complete: res.complete }));
      res.on('error', (e) => finish({ complete: false, error: String(e) }));
      res.on('aborted', () => finish({ complete: false, error: 'aborted' }));
      res.on('close', () => finish({ complete: res.complete }));
    });
    req.on('error', (e) => resolve({ status: 0, bytes: 0, complete: false, error: String(e) }));
  });
}

// GET with fetch, the whole body as a Buffer.
async function getBytes(url, key, headers = {}) {
  const res = await fetch(url, { headers: { authorization: `Bearer ${key}`, ...headers } });
  return { status: res.status, headers: res.headers, buf: Buffer.from(await res.arrayBuffer()) };
}

const { check, summary } = checker();
const stack = await startStack({ env: storeEnv });
const work = fs.mkdtempSync(path.join(stack.dir, 'ckpt-'));
try {
  const a = client(stack, 'alpha'), b = client(stack, 'beta');
  const alphaKey = stack.keys.alpha, betaKey = stack.keys.beta;
  const upload = async (api, purpose, filename, content) => {
    const m = multipart([{ name: 'purpose', value: purpose }, { name: 'file', filename, value: content }]);
    const r = await api('POST', '/v1/files', { body: m.body, headers: { 'content-type': m.type } });
    if (r.status !== 200) throw new Error(`upload failed: ${r.status} ${r.text}`);
    return r.json.id;
  };

  // ---- a file's content: 20 MiB and a bit (not a multiple of the 1 MiB chunk), random bytes
  const big = crypto.randomBytes(20 * MiB + 12345);
  const bigId = await upload(a, 'user_data', 'blob.bin', big);
  const contentUrl = `${stack.url}/v1/files/${bigId}/content`;
  let d = await download(contentUrl, alphaKey);
  check(d.status === 200 && d.complete && d.bytes === big.length && d.sha === sha256(big), 'file content: byte-identical', d);
  check(Number(d.headers?.['content-length']) === big.length, 'file content: content-length is the size', d.headers);
  check(d.headers?.['content-type'] === 'application/octet-stream' && /^req_/.test(d.headers?.['x-request-id'] || ''),
        'file content: type and request id', d.headers);
  // Several at once, one of them through a client that stops reading for a while.
  const many = await Promise.all([0, 0, 0, 800].map((pauseMs) => download(contentUrl, alphaKey, { pauseMs })));
  check(many.every((x) => x.status === 200 && x.complete && x.sha === sha256(big)), 'file content: four at once, one paused',
        many.map((x) => [x.status, x.bytes, x.complete]));
  // A small file (one chunk) and an empty one.
  const smallId = await upload(a, 'user_data', 'small.txt', 'just a few bytes');
  let r = await a('GET', `/v1/files/${smallId}/content`);
  check(r.status === 200 && r.text === 'just a few bytes', 'small file content', r.text);

  // ---- ranges: one range is a 206 with those bytes; a download cut off resumes where it stopped
  check(d.headers?.['accept-ranges'] === 'bytes', 'file content: accept-ranges', d.headers);
  let g = await getBytes(contentUrl, alphaKey, { range: 'bytes=1000-2099999' });
  check(g.status === 206 && g.headers.get('content-range') === `bytes 1000-2099999/${big.length}` &&
        g.buf.equals(big.subarray(1000, 2100000)), 'range: a middle slice', [g.status, g.headers.get('content-range'), g.buf.length]);
  g = await getBytes(contentUrl, alphaKey, { range: 'bytes=-100' });
  check(g.status === 206 && g.buf.equals(big.subarray(big.length - 100)), 'range: the last 100 bytes', g.status);
  g = await getBytes(contentUrl, alphaKey, { range: `bytes=${big.length}-` });
  check(g.status === 416 && g.headers.get('content-range') === `bytes */${big.length}`, 'range: past the end is a 416',
        [g.status, g.buf.toString()]);
  g = await getBytes(contentUrl, alphaKey, { range: 'bytes=0-1,5-6' });
  check(g.status === 200 && g.buf.length === big.length, 'range: several ranges are ignored (200, all of it)', g.status);
  for (const [range, status, from, to] of [['bytes=0-0', 206, 0, 1], [`bytes=-${10 * big.length}`, 206, 0, big.length],
                                           [`bytes=${big.length - 1}-${10 * big.length}`, 206, big.length - 1, big.length],
                                           ['bytes=abc', 200, 0, big.length], ['bytes=5-2', 200, 0, big.length],
                                           ['items=0-1', 200, 0, big.length], ['bytes=-0', 416]]) {
    g = await getBytes(contentUrl, alphaKey, { range });
    check(g.status === status && (status === 416 || g.buf.equals(big.subarray(from, to))), `range: ${range}`, [g.status, g.buf.length]);
  }
  g = await getBytes(contentUrl, alphaKey, { range: 'bytes=0-9', 'if-range': '"etag"' });
  check(g.status === 200 && g.buf.length === big.length, 'range: with an If-Range we cannot check, all of it', g.status);
  const cut = await download(contentUrl, alphaKey, { abortAfter: 3 * MiB });
  g = await getBytes(contentUrl, alphaKey, { range: `bytes=${cut.bytes}-` });
  check(cut.aborted && g.status === 206 && Buffer.concat([big.subarray(0, cut.bytes), g.buf]).equals(big),
        'range: a cut-off download resumes from where it stopped', [cut.bytes, g.status, g.buf.length]);

  // ---- another tenant: 404, no bytes
  r = await b('GET', `/v1/files/${bigId}/content`);
  check(r.status === 404 && r.json?.error?.code === 'not_found', 'another tenant: file content is a 404', r.text);
  r = await a('GET', '/v1/files/file-doesnotexist/content');
  check(r.status === 404, 'unknown file: 404', r.text);

  // ---- checkpoint files, written by objstore_put_dir
  const trainId = await upload(a, 'fine-tune', 'd.jsonl', `${SFT_LINE}\n${SFT_LINE}\n`);
  r = await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: trainId } });
  if (r.status !== 200) throw new Error(`job create: ${r.text}`);
  const job = r.json.id;
  const weights = crypto.randomBytes(9 * MiB + 777), config = Buffer.from('{"architectures":["LlamaForCausalLM"]}');
  fs.writeFileSync(path.join(work, 'model.safetensors'), weights);
  fs.writeFileSync(path.join(work, 'config.json'), config);
  const prefix = `checkpoints/${job}/step-10`;
  execFileSync(putDir, [prefix, work], { env: { ...process.env, WHET_OBJECT_STORE: `file://${stack.objects}`, ...storeEnv } });
  stack.psql(`INSERT INTO checkpoints (id, tenant_id, job_id, step_number, fine_tuned_model_checkpoint, metrics, object_prefix)
              SELECT 'ftckpt-10', tenant_id, id, 10, 'ft:whet-tiny:alpha::x:ckpt-step-10', '{}', '${prefix}' FROM jobs WHERE id = '${job}'`);
  stack.psql(`UPDATE jobs SET final_object_prefix = '${prefix}' WHERE id = '${job}'`);
  const ckptUrl = (ckpt, name) => `${stack.url}/v1/fine_tuning/jobs/${job}/checkpoints/${ckpt}/files/${name}`;
  d = await download(ckptUrl('ftckpt-10', 'model.safetensors'), alphaKey);
  check(d.status === 200 && d.complete && d.bytes === weights.length && d.sha === sha256(weights),
        'checkpoint file: byte-identical', d);
  check(Number(d.headers?.['content-length']) === weights.length &&
        d.headers?.['content-disposition'] === 'attachment; filename="model.safetensors"', 'checkpoint file: headers', d.headers);
  d = await download(ckptUrl('final', 'model.safetensors'), alphaKey);
  check(d.status === 200 && d.complete && d.sha === sha256(weights), 'final model file: byte-identical', d);
  g = await getBytes(ckptUrl('ftckpt-10', 'model.safetensors'), alphaKey, { range: `bytes=${5 * MiB}-` });
  check(g.status === 206 && g.buf.equals(weights.subarray(5 * MiB)), 'checkpoint file: a range', g.status);
  r = await a('GET', `/v1/fine_tuning/jobs/${job}/checkpoints/ftckpt-10/files/config.json`);
  check(r.status === 200 && r.text === config.toString(), 'checkpoint: a small file', r.text);
  r = await a('GET', `/v1/fine_tuning/jobs/${job}/checkpoints/ftckpt-10/files`);
  const listed = Object.fromEntries((r.json?.data || []).map((f) => [f.name, f]));
  check(r.status === 200 && listed['model.safetensors']?.bytes === weights.length &&
        listed['model.safetensors']?.sha256 === sha256(weights), 'checkpoint files: listed with size and sha256', r.json);
  // Each checkpoint file download is in the audit log (gateway/audit.c), written as its stream starts: in
  // the order the writes commit, which for a download and the request after it may not be theirs.
  const audited = () => stack.psql(`SELECT string_agg(target || ' ' || (detail->>'status'), ',') FROM audit_log
                                    WHERE action = 'checkpoint_file.download' AND actor LIKE 'key-%'`).split(',').sort().join(',');
  for (let i = 0; i < 100 && audited().split(',').length < 4; i++) await new Promise((res) => setTimeout(res, 50));
  const downloads = [`${job}/final/model.safetensors 200`, `${job}/ftckpt-10/config.json 200`,
    `${job}/ftckpt-10/model.safetensors 200`, `${job}/ftckpt-10/model.safetensors 206`];
  check(audited() === downloads.join(','), 'checkpoint downloads: audited', audited());
  r = await a('GET', `/v1/fine_tuning/jobs/${job}/checkpoints/ftckpt-10/files/nope.bin`);
  check(r.status === 404 && r.json?.error?.param === 'name', 'checkpoint: a name not in the manifest is a 404', r.text);
  // A control character in a path parameter is a 400 naming it: "%00.json" must not read as the name before it.
  for (const name of ['model.safetensors%00.json', 'model.safetensors%0A', 'model%7F.safetensors', '%1Fconfig.json']) {
    r = await a('GET', `/v1/fine_tuning/jobs/${job}/checkpoints/final/files/${name}`);
    check(r.status === 400 && r.json?.error?.param === 'name' && r.json.error.type === 'invalid_request_error' &&
          /control character/.test(r.json.error.message), `checkpoint: ${name} is a 400`, r.text);
  }
  r = await a('GET', `/v1/fine_tuning/jobs/${job}%00x/checkpoints/final/files/model.safetensors`);
  check(r.status === 400 && r.json?.error?.param === 'job', 'checkpoint: a control character in the job id is a 400', r.text);
  r = await b('GET', `/v1/fine_tuning/jobs/${job}/checkpoints/ftckpt-10/files/model.safetensors`);
  check(r.status === 404 && !r.text.includes('safetensors'), 'another tenant: checkpoint file is a 404', r.text);
  r = await b('GET', `/v1/fine_tuning/jobs/${job}/checkpoints/final/files/model.safetensors`);
  check(r.status === 404, 'another tenant: final model file is a 404', r.text);

  // ---- clients that hang up mid-download: the gateway stops reading and keeps answering
  const hangups = await Promise.all([1, 2, 3, 5, 8, 13].map((mib, i) =>
    download(i % 2 ? contentUrl : ckptUrl('ftckpt-10', 'model.safetensors'), alphaKey, { abortAfter: mib * MiB / 2 })));
  check(hangups.every((x) => x.status === 200 && x.aborted), 'hang-ups: every client got its first bytes and left',
        hangups.map((x) => [x.status, x.bytes]));
  r = await a('GET', `/v1/files/${bigId}`);
  check(r.status === 200 && r.json?.bytes === big.length, 'after hang-ups: the gateway answers', r.text);
  d = await download(contentUrl, alphaKey);
  check(d.status === 200 && d.complete && d.sha === sha256(big), 'after hang-ups: a whole download still works', d);

  if (storeKind === 'file') {
    // ---- an object gone before the first byte: a clean OpenAI-shaped 500
    const key = stack.psql(`SELECT object_key FROM files WHERE id = '${smallId}'`);
    fs.rmSync(path.join(stack.objects, key));
    r = await a('GET', `/v1/files/${smallId}/content`);
    check(r.status === 500 && r.json?.error?.code === 'storage_error' && r.json.error.type === 'server_error',
          'missing object: 500 storage_error before any byte', r.text);
    // ---- corrupted on disk after the upload: the stream is cut before its last byte
    const blob = path.join(stack.objects, prefix, 'model.safetensors');
    const fd = fs.openSync(blob, 'r+');
    fs.writeSync(fd, Buffer.from([weights[100] ^ 0xff]), 0, 1, 100);
    fs.closeSync(fd);
    d = await download(ckptUrl('ftckpt-10', 'model.safetensors'), alphaKey);
    check(d.status === 200 && !d.complete && d.bytes < weights.length, 'corrupted object: the body is cut off', d);
    r = await a('GET', `/v1/files/${bigId}`);
    check(r.status === 200, 'after a cut-off stream: the gateway answers', r.text);
    check(stack.logTail(200).includes('checksum mismatch'), 'corrupted object: logged as a checksum mismatch');
  }
} catch (e) {
  check(false, 'no exception', String(e.stack || e));
}
const stopped = await stack.stop();
check(stopped === null, 'the gateway exits cleanly (no sanitizer report)', stopped);
if (summary()) {
  console.error(stack.logTail ? stack.logTail(60) : '');
  process.exitCode = 1;
}
