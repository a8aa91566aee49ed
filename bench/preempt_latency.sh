#!/usr/bin/env bash
# Preemption latency: the time from a SIGTERM to the checkpoint on disk, for
# a few step lengths. 2 ranks on the CPU, launched by launch/ddprun; once
# the run is training, SIGTERM goes either to ddprun (which passes it to
# mpirun as SIGUSR1) or, for comparison, to mpirun itself (which forwards
# SIGTERM and kills the ranks about 2 s later). A rank finishes its current
# step, the ranks vote, rank 0 writes the checkpoint: the bound is one step
# plus one write. Prints a Markdown table: step length (the second fastest
# of the steps logged before the signal), signal -> checkpoint file (it is
# renamed into place, so complete), signal -> exit, exit status.
# Usage: bench/preempt_latency.sh [BUILD_DIR]   (default .)
set -u
build=$(cd "${1:-.}" && pwd)
[ -x "$build/ddptrain" ] || { echo "preempt_latency: no ddptrain in $build" >&2; exit 2; }
ddprun=$(cd "$(dirname "$0")/../launch" && pwd)/ddprun
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
shopt -s nullglob

now() { date +%s.%N; }
# measure NAME TARGET MODEL-FLAGS...: one run, SIGTERM to TARGET (ddprun or
# mpirun) after its second progress line and a pause of a third of a step
# (so the signal lands inside a step), prints one table row.
measure() {
  local name=$1 target=$2 dir=$work/$1-$2
  shift 2
  mkdir -p "$dir"
  "$ddprun" --cpu --np 2 --program "$build/ddptrain" -- --threads 1 --steps 1000 --log-every 1 \
    --eval-every 0 --eval-tokens 256 --save "$dir/ck" "$@" > "$dir/log" 2>&1 &
  local pid=$! i=0
  until [ "$(grep -c 'step  *[0-9]*/1000 ' "$dir/log")" -ge 2 ]; do
    sleep 0.05
    i=$((i + 1))
    if [ $i -ge 6000 ] || ! kill -0 $pid 2> /dev/null; then
      echo "| $name | run failed |"
      sed 's/^/  | /' "$dir/log" >&2
      return
    fi
  done
  local step_ms
  step_ms=$(sed -n 's/.*step  *[0-9]*\/1000 .* | \([0-9.]*\) ms\/step .*/\1/p' "$dir/log" | sort -n | sed -n 2p)
  sleep "$(echo "$step_ms / 3000" | bc -l)"
  local victim=$pid
  [ "$target" = ddprun ] || victim=$(pgrep -P $pid | head -1)
  local t0 t_ck= t_end rc files
  t0=$(now)
  kill -TERM "$victim"
  while kill -0 $pid 2> /dev/null; do
    files=("$dir"/ck/ckpt_*.safetensors)
    [ -n "$t_ck" ] || [ ${#files[@]} -eq 0 ] || t_ck=$(now)
    sleep 0.01
  done
  wait $pid
  rc=$?
  t_end=$(now)
  files=("$dir"/ck/ckpt_*.safetensors)
  [ -n "$t_ck" ] || [ ${#files[@]} -eq 0 ] || t_ck=$t_end
  local ck="none written"
  [ -z "$t_ck" ] || ck=$(printf '%.2f s' "$(echo "$t_ck - $t0" | bc -l)")
  printf '| %s | %s | %s | %s | %.2f s | %d |\n' "$name" "$target" "$step_ms" "$ck" \
    "$(echo "$t_end - $t0" | bc -l)" "$rc"
}

echo "| model (2 ranks, 1 thread each) | SIGTERM to | step ms | signal -> checkpoint | signal -> exit | status |"
echo "|---|---|---|---|---|---|"
for size in "L2 C64 512:--n-layer 2 --n-head 4 --n-embd 64 --seq-len 64 --tokens-per-batch 512" \
  "L4 C256 2048:--n-layer 4 --n-head 4 --n-embd 256 --seq-len 128 --tokens-per-batch 2048" \
  "L4 C512 4096:--n-layer 4 --n-head 8 --n-embd 512 --seq-len 128 --tokens-per-batch 4096" \
  "L4 C512 8192:--n-layer 4 --n-head 8 --n-embd 512 --seq-len 128 --tokens-per-batch 8192"; do
  name=${size%%:*}
  # shellcheck disable=SC2086
  for target in ddprun mpirun; do measure "$name" "$target" ${size#*:}; done
done
