// streams.mjs - the load of the serving benchmark: STREAMS concurrent chat completions spread over the
// worker's adapters (stream i on adapter i % ADAPTERS), each streamed, temperature 1, MAX_TOKENS tokens.
//   node streams.mjs BASE_URL ADAPTERS STREAMS MAX_TOKENS LABEL
// Prints one JSON line: completion tokens, wall seconds, tokens/s, and time to first token (p50, max).
const [base, adapters, streams, maxTokens, label] = process.argv.slice(2);
const t0 = performance.now();
const one = async (i) => {
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: `a${i % Number(adapters)}`, messages: [{ role: 'user', content: `Tell me about ${i}.` }],
      max_tokens: Number(maxTokens), temperature: 1, seed: i, stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok) throw new Error(`stream ${i}: ${res.status} ${await res.text()}`);
  let first = null, tokens = 0, buf = '';
  for await (const part of res.body) {
    if (first === null) first = performance.now() - t0;
    buf += Buffer.from(part).toString();
    for (let k; (k = buf.indexOf('\n\n')) >= 0; buf = buf.slice(k + 2)) {
      const line = buf.slice(0, k);
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      const chunk = JSON.parse(line.slice(6));
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
    }
  }
  return { first, tokens };
};
const results = await Promise.all(Array.from({ length: Number(streams) }, (_, i) => one(i)));
const seconds = (performance.now() - t0) / 1000;
const tokens = results.reduce((a, r) => a + r.tokens, 0);
const firsts = results.map((r) => r.first / 1000).sort((a, b) => a - b);
console.log(JSON.stringify({ impl: 'whet serve', label, streams: Number(streams), tokens, seconds,
  tokens_per_s: tokens / seconds, ttft_p50_s: firsts[firsts.length >> 1], ttft_max_s: firsts[firsts.length - 1] }));
