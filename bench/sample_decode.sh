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
cc=$(sed -n 's/^CC = //p' "$build/Makefile")
src=$(sed -n 's/^abs_top_srcdir = //p' "$build/Makefile")
[ -f "$build/libddpcore.la" ] || { echo "no $build/libddpcore.la: run make first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2086
"$build/libtool" --quiet --tag=CC --mode=link $cc -std=gnu11 -O2 -I"$src/include" -I"$src/src" \
  -I"$build" "$src/bench/sample_decode.c" -o "$work/sample_decode" "$build/libddpcore.la"
echo "$(nproc) cores, load $(cut -d" " -f1 /proc/loadavg), $(date -u +%Y-%m-%d), commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo
echo "| threads | L | C | T | KV cache s | tok/s | full forward s | tok/s | speedup |"
echo "|---|---|---|---|---|---|---|---|---|"
for threads in 1 2; do
  for shape in "4 256 256" "4 256 512" "12 768 64"; do
    # shellcheck disable=SC2086
    "$work/sample_decode" "$threads" $shape "$passes"
  done
done
