// app.js - whet's web console: a single-page app over the REST API (gateway/openapi.json). It keeps the
// API key or JWT in this tab's sessionStorage (no server-side session), routes on the URL's #fragment, and
// polls while a page shows something live (jobs, a job's curves and events, nodes, the queue), reading
// long lists a page at a time. uPlot (window.uPlot, console/node_modules/uplot, compiled into the gateway
// beside this file) draws the curves.

const SESSION = 'whet.console';
const PART_BYTES = 8 << 20; // files above this go through the Uploads API, in parts of this size
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

let session = JSON.parse(sessionStorage.getItem(SESSION) || 'null'); // {token, role: 'tenant'|'operator', name}
let stops = []; // what stops the current page's pollers and listeners, run when the page changes
let page = 0;    // bumped on every navigation: an answer for a page left behind is dropped

// ---- DOM and formatting helpers -----------------------------------------------------------------

// h('a', {href: '#/'}, 'text', child): an element; attributes starting with "on" are listeners.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}
const $main = () => document.getElementById('main');
const fill = (el, ...children) => { el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined)); return el; };
const when = (t) => (t ? new Date(t * 1000).toISOString().slice(0, 16).replace('T', ' ') : '—');
const num = (x, digits = 4) => (typeof x === 'number' ? (Number.isInteger(x) ? x.toLocaleString('en') : x.toPrecision(digits)) : '—');
const bytes = (n) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)} GB` : n >= 1e6 ? `${(n / 1e6).toFixed(2)} MB` : n >= 1e3 ? `${(n / 1e3).toFixed(1)} kB` : `${n} B`);
function money(amount, currency) {
  if (typeof amount !== 'number') return '—';
  try { return new Intl.NumberFormat('en', { style: 'currency', currency: currency || 'USD', maximumFractionDigits: 4 }).format(amount); }
  catch { return `${amount.toFixed(4)} ${currency || ''}`; }
}
const duration = (s) => (s >= 3600 ? `${(s / 3600).toFixed(1)} h` : s >= 60 ? `${Math.round(s / 60)} min` : `${Math.round(s)} s`);
const badge = (status) => h('span', { class: `status ${status}` }, status);
// A table; columns listed in `numeric` align right, those in `narrow` hide on a phone's width.
function table(head, rows, numeric = [], narrow = []) {
  const cls = (i) => [numeric.includes(i) ? 'num' : '', narrow.includes(i) ? 'hide-narrow' : ''].join(' ').trim() || null;
  return h('div', { class: 'scroll' }, h('table', {},
    h('thead', {}, h('tr', {}, head.map((c, i) => h('th', { class: cls(i) }, c)))),
    h('tbody', {}, rows.length ? rows.map((r) => h('tr', {}, r.map((c, i) => h('td', { class: cls(i) }, c ?? '—'))))
      : h('tr', {}, h('td', { colspan: head.length, class: 'muted' }, 'None yet.')))));
}
const kv = (pairs) => h('dl', { class: 'kv' }, pairs.filter(Boolean).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '—')]));
const card = (title, ...body) => h('section', { class: 'card' }, title ? h('h2', {}, title) : null, ...body);
function toast(text) {
  const t = document.getElementById('toast');
  t.textContent = text;
  t.style.display = 'block';
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.style.display = 'none'; }, 4000);
}
const errorBox = (e) => h('pre', { class: 'error' }, e.message || String(e));

// ---- the API ------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body, text) {
    super(body?.error?.message ? `${status}: ${body.error.message}` : `${status}: ${text || 'no answer'}`);
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, body) {
  const headers = { authorization: `Bearer ${session.token}` };
  let payload;
  if (body instanceof FormData || body instanceof Blob) payload = body;
  else if (body !== undefined) { headers['content-type'] = 'application/json'; payload = JSON.stringify(body); }
  const res = await fetch(path, { method, headers, body: payload });
  if (res.status === 401 && session) { signOut('Your key was refused (401); sign in again.'); }
  const type = res.headers.get('content-type') || '';
  if (!type.startsWith('application/json')) {
    if (!res.ok) throw new ApiError(res.status, null, await res.text());
    return res.blob();
  }
  const json = await res.json();
  if (!res.ok) throw new ApiError(res.status, json);
  return json;
}

// Sends a body with XMLHttpRequest, whose upload events give a progress bar; answers the JSON.
function sendWithProgress(method, path, body, onProgress) {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open(method, path);
    x.setRequestHeader('authorization', `Bearer ${session.token}`);
    x.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded); };
    x.onload = () => {
      let json = null;
      try { json = JSON.parse(x.responseText); } catch { /* not JSON: the status says it */ }
      if (x.status >= 200 && x.status < 300) resolve(json); else reject(new ApiError(x.status, json, x.responseText));
    };
    x.onerror = () => reject(new Error(`${method} ${path}: the connection failed`));
    x.send(body);
  });
}

// Saves a body fetched with the key (a plain link would not carry it) under `name`.
async function download(path, name) {
  const blob = await api('GET', path);
  const url = URL.createObjectURL(blob instanceof Blob ? blob : new Blob([JSON.stringify(blob)]));
  const a = h('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
  toast(`Downloaded ${name}`);
}

// A list the API answers a page at a time (cursor pages of 100): refresh() reads the first page (the
// pollers call it), the `more` button the page after the last item shown, kept until reset() (when a
// filter changes); draw(items) shows the first page and those after it, each item once.
function pager(path, label, draw) {
  let first = [], later = [], hasMore = false;
  const url = (after) => { const p = path(); return `${p}${p.includes('?') ? '&' : '?'}limit=100${after ? `&after=${encodeURIComponent(after)}` : ''}`; };
  const show = () => {
    const seen = new Set(first.map((x) => x.id));
    more.hidden = !hasMore;
    draw(first.concat(later.filter((x) => !seen.has(x.id))));
  };
  const more = h('button', { class: 'plain', type: 'button', hidden: true, onclick: async () => {
    try {
      const p = await api('GET', url((later.at(-1) || first.at(-1)).id));
      later = later.concat(p.data);
      hasMore = p.has_more;
      show();
    } catch (e) { toast(e.message); }
  } }, label);
  const refresh = async () => {
    const p = await api('GET', url());
    first = p.data;
    if (!later.length) hasMore = p.has_more;
    show();
  };
  return { more, refresh, draw: show, reset() { later = []; } };
}

// Runs fn every `ms` until the page changes (and once now); errors show in `where`.
function poll(fn, ms, where) {
  const mine = page;
  let stopped = false;
  const tick = async () => {
    if (stopped || mine !== page) return;
    try { if ((await fn()) === false) stopped = true; } catch (e) { if (where && mine === page) fill(where, errorBox(e)); }
  };
  tick();
  const id = setInterval(tick, ms);
  stops.push(() => clearInterval(id));
}

// ---- sign in, navigation -------------------------------------------------------------------------

const TENANT_NAV = [['#/jobs', 'Jobs'], ['#/new', 'New job'], ['#/files', 'Files'], ['#/models', 'Models'],
                    ['#/playground', 'Playground'], ['#/usage', 'Usage & cost'], ['#/keys', 'API keys']];
const OPERATOR_NAV = [['#/admin/tenants', 'Tenants'], ['#/admin/queue', 'Queue'], ['#/admin/prices', 'Prices'], ['#/admin/nodes', 'Nodes'],
                      ['#/admin/usage', 'Usage']];

function signOut(why) {
  session = null;
  sessionStorage.removeItem(SESSION);
  location.hash = '#/';
  if (why) toast(why);
  route();
}

function signInPage(main) {
  const out = h('div');
  const token = h('input', { name: 'token', type: 'password', required: true, autocomplete: 'off', placeholder: 'sk-… or a JWT' });
  const role = h('select', { name: 'role' }, h('option', { value: 'tenant' }, 'Tenant (API key or tenant JWT)'),
                 h('option', { value: 'operator' }, 'Operator (admin JWT)'));
  const form = h('form', { class: 'stack', onsubmit: async (ev) => {
    ev.preventDefault();
    session = { token: token.value.trim(), role: role.value };
    try {
      if (session.role === 'tenant') session.name = (await api('GET', '/v1/whoami')).tenant;
      else { await api('GET', '/admin/v1/tenants'); session.name = 'operator'; }
      sessionStorage.setItem(SESSION, JSON.stringify(session));
      location.hash = session.role === 'tenant' ? '#/jobs' : '#/admin/tenants';
      route();
    } catch (e) {
      session = null;
      fill(out, errorBox(e));
    }
  } }, h('label', {}, 'Sign in as', role), h('label', {}, 'Key or token', token), h('button', { type: 'submit' }, 'Sign in'),
  h('p', { class: 'muted' }, 'The key stays in this browser tab (sessionStorage) and goes only to this gateway. ',
    'Get one with ', h('code', {}, 'whet tenant create NAME'), ' or ', h('code', {}, 'whet token --admin'), '.'));
  fill(main, h('h1', {}, 'Sign in to whet'), card(null, form, out));
}

const ROUTES = [
  [/^#\/jobs$/, jobsPage], [/^#\/jobs\/([^/]+)$/, jobPage], [/^#\/new$/, newJobPage], [/^#\/files$/, filesPage],
  [/^#\/models$/, modelsPage], [/^#\/playground$/, playgroundPage], [/^#\/usage$/, usagePage], [/^#\/keys$/, keysPage],
  [/^#\/admin\/tenants$/, tenantsPage], [/^#\/admin\/tenants\/([^/]+)$/, tenantPage], [/^#\/admin\/prices$/, pricesPage],
  [/^#\/admin\/nodes$/, nodesPage], [/^#\/admin\/queue$/, queuePage], [/^#\/admin\/usage$/, adminUsagePage],
];

function route() {
  page++;
  for (const stop of stops) stop();
  stops = [];
  const main = $main();
  const nav = document.getElementById('nav');
  if (!session) {
    fill(nav);
    fill(document.getElementById('who'));
    signInPage(main);
    return;
  }
  const items = session.role === 'tenant' ? TENANT_NAV : OPERATOR_NAV;
  let hash = location.hash;
  if (!ROUTES.some(([re]) => re.test(hash))) hash = items[0][0];
  fill(nav, items.map(([href, text]) => h('a', { href, class: hash.startsWith(href) ? 'on' : null }, text)));
  fill(document.getElementById('who'), `${session.name} · `,
       h('a', { href: '#/', onclick: (e) => { e.preventDefault(); signOut(); } }, 'sign out'));
  for (const [re, fn] of ROUTES) {
    const m = hash.match(re);
    if (!m) continue;
    const admin = hash.startsWith('#/admin/');
    if (admin !== (session.role === 'operator')) break;
    fill(main, h('p', { class: 'muted' }, 'Loading…'));
    Promise.resolve(fn(main, ...m.slice(1).map(decodeURIComponent))).catch((e) => fill(main, errorBox(e)));
    return;
  }
  location.hash = items[0][0];
}

// ---- tenant: jobs --------------------------------------------------------------------------------

function jobCost(job) {
  const c = job.whet?.cost;
  return c ? money(c.amount + (c.running_amount || 0), c.currency) : '—';
}
function waitText(job) {
  const w = job.whet || {};
  if (job.status !== 'queued' && job.status !== 'validating_files') return job.status === 'running' && job.estimated_finish ? `done ~${when(job.estimated_finish)}` : '';
  return [w.queue_position ? `#${w.queue_position} in queue` : null, w.wait_reason].filter(Boolean).join(' · ');
}

