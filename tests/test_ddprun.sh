#!/bin/sh
# launch/ddprun: the mpirun line it builds (--dry-run), that bad arguments
# are one clear line and exit status 2, and a real 2-rank run through it.
. "${top_builddir:-.}/tests/env.sh"
set -u
DDPRUN="$top_srcdir/launch/ddprun"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
# A stand-in mpirun, so the dry runs need no MPI.
printf '#!/bin/sh\nexit 0\n' > "$dir/mpirun" && chmod +x "$dir/mpirun"
dry() { "$DDPRUN" --mpirun "$dir/mpirun" --dry-run "$@"; }

"$DDPRUN" --help | grep -q "^Usage: ddprun" && ok "--help" || bad "--help prints no usage"

line=$(DDPTRAIN_LOG_LEVEL=debug NCCL_DEBUG=WARN dry --gpus 4 --per-node 4 -- --steps 3 --data 'a b*')
echo "  dry run: $line"
case "$line" in
  *" -np 4 "*) ok "one rank per GPU" ;; *) bad "not one rank per GPU: $line" ;;
esac
case "$line" in
  *"-x DDPTRAIN_LOG_LEVEL"*"-x NCCL_DEBUG"*) ok "DDPTRAIN_* and NCCL_* are passed with -x" ;;
  *) bad "environment not passed: $line" ;;
esac
case "$line" in
  *" --steps 3 --data 'a b*'") ok "ddptrain's arguments come last, quoted" ;;
  *) bad "ddptrain's arguments mangled: $line" ;;
esac
# 4 ranks per node on a node with C cores: C/4 cores each, or no binding
# when there are fewer cores than ranks.
cores=$(lscpu -p=core,socket 2> /dev/null | grep -v '^#' | sort -u | wc -l)
if [ "$cores" -ge 4 ]; then want="--map-by ppr:4:node:PE=$((cores / 4)) --bind-to core"
else want="--map-by ppr:4:node --bind-to none --oversubscribe"; fi
case "$line" in *"$want"*) ok "binding for 4 ranks on $cores cores: $want" ;; *) bad "binding: want '$want' in: $line" ;; esac
line=$(dry --cpu --np 5)
case "$line" in
  *" -np 5 "*"--map-by ppr:5:node"*) ok "--np alone puts its ranks on the node(s)" ;;
  *) bad "--np 5 on one node: $line" ;;
esac
line=$(dry --cpu)
case "$line" in
  *" -np $cores "*"--map-by ppr:$cores:node:PE=1 --bind-to core"*) ok "--cpu: one rank per core, bound to it" ;;
  *) bad "--cpu on $cores cores: $line" ;;
esac
printf 'n1 slots=2\nn2 slots=2\n# comment\n\n' > "$dir/hosts"
line=$(dry --cpu --per-node 2 --hostfile "$dir/hosts")
case "$line" in *" -np 4 "*"--hostfile"*) ok "hostfile of 2 nodes x 2: 4 ranks" ;; *) bad "hostfile: $line" ;; esac
line=$(dry --np 3 --host n1,n2 --mpi-arg --report-bindings -- --steps 1)
case "$line" in
  *" -np 3 "*"--host n1,n2"*"--report-bindings "*) ok "--np, --host and --mpi-arg" ;;
  *) bad "--np/--host/--mpi-arg: $line" ;;
esac

# Bad command lines: one message, status 2, nothing run.
expect_usage() { # expect_usage MESSAGE ARGS...
  msg=$1; shift
  "$DDPRUN" --mpirun "$dir/mpirun" "$@" > "$dir/out" 2> "$dir/err"
  rc=$?
  if [ $rc -eq 2 ] && grep -qF -e "$msg" "$dir/err" && [ "$(wc -l < "$dir/err")" -eq 1 ] &&
    [ ! -s "$dir/out" ]; then
    ok "ddprun $* -> status 2: $(head -1 "$dir/err")"
  else
    bad "ddprun $*: status $rc, stderr: $(cat "$dir/err")"
  fi
}
expect_usage "unknown option '--steps'" --steps 3
expect_usage "--np expects a whole number, got 'x'" --np x
expect_usage "--np must be at least 1, got 0" --np=0
expect_usage "--per-node needs a value" --per-node
expect_usage "--hostfile: cannot read" --hostfile "$dir/missing"
expect_usage "--hostfile and --host exclude each other" --hostfile "$dir/hosts" --host a
expect_usage "cannot find mpirun" --mpirun "$dir/no-such-mpirun"

# A real run: 2 ranks through ddprun train and print the line they ran.
if [ -n "$MPIRUN" ]; then
  if "$DDPRUN" --mpirun "$MPIRUN" --cpu --np 2 --per-node 2 --program "$DDPTRAIN" -- $TINY > "$dir/run.log" 2>&1 &&
    grep -q "summary: final train loss" "$dir/run.log" && grep -q "^ddprun: .* -np 2 " "$dir/run.log"; then
    ok "2 ranks trained through ddprun"
  else
    bad "2 ranks through ddprun"; sed 's/^/  | /' "$dir/run.log"
  fi
fi
exit $fail
