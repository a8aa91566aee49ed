#!/bin/sh
# ddpprep end to end: text -> byte-level shards -> text, decoded by an
# independent reader (python3) so a bug shared by writer and ddptrain's reader
# cannot hide:
#  - round trips for files, a directory, stdin, --doc-sep '%', --jsonl
#    (unicode, a "text" with newlines), invalid UTF-8 bytes kept as bytes;
#  - --shard-tokens splits into several shards, none above N (only a single
#    oversize document may run on), total preserved;
#  - --val-frac: two runs are identical, val is non-empty and disjoint from
#    train;
#  - bad input exits 2 (command line) or 1 (runtime) with one message naming
#    the cause, and leaves no PREFIX_* file;
#  - ddptrain trains on the shards.
. "${top_builddir:-.}/tests/env.sh"
set -u
PREP="$top_builddir/ddpprep"
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# decode OUT.json PREFIX: writes {"train": [docs...], "val": [...],
# "counts": {"train": [tokens per shard], ...}} with docs as latin-1 strings
# (byte-exact), after checking every header.
cat > "$dir/decode.py" <<'PY'
import glob, json, struct, sys
out, prefix = sys.argv[1], sys.argv[2]
res = {"counts": {}}
for split in ("train", "val"):
    toks, counts = [], []
    for path in sorted(glob.glob(prefix + "_" + split + "_*.bin")):
        data = open(path, "rb").read()
        hdr = struct.unpack("<256i", data[:1024])
        assert hdr[0] == 20240520 and hdr[1] == 1 and hdr[3] == 256 and hdr[4] == 257, hdr[:5]
        assert len(data) == 1024 + 2 * hdr[2], path
        toks += struct.unpack("<%dH" % hdr[2], data[1024:])
        counts.append(hdr[2])
    docs, cur = [], None
    for t in toks:
        if t == 256:
            if cur is not None: docs.append(bytes(cur).decode("latin-1"))
            cur = []
        else:
            assert cur is not None, "tokens before the first EOT"
            cur.append(t)
    if cur is not None: docs.append(bytes(cur).decode("latin-1"))
    res[split] = docs
    res["counts"][split] = counts
json.dump(res, open(out, "w"))
PY

# expect NAME PREFIX EXPECTED.json: the decoded train docs equal the expected list.
expect() {
  python3 "$dir/decode.py" "$dir/got.json" "$2" &&
  python3 - "$dir/got.json" "$3" <<'PY'
import json, sys
got, want = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
if got["train"] + got["val"] != want or got["val"]:
    print("  got  %r\n  want %r" % (got["train"] + got["val"], want)); sys.exit(1)
PY
  rc=$?
  if [ $rc -eq 0 ]; then echo "ok: $1"; else echo "FAIL: $1"; sed 's/^/  | /' "$dir/err"; fail=1; fi
}

# Inputs: three files with unicode and invalid UTF-8, one empty (skipped).
mkdir -p "$dir/in/sub"
printf 'hello world\nsecond line\n' > "$dir/in/a.txt"
printf 'caf\303\251 \342\202\254 \360\237\230\200 and bad bytes \377\376\300 end' > "$dir/in/sub/b.txt"
: > "$dir/in/c_empty.txt"
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
a = open(d + "/in/a.txt", "rb").read().decode("latin-1")
b = open(d + "/in/sub/b.txt", "rb").read().decode("latin-1")
json.dump([a, b], open(d + "/want_files.json", "w"))
json.dump([a], open(d + "/want_a.json", "w"))
# fortune-style: '%' lines separate; a '%%' or ' %' line is text.
fort = "one\nline\n%\ntwo %\n%%\n%\n%\nthree\n"
open(d + "/fortune", "w").write(fort)
json.dump(["one\nline\n", "two %\n%%\n", "three\n"], open(d + "/want_fort.json", "w"))
texts = ["plain", "multi\nline\ntext\n", "unicode: \u00e9\u20ac\U0001F600 \u4e2d\u6587", "tab\tquote\"back\\"]
with open(d + "/docs.jsonl", "w") as f:
    for i, t in enumerate(texts):
        f.write(json.dumps({"id": i, "text": t}, ensure_ascii=(i % 2 == 0)) + "\n")
    f.write("\n")
    f.write(json.dumps({"text": ""}) + "\n")
json.dump([t.encode().decode("latin-1") for t in texts], open(d + "/want_jsonl.json", "w"))
PY

"$PREP" -o "$dir/f" "$dir/in/a.txt" "$dir/in/sub/b.txt" "$dir/in/c_empty.txt" 2> "$dir/err"
expect "files: one document per file, invalid UTF-8 kept" "$dir/f" "$dir/want_files.json"
grep -q "skipped empty: 1" "$dir/err" && grep -q "p50" "$dir/err" ||
  { echo "FAIL: summary"; sed 's/^/  | /' "$dir/err"; fail=1; }
