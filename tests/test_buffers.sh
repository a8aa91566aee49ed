#!/bin/sh
# Model buffers (docs/design.md §3.9), with the test model of
# tests/buffer_model.c ("bufnet": BatchNorm-style running statistics,
# MEAN, and a batch counter, COUNT), trained through ddp_main:
#  1. 2 ranks on different data: the checkpoint's MEAN buffers are the
#     average of the two ranks' own values (dumped by the model before any
#     averaging), its counter is theirs; every pass's ddp_model_allreduce
#     summed over the ranks (the model fails the run otherwise);
#  2. bit-exact resume with the buffers: 8 steps straight = 4 + resume + 4,
#     every tensor of the two final checkpoints the same bits, with and
#     without --zero 1;
#  3. a 2-rank checkpoint resumes on 1 rank, its buffers restored;
#  4. the export holds the buffers under their names, the counter as an
#     I64 scalar (PyTorch's num_batches_tracked);
#  5. a checkpoint lacking a buffer, or holding one of another shape, is
#     refused naming it; counters that differ between the ranks stop the
#     run at its checkpoint; buffer tables that differ between the ranks
#     stop it at start-up; a model with a defective buffer table is
#     refused. None of them writes a checkpoint.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
prog="$top_builddir/tests/buffer_model"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
RUN="--threads 1 --peak-gflops 10 --batch-size 16 --log-every 4 --eval-every 0 --lr 0.01 --warmup 2"
run() { # run NAME NP ARGS...
  name=$1 np=$2
  shift 2
  # shellcheck disable=SC2086
  timeout 300 "$MPIRUN" -np "$np" "$prog" $RUN "$@" > "$dir/$name.log" 2>&1
}
show() { sed 's/^/  | /' "$dir/$1.log"; }
# Reads safetensors files with the standard library only: tensors as
# {name: (dtype, shape, raw bytes)}.
cat > "$dir/st.py" << 'EOF'
import json, struct, sys
def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    head.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in head.items()}
def floats(raw):
    return list(struct.unpack("<%df" % (len(raw) // 4), raw))
def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]
EOF
py() { PYTHONPATH="$dir" python3 "$@"; }

# 1. the checkpoint's MEAN buffers = the ranks' average; the counter = theirs
mkdir -p "$dir/dump"
if run avg 2 --steps 6 --save "$dir/avg" --bufnet-dump "$dir/dump"; then
  if res=$(py - "$dir/avg/ckpt_00000006.safetensors" "$dir"/dump/buffers.*.bin << 'EOF'
import sys
from st import load, floats, f32
ck = load(sys.argv[1])
ranks = [floats(open(p, "rb").read()) for p in sys.argv[2:]]
assert len(ranks) == 2, "expected 2 dumps, got %d" % len(ranks)
table = [("norm.running_mean", 8, "mean"), ("norm.running_var", 8, "mean"),
         ("norm.num_batches_tracked", 1, "count"), ("out.running_mean", 3, "mean")]
at, differ = 0, 0
for name, n, kind in table:
    key = "buffer." + name
    if key not in ck:
        sys.exit("the checkpoint has no tensor %s" % key)
    dtype, shape, raw = ck[key]
    got = floats(raw)
    a, b = ranks[0][at:at + n], ranks[1][at:at + n]
    at += n
    if kind == "count":
        if not (a == b == got == [6.0]):
            sys.exit("%s: ranks %s and %s, checkpoint %s (want 6 everywhere)" % (name, a, b, got))
        continue
    want = [f32(f32(x + y) * 0.5) for x, y in zip(a, b)]
    differ += sum(x != y for x, y in zip(a, b))
    if got != want:
        sys.exit("%s: checkpoint %s, the ranks' average %s" % (name, got, want))
if differ == 0:
    sys.exit("the ranks' MEAN buffers were equal before averaging: nothing was tested")
print("%d values differed between the ranks; the checkpoint holds their average" % differ)
EOF
  ); then
    echo "ok: MEAN buffers averaged over 2 ranks, counter kept: $res"
  else
    echo "FAIL: the checkpoint's buffers: $res"; fail=1
  fi
  if grep -q "did not sum" "$dir/avg.log"; then echo "FAIL: ddp_model_allreduce"; show avg; fail=1; fi
else
  echo "FAIL: the 2-rank run with buffers failed"; show avg; fail=1
fi

# 2. bit-exact resume with the buffers (evaluations at steps 3 and 6 and the
#    checkpoint at 4 average them in both runs alike), also under --zero 1
cat > "$dir/same.py" << 'EOF'
import sys
from st import load
a, b = load(sys.argv[1]), load(sys.argv[2])
if sorted(a) != sorted(b):
    sys.exit("different tensors: %s" % sorted(set(a) ^ set(b)))
bufs = [k for k in a if k.startswith("buffer.")]
if len(bufs) != 4:
    sys.exit("expected 4 buffer tensors, found %s" % bufs)
bad = [k for k in a if a[k] != b[k]]
if bad:
    sys.exit("tensors differ: %s" % bad)
print("%d tensors bit-identical, %d of them buffers" % (len(a), len(bufs)))
EOF
resume_case() { # resume_case TAG ARGS...: 8 straight steps against 4 + resume + 4
  tag=$1
  shift
  if run "full$tag" 2 "$@" --save "$dir/full$tag" --save-every 4 &&
     run "first$tag" 2 "$@" --stop-at 4 --save "$dir/split$tag" &&
     cp -r "$dir/split$tag" "$dir/one$tag" &&
     run "second$tag" 2 "$@" --resume "$dir/split$tag" --save "$dir/split$tag"; then
    if res=$(py "$dir/same.py" "$dir/full$tag/ckpt_00000008.safetensors" \
                "$dir/split$tag/ckpt_00000008.safetensors"); then
      echo "ok: --stop-at 4 + --resume equals 8 straight steps ($*): $res"
    else
      echo "FAIL: the resumed run differs ($*): $res"; fail=1
    fi
  else
    echo "FAIL: the resume runs failed ($*)"; show "full$tag"; show "first$tag"; show "second$tag"
    fail=1
  fi
}
resume_case "" --steps 8 --eval-every 3
resume_case _zero --steps 8 --eval-every 3 --zero 1 --bufnet-features 48 # >= 2 x 64 parameters

# 3 and 4. the step-4 checkpoint of 2 ranks on 1 rank; the export
if run one 1 --steps 6 --resume "$dir/one" --save "$dir/one" --export "$dir/one.st"; then
  if res=$(py - "$dir/one/ckpt_00000006.safetensors" "$dir/one.st" << 'EOF'
import struct, sys
from st import load, floats
ck, ex = load(sys.argv[1]), load(sys.argv[2])
count = floats(ck["buffer.norm.num_batches_tracked"][2])
if count != [6.0]:
    sys.exit("the counter is %s after 4 resumed + 2 steps (want 6)" % count)
want = {"fc.weight": ("F32", [3, 8]), "fc.bias": ("F32", [3]),
        "norm.running_mean": ("F32", [8]), "norm.running_var": ("F32", [8]),
        "norm.num_batches_tracked": ("I64", []), "out.running_mean": ("F32", [3])}
got = {k: (v[0], v[1]) for k, v in ex.items()}
if got != want:
    sys.exit("export has %s, want %s" % (got, want))
n = struct.unpack("<q", ex["norm.num_batches_tracked"][2])[0]
if n != 6:
    sys.exit("exported num_batches_tracked %d (want 6)" % n)
if ex["norm.running_mean"][2] != ck["buffer.norm.running_mean"][2]:
    sys.exit("the export's running_mean differs from the checkpoint's")
print("counter 6; export: " + ", ".join("%s %s %s" % (k, *got[k]) for k in sorted(got)))
EOF
  ); then
    echo "ok: 2 ranks -> 1 rank resume keeps the buffers; $res"
  else
    echo "FAIL: resume on 1 rank / export: $res"; fail=1
  fi
else
  echo "FAIL: resuming the 2-rank checkpoint on 1 rank failed"; show one; fail=1
fi

# 5. refusals: nothing is trained or written
mkdir -p "$dir/refused"
refuse() { # refuse NP DESC MESSAGE ARGS...
  np=$1 desc=$2 msg=$3
  shift 3
  before=$(find "$dir/refused" -type f | wc -l)
  run refuse "$np" "$@"
  rc=$?
  after=$(find "$dir/refused" -type f | wc -l)
  if [ "$rc" -ne 0 ] && grep -qF -- "$msg" "$dir/refuse.log" && [ "$before" = "$after" ]; then
    echo "ok: $desc refused (exit $rc): $msg"
  else
    echo "FAIL: $desc: exit $rc, files $before -> $after, expected '$msg':"; show refuse; fail=1
  fi
}
refuse 1 "a checkpoint without a buffer the model has" \
  "holds no tensor buffer.extra.running_mean that this model has" \
  --steps 10 --resume "$dir/split" --save "$dir/refused" --bufnet-extra 2
run extra 1 --steps 2 --save "$dir/extra" --bufnet-extra 2 || { echo "FAIL: --bufnet-extra 2"; show extra; fail=1; }
refuse 1 "a buffer of another shape" \
  "tensor buffer.extra.running_mean has shape [2] there and [3] in this model" \
  --steps 4 --resume "$dir/extra" --save "$dir/refused" --bufnet-extra 3
refuse 2 "counters that differ between the ranks" \
  "ranks disagree on model bufnet's counter buffers (kind COUNT) before a checkpoint" \
  --steps 2 --save "$dir/refused" --bufnet-skew 1
refuse 2 "buffer tables that differ between the ranks (a kind)" \
  "ranks disagree on the parameter and buffer layout (tensor names, shapes, order; buffer kinds)" \
  --steps 2 --save "$dir/refused" --bufnet-skew 2
refuse 1 "a buffer table with a gap" \
  "model bufnet, buffer table: tensor out.running_mean starts at element 18, expected 17" \
  --steps 2 --save "$dir/refused" --bufnet-bad-table 1
refuse 1 "a buffer of an unknown kind" \
  "model bufnet: buffer norm.running_var has an unknown kind 7" \
  --steps 2 --save "$dir/refused" --bufnet-bad-table 2
exit $fail
