#!/bin/sh
# Image models (docs/design.md §4.4), trained through tests/image_model (a
# linear classifier on pixels registered from its own program, as a user's
# model is):
#  - the built-in image set with no files: 2 ranks equal 1 rank with
#    --accum 2 bit for bit (augmentation is drawn per item, never per rank),
#    so do 2 fill threads and a synchronous loader, and a run without flips
#    differs (the augmentation is in the batches);
#  - --stop-at + --resume equals the uninterrupted run bit for bit (the same
#    pixels are replayed); resuming with another augmentation warns, on
#    another image shard is refused;
#  - a Fashion-MNIST shard made by ddpprep (SKIPped when the Debian package
#    is absent): it learns, and 2 ranks equal 1 rank with --accum 2;
#  - the remainder of an epoch is dropped and said so, --plan-only too;
#  - bad combinations are one line and exit 2: an image model given another
#    file, a record or token model given an image shard or an image flag,
#    bad flag values.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
prog="$top_builddir/tests/image_model"
COMPARE="$top_builddir/tests/st_compare"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
RUN="--threads 1 --peak-gflops 10 --optimizer sgd --lr 0.05 --min-lr 0.005 --warmup 2 \
--batch-size 24 --log-every 4 --eval-every 0"
run() { # run NAME NP ARGS...
  name=$1 np=$2
  shift 2
  # shellcheck disable=SC2086
  timeout 300 "$MPIRUN" -np "$np" "$prog" $RUN "$@" > "$dir/$name.log" 2>&1
}
show() { sed 's/^/  | /' "$dir/$1.log"; }
same() { # same DESC A.st B.st: bit for bit
  if res=$("$COMPARE" "$2" "$3" 0); then echo "ok: $1: $res"; else echo "FAIL: $1: $res"; fail=1; fi
}
final_loss() { sed -n 's/.*final train loss \([0-9.]*\).*/\1/p' "$dir/$1.log"; }

# a small image shard: two CIFAR-10 records (a label byte, 3072 pixel bytes)
{ printf '\003'; head -c 3072 /dev/zero; printf '\007'; head -c 3072 /dev/zero; } > "$dir/c10.bin"
"$top_builddir/ddpprep" --images cifar10 -o "$dir/tiny" "$dir/c10.bin" > "$dir/prep-tiny.log" 2>&1 ||
  { echo "FAIL: ddpprep --images cifar10"; show prep-tiny; fail=1; }

# 1. the built-in set: 2 ranks = 1 rank x accum 2, bit for bit
if run np2 2 --steps 12 --export "$dir/np2.st" && run acc2 1 --steps 12 --accum 2 --export "$dir/acc2.st" &&
   run noflip 1 --steps 12 --accum 2 --hflip 0 --export "$dir/noflip.st"; then
  same "built-in images: 2 ranks equal 1 rank with --accum 2" "$dir/np2.st" "$dir/acc2.st"
  [ "$(final_loss np2)" = "$(final_loss acc2)" ] ||
    { echo "FAIL: final losses '$(final_loss np2)' vs '$(final_loss acc2)'"; fail=1; }
  if "$COMPARE" "$dir/noflip.st" "$dir/acc2.st" 0 > /dev/null 2>&1; then
    echo "FAIL: --hflip 0 trained the same weights (no augmentation in the batches?)"; fail=1
  fi
  for want in "data: 20000 images 32x32x3, 10 classes (built-in images" "crop-pad 4, hflip 1" \
              "plan: 32 of 20000 records per epoch dropped (the remainder of whole steps of 2 x 1 x 24)" \
              "data wait" "normalisation: mean" "; 1 loader thread (auto)"; do
    grep -qF -- "$want" "$dir/np2.log" || { echo "FAIL: the log lacks '$want'"; show np2; fail=1; }
  done
else
  echo "FAIL: training on the built-in images failed"; show np2; show acc2; show noflip; fail=1
fi

# the fill's threads and the loader thread change nothing: 2 fill threads,
# filled on the step loop's thread (DDPTRAIN_LOADER_SYNC=1)
if DDPTRAIN_LOADER_SYNC=1 run threads 1 --steps 12 --accum 2 --loader-threads 2 --export "$dir/threads.st"; then
  same "--loader-threads 2 and a synchronous loader equal the defaults" "$dir/threads.st" "$dir/acc2.st"
  grep -qF "; 2 loader threads" "$dir/threads.log" ||
    { echo "FAIL: the log does not say '2 loader threads'"; show threads; fail=1; }
else
  echo "FAIL: the --loader-threads run failed"; show threads; fail=1
fi

# 2. resume replays the same pixels: stop at 6, resume to 12 = 12 straight
if run first 2 --steps 12 --stop-at 6 --save "$dir/ck" &&
   run second 2 --steps 12 --resume "$dir/ck" --export "$dir/resumed.st"; then
  same "--stop-at 6 + --resume equals 12 uninterrupted steps" "$dir/resumed.st" "$dir/np2.st"
else
  echo "FAIL: the checkpoint runs failed"; show first; show second; fail=1
fi
# another augmentation is a legitimate choice, but the run is no longer the
# uninterrupted one: a warning (§3.6)
if run other 1 --steps 8 --resume "$dir/ck" --hflip 0 &&
   grep -qF "resume: --hflip is '0' now, '1' in the run that wrote" "$dir/other.log"; then
  echo "ok: resuming with --hflip 0 warns"
else
  echo "FAIL: resuming with --hflip 0"; show other; fail=1
fi
# other images are other data: refused, naming the flag
run otherdata 1 --steps 8 --batch-size 2 --resume "$dir/ck" --data "$dir/tiny_train.img"
if grep -qF "cannot resume from $dir/ck/" "$dir/otherdata.log" &&
   grep -qF -- "--data is '' there and '$dir/tiny_train.img' now" "$dir/otherdata.log"; then
  echo "ok: resuming on another image shard is refused"
