#!/usr/bin/python3
"""bench_torch.py - the PyTorch 1.13 peer of bench_rollout.c: the same Llama model, read from the same
model.safetensors, sampling n responses to each prompt with a KV cache, float32 on the CPU with the
given thread count.

  bench_torch.py MODEL_DIR PROMPTS_JSON N MAX_TOKENS THREADS REPS

PROMPTS_JSON is what `bench_rollout prompts` printed: the prompt ids, and whet's greedy replies, which
this script first reproduces (printing how many tokens agree) to show both sides compute the same model.
The sampling loop is written the way a plain PyTorch user writes one (as transformers' generate does
for a batch): each prompt prefilled once and its cache repeated for its n responses, then one forward
of every row per step over a preallocated cache, rows that ended kept in the batch (masked), until all
rows ended or max_tokens. Temperature 1, multinomial draws. Prints one JSON line like bench_rollout's."""
import json
import struct
import sys
import time

import torch


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", f"{name}: {t['dtype']} (bench models are F32)"
        a, b = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32).view(t["shape"])
    return out


class Llama:
    def __init__(self, d, cfg):
        self.L, self.NH, self.NKV = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim") or cfg["hidden_size"] // self.NH
        self.eps, self.theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
        self.w = load_safetensors(f"{d}/model.safetensors")
        self.embed = self.w["model.embed_tokens.weight"]
        self.head = self.w.get("lm_head.weight", self.embed)
        self.layers = []
        for l in range(self.L):
            p = f"model.layers.{l}."
            g = lambda n: self.w[p + n]
            self.layers.append(dict(
                ln1=g("input_layernorm.weight"), ln2=g("post_attention_layernorm.weight"),
                # q, k, v fused into one matmul, gate and up into another
                qkv=torch.cat([g("self_attn.q_proj.weight"), g("self_attn.k_proj.weight"), g("self_attn.v_proj.weight")]).T.contiguous(),
                o=g("self_attn.o_proj.weight").T.contiguous(),
                gu=torch.cat([g("mlp.gate_proj.weight"), g("mlp.up_proj.weight")]).T.contiguous(),
                down=g("mlp.down_proj.weight").T.contiguous()))
        self.inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2).float() / self.hd))

    def rms(self, x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def rope(self, x, pos):  # x [B, H, T, hd], pos [B, T]
        ang = pos[:, None, :, None].float() * self.inv_freq  # [B, 1, T, hd/2]
        cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()
        h = self.hd // 2
        return x * cos + torch.cat((-x[..., h:], x[..., :h]), -1) * sin

    def forward(self, ids, pos, kc, vc, mask):
        """ids, pos [B, T]; kc, vc lists of [B, NKV, S, hd] caches written at pos; mask [B, 1, T, S]
        (0 or -inf). Returns the logits of the last position of each row [B, V]."""
        B, T = ids.shape
        x = self.embed[ids]
        q_dim, kv_dim = self.NH * self.hd, self.NKV * self.hd
        rows = torch.arange(B)[:, None]
        for l, w in enumerate(self.layers):
            h = self.rms(x, w["ln1"]) @ w["qkv"]
            q = h[..., :q_dim].view(B, T, self.NH, self.hd).transpose(1, 2)
            k = h[..., q_dim:q_dim + kv_dim].view(B, T, self.NKV, self.hd).transpose(1, 2)
            v = h[..., q_dim + kv_dim:].view(B, T, self.NKV, self.hd).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            kc[l][rows, :, pos] = k.transpose(1, 2)  # [B, T, NKV, hd] into [B, NKV, S, hd] at pos
            vc[l][rows, :, pos] = v.transpose(1, 2)
            S = mask.shape[-1]
            kk = kc[l][:, :, :S].repeat_interleave(self.NH // self.NKV, dim=1)
            vv = vc[l][:, :, :S].repeat_interleave(self.NH // self.NKV, dim=1)
            s = q @ kk.transpose(2, 3) / self.hd ** 0.5 + mask
            att = (torch.softmax(s, -1) @ vv).transpose(1, 2).reshape(B, T, q_dim)
            x = x + att @ w["o"]
            gu = self.rms(x, w["ln2"]) @ w["gu"]
            F = gu.shape[-1] // 2
            x = x + (torch.nn.functional.silu(gu[..., :F]) * gu[..., F:]) @ w["down"]
        return self.rms(x[:, -1], self.w["model.norm.weight"]) @ self.head.T


def generate(model, prompts, n, max_tokens, end_ids, greedy):
    """n responses to each prompt; returns (responses as token lists, generated tokens)."""
    P, S = len(prompts), max(len(p) for p in prompts) + max_tokens
    B = P * n
    shape = (B, model.NKV, S, model.hd)
    kc = [torch.zeros(shape) for _ in range(model.L)]
    vc = [torch.zeros(shape) for _ in range(model.L)]
    lens = torch.tensor([len(p) for p in prompts for _ in range(n)])
    logits = torch.empty(B, model.embed.shape[0])
    for i, p in enumerate(prompts):  # prefill once, then copy the cache into the group's n rows
        T = len(p)
        one_k = [torch.zeros(1, model.NKV, S, model.hd) for _ in range(model.L)]
        one_v = [torch.zeros(1, model.NKV, S, model.hd) for _ in range(model.L)]
        mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
        out = model.forward(torch.tensor([p]), torch.arange(T)[None], one_k, one_v, mask)
        for l in range(model.L):
            kc[l][i * n:(i + 1) * n] = one_k[l]
            vc[l][i * n:(i + 1) * n] = one_v[l]
        logits[i * n:(i + 1) * n] = out
    done = torch.zeros(B, dtype=torch.bool)
    responses = [[] for _ in range(B)]
    end = torch.tensor(sorted(end_ids))
    for step in range(max_tokens):
        nxt = logits.argmax(-1) if greedy else torch.multinomial(torch.softmax(logits, -1), 1)[:, 0]
        for b in range(B):
            if not done[b]:
                responses[b].append(int(nxt[b]))
        done |= torch.isin(nxt, end)
        if step + 1 == max_tokens or bool(done.all()):
            break
        pos = lens + step  # the position of the token just drawn
        S_now = int(pos.max()) + 1
        # a row's cache holds its tokens at their positions, 0 .. pos: the rest (longer prompts' room) is masked
        mask = torch.where(torch.arange(S_now)[None, :] <= pos[:, None], 0.0, float("-inf"))
        logits = model.forward(nxt[:, None], pos[:, None], kc, vc, mask[:, None, None, :])
    return responses, sum(len(r) for r in responses)


def main():
    d, prompts_json, n, max_tokens, threads, reps = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
    torch.set_num_threads(threads)
    cfg = json.load(open(f"{d}/config.json"))
    assert cfg["model_type"] == "llama" and cfg.get("tie_word_embeddings", False), "the bench model is a tied Llama"
    tok = json.load(open(f"{d}/tokenizer.json"))
    end_ids = {t["id"] for t in tok["added_tokens"] if t["content"] in ("<|im_end|>", "<|endoftext|>")}
    end_ids.add(cfg["eos_token_id"])
    spec = json.load(open(prompts_json))
    model = Llama(d, cfg)
    with torch.no_grad():
        # the same model: whet's greedy replies, token for token
        agree = total = 0
        for p, want in zip(spec["prompts"], spec["greedy"]):
            got, _ = generate(model, [p], 1, len(want), end_ids, True)
            total += len(want)
            agree += next((i for i, (a, b) in enumerate(zip(got[0], want)) if a != b), min(len(got[0]), len(want)))
        torch.manual_seed(1)
        best = None
        for _ in range(reps):
            t = time.perf_counter()
            _, tokens = generate(model, spec["prompts"], n, max_tokens, end_ids, False)
            s = time.perf_counter() - t
            if best is None or s < best[1]:
                best = (tokens, s)
    print(json.dumps({"impl": "torch", "kv_cache": 1, "prompts": len(spec["prompts"]), "n": n,
                      "max_tokens": max_tokens, "tokens": best[0], "seconds": round(best[1], 4),
                      "tokens_per_s": round(best[0] / best[1], 1), "greedy_tokens_agreeing": f"{agree}/{total}",
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
