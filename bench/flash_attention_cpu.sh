#!/bin/sh
# CPU flash attention against the matrix attention (fp32, fwd + bwd): builds
# bench/flash_attention_cpu.c against a build tree's libddpcore and runs it
# with 1 and 2 sgemm threads on the default model's shape (B*T = 4096
# tokens, C 128, NH 4, T 128 and 256) and GPT-2 124M's (T 1024, C 768, NH
# 12, one sequence). Prints a markdown table: median ms per forward +
# backward of each op, the speedup, and the memory each keeps for the
# backward plus its scratch (matrix: att + scratch, 2 x (B,NH,T,T) floats;
# flash: lse + D, 2 x (B,NH,T)).
# Usage: bench/flash_attention_cpu.sh [build dir, default .] [passes, default 9]
set -eu
build=$(cd "${1:-.}" && pwd)
passes=${2:-9}
# shellcheck source=bench/c_bench.sh
. "$(dirname "$0")/c_bench.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
c_bench_link flash_attention_cpu "$work"
c_bench_machine
echo
echo "| threads | B | T | C | NH | tokens | matrix ms | flash ms | speedup | matrix MiB | flash MiB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for threads in 1 2; do
  for shape in "32 128 128 4" "16 256 128 4" "1 1024 768 12"; do
    # shellcheck disable=SC2086
    "$work/flash_attention_cpu" "$threads" $shape "$passes"
  done
done
