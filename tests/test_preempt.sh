#!/bin/sh
# Preemption end to end. DDPTRAIN_FAULT_STEP_SLEEP_MS slows the steps so
# the signal lands mid-run:
#  - SIGTERM to a 1-rank run: the step finishes, a checkpoint is written,
#    exit 75; resuming reaches the weights of an uninterrupted run (cmp);
#  - SIGINT once: the same, exit 75; SIGINT twice: exit 130 at once, and no
#    checkpoint of the interrupted step;
#  - 2 ranks under mpirun: SIGTERM to mpirun (Open MPI forwards it; mpirun
#    itself then exits 1 while every rank exits 75) and SIGUSR1 to mpirun
#    (forwarded; mpirun exits 75), each followed by an exact resume;
#  - SIGTERM to one rank's process only: the stop vote stops both ranks
#    after the same step;
#  - preempted without a checkpoint (no --save, or a --save directory where
#    the write fails): exit 76, not 75, with an error saying why; with 2
#    ranks every rank exits 76 (each rank's status seen through a shell).
. "${top_builddir:-.}/tests/env.sh"
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
ARGS="$TINY --steps 20 --log-every 1"
SLOW=250

# Waits until FILE contains PATTERN (up to 120 s); 1 on timeout.
wait_for() {
  i=0
  while ! grep -q "$2" "$1" 2> /dev/null; do
    i=$((i + 1))
    [ $i -gt 1200 ] && return 1
    sleep 0.1
  done
}
bad() {
  echo "FAIL: $1"
  sed 's/^/  | /' "$2"
  fail=1
}
# shellcheck disable=SC2086
exact_resume() { # NAME NP REFERENCE CKPT-DIR
  if [ "$2" -gt 1 ]; then
    timeout 300 "$MPIRUN" -np "$2" "$DDPTRAIN" $ARGS --resume "$4" --export "$dir/$1.res.st" > "$dir/$1.res.log" 2>&1
  else
    timeout 300 "$DDPTRAIN" $ARGS --resume "$4" --export "$dir/$1.res.st" > "$dir/$1.res.log" 2>&1
  fi
  if cmp -s "$3" "$dir/$1.res.st"; then
    echo "ok: $1: the resumed run ends bit-identical to the uninterrupted one"
  else
    bad "$1: resumed weights differ" "$dir/$1.res.log"
  fi
}

# shellcheck disable=SC2086
"$DDPTRAIN" $ARGS --export "$dir/ref1.st" > "$dir/ref1.log" 2>&1 || bad "reference run" "$dir/ref1.log"

# ---- one rank ------------------------------------------------------------------
for sig in TERM INT; do
  name=np1-$sig
  # shellcheck disable=SC2086
  DDPTRAIN_FAULT_STEP_SLEEP_MS=$SLOW "$DDPTRAIN" $ARGS --save "$dir/$name" > "$dir/$name.log" 2>&1 &
  pid=$!
  wait_for "$dir/$name.log" "step     3/20" && kill -$sig $pid
  wait $pid
  rc=$?
  step=$(sed -n 's/.*preempted (.*) after step \([0-9]*\): writing a checkpoint$/\1/p' "$dir/$name.log")
  if [ $rc -eq 75 ] && [ -n "$step" ] && [ "$step" -lt 20 ] && [ -e "$dir/$name/ckpt_$(printf %08d "$step").safetensors" ] &&
    grep -q "preempted: the checkpoint of step $step is on disk; exit status 75" "$dir/$name.log"; then
    echo "ok: $name: SIG$sig stops the run after step $step with a checkpoint, exit 75"
    exact_resume "$name" 1 "$dir/ref1.st" "$dir/$name"
  else
    bad "$name: exit $rc, step '$step'" "$dir/$name.log"
  fi
done

# Preempted without a checkpoint: no --save, and a --save path under a
# regular file (every write fails, even as root). Exit 76, never 75.
for how in nosave badsave; do
  name=np1-$how
  save=
  [ $how = badsave ] && save="--save $dir/ref1.st/sub"
  # shellcheck disable=SC2086
  DDPTRAIN_FAULT_STEP_SLEEP_MS=$SLOW "$DDPTRAIN" $ARGS $save > "$dir/$name.log" 2>&1 &
  pid=$!
  wait_for "$dir/$name.log" "step     3/20" && kill -USR1 $pid
  wait $pid
  rc=$?
  [ $how = badsave ] && why="its write failed, see above" || why="no --save directory"
  if [ $rc -eq 76 ] && grep -q "ERROR: preempted after step [0-9]* WITHOUT a checkpoint of it ($why): exit status 76" "$dir/$name.log" &&
    ! grep -q "exit status 75" "$dir/$name.log"; then
    echo "ok: $name: preempted without a checkpoint ($why): exit 76"
  else
    bad "$name: exit $rc (expected 76)" "$dir/$name.log"
  fi
done

# A second SIGINT while the step is still running (the sleep restarts on
# each signal, so 0.3 s later the run is still inside it): exit 130 at once.
# shellcheck disable=SC2086
DDPTRAIN_FAULT_STEP_SLEEP_MS=3000 "$DDPTRAIN" $ARGS --save "$dir/int2" > "$dir/int2.log" 2>&1 &
pid=$!
wait_for "$dir/int2.log" "step     1/20" && kill -INT $pid && sleep 0.3 && kill -INT $pid
wait $pid
rc=$?
if [ $rc -eq 130 ] && ! grep -q "preempted" "$dir/int2.log" && [ -z "$(ls -A "$dir/int2")" ]; then
  echo "ok: a second SIGINT exits 130 at once, writing nothing"
