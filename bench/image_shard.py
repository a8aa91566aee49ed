#!/usr/bin/env python3
"""Writes an image shard (ddptrain's .img, docs/design.md section 5.6) of N
random SIZE x SIZE images with random labels, for the image benchmarks
(bench/gpu_resnet.sh). Standard library only, so a bare GPU host can run
it; deterministic for a given seed (random.Random's byte stream).

The shard is written to OUT.tmp and renamed at the end, as ddptrain's own
writer does: a failed or interrupted write leaves nothing under OUT.

usage: image_shard.py OUT N SIZE [--classes C] [--channels CH] [--seed S]"""
import argparse
import os
import random
import struct
import sys

MAGIC, VERSION, HEADER = 0x474D4944, 1, 64


def positive(name, lo, hi):
    def check(text):
        try:
            v = int(text)
        except ValueError:
            v = None
        if v is None or not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number in [{lo}, {hi}], not '{text}'")
        return v
    return check


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("n", type=positive("N", 1, 2**31 - 1))
    p.add_argument("size", type=positive("SIZE", 1, 65535))
    p.add_argument("--classes", type=positive("--classes", 1, 2**24), default=1000)
    p.add_argument("--channels", type=positive("--channels", 1, 4), default=3)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    pixels = a.size * a.size * a.channels
    if pixels > 2**28:
        p.error(f"{a.size}x{a.size}x{a.channels} is more than 2^28 bytes an image")
    rec = 4 + (pixels + 3) // 4 * 4
    pad = bytes(rec - 4 - pixels)
    rng = random.Random(a.seed)
    tmp = a.out + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<16I", MAGIC, VERSION, HEADER, a.n, a.size, a.size, a.channels,
                                a.classes, rec, *([0] * 7)))
            for _ in range(a.n):
                f.write(struct.pack("<i", rng.randrange(a.classes)))
                f.write(rng.randbytes(pixels))
                f.write(pad)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, a.out)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        sys.exit(f"image_shard: cannot write {a.out}: {e.strerror}")
    print(f"image_shard: {a.out}: {a.n} images {a.size}x{a.size}x{a.channels}, "
          f"{a.classes} classes, seed {a.seed}, {HEADER + a.n * rec} bytes")


if __name__ == "__main__":
    main()
