// tls.test.mjs - HTTPS on the gateway itself (WHET_GATEWAY_TLS_CERT, WHET_GATEWAY_TLS_KEY), checked with
// curl: HTTP/2 chosen by ALPN, HTTP/1.1 for clients that ask for it, the certificate verified against
// its own CA file, an authenticated request, an upload and a ranged download over HTTP/2; plain HTTP
// on the TLS port gets no answer; half a configuration or an unreadable certificate stops the gateway
// with a message that names the variable or the file.
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startStack, startGateway, WHET_BIN, dumpLogOnFailure } from '../lib/gateway.mjs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'whet-tls-'));
const cert = path.join(dir, 'cert.pem'), key = path.join(dir, 'key.pem');
execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
                         '-subj', '/CN=whet-test', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost',
                         '-keyout', key, '-out', cert], { stdio: 'ignore' });
const tls = { WHET_GATEWAY_TLS_CERT: cert, WHET_GATEWAY_TLS_KEY: key, WHET_OBJECT_STORE: `file://${dir}/objects` };
const stack = await startStack({ env: tls });
test.after(async () => {
  dumpLogOnFailure(stack);
  await stack.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

// curl with the certificate as its only CA; returns {version, status, body} (-w appends them).
function curl(args) {
  const r = spawnSync('curl', ['-sS', '--cacert', cert, '-w', '\n%{http_version} %{http_code}', ...args], { encoding: 'utf8' });
  const lines = r.stdout.split('\n');
  const [version, status] = lines.pop().split(' ');
  return { rc: r.status, version, status: Number(status), body: lines.join('\n'), stderr: r.stderr };
}

test('the gateway listens on https and ALPN picks HTTP/2', () => {
  assert.match(stack.url, /^https:\/\/127\.0\.0\.1:\d+$/);
  const r = curl(['--http2', `${stack.url}/healthz`]);
  assert.deepEqual([r.rc, r.version, r.status], [0, '2', 200], r.stderr);
  assert.deepEqual(JSON.parse(r.body), { status: 'ok' });
  const ready = curl(['--http2', `${stack.url}/readyz`]);
  assert.deepEqual([ready.version, ready.status], ['2', 200]);
});

test('HTTP/1.1 over TLS for clients that ask for it', () => {
  const r = curl(['--http1.1', `${stack.url}/healthz`]);
  assert.deepEqual([r.rc, r.version, r.status], [0, '1.1', 200], r.stderr);
});

test('authenticated requests, an upload and a ranged download over HTTP/2', () => {
  const apiKey = execFileSync(WHET_BIN, ['tenant', 'create', 'acme'], {
    env: { ...process.env, WHET_DATABASE_URL: stack.databaseUrl }, encoding: 'utf8' }).trim();
  const auth = ['-H', `Authorization: Bearer ${apiKey}`];
  const who = curl(['--http2', ...auth, `${stack.url}/v1/whoami`]);
  assert.deepEqual([who.version, who.status], ['2', 200], who.body);
  assert.equal(JSON.parse(who.body).tenant, 'acme');
  const line = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }] });
  const content = `${line}\n`.repeat(200);
  fs.writeFileSync(path.join(dir, 'train.jsonl'), content);
  const up = curl(['--http2', ...auth, '-F', 'purpose=fine-tune', '-F', `file=@${path.join(dir, 'train.jsonl')}`, `${stack.url}/v1/files`]);
  assert.deepEqual([up.version, up.status], ['2', 200], up.body);
  const file = JSON.parse(up.body);
  assert.equal(file.bytes, Buffer.byteLength(content));
  const part = curl(['--http2', ...auth, '-H', 'Range: bytes=100-199', `${stack.url}/v1/files/${file.id}/content`]);
  assert.deepEqual([part.version, part.status], ['2', 206]);
  assert.equal(part.body, content.slice(100, 200));
  const whole = curl(['--http2', ...auth, `${stack.url}/v1/files/${file.id}/content`]);
  assert.equal(whole.body, content);
});

test('the certificate is checked: plain HTTP on the TLS port gets no answer', () => {
  const plain = curl(['--max-time', '5', stack.url.replace('https://', 'http://') + '/healthz']);
  assert.notEqual(plain.rc, 0, 'a plaintext request must not be answered');
  const noCa = spawnSync('curl', ['-sS', '-o', '/dev/null', `${stack.url}/healthz`], { encoding: 'utf8' });
  assert.notEqual(noCa.status, 0, 'a client without the CA refuses the self-signed certificate');
});

test('half a TLS configuration, or a certificate that cannot be read, stops the gateway', async () => {
  await assert.rejects(startGateway({ databaseUrl: stack.databaseUrl, env: { WHET_GATEWAY_TLS_CERT: cert } }),
                       /WHET_GATEWAY_TLS_CERT is set without WHET_GATEWAY_TLS_KEY/);
  await assert.rejects(startGateway({ databaseUrl: stack.databaseUrl,
                                      env: { WHET_GATEWAY_TLS_CERT: path.join(dir, 'missing.pem'), WHET_GATEWAY_TLS_KEY: key } }),
                       /missing\.pem as the gateway's certificate chain/);
  await assert.rejects(startGateway({ databaseUrl: stack.databaseUrl, env: { WHET_GATEWAY_TLS_CERT: key, WHET_GATEWAY_TLS_KEY: key } }),
                       /certificate chain/);
});
