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
#  - the record: the command line and the final status in the job's output;
#  - the shape: one rank per GPU the allocation gave this node
#    (ddp_job_gpus_per_node), not a count written into the template, so
#    `sbatch --gpus-per-node=4` starts 4 ranks per node.
# Settings (environment): DDPTRAIN (the program, default ddptrain next to
# ddprun or on PATH), DDPRUN (default ddprun), CKPT_DIR (default
# $SLURM_SUBMIT_DIR/checkpoints/$SLURM_JOB_NAME).

DDPRUN=${DDPRUN:-ddprun}
DDPTRAIN=${DDPTRAIN:-$(command -v ddptrain || echo ddptrain)}
CKPT_DIR=${CKPT_DIR:-${SLURM_SUBMIT_DIR:-.}/checkpoints/${SLURM_JOB_NAME:-ddptrain}}
EXIT_PREEMPTED=75 # ddptrain's status after a checkpoint on SIGTERM/SIGUSR1/SIGINT

mkdir -p "$CKPT_DIR" || { echo "ddptrain job: cannot create CKPT_DIR $CKPT_DIR" >&2; exit 1; }
DDP_CKPT_ARGS=(--save "$CKPT_DIR" --resume auto)

# ddp_job_gpus_per_node: the GPUs of this node's allocation. SLURM_GPUS_ON_NODE
# (set where GPUs were allocated), else SLURM_GPUS_PER_NODE ("4", "a100:4",
# or several types "a100:2,v100:2", summed), else the devices listed in
# CUDA_VISIBLE_DEVICES, else what nvidia-smi -L sees, else 0.
ddp_job_gpus_per_node() {
  local n= t
  if [ -n "${SLURM_GPUS_ON_NODE:-}" ]; then
    n=$SLURM_GPUS_ON_NODE
  elif [ -n "${SLURM_GPUS_PER_NODE:-}" ]; then
    n=0
    for t in $(echo "$SLURM_GPUS_PER_NODE" | tr ',' ' '); do
      t=${t%%(*}
      t=${t##*:}
      case "$t" in '' | *[!0-9]*) ;; *) n=$((n + t)) ;; esac
    done
  elif [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    # indices, GPU-/MIG- UUIDs; SLURM writes NoDevFiles when there are none
    n=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -cE '^([0-9]+|GPU-.*|MIG-.*)$')
  elif command -v nvidia-smi > /dev/null 2>&1; then
    n=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ')
  fi
  case "$n" in '' | *[!0-9]*) n=0 ;; esac
  echo "$n"
}

# ddp_job_ranks_per_node GPUS: one rank per GPU; without GPUs the tasks per
# node the job asked for (SLURM_NTASKS_PER_NODE, else SLURM_NTASKS over
# SLURM_NNODES), else 1.
ddp_job_ranks_per_node() {
  local n=$1
  if [ "$n" -le 0 ]; then
    n=${SLURM_NTASKS_PER_NODE:-}
    n=${n%%[!0-9]*} # "2(x3)" is 2 tasks on each of 3 nodes
    if [ -z "$n" ] && [ -n "${SLURM_NTASKS:-}" ]; then n=$((SLURM_NTASKS / ${SLURM_NNODES:-1})); fi
    [ -n "$n" ] && [ "$n" -ge 1 ] || n=1
  fi
  echo "$n"
}

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
