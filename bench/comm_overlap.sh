#!/bin/sh
# Overlap of gradient all-reduce with compute for the two MPI progress modes
# ("thread", "test"): builds bench/comm_overlap.c against a build tree's
# libddpcore and runs it on 2 ranks, one sgemm thread each, for a few bucket
# layouts. Prints markdown tables (see comm_overlap.c for the columns).
# Usage: bench/comm_overlap.sh [build dir, default .] [ranks, default 2]
set -eu
build=$(cd "${1:-.}" && pwd)
np=${2:-2}
# shellcheck source=bench/c_bench.sh
. "$(dirname "$0")/c_bench.sh"
cores=$(nproc) # before OMP_NUM_THREADS, which nproc obeys
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Linked like the test programs: statically against the convenience library,
# whose .la names the dependencies.
c_bench_link comm_overlap "$work"
echo "$cores cores, load $(cut -d" " -f1 /proc/loadavg), $(mpirun --version 2>&1 | head -n 1), $(date -u +%Y-%m-%d)"
# grad MB, buckets, chunks, ms per chunk, passes
for layout in "20 20 20 5 30" "24 6 20 5 30" "4 4 20 5 30"; do
  echo
  # shellcheck disable=SC2086
  mpirun -np "$np" "$work/comm_overlap" $layout
done
