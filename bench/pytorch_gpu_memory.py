#!/usr/bin/env python3
"""The largest micro-batch PyTorch trains without running out of memory, for
bench/gpu_memory.sh: GPT (bench/pytorch_gpu_bench.py's model) in bf16
autocast with fp32 master weights and AdamW (fused on CUDA), B sequences of
T tokens per micro-batch; a size fits when two optimizer steps finish (the
second backward runs with the AdamW state allocated). Sizes are tried by
doubling from --start until one fails (or --cap fits), then by bisection
until the bracket is at most --resolution wide.

All trials run in this one process, so torch.compile compiles once (dynamic
shapes); after an out-of-memory error the trial's tensors are freed and the
caching allocator emptied before the next size. Only out-of-memory errors
(torch.cuda.OutOfMemoryError, "out of memory", "can't allocate memory",
MemoryError) count as "does not fit"; any other error stops the search.

On the CPU (the smoke test) there is no device to fill, and torch 1.13
crashes rather than raising when a host allocation fails under a resource
limit, so the CPU emulates the limit: every size trains in a fresh process
(--single B) and "fits" when that process's peak RSS stays within the
one-sequence run's plus --cpu-headroom-mb. The record says so ("rule").

Usage: pytorch_gpu_memory.py --n-layer L --n-head H --n-embd C --seq-len T
         --vocab V [--mode compile-sdpa] [--device cuda|cpu] [--start 8]
         [--cap 1024] [--resolution 1] [--label NAME] [--cpu-headroom-mb 64]
Prints one JSON record: run, framework, mode, max_seqs (0: not even --start
fits), peak_mem_mb at max_seqs (torch.cuda.max_memory_allocated; the CPU:
the peak RSS), first_fail (null: --cap fits), cap, trials [[B, "ok"|"oom"], ...].
"""
import argparse
import gc
import inspect
import json
import os
import resource
import subprocess
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_gpu_bench import GPT, MODES, unavailable  # noqa: E402


def is_oom(e):
    if isinstance(e, MemoryError):
        return True
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(e, oom_type):
        return True
    text = str(e).lower()
    return isinstance(e, RuntimeError) and ("out of memory" in text or
                                            "can't allocate memory" in text)


def maxrss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class CpuBudget:
    """The CPU emulation: one process per size, judged by its peak RSS."""

    def __init__(self, a):
        self.argv = [sys.executable, os.path.abspath(__file__)]
        for k in ("n_layer", "n_head", "n_embd", "seq_len", "vocab", "mode", "threads"):
            self.argv += ["--" + k.replace("_", "-"), str(getattr(a, k))]
        self.argv += ["--device", "cpu"]
        ok, base = self.single(1)
        if not ok:
            sys.exit("pytorch_gpu_memory: one sequence does not train on the CPU")
        self.budget = base + a.cpu_headroom_mb

    def single(self, B):
        p = subprocess.run(self.argv + ["--single", str(B)], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"pytorch_gpu_memory: the CPU trial of {B} sequences failed "
                     f"(exit {p.returncode}): {p.stderr.strip()[-500:]}")
        r = json.loads(p.stdout)
        return r["ok"], r["maxrss_mb"]

    def trial(self, B):
        ok, rss = self.single(B)
        return (True, rss) if ok and rss <= self.budget else (False, None)


