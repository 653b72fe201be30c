// metrics.mjs - GET /v1/fine_tuning/jobs/{id}/metrics against a real gateway and PostgreSQL: every
// step's metrics as the scheduler stores them (job events of type 'metrics'), paging with after_step
// and limit, a step reported again by a later attempt answered once (the latest), server-side
// downsampling with max_points keeping each bucket's min and max (a spike survives), bad parameters
// as 400s naming the parameter, tenant isolation, and the latency of a poll with 100k steps stored
// (printed, not asserted: it depends on the machine).
import { startStack, client, multipart, checker, SFT_LINE } from './harness.mjs';

const { check, summary, failed } = checker();
const stack = await startStack();
try {
  const a = client(stack, 'alpha'), b = client(stack, 'beta');
  const m = multipart([{ name: 'purpose', value: 'fine-tune' }, { name: 'file', filename: 'd.jsonl', value: `${SFT_LINE}\n` }]);
  let r = await a('POST', '/v1/files', { body: m.body, headers: { 'content-type': m.type } });
  const file = r.json.id;
  const newJob = async () => (await a('POST', '/v1/fine_tuning/jobs', { json: { model: 'whet-tiny', training_file: file } })).json.id;
  const job = await newJob();
  // Steps as the scheduler writes the executor's reports: attempt 1 reports steps 1..60, is lost, and
  // attempt 2 resumes at 51 (steps 51..60 again, with other losses) and goes on to 100. Step 37 spikes.
  const report = (attempt, from, to, lossExpr) => stack.psql(`
    INSERT INTO job_events (id, tenant_id, job_id, type, message, data, attempt, report_seq)
    SELECT 'ftevent-m${attempt}-' || s, j.tenant_id, j.id, 'metrics', 'Step ' || s,
           jsonb_build_object('step', s, 'loss', ${lossExpr}, 'lr', 0.001, 'tokens', 10), ${attempt}, s
    FROM jobs j, generate_series(${from}, ${to}) s WHERE j.id = '${job}'`);
  report(1, 1, 60, "CASE WHEN s = 37 THEN 100.0 ELSE 1.0 / s END");
  report(2, 51, 100, '2.0 / s');
  // Events that are not steps are left out: a message, and a metrics event without an integer step.
  stack.psql(`INSERT INTO job_events (id, tenant_id, job_id, type, message, data) SELECT 'ftevent-odd', tenant_id, id,
              'metrics', 'odd', '{"step": "x", "loss": 5}' FROM jobs WHERE id = '${job}'`);
  stack.psql(`INSERT INTO job_progress (job_id, tenant_id, attempt, total_steps) SELECT id, tenant_id, 1, 100 FROM jobs WHERE id = '${job}'`);

  r = await a('GET', `/v1/fine_tuning/jobs/${job}/metrics`);
  check(r.status === 200 && r.json.object === 'list' && r.json.data.length === 100, 'every step, once', r.json?.data?.length);
  const steps = r.json.data.map((p) => p.step);
  check(steps[0] === 1 && steps[99] === 100 && steps.every((s, i) => i === 0 || s === steps[i - 1] + 1), 'in step order', steps);
  check(r.json.has_more === false && r.json.last_step === 100 && r.json.downsampled === false, 'envelope', r.json);
  check(r.json.total_steps === 100 && r.json.job_status === 'queued', 'the job\'s total steps and status', r.json);
  const p55 = r.json.data[54];
  check(p55.object === 'fine_tuning.job.metrics' && Math.abs(p55.metrics.loss - 2 / 55) < 1e-9 && p55.metrics.lr === 0.001 &&
        p55.metrics.step === undefined && Number.isInteger(p55.created_at), 'a step run twice answers the latest attempt', p55);
  check(Math.abs(r.json.data[36].metrics.loss - 100) < 1e-9, 'the spike at step 37', r.json.data[36]);

  // Paging: limit, then after_step from the last step seen, as a poller does.
  r = await a('GET', `/v1/fine_tuning/jobs/${job}/metrics?limit=30`);
  check(r.json.data.length === 30 && r.json.has_more === true && r.json.last_step === 30, 'first page', r.json?.last_step);
  r = await a('GET', `/v1/fine_tuning/jobs/${job}/metrics?after_step=30&limit=30`);
  check(r.json.data[0].step === 31 && r.json.last_step === 60 && r.json.has_more === true, 'second page', r.json?.last_step);
  r = await a('GET', `/v1/fine_tuning/jobs/${job}/metrics?after_step=90&limit=30`);
  check(r.json.data.length === 10 && r.json.has_more === false, 'last page', r.json?.data?.length);
  r = await a('GET', `/v1/fine_tuning/jobs/${job}/metrics?after_step=100`);
  check(r.status === 200 && r.json.data.length === 0 && r.json.last_step === null && !r.json.has_more, 'nothing new', r.json);

  // Downsampling: 100 steps into 10 buckets of 10.
  r = await a('GET', `/v1/fine_tuning/jobs/${job}/metrics?max_points=10`);
  check(r.status === 200 && r.json.data.length === 10 && r.json.downsampled === true && r.json.has_more === false,
        'max_points=10: 10 points', r.json);
  const b4 = r.json.data[3];
  check(b4.first_step === 31 && b4.step === 40 && b4.steps === 10, 'a bucket covers its steps and answers its last', b4);
  check(Math.abs(b4.max.loss - 100) < 1e-9 && Math.abs(b4.min.loss - 1 / 40) < 1e-9 && Math.abs(b4.metrics.loss - 1 / 40) < 1e-9,
        'the spike is kept as the bucket\'s max, the bucket\'s min too', b4);
  check(r.json.data.every((p) => p.min.lr === 0.001 && p.max.lr === 0.001 && p.min.tokens === 10), 'every figure has its min and max', r.json.data[0]);
  r = await a('GET', `/v1/fine_tuning/jobs/${job}/metrics?max_points=7`);
  const covered = r.json.data.reduce((n, p) => n + p.steps, 0);
  check(r.json.data.length === 7 && covered === 100 && r.json.data[6].step === 100, 'uneven buckets cover every step once', r.json.data.map((p) => p.steps));
  r = await a('GET', `/v1/fine_tuning/jobs/${job}/metrics?max_points=500`);
  check(r.json.data.length === 100 && r.json.downsampled === false && r.json.data.every((p) => p.steps === 1),
        'fewer steps than points: one point a step', r.json.data.length);
  r = await a('GET', `/v1/fine_tuning/jobs/${job}/metrics?max_points=5&after_step=50&limit=20`);
  check(r.json.data.length === 5 && r.json.data[0].first_step === 51 && r.json.last_step === 70 && r.json.has_more === true,
        'downsampling a window: after_step and limit', r.json);

  // Only the figures named.
  r = await a('GET', `/v1/fine_tuning/jobs/${job}/metrics?metrics=loss,valid_loss&limit=2`);
  check(r.status === 200 && JSON.stringify(r.json.data[1].metrics) === JSON.stringify({ loss: 0.5 }), 'metrics=loss,valid_loss: only those', r.json);
  r = await a('GET', `/v1/fine_tuning/jobs/${job}/metrics?metrics=lr&max_points=10`);
  check(r.json.data.length === 10 && JSON.stringify(r.json.data[3].max) === '{"lr":0.001}' &&
        JSON.stringify(r.json.data[3].metrics) === '{"lr":0.001}', 'metrics=lr downsampled: lr only', r.json?.data?.[3]);

  // Bad input: 400 naming the parameter; unknown and other tenants' jobs: 404.
  for (const [q, param] of [['after_step=-1', 'after_step'], ['after_step=x', 'after_step'], ['limit=0', 'limit'],
    ['limit=10001', 'limit'], ['max_points=0', 'max_points'], ['max_points=1e3', 'max_points'], ['limit=99999999999999999999', 'limit'],
    ['metrics=', 'metrics'], ['metrics=loss,,lr', 'metrics'], ['metrics=lo%20ss', 'metrics'], ['metrics=a%27b', 'metrics']]) {
    r = await a('GET', `/v1/fine_tuning/jobs/${job}/metrics?${q}`);
    check(r.status === 400 && r.json?.error?.param === param, `${q}: 400 naming ${param}`, r.json);
  }
  r = await a('GET', '/v1/fine_tuning/jobs/ftjob-nope/metrics');
  check(r.status === 404, 'unknown job: 404', r.status);
  r = await b('GET', `/v1/fine_tuning/jobs/${job}/metrics`);
  check(r.status === 404, 'another tenant\'s job: 404', r.status);

  // 100k steps stored: a poll for the new steps, a full downsampled read, and the index in the plan.
  const big = await newJob();
  stack.psql(`INSERT INTO job_events (id, tenant_id, job_id, type, message, data, attempt, report_seq)
              SELECT 'ftevent-big-' || s, j.tenant_id, j.id, 'metrics', 'Step ' || s,
                     jsonb_build_object('step', s, 'epoch', s / 1000, 'loss', 1.0 / s, 'lr', 0.001, 'grad_norm', 0.5,
                                        'tokens', 512, 'tokens_per_s', 1000.5), 1, s
              FROM jobs j, generate_series(1, 100000) s WHERE j.id = '${big}'; ANALYZE job_events`);
  // psql blocked node's loop (seconds on a loaded machine): let the client notice a keep-alive socket
  // the gateway closed meanwhile, or the next request would be sent on it
  await new Promise((resolve) => setTimeout(resolve, 200));
  const time = async (path, n) => {
    const ms = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      r = await a('GET', path);
      ms.push(performance.now() - t0);
    }
    ms.sort((x, y) => x - y);
    return { median: ms[Math.floor(n / 2)].toFixed(1), max: ms[n - 1].toFixed(1) };
  };
  const poll = await time(`/v1/fine_tuning/jobs/${big}/metrics?after_step=99990`, 20);
  check(r.status === 200 && r.json.data.length === 10, 'poll after step 99990: 10 steps', r.json?.data?.length);
  const page = await time(`/v1/fine_tuning/jobs/${big}/metrics?after_step=50000&limit=1000`, 10);
  check(r.json.data.length === 1000 && r.json.data[0].step === 50001, 'a page in the middle', r.json?.data?.[0]);
  const sampled = await time(`/v1/fine_tuning/jobs/${big}/metrics?max_points=500`, 3);
  check(r.json.data.length === 500 && r.json.data[499].step === 100000 && r.json.data[0].steps === 200, 'all 100k steps in 500 points', r.json?.data?.[0]);
  const named = await time(`/v1/fine_tuning/jobs/${big}/metrics?max_points=500&metrics=loss,valid_loss,lr`, 3);
  check(r.json.data.length === 500 && r.json.data[0].max.loss === 1, 'all 100k steps in 500 points, figures named', r.json?.data?.[0]);
  console.log(`latency with 100k steps stored (ms): poll after_step ${JSON.stringify(poll)}, page of 1000 ${JSON.stringify(page)}, ` +
              `max_points=500 over all ${JSON.stringify(sampled)}, the same for 3 figures named ${JSON.stringify(named)}`);
  // As the gateway runs it: the tenant's role under row-level security, where only leakproof
  // comparisons may become index conditions (the step must be one, not a filter over every row).
  const tenant = stack.psql(`SELECT tenant_id FROM jobs WHERE id = '${big}'`);
  const plan = stack.psql(`SET ROLE whet_app; SET whet.tenant_id = '${tenant}'; EXPLAIN SELECT DISTINCT ON (metric_step) data
    FROM job_events WHERE tenant_id = '${tenant}' AND job_id = '${big}' AND metric_step > 99990 ORDER BY metric_step, seq DESC`);
  check(/Index Cond: .*metric_step > 99990/.test(plan), 'the poll\'s step is an index condition of the (job, step) index', plan);
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
}
process.exit(summary());
