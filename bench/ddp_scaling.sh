#!/bin/sh
# Data-parallel CPU benchmark: weak scaling of ddptrain from 1 to 2 ranks, the
# part of the gradient all-reduce that backward does not hide, and ddptrain
# against PyTorch DistributedDataParallel (gloo) on identical micro-batches.
#   model: GPT L4 H4 C256, seq-len 256, 4096 padded tokens per micro-batch,
#   AdamW, one thread per rank; data: the Debian `fortunes` corpus (variable
#   length documents) prepared by ddpprep --doc-sep '%'.
# Why these runs: weak scaling keeps the per-rank work fixed (same micro-batch
# size and accum), so per-rank useful tokens/s at 2 ranks over 1 rank measures
# what data parallelism costs; exposed_comm_ms / ms_per_step is the
# communication left on the critical path; the PyTorch runs replay the
# batches each ddptrain rank trained on (--dump-batches FILE gives
# FILE.rank0, FILE.rank1), so both frameworks do the same work. The random
# sampler rows (fixed rows padded to the longest, dealt round-robin: what a
# DistributedSampler gives) show the common default for both frameworks.
# Targets (printed met / MISSED; a miss does not fail the script, a failed
# run does): per-rank useful tok/s at 2 ranks >= 90% of 1 rank; exposed comm
# <= 10% of the step at 2 ranks; ddptrain >= 1.3x PyTorch DDP's useful tok/s
# on the same bucketed batches. Both --comm-progress modes are measured.
# Timing: the first log window (steps 1-5) is excluded, the rest of the
# metrics records are averaged weighted by time (as bench/cpu_gpt.sh); PyTorch
# times the same steps.
# Noise: on a shared (virtual) machine other jobs, in this machine or on the
# host, slow runs down, by up to 2x for seconds at a time on the CI VM. So
# before each run the script waits for other processes to leave the CPUs,
# each row shows the CPU share other processes took during the run and a
# one-thread sgemm probe (GFLOP/s) taken just before and after it, and with
# ROUNDS > 1 every run is repeated, the rows show the fastest round (outside
# interference only slows a run down) and the range over the rounds.
# Usage: bench/ddp_scaling.sh [BUILD_DIR, default .] [STEPS, default 30]
#          [ROUNDS, default 1]
#   DDP_SCALING_KEEP=DIR keeps the runs' logs, metrics and batches in DIR;
#   DDP_SCALING_QUIET_S=N: wait at most N s (default 120) before each run.
# Needs: apt-get install fortunes; Open MPI's mpirun; 2 cores (2 ranks x 1
# thread); a Python with torch: $TORCH_PYTHON, else /usr/bin/python3.
set -eu
build=$(cd "${1:-.}" && pwd)
steps=${2:-30}
rounds=${3:-1}
here=$(cd "$(dirname "$0")" && pwd)
py=${TORCH_PYTHON:-/usr/bin/python3}
fort=/usr/share/games/fortunes
[ -d "$fort" ] || { echo "no $fort: apt-get install fortunes" >&2; exit 1; }
for f in ddptrain ddpprep; do
  [ -x "$build/$f" ] || { echo "no $build/$f: build ddptrain first" >&2; exit 1; }
done
[ "$steps" -gt 5 ] || { echo "STEPS must be more than 5 (the first 5 are warm-up)" >&2; exit 1; }
[ "$rounds" -ge 1 ] || { echo "ROUNDS must be at least 1" >&2; exit 1; }
t_start=$(date +%s)
cores=$(nproc) # before OMP_NUM_THREADS, which nproc obeys
[ "$cores" -ge 2 ] || echo "warning: $cores core: the 2 ranks oversubscribe it" >&2
# torch.set_num_threads(1) does not reach the OpenBLAS inside Debian's torch:
# pin both libraries to one thread per rank.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ "$cores" -ge 2 ] || export OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'if [ -n "${DDP_SCALING_KEEP:-}" ]; then mkdir -p "$DDP_SCALING_KEEP" && cp -r "$work"/. "$DDP_SCALING_KEEP"; fi; rm -rf "$work"' EXIT