async function jobsPage(main) {
  const filter = h('select', { 'aria-label': 'status filter' }, ['all', 'queued', 'running', 'paused', 'succeeded', 'failed', 'cancelled']
    .map((s) => h('option', { value: s }, s)));
  const list = h('div');
  const jobs = pager(() => '/v1/fine_tuning/jobs', 'Older jobs', (items) => fill(list, table(
    ['Job', 'Model', 'Status', 'Queue / progress', 'Created', 'Cost', 'Fine-tuned model'], items.filter((j) => filter.value === 'all' || j.status === filter.value).map((j) => [
      h('a', { href: `#/jobs/${encodeURIComponent(j.id)}`, class: 'mono' }, j.id), j.model, badge(j.status), waitText(j),
      when(j.created_at), jobCost(j), j.fine_tuned_model ? h('span', { class: 'mono' }, j.fine_tuned_model) : '—']), [5], [1, 4, 6])));
  filter.addEventListener('change', jobs.draw);
  fill(main, h('h1', {}, 'Fine-tuning jobs'), card(null, h('form', { class: 'row' }, h('label', {}, 'Status', filter),
    h('a', { href: '#/new' }, h('button', { type: 'button' }, 'New job'))), list, jobs.more));
  poll(jobs.refresh, 5000, list);
}

// The figures drawn, when the job reports them: [metric, label, scale].
const CURVES = [['loss', 'loss', 'y'], ['valid_loss', 'valid loss', 'y'], ['reward_mean', 'reward', 'y'],
                ['lr', 'learning rate', 'lr']];
const COLORS = ['#1f6feb', '#e36209', '#2e7d32', '#8250df'];

