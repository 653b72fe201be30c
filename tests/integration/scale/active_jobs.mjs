// active_jobs.mjs - the tenant's active-job limit (max_active_jobs) through its counter row
// (migrations/0010_active_jobs.sql): concurrent creates through the gateway at the limit take exactly
// the free slots (the others answer 429), the counter follows cancels, finishes, deletes and jobs
// written by other paths (the scheduler's SQL), and pgbench hammering the create's statement from many
// connections at once (as whet_app, under row-level security) never passes the limit. Every check
// compares the counter with a recount of the jobs.
import { spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startStack, client, multipart, checker, SFT_LINE } from '../api/harness.mjs';

const { check, summary, failed } = checker();
// One database connection per gateway thread: concurrent creates meet on it, so the two-tenant check
// below runs their inserts in shared transactions.
const stack = await startStack({ tenants: ['alpha', 'beta'], env: { WHET_GATEWAY_DB_CONNS: '1' } });
try {
  const a = client(stack, 'alpha'), b = client(stack, 'beta');
  const upload = async (api) => {
    const m = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: 'd.jsonl', value: `${SFT_LINE}\n` }]);
    const r = await api('POST', '/v1/files', { body: m.body, headers: { 'content-type': m.type } });
    if (r.status !== 200) throw new Error(`upload failed: ${r.text}`);
    return r.json.id;
  };
  const fileA = await upload(a), fileB = await upload(b);
  const tenantA = stack.psql("SELECT id FROM tenants WHERE name = 'alpha'");
  const tenantB = stack.psql("SELECT id FROM tenants WHERE name = 'beta'");
  // "counter recount" per tenant, for every tenant.
  const mismatches = () => stack.psql(
    `SELECT string_agg(t.id || ': counter ' || c.active || ', jobs ' || (SELECT count(*) FROM jobs j
       WHERE j.tenant_id = t.id AND j.status IN ('validating_files', 'queued', 'running', 'paused')), '; ')
     FROM tenants t JOIN tenant_active_jobs c ON c.tenant_id = t.id
     WHERE c.active <> (SELECT count(*) FROM jobs j WHERE j.tenant_id = t.id
                        AND j.status IN ('validating_files', 'queued', 'running', 'paused'))`);
  const active = (tenant) => Number(stack.psql(`SELECT active FROM tenant_active_jobs WHERE tenant_id = '${tenant}'`));

  check(stack.psql('SELECT count(*) FROM tenant_active_jobs') === '2', 'every tenant has its counter row');

  // ---- concurrent creates through the gateway at the limit
  const limit = 12, tries = 40;
  stack.psql(`UPDATE tenants SET max_active_jobs = ${limit} WHERE id = '${tenantA}'`);
  const create = (api, file) => api('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: file } });
  let answers = await Promise.all(Array.from({ length: tries }, () => create(a, fileA)));
  const ok = answers.filter((r) => r.status === 200).length, refused = answers.filter((r) => r.status === 429).length;
  check(ok === limit && refused === tries - limit, `${tries} concurrent creates at a limit of ${limit}: ${limit} made, the rest 429`,
        { ok, refused, other: answers.filter((r) => r.status !== 200 && r.status !== 429).map((r) => r.text) });
  check(active(tenantA) === limit && mismatches() === '', 'the counter holds the limit and matches a recount', mismatches());
  check((await create(b, fileB)).status === 200, "another tenant's creates are unaffected");

  // ---- two tenants' creates at once: the gateway lets writes of several tenants share a transaction (in
  // ascending order of tenant, gateway/db.c), and a refused create rolls such a transaction back, its
  // neighbours sent again alone: alpha (at its limit) refused every time, beta given exactly its free slots
  const roomB = 10;
  stack.psql(`UPDATE tenants SET max_active_jobs = ${active(tenantB) + roomB} WHERE id = '${tenantB}'`);
  const mixed = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 ? create(b, fileB) : create(a, fileA))));
  const count = (tenantOdd, status) => mixed.filter((r, i) => i % 2 === tenantOdd && r.status === status).length;
  check(count(1, 200) === roomB && count(1, 429) === 20 - roomB && count(0, 429) === 20,
        `20 creates of each of two tenants at once: beta's ${roomB} free slots taken, the rest and all of alpha's 429`,
        { beta: [count(1, 200), count(1, 429)], alpha: [count(0, 200), count(0, 429)],
          other: mixed.filter((r) => r.status !== 200 && r.status !== 429).map((r) => r.text) });
  check(active(tenantA) === limit && mismatches() === '', 'both counters match a recount', mismatches());

  // ---- cancels free slots; the scheduler's transitions (SQL) keep the counter
  const made = answers.filter((r) => r.status === 200).map((r) => r.json.id);
  for (const id of made.slice(0, 3)) {
    const r = await a('POST', `/v1/fine_tuning/jobs/${id}/cancel`);
    check(r.status === 200 && r.json.status === 'cancelled', 'cancel a queued job', r.text);
  }
  check(active(tenantA) === limit - 3 && mismatches() === '', 'cancels decrement the counter', mismatches());
  check((await a('POST', `/v1/fine_tuning/jobs/${made[0]}/cancel`)).status === 200 && active(tenantA) === limit - 3,
        'a repeated cancel changes nothing');
  stack.psql(`UPDATE jobs SET status = 'running' WHERE id = '${made[3]}'`);
  stack.psql(`UPDATE jobs SET status = 'paused' WHERE id = '${made[4]}'`);
  check(active(tenantA) === limit - 3, 'placing and pausing leave the counter alone');
  stack.psql(`UPDATE jobs SET status = 'succeeded', finished_at = whet_now() WHERE id = '${made[3]}'`);
  stack.psql(`UPDATE jobs SET status = 'failed', finished_at = whet_now() WHERE id = '${made[4]}'`);
  stack.psql(`DELETE FROM job_events WHERE job_id = '${made[5]}'; DELETE FROM jobs WHERE id = '${made[5]}'`);
  check(active(tenantA) === limit - 6 && mismatches() === '', 'finishes, failures and deletes decrement it', mismatches());
  stack.psql(`UPDATE jobs SET status = 'queued', finished_at = NULL WHERE id = '${made[4]}'`);
  check(active(tenantA) === limit - 5 && mismatches() === '', 'a finished job requeued counts again', mismatches());

  // ---- refill concurrently: exactly the free slots are taken
  answers = await Promise.all(Array.from({ length: 20 }, () => create(a, fileA)));
  check(answers.filter((r) => r.status === 200).length === 5 && answers.filter((r) => r.status === 429).length === 15,
        'concurrent creates take exactly the 5 freed slots', answers.map((r) => r.status));
  check(active(tenantA) === limit && mismatches() === '', 'full again, counter exact', mismatches());
  stack.psql(`UPDATE tenants SET max_active_jobs = ${limit + 1} WHERE id = '${tenantA}'`);
  check((await create(a, fileA)).status === 200, 'a raised limit admits one more at once');

  // ---- a create refused at the limit keeps no Idempotency-Key (its transaction rolled back): the same
  // request made once a slot is free creates the job, and a retry of that one replays it
  const keyed = () => a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: fileA },
                                                          headers: { 'idempotency-key': 'at-the-limit' } });
  const refusedKeyed = await keyed();
  check(refusedKeyed.status === 429 && active(tenantA) === limit + 1, 'a keyed create at the limit: 429, nothing written',
        refusedKeyed.text);
  check((await a('POST', `/v1/fine_tuning/jobs/${made[6]}/cancel`)).status === 200, 'a slot freed');
  const madeKeyed = await keyed(), replayed = await keyed();
  check(madeKeyed.status === 200 && replayed.status === 200 && replayed.json.id === madeKeyed.json.id &&
        active(tenantA) === limit + 1 && mismatches() === '', 'the same key then creates the job once, and replays it',
        { made: madeKeyed.text, replayed: replayed.text });

  // ---- pgbench: 16 connections race the create's statement as whet_app, cancelling as they go
  stack.psql(`UPDATE tenants SET max_active_jobs = 50 WHERE id = '${tenantB}'`);
  const script = join(stack.dir, 'race.sql');
  writeFileSync(script, `\\set n random(1, 1000000000)
BEGIN;
INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed)
  SELECT 'ftjob-race' || :n || '-' || :client_id, :tenant, 'whet-tiny', 'whet-tiny', :file, '{}', 1
  WHERE whet_job_slot(:tenant);
COMMIT;
\\set r random(1, 4)
UPDATE jobs SET status = 'cancelled'
  WHERE :r = 1 AND id = (SELECT id FROM jobs WHERE tenant_id = :tenant AND status = 'queued' LIMIT 1 FOR UPDATE SKIP LOCKED);
`);
  const race = () => spawnSync('pgbench', ['-n', '-M', 'prepared', '-c', '16', '-j', '4', '-t', '60', '-D', `tenant=${tenantB}`,
                                                 '-D', `file=${fileB}`, '-f', script, stack.dbUrl],
                                    { encoding: 'utf8', env: { ...process.env, PGOPTIONS: `-c role=whet_app -c whet.tenant_id=${tenantB}` } });
  let run = race();
  check(run.status === 0, 'pgbench race ran', run.stderr.slice(-2000));
  const activeB = () => Number(stack.psql(`SELECT count(*) FROM jobs WHERE tenant_id = '${tenantB}'
                                          AND status IN ('validating_files', 'queued', 'running', 'paused')`));
  check(activeB() <= 50 && active(tenantB) === activeB() && mismatches() === '',
        'after 960 racing creates with cancels: never over the limit, counter exact', { jobs: activeB(), mismatches: mismatches() });
  stack.psql(`UPDATE jobs SET status = 'cancelled' WHERE tenant_id = '${tenantB}' AND status = 'queued'`);
  writeFileSync(script, `\\set n random(1, 1000000000)
INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed)
  SELECT 'ftjob-fill' || :n || '-' || :client_id, :tenant, 'whet-tiny', 'whet-tiny', :file, '{}', 1
  WHERE whet_job_slot(:tenant);
`);
  run = race();
  check(run.status === 0, 'pgbench fill ran', run.stderr.slice(-2000));
  check(activeB() === 50 && active(tenantB) === 50 && mismatches() === '',
        '960 racing creates into 50 free slots: exactly 50 made', { jobs: activeB(), mismatches: mismatches() });
  // whet_app scoped to one tenant cannot take (or lock) another tenant's slot.
  check(stack.psql(`SET ROLE whet_app; SET whet.tenant_id = '${tenantB}'; SELECT whet_job_slot('${tenantA}')`) === 'f',
        "whet_job_slot refuses another tenant's counter");

  // ---- the gateway's form (migration 0049): insert unlocked, then whet_job_slot_check fails the transaction
  // past the limit (here a subtransaction of the DO block, as pgbench stops a client at its first error)
  stack.psql(`UPDATE jobs SET status = 'cancelled' WHERE id IN
                (SELECT id FROM jobs WHERE tenant_id = '${tenantB}' AND status = 'queued' LIMIT 20)`);
  check(activeB() === 30 && active(tenantB) === 30, '20 cancelled: 20 slots free');
  writeFileSync(script, `\\set n random(1, 1000000000)
DO $$ BEGIN
  INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed)
    VALUES ('ftjob-after' || :n || '-' || :client_id, '${tenantB}', 'whet-tiny', 'whet-tiny', '${fileB}', '{}', 1);
  PERFORM whet_job_slot_check('${tenantB}');
EXCEPTION WHEN SQLSTATE 'WJ429' THEN NULL;
END $$;
`);
  run = spawnSync('pgbench', ['-n', '-M', 'simple', '-c', '16', '-j', '4', '-t', '60', '-f', script, stack.dbUrl],
                  { encoding: 'utf8', env: { ...process.env, PGOPTIONS: `-c role=whet_app -c whet.tenant_id=${tenantB}` } });
  check(run.status === 0, 'pgbench check-after race ran', run.stderr.slice(-2000));
  check(activeB() === 50 && active(tenantB) === 50 && mismatches() === '',
        '960 racing check-after creates into 20 free slots: exactly 20 made, counter exact',
        { jobs: activeB(), mismatches: mismatches() });
  // ---- the gateway's form since migration 0064: the insert alone, its count and the limit's check at the
  // commit (a deferred trigger). 16 psql sessions, each committing 60 inserts one at a time, into 10 free slots.
  stack.psql(`UPDATE jobs SET status = 'cancelled' WHERE id IN
                (SELECT id FROM jobs WHERE tenant_id = '${tenantB}' AND status = 'queued' LIMIT 10)`);
  check(activeB() === 40 && active(tenantB) === 40, '10 cancelled: 10 slots free');
  const inserts = (session) => Array.from({ length: 60 }, (_, i) =>
    `INSERT INTO jobs (id, tenant_id, model, base_model, training_file, method, seed)
       VALUES ('ftjob-commit${session}-${i}', '${tenantB}', 'whet-tiny', 'whet-tiny', '${fileB}', '{}', 1);`).join('\n');
  const sessions = await Promise.all(Array.from({ length: 16 }, (_, session) => new Promise((done) => {
    const p = spawn('psql', ['-qtAX', '-v', 'ON_ERROR_STOP=0', stack.dbUrl],
                    { env: { ...process.env, PGOPTIONS: `-c role=whet_app -c whet.tenant_id=${tenantB}` } });
    let stderr = '';
    p.stderr.on('data', (d) => { stderr += d; });
    p.on('close', (code) => done({ code, stderr }));
    p.stdin.end(inserts(session));
  })));
  const refusals = sessions.reduce((n, s) => n + (s.stderr.match(/active-job limit/g) || []).length, 0);
  check(activeB() === 50 && active(tenantB) === 50 && mismatches() === '' && refusals === 960 - 10 &&
        sessions.every((s) => s.code === 0),
        '960 racing inserts checked at their commits into 10 free slots: exactly 10 made, the rest refused, counter exact',
        { jobs: activeB(), refusals, mismatches: mismatches(), stderr: sessions.map((s) => s.stderr.slice(0, 300)) });

  const foreign = spawnSync('psql', ['-qtAX', '-c', `SET ROLE whet_app; SET whet.tenant_id = '${tenantB}';
                                                     SELECT whet_job_slot_check('${tenantA}')`, stack.dbUrl], { encoding: 'utf8' });
  check(foreign.status !== 0 && /WJ429|active-job limit/.test(foreign.stderr), "whet_job_slot_check refuses another tenant's counter",
        foreign.stderr);

  // ---- jobs written with triggers off (a restore) drift the counter; whet_active_jobs_recount repairs it
  stack.psql(`SET session_replication_role = replica; UPDATE jobs SET status = 'cancelled' WHERE id IN
                (SELECT id FROM jobs WHERE tenant_id = '${tenantB}' AND status = 'queued' LIMIT 3)`);
  check(active(tenantB) === 50 && activeB() === 47, 'a change with triggers off leaves the counter behind');
  stack.psql('SELECT whet_active_jobs_recount()');
  check(active(tenantB) === 47 && mismatches() === '', 'whet_active_jobs_recount repairs it', mismatches());

  // ---- a tenant deleted with its jobs takes its counter along
  stack.psql(`DELETE FROM tenants WHERE id = '${tenantB}'`);
  check(stack.psql(`SELECT count(*) FROM tenant_active_jobs WHERE tenant_id = '${tenantB}'`) === '0' && mismatches() === '',
        'deleting a tenant removes its counter');
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
}
process.exit(summary());
