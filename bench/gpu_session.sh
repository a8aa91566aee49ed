#!/usr/bin/env bash
# The whole GPU session as one command, for a bare GPU host with a short lease:
#   bash bench/gpu_session.sh OUT [SECONDS] [PHASES]
# run from the source root, with .device/ (the dependency packages and
# build.sh, see bench/RESULTS.md "What the next GPU session runs") beside it.
#
# PHASES (default "facts build tests sanitizer profile bench") run in that order, all
# inside SECONDS (default 540) of wall time, so the command ends before the
# lease's per-call limit and its files always come back:
#   facts      the GPU, driver, nvcc, PyTorch, where cuDNN and NCCL were found;
#   build      .device/build.sh for sm_90 only (the host's chip), then the
#              test programs;
#   tests      the GPU suites (GPU_TESTS in Makefile.am and tests/test_gpu*.sh),
#              and test_sample.sh and test_trace.sh, which run on the GPU there;
#   sanitizer  a tiny bf16 training run under compute-sanitizer memcheck;
#   profile    GPT-2 124M, two bf16 steps under Nsight Compute: device time
#              per kernel name;
#   rprofile   the same for one bf16 step of ResNet-50 at batch 128 (the third
#              step: the first one searches cuDNN's algorithms);
#   hprofile   the host's side of 20 such steps: Nsight Systems' CUDA and cuDNN
#              API summaries, and perf's profile of the process where perf is
#              installed (not in the default phases either);
#   bench      bench/gpu_resnet.sh, gpu_gpt2.sh, gpu_varlen.sh, gpu_memory.sh on
#              what is left; GPU_BENCHES="name:share ..." picks others, e.g.
#              GPU_BENCHES="resnet:1/1" for the ResNet alone.
# Only a few files come back from such a host, so everything is written under
# one work folder and packed into OUT/session.tgz at the end; OUT/summary.txt
# holds the short table (also printed last), OUT/gpu_bench.log the benchmarks.
set -u
OUT=${1:?usage: gpu_session.sh OUT [SECONDS] [PHASES]}
BUDGET=${2:-540}
PHASES=${3:-facts build tests sanitizer profile bench}
SRC=$PWD
W=/tmp/gpu-session
rm -rf "$W" && mkdir -p "$W/logs" "$W/bench"
S=$OUT/summary.txt
: > "$S"
left() { echo $((BUDGET - SECONDS)); }
say() { echo "$*" | tee -a "$S"; }
has() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }
pack() {
  cp "$W/bench/gpu_bench.log" "$OUT/" 2> /dev/null
  tar -C "$W" -czf "$OUT/session.tgz" --exclude='*.bin' --exclude='*.img' --exclude='*.st' --exclude='*.safetensors' . 2> /dev/null
  echo "--- summary ($SECONDS s of $BUDGET)"; cat "$S"
}
trap pack EXIT
# ncu_table CSV: Nsight Compute's raw CSV (gpu__time_duration per launch)
# summed per kernel name, the largest first, into the summary.
ncu_table() {
  python3 - "$1" << 'PY' | tee -a "$S"
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1], errors="replace")) if r]
head = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if head is None:
    print("  no kernel rows"); sys.exit()
cols = rows[head]; k = cols.index("Kernel Name"); t = cols.index("gpu__time_duration.sum")
unit = rows[head + 1][t] if len(rows) > head + 1 else ""
tot, cnt = collections.Counter(), collections.Counter()
for r in rows[head + 2:]:
    try:
        v = float(r[t].replace(",", ""))
    except (ValueError, IndexError):
        continue
    name = r[k][:90]; tot[name] += v; cnt[name] += 1
scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0}.get(unit, 1e-6)
all_ms = sum(tot.values()) * scale
print(f"  {sum(cnt.values())} launches, {all_ms:.1f} ms of kernels ({unit})")
for name, v in tot.most_common(22):
    print(f"  {v * scale:8.2f} ms {100 * v * scale / all_ms:5.1f}% {cnt[name]:5d}x  {name}")
PY
}

if has facts; then
  {
    date -u; nvidia-smi; nvcc --version
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
    for h in cudnn.h nccl.h; do find /usr /opt -name "$h" -path '*include*' 2> /dev/null | head -3; done
    uname -a; nproc; free -g
  } > "$W/logs/facts.txt" 2>&1
  say "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null)"
  say "nvcc: $(nvcc --version 2> /dev/null | sed -n 's/.*release //p')"
