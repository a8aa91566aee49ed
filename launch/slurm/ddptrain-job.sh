# Shared by the ddptrain SLURM batch templates, which source it (bash). It is
# the part of a job that is the same on one node and on many:
#  - checkpoints: ddptrain's --save DIR --resume auto into $CKPT_DIR, so a
#    requeued job continues from its last checkpoint;
#  - preemption: SLURM sends SIGUSR1 to the batch shell ahead of the time
#    limit (#SBATCH --signal=B:USR1@120); the shell passes it on to the
#    launcher, which passes it to every rank; ddptrain then writes a
#    checkpoint and exits with status 75, and the job requeues itself
#    (scontrol requeue) to resume from that checkpoint. SIGTERM and SIGINT
#    (scancel, a node shutting down) take the same path as SIGUSR1: passed
#    on as SIGUSR1, because Open MPI's mpirun kills the ranks about 2 s
#    after forwarding a SIGTERM, checkpoint written or not;
#  - the record: the command line and the final status in the job's output.
# Settings (environment): DDPTRAIN (the program, default ddptrain next to
# ddprun or on PATH), DDPRUN (default ddprun), CKPT_DIR (default
# $SLURM_SUBMIT_DIR/checkpoints/$SLURM_JOB_NAME).

DDPRUN=${DDPRUN:-ddprun}
DDPTRAIN=${DDPTRAIN:-$(command -v ddptrain || echo ddptrain)}
CKPT_DIR=${CKPT_DIR:-${SLURM_SUBMIT_DIR:-.}/checkpoints/${SLURM_JOB_NAME:-ddptrain}}
EXIT_PREEMPTED=75 # ddptrain's status after a checkpoint on SIGTERM/SIGUSR1/SIGINT

mkdir -p "$CKPT_DIR" || { echo "ddptrain job: cannot create CKPT_DIR $CKPT_DIR" >&2; exit 1; }
DDP_CKPT_ARGS=(--save "$CKPT_DIR" --resume auto)

# ddp_job_run CMD...: runs the launch command, forwards preemption signals to
# it, requeues the job when ddptrain says it was preempted, and exits with
# the command's status.
ddp_job_run() {
  echo "ddptrain job ${SLURM_JOB_ID:-?} (start $((${SLURM_RESTART_COUNT:-0} + 1))) on ${SLURM_JOB_NODELIST:-?}: $*"
  "$@" &
  local pid=$! rc
  # bash runs a trap only between commands, so the launcher runs in the
  # background and `wait` (which a trapped signal interrupts) is repeated
  # until it has really ended.
  trap 'echo "ddptrain job: SIGUSR1 (preemption), passing it to the ranks"; kill -USR1 $pid' USR1
  trap 'echo "ddptrain job: SIGTERM, passing SIGUSR1 to the ranks"; kill -USR1 $pid' TERM
  trap 'echo "ddptrain job: SIGINT, passing SIGUSR1 to the ranks"; kill -USR1 $pid' INT
  while :; do
    wait "$pid"
    rc=$?
    kill -0 "$pid" 2> /dev/null || break
  done
  trap - USR1 TERM INT
  echo "ddptrain job: the launcher exited with status $rc"
  if [ "$rc" -eq "$EXIT_PREEMPTED" ] && [ -n "${SLURM_JOB_ID:-}" ]; then
    echo "ddptrain job: preempted after a checkpoint; requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
  fi
  exit "$rc"
}
