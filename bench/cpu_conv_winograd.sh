#!/bin/sh
# oneDNN's Winograd convolution kernels against its direct ones on the CPU
# backend (--winograd on/off): builds bench/cpu_conv_winograd.c against a
# build tree's libddpcore and times forward, backward-data and
# backward-weights of the CPU benchmark's ResNet-18 3x3 stride-1 layers (32
# images of 32x32, 1 thread: one rank of bench/resnet_cpu.sh), with the
# largest difference of Winograd's results from the direct ones. Prints a
# markdown table; the implementation column is what --winograd on took.
# Usage: bench/cpu_conv_winograd.sh [build dir, default .] [images, default 32] [passes, default 7]
set -eu
build=$(cd "${1:-.}" && pwd)
images=${2:-32}
passes=${3:-7}
cc=$(sed -n 's/^CC = //p' "$build/Makefile")
src=$(sed -n 's/^abs_top_srcdir = //p' "$build/Makefile")
[ -f "$build/libddpcore.la" ] || { echo "no $build/libddpcore.la: run make first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2086
"$build/libtool" --quiet --tag=CC --mode=link $cc -std=gnu11 -O2 -I"$build" -I"$src/include" \
  -I"$src/src" "$src/bench/cpu_conv_winograd.c" -o "$work/cpu_conv_winograd" "$build/libddpcore.la" -lm
echo "$(nproc) cores, load $(cut -d" " -f1 /proc/loadavg), $(date -u +%Y-%m-%d), commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo
echo "| layer | channels, size | layers a step | op | direct ms | Winograd ms | speedup | max rel diff | Winograd run |"
echo "|---|---|---|---|---|---|---|---|---|"
"$work/cpu_conv_winograd" 1 "$images" "$passes"
