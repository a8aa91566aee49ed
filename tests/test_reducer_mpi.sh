#!/bin/sh
# The reducer on 2 ranks (needs mpirun):
#  - tests/check_reducer under mpirun -np 2: the fused epilogue of a half
#    reduce dtype over MPI against the old path (widen, then a separate norm
#    pass), with an inf on one rank reaching every rank's norm; the ranks
#    agree on the result;
#  - the loss scaler's overflow skip of tests/test_amp.sh with
#    --grad-reduce-dtype fp16 and bf16: an inf injected into rank 1's
#    gradient at step 3 is skipped by both ranks and by no other step, the
#    scale halves and grows back after --loss-scale-window clean steps, the
#    replicas agree after every step, and the weights after the skipped
#    step are bit-identical to those of a run that stopped after step 2.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
export CK_FORK=no # nothing may fork after MPI_Init
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
COMPARE="$top_builddir/tests/st_compare"
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
show() { sed 's/^/  | /' "$1"; }

timeout 120 "$MPIRUN" -np 2 "$top_builddir/tests/check_reducer" > "$dir/unit.log" 2>&1
rc=$?
passed=$(grep -c '^100%: Checks: [0-9]*, Failures: 0, Errors: 0' "$dir/unit.log")
if [ $rc -eq 0 ] && [ "$passed" -eq 2 ]; then
  ok "check_reducer under mpirun -np 2"
else
  bad "check_reducer under mpirun -np 2 (exit $rc; $passed of 2 ranks passed all)"; show "$dir/unit.log"
fi

# test_amp.sh's multi-rank overflow case, with the all-reduce in a half type.
M4="--threads 1 --peak-gflops 10 --n-layer 2 --n-head 2 --n-embd 32 --seq-len 64 \
--tokens-per-batch 512 --log-every 1 --eval-every 0 --eval-tokens 64 --precision fp16 \
--lr 1e-3 --min-lr 1e-3 --warmup 0 --loss-scale-window 4"
for r in fp16 bf16; do
  # shellcheck disable=SC2086
  DDPTRAIN_FAULT_OVERFLOW_RANK=1 DDPTRAIN_FAULT_OVERFLOW_STEP=3 DDPTRAIN_LOG_ALL_RANKS=1 \
    timeout 300 "$MPIRUN" -x DDPTRAIN_FAULT_OVERFLOW_RANK -x DDPTRAIN_FAULT_OVERFLOW_STEP \
    -x DDPTRAIN_LOG_ALL_RANKS -np 2 "$DDPTRAIN" $M4 --grad-reduce-dtype $r --steps 8 \
    --check-replicas 1 --metrics "$dir/of$r.jsonl" > "$dir/of$r.log" 2>&1 ||
    { bad "$r: overflow run"; show "$dir/of$r.log"; continue; }
  n0=$(grep -c '^\[rank 0/2\] step 3: inf/NaN gradients at loss scale 65536: step skipped, scale now 32768' "$dir/of$r.log")
  n1=$(grep -c '^\[rank 1/2\] step 3: inf/NaN gradients at loss scale 65536: step skipped, scale now 32768' "$dir/of$r.log")
  nall=$(grep -c 'step skipped' "$dir/of$r.log")
  if [ "$n0" -eq 1 ] && [ "$n1" -eq 1 ] && [ "$nall" -eq 2 ] &&
     grep -q "gradients all-reduced in $r" "$dir/of$r.log"; then
    ok "--grad-reduce-dtype $r: an overflow on rank 1 at step 3 is skipped by both ranks, and no other step is; replicas agree after every step"
  else
    bad "--grad-reduce-dtype $r: overflow skip on all ranks (rank 0: $n0, rank 1: $n1, all: $nall)"; show "$dir/of$r.log"
  fi
  python3 - "$dir/of$r.jsonl" "$r" <<'PY' || fail=1
import json, sys
recs = {r["step"]: r for r in map(json.loads, open(sys.argv[1])) if "step" in r}
got = [(s, recs[s]["loss_scale"], recs[s]["skipped_steps"]) for s in range(1, 9)]
want = [(1, 65536, 0), (2, 65536, 0), (3, 32768, 1), (4, 32768, 1), (5, 32768, 1), (6, 32768, 1),
        (7, 65536, 1), (8, 65536, 1)]
good = got == want
print("%s: --grad-reduce-dtype %s: scale and skips per step %s%s" % ("ok" if good else "FAIL", sys.argv[2], got, "" if good else " want %s" % want))
sys.exit(0 if good else 1)
PY
  # shellcheck disable=SC2086
  DDPTRAIN_FAULT_OVERFLOW_RANK=1 DDPTRAIN_FAULT_OVERFLOW_STEP=3 timeout 300 "$MPIRUN" \
    -x DDPTRAIN_FAULT_OVERFLOW_RANK -x DDPTRAIN_FAULT_OVERFLOW_STEP -np 2 "$DDPTRAIN" $M4 \
    --grad-reduce-dtype $r --steps 3 --export "$dir/skip3$r.st" > "$dir/skip3.log" 2>&1 ||
    { bad "$r: 3-step overflow run"; show "$dir/skip3.log"; continue; }
  # shellcheck disable=SC2086
  timeout 300 "$MPIRUN" -np 2 "$DDPTRAIN" $M4 --grad-reduce-dtype $r --steps 2 \
    --export "$dir/two$r.st" > "$dir/two.log" 2>&1 || { bad "$r: 2-step run"; show "$dir/two.log"; continue; }
  if res=$("$COMPARE" "$dir/skip3$r.st" "$dir/two$r.st" 0) && cmp -s "$dir/skip3$r.st" "$dir/two$r.st"; then
    ok "--grad-reduce-dtype $r: weights after the skipped step 3 are bit-identical to those after step 2 ($res)"
  else
    bad "--grad-reduce-dtype $r: the skipped step changed the weights: $res"
  fi
done
exit $fail
