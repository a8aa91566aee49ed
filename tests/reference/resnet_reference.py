#!/usr/bin/env python3
"""PyTorch reference for ddptrain's ResNet (tests/check_resnet_reference.c).

The same network as src/model/resnet*.c, written as torchvision writes its
ResNets (torchvision itself is not needed: its ResNet class fixes the stem
at 64 channels, and the tests use tiny widths): a cifar stem (3x3 conv) or
an imagenet stem (7x7 stride-2 conv, 3x3 stride-2 max-pool), four stages of
basic or bottleneck blocks (stride on the 3x3 conv, a 1x1 conv + BN
projection where the shape changes), global average pooling and a linear
classifier; every conv without bias. Names are the state_dict keys ddptrain
exports, so the weights load with load_state_dict(strict=True).

Usage: resnet_reference.py WEIGHTS BATCH OUT [--sgd-steps K --lr ... ]
  WEIGHTS  safetensors exported by ddptrain (parameters in PyTorch layout,
           buffers; metadata: depth, width, stem, num_classes)
  BATCH    safetensors with "inputs" F32 (N,H,W,C) and "labels" I32 (N)
  OUT      safetensors written here:
           "eval_logits" (N,classes): inference forward of the loaded model;
           "logits", "loss_sum", "grad.<name>": one training forward (batch
           statistics) and the gradient of loss_sum / N (cross-entropy with
           --label-smoothing, as the model's);
           then, from the loaded model again, K SGD steps (momentum,
           Nesterov, L2 weight decay on conv and fc weights only) on the same
           batch: "sgd_losses" (K), "after.<name>" for every parameter and
           buffer, and "eval_logits_after" (N,classes).
"""
import argparse
import json
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "I32": torch.int32, "I64": torch.int64}


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


def conv_bn(cin, cout, k, stride, eps, momentum):
    return (nn.Conv2d(cin, cout, k, stride, k // 2, bias=False),
            nn.BatchNorm2d(cout, eps=eps, momentum=momentum))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride, eps, momentum):
        super().__init__()
        self.conv1, self.bn1 = conv_bn(cin, planes, 3, stride, eps, momentum)
        self.conv2, self.bn2 = conv_bn(planes, planes, 3, 1, eps, momentum)
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(*conv_bn(cin, planes, 1, stride, eps, momentum))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride, eps, momentum):
        super().__init__()
        self.conv1, self.bn1 = conv_bn(cin, planes, 1, 1, eps, momentum)
        self.conv2, self.bn2 = conv_bn(planes, planes, 3, stride, eps, momentum)
        self.conv3, self.bn3 = conv_bn(planes, planes * 4, 1, 1, eps, momentum)
        self.downsample = None
        if stride != 1 or cin != planes * 4:
            self.downsample = nn.Sequential(*conv_bn(cin, planes * 4, 1, stride, eps, momentum))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


DEPTHS = {10: (BasicBlock, [1, 1, 1, 1]), 14: (Bottleneck, [1, 1, 1, 1]),
          18: (BasicBlock, [2, 2, 2, 2]), 34: (BasicBlock, [3, 4, 6, 3]),
          50: (Bottleneck, [3, 4, 6, 3]), 101: (Bottleneck, [3, 4, 23, 3]),
          152: (Bottleneck, [3, 8, 36, 3])}


class ResNet(nn.Module):
    def __init__(self, depth, width, imagenet, cin, classes, eps, momentum):
        super().__init__()
        block, layers = DEPTHS[depth]
        self.imagenet = imagenet
        if imagenet:
            self.conv1 = nn.Conv2d(cin, width, 7, 2, 3, bias=False)
        else:
            self.conv1 = nn.Conv2d(cin, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width, eps=eps, momentum=momentum)
        c = width
        for s, n in enumerate(layers):
            blocks = []
            for i in range(n):
                blocks.append(block(c, width << s, 2 if s > 0 and i == 0 else 1, eps, momentum))
                c = (width << s) * block.expansion
            setattr(self, "layer%d" % (s + 1), nn.Sequential(*blocks))
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        if self.imagenet:
            x = F.max_pool2d(x, 3, 2, 1)
        for s in range(4):
            x = getattr(self, "layer%d" % (s + 1))(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("weights")
    ap.add_argument("batch")
    ap.add_argument("out")
    ap.add_argument("--sgd-steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--nesterov", type=int, default=1)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--bn-eps", type=float, default=1e-5)
    ap.add_argument("--bn-momentum", type=float, default=0.1)
    ap.add_argument("--label-smoothing", type=float, default=0.0)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    state, meta = read_safetensors(args.weights)
    batch, _ = read_safetensors(args.batch)
    x = batch["inputs"].permute(0, 3, 1, 2).contiguous()  # NHWC -> NCHW
    y = batch["labels"].long()
    N = x.shape[0]

    def fresh():
        m = ResNet(int(meta["depth"]), int(meta["width"]), meta["stem"] == "imagenet",
                   x.shape[1], int(meta["num_classes"]), args.bn_eps, args.bn_momentum)
        m.load_state_dict(state, strict=True)
        return m

    out = {}
    model = fresh().eval()
    with torch.no_grad():
        out["eval_logits"] = model(x)
    model = fresh().train()
    logits = model(x)
    loss_sum = F.cross_entropy(logits, y, reduction="sum", label_smoothing=args.label_smoothing)
    (loss_sum / N).backward()
    out["logits"] = logits
    out["loss_sum"] = loss_sum.reshape(1)
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad

    model = fresh().train()
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and p.dim() > 1]
    rest = [p for n, p in model.named_parameters() if not (n.endswith("weight") and p.dim() > 1)]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": args.weight_decay},
                           {"params": rest, "weight_decay": 0.0}],
                          lr=args.lr, momentum=args.momentum, nesterov=bool(args.nesterov))
    losses = []
    for _ in range(args.sgd_steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y, label_smoothing=args.label_smoothing)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    out["sgd_losses"] = torch.tensor(losses)
    for name, t in model.state_dict().items():
        out["after." + name] = t
    model.eval()
    with torch.no_grad():
        out["eval_logits_after"] = model(x)
    write_safetensors(args.out, out)


if __name__ == "__main__":
    main()
