#!/bin/bash
# ResNet-50 on one GPU: ddptrain against PyTorch (eager and torch.compile)
# on the same net and batch, in the same run.
#   model: ResNet-50 (bottleneck blocks, ImageNet stem, width 64), 1000
#   classes, 224 x 224 x 3 images, B images per step; bf16 (fp32 master
#   weights), channels-last (ddptrain keeps NHWC always); SGD with Nesterov
#   momentum, no clipping. ddptrain reads a synthetic image shard
#   (bench/image_shard.py: random pixels and labels) through its loader;
#   PyTorch (bench/pytorch_resnet_gpu_bench.py: AMP bf16, channels_last,
#   cudnn.benchmark) cycles random images already on the GPU, one process
#   per mode.
# Runs, cheapest first, so a short --budget still gets ddptrain's figures
# and costs (torch.compile alone takes a minute or more):
#   ddptrain                     --deterministic on (the default)
#   ddptrain deterministic off   cuDNN may pick atomics-based algorithms
#   ddptrain cuda graphs off     every kernel and cuDNN call launched by the
#                                host, step after step (--cuda-graphs off)
#   ddptrain set-up baseline     ResNet-10, width 8, batch 2, 2 steps on the
#                                same shard and device: a set-up with almost
#                                no algorithm search
#   pytorch-eager, pytorch-compile (--torch-modes, in its order)
# Reported: images/s and ms/step after the first log window, MFU against the
# bf16 GEMM peak ddptrain measures at start-up (PyTorch's from ddptrain's
# FLOPs per image and the same peak), peak device memory (ddptrain's
# peak_mem_mb, torch.cuda.max_memory_allocated), and the costs asked for:
#   autotuning    ddptrain searches cuDNN's algorithms for every convolution
#                 shape in the run's precision when the first forward makes
#                 the activations (conv_prepare), so its cost is in the first
#                 log window against the later ones (builds before that one
#                 searched while making the model, in the trainer's set-up
#                 time, the metrics header's elapsed_s, listed against the
#                 baseline's);
#                 PyTorch's warm-up time is listed beside it;
#   determinism   --deterministic off against on: images/s and set-up.
# Target, as a PASS/FAIL line: ddptrain >= 1.1x the fastest torch.compile
# run (judged only when ddptrain ran bf16). A ddptrain without bf16 for the
# ResNet (exit 2, "--precision bf16 ...") is recorded as such and its fp32
# runs stand in, marked fp32 (no verdict).
#
# Usage: bench/gpu_resnet.sh [--smoke] [--out DIR] [--ddptrain PATH] [--steps N]
#          [--batch B] [--images N] [--torch-modes "eager compile"] [--timeout S]
#          [--budget S] [--nvtx] [--keep]
#   --smoke   the plumbing on a CPU: ResNet-10, width 8, 32 x 32 images, 10
#             classes, batch 8, 2 steps, --device cpu (PyTorch's GPU
#             benchmark then records that it has no CUDA device)
#   --steps   ddptrain's steps, logged every 5 (smoke: 1), the first window
#             excluded [40]; PyTorch times 30 steps after 10 warm-up ones
#   --batch   images per step, both frameworks [128]
#   --images  images in the synthetic shard [1024]
#   --out     the dated block is appended to DIR/gpu_bench.log, the raw logs
#             kept in DIR/gpu_resnet-STAMP/ [./bench-out]
#   --timeout seconds allowed to each ddptrain run and each PyTorch mode [300]
#   --budget  seconds for the whole script (0: no limit): runs that would
#             start with less than 10 s left are recorded as not run
#   --nvtx    pass --nvtx on to ddptrain (for a trace under nsys)
#   --keep    keep the image shard (deleted otherwise)
# Python: $TORCH_PYTHON, else python3. DDP_COMMIT names the commit when the
# tree has no .git (a packed GPU build).
set -euo pipefail
bench=gpu_resnet
# shellcheck source=bench/gpu_common.sh
. "$(dirname "$0")/gpu_common.sh"
gpu_parse_args "$@"
steps="" batch="" images=""
set -- ${rest[@]+"${rest[@]}"}
while [ $# -gt 0 ]; do
  case $1 in
    --steps) [ $# -ge 2 ] || gpu_die "--steps needs a value"; steps=$2; shift ;;
    --batch) [ $# -ge 2 ] || gpu_die "--batch needs a value"; batch=$2; shift ;;
    --images) [ $# -ge 2 ] || gpu_die "--images needs a value"; images=$2; shift ;;
    *) gpu_die "unknown argument '$1' (see the header of $0)" ;;
  esac
  shift
done
if [ $smoke = 1 ]; then
  depth=10 width=8 size=32 classes=10 log=1 loaders=1
  steps=${steps:-2} batch=${batch:-8} images=${images:-64} tsteps=2 twarm=1
else
  depth=50 width=64 size=224 classes=1000 log=5
  loaders=$(nproc 2> /dev/null || echo 2)
  loaders=$((loaders > 8 ? 8 : loaders))
  steps=${steps:-40} batch=${batch:-128} images=${images:-1024} tsteps=30 twarm=10
