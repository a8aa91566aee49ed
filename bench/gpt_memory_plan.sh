#!/bin/sh
# The activation memory ddptrain plans for GPT-2 124M in bf16 under each
# execution option (flash/matrix attention, fused classifier, --recompute):
# builds bench/gpt_memory_plan.c against a build tree's libddpcore and runs
# it for 8 and 16 sequences of 1024 tokens. Deterministic (a layout, not a
# timing); the figures hold for the GPU, whose arena is laid out by the same
# code. Usage: bench/gpt_memory_plan.sh [build dir, default .]
set -eu
build=$(cd "${1:-.}" && pwd)
# shellcheck source=bench/c_bench.sh
. "$(dirname "$0")/c_bench.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
c_bench_link gpt_memory_plan "$work"
echo "$(date -u +%Y-%m-%d), commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)"
for tokens in 8192 16384; do
  echo
  "$work/gpt_memory_plan" "$tokens" 2> "$work/log" || { cat "$work/log" >&2; exit 1; }
done
