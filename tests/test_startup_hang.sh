#!/bin/sh
# A rank that freezes during start-up must not hang the job (mpirun -np 3,
# CPU backend, tiny model, --startup-timeout 5):
#  - DDPTRAIN_FAULT_STARTUP_RANK/_PHASE freeze one rank for good (SIGSTOP) as
#    a start-up phase begins: before MPI_Init, before the device probe, the
#    device decision, the backend, the binding and the heartbeat's set-up,
#    and rank 0 itself during binding. Each time the job must end non-zero
#    within 45 s of the launch with the start-up watchdog's line naming the
#    phase the others wait in and the frozen rank (before MPI is up: saying
#    it cannot name ranks), and no process of the job may be left (a stopped
#    one included);
#  - a rank whose main thread hangs (DDPTRAIN_FAULT_STARTUP_KIND=HANG) is
#    alive: it answers, and is named with the phase it is stuck in;
#  - a freeze just after start-up ("train") is the heartbeat's: it names the
#    rank;
#  - a plain SIGSTOP of rank 1 0.3 s after the launch ends the job too, by
#    the start-up watchdog or, on a fast machine, the heartbeat;
#  - a malformed DDPTRAIN_FAULT_STARTUP_PHASE is a clear error.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
LIMIT=45
X="-x DDPTRAIN_FAULT_STARTUP_RANK -x DDPTRAIN_FAULT_STARTUP_PHASE -x DDPTRAIN_FAULT_STARTUP_KIND"
export DDPTRAIN_FAULT_STARTUP_KIND=STOP
ARGS="$TINY --steps 1000000 --startup-timeout 5 --heartbeat-timeout 5"

# live NAME: processes of job NAME (its --metrics path is unique) that are
# not zombies.
live() { ps -eo pid=,stat=,args= | grep -F "$dir/$1.jsonl" | awk '$2 !~ /^Z/ && $3 != "grep"'; }

# ended NAME RC SECONDS: the job ended non-zero within LIMIT and left nothing.
ended() {
  if [ "$2" -eq 0 ]; then
    echo "FAIL: $1: the job exited 0"; sed 's/^/  | /' "$dir/$1.log"; fail=1; return 1
  fi
  if [ "$3" -gt $LIMIT ]; then
    echo "FAIL: $1: the job took $3 s to end (limit $LIMIT s)"; sed 's/^/  | /' "$dir/$1.log"
    fail=1
  fi
  sleep 1
  left=$(live "$1")
  if [ -n "$left" ]; then
    echo "FAIL: $1: processes of the job remain:"; echo "$left" | sed 's/^/  | /'; fail=1
    for pid in $(echo "$left" | awk '{print $1}'); do kill -KILL "$pid" 2> /dev/null; done
  fi
  return 0
}

# freeze NAME RANK POINT PATTERN: rank RANK freezes as POINT begins; the log
# must match the extended regular expression PATTERN. The fault's kind is
# DDPTRAIN_FAULT_STARTUP_KIND's.
freeze() {
  name=$1 rank=$2 point=$3 pattern=$4
  how="stops itself (SIGSTOP)"
  [ "$DDPTRAIN_FAULT_STARTUP_KIND" = HANG ] && how="hangs its main thread"
  t0=$(date +%s)
  DDPTRAIN_FAULT_STARTUP_RANK=$rank DDPTRAIN_FAULT_STARTUP_PHASE=$point \
    timeout -s KILL 120 "$MPIRUN" -np 3 $X "$DDPTRAIN" $ARGS --metrics "$dir/$name.jsonl" \
    > "$dir/$name.log" 2>&1
  rc=$?
  dt=$(($(date +%s) - t0))
  if ! grep -q "fault injection: rank $rank $how for good at start-up point '$point'" \
    "$dir/$name.log"; then
    echo "FAIL: $name: the fault never struck"; sed 's/^/  | /' "$dir/$name.log"; fail=1
  fi
  ended "$name" $rc $dt || return
  line=$(grep -E "$pattern" "$dir/$name.log" | head -1)
  if [ -n "$line" ]; then
    echo "ok: $name: status $rc after $dt s: ${line#*ERROR: }"
  else
    echo "FAIL: $name: no line matching: $pattern"; sed 's/^/  | /' "$dir/$name.log"; fail=1
  fi
}

# The phase the other ranks wait in, and the rank they miss.
watchdog() { echo "start-up phase '$1' has not ended after [0-9.]+ s \(--startup-timeout 5\); ranks not heard from: $2; ending the job"; }

freeze before-mpi 1 mpi-init \
  "start-up phase 'MPI init' has not ended after [0-9.]+ s \(--startup-timeout 5\); MPI is not up yet, so the ranks that are missing cannot be named"
