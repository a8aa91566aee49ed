#!/bin/sh
# ddpprep --images end to end (docs/design.md §5.6), checked by an
# independent reader (python3) so a bug shared by the writer and ddptrain's
# reader cannot hide:
#  - IDX pairs, plain and gzipped, in either order, and CIFAR-10/100 batches
#    made here with python3 (struct, gzip) convert to shards whose header,
#    labels and pixels equal the source's (CIFAR's CHW planes become HWC);
#  - --val-frac: two runs are identical; train and val together hold every
#    record once, each in source order; val is near its fraction;
#  - bad input (unknown format, text-only flags, wrong path counts, missing
#    or unreadable paths, wrong magic, mismatched counts, truncated or
#    corrupt gzip, trailing data, labels out of range, an empty batch, all
#    records in val, SIGINT) exits 2 (command line) or 1 (runtime) with one
#    line naming the cause, and leaves no PREFIX_* file; an earlier output
#    under the same prefix stays untouched;
#  - Fashion-MNIST's real training set (Debian's dataset-fashion-mnist), when
#    installed: 60,000 records of 28x28x1, 10 classes (SKIP otherwise).
. "${top_builddir:-.}/tests/env.sh"
set -u
PREP="$top_builddir/ddpprep"
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

ok() { echo "ok: $1"; }
ko() { echo "FAIL: $1"; [ -f "$dir/err" ] && sed 's/^/  | /' "$dir/err"; fail=1; }

# The source data: IDX (7 images of 4x3, labels 0..4; 300 random 5x5 for
# the split) and CIFAR batches, plain and gzipped, with the expected records
# as JSON [label, [pixels HWC]].
python3 - "$dir" <<'PY'
import gzip, json, random, struct, sys
d = sys.argv[1]
rnd = random.Random(7)
def idx(name, n, rows, cols, labels):
    imgs = [[rnd.randrange(256) for _ in range(rows * cols)] for _ in range(n)]
    im = struct.pack(">IIII", 0x803, n, rows, cols) + b"".join(bytes(i) for i in imgs)
    lb = struct.pack(">II", 0x801, n) + bytes(labels)
    open(d + "/" + name + "-images-idx3-ubyte", "wb").write(im)
    open(d + "/" + name + "-labels-idx1-ubyte", "wb").write(lb)
    gzip.open(d + "/" + name + "-images-idx3-ubyte.gz", "wb").write(im)
    gzip.open(d + "/" + name + "-labels-idx1-ubyte.gz", "wb").write(lb)
    json.dump([[l, i] for l, i in zip(labels, imgs)], open(d + "/" + name + ".json", "w"))
idx("tiny", 7, 4, 3, [0, 4, 2, 1, 3, 0, 2])
idx("many", 300, 5, 5, [rnd.randrange(10) for _ in range(300)])
def cifar(name, counts, hundred):
    want = []
    for f, n in enumerate(counts):
        out = b""
        for _ in range(n):
            fine = rnd.randrange(100 if hundred else 10)
            chw = [rnd.randrange(256) for _ in range(3072)]
            out += (bytes([rnd.randrange(20), fine]) if hundred else bytes([fine])) + bytes(chw)
            want.append([fine, [chw[c * 1024 + i] for i in range(1024) for c in range(3)]])
        open("%s/%s_%d.bin" % (d, name, f), "wb").write(out)
    json.dump(want, open(d + "/" + name + ".json", "w"))
cifar("c10", [3, 2], False)
cifar("c100", [4], True)
PY

# read.py SHARD: the shard as JSON {"header": [...], "records": [[label,
# [pixels]], ...]} after checking the layout (§5.6) byte by byte.
cat > "$dir/read.py" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
h = struct.unpack("<16I", data[:64])
assert data[:4] == b"DIMG" and h[1] == 1 and h[2] == 64 and h[9:] == (0,) * 7, h
count, height, width, channels, classes, rec = h[3:9]
img = height * width * channels
assert rec == 4 + (img + 3) // 4 * 4 and len(data) == 64 + count * rec, (h, len(data))
records = []
for i in range(count):
    r = data[64 + i * rec: 64 + (i + 1) * rec]
    label = struct.unpack("<i", r[:4])[0]
    assert 0 <= label < classes and r[4 + img:] == b"\0" * (rec - 4 - img)
    records.append([label, list(r[4:4 + img])])
