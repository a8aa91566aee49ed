#!/bin/bash
# GPT-2 124M on one GPU: ddptrain against PyTorch (eager and torch.compile)
# on the same model, weights and micro-batches, in the same run.
#   model: L12 H12 C768, vocabulary 50257, T 1024; B rows of 1024 tokens per
#   step (synthetic GPT-2 tokens, documents of exactly 1024 tokens: with the
#   closing EOT as a target, one full window each, so no padding and no
#   1-token remainder windows); AdamW, clipping 1.0; bf16 (fp32 master
#   weights).
# ddptrain trains first (dumping its micro-batches and exporting its weights),
# then its variants on the same data: --recompute on (GELU and LayerNorm
# activations recomputed in backward) and --attention matrix (the T x T
# path; flash under --smoke, where auto means matrix), each skipped with a
# line when this ddptrain lacks the flag. PyTorch
# replays the batches from those weights, one process per mode
# (bench/pytorch_gpu_bench.py: eager, eager-sdpa, compile, compile-sdpa).
# Reported: useful tokens/s and ms/step after the first log window, MFU
# against the bf16 GEMM rate ddptrain measures at start-up (PyTorch's MFU uses
# the same peak and FLOP formula: rows*T*(6N + 6*L*C*T) per micro-batch,
# N = V*C + T*C + L*(12C^2 + 13C) + 2C), peak device memory (ddptrain's
# peak_mem_mb, torch.cuda.max_memory_allocated), what recompute costs and
# saves, and the targets as PASS/FAIL lines computed from the figures:
# MFU >= 50%, ddptrain >= 1.1x the fastest torch.compile run.
# Without a Python with CUDA torch the PyTorch rows say why they did not run
# and ddptrain's figures stand alone.
#
# Usage: bench/gpu_gpt2.sh [--smoke] [--out DIR] [--ddptrain PATH] [--steps N]
#          [--rows B] [--torch-modes "eager compile-sdpa"] [--timeout S] [--budget S] [--nvtx] [--keep]
#   --smoke   the plumbing on a CPU: GPT L2 H2 C64 T128, a 512-token
#             vocabulary, 12 steps, --device cpu, PyTorch on the CPU
#   --out     the dated block is appended to DIR/gpu_bench.log, the raw logs
#             kept in DIR/gpu_gpt2-STAMP/ [./bench-out]
#   --timeout seconds allowed to each ddptrain run and each PyTorch mode [300]
#   --budget  seconds for the whole script (0: no limit): runs that would
#             start with less than 10 s left are recorded as not run, and
#             the others' timeouts shortened, so the report is always written
#   --nvtx    pass --nvtx on to ddptrain (for a trace under nsys)
#   --keep    keep the shard, the weights and the batches (deleted otherwise)
# Python: $TORCH_PYTHON, else python3. DDP_COMMIT names the commit when the
# tree has no .git (a packed GPU build).
set -euo pipefail
bench=gpu_gpt2
# shellcheck source=bench/gpu_common.sh
. "$(dirname "$0")/gpu_common.sh"
gpu_parse_args "$@"
steps="" rows=""
set -- ${rest[@]+"${rest[@]}"}
while [ $# -gt 0 ]; do
  case $1 in
    --steps) [ $# -ge 2 ] || gpu_die "--steps needs a value"; steps=$2; shift ;;
    --rows) [ $# -ge 2 ] || gpu_die "--rows needs a value"; rows=$2; shift ;;
    *) gpu_die "unknown argument '$1' (see the header of $0)" ;;
  esac
  shift
done
if [ $smoke = 1 ]; then
  model="--n-layer 2 --n-head 2 --n-embd 64 --seq-len 128" T=128 vocab="--vocab 512" log=4
  steps=${steps:-12} rows=${rows:-4}
else
  model="--n-layer 12 --n-head 12 --n-embd 768 --seq-len 1024" T=1024 vocab="" log=10
  steps=${steps:-40} rows=${rows:-8}
fi
modes=${modes:-eager compile-sdpa}
gpu_int --steps "$steps"
gpu_int --rows "$rows"
[ "$steps" -ge $((2 * log)) ] || gpu_die "--steps must be >= $((2 * log)) (a warm-up log window and one more)"
[ "$rows" -ge 1 ] || gpu_die "--rows must be >= 1"
gpu_setup

# shellcheck disable=SC2086
"$py" "$here/synthetic_shard.py" "$work/data.bin" $((rows * steps + 64)) 1 fixed:$T $vocab \
  > "$work/shard.log"
# shellcheck disable=SC2086
train="--precision bf16 $model --data $work/data.bin --tokens-per-batch $((rows * T)) --steps $steps
  --warmup 5 --lr 1e-4 --min-lr 1e-5 --log-every $log --eval-every 0 --eval-tokens 1"
off=""
gpu_has --recompute && off="--recompute off"
# shellcheck disable=SC2086
gpu_ddp_run ddptrain ddp $train $off --dump-batches "$work/batches.st" --export "$work/weights.st" ||
  { gpu_block gpt2 "ddptrain failed: nothing to compare"; exit 1; }
peak=$("$rpy" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["peak_gflops"] or 0)' "$recs")
variant() { # $1 run name, then the flag and its value
  local name=$1
  shift
  if gpu_has "$1"; then
    # shellcheck disable=SC2086
    gpu_ddp_run "$name" "$(echo "$name" | tr ' ' _)" $train --peak-gflops "$peak" "$@" || true
  else
    echo "$bench: SKIP '$name': this ddptrain has no $1 (not in --help)" >&2
    gpu_skip_record "$name" ddptrain "this ddptrain has no $1"
  fi
}
variant "ddptrain recompute on" --recompute on
# --attention auto means flash on GPUs and matrix on the CPU: try the other one.
if [ $smoke = 1 ]; then alt=flash; else alt=matrix; fi
variant "ddptrain attention $alt" --attention $alt
for m in $modes; do
  gpu_torch_run "$m" "$m" "$work/batches.st" "$work/weights.st" --warmup-steps $log --peak-gflops "$peak"
done
gpu_block gpt2 "model: $model, $rows x $T tokens per step, $steps steps, the first $log excluded"
