#!/bin/sh
# Failure detection under mpirun -np 4 (CPU backend, tiny model, 1 thread):
#  - one rank SIGKILLed mid-training: Open MPI's mpirun ends the job by
#    itself (the heartbeat is off here to show that) and names the rank;
#  - one rank frozen for good (SIGSTOP): with the default heartbeat timeout
#    its ring neighbour reports "rank R on HOST has not been heard from" and
#    aborts the job;
#  - in both cases mpirun exits non-zero within 60 s of the fault and no
#    process of the job is left (zombies aside: they are dead);
#  - a whole-process pause shorter than the timeout is no false alarm: the
#    job trains to the end; the same pause with a shorter timeout is caught,
#    which shows the pause really silences the rank;
#  - a malformed DDPTRAIN_FAULT_KIND is a clear error, not a silent no-op.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
# The tiny model of env.sh; later flags override its step count.
SMALL="$TINY --log-every 10"
X="-x DDPTRAIN_FAULT_RANK -x DDPTRAIN_FAULT_KIND -x DDPTRAIN_FAULT_STEP -x DDPTRAIN_FAULT_PAUSE_S"

# live NAME: ddptrain processes of job NAME (its --metrics path is unique) that
# are not zombies.
live() { ps -eo pid=,stat=,args= | grep -F "$dir/$1.jsonl" | awk '$2 !~ /^Z/ && $3 != "grep"'; }

# fault_job NAME KIND RANK ARGS...: a long run whose RANK fails at step 5;
# checks a non-zero exit within 60 s of the fault and that nothing is left.
fault_job() {
  name=$1 kind=$2 rank=$3; shift 3
  log=$dir/$name.log
  DDPTRAIN_FAULT_RANK=$rank DDPTRAIN_FAULT_KIND=$kind DDPTRAIN_FAULT_STEP=5 \
    timeout -s KILL 240 "$MPIRUN" -np 4 $X "$DDPTRAIN" $SMALL --steps 1000000 \
    --metrics "$dir/$name.jsonl" "$@" > "$log" 2>&1 &
  job=$!
  i=0
  until grep -q "fault injection: rank $rank" "$log" 2> /dev/null; do
    i=$((i + 1))
    if [ $i -gt 1200 ] || ! kill -0 $job 2> /dev/null; then break; fi
    sleep 0.1
  done
  t0=$(date +%s)
  wait $job
  rc=$?
  dt=$(($(date +%s) - t0))
  if ! grep -q "fault injection: rank $rank" "$log"; then
    echo "FAIL: $name: the fault never struck"; sed 's/^/  | /' "$log"; fail=1; return
  fi
  if [ $rc -eq 0 ]; then
    echo "FAIL: $name: the job exited 0 after a fault"; sed 's/^/  | /' "$log"; fail=1
  elif [ $dt -gt 60 ]; then
    echo "FAIL: $name: the job took $dt s after the fault to end (limit 60 s)"; fail=1
  else
    echo "ok: $name: job ended with status $rc $dt s after the fault"
  fi
  sleep 1
  left=$(live "$name")
  if [ -n "$left" ]; then
    echo "FAIL: $name: processes of the job remain:"; echo "$left" | sed 's/^/  | /'; fail=1
    for pid in $(echo "$left" | awk '{print $1}'); do kill -KILL "$pid" 2> /dev/null; done
  fi
}

fault_job kill KILL 2 --heartbeat-timeout 0
if grep -Eq "rank 2 .*(exited on signal 9|Killed)" "$dir/kill.log"; then
  echo "ok: kill: mpirun names the killed rank"
else
  echo "FAIL: kill: no message naming rank 2"; sed 's/^/  | /' "$dir/kill.log"; fail=1
fi

fault_job freeze STOP 1
if grep -Eq "ERROR: rank 1 on [^ ]+ has not been heard from for [0-9]+ s" "$dir/freeze.log"; then
  echo "ok: freeze: $(grep -o 'rank 1 on [^ ]* has not been heard from for [0-9]* s' "$dir/freeze.log")"
else
  echo "FAIL: freeze: no heartbeat message naming rank 1"; sed 's/^/  | /' "$dir/freeze.log"; fail=1
fi

# A pause of 6 s against a 12 s timeout: the job must train to the end.
pause_job() { # pause_job NAME TIMEOUT
  DDPTRAIN_FAULT_RANK=3 DDPTRAIN_FAULT_KIND=PAUSE DDPTRAIN_FAULT_STEP=3 DDPTRAIN_FAULT_PAUSE_S=6 \
    timeout -s KILL 240 "$MPIRUN" -np 4 $X "$DDPTRAIN" $SMALL --steps 20 \
    --heartbeat-timeout "$2" > "$dir/$1.log" 2>&1
}
if pause_job pause 12 && grep -q "rank 3 resumes" "$dir/pause.log" &&
  grep -q "summary: final train loss" "$dir/pause.log" && ! grep -q "not been heard" "$dir/pause.log"; then
  echo "ok: a 6 s pause with a 12 s timeout is no false alarm"
else
  echo "FAIL: a 6 s pause with a 12 s timeout did not train to the end"
  sed 's/^/  | /' "$dir/pause.log"; fail=1
fi
if ! pause_job pause-short 2 && grep -q "rank 3 on [^ ]* has not been heard from" "$dir/pause-short.log"; then
  echo "ok: the same pause with a 2 s timeout is caught"
else
  echo "FAIL: a 6 s pause with a 2 s timeout was not reported"
  sed 's/^/  | /' "$dir/pause-short.log"; fail=1
fi

if DDPTRAIN_FAULT_RANK=0 DDPTRAIN_FAULT_KIND=EXPLODE "$DDPTRAIN" $SMALL --steps 2 > "$dir/bad.log" 2>&1; then
  echo "FAIL: DDPTRAIN_FAULT_KIND=EXPLODE was accepted"; fail=1
elif grep -q "DDPTRAIN_FAULT_KIND='EXPLODE': expected KILL, STOP or PAUSE" "$dir/bad.log"; then
  echo "ok: a malformed DDPTRAIN_FAULT_KIND is rejected"
else
  echo "FAIL: no clear message for DDPTRAIN_FAULT_KIND=EXPLODE"; sed 's/^/  | /' "$dir/bad.log"; fail=1
fi
exit $fail
