#!/bin/sh
# Training end to end on the CUDA backend (SKIP, exit 77, without a GPU):
#  - each precision (fp32, bf16, fp16) trains 12 steps of a small model on the
#    built-in data twice; the exported weights are bit-identical (the CUDA
#    backend is deterministic by default) and the loss falls;
#  - the step loop makes no backend allocation after the first step (the
#    loop_allocs metric, from the backend's allocation counters);
#  - with --tf32 off the fp32 GPU run follows the CPU run: final train loss
#    within 1% (two summation orders over 12 optimizer steps);
#  - flash attention is the default on the GPU and the summary says how long
#    the host took to issue a step against the step's time (launch gaps);
#    --recompute on and --attention matrix end within 1% of the default's
#    bf16 final loss;
#  - the binding map is printed at start-up;
#  - --zero 1 on one GPU gives the weights of --zero 0 (fp32, bf16, LAMB);
#  - two ranks on --device cuda either train (NCCL, one GPU each, or a
#    CUDA-aware MPI) or stop at start-up with the reason (one GPU for both
#    ranks, or nothing that reduces GPU memory); tests/test_gpu_nccl.sh
#    checks the NCCL runs themselves.
. "${top_builddir:-.}/tests/env.sh"
set -u
if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
  echo "SKIP: no GPU (nvidia-smi lists none)"; exit 77
fi
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
JOB="--peak-gflops 10 --steps 12 --n-layer 2 --n-head 4 --n-embd 128 --seq-len 128
     --tokens-per-batch 2048 --lr 3e-3 --warmup 2 --log-every 4 --eval-every 0 --eval-tokens 2048"

final_loss() { grep '"final":true' "$1" | sed 's/.*"train_loss":\([0-9.e+-]*\).*/\1/'; }

