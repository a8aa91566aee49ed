#!/bin/bash
# The shape of a SLURM job, without SLURM: the templates of launch/slurm
# start one rank per GPU the allocation gives a node (ddptrain-job.sh's
# ddp_job_gpus_per_node: SLURM_GPUS_ON_NODE, SLURM_GPUS_PER_NODE,
# CUDA_VISIBLE_DEVICES, nvidia-smi -L), not a count written into them, and
# without GPUs one per task; the launchers are stand-ins that print their
# arguments. And ddptrain started with SLURM_NTASKS > 1 but an MPI world of
# 1 (srun without PMI) warns, naming both.
. "${top_builddir:-.}/tests/env.sh"
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
# No SLURM or GPU variable of the caller's may leak into the cases.
for v in $(env | sed -n 's/^\(SLURM_[A-Za-z0-9_]*\)=.*/\1/p') CUDA_VISIBLE_DEVICES; do unset "$v"; done
# A PATH whose nvidia-smi, when asked for, lists two GPUs.
mkdir -p "$dir/smi" "$dir/nosmi"
printf '#!/bin/sh\necho "GPU 0: A (UUID: GPU-a)"\necho "GPU 1: B (UUID: GPU-b)"\n' > "$dir/smi/nvidia-smi"
chmod +x "$dir/smi/nvidia-smi"
for t in tr grep sed mkdir; do ln -s "$(command -v $t)" "$dir/nosmi/$t"; ln -s "$(command -v $t)" "$dir/smi/$t"; done

# helper PATH-DIR FUNCTION [ARG] [VAR=VALUE...]: the job helper's answer
helper() {
  local path=$1 fn=$2 arg=$3
  shift 3
  env "$@" CKPT_DIR="$dir/ck" bash -c 'PATH=$1; . "$2" && "$3" $4' helper "$path" \
    "$top_srcdir/launch/slurm/ddptrain-job.sh" "$fn" "$arg"
}
expect() { # expect DESCRIPTION WANT GOT
  if [ "$3" = "$2" ]; then ok "$1: $3"; else bad "$1: got '$3', want '$2'"; fi
}
g() { helper "$dir/nosmi" ddp_job_gpus_per_node "" "$@"; }
expect "SLURM_GPUS_ON_NODE" 4 "$(g SLURM_GPUS_ON_NODE=4 SLURM_GPUS_PER_NODE=8)"
expect "SLURM_GPUS_PER_NODE with a type" 4 "$(g SLURM_GPUS_PER_NODE=a100:4)"
expect "SLURM_GPUS_PER_NODE of two types" 5 "$(g SLURM_GPUS_PER_NODE=gpu:a100:2,gpu:v100:3)"
expect "SLURM_GPUS_PER_NODE with sockets" 2 "$(g 'SLURM_GPUS_PER_NODE=gpu:2(S:0-1)')"
expect "CUDA_VISIBLE_DEVICES" 3 "$(g CUDA_VISIBLE_DEVICES=0,2,3)"
expect "CUDA_VISIBLE_DEVICES of UUIDs" 2 "$(g CUDA_VISIBLE_DEVICES=GPU-1a,MIG-2b)"
expect "CUDA_VISIBLE_DEVICES=NoDevFiles" 0 "$(g CUDA_VISIBLE_DEVICES=NoDevFiles)"
expect "nvidia-smi -L" 2 "$(helper "$dir/smi" ddp_job_gpus_per_node "")"
expect "no GPU anywhere" 0 "$(g)"
r() { helper "$dir/nosmi" ddp_job_ranks_per_node "$@"; }
expect "ranks: one per GPU" 4 "$(r 4 SLURM_NTASKS_PER_NODE=1)"
expect "ranks without GPUs: the tasks per node" 2 "$(r 0 'SLURM_NTASKS_PER_NODE=2(x3)')"
expect "ranks without GPUs: tasks over nodes" 3 "$(r 0 SLURM_NTASKS=6 SLURM_NNODES=2)"
expect "ranks without anything" 1 "$(r 0)"

