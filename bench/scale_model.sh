#!/bin/sh
# The scaling model (ddptrain --plan-only --scale) against measured runs on
# this machine: 1, 2 and 4 CPU ranks over MPI, and 2 "hosts" (network
# namespaces joined by a veth pair) on a link that tc limits to 1 Gbit/s and
# 100 Mbit/s. Prints, per run, the measured step, collective and exposed
# times (metrics JSONL, the first log window left out) next to the model's
# prediction for the same flags, and the error in %.
#   model: GPT L4 H4 C256, seq-len 128, 1024 padded tokens per micro-batch,
#   AdamW, fp32, one thread per rank, the built-in data.
# Calibration (what is fitted, and on which runs):
#   - the FLOP rate (gemm_tflops): the 1-rank run's forward and backward
#     time (compute_ms_max); the memory bandwidth (memory_gbytes_s): the
#     rest of its step, taken as the optimizer pass;
#   - the local MPI link (alpha, beta): 2 ranks with 1 MiB buckets and with
#     one 100 MiB bucket; their time in collectives per step is
#     S/B + 2 alpha x buckets, two equations for B and alpha. On a loaded
#     machine this fit is unreliable (bench/RESULTS.md): a CPU rank's
#     reductions advance only when it polls, so the time in collectives
#     of one configuration can vary 3x between runs; alpha is clamped at 0.
#   Every other run is a prediction: 2 ranks at the default 25 MiB buckets,
#   4 ranks (4 ranks on the 2 cores: each runs at half the 1-rank FLOP rate,
#   which the cluster file says), and the two hosts, whose link is the tc
#   rate and half the measured ping round trip, with nothing fitted.
# Usage: bench/scale_model.sh [BUILD_DIR, default .] [STEPS, default 12]
#          [ROUNDS, default 3]: every run is repeated ROUNDS times and the
#          fastest round counts (other jobs on a shared machine only slow a
#          run down); the load average is printed with each row.
#   SCALE_KEEP=DIR keeps logs, metrics and cluster files in DIR.
# Needs: root (network namespaces, tc), iproute2 (ip, tc), util-linux
# (unshare), Open MPI's mpirun, python3; 2 cores.
#
# bench/scale_model.sh published [BUILD_DIR]: the model on published setups
# instead (no root, nothing measured): the PyTorch DDP paper's (Li et al.,
# VLDB 2020: 8 V100 per server, NCCL, up to 256 GPUs) and Horovod's
# (Sergeev and Del Balso, 2018: 4 Pascal GPUs per server, 25 Gbit/s, 512
# GPUs). The networks are convolutional or BERT; the model takes a GPT of
# the same parameter count in its place (its tensors spread evenly over the
# layers, where a CNN's sit mostly in its last layers, which backward
# reaches first), and a FLOP rate that gives one GPU the step time the
# setup's GPU took on that network (img/s or tokens/s of the time, as
# recalled, so rough). Prints the predicted efficiency at the published
# world size next to the published figure.
set -eu
if [ "${1:-}" = published ]; then
  build=$(cd "${2:-.}" && pwd)
  [ -x "$build/ddptrain" ] || { echo "no $build/ddptrain: build ddptrain first" >&2; exit 1; }
  exec python3 - "$build/ddptrain" << 'PY'
import json, os, subprocess, sys, tempfile
ddptrain = sys.argv[1]
# name, GPT stand-in (L, H, C), parameters of the original, optimizer,
# per-GPU step time assumed (ms) and how, cluster, bucket MiB, world,
# published figure
V100 = {"name": "DDP paper: 8 V100 (NVLink) per server, 100 Gbit/s between", "gpus_per_node": 8,
        "intra_gbps": 1040, "inter_gbps": 100, "intra_latency_us": 4, "inter_latency_us": 8,
        "memory_gbytes_s": 900, "gpu_memory_gib": 32}
