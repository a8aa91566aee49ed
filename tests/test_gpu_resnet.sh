#!/bin/sh
# --model resnet on the CUDA backend (SKIP, exit 77, without a GPU): a tiny
# ResNet-10 (width 8) on the built-in 32 x 32 images.
#  1. fp32 (--tf32 off), 3 SGD steps of 8 images: the GPU's weights follow
#     the CPU backend's within 2e-3 of the update, measured as
#     |w_gpu - w_cpu| / |w_cpu - w_0| over all parameters together (w_0: the
#     initial weights, a run with --lr 0), and the running statistics within
#     1e-3 (relative L2 per tensor), the counters equal. Per-tensor
#     relative differences would judge a BatchNorm bias still near 0 by its
#     rounding alone; the update is what the kernels compute. On the CPU,
#     rounding-level perturbations move that measure by about 2e-6, and its
#     two BatchNorm paths (--sync-bn 0 and 1) agree to 8e-6 at this batch;
#     the GPU's convolutions are other algorithms (cuDNN, autotuned), so
#     the bound leaves room for their rounding, not for a wrong gradient
#     (whole percents). The step loop makes no allocation.
#  2. --deterministic on (the default) twice: bit-identical exports. The
#     runs share a --conv-algos record: autotuning alone times candidates
#     differently from run to run (a bf16 pair differed on an H100), the
#     record makes the second run take the first one's algorithms.
#  3. bf16: two runs with one record bit-identical (the first writes it, the
#     second reads it), and 40 steps make the loss fall (last
#     log window at most 98% of the first); SKIPped with a line when this
#     build trains the ResNet in fp32 only (exit 2 naming --precision).
#  4. --sync-bn 1 on one GPU equals --sync-bn 0 (our statistics kernels
#     against cuDNN's batch norm): weights within 1e-3 of the update,
#     running statistics within 1e-3, counters equal.
#  5. CUDA graphs (--cuda-graphs auto, the default, records each kind of
#     pass once and replays it): the second bf16 run of 3 replayed 38 of
#     its 40 passes from two recordings (the batch alternates between two
#     input slots: the first pass of each runs eagerly), and equals a
#     --cuda-graphs off run with the same record bit for bit; so does a run
#     of 2 micro-steps a step (two kinds of pass: accumulate or not, notify
#     or not, each always in the same slot).
. "${top_builddir:-.}/tests/env.sh"
set -u
if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L 2> /dev/null | grep -q GPU; then
  echo "SKIP: no GPU (nvidia-smi lists none)"; exit 77
fi
fail=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
NET="--model resnet --depth 10 --width 8 --peak-gflops 10 --optimizer sgd --lr 0.05 --momentum 0.9
     --nesterov 1 --weight-decay 5e-4 --eval-every 0"
SHORT="$NET --warmup 0 --batch-size 8 --steps 3 --log-every 1"