function makeChart(el, names) {
  if (!window.uPlot) {
    fill(el, h('p', { class: 'error' }, 'This gateway was built without uPlot (console/node_modules): no curves. ',
                'Rebuild it after deploy/install-deps.sh.'));
    return null;
  }
  const width = () => Math.max(260, el.clientWidth || 600);
  const opts = {
    width: width(), height: window.innerWidth < 600 ? 220 : 300,
    scales: { x: { time: false } },
    axes: [{ label: 'step' }, { scale: 'y' },
           { scale: 'lr', side: 1, size: 70, grid: { show: false }, values: (u, ticks) => ticks.map((v) => v.toExponential(1)) }],
    series: [{ label: 'step' }, ...names.map((n, i) => {
      const c = CURVES.find((x) => x[0] === n);
      return { label: c[1], scale: c[2], stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true };
    })],
  };
  const chart = new window.uPlot(opts, [[], ...names.map(() => [])], el);
  const resize = () => chart.setSize({ width: width(), height: opts.height });
  window.addEventListener('resize', resize);
  stops.push(() => window.removeEventListener('resize', resize));
  return chart;
}

async function jobPage(main, id) {
  const mine = page;
  const head = h('div'), summary = h('div'), chartBox = h('div', { class: 'chart', id: 'chart' }), chartNote = h('p', { class: 'muted' });
  const events = h('div', { class: 'events', id: 'events' }), checkpoints = h('div', { id: 'checkpoints' }), compare = h('div', { id: 'compare' });
  fill(main, head, h('div', { class: 'grid' }, card('Summary', summary), card('Events', events)),
       card('Curves', chartBox, chartNote), card('Checkpoints', checkpoints, compare));

  let job = await api('GET', `/v1/fine_tuning/jobs/${encodeURIComponent(id)}`);
  const action = (verb) => h('button', { class: 'plain', onclick: async () => {
    try { job = await api('POST', `/v1/fine_tuning/jobs/${encodeURIComponent(id)}/${verb}`); drawJob(); toast(`${verb}: ${job.status}`); }
    catch (e) { toast(e.message); }
  } }, verb);
  const drawJob = () => {
    const est = job.whet?.estimate;
    fill(head, h('h1', {}, 'Job ', h('span', { class: 'mono' }, job.id), ' ', badge(job.status)),
         h('form', { class: 'row' }, ['queued', 'running'].includes(job.status) ? action('pause') : null,
           job.status === 'paused' ? action('resume') : null, TERMINAL.has(job.status) ? null : action('cancel')));
    fill(summary, kv([
      ['Model', job.model], ['Method', job.method?.type], ['Training file', h('span', { class: 'mono' }, job.training_file)],
      job.validation_file && ['Validation file', h('span', { class: 'mono' }, job.validation_file)],
      ['Created', when(job.created_at)], ['Queue', waitText(job) || '—'],
      ['Step', h('span', { id: 'step' }, series.last === null ? '—' : `${series.last}${series.total ? ` / ${series.total}` : ''}`)],
      ['Trained tokens', num(job.trained_tokens)], ['Cost', h('span', { id: 'cost' }, jobCost(job))],
      est && ['Estimate', `${money(est.cost?.amount, est.cost?.currency)}, ${duration(est.expected_duration_s)}, ${num(est.steps)} steps`],
      est?.actual && ['Actual', `${money(est.actual.cost, est.cost?.currency)}, ${est.actual.duration_s ? duration(est.actual.duration_s) : '—'}, ${num(est.actual.trained_tokens)} tokens`],
      ['Finished', when(job.finished_at)],
      ['Fine-tuned model', job.fine_tuned_model ? h('span', { class: 'mono', id: 'fine-tuned-model' }, job.fine_tuned_model) : '—'],
      job.error && ['Error', h('span', { class: 'error' }, job.error.message)],
    ]));
  };

  // The curves: the whole history once, downsampled, then every new step.
  const series = { last: null, total: null, x: [], y: {}, chart: null, names: [] };
  const addPoints = (data) => {
    for (const p of data) {
      if (series.last !== null && p.step <= series.last) continue;
      if (!series.names.length) { // the first point says which figures this job reports
        series.names = CURVES.map((c) => c[0]).filter((n) => n in p.metrics || (n === 'valid_loss' && job.validation_file));
        if (!series.names.length) continue;
        for (const n of series.names) series.y[n] = [];
        series.chart = makeChart(chartBox, series.names);
      }
      series.x.push(p.step);
      for (const n of series.names) series.y[n].push(typeof p.metrics[n] === 'number' ? p.metrics[n] : null);
      series.last = p.step;
    }
    if (series.chart) series.chart.setData([series.x, ...series.names.map((n) => series.y[n])]);
    chartBox.dataset.points = String(series.x.length);
    fill(chartNote, series.x.length ? `${series.x.length} points, up to step ${series.last}` : 'No steps reported yet.');
  };
  const first = await api('GET', `/v1/fine_tuning/jobs/${encodeURIComponent(id)}/metrics?max_points=1500`);
  if (mine !== page) return;
  series.total = first.total_steps;
  addPoints(first.data);
  drawJob();
  let seenEvents = '';
  let checkpointsSeen = '';
  poll(async () => {
    const base = `/v1/fine_tuning/jobs/${encodeURIComponent(id)}`;
    const [j, m, ev] = await Promise.all([api('GET', base),
      api('GET', `${base}/metrics?limit=2000${series.last === null ? '' : `&after_step=${series.last}`}`),
      api('GET', `${base}/events?limit=100`)]);
    if (mine !== page) return false;
    job = j;
    series.total = m.total_steps;
    addPoints(m.data);
    drawJob();
    const evKey = ev.data.map((e) => e.id).join();
    if (evKey !== seenEvents) {
      seenEvents = evKey;
      fill(events, ev.data.map((e) => h('div', { class: e.level }, h('span', { class: 'muted' }, when(e.created_at)), ' ', e.message)));
    }
    const cps = await api('GET', `${base}/checkpoints?limit=100`);
    const cpKey = cps.data.map((c) => `${c.id}:${c.whet?.pinned}`).join() + job.status;
    if (cpKey !== checkpointsSeen) { checkpointsSeen = cpKey; drawCheckpoints(cps.data); }
    return !TERMINAL.has(job.status) || m.has_more;
  }, 2000, chartNote);

  const picked = new Set();
  function drawCheckpoints(list) {
    const rows = list.map((c) => [
      h('input', { type: 'checkbox', 'aria-label': `compare ${c.id}`, checked: picked.has(c.id), onchange: (e) => {
        if (e.target.checked) picked.add(c.id); else picked.delete(c.id);
        drawCompare(list);
      } }),
      num(c.step_number), h('span', { class: 'mono' }, c.id), num(c.metrics?.train_loss ?? c.metrics?.loss),
      num(c.metrics?.valid_loss ?? c.metrics?.full_valid_loss), filesButton(c.id), pinButton(c, list)]);
    if (job.status === 'succeeded') rows.push(['', 'final', h('span', { class: 'mono' }, job.fine_tuned_model || 'final'), '', '', filesButton('final'), '']);
    fill(checkpoints, table(['', 'Step', 'Checkpoint', 'Train loss', 'Valid loss', 'Files', 'Kept'], rows, [1, 3, 4]));
  }
  // A pinned checkpoint outlives the operator's retention of each job's newest checkpoints.
  function pinButton(c, list) {
    const pinned = c.whet?.pinned === true, verb = pinned ? 'unpin' : 'pin';
    return h('button', { class: 'plain pin', 'aria-label': `${verb} ${c.id}`, 'data-pinned': String(pinned),
      title: pinned ? 'Pinned: kept whatever the retention; click to unpin' : 'Pin: keep it whatever the retention',
      onclick: async () => {
        try {
          const updated = await api('POST', `/v1/fine_tuning/jobs/${encodeURIComponent(id)}/checkpoints/${encodeURIComponent(c.id)}/${verb}`);
          c.whet = updated.whet;
          drawCheckpoints(list);
        } catch (e) { toast(e.message); }
      } }, pinned ? 'pinned' : 'pin');
  }
  function drawCompare(list) {
    const two = list.filter((c) => picked.has(c.id)).slice(0, 2).sort((a, b) => a.step_number - b.step_number);
    if (two.length < 2) { fill(compare, picked.size ? h('p', { class: 'muted' }, 'Pick a second checkpoint to compare.') : null); return; }
    const names = [...new Set([...Object.keys(two[0].metrics || {}), ...Object.keys(two[1].metrics || {})])].sort();
    fill(compare, h('h2', {}, `Step ${two[0].step_number} vs step ${two[1].step_number}`),
         table(['Metric', `step ${two[0].step_number}`, `step ${two[1].step_number}`, 'change'], names.map((n) => {
           const a = two[0].metrics?.[n], b = two[1].metrics?.[n];
           return [n, num(a), num(b), typeof a === 'number' && typeof b === 'number' ? num(b - a, 3) : '—'];
         }), [1, 2, 3]));
  }
  function filesButton(cp) {
    const box = h('div');
    const base = `/v1/fine_tuning/jobs/${encodeURIComponent(id)}/checkpoints/${encodeURIComponent(cp)}/files`;
    box.append(h('button', { class: 'plain', onclick: async () => {
      try {
        const files = await api('GET', base);
        fill(box, files.data.map((f) => h('div', {}, h('a', { href: '#', class: 'download', 'data-name': f.name, onclick: (e) => {
          e.preventDefault();
          download(`${base}/${encodeURIComponent(f.name)}`, f.name).catch((err) => toast(err.message));
        } }, f.name), ` ${bytes(f.bytes)}`)));
      } catch (e) { fill(box, errorBox(e)); }
    } }, 'files'));
    return box;
  }
}

