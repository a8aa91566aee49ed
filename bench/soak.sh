#!/usr/bin/env bash
# Preemption soak: 4 ranks on the CPU train under a requeue loop for
# --minutes M. Every cycle has two launches through launch/ddprun, each
# resuming from the newest checkpoint (--resume auto):
#  1. after a random time, `kill -9` of one rank chosen at random (mpirun
#     then ends the job; the work since the last periodic checkpoint is
#     lost, as on a node failure);
#  2. after a random time, SIGUSR1 or SIGTERM (chosen at random) to ddprun,
#     which must end with a checkpoint of the step it names and status 75.
# Then one more launch resumes and stops at a step T past the newest
# checkpoint, exporting the weights, and an uninterrupted run to step T
# exports its own: the two files must be identical byte for byte (cmp).
# A small GPT (2 layers, width 64: 25-100 ms a step with 4 ranks on 2
# cores) and delays of 0.2-3 s: the launches, not the training, set the
# pace (about 8 cycles a minute on 2 cores), and the reference run at the
# end takes about half as long as the loop.
# Usage: bench/soak.sh [--minutes M] [--np N] [--build DIR] [--seed S] [--dir DIR]
#   --build: the build directory holding ddptrain (default .); --seed: the
#   schedule of delays, victims and signals (default: random, printed);
#   --dir: where checkpoints and logs go (default: a new temporary
#   directory, removed afterwards when the soak passes).
# Exit status: 0 the weights are identical, 1 a difference or a launch that
# did not behave (the logs are kept), 2 a bad command line.
set -u
minutes=20 np=4 build=. seed=$((RANDOM * 32768 + RANDOM)) work=
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "soak: $1 needs a value" >&2; exit 2; }
  case "$1" in
    --minutes) minutes=$2 ;;
    --np) np=$2 ;;
    --build) build=$2 ;;
    --seed) seed=$2 ;;
    --dir) work=$2 ;;
    *) echo "soak: unknown option '$1' (--minutes, --np, --build, --seed, --dir)" >&2; exit 2 ;;
  esac
  shift 2
done
for v in "$minutes" "$np" "$seed"; do
  case "$v" in '' | *[!0-9]*) echo "soak: '$v' is not a whole number" >&2; exit 2 ;; esac
done
here=$(cd "$(dirname "$0")" && pwd)
ddprun=$here/../launch/ddprun
program=$(cd "$build" && pwd)/ddptrain
[ -x "$program" ] || { echo "soak: no ddptrain in '$build' (--build)" >&2; exit 2; }
made=
if [ -z "$work" ]; then
  work=$(mktemp -d)
  made=1
