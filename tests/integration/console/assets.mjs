// assets.mjs - the console is compiled into the gateway: GET /console and every asset its page names
// answer without credentials, byte for byte the files in console/ and uPlot's dist, with their content
// types, a Content-Security-Policy that keeps the page on its own origin, and no-cache; an unknown asset
// is a JSON 404; the whole console stays under a transfer budget. Each answer is also held to
// gateway/openapi.json (../lib/openapi.mjs).
import fs from 'node:fs';
import { checker } from '../lib/check.mjs';
import '../lib/openapi.mjs';
import { startStack } from '../lib/gateway.mjs';

const { check, summary } = checker();
const root = new URL('../../../', import.meta.url).pathname;
const sources = {
  '/console': `${root}console/index.html`,
  '/console/app.js': `${root}console/app.js`,
  '/console/app.css': `${root}console/app.css`,
  '/console/uplot.js': `${root}console/node_modules/uplot/dist/uPlot.iife.min.js`,
  '/console/uplot.css': `${root}console/node_modules/uplot/dist/uPlot.min.css`,
};
const types = { '/console': 'text/html', js: 'text/javascript', css: 'text/css' };
const BUDGET = 150000; // bytes on the wire for the whole console, uncompressed

const stack = await startStack();
try {
  const page = await stack.request('GET', '/console');
  const named = [...page.text.matchAll(/(?:src|href)="(\/console\/[^"]+)"/g)].map((m) => m[1]);
  check(named.length === 4 && named.every((p) => p in sources), 'the page names the four assets the gateway serves', named);
  let total = 0;
  for (const [p, file] of Object.entries(sources)) {
    const r = await stack.request('GET', p);
    const want = types[p] || types[p.split('.').pop()];
    check(r.status === 200, `GET ${p} without credentials: 200`, r.status);
    check((r.headers.get('content-type') || '').startsWith(want), `${p} is ${want}`, r.headers.get('content-type'));
    check(r.text === fs.readFileSync(file, 'utf8'), `${p} is ${file.slice(root.length)} byte for byte`);
    check(/default-src 'self'/.test(r.headers.get('content-security-policy') || ''), `${p}: a same-origin CSP`,
          r.headers.get('content-security-policy'));
    check(r.headers.get('cache-control') === 'no-cache', `${p}: no-cache`, r.headers.get('cache-control'));
    total += Buffer.byteLength(r.text);
  }
  check(total < BUDGET, `the console transfers under ${BUDGET} bytes`, total);
  const missing = await stack.request('GET', '/console/secret.js');
  check(missing.status === 404 && missing.json?.error?.code !== undefined, 'an unknown asset: a JSON 404', missing.text);
  const post = await stack.request('POST', '/console', { body: {} });
  check(post.status === 405, 'POST /console: 405', post.status);
  // The operator's queue page reads GET /admin/v1/queue (an empty stack: an empty list).
  const queue = await stack.request('GET', '/admin/v1/queue', { token: stack.adminToken() });
  check(queue.status === 200 && queue.json.object === 'list' && queue.json.data.length === 0, 'GET /admin/v1/queue: a list', queue.text);
  const anonymous = await stack.request('GET', '/admin/v1/queue');
  check(anonymous.status === 401, 'GET /admin/v1/queue without a token: 401', anonymous.status);
  console.log(`console: ${total} bytes in ${Object.keys(sources).length} files`);
} finally {
  let why = null;
  try { await stack.stop(); } catch (e) { why = String(e.message || e); }
  check(why === null, 'gateway stopped cleanly', why);
}
process.exit(summary());
