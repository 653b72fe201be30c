// k8s.mjs - deploy/k8s: every overlay (and the base) renders with `kubectl kustomize`, and every object
// it renders is valid against the Kubernetes schemas (the kubernetes-models packages' validators; the
// CloudNativePG Cluster, which they do not know, against the fields the operator requires). Then what
// the schemas cannot see: selectors match their pod templates, Services, HPAs, PDBs and network
// policies select pods that exist, every container drops all capabilities, cannot escalate, has a
// read-only root and memory limits, mounts only volumes its pod defines, reads only the documented
// Secrets, and names nothing twice; the gateway is ready on /readyz, the scheduler runs twice, each
// executor's --dc/--pool are its node selector's, PostgreSQL has three instances, executors may reach
// only the scheduler, the object store and DNS. A missing kubectl fails the test (deploy/install-deps.sh installs Debian's
// kubernetes-client).
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(new URL('../../package.json', import.meta.url));
const YAML = require('yaml');
const k8s = path.join(process.env.WHET_SOURCE_DIR || new URL('../../..', import.meta.url).pathname, 'deploy/k8s');

let passed = 0, failed = 0;
const check = (cond, what) => { if (cond) passed++; else { failed++; console.error(`FAIL: ${what}`); } return cond; };

const SECRETS = new Set(['whet-db-app', 'whet-secrets', 'whet-object-store', 'whet-grpc-tls', 'whet-gateway-tls']);
const WORKLOADS = new Set(['Deployment', 'DaemonSet', 'Job']);
const podTemplate = (o) => o.spec.template;
const matches = (selector, labels) => Object.entries(selector || {}).every(([k, v]) => (labels || {})[k] === v);

