#!/usr/bin/env python3
"""bench_sft_data.py - how fast `whet train` turns a chat JSONL file into trained token ids, against
transformers.js (@lenml/tokenizers: apply_chat_template + encode) on the same file, same run.

    python3 tests/bench/trainer/bench_sft_data.py build/whet [N_EXAMPLES]

whet's figure is the time from start until its data line on stderr (read, parse, render with the
chat template, tokenize, mask, count), measured with the tiny model of `whet model init`. The peer
renders the same conversations with the same (plain ChatML) template and encodes them, in one Node
process, timed inside the process (module load excluded). Both use one core. Not a pass/fail test;
this machine has 2 cores shared with other work, so run it twice and read the ratio, not the seconds.
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

NODE = r"""
const { readFileSync } = require("fs");
const { TokenizerLoader } = require("@lenml/tokenizers");
const [tokPath, cfgPath, dataPath] = process.argv.slice(1);
const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: JSON.parse(readFileSync(tokPath, "utf8")),
                                           tokenizerConfig: JSON.parse(readFileSync(cfgPath, "utf8")) });
const t0 = process.hrtime.bigint();
let n = 0;
for (const line of readFileSync(dataPath, "utf8").split("\n")) {
  if (!line) continue;
  const text = tok.apply_chat_template(JSON.parse(line).messages, { tokenize: false });
  n += tok.encode(text, { add_special_tokens: false }).length;
}
console.log(JSON.stringify({ seconds: Number(process.hrtime.bigint() - t0) / 1e9, tokens: n }));
"""


def main():
    whet = os.path.abspath(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    rng = random.Random(1)
    words = open(os.path.join(ROOT, "README.md")).read().split() or ["word"]
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "data.jsonl")
        with open(data, "w") as f:
            for _ in range(count):
                user = " ".join(rng.choice(words) for _ in range(60))
                reply = " ".join(rng.choice(words) for _ in range(120))
                f.write(json.dumps({"messages": [{"role": "user", "content": user},
                                                 {"role": "assistant", "content": reply}]}) + "\n")
        model = os.path.join(work, "model")
        subprocess.run([whet, "model", "init", "--preset", "tiny", "--out", model], check=True,
                       stdout=subprocess.DEVNULL)
        cfg = os.path.join(work, "job.json")
        with open(cfg, "w") as f:
            json.dump({"model": model, "training_file": data, "output_dir": os.path.join(work, "out"),
                       "hyperparameters": {"max_seq_len": 4096}, "max_steps": 1}, f)
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        start = time.monotonic()
        p = subprocess.Popen([whet, "train", "--config", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, env=env)
        whet_seconds, tokens = None, None
        for line in p.stderr:
            if whet_seconds is None and "examples," in line:
                whet_seconds = time.monotonic() - start
                tokens = int(line.split("examples, ")[1].split(" ")[0])
        p.wait()
        out = subprocess.run(["node", "-e", NODE, os.path.join(model, "tokenizer.json"),
                              os.path.join(model, "tokenizer_config.json"), data], check=True,
                             capture_output=True, text=True, cwd=os.path.join(ROOT, "tests")).stdout
        peer = json.loads(out)
        print(f"examples {count}, tokens whet {tokens} / transformers.js {peer['tokens']}")
        print(f"whet train data stage  {whet_seconds:.2f} s  {tokens / whet_seconds / 1e6:.2f} M tokens/s")
        print(f"transformers.js        {peer['seconds']:.2f} s  {peer['tokens'] / peer['seconds'] / 1e6:.2f} M tokens/s")
        print(f"ratio (transformers.js time / whet time): {peer['seconds'] / whet_seconds:.1f}x")


if __name__ == "__main__":
    main()
