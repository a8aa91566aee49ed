#!/bin/sh
# Checkpoint cost: how long the step loop pauses (the copy of parameters and
# AdamW state into the pre-touched staging buffer) against how long the
# background write takes (safetensors file, CRC-32, fsync, rename, fsync of
# the directory). A ~19M-parameter GPT (6 layers, width 512, byte vocabulary)
# with AdamW, one rank on the CPU backend, a checkpoint every 2 steps.
# Usage: bench/checkpoint.sh [BUILD_DIR] [CHECKPOINT_DIR]
#   CHECKPOINT_DIR (default: a new directory under /tmp) should be on the
#   file system to measure; it is removed afterwards when created here.
set -eu
build=${1:-.}
work=${2:-}
made=
if [ -z "$work" ]; then
  work=$(mktemp -d)
  made=1
fi
log=$(mktemp)
trap 'rm -f "$log"; [ -n "$made" ] && rm -rf "$work"' EXIT
"$build/ddptrain" --threads 0 --peak-gflops 10 --n-layer 6 --n-head 8 --n-embd 512 --seq-len 128 \
  --tokens-per-batch 1024 --steps 8 --log-every 2 --eval-every 0 --eval-tokens 256 \
  --save "$work/ck" --save-every 2 --keep 2 > "$log" 2>&1 || { cat "$log"; exit 1; }
grep -E "model:|step +[0-9]+/" "$log" | sed 's/^/  /'
echo
echo "| checkpoint | size MiB | step-loop pause ms | background write s |"
echo "|---|---|---|---|"
sed -n 's/.*checkpoint: step \([0-9]*\) copied for writing; the step loop paused \([0-9.]*\) ms/\1 \2/p' "$log" |
  while read -r step pause; do
    w=$(sed -n "s/.*checkpoint: step $step written to .* (\([0-9.]*\) MiB in \([0-9.]*\) s, in the background)/\1 \2/p" "$log")
    echo "| step $step | ${w% *} | $pause | ${w#* } |"
  done