# "snap N" records the machine's busy CPU time (/proc/stat: user, nice,
# system, irq, softirq), our children's CPU time (the `times` builtin, which
# must run in this shell, not in a subshell) and the uptime; "others" turns
# snapshots 0 and 1 into the share of all CPUs other processes used between.
snap() {
  times > "$work/times$1"
  head -n 1 /proc/stat > "$work/stat$1"
  cut -d" " -f1 /proc/uptime > "$work/up$1"
}
others() {
  awk -v hz="$(getconf CLK_TCK)" -v cores="$cores" '
    function sec(x) { split(x, p, "m"); return p[1] * 60 + p[2] + 0 }
    FILENAME ~ /\/stat[01]$/ { b[FILENAME ~ /1$/] = $2 + $3 + $4 + $7 + $8 }
    FILENAME ~ /\/up[01]$/ { u[FILENAME ~ /1$/] = $1 }
    FILENAME ~ /\/times[01]$/ && FNR == 2 { c[FILENAME ~ /1$/] = sec($1) + sec($2) }
    END {
      o = (b[1] - b[0]) / hz - (c[1] - c[0]); if (o < 0) o = 0
      printf "%.0f%%\n", (u[1] > u[0]) ? 100 * o / ((u[1] - u[0]) * cores) : 0 }' \
    "$work/stat0" "$work/stat1" "$work/up0" "$work/up1" "$work/times0" "$work/times1"
}
# quiet: wait (at most $DDP_SCALING_QUIET_S s, default 120) until other
# processes use under 5% of the CPUs for 2 s; then run anyway.
quiet() {
  waited=0
  while :; do
    snap 0
    sleep 2
    snap 1
    case $(others) in [0-4]%) return 0 ;; esac
    waited=$((waited + 2))
    if [ "$waited" -ge "${DDP_SCALING_QUIET_S:-120}" ]; then
      echo "note: other processes still use $(others) of the CPUs after ${waited} s; running anyway" >&2
      return 0
    fi
  done
}
# probe: one-thread 512^3 sgemm GFLOP/s through torch's BLAS (best of 5
# windows of 50 ms): how fast this CPU is right now.
probe() {
  "$py" -c '
import time, torch
torch.set_num_threads(1)
a, b = torch.randn(512, 512), torch.randn(512, 512)
a @ b
best = 0.0
for _ in range(5):
    t, n = time.perf_counter(), 0
    while time.perf_counter() - t < 0.05:
        a @ b
        n += 1
    best = max(best, 2 * 512 ** 3 * n / (time.perf_counter() - t) / 1e9)
print("%.0f" % best)'
}
# measure NAME COMMAND...: one timed run, output in NAME.log; NAME.machine
# gets "others-share probe-before probe-after". A failure shows the log and
# stops the script.
measure() {
  name=$1
  shift
  quiet
  p0=$(probe)
  snap 0
  "$@" > "$work/$name.log" 2>&1 ||
    { echo "run '$name' failed: $*" >&2; cat "$work/$name.log" >&2; exit 1; }
  snap 1
  echo "$(others) $p0 $(probe)" > "$work/$name.machine"
  if grep -q -e 'ERROR' -e 'WARN' "$work/$name.log"; then
    echo "note: run '$name' logged:" >&2
    grep -e 'ERROR' -e 'WARN' "$work/$name.log" | sed 's/^/  /' >&2
  fi
}

