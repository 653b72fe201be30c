// prometheus.mjs - deploy/prometheus: `promtool check rules` accepts the alert rules, `promtool test
// rules` passes their unit tests, `promtool check config` the example configuration; the Grafana dashboard's queries parse as PromQL (promtool checks them
// as recording rules, Grafana's variables filled in); every whet_ metric the rules and the dashboard
// name is one the gateway, the scheduler or the executors export (gateway/metrics.c,
// scheduler/service/metrics.c, executor/agent/metrics.c),
// and every exported metric is on the dashboard and listed in the README. A missing promtool fails the
// test (deploy/install-deps.sh installs Debian's prometheus).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(new URL('../../package.json', import.meta.url));
const YAML = require('yaml');
const src = process.env.WHET_SOURCE_DIR || new URL('../../..', import.meta.url).pathname;
const dir = path.join(src, 'deploy/prometheus');

let passed = 0, failed = 0;
const check = (cond, what) => { if (cond) passed++; else { failed++; console.error(`FAIL: ${what}`); } return cond; };

function promtool(args) {
  try {
    return { ok: true, out: execFileSync('promtool', args, { cwd: dir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }) };
  } catch (e) {
    if (e.code === 'ENOENT') return { ok: false, out: 'promtool not found: deploy/install-deps.sh installs prometheus' };
    return { ok: false, out: `${e.stdout || ''}${e.stderr || ''}` };
  }
}

let r = promtool(['check', 'rules', 'whet-rules.yml']);
check(r.ok, `promtool check rules whet-rules.yml: ${r.out}`);
console.log(r.out.trim());
r = promtool(['test', 'rules', 'whet-rules.test.yml']);
check(r.ok, `promtool test rules whet-rules.test.yml: ${r.out}`);
console.log(r.out.trim().split('\n').pop());
r = promtool(['check', 'config', 'prometheus.example.yml']);
check(r.ok, `promtool check config prometheus.example.yml: ${r.out}`);

// The dashboard.
const dash = JSON.parse(fs.readFileSync(path.join(dir, 'whet-dashboard.json'), 'utf8'));
const panels = dash.panels.filter((p) => p.type !== 'row');
const ids = dash.panels.map((p) => p.id);
check(new Set(ids).size === ids.length, 'dashboard: panel ids are unique');
check(dash.panels.every((p) => p.gridPos.x + p.gridPos.w <= 24), 'dashboard: panels fit the 24-column grid');
check(panels.every((p) => p.datasource?.uid === '${datasource}' && p.targets.length > 0), 'dashboard: every panel queries the chosen Prometheus');
const exprs = panels.flatMap((p) => p.targets.map((t) => t.expr));
// Grafana's variables, as Grafana would fill them in.
const filled = exprs.map((e) => e.replaceAll('$__rate_interval', '5m').replaceAll('$instance', '.*'));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'whet-dash-'));
const asRules = { groups: [{ name: 'dashboard', rules: filled.map((expr, i) => ({ record: `whet_dashboard:query${i}`, expr })) }] };
fs.writeFileSync(path.join(tmp, 'dashboard-queries.yml'), YAML.stringify(asRules));
r = promtool(['check', 'rules', path.join(tmp, 'dashboard-queries.yml')]);
check(r.ok, `dashboard queries parse as PromQL: ${r.out}`);
fs.rmSync(tmp, { recursive: true, force: true });

// The metrics the code exports, and those the rules and the dashboard use.
const names = (text) => new Set(text.match(/\bwhet_[a-z0-9_]+/g) || []);
// Metric names are in the C files' string literals (the C identifiers whet_* are not).
const literals = (file) => (fs.readFileSync(path.join(src, file), 'utf8').match(/"(?:[^"\\\n]|\\.)*"/g) || []).join('\n');
const exported = new Set(['gateway/metrics.c', 'scheduler/service/metrics.c', 'executor/agent/metrics.c'].flatMap((f) => [...names(literals(f))]));
const base = [...exported].filter((n) => !/_(bucket|sum|count)$/.test(n) || !exported.has(n.replace(/_(bucket|sum|count)$/, '')));
check(base.length >= 15, `the code exports the whet_ metrics (${base.length} found)`);
const rules = YAML.parse(fs.readFileSync(path.join(dir, 'whet-rules.yml'), 'utf8'));
const ruleExprs = rules.groups.flatMap((g) => g.rules.map((x) => x.expr));
for (const n of names(ruleExprs.join('\n'))) check(exported.has(n), `alert rules use ${n}, which the code exports`);
for (const n of names(exprs.join('\n'))) check(exported.has(n), `the dashboard uses ${n}, which the code exports`);
const onDashboard = exprs.join('\n');
const readme = fs.readFileSync(path.join(src, 'README.md'), 'utf8');
for (const n of base) {
  check(onDashboard.includes(n), `${n} is on the dashboard`);
  check(readme.includes(`\`${n}\``), `${n} is listed in the README`);
}
console.log(`prometheus: ${rules.groups.reduce((a, g) => a + g.rules.length, 0)} alert rules, ${panels.length} panels, ` +
            `${base.length} metrics: ${base.sort().join(', ')}`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