else
  echo "FAIL: resuming on another image shard"; show otherdata; fail=1
fi

# 3. Fashion-MNIST through ddpprep
fm=/usr/share/datasets/fashion-mnist
if [ -r "$fm/train-images-idx3-ubyte.gz" ] && [ -r "$fm/train-labels-idx1-ubyte.gz" ]; then
  if "$top_builddir/ddpprep" --images idx --val-frac 0.1 -o "$dir/fm" \
       "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" > "$dir/prep.log" 2>&1; then
    FM="--data $dir/fm_train.img --val-data $dir/fm_val.img"
    # shellcheck disable=SC2086
    if run fm 1 $FM --steps 200 --batch-size 64 --optimizer adamw --lr 0.003 --min-lr 0.0003 \
         --weight-decay 0; then
      acc=$(sed -n 's/.*top-1 accuracy \([0-9.]*\)%.*/\1/p' "$dir/fm.log")
      if [ -n "$acc" ] && awk "BEGIN { exit !($acc >= 55) }"; then
        echo "ok: Fashion-MNIST top-1 $acc% after 200 steps (linear on pixels)"
      else
        echo "FAIL: Fashion-MNIST top-1 '$acc' (expected >= 55%)"; show fm; fail=1
      fi
      if ! grep -qF "images 28x28x1, 10 classes ($dir/fm_train.img)" "$dir/fm.log" ||
         ! grep -qF "mean 0.28" "$dir/fm.log"; then
        echo "FAIL: the Fashion-MNIST data line"; show fm; fail=1
      fi
    else
      echo "FAIL: training on Fashion-MNIST failed"; show fm; fail=1
    fi
    # shellcheck disable=SC2086
    if run fm2 2 $FM --steps 6 --export "$dir/fm2.st" && run fm1 1 $FM --steps 6 --accum 2 --export "$dir/fm1.st"; then
      same "Fashion-MNIST: 2 ranks equal 1 rank with --accum 2" "$dir/fm2.st" "$dir/fm1.st"
    else
      echo "FAIL: the Fashion-MNIST equivalence runs failed"; show fm2; show fm1; fail=1
    fi
    # shellcheck disable=SC2086
    "$prog" $FM --plan-only --world-size 4 --accum 3 --batch-size 64 > "$dir/plan.log" 2>&1
    n=$(sed -n 's/.*data: \([0-9]*\) images.*/\1/p' "$dir/fm.log")
    grep -qF "dropped         $((n % 768)) records per epoch" "$dir/plan.log" ||
      { echo "FAIL: --plan-only does not say $n mod 768 = $((n % 768)) dropped"; show plan; fail=1; }
  else
    echo "FAIL: ddpprep --images idx"; show prep; fail=1
  fi
else
  echo "SKIP (part): Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)"
fi

# 4. bad combinations: one line, exit 2, before training
printf 'not an image shard' > "$dir/records.safetensors"
expect() { # expect MESSAGE ARGS...
  msg=$1
  shift
  "$prog" --threads 1 --steps 2 "$@" > "$dir/bad.log" 2>&1
  rc=$?
  lines=$(wc -l < "$dir/bad.log")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$msg" "$dir/bad.log"; then
    echo "FAIL: '$*' gave status $rc and $lines lines (expected 2 and 1 line with '$msg'):"
    show bad; fail=1
  else
    echo "ok: '$*' -> 2: $msg"
  fi
}
expect "option --data $dir/records.safetensors: model imglin trains on images, and this is not an image shard" \
  --data "$dir/records.safetensors"
expect "option --val-data needs --data (the built-in image set has its own split)" \
  --val-data "$dir/tiny_train.img"
expect "option --crop-pad: -2 is out of range" --crop-pad -2
expect "option --hflip: 2 is out of range" --hflip 2
expect "option --loader-threads: -1 is out of range [0, 64]" --loader-threads -1
expect "option --loader-threads: 65 is out of range [0, 64]" --loader-threads 65
expect "option --normalize" --normalize mean
expect "option --data $dir/tiny_train.img is an image shard, but model reclin trains on record files" \
  --model reclin --data "$dir/tiny_train.img"
expect "option --data $dir/tiny_train.img is an image shard, but model gpt trains on token shards" \
  --model gpt --data "$dir/tiny_train.img"
expect "option --val-data $dir/tiny_train.img is an image shard, but model reclin" \
  --model reclin --data "$dir/records.safetensors" --val-data "$dir/tiny_train.img"
# the loader's image flags, given to a model that reads no images
expect "option --hflip applies to image models (such as --model resnet); model gpt trains on token shards" \
  --model gpt --hflip 0
expect "option --crop-pad applies to image models (such as --model resnet); model reclin trains on record files" \
  --model reclin --data "$dir/records.safetensors" --crop-pad 2
for f in "--pad-to 32" "--normalize none" "--loader-threads 2"; do
  # shellcheck disable=SC2086
  expect "option ${f%% *} applies to image models" --model gpt $f
done
# too few images for one step: found when the data is read (exit 1), one clear line
"$prog" --threads 1 --steps 2 --batch-size 8192 --accum 4 > "$dir/few.log" 2>&1
rc=$?
if [ "$rc" -eq 1 ] && grep -qF "20000 samples do not fill one step of 1 ranks x 4 micro-batches x 8192 samples" "$dir/few.log"; then
  echo "ok: too few images for one step is refused (exit 1)"
else
  echo "FAIL: too few images for one step: exit $rc"; show few; fail=1
fi
exit $fail
