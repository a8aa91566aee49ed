#!/bin/sh
# Inputs that are wrong but look right, as a job meets them:
#  - a shard of the same name and size but other content on one rank (each
#    rank runs in its own directory, MPMD -wdir) is refused, naming the
#    shard and the ranks; the same bytes on both ranks train;
#  - a shard header whose vocabulary is absurd (2^31-1, the magic 20240801
#    in the wrong slot, 2^24 + 1) is refused at once, naming the file and
#    the field, instead of allocating terabytes or training for days;
#  - a flag given to some ranks only (MPMD) is refused with exit status 2,
#    naming the flag and both values (--save, --export, --metrics, the kind
#    of --device), while a rank's local settings (--threads, --peak-gflops)
#    may differ;
#  - a combination of flags that cannot work exits 2 with one line on every
#    rank before the ranks start.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
PREP="$top_builddir/ddpprep"

# expect DESC RC TEXT LOG: the exit status (not a timeout) and a line of the log
expect() {
  desc=$1 want=$2 text=$3 log=$4
  if [ "$rc" -eq "$want" ] && grep -qF -- "$text" "$log"; then
    echo "ok: $desc (exit $rc)"
  else
    echo "FAIL: $desc: exit $rc (want $want), or no '$text' in:"; sed 's/^/  | /' "$log"; fail=1
  fi
}

# ---- the same shard name and size, other content on rank 1 ----------------------
mkdir "$dir/r0" "$dir/r1" "$dir/same0" "$dir/same1"
(cd "$dir/r0" && printf 'hello world, this is the data of rank 0\n' | "$PREP" -o d > /dev/null)
(cd "$dir/r1" && printf 'hello world, this is the data of rank 1\n' | "$PREP" -o d > /dev/null)
if ! cmp -s "$dir/r0/d_train_000000.bin" "$dir/r1/d_train_000000.bin" &&
   [ "$(wc -c < "$dir/r0/d_train_000000.bin")" -eq "$(wc -c < "$dir/r1/d_train_000000.bin")" ]; then
  echo "ok: two shards of one name and size with other bytes"
else
  echo "FAIL: the two shards should differ in content only"; fail=1
fi
# shellcheck disable=SC2086
timeout 120 "$MPIRUN" -np 1 -wdir "$dir/r0" "$DDPTRAIN" $TINY --data d_train_000000.bin : \
  -np 1 -wdir "$dir/r1" "$DDPTRAIN" $TINY --data d_train_000000.bin > "$dir/content.log" 2>&1
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && rc=1
expect "other shard content on rank 1 stops the job" 1 \
  "ranks disagree on the content of training shard 'd_train_000000.bin'" "$dir/content.log"
# the lower hash is named first, whichever rank holds it
if ! grep "content of training shard" "$dir/content.log" | grep "rank 0 has" | grep -q "rank 1 has"; then
  echo "FAIL: the content mismatch does not name both ranks"; fail=1
fi
cp "$dir/r0/d_train_000000.bin" "$dir/same0/"
cp "$dir/r0/d_train_000000.bin" "$dir/same1/"
# shellcheck disable=SC2086
timeout 120 "$MPIRUN" -np 1 -wdir "$dir/same0" "$DDPTRAIN" $TINY --data d_train_000000.bin : \
  -np 1 -wdir "$dir/same1" "$DDPTRAIN" $TINY --data d_train_000000.bin > "$dir/same.log" 2>&1
rc=$?
expect "the same bytes in two directories train" 0 "step     4/4" "$dir/same.log"

