#!/bin/sh
# --config FILE: flags from a JSON object, applied before the command line.
#  - the command line overrides the file whether it comes before or after
#    --config (seen in --plan-only --json);
#  - every bad file is exit 2 and one line naming the file (and the key, or
#    jansson's line and column), with nothing run: unknown key, malformed
#    JSON, a value of the wrong JSON type, a value the flag's row rejects, a
#    missing file, a file naming another config, --config twice (jansson
#    words the JSON errors; the test holds it to the line and "column");
#  - the file's values are recorded in the checkpoint's configuration like
#    flags typed by hand, and a resume checks against them: without the
#    file (or its values) a structural flag from it is refused, and with the
#    same values given on the command line instead of --config the run
#    resumes without a warning.
. "${top_builddir:-.}/tests/env.sh"
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
dump() { sed 's/^/  | /' "$1"; }

# ---- the command line overrides the file, wherever --config stands -------------------
printf '{"seq-len": 64, "tokens-per-batch": 512, "accum": 3}\n' > "$dir/plan.json"
plan() { "$DDPTRAIN" --plan-only --json --world-size 2 "$@" 2> "$dir/plan.err"; }
a=$(plan --config "$dir/plan.json" --tokens-per-batch 1024)
b=$(plan --tokens-per-batch 1024 --config="$dir/plan.json")
for got in "$a" "$b"; do
  case "$got" in
    *'"accum": 3,'*'"tokens_per_batch": 1024, "seq_len": 64,'*) ok "file values with a command-line override: ${got%%, \"docs\"*}" ;;
    *) bad "override order: '$got'"; dump "$dir/plan.err" ;;
  esac
done
# an empty --config is none: the defaults stand
case "$(plan --config '')" in
  *'"accum": 1,'*'"tokens_per_batch": 1024, "seq_len": 128,'*) ok "--config '' reads no file" ;;
  *) bad "--config ''"; dump "$dir/plan.err" ;;
esac

# ---- bad files: exit 2, one line, nothing run ------------------------------------------
expect_error() { # expect_error DESCRIPTION JSON MESSAGE [EXTRA-ARGS...]
  desc=$1 json=$2 msg=$3
  shift 3
  printf '%s' "$json" > "$dir/bad.json"
  # shellcheck disable=SC2086
  "$DDPTRAIN" $TINY --save "$dir/bad-ckpt" --config "$dir/bad.json" "$@" > "$dir/out" 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$msg" "$dir/out" && [ "$(wc -l < "$dir/out")" -eq 1 ] &&
    [ ! -e "$dir/bad-ckpt" ]; then
    ok "$desc -> exit 2: $(cat "$dir/out")"
  else
    bad "$desc: exit $rc, want 2 and '$msg' alone"; dump "$dir/out"
  fi
}
f="config file $dir/bad.json"
expect_error "unknown key" '{"lr": 0.001, "sed": 4}' "$f: unknown key 'sed'; did you mean 'seed'?"
expect_error "a key written as a flag" '{"--lr": 0.001}' "$f: unknown key '--lr'; did you mean 'lr'?"
expect_error "malformed JSON" '{"lr": 0.001,
  "seed": }' "$f: line 2, column "
expect_error "empty file" '' "$f: line 1, column 0: '[' or '{' expected near end of file"
expect_error "duplicate key" '{"lr": 0.001, "lr": 0.002}' "$f: line 1, column "
expect_error "top level not an object" '["lr", 0.001]' "$f: the top level is an array; it must be an object"
expect_error "number for a string flag" '{"precision": 16}' "$f: key 'precision' is a number; --precision takes a string"
expect_error "string for a flag without a value" '{"detect-anomaly": "yes"}' \
  "$f: key 'detect-anomaly' is a string; --detect-anomaly takes true or false"
