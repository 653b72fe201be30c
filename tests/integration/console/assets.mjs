// assets.mjs - the console is compiled into the gateway: GET /console and every asset its page names
// answer without credentials, byte for byte the files in console/ and uPlot's dist, with their content
// types, a Content-Security-Policy that keeps the page on its own origin, and no-cache; an unknown asset
// is a JSON 404; the whole console stays under a transfer budget; the operator's lists it reads answer
// and it reads them a page at a time. Each answer is also held to gateway/openapi.json (../lib/openapi.mjs).
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
  // The operator's queue and nodes pages read a page of GET /admin/v1/queue and /admin/v1/nodes and the
  // summary GET /admin/v1/pools (an empty stack: empty lists, no job counted).
  for (const list of ['queue', 'nodes']) {
    const r = await stack.request('GET', `/admin/v1/${list}?limit=100`, { token: stack.adminToken() });
    check(r.status === 200 && r.json.object === 'list' && r.json.data.length === 0 && r.json.has_more === false && r.json.last_id === null,
          `GET /admin/v1/${list}: an empty page`, r.text);
  }
  const pools = await stack.request('GET', '/admin/v1/pools', { token: stack.adminToken() });
  check(pools.status === 200 && pools.json.data.length === 0 && JSON.stringify(pools.json.jobs) === '{"waiting":0,"running":0,"paused":0}',
        'GET /admin/v1/pools: no pool, no job', pools.text);
  // The console reads lists a page at a time: no operator list is fetched whole.
  const app = fs.readFileSync(sources['/console/app.js'], 'utf8');
  const unpaged = [...app.matchAll(/api\('GET', '(\/admin\/v1\/(?:nodes|queue)[^']*)'\)/g)].map((m) => m[1]);
  check(unpaged.length === 0 && /pager\(\(\) => `\/admin\/v1\/nodes/.test(app) && /pager\(\(\) => `\/admin\/v1\/queue/.test(app),
        'the console pages the node and queue lists', unpaged);
  const anonymous = await stack.request('GET', '/admin/v1/queue');
  check(anonymous.status === 401, 'GET /admin/v1/queue without a token: 401', anonymous.status);
  console.log(`console: ${total} bytes in ${Object.keys(sources).length} files`);
} finally {
  let why = null;
  try { await stack.stop(); } catch (e) { why = String(e.message || e); }
  check(why === null, 'gateway stopped cleanly', why);
}
process.exit(summary());
