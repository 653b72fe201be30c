// The web console in a real browser: Debian's chromium, driven by puppeteer-core, against `whet up` (one
// executor with a simulated H100 whose training runs on the CPU). An operator adds a price book; a tenant
// signs in with its API key, uploads a dataset (and sees the validator's line error for a broken one),
// estimates a job and creates it from the form, watches its loss curve gain points (the trainer is held
// after its first steps, so the test is driven by state, not by the CPU's speed), downloads the final
// adapter and sees the cost; the operator raises the tenant's quota. At a terminal, `whet jobs follow`
// watches the same job to its model's name and `whet files upload` uploads (or shows the line error). In the
// playground the tenant chats with whet-tiny and with the new fine-tuned model, the answers streamed.
// Every page is screenshotted at 1280x800 and at a phone's width into OUT (WHET_CONSOLE_OUT, default
// build/tests/e2e/console/out), and the browser's log must hold no error but the broken upload's 400.
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { parquetReadObjects } from 'hyparquet';
import { until, holdTrainer, trainerSteps } from '../lib.mjs';
import { requireEnv, createDatabase, freePort, WHET_BIN } from '../../integration/lib/gateway.mjs';

const require = createRequire(new URL('../../package.json', import.meta.url));
const puppeteer = require('puppeteer-core');

requireEnv();
const CHROMIUM = process.env.WHET_CHROMIUM || '/usr/bin/chromium';
if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: deploy/install-deps.sh installs Debian's chromium`);
const OUT = process.env.WHET_CONSOLE_OUT || path.join(process.env.WHET_BUILD_DIR || 'build', 'tests', 'e2e', 'console', 'out');
fs.rmSync(OUT, { recursive: true, force: true });
fs.mkdirSync(path.join(OUT, 'downloads'), { recursive: true });

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'whet-console-'));
fs.chmodSync(work, 0o755);
const db = createDatabase();
const httpPort = await freePort(), grpcPort = await freePort();
const env = { ...process.env, WHET_DATABASE_URL: db.url, WHET_DATA_DIR: work };
let log = '';
const up = spawn(WHET_BIN, ['up', '--data-dir', work, '--http', `127.0.0.1:${httpPort}`, '--grpc', `127.0.0.1:${grpcPort}`,
                            '--executors', '1', '--devices', 'sim:H100:1'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
up.stdout.on('data', (d) => { log = (log + d).slice(-30000); });
up.stderr.on('data', (d) => { log = (log + d).slice(-30000); });
await until('whet up to be ready', () => log.includes('whet: ready'), 120000).catch((e) => { console.error(log); throw e; });
const whet = (...args) => execFileSync(WHET_BIN, [...args, '--data-dir', work], { env, encoding: 'utf8' });
const key = whet('tenant', 'create', 'console').trim();
const adminToken = whet('token', '--admin').trim();
const base = `http://127.0.0.1:${httpPort}`;

const browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true,
                                         args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
test.after(async () => {
  await browser.close();
  up.kill('SIGTERM');
  db.drop();
  fs.rmSync(work, { recursive: true, force: true });
});

// Every error the browser logs, and every uncaught exception, with where it came from.
const problems = [];
const transfer = new Map(); // URL -> bytes received for the console's own files
async function newPage() {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 800 });
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`${m.text()} (${m.location()?.url || ''})`); });
  page.on('pageerror', (e) => problems.push(`uncaught: ${e.message}`));
  page.on('response', async (r) => {
    if (!r.url().startsWith(`${base}/console`)) return;
    try { transfer.set(r.url(), (await r.buffer()).length); } catch { /* a redirect or an aborted load */ }
  });
  return page;
}
// The page's document is no wider than a phone's screen: nothing forces sideways scrolling but tables.
const overflowAtPhone = (page) => page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth + 1);
const shots = [];
const overflowing = []; // pages wider than a phone's screen
async function shoot(page, name) {
  for (const [suffix, width, height] of [['', 1280, 800], ['-phone', 390, 844]]) {
    await page.setViewport({ width, height });
    await new Promise((r) => setTimeout(r, 150)); // the chart follows the window's width
    if (suffix && await overflowAtPhone(page)) overflowing.push(name);
    const file = path.join(OUT, `${name}${suffix}.png`);
    await page.screenshot({ path: file, fullPage: true });
    shots.push(file);
  }
  await page.setViewport({ width: 1280, height: 800 });
}
async function signIn(page, role, token) {
  await page.goto(`${base}/console`, { waitUntil: 'load' });
  await page.waitForSelector('input[name=token]');
  await page.select('select[name=role]', role);
  await page.type('input[name=token]', token);
  await page.click('button[type=submit]');
  await page.waitForSelector('#who a');
}
const text = (page, sel) => page.$eval(sel, (e) => e.textContent);