for p in fp32 bf16 fp16; do
  for run in 1 2; do
    # shellcheck disable=SC2086
    if ! "$DDPTRAIN" --device cuda --precision $p $JOB --metrics "$dir/$p.$run.jsonl" \
         --export "$dir/$p.$run.safetensors" > "$dir/$p.$run.out" 2>&1; then
      echo "FAIL: $p run $run"; sed 's/^/  | /' "$dir/$p.$run.out"; fail=1; continue 2
    fi
  done
  if cmp -s "$dir/$p.1.safetensors" "$dir/$p.2.safetensors"; then
    echo "ok: $p: two runs export bit-identical weights"
  else
    echo "FAIL: $p: two runs differ"; fail=1
  fi
  first=$(grep -m 1 '"record":"step"' "$dir/$p.1.jsonl" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
  last=$(grep -v '"final"' "$dir/$p.1.jsonl" | tail -n 1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
  if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }'; then
    echo "ok: $p: loss fell from $first to $last"
  else
    echo "FAIL: $p: loss went from $first to $last"; fail=1
  fi
  if tail -n 1 "$dir/$p.1.jsonl" | grep -q '"loop_allocs":0[,}]'; then
    echo "ok: $p: no allocations in the step loop"
  else
    echo "FAIL: $p: loop_allocs"; tail -n 1 "$dir/$p.1.jsonl"; fail=1
  fi
done
grep -q "summary: the host issued each step's forward and backward" "$dir/bf16.1.out" &&
  grep -q "flash attention;" "$dir/bf16.1.out" &&
  echo "ok: flash attention by default; host issue time reported ($(sed -n 's/.*per step: //p' "$dir/bf16.1.out"))" ||
  { echo "FAIL: no flash attention or no host issue line"; sed 's/^/  | /' "$dir/bf16.1.out"; fail=1; }
# --recompute and the matrix attention change memory and kernels, not the
# model: bf16 final losses within 1% of the default run's.
for v in "--recompute on" "--attention matrix"; do
  # shellcheck disable=SC2086
  if "$DDPTRAIN" --device cuda --precision bf16 $JOB $v --metrics "$dir/v.jsonl" > "$dir/v.out" 2>&1 &&
     awk -v a="$(final_loss "$dir/v.jsonl")" -v b="$(final_loss "$dir/bf16.1.jsonl")" \
       'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= 0.01 * b) }'; then
    echo "ok: bf16 $v: final loss $(final_loss "$dir/v.jsonl") vs $(final_loss "$dir/bf16.1.jsonl")"
  else
    echo "FAIL: bf16 $v"; tail -n 5 "$dir/v.out" | sed 's/^/  | /'; fail=1
  fi
done
grep -q "bind" "$dir/fp32.1.out" && echo "ok: binding map printed" ||
  { echo "FAIL: no binding map"; sed 's/^/  | /' "$dir/fp32.1.out"; fail=1; }

# shellcheck disable=SC2086
if "$DDPTRAIN" --device cuda --tf32 off $JOB --metrics "$dir/g.jsonl" > "$dir/g.out" 2>&1 &&
   "$DDPTRAIN" --device cpu $JOB --metrics "$dir/c.jsonl" > "$dir/c.out" 2>&1; then
  g=$(final_loss "$dir/g.jsonl"); c=$(final_loss "$dir/c.jsonl")
  if awk -v g="$g" -v c="$c" 'BEGIN { d = g - c; if (d < 0) d = -d; exit !(c > 0 && d <= 0.01 * c) }'; then
    echo "ok: fp32 GPU (TF32 off) final loss $g, CPU $c"
  else
    echo "FAIL: fp32 GPU final loss '$g' vs CPU '$c' (more than 1% apart)"; fail=1
  fi
else
  echo "FAIL: GPU/CPU comparison runs"; tail -n 5 "$dir/g.out" "$dir/c.out"; fail=1
fi

# --zero 1 on one GPU (a "self" gradient communicator made for the device:
# its reduce-scatter and all-gathers are device copies): per precision, the
# weights of the --zero 0 run above, within the rounding of the gradient
# norm (summed per bucket here, in one pass there) and loop_allocs 0; LAMB
# (three parts, per-piece norms) against --zero 0 LAMB.
COMPARE="$top_builddir/tests/st_compare"
for p in fp32 bf16 lamb; do
  res=""
  ref="$dir/$p.1.safetensors" extra="--precision $p"
  if [ $p = lamb ]; then
    extra="--optimizer lamb --precision bf16"; ref="$dir/lamb0.safetensors"
    # shellcheck disable=SC2086
    "$DDPTRAIN" --device cuda $extra $JOB --export "$ref" > "$dir/lamb0.out" 2>&1 ||
      { echo "FAIL: lamb --zero 0"; sed 's/^/  | /' "$dir/lamb0.out"; fail=1; continue; }
  fi
  # shellcheck disable=SC2086
  if "$DDPTRAIN" --device cuda $extra --zero 1 $JOB --metrics "$dir/z$p.jsonl" \
       --export "$dir/z$p.safetensors" > "$dir/z$p.out" 2>&1 &&
     res=$("$COMPARE" "$dir/z$p.safetensors" "$ref" 1e-5) &&
     tail -n 1 "$dir/z$p.jsonl" | grep -q '"loop_allocs":0[,}]'; then
    echo "ok: --zero 1 $p on one GPU equals --zero 0: $res"
  else
    echo "FAIL: --zero 1 $p on one GPU: ${res:-did not train}"; sed 's/^/  | /' "$dir/z$p.out" | tail -n 8
    fail=1
  fi
done

# Two ranks on --device cuda: a run (NCCL with a GPU each, or a CUDA-aware
# MPI), or a clear refusal at start-up on every rank.
if [ -n "$MPIRUN" ]; then
  # shellcheck disable=SC2086
  if "$MPIRUN" -np 2 "$DDPTRAIN" --device cuda $JOB --steps 2 > "$dir/mr.out" 2>&1; then
    echo "ok: two GPU ranks ran ($(sed -n 's/.*data parallel: 2 ranks, \([a-z]*\) communicator.*/\1/p' "$dir/mr.out"))"
  elif grep -q "rank [01]: --device cuda on 2 ranks: .*\(would share cuda:0\|this build has no NCCL\)" "$dir/mr.out"; then
    echo "ok: two GPU ranks that cannot reduce GPU gradients are refused with the reason"
  else
    echo "FAIL: two GPU ranks"; sed 's/^/  | /' "$dir/mr.out"; fail=1
  fi
fi
exit $fail