// ---- tenant: a new job, estimated first ----------------------------------------------------------

async function newJobPage(main) {
  const [models, files] = await Promise.all([api('GET', '/v1/models'), api('GET', '/v1/files?limit=100')]);
  const train = files.data.filter((f) => f.purpose === 'fine-tune');
  const field = (label, el) => h('label', {}, label, el);
  const model = h('select', { name: 'model' }, models.data.map((m) => h('option', { value: m.id }, m.id)));
  const fileSel = (name, optional) => h('select', { name }, optional ? h('option', { value: '' }, '(none)') : null,
    train.map((f) => h('option', { value: f.id }, `${f.filename} (${f.id})`)));
  const training = fileSel('training_file', false), validation = fileSel('validation_file', true);
  const method = h('select', { name: 'method' }, ['supervised', 'dpo'].map((m) => h('option', { value: m }, m)));
  const epochs = h('input', { name: 'n_epochs', placeholder: 'auto', inputmode: 'numeric' });
  const batch = h('input', { name: 'batch_size', placeholder: 'auto', inputmode: 'numeric' });
  const lrm = h('input', { name: 'learning_rate_multiplier', placeholder: 'auto', inputmode: 'decimal' });
  const maxSteps = h('input', { name: 'max_steps', placeholder: 'all', inputmode: 'numeric' });
  const suffix = h('input', { name: 'suffix', placeholder: 'optional' });
  const out = h('div', { id: 'estimate' });
  const create = h('button', { type: 'button', id: 'create', disabled: true }, 'Create job');
  const body = () => {
    const hp = {};
    const n = (el) => (el.value.trim() === '' ? undefined : Number(el.value));
    if (n(epochs) !== undefined) hp.n_epochs = n(epochs);
    if (n(batch) !== undefined) hp.batch_size = n(batch);
    if (n(lrm) !== undefined) hp.learning_rate_multiplier = n(lrm);
    const b = { model: model.value, training_file: training.value, method: { type: method.value, [method.value]: { hyperparameters: hp } } };
    if (validation.value) b.validation_file = validation.value;
    if (suffix.value.trim()) b.suffix = suffix.value.trim();
    if (n(maxSteps) !== undefined) b.whet = { max_steps: n(maxSteps) };
    return b;
  };
  const form = h('form', { class: 'stack', onsubmit: async (ev) => {
    ev.preventDefault();
    create.disabled = true;
    try {
      const b = body();
      const e = await api('POST', '/v1/fine_tuning/jobs', { ...b, whet: { ...b.whet, dry_run: true } });
      fill(out, kv([
        ['Examples', num(e.training_examples)], ['Epochs × batch', `${e.n_epochs} × ${e.batch_size}`], ['Steps', num(e.steps)],
        ['Trained tokens', `${num(e.trained_tokens)} (${e.trained_tokens_source})`],
        ['Devices', `${e.device_count} × ${e.device_type} (${e.device_type_source})`],
        ['Throughput', `${num(e.tokens_per_device_s)} tokens/s per device (${e.throughput_source})`],
        ['Expected duration', duration(e.expected_duration_s)],
        ['Cost', h('strong', { id: 'estimate-cost' }, money(e.cost.amount, e.cost.currency))],
        e.budget && ['Budget', `${money(e.budget.spent, e.budget.currency)} spent this month of ${e.budget.monthly_limit === null ? 'no limit' : money(e.budget.monthly_limit, e.budget.currency)}`],
        'within_budget' in e && ['Within budget', e.within_budget ? 'yes' : h('span', { class: 'error' }, 'no: a create would be refused')],
      ]));
      create.disabled = e.within_budget === false;
    } catch (e) { fill(out, errorBox(e)); }
  } },
  field('Base model', model), field('Training file', training), field('Validation file', validation), field('Method', method),
  h('div', { class: 'grid' }, field('Epochs', epochs), field('Batch size', batch), field('LR multiplier', lrm), field('Max steps', maxSteps)),
  field('Suffix', suffix), h('div', { class: 'row' }, h('button', { type: 'submit', id: 'estimate-button' }, 'Estimate'), ' ', create));
  for (const el of form.querySelectorAll('input, select')) el.addEventListener('change', () => { create.disabled = true; });
  create.addEventListener('click', async () => {
    create.disabled = true;
    try {
      const job = await api('POST', '/v1/fine_tuning/jobs', body());
      location.hash = `#/jobs/${encodeURIComponent(job.id)}`;
    } catch (e) { fill(out, errorBox(e)); }
  });
  fill(main, h('h1', {}, 'New fine-tuning job'),
       train.length ? null : card(null, h('p', {}, 'Upload a training file first: ', h('a', { href: '#/files' }, 'Files'), '.')),
       h('div', { class: 'grid' }, card('Request', form), card('Estimate (dry run: nothing is created)', out)));
}

