#!/bin/sh
# Makes the fuzz targets' seed corpus (docs/fuzzing.md) with the project's own
# programs, plus a few hand-made edge cases:
#   corpus/shard        shards from ddpprep; a uint32 shard, an llm.c (GPT-2)
#                       shard, a shard not starting with EOT, one of lone
#                       EOTs, a truncated header, a count that disagrees
#   corpus/safetensors  a tiny model's --export and --dump-batches files; two
#                       record files (with and without n_classes); BF16/F16
#                       tensors; an empty header; a tensor past the end, two
#                       overlapping, a header longer than the file
#   corpus/checkpoint   checkpoints of tiny runs: AdamW, SGD, fp16 with a
#                       loss scaler, LAMB
#   corpus/options      command lines (NUL-separated arguments), good and bad
#   corpus/image_shard  image shards from ddpprep --images (IDX, CIFAR-10); a
#                       1x1x4 shard, a truncated one, a bad label, nonzero
#                       padding, a record size that disagrees
# The files are committed, so `make check` replays them without running
# ddptrain; run this again (and commit the result) when a file format or a
# flag changes. Everything is deterministic: the runs are seeded.
#
# Usage: tests/fuzz/make-corpus.sh BUILDDIR [OUTDIR]
#   BUILDDIR holds built ddptrain and ddpprep; OUTDIR defaults to
#   tests/fuzz/corpus next to this script (its five folders are replaced).
set -eu
[ $# -ge 1 ] || { echo "usage: $0 BUILDDIR [OUTDIR]" >&2; exit 2; }
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
out=${2:-$here/corpus}
for p in ddptrain ddpprep; do
  [ -x "$build/$p" ] || { echo "$0: no $p in $build (build it first)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$out"
for t in shard safetensors checkpoint options image_shard; do rm -rf "${out:?}/$t"; mkdir -p "$out/$t"; done

# Little-endian bytes, for the hand-made files.
le32() { printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $(($1 & 255)) $(($1 >> 8 & 255)) \
  $(($1 >> 16 & 255)) $(($1 >> 24 & 255)))"; }
le16() { printf "$(printf '\\%03o\\%03o' $(($1 & 255)) $(($1 >> 8 & 255)))"; }
zeros() { head -c "$1" /dev/zero; }
# A shard header: magic version count eot vocab, the rest zero.
shard_header() { le32 "$1"; le32 "$2"; le32 "$3"; le32 "$4"; le32 "$5"; zeros $((1024 - 20)); }
# A safetensors file from its JSON header (padded to 8 bytes) and a data file.
safetensors() { # JSON DATAFILE
  hlen=$(printf '%s' "$1" | wc -c)
  pad=$(((8 - hlen % 8) % 8))
  le32 $((hlen + pad)); le32 0
  printf '%s' "$1"; printf '%*s' "$pad" ''
  cat "$2"
}

# ---- shards --------------------------------------------------------------
cat > "$work/text" << 'EOF'
The quick brown fox jumps over the lazy dog.
%
Pack my box with five dozen liquor jugs.
%
How vexingly quick daft zebras jump!
%
a
%
Sphinx of black quartz, judge my vow. The five boxing wizards jump quickly.
EOF
"$build/ddpprep" --doc-sep % --shard-tokens 120 --val-frac 0.3 -o "$work/prep" "$work/text" > /dev/null
i=0
for f in "$work"/prep_*.bin; do cp "$f" "$out/shard/ddpprep_$i.bin"; i=$((i + 1)); done
# uint32 tokens, vocab 70000, EOT 69999: EOT a b EOT c
{ shard_header 20240801 7 5 69999 70000; for v in 69999 5 65537 69999 7; do le32 $v; done; } \
  > "$out/shard/u32.bin"
# an llm.c GPT-2 shard: slots 3 and 4 zero (EOT 50256, vocab 50257)
{ shard_header 20240520 1 6 0 0; for v in 50256 464 2068 50256 1 50255; do le16 $v; done; } \
  > "$out/shard/gpt2.bin"
# tokens before the first EOT (a headless document), EOT id 0
{ shard_header 20240520 1 6 0 300; for v in 5 6 0 299 1 2; do le16 $v; done; } \
  > "$out/shard/headless.bin"
# nothing to predict: lone EOTs only (rejected)
{ shard_header 20240520 1 3 256 257; for v in 256 256 256; do le16 $v; done; } \
  > "$out/shard/lone_eots.bin"
# a truncated header and a count that disagrees with the size (rejected)
head -c 100 "$out/shard/ddpprep_0.bin" > "$out/shard/truncated.bin"
{ shard_header 20240520 1 9 256 257; for v in 256 1 2; do le16 $v; done; } \
  > "$out/shard/count_mismatch.bin"

# ---- image shards ------------------------------------------------------------
# Big-endian, for IDX files.
be32() { printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) \
  $(($1 >> 8 & 255)) $(($1 & 255)))"; }
# An image shard header: count height width channels classes record-bytes.
img_header() { le32 1196247364; le32 1; le32 64; for v in "$@"; do le32 "$v"; done; zeros 28; }
# from ddpprep: 5 IDX images of 3x3 (9 bytes, padded to 12), labels 0..3, and
# two CIFAR-10 records
{ be32 2051; be32 5; be32 3; be32 3; i=0; while [ $i -lt 45 ]; do printf "\\$(printf %03o $((i * 37 % 256)))"; i=$((i + 1)); done; } \
  > "$work/img-images"
{ be32 2049; be32 5; printf '\000\003\001\002\000'; } > "$work/img-labels"
"$build/ddpprep" --images idx -o "$work/img" "$work/img-images" "$work/img-labels" 2> /dev/null
cp "$work/img_train.img" "$out/image_shard/idx_3x3.img"
{ printf '\007'; i=0; while [ $i -lt 3072 ]; do printf "\\$(printf %03o $((i % 251)))"; i=$((i + 1)); done; } > "$work/c10.bin"
cat "$work/c10.bin" "$work/c10.bin" > "$work/c10x2.bin"
"$build/ddpprep" --images cifar10 -o "$work/c10" "$work/c10x2.bin" 2> /dev/null
cp "$work/c10_train.img" "$out/image_shard/cifar10.img"
# edge cases: a 1x1x4 shard (no padding), a truncated record, a label out of
# range, nonzero padding, a record size that disagrees
{ img_header 2 1 1 4 3 8; le32 2; printf 'abcd'; le32 0; printf 'efgh'; } > "$out/image_shard/rgba_1x1.img"
head -c 100 "$out/image_shard/idx_3x3.img" > "$out/image_shard/truncated.img"
{ img_header 1 1 1 1 2 8; le32 2; printf '\001\000\000\000'; } > "$out/image_shard/bad_label.img"
{ img_header 1 1 1 1 2 8; le32 1; printf '\001\000\001\000'; } > "$out/image_shard/bad_padding.img"
{ img_header 1 1 1 1 2 12; le32 1; printf '\001\000\000\000'; zeros 4; } > "$out/image_shard/bad_record_size.img"

# ---- tiny training runs: checkpoints, an export, dumped batches ----------------
# Run inside the work directory with relative paths: a checkpoint records
# its flags, and the corpus must not carry this machine's paths.
tiny="--n-layer 1 --n-head 1 --n-embd 4 --seq-len 8 --tokens-per-batch 32 --steps 2 --log-every 1
      --eval-every 0 --eval-tokens 16 --threads 1 --heartbeat-timeout 0 --device cpu"
run() { # NAME FLAGS...
  name=$1
  shift
  # shellcheck disable=SC2086
  (cd "$work" && "$build/ddptrain" $tiny --data 'prep_train_*.bin' --val-data 'prep_val_*.bin' \
    --save "$name" "$@" > "$name.log" 2>&1) || { cat "$work/$name.log" >&2; exit 1; }
  cp "$(ls "$work/$name"/ckpt_*.safetensors | tail -1)" "$out/checkpoint/$name.safetensors"
}
run adamw --export export.safetensors --dump-batches batches.safetensors
cp "$work/export.safetensors" "$work/batches.safetensors" "$out/safetensors/"
run sgd --optimizer sgd --momentum 0.5
run fp16 --precision fp16 --loss-scaling dynamic --loss-scale-init 256
run lamb --optimizer lamb --seed 7

# ---- hand-made safetensors ---------------------------------------------------
# records: inputs F32 (3, 2), labels I32 (3)
{ for v in 1065353216 0 0 1065353216 1056964608 1056964608; do le32 $v; done
  for v in 0 1 2; do le32 $v; done; } > "$work/rec"
safetensors '{"__metadata__":{"n_classes":"4"},"inputs":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]},"labels":{"dtype":"I32","shape":[3],"data_offsets":[24,36]}}' \
  "$work/rec" > "$out/safetensors/records.safetensors"
safetensors '{"labels":{"dtype":"I32","shape":[3],"data_offsets":[24,36]},"inputs":{"dtype":"F32","shape":[3,1,2],"data_offsets":[0,24]}}' \
  "$work/rec" > "$out/safetensors/records_no_meta.safetensors"
# half types and a scalar
{ le16 16256; le16 15360; le16 49024; le32 42; } > "$work/half"
safetensors '{"b":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},"h":{"dtype":"F16","shape":[2],"data_offsets":[2,6]},"s":{"dtype":"I32","shape":[],"data_offsets":[6,10]},"e":{"dtype":"F32","shape":[0,3],"data_offsets":[10,10]}}' \
  "$work/half" > "$out/safetensors/half.safetensors"
# rejected: a tensor reaching past the file, two tensors sharing bytes, a
# header longer than the file
safetensors '{"x":{"dtype":"F32","shape":[100],"data_offsets":[0,400]}}' "$work/rec" \
  > "$out/safetensors/past_end.safetensors"
safetensors '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}}' \
  "$work/rec" > "$out/safetensors/overlap.safetensors"
{ le32 4096; le32 0; printf '{}'; } > "$out/safetensors/header_past_end.safetensors"
: > "$work/none"
safetensors '{}' "$work/none" > "$out/safetensors/empty.safetensors"

# ---- command lines -------------------------------------------------------------
cmdline() { # NAME ARGS...
  name=$1
  shift
  : > "$out/options/$name"
  sep=
  for a in "$@"; do
    { printf "$sep"; printf '%s' "$a"; } >> "$out/options/$name"
    sep='\000'
  done
}
cmdline readme --data 'shards/train_*.bin' --val-data 'shards/val_*.bin' --n-layer 4 --n-head 4 \
  --n-embd 256 --seq-len 256 --tokens-per-batch 4096 --steps 2000 --metrics run.jsonl \
  --export model.safetensors
cmdline resume --resume auto --save ckpt --save-every 5 --keep 1 --stop-at 195 --detect-anomaly
cmdline amp --precision=fp16 --loss-scaling dynamic --loss-scale-init=1024 \
  --loss-scale-window 100 --grad-reduce-dtype bf16 --attention flash --recompute on
cmdline plan --plan-only --world-size 4 --json --sampler random --bucket-chunk 128 --accum 3
cmdline sgd --optimizer SGD --momentum 0.8 --nesterov 0 --lr=0.1 --weight-decay 0 --grad-clip 0
cmdline run --device cuda:1 --tf32 off --nvtx on --threads 2 --seed 9007199254740991 \
  --peak-gflops 1.5e3 --heartbeat-timeout 0.5 --comm-progress test --bucket-mb 0.5
cmdline help -h
cmdline version -V --build-info --self-test
cmdline bad_value --lr nan
cmdline bad_missing --n-embd
cmdline bad_unknown --sed 1
cmdline bad_action --help=1
cmdline bad_range --seq-len 1
cmdline bad_model --model mlp --n-layer 2
echo "make-corpus: $(find "$out" -type f | wc -l) files, $(du -sk "$out" | cut -f1) KiB in $out"
