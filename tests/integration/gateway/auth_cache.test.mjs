// auth_cache.test.mjs - the per-loop cache of verified credentials (server_auth.c) and its bound when
// the gateway does not listen for changes (WHET_GATEWAY_REPLICA=0): a key revoked, or a tenant
// disabled, behind the gateway's back (in SQL, by another gateway replica) keeps working at most
// WHET_GATEWAY_AUTH_CACHE_MS; after that every loop refuses it. (Through this
// gateway's operator API the change is immediate: auth.test.mjs.) The test also shows the cache is
// used at all: right after the revocation in SQL a warm key is still admitted on the loop that
// cached it, which a gateway reading the database on every request would refuse.
import test from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { conform } from '../lib/openapi.mjs';
import { startStack, dumpLogOnFailure, sleep } from '../lib/gateway.mjs';

const TTL_MS = 1500;
// Without the whet_auth listener (which empties the cache at once: scale_gateways), the TTL is the bound.
const stack = await startStack({ env: { WHET_GATEWAY_AUTH_CACHE_MS: String(TTL_MS), WHET_GATEWAY_REPLICA: '0' }, threads: 2 });
test.after(async () => { dumpLogOnFailure(stack); await stack.stop(); });

// One keep-alive connection stays on one event loop, so its requests hit that loop's cache.
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
function whoami(key) {
  return new Promise((resolve, reject) => {
    const req = http.request(`${stack.url}/v1/whoami`, { agent, headers: { authorization: `Bearer ${key}` } }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => {
        conform('GET', `${stack.url}/v1/whoami`, res.statusCode, res.headers['content-type'], body); // held to openapi.json
        resolve({ status: res.statusCode, body });
      });
    });
    req.on('error', reject);
    req.end();
  });
}
// Fresh connections land on either loop: all of them must refuse once the TTL has passed.
async function everyLoopRefuses(key, pattern) {
  for (let i = 0; i < 8; i++) {
    const res = await stack.request('GET', '/v1/whoami', { key, headers: { connection: 'close' } });
    assert.equal(res.status, 401, res.text);
    assert.match(res.json.error.message, pattern);
  }
}

test('a key revoked in SQL keeps working at most the cache TTL, then is refused everywhere', async () => {
  const t = await stack.createTenant('cached');
  assert.equal((await whoami(t.key)).status, 200); // now cached on this connection's loop
  stack.psql(`UPDATE api_keys SET revoked_at = whet_now() WHERE id = '${t.keyId}'`);
  const revokedAt = Date.now();
  const warm = await whoami(t.key);
  if (Date.now() - revokedAt < TTL_MS - 200) assert.equal(warm.status, 200, 'the cached entry answered, not the database');
  await sleep(TTL_MS + 300 - (Date.now() - revokedAt));
  assert.equal((await whoami(t.key)).status, 401, 'the warm loop refuses after the TTL');
  await everyLoopRefuses(t.key, /revoked/);
});

test('a tenant disabled in SQL is refused within the cache TTL', async () => {
  const t = await stack.createTenant('cached2');
  assert.equal((await whoami(t.key)).status, 200);
  stack.psql(`UPDATE tenants SET disabled = true WHERE id = '${t.id}'`);
  await sleep(TTL_MS + 300);
  await everyLoopRefuses(t.key, /disabled/);
});

test.after(() => agent.destroy());