// ---- tenant: files -------------------------------------------------------------------------------

async function uploadFile(file, purpose, onProgress) {
  if (file.size <= PART_BYTES) {
    const form = new FormData();
    form.append('purpose', purpose);
    form.append('file', file, file.name);
    return sendWithProgress('POST', '/v1/files', form, onProgress);
  }
  const up = await api('POST', '/v1/uploads', { filename: file.name, purpose, bytes: file.size, mime_type: 'application/jsonl' });
  const parts = [];
  for (let off = 0; off < file.size; off += PART_BYTES) {
    const form = new FormData();
    form.append('data', file.slice(off, off + PART_BYTES), file.name);
    const part = await sendWithProgress('POST', `/v1/uploads/${up.id}/parts`, form, (n) => onProgress(off + n));
    parts.push(part.id);
  }
  const done = await api('POST', `/v1/uploads/${up.id}/complete`, { part_ids: parts });
  return done.file;
}

async function filesPage(main) {
  const list = h('div', { id: 'files' });
  const input = h('input', { type: 'file', name: 'file', accept: '.jsonl,application/jsonl', required: true });
  const purpose = h('select', { name: 'purpose' }, h('option', { value: 'fine-tune' }, 'fine-tune'));
  const bar = h('progress', { max: 1, value: 0, hidden: true });
  const out = h('div', { id: 'upload-result' });
  const refresh = async () => {
    const files = await api('GET', '/v1/files?limit=100');
    fill(list, table(['File', 'Name', 'Size', 'Purpose', 'Status', 'Created', ''], files.data.map((f) => [
      h('span', { class: 'mono' }, f.id), f.filename, bytes(f.bytes), f.purpose, f.status, when(f.created_at),
      h('button', { class: 'plain', onclick: async () => {
        if (!confirm(`Delete ${f.filename}?`)) return;
        try { await api('DELETE', `/v1/files/${encodeURIComponent(f.id)}`); refresh(); } catch (e) { toast(e.message); }
      } }, 'delete')]), [2], [0, 3, 5]));
  };
  const form = h('form', { class: 'row', onsubmit: async (ev) => {
    ev.preventDefault();
    const file = input.files[0];
    if (!file) return;
    bar.hidden = false;
    bar.max = file.size || 1;
    bar.value = 0;
    fill(out, `Uploading ${file.name} (${bytes(file.size)})${file.size > PART_BYTES ? ' in parts' : ''}…`);
    try {
      const f = await uploadFile(file, purpose.value, (n) => { bar.value = n; });
      bar.value = bar.max;
      fill(out, h('p', {}, 'Uploaded and validated: ', h('span', { class: 'mono', id: 'uploaded-id' }, f.id)));
      refresh();
    } catch (e) {
      bar.hidden = true;
      fill(out, h('p', {}, 'The file was refused:'), errorBox(e));
    }
  } }, h('label', {}, 'JSONL file', input), h('label', {}, 'Purpose', purpose), h('button', { type: 'submit' }, 'Upload'));
  fill(main, h('h1', {}, 'Files'), card('Upload', form, bar, out,
    h('p', { class: 'muted' }, `Every line is validated; errors name the line and field. Files over ${PART_BYTES >> 20} MiB go up in parts (the Uploads API).`)),
  card('Your files', list));
  await refresh();
}

async function modelsPage(main) {
  const models = await api('GET', '/v1/models');
  fill(main, h('h1', {}, 'Models'), card(null, table(['Model', 'Owned by', 'Created'],
    models.data.map((m) => [h('span', { class: 'mono' }, m.id), m.owned_by, when(m.created)]))));
}

// ---- tenant: the playground ----------------------------------------------------------------------

// Streams POST /v1/chat/completions (server-sent events): onText gets each piece of the answer as it
// comes; resolves with the last chunk's usage (stream_options.include_usage) once `data: [DONE]` arrives.
async function streamChat(body, onText, signal) {
  const res = await fetch('/v1/chat/completions', {
    method: 'POST', signal, body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
    headers: { authorization: `Bearer ${session.token}`, 'content-type': 'application/json' },
  });
  if (!res.ok) {
    const text = await res.text();
    let json = null;
    try { json = JSON.parse(text); } catch { /* not JSON: the status says it */ }
    throw new ApiError(res.status, json, text);
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = '', usage = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error('the answer ended before data: [DONE]');
    buffered += value;
    let end;
    while ((end = buffered.indexOf('\n\n')) >= 0) {
      const event = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') return usage;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message || JSON.stringify(chunk.error));
        if (chunk.usage) usage = chunk.usage;
        const piece = chunk.choices?.[0]?.delta?.content;
        if (piece) onText(piece);
      }
    }
  }
}

// Chat with a base or fine-tuned model through the gateway's inference route, the answer streamed.
async function playgroundPage(main) {
  const models = await api('GET', '/v1/models');
  const model = h('select', { name: 'model' }, models.data.map((m) => h('option', { value: m.id }, m.id)));
  const temperature = h('input', { name: 'temperature', value: '0.7', inputmode: 'decimal' });
  const maxTokens = h('input', { name: 'max_tokens', value: '64', inputmode: 'numeric' });
  const system = h('input', { name: 'system', placeholder: 'optional' });
  const prompt = h('textarea', { name: 'prompt', rows: 3, placeholder: 'Say something' });
  const send = h('button', { type: 'submit', id: 'send' }, 'Send');
  const transcript = h('div', { id: 'transcript', class: 'transcript' });
  const status = h('p', { class: 'muted', id: 'chat-status' });
  let messages = [];
  const turn = (role, text) => h('div', { class: `turn ${role}` }, h('strong', {}, role === 'user' ? 'You' : model.value), h('p', {}, text));
  const form = h('form', { class: 'stack', onsubmit: async (ev) => {
    ev.preventDefault();
    const text = prompt.value.trim();
    if (!text) return;
    send.disabled = true;
    prompt.value = '';
    messages.push({ role: 'user', content: text });
    transcript.append(turn('user', text));
    const reply = turn('assistant', '');
    const out = reply.querySelector('p');
    out.classList.add('answer');
    transcript.append(reply);
    const abort = new AbortController();
    stops.push(() => abort.abort());
    const body = { model: model.value, temperature: Number(temperature.value), max_tokens: Number(maxTokens.value),
                   messages: [...(system.value.trim() ? [{ role: 'system', content: system.value.trim() }] : []), ...messages] };
    fill(status, 'Answering…');
    try {
      let pieces = 0;
      const usage = await streamChat(body, (piece) => { out.textContent += piece; out.dataset.pieces = String(++pieces); }, abort.signal);
      out.dataset.done = 'true';
      messages.push({ role: 'assistant', content: out.textContent });
      fill(status, usage ? `${num(usage.prompt_tokens)} prompt + ${num(usage.completion_tokens)} completion tokens, ${pieces} pieces streamed`
        : `${pieces} pieces streamed`);
    } catch (e) {
      if (abort.signal.aborted) return;
      reply.remove();
      messages.pop();
      fill(status, errorBox(e));
    } finally { send.disabled = false; }
  } },
  h('div', { class: 'grid' }, h('label', {}, 'Model', model), h('label', {}, 'Temperature', temperature),
    h('label', {}, 'Max tokens', maxTokens), h('label', {}, 'System prompt', system)),
  h('label', {}, 'Message', prompt),
  h('div', { class: 'row' }, send, ' ', h('button', { type: 'button', onclick: () => { messages = []; fill(transcript); fill(status); } }, 'New chat')));
  model.addEventListener('change', () => { messages = []; fill(transcript); fill(status); });
  fill(main, h('h1', {}, 'Playground'),
       card(null, h('p', { class: 'muted' }, 'Chat with a base model or one of your fine-tuned models (ft:…) through ',
         h('code', {}, 'POST /v1/chat/completions'), ', the answer streamed as it is generated.'), form),
       card('Conversation', transcript, status));
}