fi

if has build; then
  t0=$SECONDS
  # build.sh names the cuDNN and NCCL it found, as the parent of their
  # include folder, which on an Ubuntu image with cudnn.h in
  # /usr/include/x86_64-linux-gnu is /usr/include: configure's own search
  # (guess; a later --with-X wins) finds both there. If the build still
  # fails, the second try goes without cuDNN (nothing uses it yet).
  if ! DDP_CONFIGURE_FLAGS="--with-cuda-arch=90 --with-cudnn=guess --with-nccl=guess ${DDP_CONFIGURE_FLAGS:-}" \
       bash .device/build.sh > "$W/logs/build.log" 2>&1; then
    say "build: FAILED after $((SECONDS - t0)) s; trying again without cuDNN"
    tail -25 "$W/logs/build.log" | tee -a "$S"
    if ! DDP_CONFIGURE_FLAGS="--with-cuda-arch=90 --with-cudnn=no --with-nccl=guess ${DDP_CONFIGURE_FLAGS:-}" \
         bash .device/build.sh > "$W/logs/build2.log" 2>&1; then
      say "build: FAILED again"; tail -40 "$W/logs/build2.log" | tee -a "$S"; exit 1
    fi
  fi
  cp /tmp/ddp/config.log /tmp/ddp/configure.log "$W/logs/" 2> /dev/null
  grep -E '^ +(CUDA|cuDNN|NCCL|MPI|OpenBLAS) ' /tmp/ddp/configure.log | tee -a "$S"
  if ! (source .device/env.sh && cd /tmp/ddp && make -j16 check TESTS= > "$W/logs/build-tests.log" 2>&1); then
    say "build of the test programs: FAILED"; tail -30 "$W/logs/build-tests.log" | tee -a "$S"; exit 1
  fi
  say "build: $((SECONDS - t0)) s"
fi
# A later call on the still-warm host (phases without build) gets a fresh
# .device/ from the carry, without the env.sh that build.sh wrote there:
# the build keeps a copy beside itself.
if [ -f "$SRC/.device/env.sh" ]; then
  cp "$SRC/.device/env.sh" /tmp/ddp-device-env.sh 2> /dev/null
else
  say "no .device/env.sh: using the one of the earlier build on this host"
fi
# shellcheck disable=SC1091
source /tmp/ddp-device-env.sh || { say "no build on this host: run the build phase"; exit 1; }
cd /tmp/ddp || exit 1
# Debian's libpmix looks for its plugins where the image keeps its own,
# newer PMIx's (an H200 image logged "undefined symbol: pmix_output_info"):
# point it at the unpacked ones.
d=/opt/ddpdeps/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
[ -d $d ] && export PMIX_MCA_mca_base_component_path=$d
export TORCH_PYTHON
TORCH_PYTHON=$(. tests/env.sh; echo "${TORCH_PYTHON:-python3}")
[ -f "$SRC/.device/COMMIT" ] && export DDP_COMMIT=$(cat "$SRC/.device/COMMIT")
# torch.compile reuses the GPT-2 run's graph for the padded baseline (same shapes)
export TORCHINDUCTOR_FX_GRAPH_CACHE=1
say "commit: ${DDP_COMMIT:-unknown}"