expect_error "boolean for a number" '{"lr": true}' "$f: key 'lr' is a boolean; --lr takes a number or a string"
expect_error "null" '{"seed": null}' "$f: key 'seed' is null; --seed takes a whole number or a string"
expect_error "fraction for an integer flag" '{"steps": 2.5}' "$f: option --steps: '2.5' is not an integer"
expect_error "value out of range" '{"threads": 5000}' "$f: option --threads: 5000 is out of range [0, 4096]"
expect_error "value the row rejects" '{"precision": "fp8"}' "$f: option --precision: 'fp8' is not valid"
expect_error "a model's flag out of range" '{"n-layer": 0}' "$f: option --n-layer: 0 is out of range"
expect_error "a config naming another" '{"config": "other.json"}' "$f: key 'config': a config file cannot name another"
expect_error "--config twice" '{}' "option --config given twice: a run reads one config file" --config "$dir/bad.json"
"$DDPTRAIN" --config "$dir/missing.json" > "$dir/out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -qF "config file $dir/missing.json: cannot open it: No such file or directory" "$dir/out"; then
  ok "missing file -> exit 2: $(cat "$dir/out")"
else
  bad "missing file: exit $rc"; dump "$dir/out"
fi
"$DDPTRAIN" --config "$dir" > "$dir/out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -qF "config file $dir: is a directory, not a JSON file" "$dir/out"; then
  ok "a directory -> exit 2: $(cat "$dir/out")"
else
  bad "a directory as config: exit $rc"; dump "$dir/out"
fi

# ---- the checkpoint records the file's values; resume checks them -----------------------
printf '{"optimizer": "sgd", "lr": 0.0025, "seed": 7, "detect-anomaly": true}\n' > "$dir/run.json"
ck=$dir/ck
# shellcheck disable=SC2086
"$DDPTRAIN" --config "$dir/run.json" $TINY --seed 9 --stop-at 2 --save "$ck" > "$dir/run.log" 2>&1
rc=$?
file=$ck/ckpt_00000002.safetensors
# the header is JSON text; its config is a JSON string of the flags
header=$(head -c 8192 "$file" 2> /dev/null | tr -d '\000' | tr ',' '\n')
has() { printf '%s\n' "$header" | grep -qF "\\\"$1\\\":\\\"$2\\\""; }
if [ $rc -eq 0 ] && has optimizer sgd && has lr 0.0025000000000000001 && has seed 9 &&
  has detect-anomaly 1 && has config "$dir/run.json"; then
  ok "the checkpoint's config holds the file's values (--seed from the command line)"
else
  bad "checkpoint config (exit $rc): $(printf '%s\n' "$header" | grep -E 'optimizer|"lr|seed|anomaly|config' | tr '\n' ' ')"
  dump "$dir/run.log"
fi
cp -r "$ck" "$dir/ck2"
# shellcheck disable=SC2086
"$DDPTRAIN" $TINY --resume "$ck" > "$dir/r1.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -qF "cannot resume from $file: --optimizer is 'sgd' there and 'adamw' now" "$dir/r1.log"; then
  ok "resume without the file's optimizer is refused, naming it"
else
  bad "resume without the file: exit $rc"; dump "$dir/r1.log"
fi
# the same values on the command line: no --config, nothing changed
# shellcheck disable=SC2086
"$DDPTRAIN" $TINY --resume "$dir/ck2" --optimizer sgd --lr 0.0025 --seed 9 \
  --detect-anomaly --stop-at 3 --save "$dir/ck2" > "$dir/r2.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "resume: loaded .*ckpt_00000002.safetensors (step 2)" "$dir/r2.log" &&
  ! grep -q "WARN: resume:" "$dir/r2.log"; then
  ok "resume with the file's values on the command line: no --config needed, no warning"
else
  bad "resume with the values by hand: exit $rc"; dump "$dir/r2.log"
fi
# and with the file again, the command line's --seed still wins
# shellcheck disable=SC2086
"$DDPTRAIN" --config "$dir/run.json" $TINY --seed 9 --resume "$ck" --stop-at 3 --save "$ck" > "$dir/r3.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "resume: loaded" "$dir/r3.log" && ! grep -q "WARN: resume:" "$dir/r3.log"; then
  ok "resume with --config and the same override: no warning"
else
  bad "resume with --config: exit $rc"; dump "$dir/r3.log"
fi
exit $fail