freeze flags 1 flags "$(watchdog 'flag agreement' 1)"
freeze device-probe 2 device-probe "$(watchdog 'device decision' 2)"
freeze device-decision 1 device-decision "$(watchdog 'device decision' 1)"
freeze backend 2 backend "$(watchdog binding 2)"
freeze binding 1 binding "$(watchdog binding 1)"
freeze heartbeat 2 heartbeat "$(watchdog 'heartbeat start' 2)"
freeze rank0-binding 0 binding "rank [12] on [^ ]+: $(watchdog binding 0)"
freeze train 1 train "rank 1 on [^ ]+ has not been heard from for [0-9]+ s"
DDPTRAIN_FAULT_STARTUP_KIND=HANG
freeze hang-probe 2 device-probe \
  "start-up phase 'device decision' has not ended after [0-9.]+ s \(--startup-timeout 5\); every rank answered; elsewhere: rank 2 in 'device probe' for [0-9.]+ s; ending the job"
DDPTRAIN_FAULT_STARTUP_KIND=STOP

# A plain SIGSTOP 0.3 s after the launch, wherever start-up is by then.
name=sigstop
t0=$(date +%s)
t0_ns=$(date +%s%N)
timeout -s KILL 120 "$MPIRUN" -np 3 "$DDPTRAIN" $ARGS --metrics "$dir/$name.jsonl" \
  > "$dir/$name.log" 2>&1 &
job=$!
sleep 0.3
victim=
i=0
while [ -z "$victim" ] && [ $i -lt 200 ] && kill -0 $job 2> /dev/null; do
  for pid in $(live $name | awk '$3 ~ /ddptrain$/ {print $1}'); do
    if tr '\0' '\n' < /proc/$pid/environ 2> /dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then
      victim=$pid
    fi
  done
  [ -n "$victim" ] || sleep 0.05
  i=$((i + 1))
done
if [ -n "$victim" ]; then kill -STOP "$victim"; fi
stopped_after=$(awk -v a="$t0_ns" -v b="$(date +%s%N)" 'BEGIN {printf "%.2f", (b - a) / 1e9}')
wait $job
rc=$?
dt=$(($(date +%s) - t0))
if [ -z "$victim" ]; then
  echo "FAIL: $name: rank 1 never appeared"; sed 's/^/  | /' "$dir/$name.log"; fail=1
elif ended $name $rc $dt; then
  line=$(grep -E "$(watchdog '[a-zA-Z ]+' 1)|MPI is not up yet|rank 1 on [^ ]+ has not been heard from" \
    "$dir/$name.log" | head -1)
  if [ -n "$line" ]; then
    echo "ok: $name: rank 1 stopped ${stopped_after} s after the launch; status $rc after $dt s: ${line#*ERROR: }"
  else
    echo "FAIL: $name: no line naming rank 1 or the phase"; sed 's/^/  | /' "$dir/$name.log"; fail=1
  fi
fi

if DDPTRAIN_FAULT_STARTUP_RANK=0 DDPTRAIN_FAULT_STARTUP_PHASE=lunch "$DDPTRAIN" $TINY \
  > "$dir/bad.log" 2>&1; then
  echo "FAIL: DDPTRAIN_FAULT_STARTUP_PHASE=lunch was accepted"; fail=1
elif grep -q "DDPTRAIN_FAULT_STARTUP_PHASE='lunch': expected one of mpi-init, flags, device-probe" "$dir/bad.log"; then
  echo "ok: a malformed DDPTRAIN_FAULT_STARTUP_PHASE is rejected"
else
  echo "FAIL: no clear message for DDPTRAIN_FAULT_STARTUP_PHASE=lunch"; sed 's/^/  | /' "$dir/bad.log"
  fail=1
fi
if DDPTRAIN_FAULT_STARTUP_RANK=0 DDPTRAIN_FAULT_STARTUP_KIND=NAP "$DDPTRAIN" $TINY \
  > "$dir/bad-kind.log" 2>&1; then
  echo "FAIL: DDPTRAIN_FAULT_STARTUP_KIND=NAP was accepted"; fail=1
elif grep -q "DDPTRAIN_FAULT_STARTUP_KIND='NAP': expected STOP or HANG" "$dir/bad-kind.log"; then
  echo "ok: a malformed DDPTRAIN_FAULT_STARTUP_KIND is rejected"
else
  echo "FAIL: no clear message for DDPTRAIN_FAULT_STARTUP_KIND=NAP"; sed 's/^/  | /' "$dir/bad-kind.log"
  fail=1
fi
exit $fail
