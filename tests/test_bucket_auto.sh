#!/bin/sh
# --bucket-mb auto / --first-bucket-mb auto end to end, 2 ranks, the tiny
# built-in model (docs/design.md §6.2, bucket tuning):
#  - one line per candidate and the choice are logged, and every rank logs
#    the same figures and the same choice (DDPTRAIN_LOG_ALL_RANKS=1); the
#    metrics file gets a bucket_tune record of it;
#  - the choice does not change the math: at -np 2 each gradient element is
#    the sum of two numbers, exact in any order, so the weights after the
#    tuned run are bit for bit those of a run with the chosen sizes fixed
#    and of a run with the default sizes;
#  - the step loop allocates nothing after tuning, even where each switch
#    of candidate allocates (a bf16 reduce dtype: staging and partials);
#  - a run too short to tune keeps the defaults and says so;
#  - a config file may say "auto"; a checkpoint of an auto run records
#    "auto", and resuming with auto tunes again, with no warning;
#  - bad values (command line or config file) exit 2 with one line naming
#    the flag.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $1"; [ -z "${2:-}" ] || sed 's/^/  | /' "$2"; fail=1; }
COMPARE="$top_builddir/tests/st_compare"
# tuning needs 3 + 2 rounds x 4 candidates x 3 steps = 27 steps; 34 leave some after it
STEPS=34
run2() { # LOG ARGS...: 2 ranks, every rank logging
  log=$1
  shift
  # shellcheck disable=SC2086
  DDPTRAIN_LOG_ALL_RANKS=1 timeout 120 "$MPIRUN" -x DDPTRAIN_LOG_ALL_RANKS -np 2 "$DDPTRAIN" \
    $TINY --steps $STEPS "$@" > "$log" 2>&1
}

# ---- the tuned run: its lines, the same on both ranks, and the record ----------------
if ! run2 "$dir/auto.log" --bucket-mb auto --first-bucket-mb auto --export "$dir/auto.st" \
  --metrics "$dir/auto.jsonl"; then
  bad "the tuned run failed" "$dir/auto.log"
  exit 1
fi
for r in 0 1; do
  grep "^\[rank $r/2\] bucket tuning: " "$dir/auto.log" | sed 's/^\[rank [0-9]\/2\] //' > "$dir/tune$r"
done
n_cand=$(grep -c "candidate [0-9]/[0-9]: first .* MiB, bucket .* MiB, [0-9]* buckets\{0,1\}: step .* ms, exposed .* ms" "$dir/tune0")
chose=$(grep "bucket tuning: chose first" "$dir/tune0")
if [ "$n_cand" -ge 2 ] && [ -n "$chose" ]; then
  ok "rank 0 logs $n_cand candidates and: $chose"
else
  bad "tuning lines missing (candidates: $n_cand)" "$dir/auto.log"
fi
if [ -s "$dir/tune1" ] && cmp -s "$dir/tune0" "$dir/tune1"; then
  ok "both ranks log the same $(wc -l < "$dir/tune0") tuning lines"
else
  bad "the ranks' tuning lines differ" "$dir/auto.log"
