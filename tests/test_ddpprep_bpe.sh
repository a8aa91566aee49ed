#!/bin/sh
# ddpprep --tokenizer: GPT-2 BPE shards checked against Hugging Face
# `tokenizers` (the expectations in tests/data/bpe, made by its
# make-fixture.py; nothing is downloaded here), read back by python3:
#  - the header: llm.c's magic and uint16 version, the tokenizer's EOT and
#    vocabulary in slots 3 and 4, the count agreeing with the size;
#  - JSONL documents (~40 varied texts, 10,000 documents over several
#    batches) give EOT + tokenizers' ids per document, byte-exact;
#  - one 8.6 MB document (encoded in place, in pieces) gives tokenizers' ids
#    (count and SHA-256);
#  - --threads 1 and 2 write identical shards (cmp);
#  - --jsonl-field picks the field;
#  - a bad JSONL line is an error naming FILE:LINE, exit 1, with nothing
#    left: no shard (also none of those written before it) and not the
#    directory it created; --skip-bad skips and counts;
#  - the output directory is created;
#  - a missing or malformed tokenizer, a vocabulary too big for uint16 and
#    bad flag combinations are refused.
. "${top_builddir:-.}/tests/env.sh"
set -u
PREP="$top_builddir/ddpprep"
FIX="$top_srcdir/tests/data/bpe"
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

"$PREP" --tokenizer "$FIX" -o "$dir/probe" /dev/null > "$dir/out" 2>&1
if grep -q "built without PCRE2" "$dir/out"; then
  echo "SKIP: this ddpprep was built without PCRE2 (libpcre2-dev), so it has no BPE"
  exit 77
fi

# The documents: the fixture's texts, 10,000 JSONL lines cycling through
# them, under "text" and (with a decoy "text") under "body".
python3 - "$FIX/expected.jsonl" "$dir" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
d = sys.argv[2]
with open(d + "/docs.jsonl", "w") as f, open(d + "/body.jsonl", "w") as g:
    for i in range(10000):
        r = rows[i % len(rows)]
        f.write(json.dumps({"text": r["text"], "n": i}) + "\n")
        g.write(json.dumps({"text": "decoy", "body": r["text"]}) + "\n")
PY

# check PREFIX WHAT: the shards' header fields and tokens against WHAT:
# "docs" (EOT + ids of each non-empty fixture text, 10,000 documents) or
# "big" (EOT + the big document's count and digest).
check() {
  python3 - "$1" "$2" "$FIX" <<'PY'
import glob, hashlib, json, struct, sys
prefix, what, fix = sys.argv[1:4]
vocab = json.load(open(fix + "/vocab.json", encoding="utf-8"))
eot = vocab["<|endoftext|>"]
paths = sorted(glob.glob(prefix + "_train_*.bin"))
assert paths and not glob.glob(prefix + "_val_*"), paths
toks = []
for p in paths:
    data = open(p, "rb").read()
    hdr = struct.unpack("<256i", data[:1024])
    assert hdr[0] == 20240520 and hdr[1] == 1, ("magic/version", hdr[:2])
    assert hdr[3] == eot and hdr[4] == len(vocab), ("eot/vocab", hdr[3:5])
    assert not any(hdr[5:]), "nonzero reserved slots"
    assert len(data) == 1024 + 2 * hdr[2], "count vs size"
    toks += struct.unpack("<%dH" % hdr[2], data[1024:])
if what == "docs":
    rows = [json.loads(l) for l in open(fix + "/expected.jsonl", encoding="utf-8")]
    want = []
    for i in range(10000):
        r = rows[i % len(rows)]
        if r["text"]:
            want += [eot] + r["ids"]
    if toks != want:
        k = next((i for i, (a, b) in enumerate(zip(toks, want)) if a != b), min(len(toks), len(want)))
        sys.exit("tokens differ at %d: got %r, want %r" % (k, toks[k:k + 8], want[k:k + 8]))
else:
    big = json.load(open(fix + "/big.json"))
    ids = toks[1:]
    assert toks[0] == eot and len(ids) == big["n_ids"], (toks[:1], len(ids), big["n_ids"])
    digest = hashlib.sha256(struct.pack("<%dH" % len(ids), *ids)).hexdigest()
    assert digest == big["sha256"], "the big document's ids differ from tokenizers'"
PY
}

