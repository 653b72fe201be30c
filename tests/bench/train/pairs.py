#!/usr/bin/python3
"""pairs.py - whet's and PyTorch's training steps taken alternately, one step each in turn, for
run.sh. On a shared machine the load moves within seconds; two runs taken one after the other (each
tens of seconds) see different neighbours, two steps taken back to back mostly the same ones. Both
programs load their model, then wait on stdin before each step (their `paired` mode); the order
alternates (whet first, then PyTorch first) so neither always runs into the other's wake.

  pairs.py BENCH_TRAIN BENCH_TORCH_PY THREADS LAYERS HIDDEN HEADS FFN VOCAB B T LORA_R STEPS

Prints one JSON line: the per-step wall and CPU seconds of both (step 0, the warm-up, left out) and
each program's own summary line."""
import json
import subprocess
import sys


def main():
    bench, torch_py, threads = sys.argv[1], sys.argv[2], sys.argv[3]
    shape = sys.argv[4:13]
    steps = int(shape[-1])
    procs = {
        "whet": subprocess.Popen([bench, "paired", *shape], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True),
        "torch": subprocess.Popen(["/usr/bin/python3", torch_py, *shape, threads, "paired"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True),
    }
    times = {"whet": [], "torch": []}
    for s in range(steps + 1):
        for impl in ("whet", "torch") if s % 2 == 0 else ("torch", "whet"):
            p = procs[impl]
            p.stdin.write("go\n")
            p.stdin.flush()
            line = p.stdout.readline()
            if not line:
                sys.exit(f"pairs.py: {impl} stopped at step {s}")
            times[impl].append(json.loads(line))
    summary = {}
    for impl, p in procs.items():
        p.stdin.close()
        summary[impl] = json.loads(p.stdout.readline())
        if p.wait():
            sys.exit(f"pairs.py: {impl} exited with {p.returncode}")
    print(json.dumps({"whet": summary["whet"], "torch": summary["torch"],
                      "pairs": [{"whet_s": w["s"], "torch_s": t["s"], "whet_cpu_s": w["cpu_s"], "torch_cpu_s": t["cpu_s"]}
                                for w, t in zip(times["whet"][1:], times["torch"][1:])]}))


if __name__ == "__main__":
    main()
