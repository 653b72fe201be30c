// lib.mjs - what the end-to-end tests share. Importing it holds every answer the tests fetch from the
// gateway to gateway/openapi.json (../integration/lib/openapi.mjs).
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import '../integration/lib/openapi.mjs';

// Polls fn() until it returns something truthy (returned), or throws after timeoutMs.
export async function until(what, fn, timeoutMs = 300000, everyMs = 300) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

// ---- holding a trainer: tests driven by state, not by the CPU's speed
//
// A test that must act on a job while it runs (pause, cancel, preempt it, kill its executor) would race
// the trainer on a fast CPU: the job may finish first. Instead it holds the trainer (SIGSTOP) once it has
// reached a given state, acts, and continues it (SIGCONT) only when the executor's SIGTERM is pending on
// it, or never, when its executor is killed. `jobDir` is the executor's directory for the attempt
// (WORK_DIR/jobs/JOB-ATTEMPT).

// The pids of the `whet train` running in jobDir (none: []).
export function trainerPids(jobDir) {
  try {
    return execFileSync('pgrep', ['-f', `train --config ${jobDir}/trainer.json`], { encoding: 'utf8' })
      .trim().split('\n').map(Number);
  } catch { return []; } // pgrep's status 1: no such process
}

// Steps the trainer in jobDir has finished, and whether it has published a checkpoint.
export function trainerSteps(jobDir) {
  try { return fs.readFileSync(path.join(jobDir, 'out', 'metrics.jsonl'), 'utf8').split('\n').length - 1; }
  catch { return 0; }
}
export function trainerCheckpointed(jobDir) {
  try { return fs.readdirSync(path.join(jobDir, 'out', 'checkpoints')).some((d) => /^step-\d+$/.test(d)); }
  catch { return false; }
}

// Waits until ready(jobDir) holds while its trainer runs, then stops the trainer; continues it when the
// test ends whatever happened. Polls often: the trainer must not get far past the state.
export async function holdTrainer(t, jobDir, ready = (d) => trainerSteps(d) > 0) {
  const pids = await until(`the trainer in ${jobDir} to be ready`,
                           () => { const p = ready(jobDir) ? trainerPids(jobDir) : []; return p.length && p; },
                           300000, 5);
  for (const pid of pids) process.kill(pid, 'SIGSTOP');
  t.after(() => { for (const pid of pids) try { process.kill(pid, 'SIGCONT'); } catch { /* gone */ } });
  return pids;
}

// SIGTERM (15) pending on a process: /proc's ShdPnd (process-directed signals, bit n-1). A process
// that is gone counts as signalled.
function sigtermPending(pid) {
  let status;
  try { status = fs.readFileSync(`/proc/${pid}/status`, 'utf8'); } catch { return true; }
  const m = status.match(/^ShdPnd:\s*([0-9a-f]+)/m);
  return m !== null && (BigInt(`0x${m[1]}`) & (1n << 14n)) !== 0n;
}

// Continues held trainers once the executor's stop (pause, cancel, preemption) has reached them.
export async function releaseWhenSignalled(pids) {
  await until('the stop to reach the held trainer', () => pids.every(sigtermPending));
  for (const pid of pids) try { process.kill(pid, 'SIGCONT'); } catch { /* gone */ }
}

// A test's `whet` processes (`whet up`, executors) with the last 20000 characters of each one's output:
// start(name, args) runs one, dump() prints each one's last lines (on a failure), children are all.
export function whetProcesses(bin, env) {
  const children = [], logs = {};
  const start = (name, args) => {
    const child = spawn(bin, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    logs[name] = '';
    const keep = (d) => { logs[name] = (logs[name] + d).slice(-20000); };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    children.push(child);
    return child;
  };
  const dump = () => {
    for (const [name, text] of Object.entries(logs)) console.error(`---- ${name} ----\n${text.split('\n').slice(-30).join('\n')}`);
  };
  return { children, logs, start, dump };
}
