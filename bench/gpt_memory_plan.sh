#!/bin/sh
# The activation memory ddptrain plans for GPT-2 124M in bf16 under each
# execution option (flash/matrix attention, fused classifier, --recompute):
# builds bench/gpt_memory_plan.c against a build tree's libddpcore and runs
# it for 8 and 16 sequences of 1024 tokens. Deterministic (a layout, not a
# timing); the figures hold for the GPU, whose arena is laid out by the same
# code. Usage: bench/gpt_memory_plan.sh [build dir, default .]
set -eu
build=$(cd "${1:-.}" && pwd)
cc=$(sed -n 's/^CC = //p' "$build/Makefile")
src=$(sed -n 's/^abs_top_srcdir = //p' "$build/Makefile")
[ -f "$build/libddpcore.la" ] || { echo "no $build/libddpcore.la: run make first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2086
"$build/libtool" --quiet --tag=CC --mode=link $cc -std=gnu11 -O2 -I"$src/include" \
  "$src/bench/gpt_memory_plan.c" -o "$work/gpt_memory_plan" "$build/libddpcore.la"
echo "$(date -u +%Y-%m-%d), commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)"
for tokens in 8192 16384; do
  echo
  "$work/gpt_memory_plan" "$tokens" 2> "$work/log" || { cat "$work/log" >&2; exit 1; }
done