run_ok() { # description, args...
  desc=$1; shift
  "$PREP" "$@" > "$dir/err" 2>&1
  rc=$?
  [ $rc -eq 0 ] && return 0
  echo "FAIL: $desc (exit $rc)"; sed 's/^/  | /' "$dir/err"; fail=1; return 1
}

# JSONL documents, into a directory that does not exist yet, 1 and 2 threads.
if run_ok "jsonl, 1 thread" --jsonl --tokenizer "$FIX" --threads 1 -o "$dir/new/deep/a" "$dir/docs.jsonl" &&
   run_ok "jsonl, 2 threads" --jsonl --tokenizer "$FIX" --threads 2 -o "$dir/b" "$dir/docs.jsonl"; then
  grep -q "vocabulary 600, EOT 0; 2 thread(s)" "$dir/err" ||
    { echo "FAIL: summary names the tokenizer"; sed 's/^/  | /' "$dir/err"; fail=1; }
  if [ -d "$dir/new/deep" ]; then echo "ok: the output directory is created"
  else echo "FAIL: no output directory $dir/new/deep"; fail=1; fi
  if check "$dir/new/deep/a" docs > "$dir/err" 2>&1; then
    echo "ok: 10,000 JSONL documents: header fields and tokens equal tokenizers'"
  else echo "FAIL: JSONL tokens"; sed 's/^/  | /' "$dir/err"; fail=1; fi
  if cmp "$dir/new/deep/a_train_000000.bin" "$dir/b_train_000000.bin"; then
    echo "ok: --threads 1 and 2 write identical shards"
  else echo "FAIL: --threads 1 and 2 differ"; fail=1; fi
fi

# --jsonl-field
if run_ok "--jsonl-field body" --jsonl --jsonl-field body --tokenizer "$FIX" -o "$dir/c" "$dir/body.jsonl"; then
  if cmp "$dir/c_train_000000.bin" "$dir/b_train_000000.bin"; then echo "ok: --jsonl-field body"
  else echo "FAIL: --jsonl-field body gives other tokens"; fail=1; fi
fi

# One big document (a file), encoded in place and in pieces.
python3 - "$FIX" "$dir/big.txt" <<'PY'
import json, sys
fix, out = sys.argv[1:3]
texts = [json.loads(l)["text"] for l in open(fix + "/expected.jsonl", encoding="utf-8")]
rep = json.load(open(fix + "/big.json"))["repeat"]
open(out, "wb").write((("\n".join(texts) + "\n") * rep).encode("utf-8"))
PY
if run_ok "big, 1 thread" --tokenizer "$FIX" --threads 1 -o "$dir/big1" "$dir/big.txt" &&
   run_ok "big, 2 threads" --tokenizer "$FIX" --threads 2 -o "$dir/big2" "$dir/big.txt"; then
  if check "$dir/big1" big > "$dir/err" 2>&1; then
    echo "ok: an 8.6 MB document: tokens equal tokenizers' (count and SHA-256)"
  else echo "FAIL: big document"; sed 's/^/  | /' "$dir/err"; fail=1; fi
  if cmp "$dir/big1_train_000000.bin" "$dir/big2_train_000000.bin"; then
    echo "ok: big document: --threads 1 and 2 identical"
  else echo "FAIL: big document differs between 1 and 2 threads"; fail=1; fi
fi

# Bad JSONL lines: line 3 is malformed, line 5 lacks the field.
{ echo '{"text": "one"}'; echo '{"text": "two"}'; echo '{"text": broken}'
  echo '{"text": "four"}'; echo '{"body": "five"}'; echo '{"text": "six"}'; } > "$dir/bad.jsonl"
bad() { # description, expected-exit, expected-text, args...
  desc=$1 want=$2 text=$3; shift 3
  rm -rf "$dir/o"
  "$PREP" "$@" > "$dir/out" 2>&1
  rc=$?
  if [ $rc -ne "$want" ] || ! grep -qF -- "$text" "$dir/out" || [ -e "$dir/o" ] ||
     ls "$dir"/x_* > /dev/null 2>&1; then
    echo "FAIL: $desc (exit $rc, expected $want and '$text')"; sed 's/^/  | /' "$dir/out"; fail=1
  else
    echo "ok: $desc"
  fi
}
bad "malformed JSONL line" 1 "$dir/bad.jsonl:3: malformed JSON" \
  --jsonl --tokenizer "$FIX" -o "$dir/o/p" "$dir/bad.jsonl"
