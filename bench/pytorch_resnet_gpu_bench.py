#!/usr/bin/env python3
"""PyTorch on one GPU training the ResNet of bench/pytorch_resnet_bench.py
(ResNet-50 by default: bottleneck blocks, ImageNet stem), as a PyTorch user
tunes it: bf16 autocast with fp32 master weights, channels_last,
cudnn.benchmark on, SGD with momentum and Nesterov (weight decay on
convolution and linear weights only), cross-entropy.

The input is a fixed set of random images already on the GPU, normalised,
cycled through (no data loading is timed: that favours PyTorch, since
ddptrain's images come through its loader from a shard).

Modes (--mode, repeatable; one JSON line each):
  eager     the module as written
  compile   torch.compile of the training step's forward and loss
A mode this torch cannot run prints {"run": ..., "skipped": reason}.

images_per_s counts --steps timed steps after --warmup ones (compile's
warm-up includes compiling; its time is reported as warmup_s).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_resnet_bench import build_model  # noqa: E402


def run(torch, a, mode):
    import torch.nn.functional as F
    label = f"{a.label}-{mode}" if a.label else mode
    if mode == "compile" and not hasattr(torch, "compile"):
        return {"run": label, "skipped": f"torch {torch.__version__} has no torch.compile"}
    if not torch.cuda.is_available():
        return {"run": label, "skipped": "no CUDA device"}
    dev = torch.device("cuda")
    torch.manual_seed(a.seed)
    torch.backends.cudnn.benchmark = True
    model = build_model(torch, a.depth, a.width, 3, a.classes, a.stem).to(dev)
    model = model.to(memory_format=torch.channels_last)
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": a.weight_decay},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=a.lr, momentum=0.9, nesterov=True)
    g = torch.Generator(device=dev).manual_seed(a.seed)
    n_img = 4
    xs = [torch.randn(a.batch, 3, a.size, a.size, device=dev, generator=g)
          .contiguous(memory_format=torch.channels_last) for _ in range(n_img)]
    ys = [torch.randint(0, a.classes, (a.batch,), device=dev, generator=g) for _ in range(n_img)]

    def fwd_loss(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return F.cross_entropy(model(x), y)

    step_fn = torch.compile(fwd_loss) if mode == "compile" else fwd_loss

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = step_fn(xs[i % n_img], ys[i % n_img])
        loss.backward()
        opt.step()
        return loss

    t0 = time.perf_counter()
    for i in range(a.warmup):
        step(i)
    torch.cuda.synchronize()
    warm = time.perf_counter() - t0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.reset_peak_memory_stats()
    start.record()
    for i in range(a.steps):
        loss = step(i)
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / a.steps
    return {"run": label, "framework": "pytorch", "torch": torch.__version__, "mode": mode,
            "depth": a.depth, "size": a.size, "batch": a.batch, "steps": a.steps,
            "step_ms": round(ms, 3), "images_per_s": round(a.batch * 1000.0 / ms, 1),
            "warmup_s": round(warm, 2), "final_loss": round(float(loss), 4),
            "peak_mem_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", action="append", choices=["eager", "compile"])
    p.add_argument("--label", default="")
    p.add_argument("--depth", type=int, default=50)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--stem", default="imagenet")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=5e-5)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    import torch
    for mode in a.mode or ["eager", "compile"]:
        try:
            rec = run(torch, a, mode)
        except Exception as e:  # a failed mode is a record, not a lost run
            rec = {"run": mode, "skipped": f"failed: {type(e).__name__}: {e}"[:300]}
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