"$PREP" -o "$dir/d" "$dir/in" 2> "$dir/err"
expect "directory: recursed in sorted order" "$dir/d" "$dir/want_files.json"
"$PREP" -o "$dir/s" < "$dir/in/a.txt" 2> "$dir/err"
expect "stdin (no path)" "$dir/s" "$dir/want_a.json"
"$PREP" -o "$dir/s2" - < "$dir/in/a.txt" 2> "$dir/err"
expect "stdin ('-')" "$dir/s2" "$dir/want_a.json"
"$PREP" --doc-sep '%' -o "$dir/p" "$dir/fortune" 2> "$dir/err"
expect "--doc-sep '%'" "$dir/p" "$dir/want_fort.json"
"$PREP" --jsonl -o "$dir/j" "$dir/docs.jsonl" 2> "$dir/err"
expect "--jsonl: unicode, newlines in text" "$dir/j" "$dir/want_jsonl.json"

# Sharding: 200 documents of varied length plus one of 700 bytes, N = 500.
python3 - "$dir/many" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(200):
        f.write("doc %d " % i + "x" * (i * 7 % 90) + "\n%\n")
    f.write("y" * 700 + "\n")
PY
"$PREP" --doc-sep % --shard-tokens 500 -o "$dir/m" "$dir/many" 2> "$dir/err"
python3 "$dir/decode.py" "$dir/got.json" "$dir/m"
if python3 - "$dir/got.json" "$dir/many" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
want = [d + "\n" if not d.endswith("\n") else d for d in open(sys.argv[2]).read().split("\n%\n")]
c = g["counts"]["train"]
assert g["train"] == want, "documents differ"
assert len(c) >= 5, c
# Only the oversize document may fill a shard to exactly N and run on.
assert all(n <= 500 for n in c), c
assert sum(c) == sum(len(d) + 1 for d in want), (sum(c), c)
PY
then echo "ok: --shard-tokens 500: several shards, none above 500, total preserved"
else echo "FAIL: --shard-tokens"; sed 's/^/  | /' "$dir/err"; fail=1; fi

# Validation split: deterministic, disjoint, non-empty; seed changes it.
"$PREP" --doc-sep % --val-frac 0.3 --seed 7 --shard-tokens 500 -o "$dir/v1" "$dir/many" 2> "$dir/err"
"$PREP" --doc-sep % --val-frac 0.3 --seed 7 -o "$dir/v2" "$dir/many" 2>> "$dir/err"
python3 "$dir/decode.py" "$dir/v1.json" "$dir/v1"
python3 "$dir/decode.py" "$dir/v2.json" "$dir/v2"
if python3 - "$dir/v1.json" "$dir/v2.json" <<'PY'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
# The choice depends on the document, not on sharding: same sets either way.
assert a["train"] == b["train"] and a["val"] == b["val"]
assert a["val"] and a["train"] and not set(a["val"]) & set(a["train"])
assert 20 < len(a["val"]) < 110, len(a["val"])
PY
then echo "ok: --val-frac 0.3: identical across runs and shardings, val non-empty and disjoint"
else echo "FAIL: --val-frac"; sed 's/^/  | /' "$dir/err"; fail=1; fi

# Bad input: exit code, message, and no PREFIX_* file.
bad() { # description, expected-exit, expected-text, args...
  desc=$1 want=$2 text=$3
  shift 3
  "$PREP" "$@" > "$dir/out" 2>&1 < /dev/null
  rc=$?
  if [ $rc -ne "$want" ] || ! grep -qF -- "$text" "$dir/out" || ls "$dir"/bad_* > /dev/null 2>&1; then
    echo "FAIL: $desc (exit $rc, expected $want and '$text')"; sed 's/^/  | /' "$dir/out"; fail=1
  else
    echo "ok: $desc"
  fi
  rm -f "$dir"/bad_* # so one failure does not fail the cases after it
}
bad "unknown flag" 2 "unknown option '--bogus'" -o "$dir/bad" --bogus "$dir/in"
bad "missing -o" 2 "missing -o PREFIX" "$dir/in"
bad "bad --shard-tokens" 2 "option --shard-tokens: 'ten' is not an integer" -o "$dir/bad" --shard-tokens ten "$dir/in"
bad "zero --shard-tokens" 2 "option --shard-tokens: 0 is out of range" -o "$dir/bad" --shard-tokens 0 "$dir/in"
bad "negative --seed" 2 "option --seed: -1 is out of range" -o "$dir/bad" --seed -1 "$dir/in"
bad "--val-frac 1" 2 "option --val-frac: 1 is out of range [0, 1)" -o "$dir/bad" --val-frac 1 "$dir/in"
bad "--val-frac -0.1" 2 "option --val-frac: -0.1 is out of range" -o "$dir/bad" --val-frac -0.1 "$dir/in"
bad "--val-frac nan" 2 "option --val-frac: 'nan' is not a finite number" -o "$dir/bad" --val-frac nan "$dir/in"
bad "flag without value" 2 "option --doc-sep needs a value" -o "$dir/bad" --doc-sep
bad "unreadable input path" 1 "cannot read input '$dir/nothing'" -o "$dir/bad" "$dir/in" "$dir/nothing"
mkdir "$dir/noperm" && chmod 000 "$dir/noperm"
if [ "$(id -u)" -ne 0 ]; then
  bad "unreadable directory" 1 "cannot read input directory '$dir/noperm'" -o "$dir/bad" "$dir/noperm"