// ---- tenant: usage, cost and budget --------------------------------------------------------------

function budgetView(b) {
  if (!b) return h('p', { class: 'muted' }, 'No budget.');
  return kv([['Month from', when(b.month_start)], ['Spent', h('strong', { id: 'spent' }, money(b.spent, b.currency))],
    ['Monthly limit', b.monthly_limit === null ? 'none' : money(b.monthly_limit, b.currency)],
    ['Soft limit', b.soft_limit === null ? 'none' : money(b.soft_limit, b.currency)],
    ['State', b.hard_cap_reached ? h('span', { class: 'error' }, 'hard cap reached: running jobs pause') : b.soft_alert ? 'past the soft limit' : 'ok']]);
}

async function usagePage(main) {
  const now = Math.floor(Date.now() / 1000);
  const [budget, costs, usage] = await Promise.all([api('GET', '/v1/budget'),
    api('GET', `/v1/costs?start_time=${now - 29 * 86400}&bucket_width=1d&group_by=line_item&limit=31`),
    api('GET', '/v1/usage')]);
  // GET /v1/prices is a 404 until an operator adds a price book, and the browser logs every 404 as an
  // error: ask only once something was priced (a book, once in effect, stays until the next one).
  const priced = costs.data.some((b) => b.results.some((r) => r.amount.value !== 0));
  const prices = priced ? await api('GET', '/v1/prices').catch(() => null) : null;
  const days = costs.data.map((b) => ({ start: b.start_time, total: b.results.reduce((s, r) => s + r.amount.value, 0),
    currency: b.results[0]?.amount.currency, items: b.results.filter((r) => r.amount.value !== 0) }));
  const top = Math.max(1e-12, ...days.map((d) => Math.abs(d.total)));
  const currency = budget.currency;
  fill(main, h('h1', {}, 'Usage and cost'), h('div', { class: 'grid' }, card('Budget', budgetView(budget)),
    card('Prices in effect', prices ? kv(Object.entries(prices.prices).map(([k, v]) => [k, typeof v === 'number' ? money(v, prices.currency)
      : Object.entries(v).map(([t, p]) => `${t}: ${money(p, prices.currency)}`).join(', ')])) : h('p', { class: 'muted' }, 'Nothing priced yet: the estimate on New job prices a job before it runs.'))),
  card('Cost by day (last 30 days)', h('div', { id: 'costs' }, table(['Day', 'Cost', '', 'Line items'],
    days.filter((d) => d.items.length).reverse().map((d) => [when(d.start).slice(0, 10), money(d.total, d.currency || currency),
      h('div', { class: 'bar', style: `width:${Math.round((100 * Math.abs(d.total)) / top)}px` }),
      d.items.map((r) => `${r.line_item}: ${money(r.amount.value, r.amount.currency)}`).join(', ')]), [1]))),
  card('Usage by job', table(['Job', 'Device', 'Device time', 'Trained tokens', 'Rollout tokens', 'Attempts', 'Cost'],
    usage.data.map((u) => [h('a', { href: `#/jobs/${encodeURIComponent(u.job_id)}`, class: 'mono' }, u.job_id), u.device_type,
      duration(u.device_seconds), num(u.trained_tokens), num(u.rollout_tokens), u.attempts,
      u.cost ? money(u.cost.amount, u.cost.currency) : '—']), [2, 3, 4, 5, 6], [1, 4, 5])));
}

// API keys: scoped, with an expiry and a limit of their own; the key itself is shown once.
function keysTable(keys, revoke) {
  return table(['Key', 'Name', 'Scopes', 'Created', 'Expires', 'Spent / limit', ''], keys.map((k) => [
    h('span', { class: 'mono' }, `${k.prefix}…`), k.name, (k.scopes || ['all']).join(', '), when(k.created_at), when(k.expires_at),
    `${money(k.spent_this_month ?? 0)} / ${k.monthly_limit === null || k.monthly_limit === undefined ? '—' : money(k.monthly_limit)}`,
    k.revoked_at ? `revoked ${when(k.revoked_at)}` : h('button', { class: 'plain', onclick: () => revoke(k) }, 'revoke')]));
}
function keyForm(onCreate) {
  const name = h('input', { name: 'name', placeholder: 'optional' });
  const scopes = ['all', 'read', 'files', 'jobs', 'inference'].map((s) => h('label', { class: 'check' }, h('input', { type: 'checkbox', value: s, checked: s === 'all' }), s));
  const limit = h('input', { name: 'monthly_limit', placeholder: 'none', inputmode: 'decimal' });
  const days = h('input', { name: 'expires_days', placeholder: 'never', inputmode: 'numeric' });
  return h('form', { class: 'row', onsubmit: (ev) => {
    ev.preventDefault();
    const b = { scopes: scopes.map((l) => l.firstChild).filter((c) => c.checked).map((c) => c.value) };
    if (!b.scopes.length) delete b.scopes;
    if (name.value.trim()) b.name = name.value.trim();
    if (limit.value.trim()) b.monthly_limit = Number(limit.value);
    if (days.value.trim()) b.expires_at = Math.floor(Date.now() / 1000) + Number(days.value) * 86400;
    onCreate(b);
  } }, h('label', {}, 'Name', name), h('div', { class: 'row' }, scopes), h('label', {}, 'Monthly limit', limit),
  h('label', {}, 'Expires in days', days), h('button', { type: 'submit' }, 'Create key'));
}