json.dump({"header": list(h[3:8]), "records": records}, sys.stdout)
PY

# same SHARD SOURCE.json HEADER: the shard holds exactly the source records.
same() {
  python3 "$dir/read.py" "$1" > "$dir/got.json" 2> "$dir/err" &&
  python3 - "$dir/got.json" "$2" "$3" <<'PY' >> "$dir/err" 2>&1
import json, sys
got, want = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
hdr = [int(x) for x in sys.argv[3].split(",")]
assert got["header"] == hdr, (got["header"], hdr)
assert got["records"] == want, "records differ"
PY
}

if "$PREP" --images idx -o "$dir/p/plain" "$dir/tiny-images-idx3-ubyte" "$dir/tiny-labels-idx1-ubyte" 2> "$dir/err" &&
   same "$dir/p/plain_train.img" "$dir/tiny.json" 7,4,3,1,5 && [ ! -e "$dir/p/plain_val.img" ]
then ok "idx, plain: 7 records of 4x3x1, 5 classes, labels and pixels as the source"
else ko "idx, plain"; fi

if "$PREP" --images idx -o "$dir/gz" "$dir/tiny-labels-idx1-ubyte.gz" "$dir/tiny-images-idx3-ubyte.gz" 2> "$dir/err" &&
   cmp -s "$dir/gz_train.img" "$dir/p/plain_train.img"
then ok "idx, gzipped and labels first: the same shard as from the plain files"
else ko "idx, gzipped"; fi

if "$PREP" --images cifar10 -o "$dir/c10" "$dir/c10_0.bin" "$dir/c10_1.bin" 2> "$dir/err" &&
   same "$dir/c10_train.img" "$dir/c10.json" 5,32,32,3,10
then ok "cifar10: two batches, 5 records of 32x32x3 HWC, 10 classes"
else ko "cifar10"; fi

if "$PREP" --images cifar100 -o "$dir/c100" "$dir/c100_0.bin" 2> "$dir/err" &&
   same "$dir/c100_train.img" "$dir/c100.json" 4,32,32,3,100
then ok "cifar100: the fine labels, 100 classes"
else ko "cifar100"; fi

# The split: deterministic, a partition of the source in order, near 30%.
split() { "$PREP" --images idx --val-frac 0.3 --seed 5 -o "$dir/$1" \
  "$dir/many-images-idx3-ubyte.gz" "$dir/many-labels-idx1-ubyte.gz"; }
if split s1 2> "$dir/err" && split s2 2>> "$dir/err" &&
   cmp -s "$dir/s1_train.img" "$dir/s2_train.img" && cmp -s "$dir/s1_val.img" "$dir/s2_val.img" &&
   python3 "$dir/read.py" "$dir/s1_train.img" > "$dir/t.json" &&
   python3 "$dir/read.py" "$dir/s1_val.img" > "$dir/v.json" &&
   python3 - "$dir/t.json" "$dir/v.json" "$dir/many.json" <<'PY' >> "$dir/err" 2>&1
import json, sys
t, v, want = (json.load(open(p)) for p in sys.argv[1:])
t, v = t["records"], v["records"]
ti = vi = 0
for r in want:  # every source record is the next of train or of val
    if ti < len(t) and t[ti] == r: ti += 1
    elif vi < len(v) and v[vi] == r: vi += 1
    else: sys.exit("record %r is in neither split, in order" % (r[0],))
assert ti == len(t) and vi == len(v)
assert 60 <= len(v) <= 120, len(v)
print(len(t), len(v))
PY
then ok "--val-frac 0.3: identical across runs; train + val = the source, in order ($(tail -n 1 "$dir/err"))"
else ko "--val-frac"; fi

