// openapi.mjs - holds the gateway to its contract: importing this module wraps globalThis.fetch so that
// every answer a test receives from a gateway (a loopback URL under /v1, /admin/v1 or an operational
// path) is checked against gateway/openapi.json: the operation exists (else the answer must be a
// 404/405/400 error), its status is documented, the content type is one the document lists, and a
// JSON body validates against the schema (ajv, JSON Schema 2020-12 as OpenAPI 3.1 uses). A mismatch
// throws from fetch (the request fails the test) and, should a caller swallow it, sets the exit
// status at the end. Tests that use node:http call conform() with what they received.
//
// Every checked answer is appended as `METHOD PATH STATUS` to WHET_OPENAPI_COVERAGE_DIR/<pid>.txt
// when that variable is set; tests/integration/api/openapi_coverage.mjs turns those files into the
// share of documented operations the suite exercised.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(new URL('../../package.json', import.meta.url));
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats');

export const OPENAPI_PATH = new URL('../../../gateway/openapi.json', import.meta.url).pathname;
export const document = JSON.parse(fs.readFileSync(OPENAPI_PATH, 'utf8'));

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addFormat('binary', true);
ajv.addSchema(document, 'openapi.json');

// The documented operations, each with its path split into segments (null: a parameter).
export const operations = [];
for (const [template, item] of Object.entries(document.paths)) {
  for (const [method, op] of Object.entries(item)) {
    if (!op || !op.responses) continue;
    const segments = template.split('/').slice(1).map((s) => (/^\{.*\}$/.test(s) ? null : s));
    operations.push({ method: method.toUpperCase(), template, op, segments, literals: segments.filter(Boolean).length });
  }
}

// The operation for method and path, as the gateway's router picks it (most literal segments win;
// a trailing slash names the same resource); {op} or {status: 404|405} when there is none.
export function findOperation(method, urlPath) {
  let parts = urlPath.split('/').slice(1);
  if (parts.length > 1 && parts[parts.length - 1] === '') parts = parts.slice(0, -1);
  let best = null, pathMatched = false;
  for (const o of operations) {
    if (o.segments.length !== parts.length) continue;
    if (!o.segments.every((s, i) => (s === null ? parts[i] !== '' : s === parts[i]))) continue;
    pathMatched = true;
    if (o.method !== method) continue;
    if (!best || o.literals > best.literals) best = o;
  }
  return best ? { op: best } : { status: pathMatched ? 405 : 404 };
}

const validators = new Map();
function validatorFor(pointer) {
  let v = validators.get(pointer);
  if (!v) {
    v = ajv.getSchema(`openapi.json#${pointer}`);
    validators.set(pointer, v);
  }
  return v;
}

const escapePointer = (s) => s.replace(/~/g, '~0').replace(/\//g, '~1');

// The violations of one answer (an empty list when it conforms). `body` is the text (JSON answers only).
export function check(method, urlPath, status, contentType, body) {
  const found = findOperation(method, urlPath);
  const errorPointer = '/components/schemas/Error';
  const problems = [];
  let pointer, responseObj;
  if (!found.op) {
    // No operation: the router's own answer (unknown path, other method, or a bad path parameter).
    if (![found.status, 400].includes(status)) problems.push(`no documented operation, yet status ${status} (expected ${found.status})`);
    pointer = errorPointer;
    responseObj = { content: { 'application/json': {} } };
  } else {
    const { op, template } = found.op;
    responseObj = op.responses[String(status)] || op.responses.default;
    if (!responseObj) return [`${method} ${template}: status ${status} is not documented`];
    if (responseObj.$ref) {
      pointer = errorPointer;
      responseObj = { content: { 'application/json': {} } };
    }
  }
  const content = responseObj.content || {};
  const media = (contentType || '').split(';')[0].trim().toLowerCase();
  if (method === 'HEAD' || status === 204 || status === 304) return problems;
  if (!Object.keys(content).length) return problems;
  if (!(media in content)) {
    problems.push(`content type "${contentType}" is not one of ${Object.keys(content).join(', ')}`);
    return problems;
  }
  if (media !== 'application/json') return problems;
  let json;
  try { json = JSON.parse(body); } catch { return [...problems, `the body is not JSON: ${String(body).slice(0, 200)}`]; }
  if (!pointer) {
    const t = escapePointer(found.op.template);
    pointer = `/paths/${t}/${found.op.method.toLowerCase()}/responses/${status}/content/${escapePointer(media)}/schema`;
  }
  const validate = validatorFor(pointer);
  if (!validate(json)) {
    for (const e of validate.errors.slice(0, 8)) problems.push(`body${e.instancePath} ${e.message} ${JSON.stringify(e.params)}`);
  }
  return problems;
}

// ---- the fetch wrapper ---------------------------------------------------------------------------

const GATEWAY_PATH = /^\/(v1\/|admin\/v1\/|healthz$|readyz$|metrics$)/;
const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);
const coverageDir = process.env.WHET_OPENAPI_COVERAGE_DIR;
const violations = [];

function record(line) {
  if (!coverageDir) return;
  fs.mkdirSync(coverageDir, { recursive: true });
  fs.appendFileSync(path.join(coverageDir, `${process.pid}.txt`), line + '\n');
}

// Checks one answer of a gateway (url: the full URL) unless the URL is not a gateway's; records it
// for coverage; throws (and sets the exit status) when it does not conform. For tests that make
// requests with node:http; fetch goes through it by itself.
export function conform(method, url, status, contentType, body) {
  const u = new URL(url);
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return;
  if (!LOOPBACK.has(u.hostname) || !GATEWAY_PATH.test(u.pathname)) return;
  const problems = check(method, u.pathname, status, contentType, body);
  const found = findOperation(method, u.pathname);
  record(`${method} ${found.op ? found.op.template : '-'} ${status}`);
  if (problems.length) {
    const isJson = (contentType || '').startsWith('application/json');
    const msg = `OpenAPI: ${method} ${u.pathname} -> ${status} does not match gateway/openapi.json:\n  ` +
      problems.join('\n  ') + (isJson ? `\n  body: ${String(body).slice(0, 500)}` : '');
    violations.push(msg);
    throw new Error(msg);
  }
}

if (!globalThis.fetch.whetOpenapi) {
  const inner = globalThis.fetch;
  const wrapped = async (input, init = {}) => {
    const res = await inner(input, init);
    const url = typeof input === 'string' || input instanceof URL ? String(input) : input.url;
    const method = String(init.method || (input instanceof Request ? input.method : 'GET')).toUpperCase();
    const contentType = res.headers.get('content-type') || '';
    const body = contentType.startsWith('application/json') ? await res.clone().text() : '';
    conform(method, url, res.status, contentType, body);
    return res;
  };
  wrapped.whetOpenapi = true;
  globalThis.fetch = wrapped;
  process.on('exit', () => {
    if (!violations.length) return;
    process.stderr.write(`--- ${violations.length} answer(s) did not match gateway/openapi.json ---\n${violations.join('\n')}\n`);
    process.exitCode = 1;
  });
}