if has tests; then
  t0=$SECONDS
  # test_sample.sh and test_trace.sh choose --device auto, so on this host
  # they run ddpsample's KV-cache decoding and --trace's event-timed device
  # spans on the GPU, which no other suite does
  G="$(sed -n 's/^GPU_TESTS *+*= *//p' Makefile.am | tr '\n' ' ') $(ls tests/test_gpu*.sh | tr '\n' ' ')"
  G="$G tests/test_sample.sh tests/test_trace.sh"
  tmo=$(($(left) > 350 ? 170 : 120))
  timeout -k 10 $tmo make -j8 check TESTS="$G" > "$W/logs/check.log" 2>&1
  pkill -f 'tests/(check_gpu|test_gpu|test_sample|test_trace)' 2> /dev/null
  pkill -x ddptrain 2> /dev/null; pkill -x ddpsample 2> /dev/null # after a timeout
  say "GPU suites ($((SECONDS - t0)) s, limit $tmo s):"
  grep -E '^(PASS|FAIL|SKIP|ERROR|XPASS):' "$W/logs/check.log" | tee -a "$S"
  cp tests/*.log "$W/logs/" 2> /dev/null
  # The first lines of each failure, so the summary alone says what broke.
  for t in $(sed -n 's/^\(FAIL\|ERROR\): //p' "$W/logs/check.log"); do
    say "--- $t"
    grep -E 'FAIL|rror|Assert|fault|abort|CUDA|cuda|nan|NaN' "$t.log" 2> /dev/null | head -12 | tee -a "$S"
  done
  for t in $G; do # a suite killed by the timeout leaves no PASS/FAIL line
    grep -qE "^[A-Z]+: $t\$" "$W/logs/check.log" || say "NOT FINISHED: $t"
  done
fi

if has sanitizer && [ "$(left)" -gt 150 ] && command -v compute-sanitizer > /dev/null; then
  t0=$SECONDS
  timeout -k 5 60 compute-sanitizer --tool memcheck --error-exitcode 9 \
    ./ddptrain --device cuda --precision bf16 --steps 3 --n-layer 2 --n-head 2 --n-embd 64 \
    --seq-len 64 --tokens-per-batch 512 --log-every 1 --eval-every 0 --eval-tokens 512 \
    > "$W/logs/memcheck.log" 2>&1
  say "memcheck, tiny bf16 run: exit $? ($((SECONDS - t0)) s); $(grep -c 'Invalid' "$W/logs/memcheck.log") invalid accesses"
  grep -m 6 -A 4 'Invalid\|ERROR SUMMARY' "$W/logs/memcheck.log" | tee -a "$S"
  # the same for the ResNet: cuDNN's convolutions and batch norm, our
  # pooling kernels, the image loader's pinned slots
  t0=$SECONDS
  timeout -k 5 60 compute-sanitizer --tool memcheck --error-exitcode 9 \
    ./ddptrain --device cuda --precision bf16 --model resnet --depth 10 --width 8 --batch-size 8 \
    --steps 3 --log-every 1 --eval-every 0 --optimizer sgd --peak-gflops 10 \
    > "$W/logs/memcheck-resnet.log" 2>&1
  say "memcheck, tiny bf16 ResNet: exit $? ($((SECONDS - t0)) s); $(grep -c 'Invalid' "$W/logs/memcheck-resnet.log") invalid accesses"
  grep -m 6 -A 4 'Invalid\|ERROR SUMMARY' "$W/logs/memcheck-resnet.log" | tee -a "$S"
fi

# Where a GPT-2 124M step's device time goes: each kernel launch of two bf16
# steps timed by Nsight Compute (one metric, clocks left alone), summed per
# kernel name. ddptrain is given a peak so the start-up GEMM measurement
# does not flood the profile.
if has profile && [ "$(left)" -gt 120 ] && command -v ncu > /dev/null; then
  t0=$SECONDS
  python3 bench/synthetic_shard.py "$W/prof.bin" 48 1 fixed:1025 > /dev/null 2>&1
  timeout -k 5 $(($(left) > 200 ? 120 : 80)) ncu --clock-control none --metrics gpu__time_duration.sum \
    --csv --page raw --launch-count 2000 ./ddptrain --device cuda --precision bf16 --n-layer 12 \
    --n-head 12 --n-embd 768 --seq-len 1024 --data "$W/prof.bin" --tokens-per-batch 8192 --steps 2 \
    --warmup 1 --log-every 1 --eval-every 0 --eval-tokens 1 --peak-gflops 860000 \
    > "$W/logs/ncu.csv" 2> "$W/logs/ncu.err"
  say "profile: exit $? ($((SECONDS - t0)) s); device time per kernel name over 2 steps:"
  ncu_table "$W/logs/ncu.csv"
fi

if has rprofile && [ "$(left)" -gt 90 ] && command -v ncu > /dev/null; then
  t0=$SECONDS
  python3 bench/image_shard.py "$W/rprof.img" 256 224 --classes 1000 > /dev/null 2>&1
  # an NVTX include names a whole push/pop range, "/" at its end; "step 2"
  # is the trainer's outermost range (forward, backward and optimizer), the
  # micro-step's own range nests inside it
  # about 90 ms of Nsight Compute per launch, some 700 launches a step: the
  # step takes 60-70 s under it (the H100 session of 2026-11-26 ran out at
  # 70); caches are left warm between launches, as in training
  # the algorithms come from a record written by a run outside the
  # profiler: cuDNN's search timed under Nsight Compute (every launch
  # replayed) picks by the profiler's overhead, not the kernels' speed (the
  # fourth session's profiled step had the stem on a 1.53 ms engine)
  timeout -k 5 60 ./ddptrain --device cuda --precision bf16 --model resnet --depth 50 \
    --stem imagenet --data "$W/rprof.img" --batch-size 128 --steps 2 --warmup 1 --log-every 1 \
    --eval-every 0 --optimizer sgd --peak-gflops 860000 --conv-algos "$W/conv-algos.txt" \
    > "$W/logs/rprofile-record.log" 2>&1
  tl=$(($(left) - 20)); [ $tl -gt 200 ] && tl=200
  timeout -k 5 $tl ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
    --csv --page raw --nvtx --nvtx-include "step 2/" ./ddptrain --device cuda \
    --precision bf16 --model resnet --depth 50 --stem imagenet --data "$W/rprof.img" \
    --batch-size 128 --steps 4 --warmup 1 --log-every 1 --eval-every 0 --optimizer sgd \
    --conv-algos "$W/conv-algos.txt" --nvtx on --peak-gflops 860000 \
    > "$W/logs/ncu-resnet.csv" 2> "$W/logs/ncu-resnet.err"
  say "ResNet-50 profile: exit $? ($((SECONDS - t0)) s); device time per kernel name, one whole step:"
  ncu_table "$W/logs/ncu-resnet.csv"
fi

# Where the host's time goes while it issues a ResNet-50 bf16 step: the
# host issued a step's 727 launches in 23-29 ms at the fourth H100 session,
# close to the device's own 28 ms, and the fifth's windows ran 24-47 ms a
# step with the device never slowed, so the host bounds the step. perf
# samples the running process (attached after its set-up and cuDNN's
# search, for 4 s of steady steps) with DWARF call chains: time per thread
# and library, per function, and per ddptrain function with its callees.
# perf comes from the machine, else from .device/perf-bundle.tar.xz (the
# packer's perf with its libraries); Nsight Systems' API summaries are
# added where nsys is found. Either missing is said, not skipped silently.
if has hprofile && [ "$(left)" -gt 60 ]; then
  t0=$SECONDS
  [ -f "$W/rprof.img" ] || python3 bench/image_shard.py "$W/rprof.img" 256 224 --classes 1000 > /dev/null 2>&1
  hargs="--device cuda --precision bf16 --model resnet --depth 50 --stem imagenet
    --data $W/rprof.img --batch-size 128 --steps 400 --warmup 1 --log-every 20 --eval-every 0
    --optimizer sgd --peak-gflops 860000 --conv-algos $W/conv-algos.txt"
  PERF=$(command -v perf)
  if [ -z "$PERF" ] && [ -f "$SRC/.device/perf-bundle.tar.xz" ]; then
    tar -C /tmp -xJf "$SRC/.device/perf-bundle.tar.xz" && PERF=/tmp/perfb/perf
  fi
  # its libraries for perf alone, never for ddptrain
  perf_() { LD_LIBRARY_PATH=/tmp/perfb/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$PERF" "$@"; }
  if [ -n "$PERF" ] && perf_ --version > /dev/null 2>&1; then
    # shellcheck disable=SC2086
    ./ddptrain $hargs > "$W/logs/hprof-run.log" 2>&1 &
    run=$!
    sleep 9
    timeout -k 5 20 env LD_LIBRARY_PATH=/tmp/perfb/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$PERF" record -e cpu-clock -F 999 --call-graph dwarf,16384 -p "$run" \
      -o "$W/logs/hprof.perf" -- sleep 4 > "$W/logs/hprof-perf.err" 2>&1
    say "host profile (perf, 4 s of steady steps): exit $? ($((SECONDS - t0)) s)"
    wait $run
    grep -E '\] step +[0-9]+/' "$W/logs/hprof-run.log" | tail -n 4 | tee -a "$S"
    say "  per thread and library (self time):"
    perf_ report -i "$W/logs/hprof.perf" --no-children --sort pid,dso -g none 2> /dev/null |
      grep -v '^#' | grep '%' | head -16 | tee -a "$S"
    say "  per function (self time):"
    perf_ report -i "$W/logs/hprof.perf" --no-children --sort dso,symbol -g none 2> /dev/null |
      grep -v '^#' | grep '%' | head -40 | tee -a "$S"
    say "  ddptrain's functions with what they call (children):"
    perf_ report -i "$W/logs/hprof.perf" --children --sort symbol -g none 2> /dev/null |
      grep -v '^#' | grep '%' | grep -E 'ddp_|cuda_|conv|bn_|resnet|train|optim|reducer|loader' |
      head -40 | tee -a "$S"
    perf_ report -i "$W/logs/hprof.perf" --children --sort dso,symbol -g caller,0.5,callee \
      --stdio 2> /dev/null | head -3000 > "$W/logs/hprof-callers.txt"
  else
    say "host profile: no perf on this machine and no .device/perf-bundle.tar.xz"
  fi
  NSYS=$(command -v nsys || ls -d /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
    /usr/local/cuda*/nsight-systems*/bin/nsys 2> /dev/null | head -n 1)
  if [ -n "$NSYS" ] && [ "$(left)" -gt 60 ]; then
    t0=$SECONDS
    # shellcheck disable=SC2086
    timeout -k 5 50 "$NSYS" profile -t cuda,cudnn,cublas -s none -o "$W/logs/hprof" \
      --force-overwrite true ./ddptrain ${hargs/--steps 400/--steps 40} > "$W/logs/hprof.out" 2>&1
    say "host profile (nsys $NSYS): exit $? ($((SECONDS - t0)) s); host time per API call over 40 steps:"
    for r in cuda_api_sum cudnn_api_sum; do
      "$NSYS" stats -q -r $r -f csv "$W/logs/hprof.nsys-rep" 2> /dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
