#!/usr/bin/env python3
"""PyTorch reference for ddptrain's GPT-2 model (tests/check_gpt_reference.c).

The same architecture as src/model/gpt.c, written the obvious way in PyTorch:
token + position embeddings, pre-LayerNorm blocks (eps 1e-5) with causal
multi-head attention (fused qkv Linear(C,3C), output Linear(C,C)) and an MLP
(Linear(C,4C), tanh-GELU, Linear(4C,C)), a final LayerNorm and an LM head tied
to the token embedding; no dropout. Parameter names are the state_dict keys
ddptrain exports.

Usage: gpt_reference.py WEIGHTS BATCH OUT [--adamw-steps K --lr ... ]
  WEIGHTS  safetensors written by ddptrain (weights + config metadata)
  BATCH    safetensors with int32 "inputs" and "targets" (B, T), -1 = ignored
  OUT      safetensors written here: "logits" (B*T, V), "loss_sum" (1),
           "grad.<name>" = d(loss_sum / n_targets)/d<name> for every parameter,
           and "adamw_losses" (K): the mean loss before each of K AdamW steps on
           the same batch (decay on every 2-D weight, as ddptrain).

safetensors files are read and written here with the standard library and
torch only: the format is an 8-byte length, a JSON header and raw
little-endian data, and Debian packages no safetensors library for Python.
"""
import argparse
import json
import math
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "I32": torch.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    meta = header.pop("__metadata__", {})
    data = raw[8 + hlen:]
    tensors = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:e]), dtype=DTYPES[info["dtype"]])
        tensors[name] = t.reshape(info["shape"]).clone()
    return tensors, meta


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().to(torch.float32).cpu()
        blob = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
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
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.attn.c_proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, NH, C, T, V):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(V, C)
        self.transformer.wpe = nn.Embedding(T, C)
        self.transformer.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.transformer.ln_f = nn.LayerNorm(C, eps=1e-5)

    def forward(self, idx):
        B, T = idx.shape
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        return x @ self.transformer.wte.weight.t()  # the tied LM head


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("weights")
    ap.add_argument("batch")
    ap.add_argument("out")
    ap.add_argument("--adamw-steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    weights, meta = read_safetensors(args.weights)
    batch, _ = read_safetensors(args.batch)
    cfg = {k: int(meta[k]) for k in ("n_layer", "n_head", "n_embd", "max_seq_len", "vocab_size")}
    model = GPT(cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["max_seq_len"], cfg["vocab_size"])
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        sys.exit(f"weights do not match the model: missing {missing}, unexpected {unexpected}")

    inputs = batch["inputs"].long()
    targets = batch["targets"].long()
    n_targets = int((targets != -1).sum())
    V = cfg["vocab_size"]

    def loss_sum_of(logits):
        return F.cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1, reduction="sum")

    logits = model(inputs)
    loss_sum = loss_sum_of(logits)
    (loss_sum / n_targets).backward()
    out = {"logits": logits.view(-1, V), "loss_sum": loss_sum.view(1)}
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad

    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)
    losses = []
    for _ in range(args.adamw_steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_sum_of(model(inputs)) / n_targets
        losses.append(loss.item())
        loss.backward()
        opt.step()
    out["adamw_losses"] = torch.tensor(losses, dtype=torch.float32)
    write_safetensors(args.out, out)


if __name__ == "__main__":
    main()