fi
mkdir -p "$work/logs" || exit 1
RANDOM=$seed
[ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# --steps is far beyond what the soak reaches, so every launch has work
# left; the schedule (warmup, decay) depends on it and is the same for all.
MODEL=(--threads 1 --n-layer 2 --n-head 4 --n-embd 64 --seq-len 64 --tokens-per-batch 512
  --steps 1000000 --log-every 5 --eval-every 0 --eval-tokens 256)
CK=$work/ckpt
SAVE=(--save "$CK" --save-every 10 --keep 3 --resume auto)

launches=0
# start LOG ARGS...: one launch in the background; sets $pid (ddprun's).
start() {
  local log=$1
  shift
  launches=$((launches + 1))
  "$ddprun" --cpu --np "$np" --program "$program" -- "${MODEL[@]}" "$@" > "$log" 2>&1 &
  pid=$!
}
# started LOG: waits (up to 120 s) for the launch's first progress line.
started() {
  local i=0
  while ! grep -q "step  *[0-9]*/1000000" "$1" 2> /dev/null; do
    kill -0 "$pid" 2> /dev/null || return 1
    i=$((i + 1))
    [ $i -le 1200 ] || return 1
    sleep 0.1
  done
}
# rand_delay: 0.2 .. 3.0 s, in tenths. Short, so that most of the time goes
# to launches and lost work: many cycles, and a reference run shorter
# than the loop.
rand_delay() {
  local r=$((RANDOM % 29 + 2))
  printf '%d.%d' $((r / 10)) $((r % 10))
}
failed=0
fail() {
  echo "soak: FAIL: $1 (log: $2)"
  sed 's/^/  | /' "$2" | tail -20
  failed=1
}

t0=$(date +%s)
deadline=$((t0 + minutes * 60))
commit=$(git -C "$here" rev-parse --short HEAD 2> /dev/null || echo "not a git checkout")
echo "soak: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit: $np ranks, $minutes min, seed $seed, program $program, in $work"
cycles=0 kills=0 usr1=0 term=0
while [ "$(date +%s)" -lt "$deadline" ] && [ $failed = 0 ]; do
  cycles=$((cycles + 1))
  # 1. kill -9 of one rank
  log=$work/logs/c$cycles-kill.log
  start "$log" "${SAVE[@]}"
  if ! started "$log"; then
    wait "$pid"
    fail "cycle $cycles: the launch did not start training" "$log"
    break
  fi
  sleep "$(rand_delay)"
  mpirun_pid=$(pgrep -P "$pid" | head -1)
  mapfile -t ranks < <(pgrep -P "${mpirun_pid:-0}" -x ddptrain)
  if [ "${#ranks[@]}" -ne "$np" ]; then
    kill -USR1 "$pid"
    wait "$pid"
    fail "cycle $cycles: found ${#ranks[@]} of $np rank processes" "$log"
    break
  fi
  victim=${ranks[$((RANDOM % np))]}
  kill -9 "$victim"
  kills=$((kills + 1))
  wait "$pid"
  krc=$?
  # 2. a preemption signal: checkpoint and 75
  log=$work/logs/c$cycles-sig.log
  start "$log" "${SAVE[@]}"
  if ! started "$log"; then
    wait "$pid"
    fail "cycle $cycles: the launch after the kill did not start training" "$log"
    break
  fi
  sleep "$(rand_delay)"
  if [ $((RANDOM % 2)) = 0 ]; then sig=USR1 usr1=$((usr1 + 1)); else sig=TERM term=$((term + 1)); fi
  kill -"$sig" "$pid"
  wait "$pid"
  rc=$?
  step=$(sed -n 's/.*preempted (.*) after step \([0-9]*\):.*/\1/p' "$log" | head -1)
  if [ $rc -ne 75 ] || [ -z "$step" ] || [ ! -e "$CK/ckpt_$(printf %08d "$step").safetensors" ]; then
    fail "cycle $cycles: SIG$sig gave status $rc, step '${step}', no checkpoint of it" "$log"
    break
  fi
  resumed=$(grep -o "resume: loaded.*step [0-9]*" "$work/logs/c$cycles-kill.log" | grep -o "[0-9]*$" | head -1)
  echo "soak: cycle $cycles: from step ${resumed:-0}, kill -9 of pid $victim (launch status $krc), SIG$sig after step $step, status 75, $(($(date +%s) - t0)) s"
done
loop_s=$(($(date +%s) - t0))

if [ $failed = 0 ]; then
  # The newest checkpoint's step, and ten steps past it.
  last=$(for f in "$CK"/ckpt_*.safetensors; do echo "${f##*/}"; done |
    sed -n 's/^ckpt_0*\([0-9][0-9]*\)\.safetensors$/\1/p' | sort -n | tail -1)
  T=$((${last:-0} + 10))
  log=$work/logs/final.log
  start "$log" "${SAVE[@]}" --stop-at "$T" --export "$work/soak.st"
  wait "$pid" || fail "the final resumed run to step $T" "$log"
  t1=$(date +%s)
  log=$work/logs/reference.log
  start "$log" --stop-at "$T" --export "$work/reference.st"
  wait "$pid" || fail "the uninterrupted reference run to step $T" "$log"
  ref_s=$(($(date +%s) - t1))
fi
if [ $failed = 0 ]; then
  if cmp -s "$work/soak.st" "$work/reference.st"; then
    same="identical"
  else
    same="DIFFERENT"
    failed=1
  fi
  echo "soak: $cycles cycles ($kills kill -9, $usr1 SIGUSR1 + $term SIGTERM to ddprun, $launches launches) in $loop_s s of requeue loop;" \
    "step $T: weights $same to the uninterrupted run's ($ref_s s); seed $seed"
fi
if [ $failed = 0 ] && [ -n "$made" ]; then rm -rf "$work"; else echo "soak: logs kept in $work"; fi
exit $failed