P100 = {"preset": "horovod-p100"}
runs = [
    ("ResNet-50, DDP (NCCL)", (8, 8, 512), "25.6M", "sgd", 89,
     "32 img at ~360 img/s (V100 fp32)", V100, 25, 256, "near-linear (abstract)"),
    ("BERT-large, DDP (NCCL)", (27, 16, 1024), "340M", "adamw", 890,
     "32 x 128 tokens, 6N FLOPs a token at ~9.4 TFLOP/s (V100 fp32)", V100, 25, 256,
     "near-linear (abstract)"),
    ("Inception V3, Horovod", (8, 8, 496), "23.8M", "sgd", 451,
     "64 img at ~142 img/s (P100 fp32)", P100, 64, 512, "~90%"),
    ("ResNet-101, Horovod", (14, 8, 512), "44.5M", "sgd", 504,
     "64 img at ~127 img/s (P100 fp32)", P100, 64, 512, "~90%"),
    ("VGG-16, Horovod", (12, 8, 976), "138M", "sgd", 444,
     "64 img at ~144 img/s (P100 fp32)", P100, 64, 512, "~68%"),
]
tmp = tempfile.mkdtemp()
def scale(L, H, C, opt, bucket, world, cluster):
    path = os.path.join(tmp, "cluster.json")
    json.dump(cluster, open(path, "w"))
    out = subprocess.run([ddptrain, "--plan-only", "--scale", "--json", "--n-layer", str(L),
                          "--n-head", str(H), "--n-embd", str(C), "--seq-len", "128",
                          "--tokens-per-batch", "4096", "--optimizer", opt, "--bucket-mb",
                          str(bucket), "--world-size", str(world), "--cluster", path],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)
print("| setup | stand-in GPT (params) | step at 1 GPU (assumed) | predicted at N | exposed ms | published |")
print("|---|---|---|---|---|---|")
for name, (L, H, C), orig, opt, step_ms, how, cl, bucket, world, pub in runs:
    probe = scale(L, H, C, opt, bucket, world, dict(cl, gemm_tflops=1))
    tflops = probe["flops_per_step"] / (step_ms * 1e9)
    d = scale(L, H, C, opt, bucket, world, dict(cl, gemm_tflops=tflops))
    r = next(r for r in d["table"] if r["gpus"] == world and r["zero"] == 0)
    print("| %s, %d GPUs | L%d C%d (%.1fM; original %s) | %d ms: %s | %.1f%% | %.0f of %.0f comm | %s |"
          % (name, world, L, C, d["params"] / 1e6, orig, step_ms, how, 100 * r["efficiency"],
             r["exposed_ms"], r["comm_ms"], pub))
