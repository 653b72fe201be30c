// openapi_coverage.mjs - the share of gateway/openapi.json's operations the tests exercised: run the
// node tests with WHET_OPENAPI_COVERAGE_DIR=DIR (../lib/openapi.mjs appends `METHOD PATH STATUS` for
// every answer it validated), then `node tests/integration/api/openapi_coverage.mjs DIR`.
import fs from 'node:fs';
import path from 'node:path';
import { operations } from '../lib/openapi.mjs';

const dir = process.argv[2] || process.env.WHET_OPENAPI_COVERAGE_DIR;
if (!dir || !fs.existsSync(dir)) {
  console.error('usage: openapi_coverage.mjs DIR (the WHET_OPENAPI_COVERAGE_DIR the tests ran with)');
  process.exit(2);
}
const seen = new Map(); // "METHOD template" -> Set of statuses
for (const f of fs.readdirSync(dir)) {
  for (const line of fs.readFileSync(path.join(dir, f), 'utf8').split('\n')) {
    const [method, template, status] = line.split(' ');
    if (!status || template === '-') continue;
    const key = `${method} ${template}`;
    if (!seen.has(key)) seen.set(key, new Set());
    seen.get(key).add(status);
  }
}
let any = 0, ok = 0, statuses = 0, documentedStatuses = 0;
for (const o of operations) {
  const key = `${o.method} ${o.template}`;
  const got = seen.get(key) || new Set();
  const documented = Object.keys(o.op.responses);
  documentedStatuses += documented.length;
  statuses += documented.filter((s) => got.has(s)).length;
  if (got.size) any++;
  if ([...got].some((s) => s.startsWith('2'))) ok++;
  console.log(`${got.size ? 'x' : ' '} ${key.padEnd(72)} ${[...got].sort().join(',')}`);
}
const pct = (a, b) => `${a}/${b} (${((100 * a) / b).toFixed(0)}%)`;
console.log(`operations exercised: ${pct(any, operations.length)}; with a 2xx answer: ${pct(ok, operations.length)}; ` +
            `documented statuses seen: ${pct(statuses, documentedStatuses)}`);