# fortune text files: not the .dat indexes, not the .u8 links, not off/
files=$(find "$fort" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
# shellcheck disable=SC2086
"$build/ddpprep" --doc-sep '%' -o "$work/fortunes" $files > "$work/prep.log" 2>&1 ||
  { cat "$work/prep.log"; exit 1; }

model="--n-layer 4 --n-head 4 --n-embd 256 --seq-len 256"
# ddp NAME RANKS [FLAGS...]: ddptrain, metrics in NAME.jsonl
ddp() {
  name=$1 np=$2
  shift 2
  # shellcheck disable=SC2086
  measure "$name" mpirun -np "$np" "$build/ddptrain" --threads 1 \
    --data "$work/fortunes_train_*.bin" $model --tokens-per-batch 4096 --steps "$steps" \
    --warmup 5 --log-every 5 --eval-every 0 --eval-tokens 1 --metrics "$work/$name.jsonl" "$@"
}
# pt NAME BATCHES: PyTorch DDP (2 ranks, gloo) replaying BATCHES.rank0/1
pt() {
  # shellcheck disable=SC2086
  measure "$1" "$py" "$here/pytorch_ddp_bench.py" "$2" --world-size 2 $model --vocab 257 \
    --threads 1 --warmup-steps 5
}
k=1
while [ "$k" -le "$rounds" ]; do
  ddp "r1.$k" 1
  ddp "thread.$k" 2 --comm-progress thread --dump-batches "$work/bucket.$k.st"
  ddp "test.$k" 2 --comm-progress test
  ddp "random.$k" 2 --sampler random --dump-batches "$work/random.$k.st"
  pt "torch_bucket.$k" "$work/bucket.$k.st"
  pt "torch_random.$k" "$work/random.$k.st"
  k=$((k + 1))
done

# The report. ddptrain rows average the metrics records after the first
# (steps 1-5 are warm-up), tokens/s weighted by time; comm and exposed comm
# are means per step, exposed % is mean exposed_comm_ms / mean ms_per_step.
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
mpi=$(mpirun --version 2>&1 | head -n 1)
python3 - "$work" "$steps" "$rounds" "$cores" "$cpu" "$mpi" "$(($(date +%s) - t_start))" <<'EOF'
import datetime, json, os, re, sys

work, steps, rounds, cores, cpu, mpi, secs = sys.argv[1:]
rounds = int(rounds)
def f(name):
    return os.path.join(work, name)

def machine(name):
    o, p0, p1 = open(f(name + ".machine")).read().split()
    return {"others": o, "probe": f"{p0} / {p1}"}

def ddp(name):
    recs = [json.loads(l) for l in open(f(name + ".jsonl")) if '"record":"step"' in l]
    r = recs[1:]
    if not r:
        sys.exit(f"run {name}: no metrics records after the warm-up window")
    t = sum(x["ms_per_step"] for x in r)
    w = lambda k: sum(x[k] * x["ms_per_step"] for x in r) / t
    m = lambda k: sum(x[k] for x in r) / len(r)
    peak = re.search(r"peak ([0-9.]+) GFLOP/s", open(f(name + ".log")).read())
    return {"tok": w("tok_per_s"), "ms": t / len(r), "comm": m("comm_ms"),
            "exp": m("exposed_comm_ms"), "frac": m("exposed_comm_ms") / (t / len(r)),
            "cmax": m("compute_ms_max"), "cmin": m("compute_ms_min"),
            "wait": m("data_wait_ms"), "pad": w("pad_frac"), "mfu": w("mfu"),
            "peak": peak.group(1) if peak else "?",
            "loss": [x["loss"] for x in recs], **machine(name)}

def torch(name):
    j = json.loads([l for l in open(f(name + ".log")) if l.startswith("{")][-1])
    return {"tok": j["tok_per_s"], "ms": j["ms_per_step"], "torch": j["torch"],
            "last_loss": j["last_loss"], **machine(name)}

def best(kind, load):
    """The fastest round of a run and the range of tok/s over the rounds."""
    runs = [load(f"{kind}.{k}") for k in range(1, rounds + 1)]
    b = max(runs, key=lambda d: d["tok"])
    b["range"] = "%.0f-%.0f" % (min(d["tok"] for d in runs), max(d["tok"] for d in runs))
    b["round"] = runs.index(b) + 1
    return b

r1, th, te, ra = (best(k, ddp) for k in ("r1", "thread", "test", "random"))
tb, tr = best("torch_bucket", torch), best("torch_random", torch)
ver = tb["torch"]
eff = {"thread": th["tok"] / 2 / r1["tok"], "test": te["tok"] / 2 / r1["tok"]}
frac = {"thread": th["frac"], "test": te["frac"]}
ratio = {"thread": th["tok"] / tb["tok"], "test": te["tok"] / tb["tok"]}
pct = lambda x: "%.1f%%" % (100 * x)

print(f"ddp_scaling: {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC | {cpu}, {cores} cores | "
      f"{mpi} | torch {ver}")
print(f"GPT L4 H4 C256, seq-len 256, 4096 tokens/micro-batch, accum 1, 1 thread per rank, "
      f"Debian fortunes corpus; {steps} steps, the first 5 excluded; "
      + (f"best of {rounds} rounds" if rounds > 1 else "1 round"))
print()
print("| run | useful tok/s (global) | per rank | ms/step | comm ms/step | exposed ms/step "
      "(% of step) | compute ms max / min | data wait ms | pad | MFU (sgemm peak at start) "
      f"| {'tok/s range over rounds | ' if rounds > 1 else ''}other jobs' CPU | sgemm probe "
      "before / after |")
ncol = 12 + (rounds > 1)
print("|---" * ncol + "|")
def emit(cells, d):
    cells += [d["range"]] if rounds > 1 else []
    print("| " + " | ".join(cells + [d["others"], d["probe"]]) + " |")
def row(label, d, ranks):
    c = [label, "%.1f" % d["tok"], "%.1f" % (d["tok"] / ranks), "%.1f" % d["ms"]]
    if ranks == 1:
        c += ["", "", "%.1f" % d["cmax"]]
    else:
        c += ["%.1f" % d["comm"], "%.2f (%s)" % (d["exp"], pct(d["frac"])),
              "%.1f / %.1f" % (d["cmax"], d["cmin"])]
    emit(c + ["%.2f" % d["wait"], pct(d["pad"]), "%.3f (%s)" % (d["mfu"], d["peak"])], d)
def trow(label, d, pad):
    emit([label, "%.1f" % d["tok"], "%.1f" % (d["tok"] / 2), "%.1f" % d["ms"], "", "", "", "",
          pct(pad), ""], d)
def srow(label, text):
    print("| " + " | ".join([label, text] + [""] * (ncol - 2)) + " |")
row("ddptrain, 1 rank", r1, 1)
row("ddptrain, 2 ranks, --comm-progress thread", th, 2)
row("ddptrain, 2 ranks, --comm-progress test", te, 2)
srow("weak-scaling efficiency (per-rank tok/s, 2 ranks / 1 rank), thread / test",
     f"**{pct(eff['thread'])}** / **{pct(eff['test'])}**")
srow("exposed comm (mean exposed / mean ms/step, 2 ranks), thread / test",
     f"**{pct(frac['thread'])}** / **{pct(frac['test'])}**")
trow(f"PyTorch {ver} DDP gloo, 2 ranks, the same bucketed batches", tb, th["pad"])
srow("ratio ddptrain / PyTorch DDP (bucketed batches), thread / test",
     f"**{ratio['thread']:.2f}x** / **{ratio['test']:.2f}x**")
row("ddptrain, 2 ranks, --sampler random (default progress)", ra, 2)
trow(f"PyTorch {ver} DDP gloo, 2 ranks, the same random padded batches", tr, ra["pad"])
srow("ratio ddptrain / PyTorch DDP (random batches)", f"{ra['tok'] / tr['tok']:.2f}x")
srow("ddptrain bucket (thread) / PyTorch DDP random batches (each one's usual setup)",
     f"{th['tok'] / tr['tok']:.2f}x")
print()
met = lambda ok: "met" if ok else "MISSED"
print("Targets (2 ranks):")
print("- per-rank useful tok/s >= 90% of 1 rank: " + ", ".join(
    f"{k} {met(eff[k] >= 0.9)} ({pct(eff[k])})" for k in eff))
print("- exposed comm <= 10% of the step: " + ", ".join(
    f"{k} {met(frac[k] <= 0.1)} ({pct(frac[k])})" for k in frac))
print("- >= 1.3x PyTorch DDP on the same batches: " + ", ".join(
    f"{k} {met(ratio[k] >= 1.3)} ({ratio[k]:.2f}x)" for k in ratio))
# The progress modes train on the same batches and a 2-rank SUM does not
# depend on the order, so their losses must agree exactly.
diff = max(abs(a - b) / abs(a) for k in range(1, rounds + 1)
           for a, b in zip(ddp(f"thread.{k}")["loss"], ddp(f"test.{k}")["loss"]))
print(f"Check: the losses of the thread and test runs (same batches) differ by {diff:.3g} "
      f"(relative, at most; expected 0). Last loss: ddptrain {th['loss'][-1]:.4f} (mean of the "
      f"last window), PyTorch {tb['last_loss']:.4f} (last step; constant lr 1e-3, ddptrain "
      f"warms up to 3e-3 and decays: only roughly comparable).")
print(f"(script time {secs} s)")
EOF
