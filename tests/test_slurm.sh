#!/bin/bash
# A real SLURM on this machine (run by `make check-slurm`, not `make check`):
# munged, slurmctld and slurmd on localhost from a generated slurm.conf in a
# temporary directory, on their own ports and munge socket, torn down again
# on every exit. Then, through the built templates of launch/slurm:
#  - the one-node template (ddprun/mpirun inside the allocation) trains, exits
#    0 and leaves a checkpoint;
#  - the multi-node template trains with srun --mpi=pmix, and with its
#    mpirun fallback;
#  - under srun a killed rank and a frozen rank end the job within 60 s, with
#    the rank named;
#  - preemption: SIGUSR1 to the batch shell reaches the ranks; ddptrain writes
#    a checkpoint and exits 75, the job requeues itself, and the second start
#    resumes from that checkpoint (--resume auto) and completes; the same
#    with SIGTERM to the batch shell and 3 s steps.
# SKIPs (77) when not root or when slurm/munge are not installed.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ "$(id -u)" -ne 0 ]; then echo "SKIP: a private SLURM needs root"; exit 77; fi
for p in slurmctld slurmd munged mungekey sbatch srun scontrol; do
  PATH=$PATH:/usr/sbin command -v $p > /dev/null 2>&1 ||
    { echo "SKIP: $p is not installed (packages slurm-wlm, munge)"; exit 77; }
done
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
export PATH=$PATH:/usr/sbin
t=$(mktemp -d /tmp/ddp-slurm.XXXXXX)
chmod 755 "$t"
# Stops only what this test started, by the pids the daemons wrote.
teardown() {
  for d in slurmd slurmctld munge/munged; do
    [ -s "$t/$d.pid" ] && kill "$(cat "$t/$d.pid")" 2> /dev/null
  done
  sleep 1
  for d in slurmd slurmctld munge/munged; do
    [ -s "$t/$d.pid" ] && kill -KILL "$(cat "$t/$d.pid")" 2> /dev/null
  done
  rm -rf "$t"
}
trap teardown EXIT
trap 'exit 1' INT TERM
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
dump() { sed 's/^/  | /' "$@"; }

# ---- munge: a private key and socket --------------------------------------
mkdir -p "$t/munge" "$t/msock"
chown munge:munge "$t/munge" "$t/msock" && chmod 700 "$t/munge" && chmod 755 "$t/msock"
mungekey -c -k "$t/munge/munge.key" > /dev/null && chown munge:munge "$t/munge/munge.key"
if ! su -s /bin/sh munge -c "munged -S $t/msock/sock --key-file=$t/munge/munge.key \
    --log-file=$t/munge/log --pid-file=$t/munge/munged.pid --seed-file=$t/munge/seed"; then
  echo "FAIL: munged did not start"; cat "$t/munge/log"; exit 1
fi

# ---- slurmctld + slurmd ----------------------------------------------------
h=$(hostname)
mkdir -p "$t/ctld" "$t/spool" "$t/job"
port=$((17000 + $$ % 2000 * 2))
cat > "$t/slurm.conf" << CONF
ClusterName=ddptest
SlurmctldHost=$h
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
# cred_expire: a requeued job waits cred_expire + 1 s before it starts
# again (120 s by default); 10 s keeps the preemption check short.
AuthInfo=socket=$t/msock/sock,cred_expire=10
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$t/ctld
SlurmdSpoolDir=$t/spool
SlurmctldPidFile=$t/slurmctld.pid
SlurmdPidFile=$t/slurmd.pid
SlurmctldLogFile=$t/slurmctld.log
SlurmdLogFile=$t/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
MpiDefault=none
ReturnToService=2
KillWait=5
NodeName=$h CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$h Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF=$t/slurm.conf
slurmctld -f "$SLURM_CONF" && slurmd -f "$SLURM_CONF" || { echo "FAIL: slurm daemons"; exit 1; }
i=0
until sinfo -h -o %t 2> /dev/null | grep -q idle; do
  i=$((i + 1))
  if [ $i -gt 60 ]; then echo "FAIL: the node never became idle"; dump "$t/slurmctld.log"; exit 1; fi
  sleep 1
done
ok "a private SLURM is up: $(sinfo -h -o '%P %D %t %N')"

# ---- the templates, as `make install` writes them ---------------------------
# The built templates (make), with their helper taken from the sources.
for f in 1node multinode; do
  cp "$top_builddir/launch/slurm/ddptrain-$f.sbatch" "$t/$f.sbatch" ||
    { echo "FAIL: launch/slurm/ddptrain-$f.sbatch is not built (make)"; exit 1; }
done
export DDPTRAIN DDPRUN="$top_srcdir/launch/ddprun" DDPTRAIN_SLURM_DIR="$top_srcdir/launch/slurm"
# The templates take their shape from the allocation; this node has 2 CPUs
# and no GPU, so the jobs ask for 2 tasks and no GPU: 2 ranks.
SHAPE="--ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1"
SMALL="$TINY --log-every 10"
submit() { # submit NAME TEMPLATE SBATCH-ARGS... -- DDPTRAIN-ARGS...: sbatch --wait
  name=$1 tpl=$2; shift 2
  sargs=()
  while [ "$1" != -- ]; do sargs+=("$1"); shift; done
  shift
  (cd "$t/job" && timeout -s KILL 300 sbatch --wait --parsable --job-name="$name" \
    --output="$t/job/$name.out" $SHAPE "${sargs[@]}" "$t/$tpl.sbatch" $SMALL "$@" \
    > "$t/job/$name.id" 2> /dev/null)
}
# run_s NAME: how long job NAME ran (SLURM's EndTime - StartTime; sbatch
# --wait itself notices the end only at its next poll).
run_s() {
  scontrol show job "$(head -1 "$t/job/$1.id")" 2> /dev/null |
    sed -n 's/.*StartTime=\([^ ]*\) EndTime=\([^ ]*\).*/\1 \2/p' |
    { read -r a b && echo $(($(date -d "$b" +%s) - $(date -d "$a" +%s))); }
}