# Bad input: exit status, one line naming the cause, and no bad_* file.
bad() { # description, expected-exit, expected-text, args...
  desc=$1 want=$2 text=$3
  shift 3
  "$PREP" "$@" > "$dir/out" 2>&1 < /dev/null
  rc=$?
  if [ $rc -ne "$want" ] || ! grep -qF -- "$text" "$dir/out" || [ "$(wc -l < "$dir/out")" -ne 1 ] ||
     ls "$dir"/bad_* > /dev/null 2>&1; then
    echo "FAIL: $desc (exit $rc, expected $want and one line '$text')"; sed 's/^/  | /' "$dir/out"
    ls "$dir"/bad_* 2> /dev/null; fail=1
  else
    echo "ok: $desc"
  fi
  rm -f "$dir"/bad_*
}
I="$dir/tiny-images-idx3-ubyte" L="$dir/tiny-labels-idx1-ubyte"
bad "unknown format" 2 "option --images: unknown format 'png'" --images png -o "$dir/bad" "$I" "$L"
bad "a text-only flag" 2 "--jsonl applies to text input only" --images idx --jsonl -o "$dir/bad" "$I" "$L"
bad "idx with one path" 2 "--images idx needs two inputs" --images idx -o "$dir/bad" "$I"
bad "cifar without paths" 2 "--images cifar10 needs at least one input" --images cifar10 -o "$dir/bad"
bad "missing path" 1 "cannot read input '$dir/nothing'" --images idx -o "$dir/bad" "$I" "$dir/nothing"
bad "a directory" 1 "cannot read input '$dir/p': it is a directory" --images cifar10 -o "$dir/bad" "$dir/p"
bad "wrong magic" 1 "input '$dir/c10_0.bin': magic 0x" --images idx -o "$dir/bad" "$I" "$dir/c10_0.bin"
bad "two image files" 1 "are both IDX images" --images idx -o "$dir/bad" "$I" "$dir/many-images-idx3-ubyte"
bad "counts disagree" 1 "holds 7 images (byte 4), but '$dir/many-labels-idx1-ubyte' holds 300" \
  --images idx -o "$dir/bad" "$I" "$dir/many-labels-idx1-ubyte"
