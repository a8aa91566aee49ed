#!/bin/sh
# Bucket tuning on the CPU over MPI (docs/design.md §6.2): ddptrain with
# --bucket-mb auto --first-bucket-mb auto against the default buckets
# (first 1 MiB, then 25 MiB), on 2 and 4 ranks of one thread each.
#   model: GPT L6 H6 C384 (10.8M parameters, 43 MiB of gradients), seq-len
#   64, 128 tokens per micro-batch (small, so communication is a large part
#   of the step), AdamW, the built-in data.
# Tuning takes the first steps; both runs are then compared over the same
# steps after it (the log windows that start after the tuning record's
# step): exposed communication and time per step, from the metrics files.
# Runs alternate auto / default so that a change of load hits both.
# Usage: bench/bucket_auto.sh [build dir, default .] [repeats, default 3] [ranks, default "2 4"]
set -eu
build=$(cd "${1:-.}" && pwd)
repeats=${2:-3}
ranks=${3:-2 4}
exe=$build/ddptrain
[ -x "$exe" ] || { echo "no $exe: run make first" >&2; exit 1; }
cores=$(nproc) # before OMP_NUM_THREADS, which nproc obeys
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model="--threads 1 --n-layer 6 --n-head 6 --n-embd 384 --seq-len 64 --tokens-per-batch 128 \
--eval-every 0 --eval-tokens 64 --log-every 5 --peak-gflops 10"
# 7 candidates x 2 rounds x 3 steps + 3 warm-up steps = 45 steps of tuning, then 20 compared
steps=65
echo "$cores cores, $(mpirun --version 2>&1 | head -n 1), $(date -u +%Y-%m-%d), $steps steps"
echo
echo "| ranks | run | buckets | exposed ms/step | ms/step | comm ms/step | load before |"
echo "|---|---|---|---|---|---|---|"
for np in $ranks; do
  for rep in $(seq "$repeats"); do
    for kind in auto default; do
      load=$(cut -d" " -f1 /proc/loadavg)
      flags=""
      [ "$kind" = auto ] && flags="--bucket-mb auto --first-bucket-mb auto"
      m="$work/$np-$rep-$kind.jsonl"
      # shellcheck disable=SC2086
      mpirun -np "$np" "$exe" $model --steps $steps $flags --metrics "$m" > "$m.log" 2>&1 ||
        { cat "$m.log"; exit 1; }
      buckets=$(sed -n 's/.* \([0-9]*\) gradient buckets.*/\1/p' "$m.log" | head -n 1)
      chose=$(sed -n 's/.*bucket tuning: chose first \([0-9.e+-]*\) MiB, bucket \([0-9.e+-]*\) MiB (\([0-9]*\) bucket.*/first \1, bucket \2: \3/p' "$m.log")
      # the auto run's tuning step sets the window for both runs of this pair
      [ "$kind" = auto ] && after=$(grep '"record":"bucket_tune"' "$m" | sed 's/.*"step":\([0-9]*\).*/\1/')
      python3 - "$m" "${after:-0}" "$np" "$rep" "$kind" "${chose:-first 1, bucket 25: $buckets}" "$load" << 'PY'
import json, sys
path, after, np, rep, kind, buckets, load = sys.argv[1:]
after = int(after)
# windows of 5 steps that start after tuning ended
recs = [r for r in map(json.loads, open(path)) if r.get("record") == "step" and r["step"] - 5 >= after]
n = len(recs)
mean = lambda k: sum(r[k] for r in recs) / n
print(f"| {np} | {rep} {kind} | {buckets} | {mean('exposed_comm_ms'):.1f} | {mean('ms_per_step'):.1f} | "
      f"{mean('comm_ms'):.1f} | {load} |")
PY
    done
  done
done
echo
echo "(steps compared: the log windows after the tuning record's step; load: 1-minute average before each run)"
