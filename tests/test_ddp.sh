#!/bin/sh
# Data parallelism end to end (mpirun, oversubscribed on small machines):
#  - equivalence: N ranks x K micro-steps give the weights of one process on
#    the union of the same micro-batches (accum N*K): world sizes 1-4, accum
#    1 and 3, one bucket per tensor group (tiny --bucket-mb) and one bucket
#    for everything (huge), on variable-length batches;
#  - the same loss curve for -np 2 as for -np 1 with twice the micro-batches;
#  - ranks started with different flags or data stop, naming what differs;
#  - --check-replicas catches a deliberately perturbed replica.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
# A small model; 5 optimizer steps; every flag that shapes the math fixed.
MODEL="--threads 1 --peak-gflops 10 --n-layer 2 --n-head 2 --n-embd 32 --seq-len 64 \
--tokens-per-batch 512 --steps 5 --warmup 2 --log-every 1 --eval-every 0 --eval-tokens 64"
COMPARE="$top_builddir/tests/st_compare"
run() { # run NP OUT ARGS...: trains and exports to OUT
  np=$1; out=$2; shift 2
  timeout 300 "$MPIRUN" -np "$np" "$DDPTRAIN" $MODEL --export "$out" "$@" > "$out.log" 2>&1
}

# Equivalence matrix. The reference for world W x accum K is one process
# with accum W*K: the sampler deals the same micro-batches to each step.
# The matrix uses SGD with momentum, whose update is linear in the gradient,
# so the weights differ exactly as much as the reduced gradients do (sums in
# another order: ~1e-7). Adam would amplify rounding noise into lr-sized
# steps wherever the true gradient is zero (the attention key bias has an
# exactly zero gradient: softmax ignores a constant added to all keys), so
# an Adam comparison measures that noise rather than the reducer; AdamW is
# covered by the loss-curve comparison below.
SGD="--optimizer sgd --lr 0.05 --min-lr 0.005"
for prod in 1 2 3 4 6 9 12; do
  run 1 "$dir/ref$prod.st" $SGD --accum $prod || { echo "FAIL: reference accum $prod"; sed 's/^/  | /' "$dir/ref$prod.st.log"; fail=1; }
done
for w in 1 2 3 4; do
  for k in 1 3; do
    for mb in 0.001 1000; do
      name="np$w-accum$k-bucket$mb"
      if ! run $w "$dir/$name.st" $SGD --accum $k --bucket-mb $mb --first-bucket-mb $mb; then
        echo "FAIL: $name did not train"; sed 's/^/  | /' "$dir/$name.st.log"; fail=1; continue
      fi
      if res=$("$COMPARE" "$dir/$name.st" "$dir/ref$((w * k)).st" 1e-5); then
        echo "ok: $name equals one process with accum $((w * k)): $res"
      else
        echo "FAIL: $name differs from one process with accum $((w * k)): $res"; fail=1
      fi
    done
  done
done

# Loss curves: -np 2 against -np 1 --accum 2, from the metrics files.
run 2 "$dir/curve2.st" --metrics "$dir/curve2.jsonl" &&
run 1 "$dir/curve1.st" --accum 2 --metrics "$dir/curve1.jsonl"
python3 - "$dir/curve1.jsonl" "$dir/curve2.jsonl" <<'PY' || fail=1
import json, sys
def losses(path):
    return [r["loss"] for r in map(json.loads, open(path)) if "loss" in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print(("ok" if worst <= 1e-5 else "FAIL") + ": -np 2 loss curve vs -np 1 --accum 2: %d steps, worst relative difference %.2g" % (len(a), worst))
sys.exit(0 if worst <= 1e-5 else 1)
PY

# No communication on the inner micro-steps: with --accum 3 the all-reduces
# per step are the bucket count plus the one-int stop vote (preemption), not
# three times the buckets.
run 2 "$dir/acc.st" --accum 3 --bucket-mb 0.001 --first-bucket-mb 0.001 --metrics "$dir/acc.jsonl"
buckets=$(sed -n 's/.* \([0-9]*\) gradient buckets.*/\1/p' "$dir/acc.st.log")
python3 - "$dir/acc.jsonl" "${buckets:-0}" <<'PY' || fail=1
import json, sys
per = [r["allreduce_per_step"] for r in map(json.loads, open(sys.argv[1])) if "allreduce_per_step" in r]
want = int(sys.argv[2])
ok = want > 1 and per and all(p == want + 1 for p in per)
print(("ok" if ok else "FAIL") + ": --accum 3 issues %s all-reduces per step for %d buckets and the stop vote" % (per, want))
sys.exit(0 if ok else 1)
PY

# Mismatched flags (MPMD: two programs with different --lr) and data.
timeout 60 "$MPIRUN" -np 1 "$DDPTRAIN" $MODEL --lr 1e-3 : -np 1 "$DDPTRAIN" $MODEL --lr 2e-3 > "$dir/mm.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "ranks disagree on flag --lr" "$dir/mm.log"; then
  echo "ok: different --lr on two ranks stops both (exit $rc)"
else
  echo "FAIL: flag mismatch (exit $rc)"; sed 's/^/  | /' "$dir/mm.log"; fail=1
fi
# The same --data (a flag that differed would be refused first) names other
# files on each rank: each runs in a directory of its own.
mkdir "$dir/a" "$dir/b"
printf 'hello world\n' | "$top_builddir/ddpprep" -o "$dir/a/d" > /dev/null 2>&1
printf 'another text\n' | "$top_builddir/ddpprep" -o "$dir/b/d" > /dev/null 2>&1
timeout 60 "$MPIRUN" -np 1 -wdir "$dir/a" "$DDPTRAIN" $MODEL --data "d_train_*.bin" : \
  -np 1 -wdir "$dir/b" "$DDPTRAIN" $MODEL --data "d_train_*.bin" > "$dir/md.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "ranks disagree on the training data" "$dir/md.log"; then
  echo "ok: different data on two ranks stops both (exit $rc)"
else
  echo "FAIL: data mismatch (exit $rc)"; sed 's/^/  | /' "$dir/md.log"; fail=1
fi

# Replica check against a perturbed rank.
DDPTRAIN_FAULT_PERTURB_RANK=1 timeout 60 "$MPIRUN" -x DDPTRAIN_FAULT_PERTURB_RANK -np 2 \
  "$DDPTRAIN" $MODEL --check-replicas 2 > "$dir/rep.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "replicas diverged by step 2" "$dir/rep.log"; then
  echo "ok: --check-replicas catches a perturbed replica (exit $rc)"
else
  echo "FAIL: replica check (exit $rc)"; sed 's/^/  | /' "$dir/rep.log"; fail=1
fi
exit $fail
