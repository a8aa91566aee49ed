#!/bin/sh
# The default job as a newcomer runs it: `mpirun -np 2 ddptrain` with no
# flags, on the built-in data. Reports wall time, throughput and the held-out
# task accuracy (overall and copy), and checks the summary shows answers.
# Target (the default job must show learning): copy >= 50% in about two
# minutes on 2 CPU cores.
# Usage: bench/default_job.sh [path/to/ddptrain] [extra ddptrain flags...]
#   (run from a build dir; extra flags go after the defaults, to explore)
set -eu
exe=${1:-./ddptrain}
[ $# -gt 0 ] && shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=
[ "$(id -u)" -eq 0 ] && root=--allow-run-as-root
start=$(date +%s.%N)
mpirun $root -np 2 "$exe" "$@" > "$work/log" 2>&1 || { cat "$work/log"; exit 1; }
end=$(date +%s.%N)
wall=$(echo "$start $end" | awk '{ printf "%.1f", $2 - $1 }')
summary=$(grep 'summary: final' "$work/log")
acc=$(echo "$summary" | sed -n 's/.*task accuracy \([0-9.]*\)%.*/\1/p')
copy=$(echo "$summary" | sed -n 's/.*(copy \([0-9.]*\)%.*/\1/p')
tok=$(sed -n 's/.*summary: .* | \([0-9]*\) tok\/s (.*/\1/p' "$work/log")
answers=$(grep -c 'summary:   ' "$work/log" || true)
echo "default job: wall ${wall} s | ${tok} tok/s | task accuracy ${acc}% | copy ${copy:-none}% | ${answers} example answers"
grep 'summary:   ' "$work/log" | sed 's/^\[rank 0\/2\] summary:  /  /'
awk -v c="${copy:-0}" -v w="$wall" 'BEGIN {
  verdict = (c + 0 >= 50) ? "PASS" : "FAIL"
  printf "target: copy >= 50%% (%s), about 2 minutes on 2 cores (%s s)\n", verdict, w
}'
