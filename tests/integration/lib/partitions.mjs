// partitions.mjs - what the tests of the monthly partitions (job_events, migration 0044; usage_records,
// migration 0051) share: a database at the schema before a migration, a table's partitions and their
// bounds, the names of months, and a run of the leading scheduler.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { WHET_BIN, freePort, psql, sleep } from './gateway.mjs';

// Applies the migrations before `version` to the database at `url`, as `whet migrate` applies them.
export function migrateBefore(url, version) {
  psql(url, `CREATE TABLE whet_schema_migrations (version integer PRIMARY KEY, name text NOT NULL,
               applied_at timestamptz NOT NULL DEFAULT now())`);
  const dir = join(process.env.WHET_SOURCE_DIR, 'migrations');
  for (const f of readdirSync(dir).sort()) {
    const m = f.match(/^(\d{4})_(.*)\.sql$/);
    if (!m || Number(m[1]) >= version) continue;
    psql(url, `${readFileSync(join(dir, f), 'utf8')};
               INSERT INTO whet_schema_migrations (version, name) VALUES (${Number(m[1])}, '${m[2]}')`);
  }
}

// The partitions of table `parent`: name -> [from, to) in Unix seconds (null: the DEFAULT partition).
export function partitionsOf(url, parent) {
  const out = {};
  for (const line of psql(url, `SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
                                JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = '${parent}'::regclass`).split('\n')) {
    const [name, bound] = line.split('|');
    const m = bound.match(/FROM \('?(\d+)'?\) TO \('?(\d+)'?\)/);
    out[name] = m ? [Number(m[1]), Number(m[2])] : null;
  }
  return out;
}

// The first second (UTC) of the month `months` after the one holding t.
export function monthStart(t, months = 0) {
  const d = new Date(t * 1000);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + months, 1) / 1000;
}

// The name of `parent`'s partition of the month holding t.
export function monthPartition(parent, t) {
  const d = new Date(t * 1000);
  return `${parent}_${d.getUTCFullYear()}${String(d.getUTCMonth() + 1).padStart(2, '0')}`;
}

// Runs a leading `whet scheduler ARGS` on the database at `url` until done(log lines) holds (at most 60 s,
// or until it exits), stops it, and returns its log lines.
export async function leaderRun(url, args, done, objectStore) {
  const port = await freePort();
  const log = [];
  const proc = spawn(WHET_BIN, ['scheduler', '--grpc', `127.0.0.1:${port}`, ...args], {
    env: { ...process.env, WHET_DATABASE_URL: url, WHET_EXECUTOR_TOKEN: 't', WHET_OBJECT_STORE: objectStore },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  proc.stderr.on('data', (c) => log.push(...c.toString().split('\n')));
  try {
    for (let i = 0; i < 600 && !done(log) && proc.exitCode === null; i++) await sleep(100);
  } finally {
    if (proc.exitCode === null) {
      proc.kill('SIGTERM');
      await new Promise((res) => proc.on('exit', res));
    }
  }
  return log;
}
