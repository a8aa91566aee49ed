#!/bin/sh
# The ddptrain program as a user meets it: --help, --version, --build-info,
# --self-test and a short training job as a single process, and bad command
# lines, flags that cannot go together included (exit 2 with one clear line,
# nothing else run).
. "${top_builddir:-.}/tests/env.sh"
set -u
fail=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

check() { # description, expected-exit, expected-text, command...
  desc=$1 want=$2 text=$3
  shift 3
  "$@" > "$out" 2>&1
  rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL: $desc: exit $rc, expected $want"; sed 's/^/  | /' "$out"; fail=1; return
  fi
  if [ -n "$text" ] && ! grep -qF -- "$text" "$out"; then
    echo "FAIL: $desc: output lacks '$text'"; sed 's/^/  | /' "$out"; fail=1; return
  fi
  echo "ok: $desc"
}

check "--help" 0 "Usage: mpirun -np N ddptrain" "$DDPTRAIN" --help
check "-h lists environment" 0 "DDPTRAIN_LOG_LEVEL" "$DDPTRAIN" -h
check "--version" 0 "ddptrain 0.1.0" "$DDPTRAIN" --version
check "--build-info" 0 "OpenBLAS" "$DDPTRAIN" --build-info
check "self-test, singleton" 0 "smoke job passed on 1 rank" "$DDPTRAIN" --self-test --threads 1
check "given peak is used" 0 "GEMM peak given: 123.0 GFLOP/s" "$DDPTRAIN" --self-test --peak-gflops 123
# shellcheck disable=SC2086
check "short training job" 0 "step     4/4 | loss" "$DDPTRAIN" $TINY
check "unknown flag" 2 "unknown option '--sed'; did you mean '--seed'?" "$DDPTRAIN" --sed 3
check "invalid number" 2 "option --threads: 'two' is not an integer" "$DDPTRAIN" --threads two
check "out of range" 2 "option --threads: 5000 is out of range [0, 4096]" "$DDPTRAIN" --threads 5000
check "missing value" 2 "option --seed needs a value" "$DDPTRAIN" --seed
check "bad device" 2 "option --device: 'tpu' is not valid" "$DDPTRAIN" --device tpu
check "bad --tf32" 2 "option --tf32: 'maybe' is not valid" "$DDPTRAIN" --tf32 maybe
check "--help explains --tf32" 0 "TF32 tensor cores" "$DDPTRAIN" --help
check "bad --deterministic" 2 "option --deterministic: 'maybe' is not valid" "$DDPTRAIN" --deterministic maybe
check "--help explains --deterministic" 0 "repeat their results bit for bit" "$DDPTRAIN" --help
check "bad --recompute" 2 "option --recompute: 'yes' is not valid" "$DDPTRAIN" --recompute yes
check "--help explains --recompute" 0 "recompute LayerNorm and GELU outputs" "$DDPTRAIN" --help
check "bad --attention" 2 "option --attention: 'fast' is not valid" "$DDPTRAIN" --attention fast
check "--help explains --attention" 0 "no T x T probabilities kept" "$DDPTRAIN" --help
# shellcheck disable=SC2086
check "--attention flash on the CPU" 0 "flash attention;" "$DDPTRAIN" $TINY --attention flash
# shellcheck disable=SC2086
check "--attention auto is matrix on the CPU" 0 "matrix attention;" "$DDPTRAIN" $TINY --device cpu
check "bad --nvtx" 2 "option --nvtx: '1' is not valid" "$DDPTRAIN" --nvtx 1
check "--help explains --nvtx" 0 "NVTX ranges" "$DDPTRAIN" --help
if "$DDPTRAIN" --build-info | grep -q "^  CUDA  *yes"; then
  # shellcheck disable=SC2086
  check "--nvtx on runs" 0 "NVTX ranges on" "$DDPTRAIN" $TINY --nvtx on
else
  # shellcheck disable=SC2086
  check "--nvtx on without CUDA" 1 "this build has no CUDA" "$DDPTRAIN" $TINY --nvtx on
fi
check "bad --cuda-graphs" 2 "option --cuda-graphs: 'yes' is not valid" "$DDPTRAIN" --cuda-graphs yes
check "--help explains --cuda-graphs" 0 "record each kind of training pass once as CUDA graphs" "$DDPTRAIN" --help
check "--cuda-graphs on with --device cpu" 2 "option --cuda-graphs on cannot go with --device cpu" \
  "$DDPTRAIN" --device cpu --cuda-graphs on
