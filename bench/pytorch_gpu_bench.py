#!/usr/bin/env python3
"""Times PyTorch on exactly the work of a ddptrain run: the same GPT
architecture (tests/reference/gpt_reference.py's, made device-agnostic here),
the weights ddptrain exported (--export) and the micro-batches it dumped
(--dump-batches), in bf16 autocast with fp32 master weights and AdamW
(fused on CUDA; ddptrain's bf16 mode), global-norm clipping at 1.0. The loss
(cross-entropy summed over the targets, divided by their count) is computed
inside the compiled function, as a PyTorch user would write it.

Modes (--mode, repeatable; one JSON line each):
  eager          the reference's explicit attention (batched GEMM + masked softmax)
  eager-sdpa     F.scaled_dot_product_attention (flash where the GPU has it)
  compile        torch.compile of the explicit form
  compile-sdpa   torch.compile with SDPA: what a PyTorch user would run
A mode this torch cannot run (no torch.compile or SDPA before 2.0, no GPU)
prints {"run": ..., "skipped": reason} and is not an error.

Batches: by default the dumped micro-batches in order (--accum 1 runs).
--dynamic compiles with dynamic shapes (for length-bucketed batches whose
rows and length change every step). --repack-rows B --repack-len T instead
re-pads every dumped row (one document window each) to T and groups them B
per batch: the same documents and target tokens, in padded fixed-shape
batches (the usual PyTorch pipeline); a last partial batch is dropped.

Executed FLOPs per micro-batch, the formula ddptrain's MFU uses
(ddp_gpt_cost_model): rows * T * (6 N + 6 L C T), T the batch's padded row
length, N = V C + Tmax C + L (12 C^2 + 13 C) + 2 C (the tied LM head counted
once). MFU = FLOPs in the timed steps / time / (--peak-gflops * 1e9); pass
the peak ddptrain measured so both MFUs share a denominator.

Usage: pytorch_gpu_bench.py BATCHES WEIGHTS [--mode M ...] [--device cuda|cpu]
         [--warmup-steps 10] [--peak-gflops X] [--label NAME] [--dynamic]
         [--repack-rows B --repack-len T] [--threads N]
Each record: run, mode, tok_per_s (useful = target tokens), ms_per_step,
mfu, peak_mem_mb (torch.cuda.max_memory_allocated; null on the CPU), steps,
useful_tokens, padded_tokens, flops, graphs (torch.compile graphs built
during the timed steps, when torch reports it), torch, device.
"""
import argparse
import inspect
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "reference"))
from gpt_reference import read_safetensors  # noqa: E402

MODES = ("eager", "eager-sdpa", "compile", "compile-sdpa")


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


def config_from_meta(meta):
    """(L, NH, C, Tmax, V) from ddptrain's export metadata."""
    try:
        return tuple(int(meta[k]) for k in ("n_layer", "n_head", "n_embd", "max_seq_len",
                                            "vocab_size"))
    except KeyError as e:
        sys.exit(f"pytorch_gpu_bench: the weights carry no model configuration ({e} missing): "
                 "not a ddptrain --export file?")


def n_params(cfg):
    L, _, C, Tmax, V = cfg
    return V * C + Tmax * C + L * (12 * C * C + 13 * C) + 2 * C


def batch_flops(cfg, rows, T):
    """Executed FLOPs of one micro-batch: ddp_gpt_cost_model's a*tokens + b*tokens*T."""
    L, _, C, _, _ = cfg
    return rows * T * (6.0 * n_params(cfg) + 6.0 * L * C * T)


def unavailable(mode, device):
    """Why this torch cannot run MODE on DEVICE, or None."""
    if device == "cuda" and not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no GPU"
    if mode.startswith("compile") and not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile (needs >= 2.0)"
    if mode.endswith("sdpa") and not hasattr(F, "scaled_dot_product_attention"):
        return f"torch {torch.__version__} has no F.scaled_dot_product_attention (needs >= 2.0)"
    return None


def load_batches(path):
    tensors, meta = read_safetensors(path)
    if int(meta.get("accum", "1")) != 1:
        sys.exit("pytorch_gpu_bench: expects batches of a --accum 1 run")
    n = len(tensors) // 2
    out = []
    for i in range(n):
        try:
            out.append((tensors[f"batch.{i}.inputs"], tensors[f"batch.{i}.targets"]))
        except KeyError:
            sys.exit(f"pytorch_gpu_bench: {path} lacks batch.{i}.inputs/targets")
    return out


def repack(batches, rows, T):
    """Every row of every batch (one document window) re-padded to T, grouped
    ROWS per batch in the dumped order. Returns (batches, dropped rows)."""
    docs = []
    for x, y in batches:
        valid = (y != -1)
        for r in range(x.shape[0]):
            idx = valid[r].nonzero()
            n = int(idx[-1]) + 1 if len(idx) else 0
            if n > T:
                sys.exit(f"pytorch_gpu_bench: a row has {n} tokens, more than --repack-len {T}")
            if n:
                docs.append((x[r, :n], y[r, :n]))
    out = []
    for b in range(len(docs) // rows):
        xi = torch.zeros(rows, T, dtype=torch.int32)
        yi = torch.full((rows, T), -1, dtype=torch.int32)
        for r, (dx, dy) in enumerate(docs[b * rows:(b + 1) * rows]):
            xi[r, :len(dx)] = dx
            yi[r, :len(dy)] = dy
        out.append((xi, yi))
    return out, len(docs) % rows


def graphs_built():
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])
    except Exception:  # private API: absent or changed in this torch
        return None


