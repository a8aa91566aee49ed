#!/bin/sh
# launch/ddprun: the mpirun line it builds (--dry-run), that bad arguments
# are one clear line and exit status 2, where it finds ddptrain without
# --program, a real 2-rank run through it, and
# preemption through it: SIGTERM to ddprun, and SIGINT to its process group
# (a Ctrl-C), while the steps take longer than the ~2 s Open MPI gives ranks
# after its own SIGTERM, still end with a checkpoint and status 75, and
# --resume then ends bit-identical to an uninterrupted run.
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

# Without --program, ddprun starts the ddptrain beside it (installed), else
# the one a folder up (launch/ddprun in a source or build tree), else
# ddptrain on PATH; found nowhere, it stops with status 2 before mpirun.
mkdir -p "$dir/tree/launch" "$dir/lone"
cp "$DDPRUN" "$dir/tree/launch/ddprun" && cp "$DDPRUN" "$dir/lone/ddprun"
printf '#!/bin/sh\nexit 0\n' > "$dir/tree/ddptrain" && chmod +x "$dir/tree/ddptrain"
line=$("$dir/tree/launch/ddprun" --mpirun "$dir/mpirun" --dry-run --cpu --np 1)
case "$line" in
  *" $dir/tree/ddptrain") ok "a source tree's launch/ddprun starts the ddptrain one folder up" ;;
  *) bad "launch/ddprun in a tree: $line" ;;
esac
line=$("$top_builddir/launch/ddprun" --mpirun "$dir/mpirun" --dry-run --cpu --np 1 -- --steps 1)
case "$line" in
  *" $top_builddir/ddptrain --steps 1") ok "the build's launch/ddprun starts the ddptrain built beside it" ;;
  *) bad "the build's launch/ddprun: '$line'" ;;
esac
if PATH=/usr/bin:/bin command -v ddptrain > /dev/null 2>&1; then
  echo "skipped: ddptrain is installed on PATH, so a lone ddprun finds it"
else
  PATH=/usr/bin:/bin "$dir/lone/ddprun" --mpirun "$dir/mpirun" --cpu --np 1 > "$dir/out" 2> "$dir/err"
  rc=$?
  if [ $rc -eq 2 ] && grep -qF "cannot find ddptrain: not in $dir/lone, not in its parent folder, not on PATH" "$dir/err" &&
    [ ! -s "$dir/out" ]; then
    ok "no ddptrain anywhere -> status 2: $(cat "$dir/err")"
  else
    bad "no ddptrain anywhere: status $rc, stderr: $(cat "$dir/err")"
  fi
fi

# A real run: 2 ranks through ddprun train and print the line they ran.
if [ -n "$MPIRUN" ]; then
  if "$DDPRUN" --mpirun "$MPIRUN" --cpu --np 2 --per-node 2 --program "$DDPTRAIN" -- $TINY > "$dir/run.log" 2>&1 &&
    grep -q "summary: final train loss" "$dir/run.log" && grep -q "^ddprun: .* -np 2 " "$dir/run.log"; then
    ok "2 ranks trained through ddprun"
  else
    bad "2 ranks through ddprun"; sed 's/^/  | /' "$dir/run.log"
  fi

  # Preemption through ddprun. Each step is followed by a 3 s pause
  # (restarted by a signal), so after the signal a rank needs > 3 s to
  # reach its checkpoint: more than mpirun grants after its own SIGTERM.
  run2="$DDPRUN --mpirun $MPIRUN --cpu --np 2 --per-node 2 --program $DDPTRAIN --"
  # shellcheck disable=SC2086
  $run2 $TINY --steps 6 --log-every 1 --export "$dir/ref.st" > "$dir/ref.log" 2>&1 ||
    { bad "reference run"; sed 's/^/  | /' "$dir/ref.log"; }
  # preempt NAME SIGNAL MESSAGE [-g]: signals ddprun (-g: its whole process
  # group, as a Ctrl-C at a terminal does; ddprun then runs in a session of
  # its own, with SIGINT not ignored as sh does for background commands)
  # after step 1; wants status 75, a checkpoint, MESSAGE from ddprun, and
  # a resume that ends bit-identical to the uninterrupted run.
  preempt() {
    name=$1 sig=$2 msg=$3 group=${4:-}
    if [ -n "$group" ]; then
      # shellcheck disable=SC2086
      DDPTRAIN_FAULT_STEP_SLEEP_MS=3000 setsid env --default-signal=INT $run2 $TINY --steps 6 --log-every 1 \
        --save "$dir/$name" > "$dir/$name.log" 2>&1 &
    else
      # shellcheck disable=SC2086
      DDPTRAIN_FAULT_STEP_SLEEP_MS=3000 $run2 $TINY --steps 6 --log-every 1 --save "$dir/$name" > "$dir/$name.log" 2>&1 &
    fi
    pid=$!
    i=0
    while ! grep -q "step     1/6" "$dir/$name.log" 2> /dev/null && [ $i -lt 1200 ]; do
      i=$((i + 1))
      sleep 0.1
    done
    if [ -n "$group" ]; then kill -"$sig" -$pid; else kill -"$sig" $pid; fi
    wait $pid
    rc=$?
    step=$(sed -n 's/.*preempted (.*) after step \([0-9]*\):.*/\1/p' "$dir/$name.log" | head -1)
    ckpt=$dir/$name/ckpt_$(printf %08d "${step:-0}").safetensors
    if [ $rc -eq 75 ] && [ -n "$step" ] && [ "$step" -lt 6 ] && [ -e "$ckpt" ] &&
      grep -q "^ddprun: $msg" "$dir/$name.log"; then
      ok "$name with 3 s steps: checkpoint after step $step, exit 75"
      # shellcheck disable=SC2086
      if $run2 $TINY --steps 6 --log-every 1 --resume "$dir/$name" --export "$dir/$name.st" > "$dir/$name.res.log" 2>&1 &&
        cmp -s "$dir/ref.st" "$dir/$name.st"; then
        ok "--resume after the $name ends bit-identical to the uninterrupted run"
      else
        bad "--resume after the $name"; sed 's/^/  | /' "$dir/$name.res.log"
      fi
    else
      bad "$name: exit $rc, step '$step', checkpoint: $(ls "$dir/$name" 2>&1)"; sed 's/^/  | /' "$dir/$name.log"
    fi
  }
  preempt SIGTERM TERM "SIGTERM: passing SIGUSR1 to mpirun"
  if command -v setsid > /dev/null 2>&1 && env --default-signal=INT true 2> /dev/null; then
    preempt Ctrl-C INT "SIGINT: passing SIGUSR1 to mpirun" -g
  else
    echo "skipped: the Ctrl-C case needs setsid and env --default-signal (coreutils 8.31)"
  fi
fi
exit $fail
