#!/bin/sh
# ddpsample continues a prompt with a trained model:
#  - from a tiny model's export and from its final checkpoint (the same
#    weights): exit 0, the prompt printed first, the same text from both;
#  - deterministic for a seed (two runs are byte-identical), another seed
#    and the samples of one run differ; --prompt-file equals --prompt;
#  - bad input is a clear error naming the flag, exit 2 (a missing file,
#    --top-p outside (0, 1], a negative --temperature, a prompt longer than
#    the context, a tokenizer of another vocabulary, no model or two), and
#    exit 1 for a file that is not a model or a directory without a
#    tokenizer;
#  - a model trained on GPT-2 BPE shards samples through --tokenizer;
#  - ddptrain --sample-every N logs a sample every N steps from rank 0 and
#    trains the same bits as a run without it (cmp of the exports, fp32
#    and bf16); a run stopped and resumed logs the same samples and ends
#    with the same weights;
#  - on BPE shards it logs text with --tokenizer, and token ids without it
#    (saying once how to see text); a --tokenizer that is missing, not a
#    directory, without the tokenizer's files or of another vocabulary than
#    the model's is exit 2 naming the flag and the cause, with no
#    checkpoint, metrics file or export written.
# (Stopping at the end-of-text token is tests/check_generate's: a trained
# model's choice of it cannot be forced from here.)
. "${top_builddir:-.}/tests/env.sh"
set -u
DDPSAMPLE="$top_builddir/ddpsample"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0


TRAIN="--threads 1 --peak-gflops 10 --n-layer 1 --n-head 2 --n-embd 16 --seq-len 48 \
  --tokens-per-batch 256 --log-every 10 --eval-every 0 --eval-tokens 256 --steps 20"
# shellcheck disable=SC2086
if ! "$DDPTRAIN" $TRAIN --export "$dir/e.st" --save "$dir/ck" > "$dir/train.log" 2>&1; then
  echo "FAIL: the training run"; sed 's/^/  | /' "$dir/train.log"; exit 1
fi

S="--threads 1 --max-new-tokens 30"
# shellcheck disable=SC2086
sample() { "$DDPSAMPLE" $S "$@" 2> "$dir/err.log"; }

sample --export "$dir/e.st" --prompt "copy: abc" --seed 5 > "$dir/a.txt"; rc=$?
if [ $rc -eq 0 ] && head -c 9 "$dir/a.txt" | grep -qxF "copy: abc" && [ "$(wc -c < "$dir/a.txt")" -gt 10 ]; then
  echo "ok: a sample of the export starts with the prompt"
else
  echo "FAIL: sampling the export: exit $rc"; cat "$dir/err.log" "$dir/a.txt"; fail=1
fi
sample --export "$dir/e.st" --prompt "copy: abc" --seed 5 > "$dir/b.txt"
if cmp -s "$dir/a.txt" "$dir/b.txt"; then echo "ok: the same seed gives the same text"
else echo "FAIL: two runs with --seed 5 differ"; fail=1; fi
sample --export "$dir/e.st" --prompt "copy: abc" --seed 6 > "$dir/c.txt"
if ! cmp -s "$dir/a.txt" "$dir/c.txt"; then echo "ok: another seed gives another text"
else echo "FAIL: --seed 5 and --seed 6 gave the same text"; fail=1; fi
sample --checkpoint "$dir/ck" --prompt "copy: abc" --seed 5 > "$dir/d.txt"
if cmp -s "$dir/a.txt" "$dir/d.txt"; then echo "ok: the checkpoint directory gives the export's text"
else echo "FAIL: --checkpoint and --export differ"; cat "$dir/err.log"; fail=1; fi
printf 'copy: abc' > "$dir/prompt.txt"
sample --export "$dir/e.st" --prompt-file "$dir/prompt.txt" --seed 5 > "$dir/f.txt"
if cmp -s "$dir/a.txt" "$dir/f.txt"; then echo "ok: --prompt-file equals --prompt"
else echo "FAIL: --prompt-file and --prompt differ"; fail=1; fi
sample --export "$dir/e.st" --prompt "x" --num-samples 3 --seed 5 --temperature 2 > "$dir/n.txt"
if [ "$(grep -cx -- '---' "$dir/n.txt")" -eq 2 ] &&
  [ "$(awk '/^---$/{n++; next} {s[n] = s[n] $0} END {print (s[0] != s[1] || s[1] != s[2])}' "$dir/n.txt")" = 1 ]; then
  echo "ok: three samples, not all equal"
else
  echo "FAIL: --num-samples 3"; cat "$dir/n.txt"; fail=1
fi
sample --export "$dir/e.st" --temperature 0 > "$dir/g1.txt" && sample --export "$dir/e.st" --temperature 0 --seed 9 > "$dir/g2.txt"
if cmp -s "$dir/g1.txt" "$dir/g2.txt"; then echo "ok: greedy decoding does not depend on the seed"
else echo "FAIL: --temperature 0 depends on --seed"; fail=1; fi

long=$(printf '%060d' 0)
expect_status "a missing export" 2 "option --export: $dir/none.st: No such file" \
  "$DDPSAMPLE" --export "$dir/none.st"