def run(a, mode, cfg, batches, weights):
    dev = a.device
    if dev == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    L, NH, C, Tmax, V = cfg
    model = GPT(L, NH, C, Tmax, V, mode.endswith("sdpa")).to(dev)
    model.load_state_dict(weights, strict=True)  # the LM head is tied to wte
    if sum(p.numel() for p in model.parameters()) != n_params(cfg):
        sys.exit("pytorch_gpu_bench: the model's parameter count differs from the FLOP "
                 "formula's N; fix n_params()")
    decay = [p for n_, p in model.named_parameters() if p.dim() == 2 and "wpe" not in n_]
    rest = [p for n_, p in model.named_parameters() if not (p.dim() == 2 and "wpe" not in n_)]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    fused = dev == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
    opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), **({"fused": True} if fused else {}))

    def loss_sum(x, y):
        logits = model(x)
        return F.cross_entropy(logits.float().view(-1, V), y.view(-1), ignore_index=-1,
                               reduction="sum")

    fn = loss_sum
    if mode.startswith("compile"):
        fn = torch.compile(loss_sum, dynamic=True) if a.dynamic else torch.compile(loss_sum)
    data = [(x.to(dev).long(), y.to(dev).long()) for x, y in batches]
    n_targets = [float((y != -1).sum()) for _, y in batches]
    steps = len(data)
    t0, g0 = None, None
    for s in range(steps):
        if s == a.warmup_steps:
            if dev == "cuda":
                torch.cuda.synchronize()
            t0, g0 = time.perf_counter(), graphs_built()
        x, y = data[s]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = fn(x, y) / n_targets[s]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    if dev == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    g1 = graphs_built()
    timed = batches[a.warmup_steps:]
    useful = int(sum(n_targets[a.warmup_steps:]))
    padded = sum(int(x.numel()) for x, _ in timed)
    flops = sum(batch_flops(cfg, x.shape[0], x.shape[1]) for x, _ in timed)
    rec = {"run": a.label or mode, "framework": "pytorch", "mode": mode,
           "tok_per_s": useful / dt, "ms_per_step": 1e3 * dt / len(timed),
           "mfu": flops / dt / (a.peak_gflops * 1e9) if a.peak_gflops > 0 else None,
           "peak_mem_mb": torch.cuda.max_memory_allocated() / 2**20 if dev == "cuda" else None,
           "steps": len(timed), "useful_tokens": useful, "padded_tokens": padded, "flops": flops,
           "graphs": g1 - g0 if g0 is not None and g1 is not None else None,
           "dynamic": bool(a.dynamic), "fused_adamw": fused, "torch": torch.__version__,
           "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}
    if mode.endswith("sdpa") and dev == "cuda":
        rec["flash_sdp_enabled"] = bool(torch.backends.cuda.flash_sdp_enabled())
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("batches")
    ap.add_argument("weights")
    # Accepted for older command lines; must agree with the weights' metadata.
    for k in ("n-layer", "n-head", "n-embd", "seq-len", "vocab"):
        ap.add_argument("--" + k, type=int)
    ap.add_argument("--mode", action="append", choices=MODES)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--peak-gflops", type=float, default=0.0)
    ap.add_argument("--label", default="")
    ap.add_argument("--dynamic", action="store_true")
    ap.add_argument("--repack-rows", type=int, default=0)
    ap.add_argument("--repack-len", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if (a.repack_rows > 0) != (a.repack_len > 0) or a.repack_rows < 0 or a.repack_len < 0:
        sys.exit("pytorch_gpu_bench: --repack-rows and --repack-len go together, both > 0")
    if a.warmup_steps < 0:
        sys.exit("pytorch_gpu_bench: --warmup-steps must be >= 0")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    modes = a.mode or ["eager", "compile"]
    if a.label and len(modes) > 1:
        sys.exit("pytorch_gpu_bench: --label names one mode's record; give one --mode with it")
    weights, meta = read_safetensors(a.weights)
    cfg = config_from_meta(meta)
    for flag, want, got in zip(("n-layer", "n-head", "n-embd", "seq-len", "vocab"),
                               (a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab), cfg):
        if want is not None and want != got:
            sys.exit(f"pytorch_gpu_bench: --{flag} {want} but the weights have {got}")
    batches = load_batches(a.batches)
    dropped = 0
    if a.repack_rows:
        if a.repack_len > cfg[3]:
            sys.exit(f"pytorch_gpu_bench: --repack-len {a.repack_len} exceeds the model's "
                     f"sequence length {cfg[3]}")
        batches, dropped = repack(batches, a.repack_rows, a.repack_len)
    if len(batches) <= a.warmup_steps:
        sys.exit(f"pytorch_gpu_bench: {len(batches)} batches, need more than the "
                 f"{a.warmup_steps} warm-up steps")
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    for mode in modes:
        why = unavailable(mode, a.device)
        if why:
            rec = {"run": a.label or mode, "framework": "pytorch", "mode": mode, "skipped": why,
                   "torch": torch.__version__}
        else:
            rec = run(a, mode, cfg, batches, weights)
            if a.repack_rows:
                rec["repacked"] = f"{a.repack_rows}x{a.repack_len}"
                rec["dropped_rows"] = dropped
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