async function keysPage(main) {
  const list = h('div'), out = h('div');
  const refresh = async () => fill(list, keysTable((await api('GET', '/v1/api_keys')).data, async (k) => {
    try { await api('DELETE', `/v1/api_keys/${encodeURIComponent(k.id)}`); refresh(); } catch (e) { toast(e.message); }
  }));
  fill(main, h('h1', {}, 'API keys'), card('New key', keyForm(async (b) => {
    try {
      const k = await api('POST', '/v1/api_keys', b);
      fill(out, h('p', {}, 'The new key (shown once): ', h('code', { class: 'mono' }, k.key)));
      refresh();
    } catch (e) { fill(out, errorBox(e)); }
  }), out), card('Keys', list));
  await refresh();
}

// ---- operator pages ------------------------------------------------------------------------------

async function tenantsPage(main) {
  const list = h('div'), out = h('div');
  const tenants = pager(() => '/admin/v1/tenants', 'More tenants', (items) => fill(list, table(
    ['Tenant', 'Id', 'Weight', 'Rate /s', 'Max active jobs', 'State', 'Created'], items.map((x) => [
      h('a', { href: `#/admin/tenants/${encodeURIComponent(x.id)}` }, x.name), h('span', { class: 'mono' }, x.id), num(x.weight),
      num(x.rate_per_s), x.max_active_jobs, x.disabled ? 'disabled' : 'active', when(x.created_at)]), [2, 3, 4])));
  const refresh = tenants.refresh;
  const name = h('input', { name: 'name', required: true, pattern: '[A-Za-z0-9][A-Za-z0-9_.\\-]{0,63}' });
  fill(main, h('h1', {}, 'Tenants'), card('New tenant', h('form', { class: 'row', onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      const t = await api('POST', '/admin/v1/tenants', { name: name.value.trim() });
      fill(out, h('p', {}, `Tenant ${t.name}: its first API key (shown once) `, h('code', { class: 'mono' }, t.api_key)));
      refresh();
    } catch (e) { fill(out, errorBox(e)); }
  } }, h('label', {}, 'Name', name), h('button', { type: 'submit' }, 'Create')), out), card('All tenants', list, tenants.more));
  await refresh();
}

async function tenantPage(main, id) {
  const base = `/admin/v1/tenants/${encodeURIComponent(id)}`;
  const [t, quotas, budget] = await Promise.all([api('GET', base), api('GET', `${base}/quotas`), api('GET', `${base}/budget`)]);
  const keys = h('div'), keyOut = h('div'), quotaOut = h('div'), budgetOut = h('div');
  const refreshKeys = async () => fill(keys, keysTable((await api('GET', `${base}/api_keys`)).data, async (k) => {
    try { await api('DELETE', `${base}/api_keys/${encodeURIComponent(k.id)}`); refreshKeys(); } catch (e) { toast(e.message); }
  }));
  // Quotas: one row per device type; an empty type drops the row.
  const rows = h('div', { id: 'quotas' });
  const quotaRow = (type = '', gpus = '') => h('div', { class: 'row quota' }, h('label', {}, 'Device type', h('input', { name: 'type', value: type })),
    h('label', {}, 'Guaranteed devices', h('input', { name: 'gpus', value: String(gpus), inputmode: 'numeric' })));
  fill(rows, Object.entries(quotas.quotas).map(([k, v]) => quotaRow(k, v)), quotaRow());
  const limit = h('input', { name: 'monthly_limit', value: budget.monthly_limit ?? '', placeholder: 'none' });
  const soft = h('input', { name: 'soft_limit', value: budget.soft_limit ?? '', placeholder: 'none' });
  const amount = (el) => (el.value.trim() === '' ? null : Number(el.value));
  fill(main, h('h1', {}, `Tenant ${t.name}`), h('div', { class: 'grid' },
    card('Settings', kv([['Id', h('span', { class: 'mono' }, t.id)], ['Weight', num(t.weight)], ['Rate', `${num(t.rate_per_s)}/s, burst ${t.rate_burst}`],
      ['Max active jobs', t.max_active_jobs], ['State', t.disabled ? 'disabled' : 'active']])),
    card('Budget', budgetView(budget), h('form', { class: 'row', onsubmit: async (ev) => {
      ev.preventDefault();
      try { await api('PUT', `${base}/budget`, { monthly_limit: amount(limit), soft_limit: amount(soft) }); fill(budgetOut, 'Saved.'); }
      catch (e) { fill(budgetOut, errorBox(e)); }
    } }, h('label', {}, 'Monthly limit', limit), h('label', {}, 'Soft limit', soft), h('button', { type: 'submit' }, 'Save budget')), budgetOut)),
  card('Quotas (guaranteed devices by type)', h('form', { class: 'stack', id: 'quota-form', onsubmit: async (ev) => {
    ev.preventDefault();
    const q = {};
    for (const r of rows.querySelectorAll('.quota')) {
      const type = r.querySelector('[name=type]').value.trim();
      if (type) q[type] = Number(r.querySelector('[name=gpus]').value || 0);
    }
    try {
      const saved = await api('PUT', `${base}/quotas`, { quotas: q });
      fill(rows, Object.entries(saved.quotas).map(([k, v]) => quotaRow(k, v)), quotaRow());
      fill(quotaOut, h('span', { id: 'quota-saved' }, `Saved: ${Object.entries(saved.quotas).map(([k, v]) => `${k}=${v}`).join(', ') || 'none'}`));
    } catch (e) { fill(quotaOut, errorBox(e)); }
  } }, rows, h('div', {}, h('button', { type: 'submit' }, 'Save quotas')), quotaOut)),
  card('API keys', keyForm(async (b) => {
    try {
      const k = await api('POST', `${base}/api_keys`, b);
      fill(keyOut, h('p', {}, 'The new key (shown once): ', h('code', { class: 'mono' }, k.key)));
      refreshKeys();
    } catch (e) { fill(keyOut, errorBox(e)); }
  }), keyOut, keys));
  await refreshKeys();
}

async function pricesPage(main) {
  const list = h('div'), out = h('div');
  const text = h('textarea', { name: 'prices', spellcheck: 'false' });
  const refresh = async () => {
    const books = (await api('GET', '/admin/v1/prices')).data;
    if (!text.value) text.value = JSON.stringify(books[0]?.prices || { device_hour: { '*': 1 }, trained_tokens_1m: 0.5 }, null, 2);
    fill(list, table(['Version', 'From', 'Until', 'Currency', 'Note', 'Prices'], books.map((b) => [b.version, when(b.effective_from),
      when(b.effective_until), b.currency, b.note, h('span', { class: 'mono' }, JSON.stringify(b.prices))])));
  };
  const currency = h('input', { name: 'currency', value: 'USD', size: 4 });
  const note = h('input', { name: 'note', placeholder: 'optional' });
  fill(main, h('h1', {}, 'Price book'), card('New version (takes effect now)', h('form', { class: 'stack', onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      const b = { currency: currency.value.trim(), prices: JSON.parse(text.value) };
      if (note.value.trim()) b.note = note.value.trim();
      const v = await api('POST', '/admin/v1/prices', b);
      fill(out, `Version ${v.version} in effect from ${when(v.effective_from)}.`);
      refresh();
    } catch (e) { fill(out, errorBox(e)); }
  } }, h('label', {}, 'Prices (JSON: SKU to unit price; device_hour by device type)', text), h('div', { class: 'row' },
    h('label', {}, 'Currency', currency), h('label', {}, 'Note', note)), h('div', {}, h('button', { type: 'submit' }, 'Add version'))), out),
  card('Versions', list));
  await refresh();
}

