#!/bin/sh
# Mixed precision on the built-in data (CPU backend): the loss curves of
# fp32, bf16 and fp16 training, and what --grad-reduce-dtype bf16/fp16 costs
# in accuracy against the fp32 all-reduce.
#   model: the default GPT (L2 H4 C128, seq-len 128, 4096 padded tokens per
#   micro-batch), AdamW with the default schedule, one thread per rank, the
#   same seed everywhere, so the runs differ only in precision.
# Runs: 1 rank in fp32, bf16, fp16 (curves); 2 ranks in fp32 with the
# all-reduce in fp32, bf16 and fp16, and 2 ranks in bf16 / fp16 precision
# with the all-reduce in their own type (accuracy cost of the half
# reduction: final losses and the relative L2 distance of all weights from
# the fp32-reduce run of the same precision).
# On the CPU half storage costs conversions (every op widens its operands),
# so timings here say nothing about GPU speed; only the losses are the point.
# Prints markdown tables; writes amp_curves.png beside the metrics when
# matplotlib is importable.
# Usage: bench/amp_curves.sh [BUILD_DIR, default .] [STEPS, default 200]
#   AMP_CURVES_KEEP=DIR keeps logs, metrics, exports and the plot in DIR;
#   with AMP_CURVES_REPORT_ONLY=1 as well, only the tables are made again
#   from the runs kept there.
set -eu
build=$(cd "${1:-.}" && pwd)
steps=${2:-200}
ddptrain="$build/ddptrain"
[ -x "$ddptrain" ] || { echo "amp_curves: no $ddptrain (build first)" >&2; exit 1; }
mpirun=$(command -v mpirun || true)
if [ -n "${AMP_CURVES_KEEP:-}" ]; then dir=$AMP_CURVES_KEEP; mkdir -p "$dir"; else
  dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
COMMON="--threads 1 --peak-gflops 10 --steps $steps --log-every 10 --eval-every 50 --seed 1337"

run() { # run NAME NP ARGS...
  name=$1 np=$2
  shift 2
  rm -f "$dir/$name.jsonl"
  echo "amp_curves: $name ($np rank(s)) ..." >&2
  t0=$(date +%s)
  if [ "$np" -eq 1 ]; then
    # shellcheck disable=SC2086
    "$ddptrain" $COMMON --metrics "$dir/$name.jsonl" --export "$dir/$name.st" "$@" > "$dir/$name.log" 2>&1
  else
    # shellcheck disable=SC2086
    "$mpirun" --oversubscribe -np "$np" "$ddptrain" $COMMON --metrics "$dir/$name.jsonl" \
      --export "$dir/$name.st" "$@" > "$dir/$name.log" 2>&1
  fi || { echo "amp_curves: run $name failed:" >&2; tail -n 5 "$dir/$name.log" >&2; exit 1; }
  echo "$name $(($(date +%s) - t0))" >> "$dir/seconds"
}

if [ -z "${AMP_CURVES_REPORT_ONLY:-}" ]; then
: > "$dir/seconds"
for p in fp32 bf16 fp16; do run "$p" 1 --precision "$p"; done
if [ -n "$mpirun" ]; then
  for r in fp32 bf16 fp16; do run "np2-fp32-reduce-$r" 2 --precision fp32 --grad-reduce-dtype "$r"; done
  for p in bf16 fp16; do
    run "np2-$p-reduce-fp32" 2 --precision "$p"
    run "np2-$p-reduce-$p" 2 --precision "$p" --grad-reduce-dtype "$p"
  done
else
  echo "amp_curves: no mpirun: the --grad-reduce-dtype runs are skipped" >&2
fi
fi

python3 - "$dir" "$steps" <<'PY'
import json, math, os, struct, sys
d, steps = sys.argv[1], int(sys.argv[2])
def recs(name):
    path = os.path.join(d, name + ".jsonl")
    return [json.loads(l) for l in open(path)] if os.path.exists(path) else None
def weights(name):
    raw = open(os.path.join(d, name + ".st"), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    data = raw[8 + n:]
    return struct.unpack("<%df" % (len(data) // 4), data)
def distance(a, b):  # |a - b| / |b| over all weights
    wa, wb = weights(a), weights(b)
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(wa, wb)) / sum(y * y for y in wb))
def final(name):
    return [r for r in recs(name) if r.get("final")][0]
secs = dict(l.split() for l in open(os.path.join(d, "seconds")))
curves = {p: {r["step"]: r["loss"] for r in recs(p) if "loss" in r} for p in ("fp32", "bf16", "fp16")}
print("### Loss curves, 1 rank (train loss, mean of each 10-step window)\n")
print("| step | fp32 | bf16 | fp16 | fp16 loss scale |")
print("|---|---|---|---|---|")
scale = {r["step"]: r["loss_scale"] for r in recs("fp16") if "loss" in r}
for s in sorted(curves["fp32"]):
    if s % 20 == 0 or s == 10 or s == steps:
        print("| %d | %.4f | %.4f | %.4f | %g |" % (s, curves["fp32"][s], curves["bf16"][s], curves["fp16"][s], scale[s]))
print("\n| precision | final train loss | val loss | vs fp32 val | task accuracy | skipped steps | wall s |")
print("|---|---|---|---|---|---|---|")
ref = final("fp32")["val_loss"]
for p in ("fp32", "bf16", "fp16"):
    f = final(p)
    skipped = [r for r in recs(p) if "loss" in r][-1]["skipped_steps"]
    print("| %s | %.4f | %.4f | %+.2f%% | %.1f%% | %d | %s |" % (p, f["train_loss"], f["val_loss"], 100 * (f["val_loss"] - ref) / ref, 100 * f.get("task_acc", 0), skipped, secs[p]))
if recs("np2-fp32-reduce-fp32"):
    print("\n### --grad-reduce-dtype, 2 ranks\n")
    print("| precision | all-reduce | val loss | vs fp32 all-reduce | task accuracy | weights: rel. L2 distance from the fp32 all-reduce run |")
    print("|---|---|---|---|---|---|")
    for p, r in (("fp32", "fp32"), ("fp32", "bf16"), ("fp32", "fp16"), ("bf16", "fp32"), ("bf16", "bf16"), ("fp16", "fp32"), ("fp16", "fp16")):
        f = final("np2-%s-reduce-%s" % (p, r))
        base = final("np2-%s-reduce-fp32" % p)["val_loss"]
        dist = "%.2e" % distance("np2-%s-reduce-%s" % (p, r), "np2-%s-reduce-fp32" % p) if r != "fp32" else "-"
        print("| %s | %s | %.4f | %+.2f%% | %.1f%% | %s |" % (p, r, f["val_loss"], 100 * (f["val_loss"] - base) / base, 100 * f.get("task_acc", 0), dist))
    print("\nFor scale, the distance that precision alone makes (fp32 all-reduce): bf16 vs fp32 "
          "weights %.2e, fp16 vs fp32 %.2e." % (distance("np2-bf16-reduce-fp32", "np2-fp32-reduce-fp32"),
                                                distance("np2-fp16-reduce-fp32", "np2-fp32-reduce-fp32")))
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for p in ("fp32", "bf16", "fp16"):
        xs = sorted(curves[p])
        plt.plot(xs, [curves[p][x] for x in xs], label=p)
    plt.xlabel("step"); plt.ylabel("train loss"); plt.legend(); plt.title("ddptrain built-in data: fp32 vs bf16 vs fp16")
    out = os.path.join(d, "amp_curves.png")
    plt.savefig(out, dpi=100)
    print("\nplot: %s" % out)
except ImportError:
    print("\n(no matplotlib: table only)")
PY
