#!/bin/sh
# Several ranks and GPUs: the collective device decision and NCCL training.
#  - everywhere with mpirun: a rank without a GPU (rank 1's GPUs hidden by an
#    MPMD launch) makes --device cuda an error on every rank naming rank 1,
#    with a non-zero exit and no hang; --device auto trains every rank on the
#    CPU over MPI (and, where rank 0 has a GPU, rank 0 says which rank had
#    none and why);
#  - with 1+ GPU: two ranks made to share GPU 0 fall back to the CPU under
#    auto and are refused under --device cuda;
#  - with 2+ GPUs: two ranks train over NCCL (the start-up line names it);
#    fp32 (TF32 off, SGD) weights and the loss curve equal one rank with
#    twice the micro-batches; all-reduces per step with --accum 3 are the
#    bucket count plus the stop vote; bf16 with a bf16 gradient reduction
#    trains to a finite, falling loss.
# SKIP (77) without mpirun, and after the first part without 2 GPUs.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
gpus=0
if command -v nvidia-smi > /dev/null 2>&1; then gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
MODEL="--threads 1 --peak-gflops 10 --n-layer 2 --n-head 2 --n-embd 64 --seq-len 64 \
--tokens-per-batch 512 --steps 6 --warmup 2 --log-every 1 --eval-every 0 --eval-tokens 64"
show() { sed 's/^/  | /' "$1"; }

# Rank 1 sees no GPU (MPMD: the same program, its environment differs).
# shellcheck disable=SC2086
timeout 120 "$MPIRUN" -np 1 "$DDPTRAIN" $MODEL --steps 2 --device cuda : \
  -np 1 env CUDA_VISIBLE_DEVICES= "$DDPTRAIN" $MODEL --steps 2 --device cuda > "$dir/nogpu.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] &&
   grep -q "rank 0: --device cuda: [12] of 2 ranks have no usable GPU (.*rank 1 on " "$dir/nogpu.log" &&
   grep -q "rank 1: --device cuda: [12] of 2 ranks have no usable GPU (.*rank 1 on " "$dir/nogpu.log"; then
  echo "ok: --device cuda with a rank without a GPU stops every rank, naming rank 1 (exit $rc)"
else
  echo "FAIL: --device cuda with a rank without a GPU (exit $rc)"; show "$dir/nogpu.log"; fail=1
fi
# shellcheck disable=SC2086
timeout 300 "$MPIRUN" -np 1 "$DDPTRAIN" $MODEL --steps 2 : \
  -np 1 env CUDA_VISIBLE_DEVICES= "$DDPTRAIN" $MODEL --steps 2 > "$dir/auto.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "data parallel: 2 ranks, mpi communicator" "$dir/auto.log" &&
   grep -q "rank 0 on [^:]*: cpu" "$dir/auto.log"; then
  if [ "$gpus" -ge 1 ] && ! grep -q "device auto: 1 of 2 ranks have no usable GPU (rank 1 on .*), so every rank trains on the CPU" "$dir/auto.log"; then
    echo "FAIL: --device auto: rank 0 does not say which rank had no GPU"; show "$dir/auto.log"; fail=1
  else
    echo "ok: --device auto with a rank without a GPU trains every rank on the CPU over MPI"
  fi
else
  echo "FAIL: --device auto with a rank without a GPU (exit $rc)"; show "$dir/auto.log"; fail=1
fi

if [ "$gpus" -ge 1 ]; then
  # Both ranks see only GPU 0: NCCL cannot put two ranks on one GPU.
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES=0 timeout 120 "$MPIRUN" -x CUDA_VISIBLE_DEVICES -np 2 "$DDPTRAIN" $MODEL \
    --steps 2 --device cuda > "$dir/share.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] &&
     [ "$(grep -c 'rank [01]: --device cuda on 2 ranks: ranks 0 and 1 on .* would share cuda:0' "$dir/share.log")" -eq 2 ]; then
    echo "ok: --device cuda with two ranks on one GPU stops both (exit $rc)"
  else
    echo "FAIL: two ranks on one GPU, --device cuda (exit $rc)"; show "$dir/share.log"; fail=1
  fi
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES=0 timeout 300 "$MPIRUN" -x CUDA_VISIBLE_DEVICES -np 2 "$DDPTRAIN" $MODEL \
    --steps 2 > "$dir/share-auto.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -q "would share cuda:0, and NCCL needs a GPU per rank; every rank trains on the CPU" "$dir/share-auto.log" &&
     grep -q "data parallel: 2 ranks, mpi communicator" "$dir/share-auto.log"; then
    echo "ok: --device auto with two ranks on one GPU trains on the CPU and says why"
  else
    echo "FAIL: two ranks on one GPU, --device auto (exit $rc)"; show "$dir/share-auto.log"; fail=1
  fi