else
  bad "second SIGINT (exit $rc)" "$dir/int2.log"
fi

# ---- two ranks -------------------------------------------------------------------
if [ -z "$MPIRUN" ]; then
  echo "SKIP: 2-rank preemption (no mpirun)"
  exit $fail
fi
# shellcheck disable=SC2086
timeout 300 "$MPIRUN" -np 2 "$DDPTRAIN" $ARGS --export "$dir/ref2.st" > "$dir/ref2.log" 2>&1 || bad "2-rank reference" "$dir/ref2.log"
for sig in TERM USR1; do
  name=np2-$sig
  # shellcheck disable=SC2086
  DDPTRAIN_FAULT_STEP_SLEEP_MS=$SLOW timeout 300 "$MPIRUN" -x DDPTRAIN_FAULT_STEP_SLEEP_MS -np 2 \
    "$DDPTRAIN" $ARGS --save "$dir/$name" > "$dir/$name.log" 2>&1 &
  pid=$!
  # the signal goes to mpirun, the child of timeout
  wait_for "$dir/$name.log" "step     3/20" && kill -$sig "$(pgrep -P $pid)"
  wait $pid
  rc=$?
  step=$(sed -n 's/.*preempted (.*) after step \([0-9]*\): writing a checkpoint$/\1/p' "$dir/$name.log")
  [ "$sig" = TERM ] && want=1 || want=75
  if [ $rc -eq $want ] && [ -n "$step" ] && [ -e "$dir/$name/ckpt_$(printf %08d "$step").safetensors" ]; then
    echo "ok: $name: SIG$sig to mpirun stops both ranks after step $step with a checkpoint (mpirun exits $rc)"
    exact_resume "$name" 2 "$dir/ref2.st" "$dir/$name"
  else
    bad "$name: mpirun exit $rc (expected $want), step '$step'" "$dir/$name.log"
  fi
done

# 2 ranks whose checkpoint write fails, SIGUSR1 to rank 1's process: both
# ranks exit 76 (not only rank 0, which alone knows about the write).
# shellcheck disable=SC2016,SC2086
DDPTRAIN_FAULT_STEP_SLEEP_MS=$SLOW timeout 300 "$MPIRUN" -x DDPTRAIN_FAULT_STEP_SLEEP_MS -np 2 \
  sh -c '"$0" "$@"; echo "rank $OMPI_COMM_WORLD_RANK exit status $?"' \
  "$DDPTRAIN" $ARGS --save "$dir/ref1.st/sub" > "$dir/np2-badsave.log" 2>&1 &
pid=$!
wait_for "$dir/np2-badsave.log" "step     3/20"
rank1=
for sh_pid in $(pgrep -P "$(pgrep -P $pid)"); do
  for p in $(pgrep -P "$sh_pid"); do
    if tr '\0' '\n' < /proc/$p/environ 2> /dev/null | grep -q '^OMPI_COMM_WORLD_RANK=1$'; then rank1=$p; fi
  done
done
[ -n "$rank1" ] && kill -USR1 "$rank1"
wait $pid
if [ -n "$rank1" ] && grep -q "^rank 0 exit status 76$" "$dir/np2-badsave.log" &&
  grep -q "^rank 1 exit status 76$" "$dir/np2-badsave.log"; then
  echo "ok: 2 ranks preempted, the checkpoint write failed: both ranks exit 76"
else
  bad "2 ranks, preempted with a failing write (rank 1 pid '$rank1')" "$dir/np2-badsave.log"
fi

# SIGTERM to rank 1 alone: the vote stops rank 0 too, after the same step.
# shellcheck disable=SC2086
DDPTRAIN_FAULT_STEP_SLEEP_MS=$SLOW timeout 300 "$MPIRUN" -x DDPTRAIN_FAULT_STEP_SLEEP_MS \
  -x DDPTRAIN_LOG_ALL_RANKS=1 -np 2 "$DDPTRAIN" $ARGS --save "$dir/one" > "$dir/one.log" 2>&1 &
pid=$!
wait_for "$dir/one.log" "\[rank 1/2\] step     3/20"
rank1=
for p in $(pgrep -P "$(pgrep -P $pid)"); do
  if tr '\0' '\n' < /proc/$p/environ 2> /dev/null | grep -q '^OMPI_COMM_WORLD_RANK=1$'; then rank1=$p; fi
done
[ -n "$rank1" ] && kill -TERM "$rank1"
wait $pid
rc=$?
s0=$(sed -n 's/^\[rank 0\/2\] preempted (a stop signal on another rank) after step \([0-9]*\):.*/\1/p' "$dir/one.log")
s1=$(sed -n 's/^\[rank 1\/2\] preempted (Terminated) after step \([0-9]*\):.*/\1/p' "$dir/one.log")
if [ -n "$rank1" ] && [ $rc -eq 75 ] && [ -n "$s0" ] && [ "$s0" = "$s1" ] && [ -e "$dir/one/ckpt_$(printf %08d "$s0").safetensors" ]; then
  echo "ok: SIGTERM to rank 1 only: both ranks stop after step $s0, checkpoint written, exit 75"
else
  bad "one-rank signal (rank 1 pid '$rank1', exit $rc, steps '$s0' '$s1')" "$dir/one.log"
fi
exit $fail
