#!/bin/sh
# configure's promises: an explicit --with-X that cannot be honoured stops
# with a message naming it; guess mode degrades to a CPU build and says so;
# the summary reflects what will be built, with and without CUDA.
# Each case runs configure out of tree in a scratch directory.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -f "$top_srcdir/config.status" ]; then
  echo "SKIP: the source tree is configured in place, so out-of-tree configure runs are refused"
  exit 77
fi
fail=0
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
have_nvcc=0
grep -q '^#define DDP_HAVE_CUDA 1' "$top_builddir/config.h" && have_nvcc=1

expect() { # description, expected-exit (0 or "fail"), expected-text, configure-args...
  desc=$1 want=$2 text=$3
  shift 3
  rm -rf "$scratch/b" && mkdir "$scratch/b"
  (cd "$scratch/b" && "$top_srcdir/configure" "$@" > out 2>&1)
  rc=$?
  if { [ "$want" = 0 ] && [ $rc -ne 0 ]; } || { [ "$want" = fail ] && [ $rc -eq 0 ]; }; then
    echo "FAIL: $desc: configure exit $rc"; tail -15 "$scratch/b/out" | sed 's/^/  | /'; fail=1; return
  fi
  if ! grep -qE -- "$text" "$scratch/b/out"; then
    echo "FAIL: $desc: no /$text/ in configure output"; tail -15 "$scratch/b/out" | sed 's/^/  | /'
    fail=1; return
  fi
  echo "ok: $desc"
}

expect "explicit CUDA dir that does not exist" fail \
  "error: --with-cuda=/nonexistent: /nonexistent/bin/nvcc does not exist" --with-cuda=/nonexistent
expect "malformed CUDA architecture" fail "'sm80' is not a compute capability" --with-cuda-arch=sm80
expect "cuDNN without the CUDA backend" fail \
  "error: --with-cudnn=/opt/cudnn needs the CUDA backend" --without-cuda --with-cudnn=/opt/cudnn
expect "CPU-only summary" 0 "CUDA \.+ no" --without-cuda
grep -q "backends: cpu$" "$scratch/b/out" || { echo "FAIL: CPU-only summary lists other backends"; fail=1; }
expect "guess mode with a broken nvcc degrades" 0 "building without cuda" NVCC=/bin/false
grep -qE "CUDA \.+ no" "$scratch/b/out" || { echo "FAIL: broken nvcc still reports CUDA"; fail=1; }
expect "--with-pcre2=no: no PCRE2 in the summary" 0 "PCRE2 \.+ no" --without-cuda --with-pcre2=no
expect "--with-dnnl=no: no oneDNN in the summary" 0 "oneDNN \.+ no" --without-cuda --with-dnnl=no
expect "explicit oneDNN dir without it" fail \
  "error: --with-dnnl=/nonexistent: /nonexistent/include/dnnl.h does not exist" --without-cuda \
  --with-dnnl=/nonexistent
expect "--with-png=no: no libpng in the summary" 0 "libpng \.+ no" --without-cuda --with-png=no
grep -q "^#define DDP_HAVE_PNG 0" "$scratch/b/config.h" || { echo "FAIL: --with-png=no defines DDP_HAVE_PNG"; fail=1; }
expect "--with-jpeg=no: no libjpeg in the summary" 0 "libjpeg \.+ no" --without-cuda --with-jpeg=no
grep -q "^#define DDP_HAVE_JPEG 0" "$scratch/b/config.h" || { echo "FAIL: --with-jpeg=no defines DDP_HAVE_JPEG"; fail=1; }
# A library asked for (yes) that the probe cannot link stops configure: a
# JPEG probe against a missing library, a PNG probe whose pkg-config data
# names one (libpng's own flags plus a library that does not exist).
expect "--with-jpeg=yes without a linkable libjpeg" fail \
  "error: --with-jpeg=yes was given, but libjpeg .* was not found" --without-cuda --with-jpeg=yes \
  JPEG_CFLAGS=-I/nonexistent JPEG_LIBS=-lddp_no_such_jpeg
expect "--with-png=yes without a linkable libpng" fail \
  "error: --with-png=yes was given, but libpng >= 1.6 was not found" --without-cuda --with-png=yes \
  PNG_CFLAGS=-I/nonexistent PNG_LIBS=-lddp_no_such_png
# A compiler chosen by the user (CC in the environment, as some GPU images
# set it) that cannot link MPI alone keeps MPI through the wrapper's flags
# (it used to build without MPI, with only a warning).
if grep -q '^#define DDP_HAVE_MPI 1' "$top_builddir/config.h" && command -v gcc > /dev/null; then
  expect "CC=gcc keeps MPI with the wrapper's flags" 0 "links MPI programs with the flags of .*yes" \
    CC=gcc --without-cuda
  grep -qE "MPI \.+ yes" "$scratch/b/out" || { echo "FAIL: CC=gcc builds without MPI"; fail=1; }
else
  echo "skip: CC with MPI's flags (this build has no MPI, or no gcc)"
fi
if [ $have_nvcc = 1 ]; then
  expect "explicit NCCL dir without nccl.h" fail "NCCL \(nccl.h and a linkable libnccl\) was not found under /nonexistent" \
    --with-nccl=/nonexistent
  expect "CUDA summary" 0 "CUDA \.+ yes .*arch: 80 90" --with-cuda=guess
  grep -q "backends: cuda, cpu$" "$scratch/b/out" || { echo "FAIL: CUDA summary lacks the cuda backend"; fail=1; }
else
  echo "skip: CUDA cases (this build found no CUDA toolkit)"
fi
exit $fail