check "--cuda-graphs on with --nvtx on" 2 "option --cuda-graphs on cannot go with --nvtx on" \
  "$DDPTRAIN" --cuda-graphs on --nvtx on
check "--cuda-graphs on with --detect-anomaly" 2 "cannot go with --detect-anomaly" \
  "$DDPTRAIN" --cuda-graphs on --detect-anomaly
check "--cuda-graphs on with --trace" 2 "option --cuda-graphs on cannot go with --trace" \
  "$DDPTRAIN" --cuda-graphs on --trace "$out.trace.json"
if ! "$DDPTRAIN" --build-info | grep -q "^  CUDA  *yes" || ! nvidia-smi -L 2> /dev/null | grep -q GPU; then
  # --device auto lands on the CPU: the trainer says so once the backend is known
  # shellcheck disable=SC2086
  check "--cuda-graphs on where auto picks the CPU" 1 "--cuda-graphs on cannot be used here: the backend runs its work on the host" \
    "$DDPTRAIN" $TINY --cuda-graphs on
fi
# shellcheck disable=SC2086
check "--cuda-graphs auto on the CPU runs" 0 "step     4/4 | loss" "$DDPTRAIN" $TINY --cuda-graphs auto
check "unknown --model" 2 "option --model: 'resnet9' is not valid" "$DDPTRAIN" --model resnet9
check "--help has a section per model" 0 "Model gpt (--model gpt)" "$DDPTRAIN" --help
check "--adam-eps must be positive" 2 "option --adam-eps: 0 is out of range" "$DDPTRAIN" --adam-eps 0
# --adam-eps reaches the optimizer: a large epsilon changes the first steps
# shellcheck disable=SC2086
"$DDPTRAIN" $TINY > "$out.eps1" 2>&1
# shellcheck disable=SC2086
"$DDPTRAIN" $TINY --adam-eps 0.1 > "$out.eps2" 2>&1
l1=$(sed -n 's/.*step     4\/4 | loss \([0-9.]*\).*/\1/p' "$out.eps1")
l2=$(sed -n 's/.*step     4\/4 | loss \([0-9.]*\).*/\1/p' "$out.eps2")
if [ -n "$l1" ] && [ -n "$l2" ] && [ "$l1" != "$l2" ]; then
  echo "ok: --adam-eps 0.1 changes the loss after 4 steps ($l1 -> $l2)"
else
  echo "FAIL: --adam-eps had no effect ('$l1' vs '$l2')"; fail=1
fi
rm -f "$out.eps1" "$out.eps2"
# Combinations of flags are command-line errors too: exit 2 and exactly one
# line, before the ranks start (no start-up line precedes it).
check1() { # like check, and the output is that one line
  check "$@"
  if [ "$(wc -l < "$out")" -ne 1 ]; then
    echo "FAIL: $1: $(wc -l < "$out") lines of output, expected 1"; sed 's/^/  | /' "$out"; fail=1
  fi
}
# shellcheck disable=SC2086
check1 "--n-embd not a multiple of --n-head" 2 "option --n-embd 7 is not a multiple of --n-head 2" \
  "$DDPTRAIN" $TINY --n-embd 7 --n-head 2
# shellcheck disable=SC2086
check1 "--tokens-per-batch below one row" 2 \
  "option --tokens-per-batch 10 is smaller than --seq-len 48" "$DDPTRAIN" $TINY --tokens-per-batch 10
# shellcheck disable=SC2086
check1 "--min-lr above --lr" 2 "option --min-lr 0.5 exceeds --lr 0.1" \
  "$DDPTRAIN" $TINY --lr 0.1 --min-lr 0.5
# shellcheck disable=SC2086
check1 "--val-data without --data" 2 "option --val-data needs --data" \
  "$DDPTRAIN" $TINY --val-data v.bin
# shellcheck disable=SC2086
check1 "--tasks with --data" 2 "option --tasks copy: the task mix is the built-in data set's" \
  "$DDPTRAIN" $TINY --data x.bin --tasks copy
# shellcheck disable=SC2086
check1 "--tasks naming no task" 2 "option --tasks: task mix 'copy,mul': 'mul' is not a task" \
  "$DDPTRAIN" $TINY --tasks copy,mul
