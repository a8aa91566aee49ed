#!/usr/bin/env python3
"""PyTorch DistributedDataParallel (gloo) on the micro-batches a multi-rank
ddptrain run dumped, for bench/ddp_scaling.sh.

Why: the data-parallel benchmark compares ddptrain's N-rank training with the
usual PyTorch way of doing the same thing on CPUs (DDP over gloo), on
identical work: the reference model (tests/reference/gpt_reference.py, the
architecture ddptrain implements), the same micro-batches per rank (the
ddptrain run's --dump-batches FILE gives FILE.rank0, FILE.rank1, ...), the
same loss normalisation and the same optimizer (AdamW as in
bench/pytorch_gpt_bench.py, clipping at 1.0).

What each rank does: pins itself to one CPU (mpirun binds ddptrain's ranks
the same way), joins a gloo process group on 127.0.0.1, wraps the GPT in
DistributedDataParallel (defaults: 25 MB buckets, overlapped all-reduce) and
replays its own file. A step is `accum` micro-batches (the files' "accum"
metadata), the first accum-1 under no_sync(). The loss is the target-token
sum divided by the step's *global* target count (computed from all ranks'
files up front, as ddptrain knows it from its sampler plan, so no extra
collective), times the world size because DDP averages gradients where
ddptrain sums them: the update equals one process training on the union.

Usage: pytorch_ddp_bench.py FILE --world-size N --n-layer L --n-head H
         --n-embd C --seq-len T --vocab V [--warmup-steps 5] [--threads 1]
         [--no-bind]
Rank 0 prints one JSON object: global useful (non-padding target) tokens/s
and ms/step over the steps after the warm-up, the steps timed, the last loss
and the torch version. Set OPENBLAS_NUM_THREADS=1 in the environment: Debian's
torch runs its GEMMs in OpenBLAS, which torch.set_num_threads does not reach.
"""
import argparse
import json
import os
import socket
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "reference"))
from gpt_reference import GPT, read_safetensors  # noqa: E402


def load_batches(path):
    """A dumped file: (accum, [(inputs, targets), ...]) as int64 tensors."""
    tensors, meta = read_safetensors(path)
    n = len(tensors) // 2
    return int(meta.get("accum", "1")), [(tensors[f"batch.{i}.inputs"].long(),
                                          tensors[f"batch.{i}.targets"].long()) for i in range(n)]


def worker(rank, a, port, step_targets):
    if a.bind:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=a.world_size)
    accum, batches = load_batches(f"{a.batches}.rank{rank}")
    torch.manual_seed(0)
    model = GPT(a.n_layer, a.n_head, a.n_embd, a.seq_len, a.vocab)
    for name, p in model.named_parameters():  # GPT-2 initialisation, as ddptrain
        if name.endswith("bias"):
            torch.nn.init.zeros_(p)
        elif ".ln_" in name:
            torch.nn.init.ones_(p)
        else:
            std = 0.02 / (2 * a.n_layer) ** 0.5 if name.endswith("c_proj.weight") else 0.02
            torch.nn.init.normal_(p, 0.0, std)
    ddp = DDP(model)  # broadcasts rank 0's weights
    decay = [p for n_, p in model.named_parameters() if p.dim() == 2 and "wpe" not in n_]
    rest = [p for n_, p in model.named_parameters() if not (p.dim() == 2 and "wpe" not in n_)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    steps = len(step_targets)
    useful, t0, loss_sum = 0, None, 0.0
    for s in range(steps):
        if s == a.warmup_steps:
            dist.barrier()
            t0, useful = time.perf_counter(), 0
        opt.zero_grad(set_to_none=True)
        scale = a.world_size / step_targets[s]
        loss_sum = 0.0
        for k, (x, y) in enumerate(batches[s * accum:(s + 1) * accum]):
            def micro():
                logits = ddp(x)
                loss = F.cross_entropy(logits.view(-1, a.vocab), y.view(-1), ignore_index=-1,
                                       reduction="sum")
                (loss * scale).backward()
                return float(loss)
            if k < accum - 1:
                with ddp.no_sync():
                    loss_sum += micro()
            else:
                loss_sum += micro()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        useful += step_targets[s]  # global: every rank's targets of the step
    dist.barrier()
    dt = time.perf_counter() - t0
    loss = torch.tensor([loss_sum], dtype=torch.float64)
    dist.all_reduce(loss)
    if rank == 0:
        timed = steps - a.warmup_steps
        print(json.dumps({"tok_per_s": useful / dt, "ms_per_step": 1e3 * dt / timed,
                          "steps": timed, "last_loss": float(loss) / step_targets[-1],
                          "world_size": a.world_size, "accum": accum,
                          "torch": torch.__version__, "threads": a.threads}), flush=True)
    # No rank leaves before all are done, and none tears gloo down: with torch
    # 1.13, a rank whose peer had already destroyed its process group was seen
    # spinning forever at exit (a gloo thread busy-looping on the closed pair).
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("batches", help="the --dump-batches FILE of the ddptrain run (reads FILE.rankR)")
    ap.add_argument("--world-size", type=int, default=2)
    for k in ("n-layer", "n-head", "n-embd", "seq-len", "vocab"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup-steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--no-bind", dest="bind", action="store_false",
                    help="do not pin rank R to the R-th allowed CPU")
    a = ap.parse_args()
    # The global target count of every step, from all ranks' files.
    counts, accum0 = None, None
    for r in range(a.world_size):
        accum, batches = load_batches(f"{a.batches}.rank{r}")
        if accum0 is not None and accum != accum0:
            sys.exit(f"{a.batches}.rank{r}: accum {accum}, rank 0 has {accum0}")
        accum0 = accum
        per_step = [sum(int((y != -1).sum()) for _, y in batches[s * accum:(s + 1) * accum])
                    for s in range(len(batches) // accum)]
        if counts is not None and len(per_step) != len(counts):
            sys.exit(f"{a.batches}.rank{r}: {len(per_step)} steps, rank 0 has {len(counts)}")
        counts = per_step if counts is None else [c + d for c, d in zip(counts, per_step)]
    if len(counts) <= a.warmup_steps:
        sys.exit(f"{len(counts)} steps in the files: need more than --warmup-steps {a.warmup_steps}")
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(a, port, counts), nprocs=a.world_size, join=True)


if __name__ == "__main__":
    main()
