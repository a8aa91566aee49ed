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
# shellcheck source=bench/c_bench.sh
. "$(dirname "$0")/c_bench.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
c_bench_link cpu_conv_winograd "$work" -lm
c_bench_machine
echo
echo "| layer | channels, size | layers a step | op | direct ms | Winograd ms | speedup | max rel diff | Winograd run |"
echo "|---|---|---|---|---|---|---|---|---|"
"$work/cpu_conv_winograd" 1 "$images" "$passes"
