#!/bin/bash
# Variable-length documents on one GPU: useful (target) tokens/s of ddptrain's
# length-bucketing sampler against the two usual PyTorch pipelines, on the
# same documents, in the same run.
#   data: synthetic GPT-2 documents, log-normal lengths (median 200 tokens,
#   sigma 1, clipped to 2..1024; bench/synthetic_shard.py lognormal:200:1024,
#   seed 1), so every document fits one 1024-token row.
#   model: GPT-2 124M (L12 H12 C768, T 1024), bf16, AdamW, one GPU.
# ddptrain: --sampler bucket with a budget of B x 1024 padded tokens per
# micro-batch (the tokens per step of bench/gpu_gpt2.sh's fixed-length run),
# dumping the micro-batches it trained on and exporting its weights.
# PyTorch (bench/pytorch_gpu_bench.py, from those weights):
#   pad-*     (a) every document of those micro-batches padded to 1024, B
#             documents per batch: the same target tokens, fixed shapes;
#   bucket-*  (b) ddptrain's own bucketed micro-batches replayed, compiled
#             with dynamic shapes (torch.compile(dynamic=True));
# each eager and compiled with SDPA (flash where the GPU has it) by default.
# Targets, PASS/FAIL from the figures: ddptrain >= 2x the fastest compiled
# (a), >= 1.15x the fastest compiled (b).
#
# Usage: bench/gpu_varlen.sh [--smoke] [--out DIR] [--ddptrain PATH] [--steps N]
#          [--rows B] [--docs N] [--torch-modes "eager compile-sdpa"]
#          [--timeout S] [--budget S] [--nvtx] [--keep]
#   --smoke   the plumbing on a CPU: GPT L2 H2 C64 T128, a 512-token
#             vocabulary, lengths lognormal:25:128, 12 steps, --device cpu
#   --docs    documents in the shard [20000]; the sampler sorts them by
#             length within chunks and deals the micro-batches shuffled, so
#             the trained steps sample the whole length range
#   other options as in bench/gpu_gpt2.sh
set -euo pipefail
bench=gpu_varlen
# shellcheck source=bench/gpu_common.sh
. "$(dirname "$0")/gpu_common.sh"
gpu_parse_args "$@"
steps="" rows="" docs=""
set -- ${rest[@]+"${rest[@]}"}
while [ $# -gt 0 ]; do
  case $1 in
    --steps) [ $# -ge 2 ] || gpu_die "--steps needs a value"; steps=$2; shift ;;
    --rows) [ $# -ge 2 ] || gpu_die "--rows needs a value"; rows=$2; shift ;;
    --docs) [ $# -ge 2 ] || gpu_die "--docs needs a value"; docs=$2; shift ;;
    *) gpu_die "unknown argument '$1' (see the header of $0)" ;;
  esac
  shift
done
if [ $smoke = 1 ]; then
  model="--n-layer 2 --n-head 2 --n-embd 64 --seq-len 128" T=128 log=4
  shard="lognormal:25:128 --vocab 512"
  steps=${steps:-12} rows=${rows:-4} docs=${docs:-2000}
else
  model="--n-layer 12 --n-head 12 --n-embd 768 --seq-len 1024" T=1024 log=10
  shard="lognormal:200:1024"
  steps=${steps:-60} rows=${rows:-8} docs=${docs:-20000}
fi
modes=${modes:-eager compile-sdpa}
gpu_int --steps "$steps"
gpu_int --rows "$rows"
gpu_int --docs "$docs"
[ "$steps" -ge $((2 * log)) ] || gpu_die "--steps must be >= $((2 * log)) (a warm-up log window and one more)"
[ "$rows" -ge 1 ] || gpu_die "--rows must be >= 1"
gpu_setup

# shellcheck disable=SC2086
"$py" "$here/synthetic_shard.py" "$work/data.bin" "$docs" 1 $shard > "$work/shard.log"
# shellcheck disable=SC2086
gpu_ddp_run ddptrain ddp --precision bf16 $model --data "$work/data.bin" --sampler bucket \
  --tokens-per-batch $((rows * T)) --steps "$steps" --warmup 5 --lr 1e-4 --min-lr 1e-5 \
  --log-every $log --eval-every 0 --eval-tokens 1 --dump-batches "$work/batches.st" \
  --export "$work/weights.st" ||
  { gpu_block varlen "ddptrain failed: nothing to compare"; exit 1; }
peak=$("$rpy" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["peak_gflops"] or 0)' "$recs")
common=("$work/batches.st" "$work/weights.st" --warmup-steps "$log" --peak-gflops "$peak")
for m in $modes; do
  gpu_torch_run "pad-$m" "$m" "${common[@]}" --repack-rows "$rows" --repack-len $T
done
for m in $modes; do
  gpu_torch_run "bucket-$m" "$m" "${common[@]}" --dynamic
done
gpu_block varlen "model: $model; shard: $(sed 's/^[^:]*: //' "$work/shard.log"); ddptrain bucket sampler, $((rows * T)) padded tokens per micro-batch, $steps steps; pad-*: $rows x $T rows per batch; the first $log steps of each run excluded"
