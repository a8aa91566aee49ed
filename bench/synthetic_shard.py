#!/usr/bin/env python3
"""Writes an llm.c-format uint16 token shard of N synthetic documents for the
sampler's planning benchmark: each document is EOT (50256, GPT-2) followed
by random tokens, with heavy-tailed lengths (log-normal, median 16 tokens,
clipped to 2..1024). Deterministic for a given seed.

With LENGTHS "fixed:L" every document has exactly L tokens (EOT included),
and "lognormal:M" changes the median (default lognormal:16).

usage: synthetic_shard.py OUT.bin N_DOCS [SEED [LENGTHS]]"""
import sys

import numpy as np

EOT, MAGIC, VERSION = 50256, 20240520, 1


def main():
    out, n_docs = sys.argv[1], int(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    rng = np.random.default_rng(seed)
    kind, _, value = (sys.argv[4] if len(sys.argv) > 4 else "lognormal:16").partition(":")
    if kind == "fixed" and int(value) >= 2:
        lengths = np.full(n_docs, int(value), dtype=np.int64)
    elif kind == "lognormal" and float(value) > 0:
        lengths = np.clip(np.exp(rng.normal(np.log(float(value)), 1.0, n_docs)), 2,
                          1024).astype(np.int64)
    else:
        sys.exit(f"synthetic_shard: LENGTHS must be fixed:L (L >= 2) or lognormal:M, not {sys.argv[4]}")
    total = int(lengths.sum())
    if total >= 2**31:
        sys.exit("too many tokens for one shard (int32 header count)")
    tokens = rng.integers(0, EOT, total, dtype=np.uint16)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    tokens[starts] = EOT
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (MAGIC, VERSION, total)
    with open(out + ".tmp", "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())
    import os
    os.replace(out + ".tmp", out)
    print(f"{out}: {n_docs} documents, {total} tokens")


if __name__ == "__main__":
    main()
