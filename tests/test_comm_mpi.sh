#!/bin/sh
# The communicator suite (tests/check_comm) under mpirun on 2 and 4 ranks
# (oversubscribed on small machines): every rank runs every test, and the
# ranks agree on the result, so any failing rank fails the run.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
# The suite sets CK_NOFORK itself; this keeps it so if that line ever goes:
# nothing may fork after MPI_Init.
export CK_FORK=no
fail=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() { timeout 120 "$MPIRUN" "$@" > "$out" 2>&1; }

for np in 2 4; do
  run -np $np "$top_builddir/tests/check_comm"
  rc=$?
  passed=$(grep -c '^100%: Checks: [0-9]*, Failures: 0, Errors: 0' "$out")
  if [ $rc -eq 0 ] && [ "$passed" -eq $np ]; then
    echo "ok: check_comm under mpirun -np $np"
  else
    echo "FAIL: check_comm under mpirun -np $np (exit $rc; $passed of $np ranks passed all)"
    sed 's/^/  | /' "$out"; fail=1
  fi
done
exit $fail
