#!/usr/bin/env python3
"""Times PyTorch on one GPU on exactly the work of a ddptrain GPU run: the
same GPT architecture (tests/reference/gpt_reference.py's, made
device-agnostic here), the weights ddptrain exported, and the micro-batches it
dumped with --dump-batches, in bf16 autocast with fp32 master weights and
fused AdamW (ddptrain's bf16 mode), global-norm clipping at 1.0.

Modes (--mode, repeatable): eager; compile (torch.compile of the same
module); compile-sdpa (torch.compile with F.scaled_dot_product_attention, the
flash path a PyTorch user would take).

Usage: pytorch_gpu_bench.py BATCHES WEIGHTS --n-layer L --n-head H --n-embd C
         --seq-len T --vocab V [--mode eager --mode compile ...] [--warmup-steps 5]
Prints one JSON object per mode: tok_per_s (useful tokens), ms_per_step,
peak_mem_mb (torch.cuda.max_memory_allocated), steps, mode, torch version, GPU.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "reference"))
from gpt_reference import read_safetensors  # noqa: E402


class Block(nn.Module):
    def __init__(self, C, NH, sdpa):
        super().__init__()
        self.NH, self.sdpa = NH, sdpa
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(C, 3 * C)
        self.attn.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(C, 4 * C)
        self.mlp.c_proj = nn.Linear(4 * C, C)

    def attention(self, x):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.attn.c_attn(x).split(C, dim=2)
        q, k, v = (z.view(B, T, self.NH, hs).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # the reference's explicit form: batched GEMM + masked softmax
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        return self.attn.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, NH, C, T, V, sdpa):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(V, C)
        self.transformer.wpe = nn.Embedding(T, C)
        self.transformer.h = nn.ModuleList(Block(C, NH, sdpa) for _ in range(L))
        self.transformer.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T, device=idx.device))
        for block in self.transformer.h:
            x = block(x)
        return self.transformer.ln_f(x) @ self.transformer.wte.weight.t()


def run(a, mode, batches, weights):
    torch.cuda.reset_peak_memory_stats()
    model = GPT(a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab, mode == "compile-sdpa").cuda()
    model.load_state_dict(weights, strict=True)  # the LM head is tied to wte
    decay = [p for n_, p in model.named_parameters() if p.dim() == 2 and "wpe" not in n_]
    rest = [p for n_, p in model.named_parameters() if not (p.dim() == 2 and "wpe" not in n_)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=1e-4,
                            betas=(0.9, 0.95), fused=True)
    fwd = torch.compile(model) if mode.startswith("compile") else model
    dev = [(x.cuda().long(), y.cuda().long()) for x, y in batches]
    t0, steps = None, len(dev)
    for s in range(steps):
        if s == a.warmup_steps:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        x, y = dev[s]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fwd(x)
        n_targets = (y != -1).sum()
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), y.view(-1), ignore_index=-1,
                               reduction="sum") / n_targets
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    # useful tokens: targets that are not ignored (counted once, outside the timed loop)
    useful = sum(int((y != -1).sum()) for _, y in dev[a.warmup_steps:])
    timed = steps - a.warmup_steps
    return {"mode": mode, "tok_per_s": useful / dt, "ms_per_step": 1e3 * dt / timed,
            "peak_mem_mb": torch.cuda.max_memory_allocated() / 2**20, "steps": timed,
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("batches")
    ap.add_argument("weights")
    for k in ("n-layer", "n-head", "n-embd", "seq-len", "vocab"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--mode", action="append", choices=["eager", "compile", "compile-sdpa"])
    ap.add_argument("--warmup-steps", type=int, default=5)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("pytorch_gpu_bench: torch sees no GPU")
    torch.backends.cuda.matmul.allow_tf32 = True
    tensors, meta = read_safetensors(a.batches)
    accum = int(meta.get("accum", "1"))
    if accum != 1:
        sys.exit("pytorch_gpu_bench: expects --accum 1 runs")
    n = len(tensors) // 2
    batches = [(tensors[f"batch.{i}.inputs"], tensors[f"batch.{i}.targets"]) for i in range(n)]
    if n <= a.warmup_steps:
        sys.exit(f"pytorch_gpu_bench: {n} batches, need more than {a.warmup_steps}")
    weights, _ = read_safetensors(a.weights)
    for mode in a.mode or ["eager", "compile"]:
        print(json.dumps(run(a, mode, batches, weights)), flush=True)


if __name__ == "__main__":
    main()
