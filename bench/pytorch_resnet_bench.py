#!/usr/bin/env python3
"""PyTorch DistributedDataParallel on the CPU (gloo) training the ResNet that
ddptrain's `--model resnet` trains, on the same image shards, for
bench/resnet_cpu.sh: global images/s, and top-1 on a held-out shard after a
fixed budget of steps.

The model is torchvision's ResNet layout written out here (torchvision is
not a dependency): basic blocks (bottleneck ones from depth 50), the CIFAR stem (a 3x3 convolution, stride 1,
no max-pool) or the ImageNet one (7x7 stride 2 + 3x3 max-pool), global
average pooling and a linear classifier; convolutions have no bias; BN
per rank (DDP's default, broadcast_buffers=True). The input pipeline is the
one ddptrain's loader applies: zero padding to --pad-to, then for training a
random crop after --crop-pad zeros and a horizontal flip, then per-channel
normalisation by the training set's mean and std. SGD with momentum and
Nesterov, weight decay on convolution and linear weights only, and
ddptrain's learning-rate schedule (linear warmup, cosine decay to --min-lr).

Each rank takes its share of a global batch of --batch x world images
drawn from one seeded permutation per epoch (the last partial batch
dropped), as DistributedSampler does.

Prints one JSON line from rank 0:
  {"impl": "pytorch", "world": W, "threads": T, "steps": S,
   "images_per_s": ..., "step_ms": ..., "top1": ... or null, ...}
images_per_s counts the timed steps only (after --warmup steps), globally.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import numpy as np


def read_shard(path):
    """An image shard (ddptrain's .img, docs/design.md section 5.6)."""
    with open(path, "rb") as f:
        head = f.read(64)
        w = struct.unpack("<16I", head)
        if w[0] != 0x474D4944 or w[1] != 1 or w[2] != 64:
            sys.exit(f"{path}: not an image shard")
        n, h, wd, c, classes, rec = w[3], w[4], w[5], w[6], w[7], w[8]
        raw = np.frombuffer(f.read(n * rec), dtype=np.uint8).reshape(n, rec)
    labels = raw[:, :4].copy().view("<i4").reshape(n)
    pix = raw[:, 4:4 + h * wd * c].reshape(n, h, wd, c)
    return pix, labels.astype(np.int64), classes


def build_model(torch, depth, width, in_ch, classes, stem):
    nn = torch.nn
    blocks = {10: [1, 1, 1, 1], 18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3]}[depth]
    bottleneck = depth >= 50

    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return self.relu(y + idt)

    class Bottleneck(nn.Module):
        # torchvision's v1.5: the stride on the 3x3 convolution
        def __init__(self, cin, planes, stride):
            super().__init__()
            cout = planes * 4
            self.conv1 = nn.Conv2d(cin, planes, 1, 1, 0, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, cout, 1, 1, 0, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return self.relu(y + idt)

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            if stem == "cifar":
                self.conv1 = nn.Conv2d(in_ch, width, 3, 1, 1, bias=False)
                self.maxpool = nn.Identity()
            else:
                self.conv1 = nn.Conv2d(in_ch, width, 7, 2, 3, bias=False)
                self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu = nn.ReLU(inplace=True)
            layers, cin = [], width
            for i, n in enumerate(blocks):
                planes = width << i
                mods = []
                for j in range(n):
                    stride = 2 if (j == 0 and i > 0) else 1
                    if bottleneck:
                        mods.append(Bottleneck(cin, planes, stride))
                        cin = planes * 4
                    else:
                        mods.append(Basic(cin, planes, stride))
                        cin = planes
                layers.append(nn.Sequential(*mods))
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet()


def worker(rank, a):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(a.port))
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    torch.manual_seed(a.seed)

    pix, labels, classes = read_shard(a.data)
    n, h, w, c = pix.shape
    size = max(a.pad_to, h, w)
    x_all = torch.from_numpy(pix.astype(np.float32) / 255.0).permute(0, 3, 1, 2)
    mean = x_all.mean(dim=(0, 2, 3)).view(1, c, 1, 1)
    std = x_all.std(dim=(0, 2, 3)).view(1, c, 1, 1)

    def place(x):  # centre x (B,C,h,w) in a zero size x size canvas
        if size == h and size == w:
            return x
        top, left = (size - h) // 2, (size - w) // 2
        return F.pad(x, (left, size - w - left, top, size - h - top))

    gen = torch.Generator().manual_seed(a.seed * 1000003 + rank)

    def augment(x):
        x = place(x)
        b = x.shape[0]
        if a.crop_pad > 0:
            p = a.crop_pad
            xp = F.pad(x, (p, p, p, p))
            oy = torch.randint(0, 2 * p + 1, (b,), generator=gen)
            ox = torch.randint(0, 2 * p + 1, (b,), generator=gen)
            x = torch.stack([xp[i, :, oy[i]:oy[i] + size, ox[i]:ox[i] + size] for i in range(b)])
        if a.hflip:
            flip = torch.rand(b, generator=gen) < 0.5
            x = torch.where(flip.view(b, 1, 1, 1), x.flip(3), x)
        return (x - mean) / std

    model = build_model(torch, a.depth, a.width, c, classes, a.stem)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    decay = [p for n_, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n_, p in model.named_parameters() if p.ndim <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": a.weight_decay},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=a.lr, momentum=0.9, nesterov=True)
    def lr_at(step):  # ddptrain's schedule: linear warmup, cosine to --min-lr
        if step < a.lr_warmup:
            return a.lr * (step + 1) / a.lr_warmup
        span = max(1, a.steps - a.lr_warmup)
        progress = min(1.0, (step - a.lr_warmup) / span)
        return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * progress))

    per_epoch = n // (a.batch * a.world)
    times = []
    step = 0
    while step < a.steps:
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(a.seed + step))
        for k in range(per_epoch):
            if step >= a.steps:
                break
            t0 = time.perf_counter()
            idx = perm[(k * a.world + rank) * a.batch:(k * a.world + rank + 1) * a.batch]
            xb = augment(x_all[idx]).contiguous(memory_format=fmt)
            yb = torch.from_numpy(labels[idx.numpy()])
            lr = lr_at(step)
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(xb), yb, label_smoothing=a.label_smoothing)
            loss.backward()
            opt.step()
            dist.barrier()
            times.append(time.perf_counter() - t0)
            step += 1
    timed = times[a.warmup:] if len(times) > a.warmup else times
    ips = a.batch * a.world * len(timed) / sum(timed)

    top1 = None
    if a.val_data:
        vpix, vlab, _ = read_shard(a.val_data)
        model.eval()
        correct = total = 0
        with torch.no_grad():
            vx = torch.from_numpy(vpix.astype(np.float32) / 255.0).permute(0, 3, 1, 2)
            for i in range(rank * 256, vx.shape[0], 256 * a.world):
                xb = ((place(vx[i:i + 256]) - mean) / std).contiguous(memory_format=fmt)
                pred = model(xb).argmax(1).numpy()
                correct += int((pred == vlab[i:i + 256]).sum())
                total += len(pred)
        t = torch.tensor([correct, total], dtype=torch.float64)
        dist.all_reduce(t)
        top1 = float(t[0] / t[1])
    if rank == 0:
        print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "world": a.world,
                          "threads": a.threads, "depth": a.depth, "width": a.width,
                          "stem": a.stem, "batch_per_rank": a.batch, "steps": a.steps,
                          "channels_last": a.channels_last, "images_per_s": round(ips, 2),
                          "step_ms": round(1000 * sum(timed) / len(timed), 2),
                          "final_loss": round(float(loss), 4), "top1": top1}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--val-data")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--depth", type=int, default=18, choices=[10, 18, 34, 50])
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--stem", default="cifar", choices=["cifar", "imagenet"])
    p.add_argument("--batch", type=int, default=32, help="images per rank per step")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the timing")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--min-lr", type=float, default=0.0005)
    p.add_argument("--lr-warmup", type=int, default=20, help="steps of linear warmup")
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--label-smoothing", type=float, default=0.0)
    p.add_argument("--pad-to", type=int, default=0)
    p.add_argument("--crop-pad", type=int, default=4)
    p.add_argument("--hflip", type=int, default=1)
    p.add_argument("--channels-last", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--port", type=int, default=29517)
    a = p.parse_args()
    import torch.multiprocessing as mp
    mp.spawn(worker, args=(a,), nprocs=a.world, join=True)


if __name__ == "__main__":
    main()
