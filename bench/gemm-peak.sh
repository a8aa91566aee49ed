#!/bin/sh
# The fp32 GEMM rate ddptrain measures at start-up (the MFU denominator on
# CPU), for each thread count of one rank and for one thread per rank under
# mpirun. Usage: bench/gemm-peak.sh [path/to/ddptrain]. Prints a markdown table.
set -eu
exe=${1:-./ddptrain}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores=$(nproc)
rate() { sed -n 's/.*GEMM peak measured: \([0-9.]*\) GFLOP\/s on rank 0, \([0-9.]*\) GFLOP\/s for the job.*/\1 \2/p'; }
echo "| layout | GFLOP/s rank 0 | GFLOP/s job (median of 5) |"
echo "|---|---|---|"
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
t=1
while [ $t -le "$cores" ]; do
  r=$(for i in 1 2 3 4 5; do "$exe" --device cpu --threads $t 2>&1 | rate; done)
  echo "| 1 rank x $t thread(s) | $(echo "$r" | cut -d' ' -f1 | median) | $(echo "$r" | cut -d' ' -f2 | median) |"
  t=$((t * 2))
done
if command -v mpirun > /dev/null; then
  r=$(for i in 1 2 3 4 5; do mpirun -np "$cores" "$exe" --device cpu --threads 1 2>&1 | rate; done)
  echo "| $cores ranks x 1 thread | $(echo "$r" | cut -d' ' -f1 | median) | $(echo "$r" | cut -d' ' -f2 | median) |"
fi