# shellcheck disable=SC2086
check1 "--tasks with a bad weight" 2 "the weight of sort is not a whole number from 0 to 1000" \
  "$DDPTRAIN" $TINY --tasks sort=-2
# shellcheck disable=SC2086
check1 "--tasks all zero" 2 "every weight is 0 (no task to draw)" "$DDPTRAIN" $TINY --tasks add=0
# shellcheck disable=SC2086
check "--tasks copy trains on copy lines only" 0 "task accuracy 0.0% on" "$DDPTRAIN" $TINY --tasks copy
if grep -q "held-out documents (copy [0-9.]*%)$" "$out" && grep -q "summary:   copy    c:" "$out" &&
  ! grep -q "summary:   \(reverse\|sort\|add\) " "$out"; then
  echo "ok: --tasks copy: accuracy and the example answer are copy's alone"
else
  echo "FAIL: --tasks copy summary"; grep summary "$out" | sed 's/^/  | /'; fail=1
fi
# shellcheck disable=SC2086
check1 "--resume auto without --save" 2 "option --resume auto needs --save DIR" \
  "$DDPTRAIN" $TINY --resume auto
# shellcheck disable=SC2086
check1 "--save-every without --save" 2 "option --save-every 5 needs --save DIR" \
  "$DDPTRAIN" $TINY --save-every 5
# shellcheck disable=SC2086
check1 "--loss-scale-min above --loss-scale-init" 2 \
  "option --loss-scale-min 100 exceeds --loss-scale-init 10" \
  "$DDPTRAIN" $TINY --precision fp16 --loss-scale-init 10 --loss-scale-min 100
# shellcheck disable=SC2086
check1 "--plan-only checks combinations too" 2 "option --tokens-per-batch 10 is smaller" \
  "$DDPTRAIN" $TINY --tokens-per-batch 10 --plan-only
# --conv-algos: a bad record names its file and line; an explicit path
# that cannot be created is refused before training; a good one is read
# (the CPU records nothing, so it stays as it was)
algos=$(mktemp)
printf '# ddptrain convolution algorithms v1\nconv_fwd bf16 N=2\n' > "$algos"
# shellcheck disable=SC2086
check "--conv-algos: a malformed record" 1 "$algos line 2: 3 fields, expected 15" \
  "$DDPTRAIN" $TINY --conv-algos "$algos"
# shellcheck disable=SC2086
check "--conv-algos: a folder that does not exist" 1 \
  "--conv-algos /nonexistent-dir/a.txt: cannot create a file in /nonexistent-dir" \
  "$DDPTRAIN" $TINY --conv-algos /nonexistent-dir/a.txt
printf '# ddptrain convolution algorithms v1\nconv_fwd bf16 N=2 H=9 W=9 C=8 K=16 R=3 S=3 stride=1 pad=1 det=1 tf32=1 algo=1 math=1\n' > "$algos"
cp "$algos" "$algos.orig"
# shellcheck disable=SC2086
check "--conv-algos: a good record is read" 0 "--conv-algos: 1 convolution algorithm choices from" \
  "$DDPTRAIN" $TINY --conv-algos "$algos"
if cmp -s "$algos" "$algos.orig"; then
  echo "ok: --conv-algos: the CPU leaves the record as it was"
else
  echo "FAIL: --conv-algos: the CPU run changed the record"; fail=1
fi
rm -f "$algos" "$algos.orig"
check "--help explains --conv-algos" 0 "the record of the convolution algorithms" "$DDPTRAIN" --help
check "stray argument" 2 "unexpected argument 'data.bin'" "$DDPTRAIN" data.bin
check "bad DDPTRAIN_LOG_LEVEL" 2 "DDPTRAIN_LOG_LEVEL='loud'" env DDPTRAIN_LOG_LEVEL=loud "$DDPTRAIN"
check "unknown DDPTRAIN_ variable warned" 0 "DDPTRAIN_LOG_LEVL is not a ddptrain setting" \
  env DDPTRAIN_LOG_LEVL=debug "$DDPTRAIN" --self-test --threads 1 --peak-gflops 1
if "$DDPTRAIN" --build-info | grep -q "GPUs\? visible" && ! "$DDPTRAIN" --build-info | grep -q " 0 GPUs visible"; then
  echo "skip: explicit cuda without a GPU (this host has one)"
else
  check "explicit cuda without a GPU" 1 "rank 0 on" "$DDPTRAIN" --device cuda
fi
exit $fail
