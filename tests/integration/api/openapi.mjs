// openapi.mjs - gateway/openapi.json is the API's contract: it parses and validates as OpenAPI 3.1
// (@apidevtools/swagger-parser), documents exactly the routes the gateway registers (every
// http_route() call in gateway/*.c, and nothing else), the gateway serves it byte for byte at
// /v1/openapi.json without credentials, the validator every other test goes through
// (../lib/openapi.mjs) refuses answers that drift from it, and the operator's read-only routes that no
// other integration test calls (nodes, usage as JSON and CSV) answer as documented.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import { checker } from './harness.mjs';
import { startStack } from '../lib/gateway.mjs';
import { OPENAPI_PATH, document, operations, check as conforms } from '../lib/openapi.mjs';

const require = createRequire(new URL('../../package.json', import.meta.url));
const SwaggerParser = require('@apidevtools/swagger-parser');
const { check, summary } = checker();

// 1. A valid OpenAPI 3.1 document (the parser dereferences it; validate() throws on any error).
try {
  const api = await SwaggerParser.validate(structuredClone(document));
  check(api.openapi === '3.1.0', 'openapi 3.1.0', api.openapi);
} catch (e) {
  check(false, 'swagger-parser validates gateway/openapi.json', String(e.message || e));
}

// 2. The routes in the source and the operations in the document are the same set.
const gatewayDir = new URL('../../../gateway/', import.meta.url).pathname;
const registered = new Set();
for (const f of fs.readdirSync(gatewayDir).filter((n) => n.endsWith('.c'))) {
  const src = fs.readFileSync(gatewayDir + f, 'utf8');
  for (const m of src.matchAll(/http_route\(rt,\s*"([A-Z]+)",\s*"([^"]+)"/g)) registered.add(`${m[1]} ${m[2]}`);
}
const documented = new Set(operations.map((o) => `${o.method} ${o.template}`));
check(registered.size >= 40, 'the gateway registers its routes with http_route(rt, METHOD, PATTERN, ...)', registered.size);
for (const r of registered) check(documented.has(r), `route ${r} is documented in gateway/openapi.json`);
for (const d of documented) check(registered.has(d), `documented operation ${d} is a route of the gateway`);

// 3. The validator refuses drift: an undocumented status, a body of the wrong shape, a bad error body.
const file = { id: 'file-1', object: 'file', bytes: 3, created_at: 1, expires_at: null, filename: 'a', purpose: 'fine-tune',
               status: 'processed', status_details: null };
check(conforms('GET', '/v1/files/file-1', 200, 'application/json', JSON.stringify(file)).length === 0, 'validator: a file conforms');
check(conforms('GET', '/v1/files/file-1', 200, 'application/json', JSON.stringify({ ...file, bytes: '3' })).length > 0,
      'validator: bytes as a string is refused');
check(conforms('GET', '/v1/files/file-1', 200, 'application/json', JSON.stringify({ ...file, extra: 1 })).length > 0,
      'validator: an undocumented field is refused');
check(conforms('GET', '/v1/files/file-1', 418, 'application/json', '{}').length > 0, 'validator: an undocumented status is refused');
check(conforms('GET', '/v1/files/file-1', 404, 'application/json', JSON.stringify({ error: { message: 'x' } })).length > 0,
      'validator: an error without type, param and code is refused');
check(conforms('GET', '/v1/nowhere', 200, 'application/json', '{}').length > 0, 'validator: an answer on an undocumented path must be a 404');
check(conforms('GET', '/v1/files/file-1/content', 200, 'text/html', '').length > 0, 'validator: an undocumented content type is refused');

// 4. Served, public, identical to the file; the operator's read-only routes (each answer is validated
// by ../lib/openapi.mjs on the way).
const stack = await startStack();
try {
  const r = await stack.request('GET', '/v1/openapi.json');
  check(r.status === 200, 'GET /v1/openapi.json without credentials: 200', r.status);
  check((r.headers.get('content-type') || '').startsWith('application/json'), 'served as application/json', r.headers.get('content-type'));
  check(r.text === fs.readFileSync(OPENAPI_PATH, 'utf8'), 'the served document is gateway/openapi.json byte for byte');
  const wrong = await stack.request('POST', '/v1/openapi.json', { body: {} });
  check(wrong.status === 405, 'POST /v1/openapi.json: 405', wrong.status);
  const token = stack.adminToken();
  const nodes = await stack.request('GET', '/admin/v1/nodes', { token });
  check(nodes.status === 200 && nodes.json.object === 'list' && Array.isArray(nodes.json.data), 'GET /admin/v1/nodes: a list', nodes.text);
  const usage = await stack.request('GET', '/admin/v1/usage?start_time=0', { token });
  check(usage.status === 200 && usage.json.object === 'list', 'GET /admin/v1/usage: a list', usage.text);
  const csv = await stack.request('GET', '/admin/v1/usage?format=csv', { token });
  check(csv.status === 200 && csv.text.startsWith('tenant,tenant_id,job_id,'), 'GET /admin/v1/usage?format=csv: the CSV header', csv.text);
  const bad = await stack.request('GET', '/admin/v1/usage?format=xml', { token });
  check(bad.status === 400 && bad.json.error.param === 'format', 'an unknown format is a 400 naming the parameter', bad.text);
  console.log(`openapi: ${documented.size} operations on ${Object.keys(document.paths).length} paths, ` +
              `${Object.keys(document.components.schemas).length} schemas, ${fs.statSync(OPENAPI_PATH).size} bytes`);
} finally {
  let why = null;
  try { await stack.stop(); } catch (e) { why = String(e.message || e); }
  check(why === null, 'gateway stopped cleanly', why);
}
process.exit(summary());