if submit one 1node -- --steps 20; then
  if grep -q "summary: final train loss" "$t/job/one.out"; then
    ok "one-node template: trained and exited 0"
  else
    bad "one-node template: exited 0 without training"; dump "$t/job/one.out"
  fi
  if ls "$t/job/checkpoints/one"/ckpt_*.safetensors > /dev/null 2>&1; then
    ok "one-node template: wrote a checkpoint to checkpoints/one"
  else
    bad "one-node template: no checkpoint in $t/job/checkpoints/one"
  fi
else
  bad "one-node template: the job failed"; dump "$t/job/one.out"
fi

pmix=0
srun --mpi=list 2>&1 | grep -qw pmix && pmix=1
for l in srun mpirun; do
  if [ $l = srun ] && [ $pmix = 0 ]; then echo "note: this SLURM has no PMIx plugin; srun not tried"; continue; fi
  if DDP_LAUNCHER=$l submit multi-$l multinode --nodes=1 -- --steps 20 &&
    grep -q "summary: final train loss" "$t/job/multi-$l.out"; then
    ok "multi-node template with $l: trained and exited 0 ($(grep -m1 -o 'on [^:]*: [^ ]*' "$t/job/multi-$l.out"))"
  else
    bad "multi-node template with $l"; dump "$t/job/multi-$l.out"
  fi
done

# ---- failures under srun ----------------------------------------------------
if [ $pmix = 1 ]; then
  for kind in KILL STOP; do
    DDP_LAUNCHER=srun DDPTRAIN_FAULT_RANK=1 DDPTRAIN_FAULT_KIND=$kind DDPTRAIN_FAULT_STEP=5 \
      submit fault-$kind multinode --nodes=1 -- --steps 1000000 --heartbeat-timeout 10
    rc=$?
    dt=$(run_s fault-$kind)
    out=$t/job/fault-$kind.out
    if [ $kind = KILL ]; then want="task 1: Killed"; else want="rank 1 on $h has not been heard from"; fi
    if [ $rc -ne 0 ] && [ "${dt:-999}" -le 60 ] && grep -q "$want" "$out"; then
      ok "srun, $kind of rank 1: the job failed after $dt s: $(grep -m1 "$want" "$out")"
    else
      bad "srun, $kind of rank 1: status $rc after $dt s"; dump "$out"
    fi
  done
  sleep 1
  left=$(ps -eo pid=,stat=,args= | grep -F -- "--heartbeat-timeout 10" | grep -F "$DDPTRAIN" | awk '$2 !~ /^Z/ && $3 != "grep"')
  [ -z "$left" ] || { bad "ddptrain processes remain after the faults:"; echo "$left"; }
fi

# ---- preemption and requeue -------------------------------------------------
# SIGUSR1 to the batch shell (what --signal=B:USR1@120 sends) must reach the
# ranks; ddptrain writes a checkpoint and exits 75, the job requeues itself
# and its second start resumes from the checkpoint and completes. SIGTERM
# to the batch shell (scancel --batch, a node shutting down) must do the
# same, also when a step takes longer than the ~2 s mpirun grants the ranks
# after forwarding a SIGTERM of its own: the job script and ddprun pass it
# on as SIGUSR1.
prog=$DDPTRAIN
# preempt SIGNAL STEP-SLEEP-MS STEPS [FLAGS...]: the step sleep is long
# enough to be inside training when the signal comes.
preempt() {
  name=preempt-$1
  job=$(cd "$t/job" && DDPTRAIN=$prog DDPTRAIN_FAULT_STEP_SLEEP_MS=$2 sbatch --parsable \
    --job-name="$name" --output="$t/job/$name.out" $SHAPE "$t/1node.sbatch" $SMALL --steps "$3" "${@:4}")
  i=0
  until grep -q "step " "$t/job/$name.out" 2> /dev/null || [ $i -gt 240 ]; do sleep 0.5; i=$((i + 1)); done
  scancel --batch --signal="$1" "$job"
  state= restarts=0
  for i in $(seq 1 150); do
    info=$(scontrol show job "$job" 2> /dev/null)
    state=$(echo "$info" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    restarts=$(echo "$info" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
    case "$state" in COMPLETED | FAILED | CANCELLED | TIMEOUT) break ;; esac
    sleep 1
  done
  out=$t/job/$name.out
  if [ "$state" = COMPLETED ] && [ "${restarts:-0}" -ge 1 ] && grep -q "requeueing job $job" "$out" &&
    grep -q "checkpoint: " "$out" && grep -q "resume: loaded" "$out" &&
    grep -q -e "--save $t/job/checkpoints/$name --resume auto" "$out"; then
    ok "preemption: SIG$1 reached the ranks, status 75 requeued the job, the restart $(grep -m1 -o 'resume: loaded.*' "$out") and completed"
  else
    bad "preemption by SIG$1: job $job ended ${state:-?} after ${restarts:-0} restarts"; dump "$out"
  fi
  scancel "$job" 2> /dev/null
}
preempt USR1 100 150
preempt TERM 3000 6 --log-every 1
exit $fail
