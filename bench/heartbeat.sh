#!/bin/sh
# Cost of the heartbeat on training throughput: ddptrain on 2 ranks (mpirun,
# CPU backend, one thread per rank, the 2 cores of a CI-like machine) with
# the heartbeat off (--heartbeat-timeout 0), at its default (20 s: a beat
# every 2 s, a poll every 0.25 s) and at 5 s (a beat every 0.5 s, a poll
# every 0.125 s), alternating the settings within each round (and their
# order between rounds) so drifting machine load touches all alike. (A 1 s timeout was tried too: on this
# 2-core machine with other jobs running it raised a false alarm, a rank
# starved of CPU for a second; timeouts that short are not for shared nodes.)
#   model: GPT L2 H4 C128, seq-len 128, 2048 padded tokens per micro-batch,
#   built-in data, AdamW; tokens/s from the final summary line (useful tokens
#   over the training time).
# Why: the heartbeat thread shares the cores with the ranks' math and takes
# Open MPI's locks (MPI_THREAD_MULTIPLE) when it polls; this shows whether
# that is visible. Rows print the fastest round (interference only slows
# runs down) and the range over rounds. Throughput on a shared machine is
# noisy, so the script also reads the CPU time the heartbeat threads
# themselves used (/proc/PID/task/TID/stat of the threads named
# "ddp-heartbeat", sampled every 0.2 s while the job runs), which other
# jobs do not disturb: that share of one core is the direct cost.
# Usage: bench/heartbeat.sh [BUILD_DIR, default .] [STEPS, default 60]
#          [ROUNDS, default 3]; HEARTBEAT_SETTINGS="0 20" picks the timeouts
set -eu
build=$(cd "${1:-.}" && pwd)
steps=${2:-60}
rounds=${3:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
MODEL="--threads 1 --peak-gflops 10 --n-layer 2 --n-head 4 --n-embd 128 --seq-len 128 \
--tokens-per-batch 2048 --steps $steps --log-every $steps --eval-every 0 --eval-tokens 256"
settings=${HEARTBEAT_SETTINGS:-"0 20 5"} # must start with 0 (the baseline)
r=1
while [ $r -le "$rounds" ]; do
  # Odd rounds run the settings in one order, even rounds in the other, so
  # load that drifts within a round does not favour one setting.
  order=$settings
  [ $((r % 2)) -eq 1 ] || order=$(echo "$settings" | awk '{for (i = NF; i > 0; i--) printf "%s ", $i}')
  for hb in $order; do
    t0=$(date +%s.%N)
    mpirun -np 2 "$build/ddptrain" $MODEL --heartbeat-timeout "$hb" > "$dir/run.log" 2>&1 &
    job=$!
    ticks=0
    while kill -0 $job 2> /dev/null; do # utime + stime of every heartbeat thread
      now=$(grep -l '^ddp-heartbeat$' /proc/[0-9]*/task/[0-9]*/comm 2> /dev/null |
        sed 's|/comm$|/stat|' | xargs -r cat 2> /dev/null | sed 's/.*) //' |
        awk '{s += $12 + $13} END {print s + 0}')
      [ "$now" -gt "$ticks" ] && ticks=$now
      sleep 0.2
    done
    wait $job || { cat "$dir/run.log"; exit 1; }
    wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
    cpu=$(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", t / hz}')
    tok=$(sed -n 's/.*summary: [0-9]* steps in .* | \([0-9]*\) tok\/s (.*/\1/p' "$dir/run.log")
    [ -n "$tok" ] || { echo "no summary line"; cat "$dir/run.log"; exit 1; }
    echo "$hb $tok $cpu $wall" >> "$dir/results"
    echo "round $r, --heartbeat-timeout $hb: $tok tok/s; heartbeat threads used ${cpu} s CPU in ${wall} s"
  done
  r=$((r + 1))
done
echo
echo "| --heartbeat-timeout | best tok/s | range over $rounds rounds | vs off (best) | heartbeat CPU, all rounds |"
echo "|---|---|---|---|---|"
off=$(awk '$1 == 0 {if ($2 > m) m = $2} END {print m}' "$dir/results")
for hb in $settings; do
  awk -v hb="$hb" -v off="$off" '$1 == hb {if ($2 > max) max = $2; if (min == "" || $2 < min) min = $2
      cpu += $3; wall += $4}
    END {printf "| %s | %d | %d-%d | %+.1f%% | %.2f s in %.0f s of 2 ranks (%.3f%% of a core) |\n",
         hb == 0 ? "0 (off)" : hb " s", max, min, max, 100 * (max - off) / off, cpu, wall,
         100 * cpu / wall}' "$dir/results"
done
