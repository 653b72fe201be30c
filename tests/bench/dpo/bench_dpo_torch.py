#!/usr/bin/python3
"""bench_dpo_torch.py - the PyTorch 1.13 peer of bench_dpo.c: a DPO micro-batch as TRL's DPOTrainer
runs it with a PEFT LoRA model (chosen and rejected sequences as rows of one concatenated batch, the
policy forward, the summed response log-probs, -logsigmoid(beta * margin), backward), on the model of
tests/bench/train/bench_torch.py (imported), float32 on the CPU.

  bench_dpo_torch.py LAYERS HIDDEN HEADS FFN VOCAB PAIRS PROMPT RESPONSE STEPS THREADS

Times, each the fastest of STEPS after a warm-up: `dpo_s`, the policy pass with its backward (the
reference taken from log-probs computed before, as whet's trainer does); `reference_s`, the reference
pass alone (the adapter switched off, no_grad). Prints one JSON line."""
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
import bench_torch as bt  # noqa: E402


def main():
    L, C, NH, Ffn, V, pairs, prompt, response, steps, threads = map(int, sys.argv[1:11])
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = bt.Llama(L, C, NH, Ffn, V)
    for p in model.parameters():
        p.requires_grad_(False)
    loras = []
    for layer in model.layers:
        for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
            m = bt.LoRALinear(getattr(layer, name), 16, 32)
            setattr(layer, name, m)
            loras.append(m)
    T = prompt + response
    ids = torch.randint(0, V, (2 * pairs, T))  # rows 0..pairs-1 chosen, the rest rejected
    targets = torch.cat([ids[:, 1:], torch.full((2 * pairs, 1), -1)], dim=1)
    scored = torch.zeros_like(targets, dtype=torch.bool)
    scored[:, prompt - 1:T - 1] = True

    def logps(logits):
        lp = torch.log_softmax(logits, -1).gather(2, targets.clamp(min=0)[..., None])[..., 0]
        return (lp * scored).sum(-1)

    def reference():
        scales = [m.scale for m in loras]
        for m in loras:  # PEFT's disable_adapter(): the LoRA term left out
            m.scale = 0.0
        with torch.no_grad():
            out = logps(model(ids))
        for m, s in zip(loras, scales):
            m.scale = s
        return out

    ref = reference()
    best_dpo = best_ref = 1e30
    for s in range(steps + 1):
        t0 = time.perf_counter()
        lp = logps(model(ids))
        margin = 0.1 * ((lp[:pairs] - ref[:pairs]) - (lp[pairs:] - ref[pairs:]))
        loss = -F.logsigmoid(margin).mean()
        loss.backward()
        t1 = time.perf_counter()
        reference()
        t2 = time.perf_counter()
        if s > 0:
            best_dpo, best_ref = min(best_dpo, t1 - t0), min(best_ref, t2 - t1)
    print(json.dumps({"impl": "torch", "tokens": 2 * pairs * T, "dpo_s": round(best_dpo, 4),
                      "reference_s": round(best_ref, 4)}))


if __name__ == "__main__":
    main()
