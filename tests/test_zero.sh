#!/bin/sh
# --zero 1 (sharded master weights and optimizer state) end to end, under
# mpirun (oversubscribed on small machines):
#  - the same weights as --zero 0 on 1-4 ranks: SGD and AdamW, one bucket per
#    tensor group and one for everything, bf16 and fp16 compute, a bf16
#    reduction, accumulation (every case here is bit-identical: the sums are
#    the same, and the norm rounds to the same fp32);
#  - LAMB on 1-4 ranks with small buckets (tensors cut across ranks and
#    within a rank), in bf16 and fp16: its trust ratios take whole-tensor norms
#    across the shards, so it matches --zero 0 to within the order of the
#    norms' double sums (1e-5 of each tensor; a ratio per piece instead is
#    off by 5e-3 at this learning rate);
#  - checkpoints: the file a sharded run writes equals the unsharded one, and
#    it resumes on another world size with or without --zero, 2 -> 3 -> 2;
#  - a NaN gradient stops every rank, naming the step and the tensor;
#  - the start-up line shows each rank's share, and bad combinations exit 2
#    with one line.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
MODEL="--threads 1 --peak-gflops 10 --n-layer 2 --n-head 2 --n-embd 32 --seq-len 64 \
--tokens-per-batch 512 --steps 5 --warmup 2 --log-every 1 --eval-every 0 --eval-tokens 64"
COMPARE="$top_builddir/tests/st_compare"
SGD="--optimizer sgd --lr 0.05 --min-lr 0.005"
run() { # run NP OUT ARGS...: trains and exports to OUT
  np=$1; out=$2; shift 2
  timeout 300 "$MPIRUN" --oversubscribe -np "$np" "$DDPTRAIN" $MODEL --export "$out" "$@" \
    > "$out.log" 2>&1
}
same() { # same NAME A B TOL
  if res=$("$COMPARE" "$2" "$3" "$4"); then echo "ok: $1: $res"; else echo "FAIL: $1: $res"; fail=1; fi
}
tol=1e-6
pair() { # pair NAME NP ARGS...: --zero 1 against --zero 0, same everything else
  # (to within $tol)
  name=$1; np=$2; shift 2
  for z in 0 1; do
    if ! run "$np" "$dir/$name-z$z.st" "$@" --zero $z; then
      echo "FAIL: $name --zero $z did not train"; sed 's/^/  | /' "$dir/$name-z$z.st.log"
      fail=1; return
    fi
  done
  same "$name: --zero 1 equals --zero 0" "$dir/$name-z1.st" "$dir/$name-z0.st" "$tol"
}

for w in 1 2 3 4; do
  for mb in 0.001 1000; do pair "np$w-sgd-bucket$mb" $w $SGD --bucket-mb $mb --first-bucket-mb $mb; done
  pair "np$w-adamw" $w
done
pair np3-bf16 3 $SGD --precision bf16
pair np3-fp16 3 $SGD --precision fp16
pair np2-reduce-bf16 2 $SGD --grad-reduce-dtype bf16
pair np3-accum3 3 --accum 3
# LAMB: a learning rate at which the trust ratio matters (each step moves a
# tensor by about lr of its norm); buckets of 1 KB cut tensors everywhere
LAMB="--optimizer lamb --lr 0.02 --min-lr 0.002 --bucket-mb 0.001 --first-bucket-mb 0.001"
tol=1e-5
for w in 1 2 3 4; do pair "np$w-lamb" $w $LAMB; done
pair np3-lamb-bf16 3 $LAMB --precision bf16
pair np2-lamb-fp16 2 $LAMB --precision fp16 # the loss scaler, its skips included
tol=1e-6

# each rank's share of the state, in the start-up line
if grep -q "\-\-zero 1: this rank updates [0-9]* of 35744 parameters" "$dir/np4-adamw-z1.st.log"; then
  share=$(sed -n 's/.*this rank updates \([0-9]*\) of 35744.*/\1/p' "$dir/np4-adamw-z1.st.log")
  if [ "$share" -ge 8936 ] && [ "$share" -le 9200 ]; then echo "ok: 4 ranks: rank 0 updates $share of 35744"
  else echo "FAIL: 4 ranks: rank 0 updates $share of 35744 (about a quarter expected)"; fail=1; fi
