#!/usr/bin/python3
"""bench_torch.py - the peer of bench_train.c: the same Llama model and training step in PyTorch 1.13
(Debian's python3-torch), written the way transformers writes it (separate q/k/v projections,
rotate-half RoPE, matmul + masked softmax attention, SwiGLU, PEFT-style LoRA layers with dropout 0),
float32 on the CPU with the given thread count.

  bench_torch.py LAYERS HIDDEN HEADS FFN VOCAB B T LORA_R STEPS THREADS [paired] [cuda[:N]] [bf16] [sdpa]
prints one JSON line like bench_train's (cpu_s_per_step: process CPU seconds of a step, all threads).
With `paired`, like bench_train's paired mode: a line on stdin starts each step, one JSON line per step
follows it. On a GPU (`cuda`), a step ends when the device has finished it; `bf16` runs the step under
bf16 autocast (fp32 weights and optimizer), `sdpa` computes attention with PyTorch's fused causal kernel
(flash attention on a GPU): together, the step a GPU trainer would run."""
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(n)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class LoRALinear(nn.Module):
    """PEFT's Linear with LoRA: frozen base + lora_B(lora_A(x)) * alpha / r."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.scale = alpha / r

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scale


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Layer(nn.Module):
    def __init__(self, C, NH, Ffn):
        super().__init__()
        self.NH, self.hd = NH, C // NH
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(C, 1e-5), RMSNorm(C, 1e-5)
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(C, C, bias=False) for _ in range(4))
        self.gate_proj, self.up_proj = nn.Linear(C, Ffn, bias=False), nn.Linear(C, Ffn, bias=False)
        self.down_proj = nn.Linear(Ffn, C, bias=False)

    def forward(self, x, cos, sin, mask, sdpa=False):
        B, T, C = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.NH, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.NH, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.NH, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if sdpa:
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hd) + mask
            att = torch.matmul(torch.softmax(s, dim=-1), v)
        att = att.transpose(1, 2).reshape(B, T, C)
        x = x + self.o_proj(att)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, L, C, NH, Ffn, V):
        super().__init__()
        self.embed_tokens = nn.Embedding(V, C)
        self.layers = nn.ModuleList(Layer(C, NH, Ffn) for _ in range(L))
        self.norm = RMSNorm(C, 1e-5)
        self.hd = C // NH
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids, sdpa=False):
        B, T = ids.shape
        dev = ids.device
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2, device=dev).float() / self.hd))
        ang = torch.arange(T, device=dev).float()[:, None] * inv[None, :]
        emb = torch.cat((ang, ang), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        mask = None if sdpa else torch.full((T, T), float("-inf"), device=dev).triu(1)[None, None]
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, sdpa)
        return self.norm(x) @ self.embed_tokens.weight.T  # tied head


def main():
    L, C, NH, Ffn, V, B, T, r, steps, threads = map(int, sys.argv[1:11])
    flags = sys.argv[11:]
    paired, bf16, sdpa = "paired" in flags, "bf16" in flags, "sdpa" in flags
    device = next((f for f in flags if f.startswith("cuda")), "cpu")
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = Llama(L, C, NH, Ffn, V)
    if r:
        for p in model.parameters():
            p.requires_grad_(False)
        for layer in model.layers:
            for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
                setattr(layer, name, LoRALinear(getattr(layer, name), r, 2 * r))
    model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
    ids = torch.randint(0, V, (B, T)).to(device)
    targets = torch.cat([ids[:, 1:], torch.full((B, 1), -1, device=device)], dim=1)
    total, best, total_cpu = 0.0, 1e30, 0.0
    for s in range(steps + 1):
        if paired and not sys.stdin.readline():
            break
        t, c = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=bf16):
            logits = model(ids, sdpa)
            loss = F.cross_entropy(logits.view(-1, V).float(), targets.reshape(-1), ignore_index=-1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sync()
        dt, dc = time.perf_counter() - t, time.process_time() - c
        if paired:
            print(json.dumps({"step": s, "s": round(dt, 4), "cpu_s": round(dc, 4)}), flush=True)
        if s > 0:  # step 0 warms up
            total, best, total_cpu = total + dt, min(best, dt), total_cpu + dc
    per = best  # the fastest step, as bench_train reports
    print(json.dumps({"impl": "torch", "params": sum(p.numel() for p in model.parameters()),
                      "trainable": sum(p.numel() for p in params), "B": B, "T": T, "lora_r": r,
                      "s_per_step": round(per, 4), "mean_s_per_step": round(total / steps, 4),
                      "cpu_s_per_step": round(total_cpu / steps, 4), "tokens_per_s": round(B * T / per, 1), "loss": round(loss.item(), 4),
                      "device": device, "bf16": bf16, "sdpa": sdpa}))


if __name__ == "__main__":
    main()
