#!/usr/bin/env bash
# The whole GPU session as one command, for a bare GPU host with a short lease:
#   bash bench/gpu_session.sh OUT [SECONDS] [PHASES]
# run from the source root, with .device/ (the dependency packages and
# build.sh, see bench/RESULTS.md "What the next GPU session runs") beside it.
#
# PHASES (default "facts build tests sanitizer bench") run in that order, all
# inside SECONDS (default 540) of wall time, so the command ends before the
# lease's per-call limit and its files always come back:
#   facts      the GPU, driver, nvcc, PyTorch, where cuDNN and NCCL were found;
#   build      .device/build.sh for sm_90 only (the host's chip), then the
#              test programs;
#   tests      the GPU suites (GPU_TESTS in Makefile.am and tests/test_gpu*.sh);
#   sanitizer  a tiny bf16 training run under compute-sanitizer memcheck;
#   bench      bench/gpu_gpt2.sh, gpu_varlen.sh, gpu_memory.sh on what is left.
# Only a few files come back from such a host, so everything is written under
# one work folder and packed into OUT/session.tgz at the end; OUT/summary.txt
# holds the short table (also printed last), OUT/gpu_bench.log the benchmarks.
set -u
OUT=${1:?usage: gpu_session.sh OUT [SECONDS] [PHASES]}
BUDGET=${2:-540}
PHASES=${3:-facts build tests sanitizer bench}
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
  tar -C "$W" -czf "$OUT/session.tgz" --exclude='*.bin' --exclude='*.st' --exclude='*.safetensors' . 2> /dev/null
  echo "--- summary ($SECONDS s of $BUDGET)"; cat "$S"
}
trap pack EXIT

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
  # build.sh names the cuDNN and NCCL it found; if configure cannot link one
  # of those, the second try lets configure guess (a later --with-X wins), so
  # the CUDA backend is still tested without it.
  if ! DDP_CONFIGURE_FLAGS="--with-cuda-arch=90 ${DDP_CONFIGURE_FLAGS:-}" \
       bash .device/build.sh > "$W/logs/build.log" 2>&1; then
    say "build: FAILED after $((SECONDS - t0)) s; trying again with cuDNN and NCCL guessed"
    tail -25 "$W/logs/build.log" | tee -a "$S"
    if ! DDP_CONFIGURE_FLAGS="--with-cuda-arch=90 --with-cudnn=guess --with-nccl=guess ${DDP_CONFIGURE_FLAGS:-}" \
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
# shellcheck disable=SC1091
source "$SRC/.device/env.sh"
cd /tmp/ddp || exit 1
export TORCH_PYTHON
TORCH_PYTHON=$(. tests/env.sh; echo "${TORCH_PYTHON:-python3}")
[ -f "$SRC/.device/COMMIT" ] && export DDP_COMMIT=$(cat "$SRC/.device/COMMIT")
say "commit: ${DDP_COMMIT:-unknown}"

if has tests; then
  t0=$SECONDS
  G="$(sed -n 's/^GPU_TESTS *+*= *//p' Makefile.am | tr '\n' ' ') $(ls tests/test_gpu*.sh | tr '\n' ' ')"
  tmo=$(($(left) > 400 ? 170 : 120))
  timeout -k 10 $tmo make -j8 check TESTS="$G" > "$W/logs/check.log" 2>&1
  pkill -f 'tests/(check_gpu|test_gpu)' 2> /dev/null; pkill -x ddptrain 2> /dev/null # after a timeout
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

if has sanitizer && [ "$(left)" -gt 200 ] && command -v compute-sanitizer > /dev/null; then
  t0=$SECONDS
  timeout -k 5 60 compute-sanitizer --tool memcheck --error-exitcode 9 \
    ./ddptrain --device cuda --precision bf16 --steps 3 --n-layer 2 --n-head 2 --n-embd 64 \
    --seq-len 64 --tokens-per-batch 512 --log-every 1 --eval-every 0 --eval-tokens 512 \
    > "$W/logs/memcheck.log" 2>&1
  say "memcheck, tiny bf16 run: exit $? ($((SECONDS - t0)) s); $(grep -c 'Invalid' "$W/logs/memcheck.log") invalid accesses"
  grep -m 6 -A 4 'Invalid\|ERROR SUMMARY' "$W/logs/memcheck.log" | tee -a "$S"
fi

if has bench; then
  for b in gpt2:2/5 varlen:3/5 memory:1/1; do
    name=${b%%:*} frac=${b#*:}
    l=$(($(left) - 15))
    [ "$l" -gt 30 ] || { say "bench $name: not run ($l s left)"; continue; }
    t0=$SECONDS
    bench/gpu_$name.sh --out "$W/bench" --budget $((l * ${frac%/*} / ${frac#*/})) > "$W/logs/bench-$name.out" 2>&1
    say "bench $name: exit $? ($((SECONDS - t0)) s)"
  done
  grep -E '^(PASS|FAIL|\|)' "$W/bench/gpu_bench.log" 2> /dev/null | head -60 | tee -a "$S"
fi
