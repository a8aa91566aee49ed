#!/bin/sh
# Mixed precision end to end (CPU backend; the multi-rank parts need mpirun):
#  - bf16 and fp16 train to the fp32 validation loss within a stated
#    tolerance on the built-in data;
#  - an overflow injected into one rank's gradient at step 3 skips the step
#    on every rank (replicas stay identical), leaves the weights bit for bit
#    as they were, halves the scale, and the scale grows back exactly after
#    --loss-scale-window clean steps;
#  - data-parallel equivalence (-np 2 against -np 1 --accum 2) in bf16/fp16;
#  - an fp16 run with a too-large learning rate backs off and recovers, and
#    no NaN reaches the weights;
#  - bad precision flags are rejected.
. "${top_builddir:-.}/tests/env.sh"
set -u
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
COMPARE="$top_builddir/tests/st_compare"
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
show() { sed 's/^/  | /' "$1"; }

# ---- 1. final loss against fp32 ------------------------------------------
# 60 steps of the test_train.sh model. Tolerance: |val(half) - val(fp32)| <=
# 3% of val(fp32). Derivation: half precision perturbs the trajectory the
# way any change of the run does, so its effect on the final loss must stay
# within the noise floor of the final loss itself, the seed-to-seed spread
# of fp32 runs: val losses for seeds 1-4 were 3.032, 3.109, 3.150, 2.985,
# a range of 0.165; half of it, 0.083, is 2.7% of the mean 3.07, rounded up
# to 3%. Measured (seeds 1-4): bf16 within 0.026 (0.9%), fp16 within 0.034
# (1.1%).
M1="--threads 1 --peak-gflops 10 --steps 60 --n-layer 1 --n-head 2 --n-embd 64 --seq-len 64 \
--tokens-per-batch 1024 --lr 1e-2 --warmup 5 --log-every 10 --eval-every 0 --eval-tokens 2048"
for p in fp32 bf16 fp16; do
  # shellcheck disable=SC2086
  if ! "$DDPTRAIN" $M1 --precision $p --metrics "$dir/$p.jsonl" > "$dir/$p.log" 2>&1; then
    bad "$p training run"; show "$dir/$p.log"
  fi
done
python3 - "$dir" <<'PY' || fail=1
import json, sys
def val(p):
    recs = [json.loads(l) for l in open("%s/%s.jsonl" % (sys.argv[1], p))]
    return [r for r in recs if r.get("final")][0]["val_loss"]
ref, rc = val("fp32"), 0
for p in ("bf16", "fp16"):
    v = val(p)
    rel = abs(v - ref) / ref
    good = rel <= 0.03
    print("%s: %s val loss %.4f vs fp32 %.4f: %.2f%% (tolerance 3%%)" % ("ok" if good else "FAIL", p, v, ref, 100 * rel))
    rc |= not good
sys.exit(rc)
PY
if grep -q '"loss_scale":65536,"skipped_steps":0' "$dir/fp16.jsonl" &&
   grep -q '"loss_scale":1,"skipped_steps":0' "$dir/bf16.jsonl"; then
  ok "metrics carry loss_scale and skipped_steps (fp16 scaled from 2^16, bf16 unscaled)"
else
  bad "loss_scale / skipped_steps metrics"; show "$dir/fp16.jsonl"
fi
grep -q "loss scale 65536 (0 skipped)" "$dir/fp16.log" || { bad "fp16 progress line lacks the loss scale"; show "$dir/fp16.log"; }

# ---- 2. bad flags ----------------------------------------------------------
"$DDPTRAIN" --precision fp8 > "$dir/out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--precision" "$dir/out"; then ok "--precision fp8 is rejected (exit 2)"; else bad "--precision fp8 (exit $rc)"; show "$dir/out"; fi
"$DDPTRAIN" --grad-reduce-dtype int32 > "$dir/out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--grad-reduce-dtype" "$dir/out"; then ok "--grad-reduce-dtype int32 is rejected (exit 2)"; else bad "--grad-reduce-dtype int32 (exit $rc)"; show "$dir/out"; fi

"$DDPTRAIN" --loss-scaling sometimes > "$dir/out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--loss-scaling" "$dir/out"; then ok "--loss-scaling sometimes is rejected (exit 2)"; else bad "--loss-scaling sometimes (exit $rc)"; show "$dir/out"; fi
# A floor above the initial scale is a configuration error; one backoff
# from a floor equal to the initial scale stops the run (exit 1) with the
# scaler's message, and no export is written.
# shellcheck disable=SC2086
"$DDPTRAIN" $M1 --steps 3 --precision fp16 --loss-scale-min 1e6 > "$dir/out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--loss-scale-min 1e+06 exceeds --loss-scale-init 65536" "$dir/out"; then
  ok "--loss-scale-min above --loss-scale-init is rejected (exit 2)"