PY
fi
build=$(cd "${1:-.}" && pwd)
steps=${2:-12}
rounds=${3:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then
  echo "bench/scale_model.sh: needs root (network namespaces and tc for the two-host runs)" >&2
  exit 1
fi
for t in ip tc unshare mpirun python3; do
  command -v $t > /dev/null 2>&1 || {
    echo "bench/scale_model.sh: $t is not installed (iproute2, util-linux, Open MPI, python3)" >&2
    exit 1
  }
done
[ -x "$build/ddptrain" ] || { echo "no $build/ddptrain: build ddptrain first" >&2; exit 1; }
[ "$steps" -ge 8 ] || { echo "STEPS must be at least 8 (the first 4 are warm-up)" >&2; exit 1; }
cores=$(nproc) # before OMP_NUM_THREADS, which nproc obeys
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
work=$(mktemp -d)
id=$$
nsA=scA$id nsB=scB$id vA=scva$id vB=scvb$id
net=10.79.$((id % 250))
ipA=$net.1 ipB=$net.2
cleanup() {
  ip netns del "$nsA" 2> /dev/null || true
  ip netns del "$nsB" 2> /dev/null || true
  if [ -n "${SCALE_KEEP:-}" ]; then mkdir -p "$SCALE_KEEP" && cp -r "$work"/. "$SCALE_KEEP"; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
if ! ip netns add "$nsA" 2> "$work/err" || ! ip netns add "$nsB" 2>> "$work/err"; then
  echo "bench/scale_model.sh: cannot create network namespaces: $(head -1 "$work/err")" >&2
  exit 1
fi

MODEL="--threads 1 --peak-gflops 10 --n-layer 4 --n-head 4 --n-embd 256 --seq-len 128 \
--tokens-per-batch 1024 --steps $steps --log-every 4 --eval-every 0 --eval-tokens 64 --warmup 2"

# best NAME: of the rounds NAME.r1.jsonl ..., the fastest becomes NAME.jsonl
# (other jobs on a shared machine only ever slow a run down)
best() {
  python3 - "$work" "$1" "$rounds" << 'PY'
import json, shutil, sys
work, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
def step(i):
    recs = [json.loads(l) for l in open("%s/%s.r%d.jsonl" % (work, name, i)) if '"record":"step"' in l][1:]
    return sum(r["ms_per_step"] for r in recs) / len(recs)
times = [step(i) for i in range(1, rounds + 1)]
i = min(range(rounds), key=lambda k: times[k]) + 1
shutil.copy("%s/%s.r%d.jsonl" % (work, name, i), "%s/%s.jsonl" % (work, name))
print("%s: ms per step over %d rounds: %s" % (name, rounds, " ".join("%.1f" % t for t in times)),
      file=open("%s/rounds.txt" % work, "a"))
PY
}

# measure NAME NP [EXTRA FLAGS...]: a run on this host, ROUNDS times; the
# fastest round's metrics in $work/NAME.jsonl
measure() {
  name=$1 np=$2
  shift 2
  r=1
  while [ "$r" -le "$rounds" ]; do
    # shellcheck disable=SC2086
    mpirun -np "$np" --bind-to none "$build/ddptrain" $MODEL --metrics "$work/$name.r$r.jsonl" "$@" \
      > "$work/$name.log" 2>&1 || { echo "run $name failed:" >&2; tail "$work/$name.log" >&2; exit 1; }
    r=$((r + 1))
  done
  best "$name"
}

# predict FILE CLUSTER NP [EXTRA FLAGS...]: the model's JSON for these flags
predict() {
  out=$1 cl=$2 np=$3
  shift 3
  # shellcheck disable=SC2086
  "$build/ddptrain" --plan-only --scale --json --world-size "$np" --cluster "$cl" $MODEL \
    "$@" > "$out"
}

# cluster FILE GPUS_PER_NODE INTRA_GBPS INTER_GBPS LAT_IN_US LAT_OUT_US TFLOPS MEM_GBS
cluster() {
  printf '{"name": "%s", "gpus_per_node": %s, "intra_gbps": %s, "inter_gbps": %s, "intra_latency_us": %s, "inter_latency_us": %s, "gemm_tflops": %s, "memory_gbytes_s": %s, "gpu_memory_gib": 8}\n' \
    "$(basename "$1" .json)" "$2" "$3" "$4" "$5" "$6" "$7" "$8" > "$1"
}

# measured NAME: means over the best round's records after the first
# window: "step compute comm exposed" (ms per step)
measured() {
  python3 - "$work/$1.jsonl" << 'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"record":"step"' in l][1:]
keys = ("ms_per_step", "compute_ms_max", "comm_ms", "exposed_comm_ms")
print(" ".join("%.4f" % (sum(r[k] for r in recs) / len(recs)) for k in keys))
PY
}

# field JSON N KEY: the --zero 0 row for N GPUs of a prediction; top JSON KEY
field() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(next(r[sys.argv[3]] for r in d["table"] if r["gpus"]==int(sys.argv[2]) and r["zero"]==0))' "$@"
}
top() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$@"; }