fi
modes=${modes:-eager compile}
gpu_int --steps "$steps"
gpu_int --batch "$batch"
gpu_int --images "$images"
[ "$steps" -ge $((2 * log)) ] || gpu_die "--steps must be >= $((2 * log)) (a warm-up log window and one more)"
[ "$batch" -ge 2 ] || gpu_die "--batch must be >= 2 (BatchNorm needs 2 values a channel)"
[ "$images" -ge "$batch" ] || gpu_die "--images ($images) must be >= --batch ($batch)"
for m in $modes; do
  case $m in eager | compile) ;; *) gpu_die "--torch-modes takes eager and compile, not '$m'" ;; esac
done
gpu_setup
[ $keep = 1 ] || trap 'rm -f "$work"/*.img "$work"/*.bin "$work"/*.st' EXIT

"$rpy" "$here/image_shard.py" "$work/data.img" "$images" "$size" --classes "$classes" \
  > "$work/shard.log" 2>&1 || { cat "$work/shard.log" >&2; gpu_die "cannot write the image shard"; }
net="--model resnet --depth $depth --width $width --stem imagenet"
# shellcheck disable=SC2086
train="--data $work/data.img --batch-size $batch --steps $steps --log-every $log --eval-every 0
  --optimizer sgd --lr 0.1 --min-lr 0.001 --warmup 5 --weight-decay 5e-5 --grad-clip 0
  --loader-threads $loaders"
prec=bf16
# shellcheck disable=SC2086
if ! gpu_ddp_run ddptrain ddp $net --precision $prec $train; then
  if grep -q -- "--precision $prec" "$work/ddp.log"; then
    # This ddptrain trains the ResNet in fp32 only: its figures still
    # say something, under their own name and with no verdict.
    echo "$bench: this ddptrain has no $prec ResNet; its fp32 runs stand in" >&2
    prec=fp32
    gpu_ddp_run "ddptrain fp32" ddp32 $net --precision $prec $train ||
      { gpu_block resnet "ddptrain failed: nothing to compare"; exit 1; }
  else
    gpu_block resnet "ddptrain failed: nothing to compare"
    exit 1
  fi
fi
ref=ddptrain
[ $prec = bf16 ] || ref="ddptrain fp32"
peak=$("$rpy" -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "skipped" not in r:
        print(r["peak_gflops"] or 0); break' "$recs")

torch_run() { # $1 mode: one pytorch_resnet_gpu_bench.py process, one record
  local mode=$1 name=pytorch-$1 rc=0 f t
  f=$work/torch-$mode
  if [ -z "$torch_ver" ]; then
    gpu_skip_record "$name" pytorch "no torch in $py"
    return 0
  fi
  gpu_out_of_time "$name" pytorch && return 0
  t=$(gpu_time_for)
  timeout -k 10 "$t" "$py" "$here/pytorch_resnet_gpu_bench.py" --mode "$mode" --label pytorch \
    --depth $depth --width $width --stem imagenet --classes $classes --size $size --batch "$batch" \
    --steps $tsteps --warmup $twarm > "$f.json" 2> "$f.err" || rc=$?
  if [ $rc = 0 ] && [ -s "$f.json" ]; then
    # A mode that failed inside prints {"run": MODE, "skipped": ...}: name it
    # as the others, so the report knows its framework and mode.
    "$rpy" -c 'import json,sys
r = json.loads(open(sys.argv[1]).readline())
r.update(run=sys.argv[2], framework="pytorch", mode=sys.argv[3])
print(json.dumps(r))' "$f.json" "$name" "$mode" >> "$recs"
  else
    echo "$bench: PyTorch run $name failed (exit $rc):" >&2
    tail -n 15 "$f.err" | sed 's/^/  | /' >&2
    gpu_skip_record "$name" pytorch "failed: exit $rc$([ $rc = 124 ] || [ $rc = 137 ] && echo ", timed out after ${t}s"), see $f.err"
  fi
}
if gpu_has --deterministic; then
  # shellcheck disable=SC2086
  gpu_ddp_run "$ref deterministic off" ddp_nondet $net --precision $prec $train --peak-gflops "$peak" \
    --deterministic off || true
else
  echo "$bench: SKIP '$ref deterministic off': this ddptrain has no --deterministic" >&2
  gpu_skip_record "$ref deterministic off" ddptrain "this ddptrain has no --deterministic"
fi
if gpu_has --cuda-graphs; then
  # shellcheck disable=SC2086
  gpu_ddp_run "$ref cuda graphs off" ddp_nographs $net --precision $prec $train \
    --peak-gflops "$peak" --cuda-graphs off || true
fi
# The set-up of a net with next to no algorithm search, on the same shard
# and device: what the full net's set-up costs beyond it is the search and
# the building of the net.
# shellcheck disable=SC2086
record_args="--field role setup-baseline" gpu_ddp_run "ddptrain set-up baseline" ddp_base \
  --model resnet --depth 10 --width 8 --stem imagenet --precision $prec --data "$work/data.img" \
  --batch-size 2 --steps 2 --log-every 1 --eval-every 0 --optimizer sgd --warmup 1 --grad-clip 0 \
  --peak-gflops "$peak" || true
for m in $modes; do
  torch_run "$m"
done

gpu_block resnet "model: ResNet-$depth width $width, imagenet stem, ${size}x$size, $classes classes; ddptrain $prec, $batch images per step, $steps steps logged every $log, the first window excluded; PyTorch $tsteps steps after $twarm" --ref "$ref"