else
  bad "--loss-scale-min above the initial scale (exit $rc)"; show "$dir/out"
fi
# shellcheck disable=SC2086
DDPTRAIN_FAULT_OVERFLOW_RANK=0 DDPTRAIN_FAULT_OVERFLOW_STEP=2 "$DDPTRAIN" $M1 --steps 3 \
  --precision fp16 --loss-scale-min 65536 --export "$dir/floor.st" > "$dir/out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "fp16 loss scale fell to 32768, below --loss-scale-min 65536" "$dir/out" &&
   [ ! -e "$dir/floor.st" ]; then
  ok "a backoff below --loss-scale-min stops the run (exit 1, no export)"
else
  bad "loss scale floor (exit $rc)"; show "$dir/out"
fi

# ---- 3. too-large learning rate in fp16 -----------------------------------
# lr 0.3 is 30x what this model trains well with (the loss climbs above 10
# before it comes back), and the scale starts at 2^24 with a window of 5, so
# the run meets overflow within a few steps. Required: at least one backoff
# (the scale halves exactly when skipped_steps grows), a growth after a
# backoff (recovery), the last loss below the first, and every exported
# weight finite.
M3="--threads 1 --peak-gflops 10 --steps 40 --n-layer 1 --n-head 2 --n-embd 64 --seq-len 64 \
--tokens-per-batch 1024 --warmup 5 --log-every 1 --eval-every 0 --eval-tokens 2048 --precision fp16 \
--lr 0.3 --grad-clip 0 --loss-scale-init 16777216 --loss-scale-window 5"
# shellcheck disable=SC2086
if "$DDPTRAIN" $M3 --metrics "$dir/lr.jsonl" --export "$dir/lr.st" > "$dir/lr.log" 2>&1; then
  python3 - "$dir/lr.jsonl" "$dir/lr.st" <<'PY' || fail=1
import json, math, struct, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
backoffs = growths_after = 0
consistent = True
for a, b in zip(recs, recs[1:]):
    skipped = b["skipped_steps"] - a["skipped_steps"]
    if skipped:
        backoffs += 1
        consistent &= b["loss_scale"] == a["loss_scale"] * 0.5 ** skipped
    elif b["loss_scale"] > a["loss_scale"]:
        growths_after += backoffs > 0
        consistent &= b["loss_scale"] == 2 * a["loss_scale"]
    else:
        consistent &= b["loss_scale"] == a["loss_scale"]