echo "scale_model: $(date -u +%FT%TZ), $cores cores, steps 5-$steps of $steps, best of $rounds rounds"
echo "== calibration"
measure one 1
set -- $(measured one)
step1=$1 compute1=$2 exposed1=$4
cluster "$work/probe.json" 1 1 1 0 0 1 1
predict "$work/probe.out" "$work/probe.json" 1
flops=$(top "$work/probe.out" flops_per_step)
params=$(top "$work/probe.out" params)
optim_at_1=$(field "$work/probe.out" 1 optimizer_ms) # at 1 GB/s
# forward and backward give the FLOP rate; the rest of the step (optimizer,
# gradient norm, ...) the memory bandwidth
set -- $(python3 -c "
rest = $step1 - $compute1 - $exposed1
print('%.6g %.6g %.4f' % ($flops / ($compute1 * 1e9), $optim_at_1 / rest, rest))")
tflops=$1 mem=$2 rest=$3
echo "1 rank: $step1 ms per step, $compute1 ms forward and backward ($flops FLOPs) -> $tflops TFLOP/s; $rest ms the rest -> $mem GB/s"

measure b1 2 --bucket-mb 1
measure b100 2 --bucket-mb 100
set -- $(measured b1)
c1=$3
set -- $(measured b100)
c100=$3
predict "$work/nb1.out" "$work/probe.json" 2 --bucket-mb 1
predict "$work/nb100.out" "$work/probe.json" 2 --bucket-mb 100
nb1=$(field "$work/nb1.out" 2 buckets)
nb100=$(field "$work/nb100.out" 2 buckets)
# 2 ranks: each all-reduce costs bytes / B + 2 alpha
set -- $(python3 -c "
S = $params * 4.0
a = max(0.0, ($c1 - $c100) / (2.0 * ($nb1 - $nb100)))   # ms per ring step
b = S / ($c100 - 2 * $nb100 * a)                        # bytes per ms
print('%.6g %.6g' % (a * 1e3, b * 8e3 / 1e9))")
alpha_us=$1 gbps=$2
echo "2 ranks: $c1 ms in collectives with $nb1 buckets (1 MiB), $c100 ms with $nb100 (100 MiB) -> alpha $alpha_us us, $gbps Gbit/s"
cluster "$work/local.json" 4 "$gbps" "$gbps" "$alpha_us" "$alpha_us" "$tflops" "$mem"
# 4 ranks on 2 cores: each rank has half a core
half=$(python3 -c "print($tflops * $cores / 4)")
cluster "$work/local4.json" 4 "$gbps" "$gbps" "$alpha_us" "$alpha_us" "$half" "$mem"

# row NAME NP CLUSTER [FLAGS...]: measured against predicted: (a) all from
# the cluster file; (b) with the FLOP rate this run's own forward and
# backward showed (the model's communication and overlap alone, whatever
# the other jobs on the machine took from the compute)
printf '%-15s %8s %8s %8s %8s | %8s %8s %8s | %8s %8s | %7s %7s %7s | %s\n' run step compute comm \
  exposed "a: step" comm exposed "b: step" exposed "err a" "err b" "err exp" load
row() {
  name=$1 np=$2 cl=$3
  shift 3
  predict "$work/$name.out" "$cl" "$np" "$@"
  set -- $(measured "$name") "$@"
  python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['gemm_tflops']=$flops/($2*1e9); json.dump(c, open(sys.argv[2],'w'))" \
    "$cl" "$work/$name.given.json"
  shift 4
  predict "$work/$name.given.out" "$work/$name.given.json" "$np" "$@"
  python3 - "$work/$name.jsonl" "$work/$name.out" "$work/$name.given.out" "$name" "$np" << 'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"record":"step"' in l][1:]
m = [sum(r[k] for r in recs) / len(recs) for k in ("ms_per_step", "compute_ms_max", "comm_ms", "exposed_comm_ms")]
n = int(sys.argv[5])
row = lambda path: next(r for r in json.load(open(path))["table"] if r["gpus"] == n and r["zero"] == 0)
a, b = row(sys.argv[2]), row(sys.argv[3])
err = lambda x, y: "%+6.1f%%" % (100.0 * (y - x) / x) if x >= 0.5 else "     -"
load = open("/proc/loadavg").read().split()[0]
print("%-15s %8.1f %8.1f %8.1f %8.1f | %8.1f %8.1f %8.1f | %8.1f %8.1f | %s %s %s | %s" % (
    sys.argv[4], m[0], m[1], m[2], m[3], a["step_ms"], a["comm_ms"], a["exposed_ms"],
    b["step_ms"], b["exposed_ms"], err(m[0], a["step_ms"]), err(m[0], b["step_ms"]),
    err(m[3], b["exposed_ms"]), load))
PY
}
row one 1 "$work/local.json"
row b1 2 "$work/local.json" --bucket-mb 1
row b100 2 "$work/local.json" --bucket-mb 100
echo "== predictions (nothing fitted on these runs)"
measure two 2
row two 2 "$work/local.json"
measure four 4
row four 4 "$work/local4.json"

# ---- two hosts ------------------------------------------------------------
ip link add "$vA" type veth peer name "$vB"
ip link set "$vA" netns "$nsA"
ip link set "$vB" netns "$nsB"
ip -n "$nsA" addr add "$ipA/24" dev "$vA"
ip -n "$nsB" addr add "$ipB/24" dev "$vB"
for ns in "$nsA" "$nsB"; do ip -n "$ns" link set lo up; done
ip -n "$nsA" link set "$vA" up
ip -n "$nsB" link set "$vB" up
cat > "$work/agent" << AGENT
#!/bin/sh
# plm_rsh_agent: agent HOST CMD... runs CMD inside HOST's namespace.
host=\$1; shift
case "\$host" in
  $ipA) ns=$nsA ;;
  $ipB) ns=$nsB ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
