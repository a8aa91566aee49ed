#!/bin/sh
# Generation speed on the CPU: KV-cache decoding (model/gpt_decode.h)
# against an eval forward over the whole prefix per new token. Builds
# bench/sample_decode.c against a build tree's libddpcore and runs it with 1
# and 2 sgemm threads on GPTs of 4 layers, C 256, T 256 and 512, and 12
# layers, C 768, T 64 (GPT-2 124M's width; recomputing a longer prefix
# takes minutes). Prints a markdown table: median seconds for T tokens each
# way, tokens per second, and the speedup.
# Usage: bench/sample_decode.sh [build dir, default .] [passes, default 3]
set -eu
build=$(cd "${1:-.}" && pwd)
passes=${2:-3}
# shellcheck source=bench/c_bench.sh
. "$(dirname "$0")/c_bench.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
c_bench_link sample_decode "$work"
c_bench_machine
echo
echo "| threads | L | C | T | KV cache s | tok/s | full forward s | tok/s | speedup |"
echo "|---|---|---|---|---|---|---|---|---|"
for threads in 1 2; do
  for shape in "4 256 256" "4 256 512" "12 768 64"; do
    # shellcheck disable=SC2086
    "$work/sample_decode" "$threads" $shape "$passes"
  done
done