raw = open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
data = raw[8 + n:]
vals = struct.unpack("<%df" % (len(data) // 4), data)
finite = all(math.isfinite(v) for v in vals)
first, last = recs[0]["loss"], recs[-1]["loss"]
good = backoffs > 0 and growths_after > 0 and consistent and finite and last < first
print("%s: fp16 lr 0.3: %d backoffs, %d growths after one, scale %g..%g, %d skipped of %d, loss %.2f -> max %.2f -> %.2f, %d weights all finite: %s" % (
    "ok" if good else "FAIL", backoffs, growths_after, min(r["loss_scale"] for r in recs),
    max(r["loss_scale"] for r in recs), recs[-1]["skipped_steps"], len(recs), first,
    max(r["loss"] for r in recs), last, len(vals), finite))
sys.exit(0 if good else 1)
PY
else
  bad "fp16 run with lr 0.3"; show "$dir/lr.log"
fi

# ---- 4. multi-rank: injected overflow and equivalence ----------------------
if [ -z "$MPIRUN" ]; then
  echo "note: no mpirun: the multi-rank overflow and equivalence checks did not run"
  exit $fail
fi
# Constant lr (no warmup, min-lr = lr), so a run that stops after step 2 and
# one that skips step 3 must hold the same weights.
M4="--threads 1 --peak-gflops 10 --n-layer 2 --n-head 2 --n-embd 32 --seq-len 64 \
--tokens-per-batch 512 --log-every 1 --eval-every 0 --eval-tokens 64 --precision fp16 \
--lr 1e-3 --min-lr 1e-3 --warmup 0 --loss-scale-window 4"
# shellcheck disable=SC2086
DDPTRAIN_FAULT_OVERFLOW_RANK=1 DDPTRAIN_FAULT_OVERFLOW_STEP=3 DDPTRAIN_LOG_ALL_RANKS=1 \
  timeout 300 "$MPIRUN" -x DDPTRAIN_FAULT_OVERFLOW_RANK -x DDPTRAIN_FAULT_OVERFLOW_STEP \
  -x DDPTRAIN_LOG_ALL_RANKS -np 2 "$DDPTRAIN" $M4 --steps 8 --check-replicas 1 \
  --metrics "$dir/of.jsonl" > "$dir/of.log" 2>&1 || { bad "overflow run"; show "$dir/of.log"; }
n0=$(grep -c '^\[rank 0/2\] step 3: inf/NaN gradients at loss scale 65536: step skipped, scale now 32768' "$dir/of.log")
n1=$(grep -c '^\[rank 1/2\] step 3: inf/NaN gradients at loss scale 65536: step skipped, scale now 32768' "$dir/of.log")
nall=$(grep -c 'step skipped' "$dir/of.log")
if [ "$n0" -eq 1 ] && [ "$n1" -eq 1 ] && [ "$nall" -eq 2 ] && grep -q "fault injection: rank 1 overflows" "$dir/of.log"; then
  ok "an overflow on rank 1 at step 3 is skipped by both ranks, and no other step is; replicas agree after every step"
else
  bad "overflow skip on all ranks (rank 0: $n0, rank 1: $n1, all: $nall)"; show "$dir/of.log"
fi
python3 - "$dir/of.jsonl" <<'PY' || fail=1
import json, sys
recs = {r["step"]: r for r in map(json.loads, open(sys.argv[1])) if "step" in r}
got = [(s, recs[s]["loss_scale"], recs[s]["skipped_steps"]) for s in range(1, 9)]
# window 4: halved at 3; steps 4-7 clean, so it doubles at step 7, not before
want = [(1, 65536, 0), (2, 65536, 0), (3, 32768, 1), (4, 32768, 1), (5, 32768, 1), (6, 32768, 1),
        (7, 65536, 1), (8, 65536, 1)]
good = got == want
print("%s: scale and skips per step %s%s" % ("ok" if good else "FAIL", got, "" if good else " want %s" % want))
sys.exit(0 if good else 1)
PY
# shellcheck disable=SC2086
DDPTRAIN_FAULT_OVERFLOW_RANK=1 DDPTRAIN_FAULT_OVERFLOW_STEP=3 timeout 300 "$MPIRUN" \
  -x DDPTRAIN_FAULT_OVERFLOW_RANK -x DDPTRAIN_FAULT_OVERFLOW_STEP -np 2 "$DDPTRAIN" $M4 \
  --steps 3 --export "$dir/skip3.st" > "$dir/skip3.log" 2>&1 || { bad "3-step overflow run"; show "$dir/skip3.log"; }
# shellcheck disable=SC2086
timeout 300 "$MPIRUN" -np 2 "$DDPTRAIN" $M4 --steps 2 --export "$dir/two.st" > "$dir/two.log" 2>&1 ||
  { bad "2-step run"; show "$dir/two.log"; }
if res=$("$COMPARE" "$dir/skip3.st" "$dir/two.st" 0) && cmp -s "$dir/skip3.st" "$dir/two.st"; then
  ok "weights after the skipped step 3 are bit-identical to those after step 2 ($res)"
else
  bad "the skipped step changed the weights: $res"
fi

# Equivalence: -np 2 against -np 1 --accum 2 (same micro-batches per step),
# SGD as in test_ddp.sh. Only the order of the fp32 gradient sums differs
# (~1e-7); through the half compute copy that can flip the rounding of a
# weight by one half ulp at most, so the exported master weights must agree
# far below the storage type's unit roundoff u (bf16 2^-9, fp16 2^-12) after
# 5 small SGD steps: tolerance u/4 = 4.9e-4 (bf16), 6.1e-5 (fp16), 1000x and
# 100x looser than fp32's 1e-5 would be, and 20x below bf16's own error
# against fp32. Measured: 9.5e-8 (bf16), 1.5e-7 (fp16).
M5="--threads 1 --peak-gflops 10 --n-layer 2 --n-head 2 --n-embd 32 --seq-len 64 \
--tokens-per-batch 512 --steps 5 --warmup 2 --log-every 1 --eval-every 0 --eval-tokens 64 \
--optimizer sgd --lr 0.05 --min-lr 0.005"
for pt in bf16:4.9e-4 fp16:6.1e-5; do
  p=${pt%%:*} tol=${pt#*:}
  # shellcheck disable=SC2086
  timeout 300 "$MPIRUN" -np 1 "$DDPTRAIN" $M5 --precision $p --accum 2 --export "$dir/e1$p.st" > "$dir/e1.log" 2>&1 &&
  timeout 300 "$MPIRUN" -np 2 "$DDPTRAIN" $M5 --precision $p --export "$dir/e2$p.st" > "$dir/e2.log" 2>&1 ||
    { bad "$p equivalence runs"; show "$dir/e1.log"; show "$dir/e2.log"; continue; }
  if res=$("$COMPARE" "$dir/e2$p.st" "$dir/e1$p.st" "$tol"); then
    ok "$p: -np 2 equals -np 1 --accum 2: $res"
  else
    bad "$p: -np 2 differs from -np 1 --accum 2: $res"
  fi
done
exit $fail