fi
chmod 700 "$dir/noperm"
# The malformed line comes after enough text for shards to be written first:
# those must be removed too.
{ head -n 4 "$dir/docs.jsonl"; echo '{"text": "fine"}'; echo '{"text": broken}'; } > "$dir/badl.jsonl"
bad "malformed JSONL line" 1 "$dir/badl.jsonl:6: malformed JSON" --jsonl --shard-tokens 8 -o "$dir/bad" "$dir/badl.jsonl"
printf '{"text": "a"}\n["x"]\n' > "$dir/arr.jsonl"
bad "JSONL line without text" 1 "$dir/arr.jsonl:2: expected a JSON object" --jsonl -o "$dir/bad" "$dir/arr.jsonl"
bad "only empty documents" 1 "no documents" -o "$dir/bad" "$dir/in/c_empty.txt"
# A missing output directory is created (tests/test_ddpprep_bpe.sh); one
# that cannot be is an error.
bad "output directory not creatable" 1 "cannot create output directory '$dir/in/c_empty.txt'" \
  -o "$dir/in/c_empty.txt/bad" "$dir/in"

# Ctrl-C: a stdin that never ends; SIGINT must stop it with exit 1, no shard.
mkfifo "$dir/fifo"
"$PREP" --doc-sep % --shard-tokens 8 -o "$dir/bad" < "$dir/fifo" > "$dir/out" 2>&1 &
pid=$!
exec 3> "$dir/fifo"
printf 'abcdefghij\n%%\nklmnopq\n%%\n' >&3
sleep 0.5
kill -INT $pid
wait $pid
rc=$?
exec 3>&-
if [ $rc -eq 1 ] && grep -q "interrupted" "$dir/out" && ! ls "$dir"/bad_* > /dev/null 2>&1; then
  echo "ok: SIGINT: exit 1, shards removed"
else
  echo "FAIL: SIGINT (exit $rc)"; sed 's/^/  | /' "$dir/out"; ls "$dir"; fail=1
fi

# The shards train.
python3 - "$dir/corpus" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(300):
        f.write("the quick brown fox %d jumps over the lazy dog\n" % i * (1 + i % 3) + "%\n")
PY
"$PREP" --doc-sep % --shard-tokens 4000 -o "$dir/t" "$dir/corpus" 2> "$dir/err"
# shellcheck disable=SC2086
if [ -e "$dir/t_train_000001.bin" ] && "$DDPTRAIN" $TINY --data "$dir/t_train_*.bin" > "$dir/out" 2>&1; then
  echo "ok: ddptrain trains on ddpprep shards"
else
  echo "FAIL: training on ddpprep shards"; sed 's/^/  | /' "$dir/err" "$dir/out"; fail=1
fi
# ... and says which files its glob matched: how many, the first and the last
n=$(find "$dir" -name 't_train_*.bin' | wc -l)
last=$(find "$dir" -name 't_train_*.bin' | sort | tail -n 1)
if [ "$n" -gt 1 ] && grep -qF -- "--data '$dir/t_train_*.bin': $n shard files, first $dir/t_train_000000.bin, last $last" "$dir/out"; then
  echo "ok: the glob's $n shard files are logged, first and last"
else
  echo "FAIL: no log of the $n matched shard files"; grep -- "--data" "$dir/out" | sed 's/^/  | /'; fail=1
fi
# A warmup longer than the run is a warning: the peak learning rate is never reached
# shellcheck disable=SC2086
"$DDPTRAIN" $TINY --data "$dir/t_train_000000.bin" --warmup 9 > "$dir/out" 2>&1
if grep -q "WARN: --warmup 9 is longer than the run's 4 steps: the learning rate never reaches --lr" "$dir/out" &&
  grep -qF -- "--data '$dir/t_train_000000.bin': 1 shard file, $dir/t_train_000000.bin" "$dir/out"; then
  echo "ok: --warmup beyond --steps warns; one matched shard is logged"
else
  echo "FAIL: --warmup 9 with --steps 4 gave no warning"; sed 's/^/  | /' "$dir/out"; fail=1
fi
exit $fail
