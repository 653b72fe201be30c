// training_worker.mjs - for the session tests: a `whet serve --training` worker on a free port, with a
// `post` that answers a call's JSON or throws on any status but 200.
import { spawn } from 'node:child_process';
import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';

// startTrainingWorker(model, dir, extra args, extra env) -> { proc, gone (its exit status), post }
export async function startTrainingWorker(model, dir, extra = [], env = {}) {
  const addressFile = join(dir, 'address');
  const proc = spawn(process.env.WHET_BIN, ['serve', '--model', model, '--http', '127.0.0.1:0', '--address-file', addressFile,
    '--max-len', '128', '--training', ...extra], { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, ...env } });
  const gone = new Promise((resolve) => proc.on('exit', resolve));
  for (let i = 0; i < 1200 && !(existsSync(addressFile) && readFileSync(addressFile, 'utf8').trim()); i++) await new Promise((r) => setTimeout(r, 50));
  const at = readFileSync(addressFile, 'utf8').trim();
  const post = async (path, body) => {
    const res = await fetch(`http://${at}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const json = await res.json();
    if (res.status !== 200) throw new Error(`${path}: ${res.status} ${JSON.stringify(json)}`);
    return json;
  };
  return { proc, gone, post };
}

export { stopWorker as stopTrainingWorker } from './worker.mjs';