# After many shards (20,000 documents: more than two batches, so the
# first batch is written while the third is read): all are removed again.
{ cat "$dir/docs.jsonl" "$dir/docs.jsonl"; echo '{"text": "late", broken'; } > "$dir/late.jsonl"
bad "bad line after shards were written" 1 "$dir/late.jsonl:20001: malformed JSON" \
  --jsonl --shard-tokens 1000 --tokenizer "$FIX" -o "$dir/o/p" "$dir/late.jsonl"
grep -q "removed the [1-9][0-9]* shard(s) this run had written" "$dir/out" ||
  { echo "FAIL: the shards written before the bad line were not reported removed"; sed 's/^/  | /' "$dir/out"; fail=1; }
head -n 2 "$dir/bad.jsonl" > "$dir/bad2.jsonl"; sed -n 5p "$dir/bad.jsonl" >> "$dir/bad2.jsonl"
bad "JSONL line without the field" 1 "$dir/bad2.jsonl:3: expected a JSON object with a string \"text\" field" \
  --jsonl --tokenizer "$FIX" -o "$dir/o/p" "$dir/bad2.jsonl"
bad "byte-level mode: the same line error" 1 "$dir/bad.jsonl:3: malformed JSON" \
  --jsonl -o "$dir/o/p" "$dir/bad.jsonl"
if run_ok "--skip-bad" --jsonl --skip-bad --tokenizer "$FIX" -o "$dir/s" "$dir/bad.jsonl"; then
  if grep -q "skipped bad JSONL lines: 2" "$dir/err" && grep -q "bad.jsonl:5: expected a JSON object" "$dir/err" &&
     grep -q "documents: 4 " "$dir/err"; then echo "ok: --skip-bad skips and counts 2 bad lines"
  else echo "FAIL: --skip-bad summary"; sed 's/^/  | /' "$dir/err"; fail=1; fi
fi

# Bad tokenizers and flags.
bad "missing tokenizer" 1 "$dir/none/vocab.json': No such file or directory" \
  --tokenizer "$dir/none" -o "$dir/o/p" "$dir/big.txt"
mkdir "$dir/tk"
cp "$FIX/vocab.json" "$dir/tk/"
printf '#version: 0.2\nh e\nq x\n' > "$dir/tk/merges.txt"
bad "merge outside the vocabulary" 1 "merges.txt:3: merging \"q x\" gives a token that is not in vocab.json" \
  --tokenizer "$dir/tk" -o "$dir/o/p" "$dir/big.txt"
python3 - "$dir/tk" <<'PY'
import json, sys
# GPT-2's alphabet: the 256 byte tokens, the EOT, and fillers to 65537 tokens.
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
alpha = [chr(c) for c in cs]
vocab = {a: i for i, a in enumerate(alpha)}
vocab["<|endoftext|>"] = len(vocab)
i = 0
while len(vocab) < 65537:
    vocab[alpha[i % 256] + alpha[(i // 256) % 256] + "x"] = len(vocab); i += 1
json.dump(vocab, open(sys.argv[1] + "/vocab.json", "w"))
open(sys.argv[1] + "/merges.txt", "w").write("#version: 0.2\n")
PY
bad "vocabulary above uint16" 1 "has 65537 tokens, but llm.c's uint16 shards hold ids up to 65535" \
  --tokenizer "$dir/tk" -o "$dir/o/p" "$dir/big.txt"
bad "--jsonl-field without --jsonl" 2 "--jsonl-field applies to --jsonl input only" \
  --jsonl-field body -o "$dir/o/p" "$dir/big.txt"
bad "--skip-bad without --jsonl" 2 "--skip-bad applies to --jsonl input only" \
  --skip-bad -o "$dir/o/p" "$dir/big.txt"
bad "--threads 0" 2 "option --threads: 0 is out of range [1, 256]" \
  --threads 0 --tokenizer "$FIX" -o "$dir/o/p" "$dir/big.txt"
bad "empty --jsonl-field" 2 "option --jsonl-field: the field name is empty" \
  --jsonl --jsonl-field "" -o "$dir/o/p" "$dir/big.txt"
touch "$dir/afile"
bad "output directory over a file" 1 "cannot create output directory '$dir/afile': a file of that name exists" \
  -o "$dir/afile/p" "$dir/big.txt"
exit $fail