# The built templates hard-code no shape, and launch what the allocation has.
for f in 1node multinode; do
  t=$top_builddir/launch/slurm/ddptrain-$f.sbatch
  [ -f "$t" ] || { bad "$t is not built (make)"; continue; }
  if grep -nE -- '--(gpus|ntasks|cpus)-per-(node|task)=[0-9]' "$t" > "$dir/hard"; then
    bad "$f template hard-codes a shape: $(cat "$dir/hard")"
  else
    ok "$f template asks for no GPU or task count"
  fi
done
printf '#!/bin/sh\necho "launch: $*"\n' > "$dir/smi/fake" && chmod +x "$dir/smi/fake"
ln -s fake "$dir/smi/srun"
for p in bash dirname cat; do ln -s "$(command -v $p)" "$dir/smi/$p"; done
job() { # job TEMPLATE VAR=VALUE...: the template run by bash, its launch line
  local tpl=$1
  shift
  (cd "$dir" && env "$@" PATH="$dir/smi" DDPTRAIN_SLURM_DIR="$top_srcdir/launch/slurm" DDPRUN="$dir/smi/fake" \
    DDPTRAIN=/bin/ddptrain CKPT_DIR="$dir/ck" bash "$top_builddir/launch/slurm/ddptrain-$tpl.sbatch" --steps 1 |
    sed -n 's/^launch: //p')
}
line=$(job 1node SLURM_GPUS_ON_NODE=4 SLURM_NTASKS=1)
case "$line" in
  "--np 4 --per-node 4 --gpus 4 --program /bin/ddptrain --mpi-arg --oversubscribe -- --save $dir/ck --resume auto --steps 1")
    ok "one node with 4 GPUs allocated: 4 ranks" ;;
  *) bad "one node, 4 GPUs: '$line'" ;;
esac
line=$(job 1node 'SLURM_NTASKS_PER_NODE=2' SLURM_NTASKS=2)
case "$line" in
  "--np 2 --per-node 2 --gpus 2 "*) ok "no SLURM GPU variable: nvidia-smi's 2 GPUs: 2 ranks" ;;
  *) bad "one node, nvidia-smi's 2 GPUs: '$line'" ;;
esac
line=$(job multinode DDP_LAUNCHER=mpirun SLURM_GPUS_PER_NODE=gpu:8 SLURM_JOB_NUM_NODES=3)
case "$line" in
  "--per-node 8 --gpus 8 --nodes 3 --program /bin/ddptrain --mpi-arg --oversubscribe -- "*)
    ok "3 nodes x 8 GPUs through mpirun: 8 per node" ;;
  *) bad "multinode through mpirun: '$line'" ;;
esac
line=$(job multinode DDP_LAUNCHER=srun SLURM_GPUS_ON_NODE=4 SLURM_JOB_NUM_NODES=2)
case "$line" in
  "--mpi=pmix --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node=4 --ntasks=8 /bin/ddptrain "*)
    ok "2 nodes x 4 GPUs through srun: 8 tasks" ;;
  *) bad "multinode through srun: '$line'" ;;
esac

# srun without PMI: each task is an MPI singleton; ddptrain says so.
warn="SLURM_NTASKS is 2 but this process sees an MPI world size of 1"
SLURM_NTASKS=2 "$DDPTRAIN" --plan-only > "$dir/out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "WARN: $warn: every task trains alone" "$dir/out"; then
  ok "SLURM_NTASKS=2 in a world of 1: $(grep -o "WARN: .*" "$dir/out" | head -1)"
else
  bad "SLURM_NTASKS=2 in a world of 1: exit $rc"; sed 's/^/  | /' "$dir/out"
fi
SLURM_NTASKS=1 "$DDPTRAIN" --plan-only > "$dir/out" 2>&1
if grep -q "SLURM_NTASKS" "$dir/out"; then bad "SLURM_NTASKS=1 warns"; else ok "SLURM_NTASKS=1: no warning"; fi
if [ -n "$MPIRUN" ]; then
  SLURM_NTASKS=2 "$MPIRUN" -np 2 "$DDPTRAIN" --plan-only > "$dir/out" 2>&1
  if grep -q "SLURM_NTASKS" "$dir/out"; then bad "2 MPI ranks with SLURM_NTASKS=2 warn"; else ok "2 MPI ranks, SLURM_NTASKS=2: no warning"; fi
fi
exit $fail
