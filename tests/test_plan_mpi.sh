#!/bin/sh
# ddptrain --plan-only, the sampler plan as a user inspects it: every rank
# must compute the same plan (there is no communication to fix a
# disagreement: each rank plans alone and trusts the others to agree), so
# the JSON of 4 independent single processes planning for --world-size 4
# and that of rank 0 of a real 4-rank job must be identical but for the
# timing; the JSON is valid and complete, the text names padding and
# imbalance, the random baseline pads more than bucketing, and bad values
# exit 2 naming the flag.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
PLAN="--plan-only --json --accum 2"

show() { sed 's/^/  | /' "$@"; }
# The JSON without its one machine-dependent field.
strip_timing() { sed 's/"plan_seconds": *[-+.0-9eE]*//' "$1"; }

# ---- the same plan on every rank ----------------------------------------------
pids=""
for i in 1 2 3 4; do
  # shellcheck disable=SC2086
  timeout 120 "$DDPTRAIN" $PLAN --world-size 4 > "$dir/single$i.json" 2> "$dir/single$i.err" &
  pids="$pids $!"
done
i=0
for pid in $pids; do
  i=$((i + 1))
  if ! wait "$pid"; then
    echo "FAIL: single process $i planning for --world-size 4"; show "$dir/single$i.json" "$dir/single$i.err"; fail=1
  fi
done
# shellcheck disable=SC2086
if ! timeout 120 "$MPIRUN" -np 4 "$DDPTRAIN" $PLAN > "$dir/mpi.json" 2> "$dir/mpi.err"; then
  echo "FAIL: mpirun -np 4 ddptrain $PLAN"; show "$dir/mpi.json" "$dir/mpi.err"; fail=1
fi
if [ "$(wc -l < "$dir/mpi.json")" -ne 1 ] || ! grep -q '"world": 4,' "$dir/mpi.json" \
   || ! grep -q '"plan_seconds": ' "$dir/mpi.json"; then
  echo "FAIL: mpirun -np 4: expected one JSON line (rank 0's) for world 4"; show "$dir/mpi.json" "$dir/mpi.err"; fail=1
fi
strip_timing "$dir/mpi.json" > "$dir/mpi.plan"
same=1
for i in 1 2 3 4; do
  strip_timing "$dir/single$i.json" > "$dir/single$i.plan"
  if ! cmp -s "$dir/single$i.plan" "$dir/mpi.plan"; then
    echo "FAIL: the plan of single process $i differs from rank 0's under mpirun -np 4"
    diff "$dir/single$i.plan" "$dir/mpi.plan" | show; same=0; fail=1
  fi
done
[ $same -eq 1 ] && echo "ok: 4 single processes and mpirun -np 4 compute the same plan"

# ---- the JSON ----------------------------------------------------------------------
if ! command -v python3 > /dev/null 2>&1; then
  echo "skip: JSON checks need python3"
else
  # Valid JSON with the documented keys and numbers that fit together.
  check_json='
import json, sys
d = json.load(sys.stdin)
want = ["docs", "micro_batches", "steps", "pad_frac", "imbalance_mean", "imbalance_max",
        "plan_seconds"]
missing = [k for k in want if k not in d]
if missing:
    sys.exit("missing keys: %s" % missing)
if d["world"] != 4 or d["accum"] != 2:
    sys.exit("world %s x accum %s, expected 4 x 2" % (d["world"], d["accum"]))
if not (d["docs"] > 0 and d["steps"] * 8 >= d["micro_batches"] > (d["steps"] - 1) * 8):
    sys.exit("steps %s do not hold %s micro-batches 8 at a time" % (d["steps"], d["micro_batches"]))
if not (0 <= d["pad_frac"] < 1 and 1 <= d["imbalance_mean"] <= d["imbalance_max"]):
    sys.exit("pad_frac %s / imbalance %s, %s out of range" %
             (d["pad_frac"], d["imbalance_mean"], d["imbalance_max"]))
if d["plan_seconds"] < 0:
    sys.exit("negative plan_seconds")
'
  if timeout 120 "$DDPTRAIN" --plan-only --world-size 4 --accum 2 --json > "$dir/plan.json" 2> "$dir/plan.err" \
     && python3 -c "$check_json" < "$dir/plan.json" > "$dir/py.out" 2>&1; then
    echo "ok: --plan-only --json is valid JSON with the documented keys"
  else
    echo "FAIL: --plan-only --world-size 4 --accum 2 --json"; show "$dir/plan.json" "$dir/plan.err" "$dir/py.out"; fail=1
  fi

  # The random baseline pads more than length bucketing on the same data.
  # shellcheck disable=SC2086
  if timeout 120 "$DDPTRAIN" $PLAN --world-size 4 --sampler random > "$dir/random.json" 2> "$dir/random.err" \
     && python3 -c '
import json, sys
b = json.load(open(sys.argv[1])); r = json.load(open(sys.argv[2]))
print("pad_frac bucket %.4f, random %.4f" % (b["pad_frac"], r["pad_frac"]))
if r["sampler"] != "random" or b["sampler"] != "bucket":
    sys.exit("samplers %s / %s" % (b["sampler"], r["sampler"]))
if not r["pad_frac"] > b["pad_frac"]:
    sys.exit("random does not pad more than bucket")
' "$dir/single1.json" "$dir/random.json" > "$dir/py.out" 2>&1; then
    echo "ok: --sampler random pads more than bucket ($(cat "$dir/py.out"))"
  else
    echo "FAIL: --sampler random vs bucket"; show "$dir/random.json" "$dir/random.err" "$dir/py.out"; fail=1
  fi
fi

# ---- the text form ----------------------------------------------------------------
if timeout 120 "$DDPTRAIN" --plan-only --world-size 4 --accum 2 > "$dir/plan.txt" 2> "$dir/plan.err" \
   && grep -q "padding" "$dir/plan.txt" && grep -q "imbalance" "$dir/plan.txt" \
   && grep -q "world 4 x accum 2" "$dir/plan.txt"; then
  echo "ok: --plan-only text names padding and imbalance"
else
  echo "FAIL: --plan-only text"; show "$dir/plan.txt" "$dir/plan.err"; fail=1
fi

# ---- bad values ---------------------------------------------------------------------
bad() { # flag, value
  timeout 120 "$DDPTRAIN" --plan-only "$1" "$2" > "$dir/bad.out" 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$1" "$dir/bad.out"; then
    echo "ok: $1 $2 exits 2 naming the flag"
  else
    echo "FAIL: $1 $2: exit $rc, expected 2 and a message naming $1"; show "$dir/bad.out"; fail=1
  fi
}
bad --sampler nope
bad --world-size -1
bad --bucket-chunk 0
exit $fail
