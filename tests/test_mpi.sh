#!/bin/sh
# ddptrain under mpirun: the self-test on 2 and 4 ranks (oversubscribed on
# small machines) with its binding map, DDPTRAIN_BIND=1, a short training job on 2 ranks, and ranks that disagree
# must all stop with a message, not hang.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
fail=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() { timeout 120 "$MPIRUN" "$@" > "$out" 2>&1; }

for np in 2 4; do
  if run -np $np "$DDPTRAIN" --self-test --threads 1 && grep -q "smoke job passed on $np ranks" "$out" &&
     grep -q "binding: rank $((np - 1)) host .* cpu numa .* cpus .*as launched)" "$out"; then
    echo "ok: mpirun -np $np"
  else
    echo "FAIL: mpirun -np $np"; sed 's/^/  | /' "$out"; fail=1
  fi
done

# DDPTRAIN_BIND=1: CPU ranks are bound, each to its own share of the cores.
cpus_of() { sed -n "s/.*binding: rank $1 host .* cpus \([0-9,-]*\) (.*, bound)$/\1/p" "$out"; }
if run -np 2 -x DDPTRAIN_BIND=1 "$DDPTRAIN" --self-test --threads 1 && [ -n "$(cpus_of 0)" ] &&
   [ -n "$(cpus_of 1)" ] && { [ "$(nproc)" -lt 2 ] || [ "$(cpus_of 0)" != "$(cpus_of 1)" ]; }; then
  echo "ok: DDPTRAIN_BIND=1 binds the 2 ranks to cpus $(cpus_of 0) and $(cpus_of 1)"
else
  echo "FAIL: DDPTRAIN_BIND=1 binding map"; sed 's/^/  | /' "$out"; fail=1
fi

# shellcheck disable=SC2086
if run -np 2 "$DDPTRAIN" $TINY && grep -q "\[rank 0/2\] step     4/4 | loss" "$out"; then
  echo "ok: training under mpirun -np 2"
else
  echo "FAIL: training under mpirun -np 2"; sed 's/^/  | /' "$out"; fail=1
fi

# Different seeds on the two ranks (MPMD): both must exit quickly, naming
# what differs and which ranks. The flags are compared before anything
# else, so this is a command-line error (exit 2).
run -np 1 "$DDPTRAIN" --self-test --threads 1 --seed 1 : -np 1 "$DDPTRAIN" --self-test --threads 1 --seed 2
rc=$?
if [ $rc -eq 2 ] && grep -q "ranks disagree on flag --seed: '1' on rank 0 and '2' on rank 1" "$out"; then
  echo "ok: seed mismatch stops every rank (exit $rc)"
else
  echo "FAIL: seed mismatch (exit $rc)"; sed 's/^/  | /' "$out"; fail=1
fi
exit $fail