function render(dir) {
  try {
    return execFileSync('kubectl', ['kustomize', dir], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    if (e.code === 'ENOENT') throw new Error('kubectl not found: deploy/install-deps.sh installs kubernetes-client');
    throw new Error(`kubectl kustomize ${dir}: ${e.stderr || e.message}`);
  }
}

// The schema check of one object: its kubernetes-models class, or the CloudNativePG Cluster's fields.
async function validate(o, where) {
  if (o.apiVersion === 'postgresql.cnpg.io/v1') {
    if (!check(o.kind === 'Cluster', `${where}: postgresql.cnpg.io/v1 kind ${o.kind} is a Cluster`)) return;
    const s = o.spec || {};
    check(Number.isInteger(s.instances) && s.instances >= 1, `${where}: spec.instances is a positive integer`);
    check(typeof s.storage?.size === 'string' && /^\d+[KMGT]i$/.test(s.storage.size), `${where}: spec.storage.size is a quantity`);
    check(typeof s.bootstrap?.initdb?.database === 'string' && typeof s.bootstrap.initdb.owner === 'string',
          `${where}: spec.bootstrap.initdb names the database and its owner`);
    for (const r of s.managed?.roles || []) check(typeof r.name === 'string' && ['present', 'absent'].includes(r.ensure ?? 'present'),
                                                    `${where}: managed role ${r.name}`);
    return;
  }
  let mod;
  try { mod = await import(`kubernetes-models/${o.apiVersion}`); } catch { mod = {}; }
  const Model = mod[o.kind];
  if (!check(Model, `${where}: ${o.apiVersion} ${o.kind} is a Kubernetes kind kubernetes-models knows`)) return;
  try {
    new Model(o).validate();
    passed++;
  } catch (e) {
    check(false, `${where}: schema: ${e.message}`);
  }
}

function checkContainers(o, where) {
  const spec = podTemplate(o).spec;
  const volumes = new Map((spec.volumes || []).map((v) => [v.name, v]));
  for (const v of volumes.values()) {
    const sources = Object.keys(v).filter((k) => k !== 'name');
    check(sources.length === 1, `${where}: volume ${v.name} has one source (${sources.join(', ')})`);
  }
  for (const c of [...(spec.initContainers || []), ...spec.containers]) {
    const w = `${where} container ${c.name}`;
    const sc = c.securityContext || {};
    check(sc.allowPrivilegeEscalation === false, `${w}: allowPrivilegeEscalation false`);
    check(JSON.stringify(sc.capabilities?.drop) === '["ALL"]' && !sc.capabilities?.add, `${w}: drops all capabilities, adds none`);
    check(sc.readOnlyRootFilesystem === true, `${w}: read-only root file system`);
    check(!!c.resources?.limits?.memory && !!c.resources?.requests?.cpu, `${w}: a memory limit and a CPU request`);
    check(c.image === 'whet' || /\/whet$/.test(c.image.split(':')[0]) || c.image.startsWith('whet:'), `${w}: runs the whet image (${c.image})`);
    for (const m of c.volumeMounts || []) check(volumes.has(m.name), `${w}: mounts ${m.name}, a volume of its pod`);
    for (const e of c.env || []) {
      const ref = e.valueFrom?.secretKeyRef;
      if (ref) check(SECRETS.has(ref.name), `${w}: reads Secret ${ref.name}, one of ${[...SECRETS].join(', ')}`);
    }
  }
  check(spec.securityContext?.runAsNonRoot === true, `${where}: runs as non-root`);
}

async function checkOverlay(name, objs, expect) {
  const by = (kind) => objs.filter((o) => o.kind === kind);
  const names = new Set(objs.map((o) => `${o.kind}/${o.metadata.name}`));
  check(names.size === objs.length, `${name}: no object twice`);
  for (const o of objs) {
    const where = `${name} ${o.kind}/${o.metadata.name}`;
    await validate(o, where);
    if (!['Namespace', 'ClusterRole', 'ClusterRoleBinding'].includes(o.kind)) check(o.metadata.namespace === 'whet', `${where}: in namespace whet`);
  }
  const workloads = objs.filter((o) => WORKLOADS.has(o.kind));
  const podLabels = workloads.map((o) => podTemplate(o).metadata.labels);
  for (const o of workloads) {
    const where = `${name} ${o.kind}/${o.metadata.name}`;
    if (o.kind !== 'Job') check(matches(o.spec.selector.matchLabels, podTemplate(o).metadata.labels), `${where}: selector matches its template`);
    checkContainers(o, where);
  }
  for (const s of by('Service')) check(podLabels.some((l) => matches(s.spec.selector, l)), `${name} Service/${s.metadata.name} selects pods`);
  // Names the schemas cannot hold unique: a Service's ports, a container's ports, env and mounts.
  const unique = (list, key) => new Set((list || []).map((x) => x[key])).size === (list || []).length;
  for (const s of by('Service')) {
    check(unique(s.spec.ports, 'name') && unique(s.spec.ports, 'port'),
          `${name} Service/${s.metadata.name}: port names and numbers unique`);
  }
  for (const o of workloads) {
    for (const c of podTemplate(o).spec.containers) {
      check(unique(c.ports, 'name') && unique(c.env, 'name') && unique(c.volumeMounts, 'mountPath') &&
            unique(podTemplate(o).spec.volumes, 'name'),
            `${name} ${o.kind}/${o.metadata.name} container ${c.name}: ports, env, mounts and volumes named once`);
    }
  }
  for (const p of by('PodDisruptionBudget')) check(podLabels.some((l) => matches(p.spec.selector.matchLabels, l)), `${name} PDB/${p.metadata.name} selects pods`);
  for (const h of by('HorizontalPodAutoscaler'))
    check(names.has(`${h.spec.scaleTargetRef.kind}/${h.spec.scaleTargetRef.name}`), `${name} HPA/${h.metadata.name} scales an object that exists`);
  const dbLabels = { 'cnpg.io/cluster': 'whet-db' }; // the operator's label on the Cluster's pods
  for (const np of by('NetworkPolicy')) {
    const sel = np.spec.podSelector.matchLabels;
    // (the base has no executors: their policy waits for the overlays that add them)
    if (sel && !(sel['app.kubernetes.io/component'] === 'executor' && !expect.executors.length))
      check(podLabels.some((l) => matches(sel, l)) || matches(sel, dbLabels), `${name} NetworkPolicy/${np.metadata.name} selects pods`);
  }
  // The shape of the deployment.
  const gw = by('Deployment').find((d) => d.metadata.name === 'whet-gateway');
  check(gw?.spec.template.spec.containers[0].readinessProbe?.httpGet?.path === '/readyz', `${name}: the gateway is ready on /readyz`);
  check(by('Deployment').find((d) => d.metadata.name === 'whet-scheduler')?.spec.replicas === 2, `${name}: two schedulers`);
  check(by('Job').some((j) => j.metadata.name === 'whet-migrate' && j.spec.template.spec.containers[0].args[0] === 'migrate'), `${name}: the migrations Job`);
  check(by('Cluster')[0]?.spec.instances === expect.instances, `${name}: PostgreSQL has ${expect.instances} instance(s)`);
  const executors = by('DaemonSet');
  check(executors.length === expect.executors.length, `${name}: ${expect.executors.length} executor DaemonSet(s), got ${executors.length}`);
  for (const ds of executors) {
    const spec = podTemplate(ds).spec;
    const c = spec.containers[0];
    const env = Object.fromEntries((c.env || []).map((e) => [e.name, e.value]));
    const arg = (flag) => c.args[c.args.indexOf(flag) + 1];
    const where = `${name} DaemonSet/${ds.metadata.name}`;
    check(c.args[0] === 'executor' && arg('--dc') === '$(WHET_EXECUTOR_DC)' && arg('--pool') === '$(WHET_EXECUTOR_POOL)', `${where}: --dc and --pool from its env`);
    check(spec.nodeSelector['whet.dev/dc'] === env.WHET_EXECUTOR_DC && spec.nodeSelector['whet.dev/pool'] === env.WHET_EXECUTOR_POOL,
          `${where}: --dc ${env.WHET_EXECUTOR_DC} and --pool ${env.WHET_EXECUTOR_POOL} are its node selector's`);
    const gpu = env.WHET_EXECUTOR_DEVICES === 'cuda';
    check(!gpu || (c.resources.limits['nvidia.com/gpu'] && spec.tolerations?.some((t) => t.key === 'nvidia.com/gpu')),
          `${where}: a GPU executor asks for nvidia.com/gpu and tolerates the GPU taint`);
    check(gpu || !c.resources.limits['nvidia.com/gpu'], `${where}: a CPU executor asks for no GPU`);
    check(spec.automountServiceAccountToken === false, `${where}: no Kubernetes API token`);
    check(expect.executors.includes(`${env.WHET_EXECUTOR_DC}/${env.WHET_EXECUTOR_POOL}`), `${where}: pool ${env.WHET_EXECUTOR_DC}/${env.WHET_EXECUTOR_POOL} expected`);
  }
  // Executors reach only the scheduler, the object store and DNS.
  const eg = by('NetworkPolicy').find((n) => n.metadata.name === 'whet-executor-egress');
  check(eg && eg.spec.policyTypes.includes('Egress') && eg.spec.egress.every((r) => r.to && r.to.length),
        `${name}: executors' egress lists its destinations (no open rule)`);
  const dbIn = by('NetworkPolicy').find((n) => n.metadata.name === 'whet-db-ingress');
  const fromExecutors = dbIn?.spec.ingress.some((r) => (r.from || []).some((f) => f.podSelector?.matchLabels?.['app.kubernetes.io/component'] === 'executor'));
  check(dbIn && !fromExecutors, `${name}: executors do not reach PostgreSQL`);
  console.log(`${name}: ${objs.length} objects rendered and validated (${[...new Set(objs.map((o) => o.kind))].join(', ')})`);
}

const overlays = {
  base: { instances: 3, executors: [] },
  'overlays/one-dc': { instances: 3, executors: ['dc1/gpu'] },
  'overlays/multi-dc': { instances: 3, executors: ['east/a100', 'west/a100'] },
  'overlays/ci': { instances: 1, executors: ['dc1/cpu'] },
};
for (const [dir, expect] of Object.entries(overlays)) {
  let objs;
  try {
    objs = YAML.parseAllDocuments(render(path.join(k8s, dir))).map((d) => d.toJS()).filter(Boolean);
  } catch (e) {
    check(false, `${dir}: renders: ${e.message}`);
    continue;
  }
  await checkOverlay(dir, objs, expect);
}
// multi-dc: the executors verify the scheduler's certificate, which the scheduler serves.
const multi = YAML.parseAllDocuments(render(path.join(k8s, 'overlays/multi-dc'))).map((d) => d.toJS());
const envOf = (o) => Object.fromEntries(podTemplate(o).spec.containers[0].env.map((e) => [e.name, e.value]));
check(multi.filter((o) => o.kind === 'DaemonSet').every((d) => envOf(d).WHET_GRPC_TLS_CA), 'multi-dc: executors verify the scheduler over TLS');
check(envOf(multi.find((o) => o.kind === 'Deployment' && o.metadata.name === 'whet-scheduler')).WHET_GRPC_TLS_CERT, 'multi-dc: the scheduler serves TLS');
const gwMulti = multi.find((o) => o.kind === 'Deployment' && o.metadata.name === 'whet-gateway');
const gwc = podTemplate(gwMulti).spec.containers[0];
check(envOf(gwMulti).WHET_GATEWAY_TLS_CERT && envOf(gwMulti).WHET_GATEWAY_TLS_KEY, 'multi-dc: the gateway serves HTTPS');
check(gwc.readinessProbe.httpGet.scheme === 'HTTPS' && gwc.livenessProbe.httpGet.scheme === 'HTTPS' &&
      gwc.readinessProbe.httpGet.path === '/readyz', 'multi-dc: the gateway is probed over HTTPS');

// The checks above can fail: a broken object is refused by the schema validator.
const { Deployment } = await import('kubernetes-models/apps/v1');
let refused = false;
try { new Deployment({ metadata: { name: 'x' }, spec: { selector: {}, template: { spec: { containers: [{ image: 'whet' }] } } } }).validate(); }
catch { refused = true; }
check(refused, 'the schema validator refuses a container without a name');

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
