// body_limit.test.mjs - a body past the gateway's hard limit (WHET_GATEWAY_BODY_LIMIT) is refused by
// h2o before any handler runs; the answer must still be the OpenAI error body every other error has
// (status 413, type invalid_request_error, a message naming the limit and the Uploads API), with a
// request id, whether the size is announced by Content-Length or found while reading a chunked body,
// with or without credentials. Raw sockets, so that the test controls exactly what is sent: the body
// is never sent past the limit, so the server's close is a clean one and the answer can be read.
import test from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startStack, dumpLogOnFailure } from '../lib/gateway.mjs';

const LIMIT = 65536;
const stack = await startStack({ env: { WHET_GATEWAY_BODY_LIMIT: String(LIMIT) } });
test.after(async () => { dumpLogOnFailure(stack); await stack.stop(); });
const acme = await stack.createTenant('acme');

// Sends `head` (and `body`), reads until the server closes; resolves {status, headers, body, closed}.
function rawExchange(head, body = '') {
  return new Promise((resolve, reject) => {
    const u = new URL(stack.url);
    const sock = net.connect(Number(u.port), u.hostname);
    const chunks = [];
    const timer = setTimeout(() => { sock.destroy(); reject(new Error('no answer within 10 s')); }, 10000);
    sock.on('connect', () => sock.write(head + body));
    sock.on('data', (c) => chunks.push(c));
    const finish = (closed) => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('latin1');
      const split = text.indexOf('\r\n\r\n');
      if (split < 0) { reject(new Error(`no HTTP answer: ${JSON.stringify(text)}`)); return; }
      const lines = text.slice(0, split).split('\r\n');
      const headers = {};
      for (const l of lines.slice(1)) {
        const i = l.indexOf(':');
        headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
      }
      resolve({ status: Number(lines[0].split(' ')[1]), headers, body: text.slice(split + 4), closed });
    };
    sock.on('end', () => finish(true));
    sock.on('error', () => finish(false));
  });
}

function assertOpenAI413(res) {
  assert.equal(res.status, 413, JSON.stringify(res));
  assert.match(res.headers['content-type'], /^application\/json/);
  assert.match(res.headers['x-request-id'] || '', /^req_[A-Za-z0-9]{24}$/);
  assert.equal(Number(res.headers['content-length']), Buffer.byteLength(res.body, 'latin1'));
  const e = JSON.parse(res.body).error;
  assert.ok(e, res.body);
  assert.equal(e.type, 'invalid_request_error');
  assert.equal(e.code, 'request_too_large');
  assert.equal(e.param, null);
  assert.ok(e.message.includes(String(LIMIT)), `the message names the limit: ${e.message}`);
  assert.match(e.message, /\/v1\/uploads/, 'the message says what to do instead');
  assert.ok(res.closed, 'the connection is closed after the refusal');
}

test('Content-Length past the hard limit: OpenAI 413, before authentication', async () => {
  for (const auth of ['', `authorization: Bearer ${acme.key}\r\n`]) {
    const res = await rawExchange(`POST /v1/files HTTP/1.1\r\nhost: x\r\n${auth}content-type: multipart/form-data; ` +
                                  `boundary=b\r\ncontent-length: ${LIMIT + 1}\r\n\r\n`);
    assertOpenAI413(res);
  }
  assert.equal(stack.psql('SELECT count(*) FROM files'), '0');
});

test('a chunked body that grows past the hard limit: OpenAI 413', async () => {
  const size = LIMIT + 16;
  const res = await rawExchange(`POST /v1/files HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${acme.key}\r\n` +
                                `transfer-encoding: chunked\r\ncontent-type: multipart/form-data; boundary=b\r\n\r\n`,
                                `${size.toString(16)}\r\n${'x'.repeat(size)}`);
  assertOpenAI413(res);
});

test('HEAD past the limit gets the headers of the JSON error and no body', async () => {
  const res = await rawExchange(`HEAD /v1/files HTTP/1.1\r\nhost: x\r\ncontent-length: ${LIMIT + 1}\r\n\r\n`);
  assert.equal(res.status, 413);
  assert.match(res.headers['content-type'], /^application\/json/);
  assert.equal(res.body, '');
});

test('a body within the limit still reaches the handler (JSON limit on a JSON route answers itself)', async () => {
  // Under the hard limit but over the JSON limit (which the hard limit caps): the gateway's own 413.
  const body = 'x'.repeat(LIMIT - 10);
  const res = await rawExchange(`POST /v1/fine_tuning/jobs HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${acme.key}\r\n` +
                                `content-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n`, body);
  assert.equal(res.status, 400, res.body); // not JSON: the handler ran and refused it
  assert.equal(JSON.parse(res.body).error.code, 'invalid_json');
});

test('requests refused by h2o are counted in /metrics', async () => {
  const res = await stack.request('GET', '/metrics');
  const m = res.text.match(/^whet_http_requests_total\{route="[^"]*",code="413"\} (\d+)$/m);
  assert.ok(m && Number(m[1]) >= 4, `413s counted: ${res.text.split('\n').filter((l) => l.includes('413')).join(' | ')}`);
});
