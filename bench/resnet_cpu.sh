#!/bin/sh
# CPU benchmark of the ResNet: ddptrain against PyTorch DDP (gloo; its
# convolutions through the same oneDNN) on the same model, data and
# training recipe, 2 ranks x 1 thread each.
#   model: ResNet-18, CIFAR stem (3x3, no max-pool), width 64, 10 classes;
#   data: Fashion-MNIST (Debian's dataset-fashion-mnist), 28x28 centred on
#     32x32, random crop after 4 pixels of padding, horizontal flip,
#     per-channel normalisation; the 10,000 test images held out;
#   recipe: 32 images per rank per step, SGD with Nesterov momentum 0.9,
#     lr 0.05 (linear warmup, cosine to 5e-4), weight decay 5e-4 on
#     convolution and linear weights, no gradient clipping.
# Speed: global images/s over --steps steps after 5 left out, the two
# programs alternated for --rounds rounds (a busy machine slows both alike).
# Learning: top-1 on the held-out images after --train-steps steps (the
# issue's bar: above 85%; the default, 937, is one epoch of 2 x 32 images,
# where 600 steps left ddptrain at 85.0%), each program once (--learn-torch
# 0: ddptrain alone, half the time); 0 skips it.
# Usage: bench/resnet_cpu.sh [--ddptrain PATH] [--ddpprep PATH] [--steps N]
#        [--rounds N] [--train-steps N] [--learn-torch 0|1] [--out DIR]
#        [--ddp-flags "FLAGS"]
#        (run from a build dir); FLAGS are added to ddptrain's, e.g.
#        "--deterministic off" (the autotuned convolutions).
# Needs a Python with torch: $TORCH_PYTHON, else /usr/bin/python3.
set -eu
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
exe=./ddptrain prep=./ddpprep steps=20 rounds=2 train_steps=937 out="" extra="" learn_torch=1
while [ $# -gt 0 ]; do
  case $1 in
    --ddptrain) exe=$2; shift ;;
    --ddpprep) prep=$2; shift ;;
    --steps) steps=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --train-steps) train_steps=$2; shift ;;
    --learn-torch) learn_torch=$2; shift ;;
    --out) out=$2; shift ;;
    --ddp-flags) extra=$2; shift ;;
    -h | --help) sed -n '2,/^set/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "resnet_cpu.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
here=$(cd "$(dirname "$0")" && pwd)
py=${TORCH_PYTHON:-/usr/bin/python3}
fm=/usr/share/datasets/fashion-mnist
[ -r $fm/train-images-idx3-ubyte.gz ] || { echo "resnet_cpu.sh: needs $fm (apt-get install dataset-fashion-mnist)" >&2; exit 2; }
work=${out:-$(mktemp -d)}
mkdir -p "$work"
[ -n "$out" ] || trap 'rm -rf "$work"' EXIT
"$prep" --images idx -o "$work/fm" $fm/train-images-idx3-ubyte.gz $fm/train-labels-idx1-ubyte.gz > /dev/null
"$prep" --images idx -o "$work/fmtest" $fm/t10k-images-idx3-ubyte.gz $fm/t10k-labels-idx1-ubyte.gz > /dev/null
train=$work/fm_train.img test=$work/fmtest_train.img
ddp_flags="--model resnet --depth 18 --stem cifar --width 64 --pad-to 32 --crop-pad 4 --hflip 1
  --batch-size 32 --threads 1 --optimizer sgd --momentum 0.9 --nesterov 1 --lr 0.05 --min-lr 0.0005
  --warmup 20 --weight-decay 5e-4 --grad-clip 0 --data $train"
torch_flags="--data $train --world 2 --threads 1 --depth 18 --width 64 --stem cifar --pad-to 32
  --crop-pad 4 --hflip 1 --batch 32 --lr 0.05 --min-lr 0.0005 --lr-warmup 20 --weight-decay 5e-4"
run_ddp() { # $1 steps, $2 file stem, then more flags
  n=$1 f=$2
  shift 2
  # shellcheck disable=SC2086
  mpirun -np 2 --bind-to none "$exe" $ddp_flags $extra --steps "$n" --log-every 5 --metrics "$work/$f.jsonl" \
    "$@" > "$work/$f.log" 2>&1 || { tail -n 20 "$work/$f.log" >&2; exit 1; }
}
# images/s over the step records after the first (5 steps of warm-up)
ddp_ips() {
  grep '"record":"step"' "$work/$1.jsonl" | tail -n +2 | python3 -c '
import json, sys
r = [json.loads(l) for l in sys.stdin]
t = sum(x["ms_per_step"] for x in r)
print("%.2f %.3f" % (sum(x["samples_per_s"] * x["ms_per_step"] for x in r) / t,
                     sum(x["mfu"] * x["ms_per_step"] for x in r) / t))'
}
jget() { python3 -c "import json,sys; v=json.loads(sys.argv[1]).get(sys.argv[2]); print(v if v is not None else '-')" "$1" "$2"; }
echo "| round | ddptrain img/s | MFU | PyTorch img/s | ratio |"
echo "|---|---|---|---|---|"
i=1 sum_ratio=0
while [ $i -le "$rounds" ]; do
  run_ddp $((steps + 5)) "speed$i" --eval-every 0
  set -- $(ddp_ips "speed$i")
  d_ips=$1 d_mfu=$2
  # shellcheck disable=SC2086
  tj=$("$py" "$here/pytorch_resnet_bench.py" $torch_flags --steps $((steps + 5)) --warmup 5 --port $((29600 + i)))
  t_ips=$(jget "$tj" images_per_s)
  r=$(python3 -c "print('%.2f' % ($d_ips / $t_ips))")
  echo "| $i | $d_ips | $d_mfu | $t_ips | $r |"
  sum_ratio=$(python3 -c "print($sum_ratio + $r)")
  i=$((i + 1))
done
[ "$rounds" -gt 0 ] &&
  echo "mean ratio ddptrain / PyTorch $(jget "$tj" torch): $(python3 -c "print('%.2f' % ($sum_ratio / $rounds))") (target >= 1.2)"
[ "$train_steps" -gt 0 ] || exit 0
run_ddp "$train_steps" learn --eval-every 0 --val-data "$test"
d_top1=$(grep '"record":"final"' "$work/learn.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["top1_acc"])')
t_top1="not run (--learn-torch 0)"
if [ "$learn_torch" = 1 ]; then
  # shellcheck disable=SC2086
  tj=$("$py" "$here/pytorch_resnet_bench.py" $torch_flags --val-data "$test" --steps "$train_steps" --warmup 5 --port 29650)
  t_top1=$(jget "$tj" top1)
fi
echo "| after $train_steps steps (2 x 32 images each) | held-out top-1 |"
echo "|---|---|"
echo "| ddptrain | $d_top1 |"
echo "| PyTorch | $t_top1 |"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0.85 else 1)" "$d_top1" &&
  echo "PASS: ddptrain top-1 above 0.85" || echo "FAIL: ddptrain top-1 not above 0.85"
