// graders_api.mjs - POST /v1/fine_tuning/alpha/graders/run (and /validate) against a real gateway and
// PostgreSQL: OpenAI's response shape for each grader type, the sample's output_json, multi sub_rewards, a
// python grader's exception in metadata.errors (reward 0, HTTP 200; python graders run in a `whet grade`
// child, in the sandbox, as the gateway links no sandbox), score_model and label_model
// graders judged by the catalog's whet-tiny (downloaded once into the gateway's judge cache, run by a
// `whet grade` child), a judge that cannot be fetched or loaded (reward 0, model_grader_server_error), and
// refusals (a judge model not in the catalog named by its field's path, (a bad field named by its path in `param`, a missing model_sample, an unknown key).
// Also runs the request through the OpenAI SDK's client.fineTuning.alpha.graders.run.
import OpenAI from 'openai';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, mkdirSync, readdirSync, existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { startStack, client, checker } from '../api/harness.mjs';

const { check, summary, failed } = checker();
// The gateway's own TMPDIR: its judge cache (no data dir) starts empty and is looked at below.
const gatewayTmp = mkdtempSync(join(tmpdir(), 'whet-graders-api-'));
const stack = await startStack({ tenants: ['alpha'], env: { TMPDIR: gatewayTmp } });
try {
  const a = client(stack, 'alpha');
  const run = (body) => a('POST', '/v1/fine_tuning/alpha/graders/run', { json: body });
  const exact = { type: 'string_check', name: 'exact', input: '{{sample.output_json.answer}}',
                  reference: '{{item.answer}}', operation: 'eq' };

  let r = await run({ grader: exact, model_sample: '{"answer": "42"}', item: { answer: '42' } });
  check(r.status === 200 && r.json.reward === 1, 'string_check on output_json: reward 1', r.text);
  const m = r.json?.metadata;
  check(m?.name === 'exact' && m.type === 'string_check' && typeof m.execution_time === 'number' &&
        m.token_usage === null && m.sampled_model_name === null, 'metadata fields', m);
  const flags = ['formula_parse_error', 'sample_parse_error', 'truncated_observation_error', 'unresponsive_reward_error',
                 'invalid_variable_error', 'other_error', 'python_grader_server_error', 'python_grader_runtime_error',
                 'model_grader_server_error', 'model_grader_refusal_error', 'model_grader_parse_error'];
  check(flags.every((f) => m?.errors?.[f] === false), 'every error flag false', m?.errors);
  check(JSON.stringify(r.json?.sub_rewards) === '{}' && JSON.stringify(r.json?.model_grader_token_usage_per_model) === '{}',
        'sub_rewards and token usage empty', r.json);

  r = await run({ grader: exact, model_sample: 'not json', item: { answer: '42' } });
  check(r.status === 200 && r.json.reward === 0 && r.json.metadata.errors.sample_parse_error === true,
        'a sample that is not JSON: sample_parse_error', r.text);

  r = await run({ grader: { type: 'text_similarity', name: 'sim', input: '{{sample.output_text}}', reference: '{{item.ref}}',
                            evaluation_metric: 'rouge_1', pass_threshold: 0.5 },
                  model_sample: 'two plus two', item: { ref: 'two and two' } });
  check(r.status === 200 && Math.abs(r.json.reward - 2 / 3) < 1e-9 && Math.abs(r.json.metadata.scores.rouge_1 - 2 / 3) < 1e-9,
        'text_similarity rouge_1', r.text);

  r = await run({ grader: { type: 'multi', name: 'combo', calculate_output: '0.5 * exact + 0.5 * py',
                            graders: { exact, py: { type: 'python', name: 'py', source: 'def grade(s, i):\n    return len(s["output_text"]) / 100\n' } } },
                  model_sample: '{"answer": "42"}', item: { answer: '42' } });
  check(r.status === 200 && Math.abs(r.json.reward - 0.58) < 1e-9 && r.json.sub_rewards.exact === 1 &&
        Math.abs(r.json.sub_rewards.py - 0.16) < 1e-9, 'multi with a python sub-grader', r.text);

  r = await run({ grader: { type: 'python', name: 'boom', source: 'def grade(s, i):\n    raise ValueError("nope")\n' }, model_sample: 'x' });
  check(r.status === 200 && r.json.reward === 0 && r.json.metadata.errors.python_grader_runtime_error === true &&
        /ValueError: nope/.test(r.json.metadata.errors.python_grader_runtime_error_details), 'python exception: reward 0 with details', r.text);

  // Model graders: whet-tiny goes into the catalog and the object store as `whet model register` puts it.
  const modelDir = join(gatewayTmp, 'whet-tiny-src');
  execFileSync(process.env.WHET_BIN, ['model', 'init', '--preset', 'tiny', '--out', modelDir], { stdio: 'pipe' });
  execFileSync(process.env.WHET_BIN, ['model', 'register', 'whet-tiny', modelDir], { stdio: 'pipe',
    env: { ...process.env, WHET_DATABASE_URL: stack.dbUrl, WHET_OBJECT_STORE: `file://${stack.objects}` } });
  const judgeInput = [{ role: 'user', content: 'Rate this answer: {{sample.output_text}}' }];
  r = await run({ grader: { type: 'score_model', name: 'judge', model: 'whet-tiny', input: judgeInput, range: [0, 10] },
                  model_sample: 'four' });
  const je = r.json?.metadata?.errors;
  // The tiny model's reply is noise: a number in it is the reward, none is a parse error; either way
  // the judge answered (no server error) and the reward is in range.
  check(r.status === 200 && r.json.metadata.type === 'score_model' && r.json.reward >= 0 && r.json.reward <= 10 &&
        je?.model_grader_server_error === false && !/not supported/.test(r.text) &&
        (je.model_grader_parse_error === false || /judge's reply/.test(JSON.stringify(je.messages))),
        'score_model judged by whet-tiny', r.text);
  const cacheRoot = readdirSync(gatewayTmp).filter((d) => d.startsWith('whet-judge-cache-'));
  // besides the judge, only the cache's own files: its lock and the judge's use file (common/dir_cache.h)
  const cached = cacheRoot.length === 1 ? readdirSync(join(gatewayTmp, cacheRoot[0])).sort() : [];
  check(cached.length === 3 && cached[2].startsWith('whet-tiny-') && cached[0] === '.lock' &&
        cached[1] === `.${cached[2]}.use` &&
        existsSync(join(gatewayTmp, cacheRoot[0], cached[2], 'MANIFEST.json')) &&
        readdirSync(gatewayTmp).every((d) => !d.startsWith('whet-grade-')),
        'the judge is cached once, no download or child temp dir left behind', { cacheRoot, cached });
  r = await run({ grader: { type: 'label_model', name: 'lab', model: 'whet-tiny', input: judgeInput,
                            labels: ['good', 'bad'], passing_labels: ['good'] }, model_sample: 'four' });
  check(r.status === 200 && r.json.metadata.type === 'label_model' && (r.json.reward === 0 || r.json.reward === 1) &&
        r.json.metadata.errors.model_grader_server_error === false, 'label_model judged by whet-tiny (cache reused)', r.text);
  r = await run({ grader: { type: 'multi', name: 'both', calculate_output: 'exact + 0 * q',
                            graders: { exact, q: { type: 'score_model', name: 'q', model: 'whet-tiny', input: judgeInput } } },
                  model_sample: '{"answer": "42"}', item: { answer: '42' } });
  check(r.status === 200 && r.json.reward === 1 && r.json.sub_rewards.exact === 1 && typeof r.json.sub_rewards.q === 'number' &&
        r.json.metadata.errors.model_grader_server_error === false, 'multi with a judged sub-grader', r.text);
  r = await run({ grader: { type: 'score_model', name: 'judge', model: 'no-such-model', input: judgeInput }, model_sample: 'x' });
  check(r.status === 400 && r.json?.error?.param === 'grader.model' && /no-such-model/.test(r.json.error.message),
        'a judge model not in the catalog: 400 naming grader.model', r.text);
  r = await run({ grader: { type: 'multi', name: 'm', calculate_output: 'q',
                            graders: { q: { type: 'label_model', name: 'q', model: 'nope', input: judgeInput, labels: ['a'], passing_labels: ['a'] } } },
                  model_sample: 'x' });
  check(r.status === 400 && r.json?.error?.param === 'grader.graders.q.model', 'a nested unknown judge: its path', r.text);
  // In the catalog but not in the object store: the judge cannot answer, which is a result, not a 5xx.
  stack.psql(`INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
              VALUES ('ghost', 'llama', 1000000, 'models/ghost', 'ff', '{}')`);
  r = await run({ grader: { type: 'score_model', name: 'g', model: 'ghost', input: judgeInput }, model_sample: 'x' });
  check(r.status === 200 && r.json.reward === 0 && r.json.metadata.errors.model_grader_server_error === true &&
        /ghost/.test(r.json.metadata.errors.model_grader_server_error_details), 'a judge that cannot be fetched: server error result', r.text);
  // Fetched, but no model the judge can load: the `whet grade` child fails, and its message is the details.
  const brokenConfig = '{"architectures": ["NoSuchModel"]}';
  mkdirSync(join(stack.objects, 'models', 'broken'), { recursive: true });
  writeFileSync(join(stack.objects, 'models', 'broken', 'config.json'), brokenConfig);
  writeFileSync(join(stack.objects, 'models', 'broken', 'MANIFEST.json'), JSON.stringify({ files: [{ name: 'config.json',
    size: brokenConfig.length, sha256: createHash('sha256').update(brokenConfig).digest('hex') }] }));
  stack.psql(`INSERT INTO base_models (id, architecture, parameters, object_prefix, sha256, config)
              VALUES ('broken', 'llama', 1000000, 'models/broken', 'ee', '{}')`);
  r = await run({ grader: { type: 'score_model', name: 'b', model: 'broken', input: judgeInput }, model_sample: 'x' });
  check(r.status === 200 && r.json.reward === 0 && r.json.metadata.errors.model_grader_server_error === true &&
        /the judge failed \(exit status 1\): whet grade: .*broken/.test(r.json.metadata.errors.model_grader_server_error_details),
        'a judge that does not load: the child\'s message as a server error result', r.text);

  r = await run({ grader: { type: 'multi', name: 'm', calculate_output: 'a', graders: { accuracy: { ...exact, operation: 'equals' } } }, model_sample: 'x' });
  check(r.status === 400 && r.json?.error?.param === 'grader.graders.accuracy.operation' &&
        /expected one of eq, ne, like, ilike/.test(r.json.error.message), 'a bad field: 400 naming its path', r.text);
  r = await run({ grader: { ...exact, evaluation_metric: 'cosine', type: 'text_similarity', operation: undefined }, model_sample: 'x' });
  check(r.status === 400 && /cosine.*not supported/.test(r.json?.error?.message), 'cosine: not supported', r.text);
  r = await run({ grader: exact });
  check(r.status === 400 && r.json?.error?.param === 'model_sample', 'model_sample missing', r.text);
  const validate = (body) => a('POST', '/v1/fine_tuning/alpha/graders/validate', { json: body });
  r = await validate({ grader: { type: 'multi', name: 'm', calculate_output: 'accuracy', graders: { accuracy: { ...exact, operation: 'equals' } } } });
  check(r.status === 400 && r.json?.error?.param === 'grader.graders.accuracy.operation', 'validate: a nested bad field named by its path', r.text);
  r = await validate({ grader: { type: 'python', name: 'p', source: 'def grade(s, i):\n    return 1\n' } });
  check(r.status === 200 && r.json?.grader?.name === 'p', 'validate: a python grader (not run)', r.text);
  r = await validate({ grader: exact, model_sample: 'x' });
  check(r.status === 400 && r.json?.error?.param === 'model_sample', 'validate: run\'s arguments are unknown here', r.text);
  r = await run({ grader: exact, model_sample: 'x', extra: 1 });
  check(r.status === 400 && r.json?.error?.param === 'extra', 'unknown argument', r.text);

  // The OpenAI SDK's own call.
  const sdk = new OpenAI({ apiKey: stack.keys.alpha, baseURL: `${stack.url}/v1` });
  const out = await sdk.fineTuning.alpha.graders.run({ grader: exact, model_sample: '{"answer": "41"}', item: { answer: '42' } });
  check(out.reward === 0 && out.metadata.type === 'string_check', 'the OpenAI SDK: graders.run', out);
} catch (e) {
  check(false, 'exception', String(e.stack || e));
} finally {
  const stopped = await stack.stop();
  check(stopped === null, 'the gateway exits cleanly', stopped);
  if (failed()) console.error(stack.logTail(60));
  rmSync(gatewayTmp, { recursive: true, force: true });
}
process.exit(summary());