AGENT
chmod +x "$work/agent"
printf '%s slots=1\n%s slots=1\n' "$ipA" "$ipB" > "$work/hosts"
# rtt_ms: the median round trip of 200 small TCP messages from A to B, in ms
# (python, as ping is not always installed)
rtt_ms() {
  ip netns exec "$nsB" python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 17999)); s.listen(1); c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    b = c.recv(64)
    if not b: break
    c.sendall(b)' "$ipB" &
  echo_pid=$!
  sleep 0.5
  ip netns exec "$nsA" python3 -c '
import socket, sys, time
c = socket.create_connection((sys.argv[1], 17999)); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
t = []
for _ in range(200):
    t0 = time.perf_counter(); c.sendall(b"x"); c.recv(64); t.append(time.perf_counter() - t0)
print("%.4f" % (sorted(t)[100] * 1e3))' "$ipB"
  wait "$echo_pid"
}
# the reductions progress by tests between layers (the default), and with
# a progress thread, which keeps a slow link busy while backward computes
for spec in "1000 test" "100 test" "100 thread"; do
  set -- $spec
  rate=$1 progress=$2
  for pair in "$nsA $vA" "$nsB $vB"; do
    set -- $pair
    # a token bucket: netem's rate needs a module few kernels load; a burst
    # of 10 ms of traffic, as tbf needs at least a timer tick's worth
    ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "${rate}mbit" \
      burst "$((rate * 1250))" latency 100ms
  done
  rtt=$(rtt_ms)
  lat=$(python3 -c "print($rtt * 1e3 / 2)")
  gb=$(python3 -c "print($rate / 1000)")
  cluster "$work/net$rate.json" 1 100000 "$gb" "$lat" "$lat" "$tflops" "$mem"
  name=hosts_${rate}mbit_$progress
  r=1
  while [ "$r" -le "$rounds" ]; do
    # shellcheck disable=SC2086
    ip netns exec "$nsA" mpirun -np 2 --hostfile "$work/hosts" --bind-to none \
      --mca plm_rsh_agent "$work/agent" --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" \
      --mca oob_tcp_if_include "$net.0/24" \
      "$build/ddptrain" $MODEL --comm-progress "$progress" --metrics "$work/$name.r$r.jsonl" \
      > "$work/$name.log" 2>&1 ||
      { echo "run $name failed:" >&2; tail "$work/$name.log" >&2; exit 1; }
    r=$((r + 1))
  done
  best "$name"
  echo "link: $rate Mbit/s (tc tbf), TCP round trip $rtt ms (median)"
  row "$name" 2 "$work/net$rate.json" --comm-progress "$progress"
done
echo "cluster file fitted here: $(cat "$work/local.json")"
cat "$work/rounds.txt"