expect_status "a missing checkpoint" 2 "option --checkpoint: $dir/none: No such file" \
  "$DDPSAMPLE" --checkpoint "$dir/none"
expect_status "a missing prompt file" 2 "option --prompt-file: $dir/none.txt" \
  "$DDPSAMPLE" --export "$dir/e.st" --prompt-file "$dir/none.txt"
expect_status "--top-p 0" 2 "--top-p 0: must be in (0, 1]" "$DDPSAMPLE" --export "$dir/e.st" --top-p 0
expect_status "--top-p 1.5" 2 "--top-p 1.5: must be in (0, 1]" "$DDPSAMPLE" --export "$dir/e.st" --top-p 1.5
expect_status "--temperature -1" 2 "option --temperature: -1 is out of range" \
  "$DDPSAMPLE" --export "$dir/e.st" --temperature -1
expect_status "--max-new-tokens 0" 2 "option --max-new-tokens: 0 is out of range" \
  "$DDPSAMPLE" --export "$dir/e.st" --max-new-tokens 0
expect_status "--seed x" 2 "option --seed: 'x' is not an integer" "$DDPSAMPLE" --export "$dir/e.st" --seed x
expect_status "a prompt longer than the context" 2 "--prompt: 60 tokens, more than the model's context of 48" \
  "$DDPSAMPLE" --threads 1 --export "$dir/e.st" --prompt "$long"
# GPT-2 BPE: a directory without the tokenizer's files, and a tokenizer
# whose vocabulary (600) is not the byte-level model's (257)
FIX="$top_srcdir/tests/data/bpe"
expect_status "--tokenizer without vocab.json" 1 "vocab.json" \
  "$DDPSAMPLE" --threads 1 --export "$dir/e.st" --tokenizer "$dir"
expect_status "--tokenizer of another vocabulary" 2 "--tokenizer $FIX has 600 tokens but the model's vocabulary is 257" \
  "$DDPSAMPLE" --threads 1 --export "$dir/e.st" --tokenizer "$FIX"
# A model trained on BPE shards (ddpprep --tokenizer, where this build has
# PCRE2) samples through the same tokenizer: the prompt comes back first,
# encoded and decoded exactly.
printf 'hello world, the quick brown fox\n%.0s' 1 2 3 4 5 6 7 8 9 10 11 12 > "$dir/bpe.txt"
if "$top_builddir/ddpprep" --tokenizer "$FIX" -o "$dir/bpe" "$dir/bpe.txt" > "$dir/prep.log" 2>&1; then
  # shellcheck disable=SC2086
  if "$DDPTRAIN" $TRAIN --data "$dir/bpe_train_*.bin" --export "$dir/bpe.st" > "$dir/bt.log" 2>&1; then
    expect_status "a BPE model samples through its tokenizer" 0 "hello world" \
      "$DDPSAMPLE" --threads 1 --export "$dir/bpe.st" --tokenizer "$FIX" --prompt "hello world" \
      --max-new-tokens 8 --seed 3
    head -c 11 "$dir/out.log" | grep -qx "hello world" ||
      { echo "FAIL: the BPE sample does not start with its prompt"; sed 's/^/  | /' "$dir/out.log"; fail=1; }
    # --sample-every on these shards: text through --tokenizer (not the
    # digits of token ids), ids without it and a hint, once
    # shellcheck disable=SC2086
    "$DDPTRAIN" $TRAIN --data "$dir/bpe_train_*.bin" --sample-every 10 --tokenizer "$FIX" \
      > "$dir/bs.log" 2>&1; rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c '| sample: ' "$dir/bs.log")" -eq 2 ] &&
      [ "$(grep '| sample: ' "$dir/bs.log" | grep -cv '| sample: [0-9 ]*$')" -eq 2 ] &&
      ! grep -q "give --tokenizer" "$dir/bs.log"; then
      echo "ok: --sample-every --tokenizer logs text: $(grep -m1 '| sample: ' "$dir/bs.log" | cut -c1-90)"
    else
      echo "FAIL: --sample-every with --tokenizer: exit $rc, or no text samples"; sed 's/^/  | /' "$dir/bs.log"; fail=1
    fi
    # shellcheck disable=SC2086
    "$DDPTRAIN" $TRAIN --data "$dir/bpe_train_*.bin" --sample-every 10 > "$dir/bi.log" 2>&1; rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c '| sample: [0-9][0-9 ]*$' "$dir/bi.log")" -eq 2 ] &&
      [ "$(grep -c 'samples are logged as token ids (give --tokenizer DIR to see text)' "$dir/bi.log")" -eq 1 ]; then
      echo "ok: without --tokenizer the samples are ids, and the log says how to see text"
    else
      echo "FAIL: --sample-every on BPE shards without --tokenizer: exit $rc"; sed 's/^/  | /' "$dir/bi.log"; fail=1
    fi
  else
    echo "FAIL: training on BPE shards"; sed 's/^/  | /' "$dir/bt.log"; fail=1
  fi
