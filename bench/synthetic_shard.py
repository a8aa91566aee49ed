#!/usr/bin/env python3
"""Writes an llm.c-format uint16 token shard of N synthetic documents for the
benchmarks: each document is EOT followed by random tokens. Deterministic for
a given seed (and generator, see below).

LENGTHS (each length counts the EOT):
  fixed:L                 every document has exactly L tokens (L >= 2)
  lognormal:M[:MAX[:S]]   log-normal lengths with median M, clipped to
                          2..MAX (default 1024), sigma S of the underlying
                          normal (default 1.0); the default is lognormal:16
--vocab V writes a V-token vocabulary (EOT = V - 1, tokens below it) into the
header's [3]/[4] slots; without it the shard is GPT-2 (EOT 50256, V 50257).

numpy draws the lengths and tokens when it is installed; a GPU host without
numpy falls back to Python's random module (also seeded, but a different
stream: compare runs made with the same generator, which is printed).

usage: synthetic_shard.py OUT.bin N_DOCS [SEED [LENGTHS]] [--vocab V]"""
import argparse
import math
import os
import sys
from array import array

MAGIC, VERSION = 20240520, 1
GPT2_VOCAB = 50257


def parse_lengths(spec):
    """-> ("fixed", L) or ("lognormal", median, max, sigma); exits on bad input."""
    kind, _, rest = spec.partition(":")
    parts = rest.split(":") if rest else []
    try:
        if kind == "fixed" and len(parts) == 1 and int(parts[0]) >= 2:
            return ("fixed", int(parts[0]))
        if kind == "lognormal" and 1 <= len(parts) <= 3:
            median = float(parts[0])
            hi = int(parts[1]) if len(parts) > 1 else 1024
            sigma = float(parts[2]) if len(parts) > 2 else 1.0
            if median > 0 and hi >= 2 and sigma > 0:
                return ("lognormal", median, hi, sigma)
    except ValueError:
        pass
    sys.exit(f"synthetic_shard: LENGTHS must be fixed:L (L >= 2) or lognormal:M[:MAX[:SIGMA]] "
             f"(M > 0, MAX >= 2, SIGMA > 0), not {spec}")


def draw_numpy(np, n_docs, seed, lengths, eot):
    rng = np.random.default_rng(seed)
    if lengths[0] == "fixed":
        lens = np.full(n_docs, lengths[1], dtype=np.int64)
    else:
        _, median, hi, sigma = lengths
        lens = np.clip(np.exp(rng.normal(np.log(median), sigma, n_docs)), 2, hi).astype(np.int64)
    total = int(lens.sum())
    if total >= 2**31:
        sys.exit("synthetic_shard: too many tokens for one shard (int32 header count)")
    tokens = rng.integers(0, eot, total, dtype=np.uint16)
    starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
    tokens[starts] = eot
    return total, tokens.tobytes()


def draw_python(n_docs, seed, lengths, eot):
    import random
    rng = random.Random(seed)
    tokens = array("H")
    for _ in range(n_docs):
        if lengths[0] == "fixed":
            n = lengths[1]
        else:
            _, median, hi, sigma = lengths
            n = int(min(max(math.exp(rng.gauss(math.log(median), sigma)), 2), hi))
        tokens.append(eot)
        tokens.extend(rng.randrange(eot) for _ in range(n - 1))
        if len(tokens) >= 2**31:
            sys.exit("synthetic_shard: too many tokens for one shard (int32 header count)")
    if sys.byteorder != "little":
        tokens.byteswap()
    return len(tokens), tokens.tobytes()


def main():
    ap = argparse.ArgumentParser(usage=__doc__.rsplit("usage: ", 1)[1])
    ap.add_argument("out")
    ap.add_argument("n_docs", type=int)
    ap.add_argument("seed", type=int, nargs="?", default=1)
    ap.add_argument("lengths", nargs="?", default="lognormal:16")
    ap.add_argument("--vocab", type=int, default=0)
    ap.add_argument("--generator", choices=["auto", "numpy", "python"], default="auto")
    a = ap.parse_args()
    if a.n_docs < 1:
        sys.exit(f"synthetic_shard: N_DOCS must be >= 1, not {a.n_docs}")
    if a.vocab and not 2 <= a.vocab <= 65536:
        sys.exit(f"synthetic_shard: --vocab must be 2..65536 (uint16 tokens), not {a.vocab}")
    lengths = parse_lengths(a.lengths)
    eot = (a.vocab or GPT2_VOCAB) - 1
    np = None
    if a.generator != "python":
        try:
            import numpy as np
        except ImportError:
            if a.generator == "numpy":
                sys.exit("synthetic_shard: --generator numpy but numpy is not installed")
    if np is not None:
        total, payload = draw_numpy(np, a.n_docs, a.seed, lengths, eot)
    else:
        total, payload = draw_python(a.n_docs, a.seed, lengths, eot)
    header = array("i", [0] * 256)
    header[0], header[1], header[2] = MAGIC, VERSION, total
    if a.vocab:
        header[3], header[4] = eot, a.vocab
    if sys.byteorder != "little":
        header.byteswap()
    with open(a.out + ".tmp", "wb") as f:
        f.write(header.tobytes())
        f.write(payload)
    os.replace(a.out + ".tmp", a.out)
    print(f"{a.out}: {a.n_docs} documents, {total} tokens "
          f"({'numpy' if np is not None else 'python'} generator, seed {a.seed}, {a.lengths})")


if __name__ == "__main__":
    main()