fi

if [ "$gpus" -lt 2 ]; then
  [ $fail -ne 0 ] && exit 1
  echo "SKIP: NCCL training needs 2 GPUs, nvidia-smi lists $gpus"; exit 77
fi

COMPARE="$top_builddir/tests/st_compare"
SGD="--device cuda --tf32 off --optimizer sgd --lr 0.05 --min-lr 0.005"
run() { # run NP NAME ARGS...
  np=$1; name=$2; shift 2
  # shellcheck disable=SC2086
  timeout 300 "$MPIRUN" -np "$np" "$DDPTRAIN" $MODEL --export "$dir/$name.st" \
    --metrics "$dir/$name.jsonl" "$@" > "$dir/$name.log" 2>&1
}
if run 2 two $SGD && run 1 one $SGD --accum 2; then
  if grep -q "data parallel: 2 ranks, nccl communicator (stream progress) (host values: mpi" "$dir/two.log"; then
    echo "ok: two GPU ranks reduce over NCCL"
  else
    echo "FAIL: no NCCL start-up line"; show "$dir/two.log"; fail=1
  fi
  if res=$("$COMPARE" "$dir/two.st" "$dir/one.st" 1e-5); then
    echo "ok: 2 GPU ranks equal 1 GPU rank with accum 2: $res"
  else
    echo "FAIL: 2 GPU ranks differ from 1 rank with accum 2: $res"; fail=1
  fi
  python3 - "$dir/one.jsonl" "$dir/two.jsonl" <<'PY' || fail=1
import json, sys
def losses(path):
    return [r["loss"] for r in map(json.loads, open(path)) if "loss" in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print(("ok" if worst <= 1e-5 else "FAIL") + ": NCCL -np 2 loss curve vs -np 1 --accum 2: %d steps, worst relative difference %.2g" % (len(a), worst))
sys.exit(0 if worst <= 1e-5 else 1)
PY
else
  echo "FAIL: fp32 runs"; show "$dir/two.log"; show "$dir/one.log"; fail=1
fi

if run 2 acc --device cuda --accum 3 --bucket-mb 0.01 --first-bucket-mb 0.01; then
  buckets=$(sed -n 's/.* \([0-9]*\) gradient buckets.*/\1/p' "$dir/acc.log")
  python3 - "$dir/acc.jsonl" "${buckets:-0}" <<'PY' || fail=1
import json, sys
per = [r["allreduce_per_step"] for r in map(json.loads, open(sys.argv[1])) if "allreduce_per_step" in r]
want = int(sys.argv[2])
ok = want > 1 and per and all(p == want + 1 for p in per)
print(("ok" if ok else "FAIL") + ": NCCL --accum 3: %s all-reduces per step for %d buckets and the stop vote" % (per, want))
sys.exit(0 if ok else 1)
PY
else
  echo "FAIL: --accum 3 run"; show "$dir/acc.log"; fail=1
fi

if run 2 half --device cuda --precision bf16 --grad-reduce-dtype bf16 --steps 12 --lr 3e-3; then
  python3 - "$dir/half.jsonl" <<'PY' || fail=1
import json, math, sys
l = [r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
ok = len(l) == 12 and all(math.isfinite(x) for x in l) and l[-1] < l[0]
print(("ok" if ok else "FAIL") + ": bf16 over NCCL with bf16 gradient reduction: loss %s" % ["%.4f" % x for x in l])
sys.exit(0 if ok else 1)
PY
else
  echo "FAIL: bf16 run"; show "$dir/half.log"; fail=1
fi
exit $fail
