// worker.mjs - what the gateway-side serving tests share: a `whet serve` worker started on a free port
// (once it listens, its model loaded), and the gateway's inference usage rows.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// `whet serve --model MODEL --name NAME ARGS…` on 127.0.0.1, its address file in `dir`:
// { proc, at (HOST:PORT), gone (a promise of its exit code, or the signal that ended it) }.
let started = 0;
export async function startWorker(dir, model, name, ...args) {
  const addressFile = join(dir, `worker-address-${started++}`);
  const proc = spawn(process.env.WHET_BIN, ['serve', '--model', model, '--name', name, '--http', '127.0.0.1:0', '--address-file',
    addressFile, ...args], { stdio: ['ignore', 'inherit', 'inherit'] });
  const gone = new Promise((resolve) => proc.on('exit', (code, signal) => resolve(code ?? signal)));
  for (let i = 0; i < 1200 && !(existsSync(addressFile) && readFileSync(addressFile, 'utf8').trim()); i++) await sleep(50);
  return { proc, gone, at: existsSync(addressFile) ? readFileSync(addressFile, 'utf8').trim() : '' };
}

// The end of a test: the worker stopped (it must exit 0) and the test's dir removed.
export async function stopWorker(worker, dir, check) {
  worker.proc.kill('SIGTERM');
  check((await worker.gone) === 0, 'the worker exits 0');
  rmSync(dir, { recursive: true, force: true });
}

// The end of a test through the gateway: the gateway stopped (it must exit cleanly; the tail of its log
// shown when a check failed), then stopWorker.
export async function stopAll(stack, worker, dir, { check, failed }) {
  if (stack) {
    const stopped = await stack.stop();
    check(stopped === null, 'the gateway exits cleanly', stopped);
    if (failed()) console.error(stack.logTail(60));
  }
  await stopWorker(worker, dir, check);
}

// Every inference_usage row as "tenant|model|prompt_tokens|completion_tokens", sorted, once there are
// `count` of them (a row is written as its answer ends: the client may see the end first), or after 5 s.
export async function usageRows(stack, count) {
  let rows = [];
  for (let i = 0; i < 100; i++) {
    rows = stack.psql(`SELECT t.name, i.model, i.prompt_tokens, i.completion_tokens FROM inference_usage i
                       JOIN tenants t ON t.id = i.tenant_id`).split('\n').filter((l) => l).sort();
    if (rows.length >= count) break;
    await sleep(50);
  }
  return rows;
}
