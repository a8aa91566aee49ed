#!/bin/sh
# What --trace costs: the per-marker cost (bench/trace_overhead.c, built
# against a build tree's libddpcore), then an A/B of the same 2-rank CPU GPT
# run without and with --trace, interleaved, printing each run's tok/s and
# compute ms per step and the median and spread of each side.
# Usage: bench/trace_overhead.sh [build dir, default .] [pairs of runs, default 3] [steps, default 30]
set -eu
build=$(cd "${1:-.}" && pwd)
pairs=${2:-3}
steps=${3:-30}
# shellcheck source=bench/c_bench.sh
. "$(dirname "$0")/c_bench.sh"
. "$build/tests/env.sh"
[ -n "$MPIRUN" ] || { echo "no mpirun (configure found no MPI)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
c_bench_link trace_overhead "$work"
c_bench_machine
echo
echo "| marker pairs | ns per pair, recording | ns per pair, off |"
echo "|---|---|---|"
"$work/trace_overhead" 1000000 5
echo
model="--threads 1 --peak-gflops 10 --n-layer 4 --n-head 4 --n-embd 64 --seq-len 64 \
  --tokens-per-batch 1024 --steps $steps --log-every 10 --eval-every 0 --eval-tokens 256 \
  --bucket-mb 0.05 --first-bucket-mb 0.05"
echo "| run | --trace | tok/s | compute ms/step | load |"
echo "|---|---|---|---|---|"
i=1
while [ "$i" -le "$pairs" ]; do
  for mode in off on; do
    extra=""
    [ "$mode" = on ] && extra="--trace $work/t.json"
    # shellcheck disable=SC2086
    "$MPIRUN" -np 2 "$DDPTRAIN" $model $extra > "$work/$mode.$i.log" 2>&1 ||
      { echo "run $i ($mode) failed:" >&2; cat "$work/$mode.$i.log" >&2; exit 1; }
    rate=$(sed -n 's/.*useful tokens | \([0-9]*\) tok\/s.*/\1/p' "$work/$mode.$i.log" | head -n 1)
    ms=$(sed -n 's/.*per step \([0-9.]*\) ms compute.*/\1/p' "$work/$mode.$i.log" | head -n 1)
    echo "| $i | $mode | $rate | $ms | $(cut -d" " -f1 /proc/loadavg) |"
    echo "$mode $rate" >> "$work/rates"
  done
  i=$((i + 1))
done
echo
for mode in off on; do
  sort -n -k2 "$work/rates" | awk -v m="$mode" '$1 == m {v[n++] = $2}
    END {printf "--trace %s: median %d tok/s, range %d..%d (%d runs)\n", m, v[int(n / 2)], v[0], v[n - 1], n}'
done
[ -f "$work/t.json" ] && echo "spans in the last trace: $(grep -o '"ph":"X"' "$work/t.json" | wc -l)"
