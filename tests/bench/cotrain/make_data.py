# make_data.py - the benchmark's SFT data: JOBS files of EXAMPLES chat examples each, every assistant answer
# long enough that the trainer cuts each example to exactly max_seq_len tokens (one packed row each), so a
# step of `whet train` and a session's forward_backward hold the same number of tokens.
# Usage: make_data.py OUT_PREFIX JOBS EXAMPLES
import random, sys

prefix, jobs, examples = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
words = "alpha beta gamma delta river stone cloud seven paper green orange window silver music garden".split()
for j in range(jobs):
    rng = random.Random(j)
    with open(f"{prefix}{j}.jsonl", "w") as f:
        for e in range(examples):
            answer = " ".join(rng.choice(words) for _ in range(400))
            f.write('{"messages": [{"role": "user", "content": "Job %d, example %d."}, '
                    '{"role": "assistant", "content": "%s"}]}\n' % (j, e, answer))