if len(rows) > 1:
    h = rows[0]
    t, n, a, k = (h.index(x) for x in ("Total Time (ns)", "Num Calls", "Avg (ns)", "Name"))
    for r in rows[1:13]:
        print("  %8.1f ms %7s calls %8.1f us  %s" % (float(r[t]) / 1e6, r[n], float(r[a]) / 1e3, r[k]))' |
        tee -a "$S"
    done
  else
    say "host profile: no Nsight Systems (nsys) found"
  fi
fi

if has bench; then
  # the GPU's clocks, power and temperature once a second while the
  # benchmarks run, so that a run slower in its later windows can be told
  # from a device that slowed down (the summary gives the range)
  clocks=""
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
      --format=csv,noheader -l 1 > "$W/logs/gpu-clocks.csv" 2> /dev/null &
    clocks=$!
  fi
  for b in ${GPU_BENCHES:-resnet:2/5 gpt2:1/3 varlen:1/2 memory:1/1}; do
    name=${b%%:*} frac=${b#*:}
    l=$(($(left) - 15))
    [ "$l" -gt 30 ] || { say "bench $name: not run ($l s left)"; continue; }
    t0=$SECONDS
    bench/gpu_$name.sh --out "$W/bench" --budget $((l * ${frac%/*} / ${frac#*/})) > "$W/logs/bench-$name.out" 2>&1
    say "bench $name: exit $? ($((SECONDS - t0)) s)"
  done
  grep -E '^(PASS|FAIL|\|)' "$W/bench/gpu_bench.log" 2> /dev/null | head -60 | tee -a "$S"
  if [ -n "$clocks" ]; then
    kill "$clocks" 2> /dev/null
    awk -F', *' '{ sm = $2 + 0; p = $4 + 0; t = $5 + 0; n++
      if (n == 1 || sm < smin) smin = sm; if (sm > smax) smax = sm
      if (p > pmax) pmax = p; if (t > tmax) tmax = t; if ($6 != "0x0000000000000000" && $6 != "0x0000000000000001") thr++ }
      END { if (n) printf "GPU during the benchmarks: SM clock %d-%d MHz, power up to %.0f W, up to %d C, %d of %d samples slowed for a reason other than idling\n", smin, smax, pmax, tmax, thr, n }' \
      "$W/logs/gpu-clocks.csv" | tee -a "$S"
  fi
fi