# ---- shard headers with a vocabulary beyond 2^24 -----------------------------------
# a uint32 shard (magic 20240801, version 7) of 64 tokens, EOT 0, vocab $2
bad_vocab_shard() {
  python3 - "$1" "$2" <<'PY'
import struct, sys
path, vocab = sys.argv[1], int(sys.argv[2])
header = [20240801, 7, 64, 0, vocab] + [0] * 251
tokens = [0] + [1 + i % 200 for i in range(63)]
with open(path, "wb") as f:
    f.write(struct.pack("<256i", *header) + struct.pack("<64I", *tokens))
PY
}
# 2^31-1 goes as far as a training run (an unbounded reader asks for a
# TiB-sized model and fails at once); the others only to --plan-only, which
# reads the data the same way but builds no model, so that a reader without
# the bound makes this test fail instead of allocating gigabytes.
for vocab in 2147483647 20240801 16777217; do
  bad_vocab_shard "$dir/v$vocab.bin" "$vocab"
  plan=--plan-only
  [ "$vocab" = 2147483647 ] && plan=
  # shellcheck disable=SC2086
  timeout -k 5 60 "$DDPTRAIN" $TINY --data "$dir/v$vocab.bin" $plan > "$dir/v.log" 2>&1
  rc=$?
  expect "shard vocab $vocab is refused, naming the file and the field" 1 \
    "shard '$dir/v$vocab.bin': vocab size $vocab at byte 16 (header slot [4]) exceeds" "$dir/v.log"
done

# ---- flags given to one rank only (MPMD) ---------------------------------------------
# mpmd LOG ARGS-OF-RANK-1...: rank 0 gets $TINY, rank 1 $TINY and more
mpmd() {
  log=$1
  shift
  # shellcheck disable=SC2086
  timeout 120 "$MPIRUN" -np 1 "$DDPTRAIN" $TINY : -np 1 "$DDPTRAIN" $TINY "$@" > "$log" 2>&1
  rc=$?
}
mpmd "$dir/save.log" --save "$dir/ck"
expect "--save on rank 1 only is refused" 2 \
  "ranks disagree on flag --save: '' on rank 0 and '$dir/ck' on rank 1" "$dir/save.log"
if [ -e "$dir/ck" ]; then echo "FAIL: the refused job created $dir/ck"; fail=1; fi
mpmd "$dir/export.log" --export "$dir/w.st"
expect "--export on rank 1 only is refused" 2 \
  "ranks disagree on flag --export: '' on rank 0 and '$dir/w.st' on rank 1" "$dir/export.log"
mpmd "$dir/metrics.log" --metrics "$dir/m.jsonl"
expect "--metrics on rank 1 only is refused" 2 "ranks disagree on flag --metrics: '' on rank 0" \
  "$dir/metrics.log"
mpmd "$dir/device.log" --device cpu
expect "--device auto on rank 0, cpu on rank 1 is refused" 2 \
  "ranks disagree on flag --device: the device kind is 'auto' on rank 0 and 'cpu' on rank 1" \
  "$dir/device.log"
mpmd "$dir/local.log" --threads 2 --peak-gflops 20
expect "--threads and --peak-gflops may differ per rank" 0 "step     4/4" "$dir/local.log"

# ---- combinations of flags: exit 2 on every rank, one line each ---------------------
# shellcheck disable=SC2086
timeout 60 "$MPIRUN" -np 2 "$DDPTRAIN" $TINY --n-embd 7 --n-head 2 > "$dir/combo.log" 2>&1
rc=$?
expect "--n-embd 7 --n-head 2 under mpirun" 2 \
  "option --n-embd 7 is not a multiple of --n-head 2" "$dir/combo.log"
# the ranks' own lines (mpirun adds its banner): exactly this error, once per rank
lines=$(grep -c '^\[ddptrain\]' "$dir/combo.log")
errors=$(grep -c '^\[ddptrain\] ERROR: option --n-embd 7 is not a multiple' "$dir/combo.log")
if [ "$lines" -eq 2 ] && [ "$errors" -eq 2 ]; then
  echo "ok: one line per rank, nothing else"
else
  echo "FAIL: $lines error lines from 2 ranks"; sed 's/^/  | /' "$dir/combo.log"; fail=1
fi
exit $fail
