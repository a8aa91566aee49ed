#!/usr/bin/env python3
"""Trains the PyTorch reference GPT (tests/reference/gpt_reference.py) on the
micro-batches a ddptrain run dumped with --dump-batches, and reports useful
(non-padding) tokens per second, so both frameworks are timed on identical
work: the same architecture, shapes, padding and optimizer (AdamW).

Usage: pytorch_gpt_bench.py BATCHES --n-layer L --n-head H --n-embd C
         --seq-len T --vocab V [--threads 1] [--warmup-steps 2]
Prints one JSON object: {"tok_per_s": ..., "ms_per_step": ..., "steps": ...}.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "reference"))
from gpt_reference import GPT, read_safetensors  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("batches")
    for k in ("n-layer", "n-head", "n-embd", "seq-len", "vocab"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    tensors, meta = read_safetensors(a.batches)
    accum = int(meta.get("accum", "1"))
    n = len(tensors) // 2
    batches = [(tensors[f"batch.{i}.inputs"].long(), tensors[f"batch.{i}.targets"].long())
               for i in range(n)]
    model = GPT(a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab)
    for name, p in model.named_parameters():  # GPT-2 initialisation, as ddptrain
        if name.endswith("bias"):
            torch.nn.init.zeros_(p)
        elif ".ln_" in name:
            torch.nn.init.ones_(p)
        else:
            std = 0.02 / (2 * a.n_layer) ** 0.5 if name.endswith("c_proj.weight") else 0.02
            torch.nn.init.normal_(p, 0.0, std)
    decay = [p for n_, p in model.named_parameters() if p.dim() == 2 and "wpe" not in n_]
    rest = [p for n_, p in model.named_parameters() if not (p.dim() == 2 and "wpe" not in n_)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    steps = n // accum
    useful, t0 = 0, None
    for s in range(steps):
        if s == a.warmup_steps:
            t0, useful = time.perf_counter(), 0
        group = batches[s * accum:(s + 1) * accum]
        n_targets = sum(int((t != -1).sum()) for _, t in group)
        opt.zero_grad(set_to_none=True)
        for x, y in group:
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, a.vocab), y.view(-1), ignore_index=-1,
                                   reduction="sum") / n_targets
            loss.backward()
            useful += int((y != -1).sum())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    dt = time.perf_counter() - t0
    timed = steps - a.warmup_steps
    print(json.dumps({"tok_per_s": useful / dt, "ms_per_step": 1e3 * dt / timed, "steps": timed,
                      "torch": torch.__version__, "threads": a.threads}))


if __name__ == "__main__":
    main()