// "12 waiting · 3 running · 0 paused": every job not ended, as GET /admin/v1/pools counts them.
const jobCounts = (j) => `${num(j.waiting)} waiting · ${num(j.running)} running · ${num(j.paused)} paused jobs`;

// The query string of the filter inputs that hold something ('' when none does).
function filterQuery(inputs) {
  const q = new URLSearchParams(inputs.filter((el) => el.value.trim()).map((el) => [el.name, el.value.trim()])).toString();
  return q ? `?${q}` : '';
}

// Filter inputs (each labelled by its title) in a form: a change or a submit reads the first page again,
// and drops the later ones.
function filterForm(inputs, list, where) {
  const apply = () => { list.reset(); list.refresh().catch((e) => fill(where, errorBox(e))); };
  for (const el of inputs) el.addEventListener('change', apply);
  return h('form', { class: 'row', onsubmit: (ev) => { ev.preventDefault(); apply(); } },
    inputs.map((el) => h('label', {}, el.title, el)));
}

const choice = (name, title, values) => h('select', { name, title }, h('option', { value: '' }, 'all'),
  values.map((v) => h('option', { value: v }, v)));

// The pools come summed by the gateway (GET /admin/v1/pools); the nodes a page at a time, filtered by
// data center, pool (a pool's name in the table sets both) and state.
async function nodesPage(main) {
  const pools = h('div'), list = h('div', { id: 'nodes' });
  const dc = h('input', { name: 'dc', title: 'Data center', placeholder: 'all', size: 10 });
  const pool = h('input', { name: 'pool', title: 'Pool', placeholder: 'all', size: 10 });
  const inputs = [dc, pool, choice('state', 'State', ['ready', 'cordoned', 'lost'])];
  const nodes = pager(() => `/admin/v1/nodes${filterQuery(inputs)}`, 'More nodes', (items) => fill(list, table(
    ['Node', 'Pool', 'State', 'Devices', 'Running jobs', 'Last heartbeat', 'Version'], items.map((n) => [
      h('span', { class: 'mono' }, n.id), `${n.dc}/${n.pool}`, n.state, h('span', { class: 'mono' }, JSON.stringify(n.devices)),
      n.running_jobs.join(', ') || '—', when(Math.floor(n.last_heartbeat)), n.version]), [], [3, 6])));
  const form = filterForm(inputs, nodes, list);
  const only = (p) => { dc.value = p.dc; pool.value = p.pool; form.requestSubmit(); };
  fill(main, h('h1', {}, 'Nodes and pools'), card('Pools', pools), card('Nodes', form, list, nodes.more));
  poll(async () => {
    const [summary] = await Promise.all([api('GET', '/admin/v1/pools'), nodes.refresh()]);
    fill(pools, h('p', { class: 'muted' }, jobCounts(summary.jobs)), table(['Pool', 'Device type', 'Ready', 'Cordoned', 'Lost',
      'Devices', 'Free', 'Running jobs'], summary.data.map((p) => [h('button', { class: 'plain', type: 'button', onclick: () => only(p) },
      `${p.dc}/${p.pool}`), p.device_type, num(p.nodes.ready), num(p.nodes.cordoned), num(p.nodes.lost), num(p.devices),
      num(p.free_devices), num(p.running_jobs)]), [2, 3, 4, 5, 6, 7], [3, 4]));
  }, 5000, pools);
}

async function queuePage(main) {
  const counts = h('p', { class: 'muted' }), list = h('div', { id: 'queue' });
  const inputs = [choice('status', 'Status', ['queued', 'validating_files', 'running', 'paused']),
    h('input', { name: 'tenant', title: 'Tenant (id or name)', placeholder: 'all', size: 14 })];
  const jobs = pager(() => `/admin/v1/queue${filterQuery(inputs)}`, 'More jobs', (items) => fill(list, table(
    ['#', 'Job', 'Tenant', 'Status', 'Model', 'Priority', 'Waiting for / node', 'Created'], items.map((j) => [
      j.queue_position ?? '', h('span', { class: 'mono' }, j.id), h('a', { href: `#/admin/tenants/${encodeURIComponent(j.tenant_id)}` }, j.tenant),
      badge(j.status), j.model, j.priority, j.wait_reason || j.node_id || '—', when(j.created_at)]), [0, 5], [4, 5, 7])));
  fill(main, h('h1', {}, 'Queue'), card(null, h('p', { class: 'muted' },
    'Every job that has not ended: waiting ones in placement order, then running and paused ones, 100 at a time.'),
  counts, filterForm(inputs, jobs, list), list, jobs.more));
  poll(async () => {
    const [summary] = await Promise.all([api('GET', '/admin/v1/pools'), jobs.refresh()]);
    fill(counts, jobCounts(summary.jobs));
  }, 5000, list);
}

async function adminUsagePage(main) {
  const usage = await api('GET', '/admin/v1/usage');
  const period = h('input', { name: 'period', value: new Date().toISOString().slice(0, 7), size: 7 });
  const focus = (format) => download(`/admin/v1/billing/focus?period=${encodeURIComponent(period.value)}&format=${format}`,
                                     `focus-${period.value}.${format}`).catch((e) => toast(e.message));
  fill(main, h('h1', {}, 'Usage'), card('FOCUS 1.2 billing export', h('form', { class: 'row', onsubmit: (ev) => {
    ev.preventDefault();
    focus('csv');
  } }, h('label', {}, 'Month (YYYY-MM)', period), h('button', { type: 'submit' }, 'Download CSV'), ' ',
    h('button', { type: 'button', onclick: () => focus('parquet') }, 'Download Parquet'))),
  card('Usage by tenant and job', table(['Tenant', 'Job', 'Device', 'Device time', 'Trained tokens', 'Lost', 'Cost'], usage.data.map((u) => [
    u.tenant, h('span', { class: 'mono' }, u.job_id), u.device_type, duration(u.device_seconds), num(u.trained_tokens),
    u.lost_device_seconds ? duration(u.lost_device_seconds) : '—', u.cost ? money(u.cost.amount, u.cost.currency) : '—']), [3, 4, 5, 6])));
}

window.addEventListener('hashchange', route);
route();
