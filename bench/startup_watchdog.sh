#!/bin/sh
# Cost of the start-up watchdog on a normal start: the time from the launch
# to the first step's log line (launch, MPI init, device decision, binding,
# heartbeat, training set-up, one step) with the watchdog off
# (--startup-timeout 0) and at its default (300 s), alternating the two
# within each round (and their order between rounds) so drifting machine
# load touches both alike. Two launches: a plain singleton (`ddptrain`, no
# launcher) and mpirun -np 2.
#   model: the tests' tiny GPT (L1 H2 C16, seq-len 48), built-in data, one
#   thread per rank, one step, no evaluation.
# Why: the watchdog is a thread made before MPI_Init and joined after the
# heartbeat starts; under MPI each rank's thread also keeps one receive
# posted on MPI_COMM_WORLD and tests it four times a second. A start-up
# that slowed measurably would show here. Rows print the median and the
# fastest run (interference only slows runs down) per setting, and the
# median of the differences between the two runs of each round, which
# cancels load that drifts slowly. Needs perl (Time::HiRes) for the clock.
# Usage: bench/startup_watchdog.sh [BUILD_DIR, default .] [ROUNDS, default 15]
set -eu
build=$(cd "${1:-.}" && pwd)
rounds=${2:-15}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
MODEL="--threads 1 --peak-gflops 10 --steps 1 --n-layer 1 --n-head 2 --n-embd 16 --seq-len 48 \
--tokens-per-batch 256 --log-every 1 --eval-every 0 --eval-tokens 256"
r=1
while [ $r -le "$rounds" ]; do
  order="0 300"
  [ $((r % 2)) -eq 1 ] || order="300 0"
  for launch in single mpi2; do
    for t in $order; do
      if [ $launch = single ]; then
        set -- "$build/ddptrain"
      else
        set -- mpirun -np 2 "$build/ddptrain"
      fi
      # milliseconds from the launch to the line of step 1
      ms=$(perl -MTime::HiRes=time -e '$t0 = time; open(my $p, "-|", "sh", "-c", q("$@" 2>&1), "sh", @ARGV) or die "$!";
        while (<$p>) { print STDERR $_; $t = time if !$t && /step +1\/1 /; }
        close $p or exit 1; printf "%.1f\n", ($t - $t0) * 1000 if $t' \
        -- "$@" $MODEL --startup-timeout "$t" 2> "$dir/run.log") || { cat "$dir/run.log"; exit 1; }
      [ -n "$ms" ] || { echo "no step line"; cat "$dir/run.log"; exit 1; }
      echo "$r $launch $t $ms" >> "$dir/results"
    done
  done
  r=$((r + 1))
done
# median of the numbers on stdin
median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
echo "| launch | to step 1, off: median (fastest) ms | 300 s: median (fastest) ms | on - off, same round: median [range] ms |"
echo "|---|---|---|---|"
for launch in single mpi2; do
  off=$(awk -v l=$launch '$2 == l && $3 == 0 {print $4}' "$dir/results" | median)
  on=$(awk -v l=$launch '$2 == l && $3 == 300 {print $4}' "$dir/results" | median)
  off_min=$(awk -v l=$launch '$2 == l && $3 == 0 {print $4}' "$dir/results" | sort -n | head -1)
  on_min=$(awk -v l=$launch '$2 == l && $3 == 300 {print $4}' "$dir/results" | sort -n | head -1)
  awk -v l=$launch '$2 == l {v[$1, $3] = $4; n[$1] = 1} END {for (r in n) print v[r, 300] - v[r, 0]}' \
    "$dir/results" | sort -n > "$dir/diff"
  d=$(median < "$dir/diff")
  printf "| %s | %.1f (%.1f) | %.1f (%.1f) | %+.1f [%+.1f, %+.1f] |\n" \
    "$([ $launch = single ] && echo "ddptrain (singleton)" || echo "mpirun -np 2")" \
    "$off" "$off_min" "$on" "$on_min" "$d" "$(head -1 "$dir/diff")" "$(tail -1 "$dir/diff")"
done
