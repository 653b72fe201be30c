// judge_cache.mjs - the gateway's judge cache bounded by WHET_JUDGE_CACHE_MAX (common/dir_cache.h), through
// POST /v1/fine_tuning/alpha/graders/run on a real gateway: with room for one judge, judging with a second
// evicts the first (the least recently used), the first comes back when it is used again, and a multi
// grader that needs both at once gets both (a judge in use is never evicted) and the cache is back within
// its bound afterwards.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { startStack, client, checker } from '../api/harness.mjs';

const { check, summary, failed } = checker();
const gatewayTmp = mkdtempSync(join(tmpdir(), 'whet-judge-cache-'));
const modelDir = join(gatewayTmp, 'model-src');
execFileSync(process.env.WHET_BIN, ['model', 'init', '--preset', 'tiny', '--out', modelDir], { stdio: 'pipe' });
// Room for one judge and a half: a second judge pushes the first out.
const modelBytes = readdirSync(modelDir).reduce((n, f) => n + statSync(join(modelDir, f)).size, 0);
const bound = Math.floor(modelBytes * 1.5);
const stack = await startStack({ tenants: ['alpha'], env: { TMPDIR: gatewayTmp, WHET_JUDGE_CACHE_MAX: String(bound) } });
try {
  for (const name of ['judge-a', 'judge-b'])
    execFileSync(process.env.WHET_BIN, ['model', 'register', name, modelDir], { stdio: 'pipe',
      env: { ...process.env, WHET_DATABASE_URL: stack.dbUrl, WHET_OBJECT_STORE: `file://${stack.objects}` } });
  const a = client(stack, 'alpha');
  const input = [{ role: 'user', content: 'Rate this answer: {{sample.output_text}}' }];
  const judged = async (model, what) => {
    const r = await a('POST', '/v1/fine_tuning/alpha/graders/run',
      { json: { grader: { type: 'score_model', name: 'q', model, input, range: [0, 10] }, model_sample: 'four' } });
    check(r.status === 200 && r.json?.metadata?.errors?.model_grader_server_error === false, what, r.text);
  };
  // The judges in the cache (its own hidden files aside).
  const cached = () => {
    const roots = readdirSync(gatewayTmp).filter((d) => d.startsWith('whet-judge-cache-'));
    return roots.length === 1 ? readdirSync(join(gatewayTmp, roots[0])).filter((d) => !d.startsWith('.')).sort() : roots;
  };
  const holds = (names) => JSON.stringify(cached().map((d) => d.replace(/-[0-9a-f]+$/, ''))) === JSON.stringify(names);

  await judged('judge-a', 'judge-a answers');
  check(holds(['judge-a']), 'judge-a is cached', cached());
  await judged('judge-b', 'judge-b answers');
  check(holds(['judge-b']), 'judge-b pushed judge-a, the least recently used, out', cached());
  check(/evicted the least recently used entry" cache="judge cache" entry=judge-a-/.test(stack.logTail(200)),
        'the gateway logs the eviction', stack.logTail(20));
  await judged('judge-a', 'judge-a answers again, fetched again');
  check(holds(['judge-a']), 'and judge-b went', cached());

  // Both at once: the second fetch may not evict the first, which the same run needs.
  const r = await a('POST', '/v1/fine_tuning/alpha/graders/run', { json: { grader: { type: 'multi', name: 'm',
    calculate_output: 'x + y', graders: { x: { type: 'score_model', name: 'x', model: 'judge-a', input, range: [0, 10] },
                                          y: { type: 'score_model', name: 'y', model: 'judge-b', input, range: [0, 10] } } },
    model_sample: 'four' } });
  check(r.status === 200 && r.json?.metadata?.errors?.model_grader_server_error === false,
        'a multi grader judged by both, more than the bound holds', r.text);
  check(cached().length === 1, 'once they are given back, the cache is within its bound again', cached());
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
  rmSync(gatewayTmp, { recursive: true, force: true });
}
process.exit(summary());