head -c $((16 + 6 * 12 + 5)) "$I" > "$dir/trunc-images"
bad "truncated images" 1 "input '$dir/trunc-images' is truncated: image 6 at byte 88 needs 12 bytes" \
  --images idx -o "$dir/bad" "$dir/trunc-images" "$L"
{ cat "$L"; printf 'x'; } > "$dir/long-labels"
bad "trailing data" 1 "input '$dir/long-labels' has trailing data at byte 15" --images idx -o "$dir/bad" "$I" "$dir/long-labels"
python3 -c 'import sys, struct; sys.stdout.buffer.write(struct.pack(">III", 0x803, 0, 4) + b"\0\0\0\3")' > "$dir/zero-images"
bad "zero images" 1 "image count 0 at byte 4" --images idx -o "$dir/bad" "$dir/zero-images" "$L"
size=$(wc -c < "$dir/many-images-idx3-ubyte.gz")
head -c $((size / 2)) "$dir/many-images-idx3-ubyte.gz" > "$dir/cut.gz"
bad "truncated gzip" 1 "'$dir/cut.gz'" --images idx -o "$dir/bad" "$dir/cut.gz" "$dir/many-labels-idx1-ubyte"
python3 - "$dir/many-images-idx3-ubyte.gz" "$dir/corrupt.gz" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
for i in range(len(b) // 2, len(b) // 2 + 64): b[i] ^= 0x5a
open(sys.argv[2], "wb").write(b)
PY
bad "corrupt gzip" 1 "cannot read input '$dir/corrupt.gz'" --images idx -o "$dir/bad" "$dir/corrupt.gz" "$dir/many-labels-idx1-ubyte"
head -c $((3073 + 100)) "$dir/c10_0.bin" > "$dir/c10_cut.bin"
bad "truncated CIFAR record" 1 "record 1 at byte 3073 has 100 of its 3073 bytes" --images cifar10 -o "$dir/bad" "$dir/c10_0.bin" "$dir/c10_cut.bin"
{ printf '\012'; head -c 3072 /dev/zero; } > "$dir/c10_label.bin"
bad "CIFAR-10 label 10" 1 "label 10 of record 0 at byte 0 is not in 0..9" --images cifar10 -o "$dir/bad" "$dir/c10_label.bin"
bad "a CIFAR-10 file read as CIFAR-100" 1 "'$dir/c10_0.bin'" --images cifar100 -o "$dir/bad" "$dir/c10_0.bin"
: > "$dir/empty.bin"
bad "empty CIFAR batch" 1 "holds no CIFAR records" --images cifar10 -o "$dir/bad" "$dir/c10_0.bin" "$dir/empty.bin"
bad "every record in val" 1 "every record went to validation" --images cifar10 --val-frac 0.999999 -o "$dir/bad" "$dir/c10_0.bin"
bad "output directory not creatable" 1 "cannot create output directory '$dir/empty.bin'" \
  --images cifar10 -o "$dir/empty.bin/bad" "$dir/c10_0.bin"

# A failed run leaves an earlier shard under the same prefix as it was.
cp "$dir/c10_train.img" "$dir/before.img"
if ! "$PREP" --images cifar10 -o "$dir/c10" "$dir/c10_0.bin" "$dir/c10_cut.bin" 2> "$dir/err" &&
   cmp -s "$dir/c10_train.img" "$dir/before.img" && ! ls "$dir"/c10_*.tmp > /dev/null 2>&1
then ok "a failed run leaves the earlier output untouched"
else ko "a failed run over an earlier output"; fi

# SIGINT while reading a stream that never ends: exit 1, one line, no file.
mkfifo "$dir/fifo"
"$PREP" --images idx -o "$dir/bad" "$dir/fifo" "$L" > "$dir/out" 2>&1 &
pid=$!
exec 3<> "$dir/fifo" # read-write: never blocks, even if ddpprep has already exited
head -c $((16 + 3 * 12)) "$I" >&3
sleep 0.5
kill -INT $pid
wait $pid
rc=$?
exec 3>&-
if [ $rc -eq 1 ] && grep -q "interrupted by signal" "$dir/out" && [ "$(wc -l < "$dir/out")" -eq 1 ] &&
   ! ls "$dir"/bad_* > /dev/null 2>&1
then ok "SIGINT: exit 1, nothing left"
else echo "FAIL: SIGINT (exit $rc)"; sed 's/^/  | /' "$dir/out"; ls "$dir"; fail=1; fi

# The real thing, when installed: Fashion-MNIST's training set.
fm=/usr/share/datasets/fashion-mnist
if [ -r "$fm/train-images-idx3-ubyte.gz" ] && [ -r "$fm/train-labels-idx1-ubyte.gz" ]; then
  if "$PREP" --images idx -o "$dir/fm" "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" 2> "$dir/err" &&
     python3 - "$dir/fm_train.img" "$fm" <<'PY' >> "$dir/err" 2>&1
import gzip, struct, sys
data = open(sys.argv[1], "rb").read()
h = struct.unpack("<16I", data[:64])
assert h[3:9] == (60000, 28, 28, 1, 10, 788), h[3:9]
im = gzip.open(sys.argv[2] + "/train-images-idx3-ubyte.gz").read()
lb = gzip.open(sys.argv[2] + "/train-labels-idx1-ubyte.gz").read()
for i in (0, 1, 31337, 59999):
    r = data[64 + i * 788: 64 + (i + 1) * 788]
    assert struct.unpack("<i", r[:4])[0] == lb[8 + i] and r[4:] == im[16 + i * 784: 16 + (i + 1) * 784], i
PY
  then ok "Fashion-MNIST train set: 60000 records of 28x28x1, 10 classes, records as the source"
  else ko "Fashion-MNIST train set"; fi
else
  echo "SKIP: Fashion-MNIST (Debian package dataset-fashion-mnist) is not installed"
fi

exit $fail