fi
first=$(echo "$chose" | sed -n 's/.*chose first \([0-9.e+-]*\) MiB, bucket \([0-9.e+-]*\) MiB.*/\1/p')
bucket=$(echo "$chose" | sed -n 's/.*chose first \([0-9.e+-]*\) MiB, bucket \([0-9.e+-]*\) MiB.*/\2/p')
python3 - "$dir/auto.jsonl" "${first:-x}" "${bucket:-x}" "$n_cand" << 'PY' || fail=1
import json, sys
recs = [r for r in map(json.loads, open(sys.argv[1])) if r.get("record") == "bucket_tune"]
want = (float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
ok = (len(recs) == 1 and (recs[0]["first_bucket_mb"], recs[0]["bucket_mb"], recs[0]["candidates"]) == want
      and all(k in recs[0] for k in ("step", "n_buckets", "step_ms", "exposed_comm_ms",
                                     "default_step_ms", "default_exposed_comm_ms")))
print(("ok" if ok else "FAIL") + ": metrics bucket_tune record %s, the log chose %s" % (recs, want))
sys.exit(0 if ok else 1)
PY
grep -q "^\[rank 0/2\] summary: the step loop made 0 backend allocations" "$dir/auto.log" ||
  bad "the tuned run's step loop allocated" "$dir/auto.log"

# ---- the math: bit for bit the run with the chosen sizes, and the defaults' ----------
if [ -n "$first" ] && [ -n "$bucket" ]; then
  run2 "$dir/fixed.log" --first-bucket-mb "$first" --bucket-mb "$bucket" --export "$dir/fixed.st" ||
    bad "the run with the chosen sizes failed" "$dir/fixed.log"
  run2 "$dir/default.log" --export "$dir/default.st" || bad "the default run failed" "$dir/default.log"
  for ref in fixed default; do
    if res=$("$COMPARE" "$dir/auto.st" "$dir/$ref.st" 0); then
      ok "tuned weights equal the $ref run's bit for bit: $res"
    else
      bad "tuned weights differ from the $ref run's: $res"
    fi
  done
fi

# ---- switches that allocate: the count starts after tuning -------------------------
if run2 "$dir/bf16.log" --bucket-mb auto --first-bucket-mb auto --grad-reduce-dtype bf16 &&
  grep -q "bucket tuning: chose" "$dir/bf16.log" &&
  grep -q "^\[rank 0/2\] summary: the step loop made 0 backend allocations" "$dir/bf16.log"; then
  ok "bf16 reduce dtype: tuning switched reducers, the step loop after it allocated nothing"
else
  bad "bf16 reduce dtype with tuning" "$dir/bf16.log"
fi

# ---- too short to tune ------------------------------------------------------------------
if run2 "$dir/short.log" --bucket-mb auto --stop-at 10 --first-bucket-mb auto &&
  grep -q "^\[rank 0/2\] bucket tuning: 4 candidates need 27 steps, the run has 10; keeping first 1 MiB, bucket 25 MiB" "$dir/short.log" &&
  ! grep -q "bucket tuning: chose" "$dir/short.log"; then
  ok "a run of 10 steps keeps the defaults and says why"
else
  bad "short run" "$dir/short.log"
fi

# ---- config file, checkpoint and resume --------------------------------------------------
printf '{"bucket-mb": "auto", "first-bucket-mb": "auto"}\n' > "$dir/auto.json"
if run2 "$dir/leg1.log" --config "$dir/auto.json" --steps 64 --stop-at 30 --save "$dir/ck" &&
  grep -q "bucket tuning: chose" "$dir/leg1.log" &&
  grep -arq 'bucket-mb[\"]*:[\"]*auto' "$dir/ck"; then
  ok "a config file's auto tunes, and the checkpoint records auto"
else
  bad "config file auto / checkpoint record" "$dir/leg1.log"
fi
if run2 "$dir/leg2.log" --bucket-mb auto --first-bucket-mb auto --steps 64 --resume "$dir/ck" &&
  grep -q "^\[rank 0/2\] bucket tuning: chose" "$dir/leg2.log" &&
  ! grep -q "resume: --.*bucket-mb" "$dir/leg2.log"; then
  ok "resuming an auto run with auto tunes again, no warning"
else
  bad "resume with auto" "$dir/leg2.log"
fi

# ---- bad values: exit 2, one line naming the flag -----------------------------------------
bad_value() { # DESCRIPTION FLAG-TEXT ARGS...
  desc=$1 flag=$2
  shift 2
  "$DDPTRAIN" $TINY "$@" > "$dir/bad.out" 2> "$dir/bad.err"
  rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l < "$dir/bad.err")" -eq 1 ] && grep -q "$flag" "$dir/bad.err" &&
    [ ! -s "$dir/bad.out" ]; then
    ok "$desc: exit 2, $(cat "$dir/bad.err")"
  else
    bad "$desc: exit $rc" "$dir/bad.err"
  fi
}
bad_value "--bucket-mb automatic" "option --bucket-mb: 'automatic' is not a finite number or auto" \
  --bucket-mb automatic
bad_value "--first-bucket-mb -1" "option --first-bucket-mb: -1 is out of range" --first-bucket-mb -1
bad_value "--bucket-mb ''" "option --bucket-mb: '' is not a finite number or auto" --bucket-mb ""
bad_value "--bucket-mb 0" "option --bucket-mb: 0 is out of range" --bucket-mb 0
bad_value "--lr auto" "option --lr: 'auto' is not a finite number" --lr auto
printf '{"bucket-mb": "fastest"}\n' > "$dir/bad.json"
bad_value "config bucket-mb fastest" "bucket-mb: 'fastest' is not a finite number or auto" \
  --config "$dir/bad.json"
printf '{"first-bucket-mb": -2}\n' > "$dir/neg.json"
bad_value "config first-bucket-mb -2" "first-bucket-mb: -2 is out of range" --config "$dir/neg.json"
exit $fail