test('the console, from a tenant signing in to an operator raising a quota', async (t) => {
  t.after(() => { if (t.passed === false) console.error(log.split('\n').slice(-40).join('\n')); });

  // The operator prices device time so the job's cost is visible.
  const op = await newPage();
  await signIn(op, 'operator', adminToken);
  await op.goto(`${base}/console#/admin/prices`);
  await op.waitForSelector('textarea[name=prices]');
  await op.$eval('textarea[name=prices]', (e) => { e.value = '{"device_hour": {"*": 36}, "trained_tokens_1m": 2}'; });
  await op.click('form.stack button[type=submit]');
  await op.waitForFunction(() => document.body.textContent.includes('Version 1 in effect'));
  await shoot(op, 'operator-prices');
  await op.goto(`${base}/console#/admin/nodes`);
  await op.waitForFunction(() => document.body.textContent.includes('executor-1') || document.querySelectorAll('tbody tr').length > 1);
  await shoot(op, 'operator-nodes');

  // The tenant signs in; a broken file shows the validator's line error, a good one uploads.
  const page = await newPage();
  await page.bringToFront();
  await signIn(page, 'tenant', key);
  assert.match(await text(page, '#who'), /console/);
  await page.goto(`${base}/console#/files`);
  const input = await page.waitForSelector('input[type=file]');
  const bad = path.join(work, 'broken.jsonl');
  fs.writeFileSync(bad, '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n{"messages": 3}\n');
  await input.uploadFile(bad);
  await page.click('form.row button[type=submit]');
  await page.waitForSelector('#upload-result pre.error');
  const refusal = await text(page, '#upload-result pre.error');
  assert.match(refusal, /line 2/, `the validator's error names the line: ${refusal}`);
  await shoot(page, 'files-refused');
  await input.uploadFile(path.join(process.env.WHET_FIXTURES, 'sft', 'train.jsonl'));
  await page.click('form.row button[type=submit]');
  await page.waitForSelector('#uploaded-id');
  const fileId = await text(page, '#uploaded-id');
  await page.waitForFunction((id) => document.getElementById('files').textContent.includes(id), {}, fileId);
  await shoot(page, 'files');
  // A file over the console's 8 MiB goes up through the Uploads API, in parts.
  const lines = fs.readFileSync(path.join(process.env.WHET_FIXTURES, 'sft', 'train.jsonl'), 'utf8');
  const big = path.join(work, 'big.jsonl');
  fs.writeFileSync(big, lines.repeat(Math.ceil(9e6 / lines.length)));
  await input.uploadFile(big);
  await page.click('form.row button[type=submit]');
  await page.waitForFunction((before) => {
    const id = document.getElementById('uploaded-id');
    return id && id.textContent !== before;
  }, { timeout: 60000 }, fileId);
  assert.equal(await page.$eval('#upload-result', (e) => e.previousElementSibling.value), fs.statSync(big).size,
               'the progress bar ends at the file size');
  assert.match(log, /route="uploads\.parts"[^\n]*status=200/, 'the parts went through the Uploads API');

  // Estimate, then create from the same form.
  await page.goto(`${base}/console#/new`);
  await page.waitForSelector('select[name=training_file]');
  await page.select('select[name=training_file]', fileId);
  await page.type('input[name=n_epochs]', '50');
  await page.type('input[name=batch_size]', '2');
  await page.type('input[name=max_steps]', '48'); // one epoch of the 96 examples: the estimate is exact
  await page.click('#estimate-button');
  await page.waitForSelector('#estimate-cost');
  assert.match(await text(page, '#estimate-cost'), /\$\d/);
  await shoot(page, 'estimate');
  await page.waitForFunction(() => !document.getElementById('create').disabled);
  await page.click('#create');
  await page.waitForFunction(() => /^#\/jobs\/.+/.test(location.hash));
  const jobId = decodeURIComponent((await page.evaluate(() => location.hash)).slice('#/jobs/'.length));
  // A tenant at a terminal follows the same job: `whet jobs follow` ends with the model's name on stdout.
  const cliEnv = { ...env, WHET_API_KEY: key, WHET_API_BASE: base };
  const follow = spawn(WHET_BIN, ['jobs', 'follow', jobId, '--interval', '0.5'], { env: cliEnv });
  const followed = { out: '', err: '' };
  follow.stdout.on('data', (d) => { followed.out += d; });
  follow.stderr.on('data', (d) => { followed.err += d; });
  const followExit = new Promise((resolve) => follow.on('exit', resolve));

  // The curve gains points: held after its first steps, then let go to the end.
  const jobDir = path.join(work, 'executors', 'executor-1', 'jobs', `${jobId}-1`);
  const held = await holdTrainer(t, jobDir, (d) => trainerSteps(d) >= 3);
  const points = () => page.$eval('#chart', (e) => Number(e.dataset.points || 0));
  await page.waitForFunction(() => Number(document.getElementById('chart').dataset.points || 0) >= 1, { timeout: 60000 });
  const early = await points();
  await shoot(page, 'job-running');
  // The operator's queue shows the running job on its node.
  await op.bringToFront();
  await op.goto(`${base}/console#/admin/queue`);
  await op.waitForFunction((id) => document.getElementById('queue')?.textContent.includes(id), {}, jobId);
  assert.match(await text(op, '#queue'), /running/);
  await shoot(op, 'operator-queue');
  await page.bringToFront();
  for (const pid of held) process.kill(pid, 'SIGCONT');
  await page.waitForFunction(() => document.querySelector('.status')?.textContent === 'succeeded', { timeout: 120000 });
  await page.waitForFunction((n) => Number(document.getElementById('chart').dataset.points || 0) > n, { timeout: 30000 }, early);
  const late = await points();
  assert.ok(late > early && late <= 48, `the curve grew from ${early} to ${late} points`);
  await page.waitForSelector('#fine-tuned-model');
  assert.match(await text(page, '#fine-tuned-model'), /^ft:whet-tiny:console/);
  await page.waitForFunction(() => /\$\d/.test(document.getElementById('cost').textContent), { timeout: 30000 });
  const cost = await text(page, '#cost');
  assert.equal(await followExit, 0, followed.err);
  assert.equal(followed.out.trim(), await text(page, '#fine-tuned-model'), 'whet jobs follow prints the model');
  assert.match(followed.err, /100% step 48\/48 +loss \d+\.\d+ +cost \d+\.\d+ USD +succeeded/, followed.err);
  // `whet files upload`: the new file's id on stdout, or the validator's line error.
  const uploaded = spawnSync(WHET_BIN, ['files', 'upload', path.join(process.env.WHET_FIXTURES, 'sft', 'train.jsonl')],
                             { env: cliEnv, encoding: 'utf8' });
  assert.equal(uploaded.status, 0, uploaded.stderr);
  assert.match(uploaded.stdout.trim(), /^file-\w+$/);
  const refusedCli = spawnSync(WHET_BIN, ['files', 'upload', bad], { env: cliEnv, encoding: 'utf8' });
  assert.equal(refusedCli.status, 1);
  assert.match(refusedCli.stderr, /400 .*line 2/, refusedCli.stderr);

  // The final adapter, downloaded through the page (a blob fetched with the key).
  const cdp = await browser.target().createCDPSession();
  await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: path.join(OUT, 'downloads') });
  await page.waitForFunction(() => [...document.querySelectorAll('#checkpoints td')].some((td) => td.textContent === 'final'));
  const finalRow = (await page.$$('#checkpoints tbody tr')).at(-1);
  await (await finalRow.$('button')).click();
  const link = await page.waitForSelector('#checkpoints a.download[data-name="adapter_model.safetensors"]');
  await link.click();
  const saved = path.join(OUT, 'downloads', 'adapter_model.safetensors');
  await until('the download', () => fs.existsSync(saved) && !fs.existsSync(`${saved}.crdownload`), 30000);
  const listing = await (await fetch(`${base}/v1/fine_tuning/jobs/${jobId}/checkpoints/final/files`,
                                     { headers: { authorization: `Bearer ${key}` } })).json();
  const want = listing.data.find((f) => f.name === 'adapter_model.safetensors');
  assert.equal(crypto.createHash('sha256').update(fs.readFileSync(saved)).digest('hex'), want.sha256, 'the download is the adapter');
  // Two checkpoints side by side.
  const boxes = await page.$$('#checkpoints input[type=checkbox]');
  assert.ok(boxes.length >= 2, `checkpoints listed: ${boxes.length}`);
  await boxes[0].click();
  await boxes[1].click();
  await page.waitForFunction(() => /^Step \d+ vs step \d+$/.test(document.querySelector('#compare h2')?.textContent || ''));
  assert.ok(await page.$$eval('#compare tbody tr', (rows) => rows.length) >= 1, 'the comparison lists metrics');
  // Pinning a checkpoint from its row: the button says so, and the API agrees.
  const pinFirst = await page.waitForSelector('#checkpoints button.pin[data-pinned="false"]');
  const pinnedId = (await pinFirst.evaluate((b) => b.getAttribute('aria-label'))).replace(/^pin /, '');
  await pinFirst.click();
  await page.waitForSelector(`#checkpoints button.pin[data-pinned="true"][aria-label="unpin ${pinnedId}"]`);
  const cps = await (await fetch(`${base}/v1/fine_tuning/jobs/${jobId}/checkpoints?limit=100`,
                                 { headers: { authorization: `Bearer ${key}` } })).json();
  assert.equal(cps.data.find((c) => c.id === pinnedId)?.whet.pinned, true, 'the pin reached the API');
  await shoot(page, 'job-done');

  // The playground: chat with the base model, then with the fine-tuned one, the answers streamed through
  // the gateway's /v1/chat/completions from the model worker `whet up` runs for whet-tiny.
  const ftModel = await text(page, '#fine-tuned-model');
  await page.goto(`${base}/console#/playground`);
  await page.waitForSelector('textarea[name=prompt]');
  const chat = async (model, message, n) => {
    await page.select('select[name=model]', model);
    await page.$eval('input[name=max_tokens]', (e) => { e.value = '24'; });
    await page.type('textarea[name=prompt]', message);
    await page.click('#send');
    await page.waitForFunction((k) => document.querySelectorAll('.answer')[k]?.dataset.done === 'true' ||
                                      document.querySelector('#chat-status pre.error'), { timeout: 60000 }, n);
    assert.equal(await page.$('#chat-status pre.error'), null, await text(page, '#chat-status'));
    return page.$$eval('.answer', (els, k) => ({ text: els[k].textContent, pieces: Number(els[k].dataset.pieces || 0) }), n);
  };
  const answer = await chat('whet-tiny', 'Hello, who are you?', 0);
  assert.ok(answer.text.length > 0 && answer.pieces >= 1, `the base model's answer streamed: ${JSON.stringify(answer)}`);
  assert.match(await text(page, '#chat-status'), /\d+ prompt \+ [1-9]\d* completion tokens/);
  await shoot(page, 'playground');
  const ftAnswer = await chat(ftModel, 'hi', 0); // a new model starts a new chat
  assert.match(await text(page, '#chat-status'), /\d+ prompt \+ [1-9]\d* completion tokens/, `the fine-tuned model answered: ${JSON.stringify(ftAnswer)}`);
  await shoot(page, 'playground-ft');

  // Jobs list and the bill.
  await page.goto(`${base}/console#/jobs`);
  await page.waitForFunction((id) => document.body.textContent.includes(id), {}, jobId);
  await shoot(page, 'jobs');
  await page.goto(`${base}/console#/usage`);
  await page.waitForSelector('#spent');
  await page.waitForFunction(() => /\$\d/.test(document.getElementById('costs').textContent));
  await shoot(page, 'usage');

  // The operator raises the tenant's quota on its page (a tab in the background gets no input).
  await op.bringToFront();
  await op.goto(`${base}/console#/admin/tenants`);
  await op.waitForFunction(() => [...document.querySelectorAll('a')].some((a) => a.textContent === 'console'));
  await Promise.all([op.waitForSelector('#quota-form'),
                     op.evaluate(() => [...document.querySelectorAll('a')].find((a) => a.textContent === 'console').click())]);
  const row = (await op.$$('#quotas .quota')).at(-1);
  await (await row.$('input[name=type]')).type('H100');
  await (await row.$('input[name=gpus]')).type('4');
  await op.click('#quota-form button[type=submit]');
  await op.waitForSelector('#quota-saved');
  assert.match(await text(op, '#quota-saved'), /H100=4/);
  const tenantId = decodeURIComponent((await op.evaluate(() => location.hash)).split('/').at(-1));
  const quotas = await (await fetch(`${base}/admin/v1/tenants/${tenantId}/quotas`,
                                    { headers: { authorization: `Bearer ${adminToken}` } })).json();
  assert.deepEqual(quotas.quotas, { H100: 4 });
  await shoot(op, 'operator-tenant');
  // The month's FOCUS export as Parquet from the operator's usage page, read back by hyparquet: the job's rows.
  await op.goto(`${base}/console#/admin/usage`);
  await op.waitForSelector('input[name=period]');
  const month = await op.$eval('input[name=period]', (e) => e.value);
  await op.evaluate(() => [...document.querySelectorAll('button')].find((b) => b.textContent === 'Download Parquet').click());
  const focusFile = path.join(OUT, 'downloads', `focus-${month}.parquet`);
  await until('the Parquet download', () => fs.existsSync(focusFile) && !fs.existsSync(`${focusFile}.crdownload`), 30000);
  const focusBytes = fs.readFileSync(focusFile);
  const focusRows = await parquetReadObjects({ file: focusBytes.buffer.slice(focusBytes.byteOffset, focusBytes.byteOffset + focusBytes.length) });
  assert.ok(focusRows.some((x) => x.ResourceId === jobId && x.BilledCost > 0), `the job's cost in the FOCUS Parquet: ${focusRows.length} rows`);
  await shoot(op, 'operator-usage');

  assert.deepEqual(overflowing, [], 'every page fits a phone (only tables scroll sideways)');
  // Only the broken upload's 400 may be in the browser's log.
  const unexpected = problems.filter((p) => !(p.includes('status of 400') && p.includes('/v1/files')));
  assert.deepEqual(unexpected, [], 'no error in the browser log');
  const sizes = [...transfer].map(([u, n]) => `${u.slice(base.length)} ${n}`).join(', ');
  const total = [...transfer.values()].reduce((s, n) => s + n, 0);
  const job = await (await fetch(`${base}/v1/fine_tuning/jobs/${jobId}`, { headers: { authorization: `Bearer ${key}` } })).json();
  const est = job.whet.estimate;
  // The dry run counted the file's tokens with whet-tiny's tokenizer and chat template; the create kept
  // that count, and a whole epoch trains every example once: the estimate is the actual, token for token.
  assert.equal(est.trained_tokens_source, 'tokenized');
  assert.equal(est.trained_tokens, est.actual?.trained_tokens, 'estimated trained tokens = the actual');
  console.log(`console: job ${jobId} cost ${cost}, curve ${early} -> ${late} points; transfer ${total} bytes (${sizes}); ` +
              `${shots.length} screenshots in ${OUT}; estimate ${est.trained_tokens} tokens ${est.expected_duration_s} s ` +
              `${est.cost.amount} ${est.cost.currency} (${est.throughput_source}) vs actual ${est.actual?.trained_tokens} tokens ` +
              `${est.actual?.duration_s} s ${est.actual?.cost}`);
});