else
  echo "FAIL: no --zero 1 start-up line"; sed 's/^/  | /' "$dir/np4-adamw-z1.st.log"; fail=1
fi

# Checkpoints: 2 ranks to step 3, sharded and not: the same file.
CK="$MODEL --steps 8"
ck() { # ck NP LOG ARGS...
  np=$1; log=$2; shift 2
  timeout 300 "$MPIRUN" --oversubscribe -np "$np" "$DDPTRAIN" $CK "$@" > "$log" 2>&1 ||
    { echo "FAIL: $log"; sed 's/^/  | /' "$log"; fail=1; }
}
for z in 0 1; do ck 2 "$dir/a$z.log" --zero $z --save "$dir/c$z" --stop-at 3; done
same "checkpoint of 2 ranks, --zero 1 equals --zero 0" "$dir/c1/ckpt_00000003.safetensors" \
  "$dir/c0/ckpt_00000003.safetensors" 0
# ... resumed on 3 ranks with and without --zero, to step 6: the same file
for z in 0 1; do
  cp -r "$dir/c1" "$dir/r$z"
  ck 3 "$dir/b$z.log" --zero $z --resume "$dir/r$z" --save "$dir/r$z" --stop-at 6
done
same "2 sharded -> 3 ranks, --zero 1 equals --zero 0" "$dir/r1/ckpt_00000006.safetensors" \
  "$dir/r0/ckpt_00000006.safetensors" 0
# ... and back to 2 ranks, to the end
for z in 0 1; do ck 2 "$dir/e$z.log" --zero $z --resume "$dir/r$z" --export "$dir/back$z.st"; done
same "3 -> 2 ranks, --zero 1 equals --zero 0" "$dir/back1.st" "$dir/back0.st" 0
# a resume across --zero settings is expected, not worth a warning
if grep -q "WARN.*--zero" "$dir/b1.log" "$dir/b0.log"; then
  echo "FAIL: a resume warned about --zero"; fail=1
else echo "ok: resuming across --zero settings is silent"; fi

# A NaN gradient at step 3: every rank sees the same non-finite norm (its
# partials are all-gathered), stops before the optimizer, and names the
# tensor; checkpoints of steps 1 and 2 only.
DDPTRAIN_FAULT_NAN_STEP=3 timeout 120 "$MPIRUN" --oversubscribe -x DDPTRAIN_FAULT_NAN_STEP -np 2 \
  "$DDPTRAIN" $MODEL --steps 10 --zero 1 --save "$dir/nan" --save-every 1 > "$dir/nan.log" 2>&1
rc=$?
named=$(grep -c "step 3: the gradient is not finite .* transformer.h.0.mlp.c_fc.weight" "$dir/nan.log")
if [ $rc -ne 0 ] && [ "$named" -eq 2 ] &&
  [ "$(ls "$dir/nan" | tr '\n' ' ')" = "ckpt_00000001.safetensors ckpt_00000002.safetensors " ]; then
  echo "ok: a NaN gradient under --zero 1 stops both ranks naming step 3 and the tensor"
else
  echo "FAIL: NaN gradient under --zero 1 (exit $rc, named by $named ranks, $(ls "$dir/nan" | tr '\n' ' '))"
  sed 's/^/  | /' "$dir/nan.log"; fail=1
fi

# Bad input: one line, exit 2, before any rank trains.
bad() { # bad PATTERN ARGS...
  pat=$1; shift
  "$DDPTRAIN" $MODEL "$@" > "$dir/bad.log" 2>&1; rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$pat" "$dir/bad.log" && [ "$(wc -l < "$dir/bad.log")" -le 2 ]; then
    echo "ok: $* -> exit 2"
  else
    echo "FAIL: $* -> exit $rc, wanted 2 and '$pat'"; sed 's/^/  | /' "$dir/bad.log"; fail=1
  fi
}
bad "needs fixed bucket sizes" --zero 1 --bucket-mb auto
bad "needs fixed bucket sizes" --zero 1 --first-bucket-mb auto
bad "zero" --zero 2
bad "zero" --zero x
exit $fail
