#!/bin/sh
# Images per second of the image loader alone (the fill: random crop after
# zero padding, flip, per-channel normalisation into fp32 pinned-or-not
# host buffers) for 1 .. N fill threads, on Fashion-MNIST (28x28x1, made
# with ddpprep from the Debian package dataset-fashion-mnist when
# installed) and the built-in image set (32x32x3): builds
# bench/image_loader.c against a build tree's libddpcore and prints a
# markdown table (median of passes).
#
# With TRAIN_MODEL=NAME (an image model registered in the build tree's
# ddptrain, e.g. resnet; TRAIN_PROG names another program built on
# ddp_main, e.g. the test program tests/image_model with its model imglin)
# it then trains that model on the built-in set for
# TRAIN_STEPS steps (default 50) with TRAIN_ARGS and prints the trainer's
# samples/s and its data wait beside the loader's rate: the loader keeps up
# when its images/s on --loader-threads is well above the trainer's.
# Usage: bench/image_loader.sh [build dir, default .] [batch, default 128]
#        [max threads, default nproc] [passes, default 5]
set -eu
build=$(cd "${1:-.}" && pwd)
batch=${2:-128}
threads=${3:-$(nproc)}
passes=${4:-5}
# shellcheck source=bench/c_bench.sh
. "$(dirname "$0")/c_bench.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
c_bench_link image_loader "$work" -lpthread
c_bench_machine
echo
echo "| data | image | batch | threads | images/s | MiB/s written |"
echo "|---|---|---|---|---|---|"
fm=/usr/share/datasets/fashion-mnist
if [ -r "$fm/train-images-idx3-ubyte.gz" ]; then
  "$build/ddpprep" --images idx -o "$work/fm" "$fm/train-images-idx3-ubyte.gz" \
    "$fm/train-labels-idx1-ubyte.gz" > /dev/null 2>&1
  "$work/image_loader" "$work/fm_train.img" "$batch" "$threads" "$passes" 2>> "$work/notes"
else
  echo "Fashion-MNIST skipped: the package dataset-fashion-mnist is not installed" >> "$work/notes"
fi
"$work/image_loader" builtin "$batch" "$threads" "$passes" 2>> "$work/notes"
echo
cat "$work/notes"
if [ -n "${TRAIN_MODEL:-}" ]; then
  echo
  log="$work/train.log"
  # shellcheck disable=SC2086
  if "${TRAIN_PROG:-$build/ddptrain}" --model "$TRAIN_MODEL" --steps "${TRAIN_STEPS:-50}" --batch-size "$batch" \
       --log-every 10 --eval-every 0 ${TRAIN_ARGS:-} > "$log" 2>&1; then
    echo "trainer, --model $TRAIN_MODEL on the built-in set (batch $batch):"
    grep -E "summary: .*samples/s|waiting for data|model:" "$log" | sed 's/^/    /'
  else
    echo "trainer run failed (--model $TRAIN_MODEL):"
    tail -5 "$log" | sed 's/^/    /'
  fi
fi