class Trainer:
    def __init__(self, a):
        self.a, self.dev = a, a.device
        self.model = GPT(a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab,
                         a.mode.endswith("sdpa")).to(self.dev)
        fused = self.dev == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, betas=(0.9, 0.95),
                                     weight_decay=0.1, **({"fused": True} if fused else {}))
        V = a.vocab

        def loss_sum(x, y):
            return F.cross_entropy(self.model(x).float().view(-1, V), y.view(-1),
                                   reduction="sum")

        self.fn = torch.compile(loss_sum, dynamic=True) if a.mode.startswith("compile") else loss_sum

    def sync(self):
        if self.dev == "cuda":
            torch.cuda.synchronize()

    def trial(self, B):
        """(fits, peak MiB or None) for B sequences; raises on errors other than OOM."""
        a = self.a
        gc.collect()
        if self.dev == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        x = y = loss = None
        try:
            g = torch.Generator().manual_seed(B)
            x = torch.randint(0, a.vocab, (B, a.seq_len), generator=g).to(self.dev)
            y = torch.randint(0, a.vocab, (B, a.seq_len), generator=g).to(self.dev)
            for _ in range(2):
                self.opt.zero_grad(set_to_none=True)
                with torch.autocast(self.dev, dtype=torch.bfloat16):
                    loss = self.fn(x, y) / (B * a.seq_len)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                self.opt.step()
            self.sync()
            peak = torch.cuda.max_memory_allocated() / 2**20 if self.dev == "cuda" else None
            return True, peak
        except Exception as e:  # noqa: BLE001 - sorted into OOM / not OOM right here
            if not is_oom(e):
                raise
            return False, None
        finally:
            del x, y, loss
            self.opt.zero_grad(set_to_none=True)
            gc.collect()
            if self.dev == "cuda":
                torch.cuda.empty_cache()


def search(trial, start, cap, resolution):
    """Doubling from start, then bisection; returns (max ok, its peak, first fail, trials)."""
    trials, peaks = [], {}

    def run(B):
        ok, peak = trial(B)
        trials.append([B, "ok" if ok else "oom"])
        if ok:
            peaks[B] = peak
        return ok

    lo, hi = 0, None  # lo fits (0: nothing yet), hi fails (None: nothing yet)
    B = start
    while True:
        if run(B):
            lo = B
            if B >= cap:
                break
            B = min(2 * B, cap)
        else:
            hi = B
            break
    if hi is not None and lo == 0 and start > 1:  # even the start failed: halve down to 1
        B = start // 2
        while B >= 1:
            if run(B):
                lo = B
                break
            hi = B
            B //= 2
    while hi is not None and hi - lo > resolution and lo > 0:
        mid = (lo + hi) // 2
        if run(mid):
            lo = mid
        else:
            hi = mid
    return lo, peaks.get(lo), hi, trials


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for k in ("n-layer", "n-head", "n-embd", "seq-len", "vocab"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--mode", choices=MODES, default="compile-sdpa")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--start", type=int, default=8)
    ap.add_argument("--cap", type=int, default=1024)
    ap.add_argument("--resolution", type=int, default=1)
    ap.add_argument("--label", default="")
    ap.add_argument("--cpu-headroom-mb", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--single", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if not 1 <= a.start <= a.cap or a.resolution < 1:
        sys.exit("pytorch_gpu_memory: need 1 <= --start <= --cap and --resolution >= 1")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    name = a.label or f"pytorch {a.mode}"
    why = unavailable(a.mode, a.device)
    if why:
        print(json.dumps({"run": name, "framework": "pytorch", "mode": a.mode, "skipped": why,
                          "torch": torch.__version__}))
        return
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    if a.single:
        ok, peak = Trainer(a).trial(a.single)
        print(json.dumps({"B": a.single, "ok": ok, "peak_mem_mb": peak, "maxrss_mb": maxrss_mb()}))
        return
    t = Trainer(a) if a.device == "cuda" else CpuBudget(a)
    lo, peak, hi, trials = search(t.trial, a.start, a.cap, a.resolution)
    rec = {"run": name, "framework": "pytorch", "mode": a.mode, "max_seqs": lo,
           "peak_mem_mb": peak, "first_fail": hi, "cap": a.cap, "trials": trials,
           "seq_len": a.seq_len, "torch": torch.__version__,
           "device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu"}
    if a.device == "cpu":
        rec["rule"] = f"CPU emulation: peak RSS <= {t.budget:.0f} MiB (one sequence's + " \
            f"{a.cpu_headroom_mb})"
    print(json.dumps(rec))


if __name__ == "__main__":
    main()