elif grep -q "built without PCRE2" "$dir/prep.log"; then
  echo "skip: sampling a BPE model (this ddpprep has no PCRE2 to make its shards)"
else
  echo "FAIL: ddpprep --tokenizer"; sed 's/^/  | /' "$dir/prep.log"; fail=1
fi
expect_status "no model" 2 "give exactly one of --export FILE and --checkpoint PATH" "$DDPSAMPLE" --prompt x
expect_status "two models" 2 "give exactly one of --export FILE and --checkpoint PATH" \
  "$DDPSAMPLE" --export "$dir/e.st" --checkpoint "$dir/ck"
expect_status "an unknown flag" 2 "unknown argument '--bogus'" "$DDPSAMPLE" --bogus
printf 'not a model' > "$dir/bad.st"
expect_status "a file that is not safetensors" 1 "bad.st" "$DDPSAMPLE" --threads 1 --export "$dir/bad.st"
expect_status "--help" 0 "Usage: ddpsample" "$DDPSAMPLE" --help

# ---- --sample-every --------------------------------------------------------------
# shellcheck disable=SC2086
"$DDPTRAIN" $TRAIN --export "$dir/plain.st" > /dev/null 2>&1
# shellcheck disable=SC2086
"$DDPTRAIN" $TRAIN --sample-every 5 --export "$dir/s.st" > "$dir/s.log" 2>&1
if [ "$(grep -c '| sample: ' "$dir/s.log")" -eq 4 ] && grep -q "step    20 | sample: " "$dir/s.log"; then
  echo "ok: --sample-every 5 logs four samples"
else
  echo "FAIL: --sample-every 5 did not log steps 5..20"; sed 's/^/  | /' "$dir/s.log"; fail=1
fi
if cmp -s "$dir/plain.st" "$dir/s.st"; then echo "ok: --sample-every leaves the weights bit-identical"
else echo "FAIL: --sample-every changed the trained weights"; fail=1; fi
# shellcheck disable=SC2086
"$DDPTRAIN" $TRAIN --precision bf16 --export "$dir/plain16.st" > /dev/null 2>&1
# shellcheck disable=SC2086
"$DDPTRAIN" $TRAIN --precision bf16 --sample-every 7 --export "$dir/s16.st" > "$dir/s16.log" 2>&1
if grep -q "step    14 | sample: " "$dir/s16.log" && cmp -s "$dir/plain16.st" "$dir/s16.st"; then
  echo "ok: bf16: --sample-every leaves the weights bit-identical"
else
  echo "FAIL: bf16 with --sample-every"; sed 's/^/  | /' "$dir/s16.log"; fail=1
fi
# shellcheck disable=SC2086
"$DDPTRAIN" $TRAIN --sample-every 5 --stop-at 10 --save "$dir/rs" > "$dir/r1.log" 2>&1
# shellcheck disable=SC2086
"$DDPTRAIN" $TRAIN --sample-every 5 --resume "$dir/rs" --save "$dir/rs" --export "$dir/r.st" > "$dir/r2.log" 2>&1
grep -h '| sample: ' "$dir/r1.log" "$dir/r2.log" > "$dir/r.samples"
grep '| sample: ' "$dir/s.log" > "$dir/s.samples"
if cmp -s "$dir/s.st" "$dir/r.st" && cmp -s "$dir/s.samples" "$dir/r.samples"; then
  echo "ok: stopped and resumed: the same samples and the same weights"
else
  echo "FAIL: a resumed run with --sample-every differs"; diff "$dir/s.samples" "$dir/r.samples"; fail=1
fi

# A bad --tokenizer is a bad flag: exit 2 before training, nothing written.
mkdir "$dir/empty"
# bad_tokenizer DESC TEXT DIR
bad_tokenizer() {
  # shellcheck disable=SC2086
  expect_status "$1" 2 "$2" "$DDPTRAIN" $TRAIN --sample-every 5 --tokenizer "$3" \
    --save "$dir/nw_ck" --metrics "$dir/nw.jsonl" --export "$dir/nw.st"
  for f in nw_ck nw.jsonl nw.st; do
    [ ! -e "$dir/$f" ] || { echo "FAIL: $1: $f was written"; rm -rf "${dir:?}/$f"; fail=1; }
  done
}
bad_tokenizer "--tokenizer: a missing directory" \
  "option --tokenizer: $dir/none: No such file or directory" "$dir/none"
bad_tokenizer "--tokenizer: a file" "option --tokenizer: $FIX/vocab.json is not a directory" \
  "$FIX/vocab.json"
bad_tokenizer "--tokenizer: a directory without vocab.json" "cannot read '$dir/empty/vocab.json'" \
  "$dir/empty"
grep -qF "option --tokenizer: $dir/empty is not a GPT-2 tokenizer" "$dir/out.log" ||
  { echo "FAIL: the unreadable tokenizer's error does not name the flag"; fail=1; }
bad_tokenizer "--tokenizer of another vocabulary than the byte-level data's" \
  "option --tokenizer: $FIX has 600 tokens, but the model's vocabulary is 257" "$FIX"

exit $fail
