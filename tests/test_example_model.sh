#!/bin/sh
# "Bring your own model" as a user does it: install the library into a
# scratch DESTDIR, build examples/mlp_classifier.c with nothing but
# `pkg-config --cflags --libs ddptrain`, and train its model:
#  - 2 ranks equal 1 rank with --accum 2 (weights after SGD, several buckets);
#  - it learns (top-1 accuracy on its held-out records);
#  - checkpoints: --stop-at then --resume equals the uninterrupted run;
#  - its flags are in --help, and misuse is a clear error with exit 2
#    (another model's flag, out-of-range values, a GPU for a CPU-only
#    model) or 1 (a precision the model does not have).
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
fail=0
if ! make -s -C "$top_builddir" install DESTDIR="$dest" > "$dest/install.log" 2>&1; then
  echo "FAIL: make install"; tail -20 "$dest/install.log"; exit 1
fi
pc=$(find "$dest" -name ddptrain.pc | head -n 1)
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$dest
flags=$(pkg-config --cflags --libs ddptrain) || { echo "FAIL: pkg-config ddptrain"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
cc=$(sed -n 's/^CC = //p' "$top_builddir/Makefile")
prog="$dest/mlp_classifier"
# shellcheck disable=SC2086
if ! $cc -std=gnu11 -Wall -Wextra -Werror -o "$prog" "$top_srcdir/examples/mlp_classifier.c" \
     $flags -lm > "$dest/cc.log" 2>&1; then
  echo "FAIL: compiling the example against the installed library"; cat "$dest/cc.log"; exit 1
fi
lines=$(wc -l < "$top_srcdir/examples/mlp_classifier.c")
[ "$lines" -lt 300 ] || { echo "FAIL: the example has $lines lines (the promise is < 300)"; fail=1; }
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
COMPARE="$top_builddir/tests/st_compare"
# SGD: its update is linear in the gradient, so the weights differ exactly as
# much as the reduced gradients do. Buckets of ~250 floats: 3 buckets.
RUN="--threads 1 --peak-gflops 10 --optimizer sgd --lr 0.1 --min-lr 0.01 --warmup 5 \
--batch-size 16 --log-every 10 --eval-every 0 --first-bucket-mb 0.001 --bucket-mb 0.001"
run() { # run NAME NP ARGS...
  name=$1 np=$2
  shift 2
  # shellcheck disable=SC2086
  timeout 300 "$MPIRUN" -np "$np" "$prog" $RUN "$@" > "$dest/$name.log" 2>&1
}
show() { sed 's/^/  | /' "$dest/$1.log"; }

# 1. data parallel: 2 ranks = 1 rank with twice the micro-steps
if run np2 2 --steps 40 --export "$dest/np2.st" && run acc2 1 --steps 40 --accum 2 --export "$dest/acc2.st"; then
  grep -q "3 gradient buckets" "$dest/np2.log" || { echo "FAIL: expected 3 gradient buckets"; show np2; fail=1; }
  if res=$("$COMPARE" "$dest/np2.st" "$dest/acc2.st" 1e-6); then
    echo "ok: 2 ranks equal 1 rank with --accum 2: $res"
  else
    echo "FAIL: 2 ranks differ from 1 rank with --accum 2: $res"; fail=1
  fi
  l2=$(sed -n 's/.*final train loss \([0-9.]*\).*/\1/p' "$dest/np2.log")
  l1=$(sed -n 's/.*final train loss \([0-9.]*\).*/\1/p' "$dest/acc2.log")
  [ -n "$l1" ] && [ "$l1" = "$l2" ] || { echo "FAIL: final losses '$l2' (2 ranks) vs '$l1'"; fail=1; }
else
  echo "FAIL: the example did not train"; show np2; show acc2; fail=1
fi

# 2. it learns: top-1 on the held-out records well above chance (25%)
if run learn 2 --steps 150 --optimizer adamw --lr 0.01 --min-lr 0.001; then
  acc=$(sed -n 's/.*top-1 accuracy \([0-9.]*\)%.*/\1/p' "$dest/learn.log")
  if [ -n "$acc" ] && python3 -c "import sys; sys.exit(0 if float('$acc') >= 80 else 1)"; then
    echo "ok: top-1 accuracy $acc% after 150 steps"
  else
    echo "FAIL: top-1 accuracy '$acc' (expected >= 80%)"; show learn; fail=1
  fi
else
  echo "FAIL: the learning run failed"; show learn; fail=1
fi

# 3. checkpoints: stop at 20, resume to 40 = 40 straight (same seed, same plan)
if run full 2 --steps 40 --export "$dest/full.st" &&
   run first 2 --steps 40 --stop-at 20 --save "$dest/ck" &&
   run second 2 --steps 40 --resume "$dest/ck" --export "$dest/resumed.st"; then
  if res=$("$COMPARE" "$dest/resumed.st" "$dest/full.st" 0); then
    echo "ok: --stop-at 20 + --resume equals 40 uninterrupted steps: $res"
  else
    echo "FAIL: the resumed run differs: $res"; fail=1
  fi
else
  echo "FAIL: the checkpoint runs failed"; show first; show second; fail=1
fi

# A checkpoint of this model refuses another model or another hidden width
# (its ckpt_keys), naming the flag, and writes nothing.
for bad in "--model gpt:--model is 'mlp' there and 'gpt' now" \
           "--mlp-hidden 32:--mlp-hidden is '64' there and '32' now"; do
  flag=${bad%%:*} msg=${bad#*:}
  # shellcheck disable=SC2086
  run refuse 1 --steps 40 --resume "$dest/ck" $flag
  if grep -qF -- "$msg" "$dest/refuse.log"; then
    echo "ok: resuming with $flag is refused: $msg"
  else
    echo "FAIL: resuming with $flag: expected '$msg'"; show refuse; fail=1
  fi
done

# 4. the command line
"$prog" --help > "$dest/help.txt" 2>&1
for want in "Usage: mpirun -np N mlp_classifier" "Model mlp (--model mlp)" "--mlp-hidden H" "Model gpt"; do
  grep -qF -- "$want" "$dest/help.txt" || { echo "FAIL: --help lacks '$want'"; fail=1; }
done
expect() { # expect STATUS MESSAGE ARGS...: a bad command line, refused before training
  status=$1 msg=$2
  shift 2
  "$prog" --threads 1 --steps 2 "$@" > "$dest/bad.log" 2>&1
  rc=$?
  if [ "$rc" -ne "$status" ] || ! grep -qF -- "$msg" "$dest/bad.log"; then
    echo "FAIL: '$*' gave status $rc (expected $status) and not '$msg':"; show bad; fail=1
  else
    echo "ok: '$*' -> $status: $msg"
  fi
}
expect 2 "option --n-layer belongs to --model gpt; this run trains --model mlp" --n-layer 4
expect 2 "option --mlp-hidden: 0 is out of range" --mlp-hidden 0
expect 2 "model mlp runs on the CPU backend only, not 'cuda'" --device cuda
expect 2 "--precision bf16: model mlp computes in fp32 only" --precision bf16
exit $fail