# diff.py A B W0 WHAT: WHAT=update: |A - B| / |B - W0| over all parameters;
# WHAT=buffers: the worst relative L2 difference of a running statistic,
# and the counters (int64) compared exactly. Standard library only.
cat > "$dir/diff.py" << 'EOF'
import json, math, struct, sys
def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    head.pop("__metadata__", None)
    out = {}
    for k, v in head.items():
        raw = data[v["data_offsets"][0]:v["data_offsets"][1]]
        code = {"F32": "f", "I64": "q"}[v["dtype"]]
        out[k] = struct.unpack("<%d%s" % (len(raw) // struct.calcsize(code), code), raw)
    return out
a, b, w0 = (load(p) for p in sys.argv[1:4])
assert sorted(a) == sorted(b) == sorted(w0), "the files hold different tensors"
buffer = lambda k: "running_" in k or k.endswith("num_batches_tracked")
if sys.argv[4] == "update":
    d = sum((x - y) ** 2 for k in a if not buffer(k) for x, y in zip(a[k], b[k]))
    u = sum((y - z) ** 2 for k in a if not buffer(k) for y, z in zip(b[k], w0[k]))
    print("%.3g" % (math.sqrt(d / u) if u > 0 else 1e9))
else:
    worst, name = 0.0, "(none)"
    for k in sorted(a):
        if k.endswith("num_batches_tracked"):
            if a[k] != b[k]:
                print("1e9 (%s: %s vs %s)" % (k, a[k], b[k])); sys.exit()
        elif buffer(k):
            r = math.sqrt(sum(y * y for y in b[k]))
            rel = math.sqrt(sum((x - y) ** 2 for x, y in zip(a[k], b[k]))) / (r if r > 0 else 1)
            if not rel <= worst:
                worst, name = rel, k
    print("%.3g (%s)" % (worst, name))
EOF
within() { # within VALUE TOL: VALUE's first word is a number <= TOL
  awk -v v="${1%% *}" -v t="$2" 'BEGIN { exit !(v + 0 == v && v <= t) }'
}
train() { # train NAME ARGS...: one run with --metrics and --export; 1 when it failed
  name=$1
  shift
  # shellcheck disable=SC2086
  "$DDPTRAIN" "$@" --metrics "$dir/$name.jsonl" --export "$dir/$name.st" > "$dir/$name.out" 2>&1
  rc=$?
  [ $rc = 0 ] && return 0
  echo "FAIL: run $name (exit $rc): $*"; tail -n 8 "$dir/$name.out" | sed 's/^/  | /'; fail=1
  return 1
}

# ---- 1. fp32 on the GPU against the CPU ------------------------------------
# The CPU on its direct convolution kernels, the closest to exact: oneDNN's
# Winograd ones (its default on AVX-512 hosts) round about ten times more.
# shellcheck disable=SC2086
if train w0 --device cpu --threads 1 $SHORT --lr 0 --min-lr 0 --winograd off &&
   train cpu --device cpu --threads 1 $SHORT --winograd off &&
   train gpu --device cuda --tf32 off $SHORT --conv-algos "$dir/algos32.txt"; then
  u=$(python3 "$dir/diff.py" "$dir/gpu.st" "$dir/cpu.st" "$dir/w0.st" update)
  b=$(python3 "$dir/diff.py" "$dir/gpu.st" "$dir/cpu.st" "$dir/w0.st" buffers)
  if within "$u" 2e-3 && within "$b" 1e-3; then
    echo "ok: fp32 GPU follows the CPU: update differs by $u, running statistics by $b"
  else
    echo "FAIL: fp32 GPU against the CPU: update differs by $u (bound 2e-3), running statistics by $b (bound 1e-3)"
    fail=1
  fi
  if tail -n 1 "$dir/gpu.jsonl" | grep -q '"loop_allocs":0[,}]'; then
    echo "ok: no allocations in the GPU step loop"
  else
    echo "FAIL: loop_allocs: $(tail -n 1 "$dir/gpu.jsonl")"; fail=1
  fi
fi

# ---- 2. --deterministic on: bit-identical repeats ---------------------------
# shellcheck disable=SC2086
if [ -f "$dir/gpu.st" ] && train gpu2 --device cuda --tf32 off $SHORT --deterministic on \
     --conv-algos "$dir/algos32.txt"; then
  if cmp -s "$dir/gpu.st" "$dir/gpu2.st"; then
    echo "ok: fp32 --deterministic on: two runs export bit-identical weights"
  else
    echo "FAIL: fp32 --deterministic on: two runs differ"; fail=1
  fi
fi

# ---- 3. bf16 ------------------------------------------------------------------
LONG="$NET --warmup 2 --batch-size 32 --steps 40 --log-every 10"
# shellcheck disable=SC2086
"$DDPTRAIN" --device cuda --precision bf16 $LONG --metrics "$dir/bf1.jsonl" --export "$dir/bf1.st" \
  --conv-algos "$dir/algos16.txt" > "$dir/bf1.out" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q -- "--precision bf16" "$dir/bf1.out"; then
  echo "SKIP (part): this build trains the ResNet in fp32 only: $(grep -m 1 -- '--precision bf16' "$dir/bf1.out")"
elif [ $rc != 0 ]; then
  echo "FAIL: bf16 run (exit $rc)"; tail -n 8 "$dir/bf1.out" | sed 's/^/  | /'; fail=1
else
  losses=$(python3 -c 'import json,sys
w = [r["loss"] for r in map(json.loads, open(sys.argv[1])) if r.get("record") == "step"]
print(w[0], w[-1])' "$dir/bf1.jsonl")
  # shellcheck disable=SC2086
  if awk -v a="${losses% *}" -v b="${losses#* }" 'BEGIN { exit !(b <= 0.98 * a) }'; then
    echo "ok: bf16 loss fell from ${losses% *} to ${losses#* } (log windows of 10 steps)"
  else
    echo "FAIL: bf16 loss went from ${losses% *} to ${losses#* }"; fail=1
  fi
  # shellcheck disable=SC2086
  # the record the first run wrote: every convolution op of the ResNet-10
  # (3 ops x its shapes), which the second run reads instead of timing
  n=$(grep -c '^conv_' "$dir/algos16.txt" 2> /dev/null)
  if [ "${n:-0}" -ge 30 ]; then
    echo "ok: the first bf16 run recorded $n algorithm choices"
  else
    echo "FAIL: the first bf16 run recorded ${n:-no} algorithm choices (want >= 30)"; fail=1
  fi
  # shellcheck disable=SC2086
  if train bf2 --device cuda --precision bf16 $LONG --conv-algos "$dir/algos16.txt"; then
    if ! grep -q -- "--conv-algos: $n convolution algorithm choices from" "$dir/bf2.out"; then
      echo "FAIL: the second bf16 run did not read the record"; fail=1
    elif cmp -s "$dir/bf1.st" "$dir/bf2.st"; then
      echo "ok: bf16 --deterministic on: two runs with one record export bit-identical weights"
    else
      echo "FAIL: bf16 --deterministic on: two runs with one record differ"; fail=1
    fi
  fi
fi

# ---- 4. --sync-bn 1 on one GPU equals --sync-bn 0 ----------------------------
# shellcheck disable=SC2086
if [ -f "$dir/gpu.st" ] && [ -f "$dir/w0.st" ] && train sync --device cuda --tf32 off $SHORT --sync-bn 1; then
  u=$(python3 "$dir/diff.py" "$dir/sync.st" "$dir/gpu.st" "$dir/w0.st" update)
  b=$(python3 "$dir/diff.py" "$dir/sync.st" "$dir/gpu.st" "$dir/w0.st" buffers)
  if within "$u" 1e-3 && within "$b" 1e-3; then
    echo "ok: --sync-bn 1 on one GPU equals --sync-bn 0: update differs by $u, running statistics by $b"
  else
    echo "FAIL: --sync-bn 1 on one GPU: update differs by $u (bound 1e-3), running statistics by $b (bound 1e-3)"
    fail=1
  fi
fi
# ---- 5. CUDA graphs replay the same kernels: the same bits -------------------
if [ -f "$dir/bf2.st" ]; then
  # shellcheck disable=SC2086
  if grep -q 'CUDA graphs: 38 passes replayed from 2 recordings' "$dir/bf2.out"; then
    echo "ok: $(grep -m 1 -o 'CUDA graphs: .*' "$dir/bf2.out")"
  else
    echo "FAIL: the bf16 run did not replay 38 of its 40 passes: $(grep -m 1 'CUDA graphs' "$dir/bf2.out")"
    fail=1
  fi
  # shellcheck disable=SC2086
  if train bfoff --device cuda --precision bf16 $LONG --conv-algos "$dir/algos16.txt" --cuda-graphs off; then
    if grep -q 'CUDA graphs' "$dir/bfoff.out"; then
      echo "FAIL: --cuda-graphs off still reports graphs: $(grep -m 1 'CUDA graphs' "$dir/bfoff.out")"; fail=1
    elif cmp -s "$dir/bf2.st" "$dir/bfoff.st"; then
      echo "ok: bf16 with CUDA graphs equals --cuda-graphs off bit for bit"
    else
      echo "FAIL: bf16 with CUDA graphs differs from --cuda-graphs off"; fail=1
    fi
  fi
  ACC="$NET --warmup 0 --batch-size 8 --accum 2 --steps 6 --log-every 1 --precision bf16"
  # shellcheck disable=SC2086
  if train acc_on --device cuda $ACC --conv-algos "$dir/algos16.txt" &&
     train acc_off --device cuda $ACC --conv-algos "$dir/algos16.txt" --cuda-graphs off; then
    if ! grep -q 'CUDA graphs: 10 passes replayed from 2 recordings' "$dir/acc_on.out"; then
      echo "FAIL: --accum 2: $(grep -m 1 'CUDA graphs' "$dir/acc_on.out") (want 10 replays of 2 recordings)"
      fail=1
    elif cmp -s "$dir/acc_on.st" "$dir/acc_off.st"; then
      echo "ok: --accum 2 with CUDA graphs (two recordings) equals --cuda-graphs off bit for bit"
    else
      echo "FAIL: --accum 2 with CUDA graphs differs from --cuda-graphs off"; fail=1
    fi
  fi
fi
exit $fail
