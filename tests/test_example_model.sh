#!/bin/sh
# "Bring your own model" as a user does it: install the library into a
# scratch DESTDIR, build examples/mlp_classifier.c with nothing but
# `pkg-config --cflags --libs ddptrain`, and train its model:
#  - 2 ranks equal 1 rank with --accum 2 (weights after SGD, several buckets);
#  - it learns (top-1 accuracy on its held-out records);
#  - checkpoints: --stop-at then --resume equals the uninterrupted run;
#  - metrics of a record model: samples/s (global) in the progress lines and
#    samples_per_s in the JSONL, MFU from the model's cost per record (FLOPs
#    per record x records per second / peak), top-1 always and top-5 only
#    with more than 10 classes (eval log line, summary, JSONL val_top5);
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

# 4. metrics: 4 classes (no top-5), then 20 classes (top-5); 2 ranks, so the
# rate must be global. The MLP's cost is a = 6 (H D + K H) FLOPs a record.
check_metrics() { # NAME CLASSES
  python3 - "$dest/$1.jsonl" "$dest/$1.log" "$2" <<'PY'
import json, math, re, sys
path, log, K = sys.argv[1], sys.argv[2], int(sys.argv[3])
recs = [json.loads(l) for l in open(path)]
text = open(log).read()
bad = 0
def check(cond, what):
    global bad
    print(("ok: " if cond else "FAIL: ") + "%d classes: %s" % (K, what))
    bad |= not cond
world, peak, H, D = 2, 10e9, 64, 16
a = 6.0 * (H * D + K * H)
steps = [r for r in recs if r["record"] == "step"]
evals = [r for r in recs if r["record"] == "eval"]
final = [r for r in recs if r["record"] == "final"][0]
check(len(steps) == 4 and len(evals) == 3, "4 step and 3 eval records (got %d, %d)"
      % (len(steps), len(evals)))
for r in steps:
    sps, mfu = r.get("samples_per_s"), r.get("mfu")
    # the count is global: 16 records a micro-batch on each of the 2 ranks
    check(r.get("samples") == 16 * world * r["step"], "step %d: samples %s (both ranks')"
          % (r["step"], r.get("samples")))
    check("tok_per_s" not in r and sps is not None and sps > 0, "step %d: samples_per_s %s"
          % (r["step"], sps))
    check(mfu is not None and 0 < mfu < 1, "step %d: mfu %s in (0, 1)" % (r["step"], mfu))
    if sps and mfu:
        per = mfu * peak * world / sps  # FLOPs per record the MFU counted
        check(abs(per - a) <= 1e-6 * a, "step %d: mfu x peak x ranks / samples_per_s = %.6g "
              "FLOPs a record (the cost's a = %g)" % (r["step"], per, a))
# the line's rate is the JSONL's (global, both ranks), in samples/s
rates = [float(x) for x in re.findall(r"\| (\d+) samples/s \|", text)]
check(len(rates) == len(steps) and all(abs(x - round(r["samples_per_s"])) <= 1
      for x, r in zip(rates, steps)), "progress lines show samples/s = samples_per_s: %s" % rates)
check(final.get("samples_per_s", 0) > 0, "final samples_per_s %s" % final.get("samples_per_s"))
for r in evals + [final]:
    t1, t5 = r.get("top1_acc"), r.get("val_top5")
    if K > 10:
        check(t1 is not None and t5 is not None and t1 <= t5 <= 1,
              "%s: top1_acc %s <= val_top5 %s <= 1" % (r["record"], t1, t5))
    else:
        check(t1 is not None and "val_top5" not in r, "%s: top1_acc %s, no val_top5"
              % (r["record"], t1))
lines5 = re.findall(r"val loss [0-9.]+ \| top-1 ([0-9.]+)% \| top-5 ([0-9.]+)%", text)
summ = re.search(r"top-1 accuracy ([0-9.]+)%(, top-5 ([0-9.]+)%)? on (\d+) held-out records", text)
check(summ is not None, "the summary states the held-out accuracy")
if K > 10:
    check(len(lines5) == 3 and all(float(x) <= float(y) for x, y in lines5),
          "eval lines show top-1 <= top-5: %s" % lines5)
    check(summ is not None and summ.group(3) is not None and
          abs(float(summ.group(3)) - 100 * final["val_top5"]) < 0.051,
          "the summary's top-5 is the final record's")
else:
    check(not lines5 and "top-5" not in text, "no top-5 anywhere")
sys.exit(bad)
PY
}
for k in 4 20; do
  if run metrics$k 2 --steps 40 --eval-every 10 --log-every 10 --optimizer adamw --lr 0.01 \
       --mlp-classes $k --metrics "$dest/metrics$k.jsonl"; then
    check_metrics metrics$k $k || { show metrics$k; fail=1; }
  else
    echo "FAIL: the metrics run with $k classes failed"; show metrics$k; fail=1
  fi
done

# 5. the command line
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
