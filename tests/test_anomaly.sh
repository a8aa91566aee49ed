#!/bin/sh
# Non-finite values in fp32 training, with NaNs injected by
# DDPTRAIN_FAULT_NAN_STEP / DDPTRAIN_FAULT_NAN_TENSOR:
#  - a NaN in one parameter's gradient at step 3: exit 1, the message names
#    step 3 and that tensor; the checkpoints of steps 1 and 2 exist and are
#    finite, none of step 3 or later is written (1 rank and 2 ranks);
#  - --detect-anomaly names the gradient as backward produces it, and for a
#    NaN weight the first forward activation it spoils (h.0.mlp.c_fc);
#  - --detect-anomaly on a clean run changes nothing (same weights, cmp);
#  - a malformed or unknown fault tensor is a clear error.
. "${top_builddir:-.}/tests/env.sh"
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
ARGS="$TINY --steps 10"
check() { # DESCRIPTION LOG WANT-EXIT EXIT PATTERN...
  desc=$1 log=$2 want=$3 rc=$4
  shift 4
  okay=1
  [ "$rc" -eq "$want" ] || okay=0
  for p in "$@"; do grep -q -- "$p" "$log" || okay=0; done
  if [ $okay -eq 1 ]; then
    echo "ok: $desc"
  else
    echo "FAIL: $desc (exit $rc, expected $want)"
    sed 's/^/  | /' "$log"
    fail=1
  fi
}
finite() { # the checkpoints in DIR hold only finite numbers
  python3 - "$1" << 'PY'
import json, math, os, struct, sys
d = sys.argv[1]
for name in sorted(os.listdir(d)):
    raw = open(os.path.join(d, name), "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    data = raw[8 + n:]
    vals = struct.unpack("<%df" % (len(data) // 4), data)
    if not all(math.isfinite(v) for v in vals):
        sys.exit("%s holds non-finite values" % name)
PY
}

# shellcheck disable=SC2086
DDPTRAIN_FAULT_NAN_STEP=3 "$DDPTRAIN" $ARGS --save "$dir/g1" --save-every 1 > "$dir/g1.log" 2>&1
check "NaN gradient, 1 rank: the step and the tensor are named" "$dir/g1.log" 1 $? \
  "step 3: the gradient is not finite (squared norm nan); first non-finite tensor in backward order: transformer.h.0.mlp.c_fc.weight"
if [ "$(ls "$dir/g1" | tr '\n' ' ')" = "ckpt_00000001.safetensors ckpt_00000002.safetensors " ] && finite "$dir/g1"; then
  echo "ok: checkpoints of steps 1 and 2 only, all finite"
else
  echo "FAIL: checkpoints after a NaN: $(ls "$dir/g1" | tr '\n' ' ')"
  fail=1
fi
if [ -n "$MPIRUN" ]; then
  # shellcheck disable=SC2086
  DDPTRAIN_FAULT_NAN_STEP=3 timeout 120 "$MPIRUN" -x DDPTRAIN_FAULT_NAN_STEP -np 2 "$DDPTRAIN" $ARGS \
    --save "$dir/g2" --save-every 1 > "$dir/g2.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && rc=1
  check "NaN gradient, 2 ranks: the run stops naming step and tensor" "$dir/g2.log" 1 $rc \
    "step 3: the gradient is not finite .* transformer.h.0.mlp.c_fc.weight"
  [ -e "$dir/g2/ckpt_00000003.safetensors" ] && { echo "FAIL: 2 ranks wrote a checkpoint of step 3"; fail=1; }
fi
# shellcheck disable=SC2086
DDPTRAIN_FAULT_NAN_STEP=3 "$DDPTRAIN" $ARGS --detect-anomaly > "$dir/d1.log" 2>&1
check "--detect-anomaly names the gradient as backward produces it" "$dir/d1.log" 1 $? \
  "step 3: non-finite value (nan at element 0 of 1024) in backward: gradient of transformer.h.0.mlp.c_fc.weight"
# shellcheck disable=SC2086
DDPTRAIN_FAULT_NAN_STEP=3 DDPTRAIN_FAULT_NAN_TENSOR=weight:transformer.h.0.mlp.c_fc.weight \
  "$DDPTRAIN" $ARGS --detect-anomaly > "$dir/d2.log" 2>&1
check "--detect-anomaly locates a NaN weight at the first activation it spoils" "$dir/d2.log" 1 $? \
  "step 3: non-finite value .* in forward: h.0.mlp.c_fc output"
# shellcheck disable=SC2086
DDPTRAIN_FAULT_NAN_STEP=3 DDPTRAIN_FAULT_NAN_TENSOR=weight:transformer.h.0.mlp.c_fc.weight \
  "$DDPTRAIN" $ARGS > "$dir/d3.log" 2>&1
check "without --detect-anomaly a NaN weight is still caught at its step" "$dir/d3.log" 1 $? \
  "step 3: the gradient is not finite"
# shellcheck disable=SC2086
"$DDPTRAIN" $ARGS --export "$dir/plain.st" > "$dir/p.log" 2>&1 &&
  "$DDPTRAIN" $ARGS --detect-anomaly --export "$dir/detect.st" > "$dir/p2.log" 2>&1
if [ $? -eq 0 ] && cmp -s "$dir/plain.st" "$dir/detect.st"; then
  echo "ok: --detect-anomaly on a clean run gives the same weights"
else
  echo "FAIL: --detect-anomaly changed a clean run"
  fail=1
fi
# shellcheck disable=SC2086
DDPTRAIN_FAULT_NAN_STEP=1 DDPTRAIN_FAULT_NAN_TENSOR=transformer.wte.weight "$DDPTRAIN" $ARGS > "$dir/b1.log" 2>&1
check "a fault tensor without grad:/weight: is an error" "$dir/b1.log" 1 $? "expected grad:NAME or weight:NAME"
# shellcheck disable=SC2086
DDPTRAIN_FAULT_NAN_STEP=1 DDPTRAIN_FAULT_NAN_TENSOR=grad:nope "$DDPTRAIN" $ARGS > "$dir/b2.log" 2>&1
check "an unknown fault tensor is an error" "$dir/b2.log" 1 $? "the model has no parameter 'nope'"
exit $fail
