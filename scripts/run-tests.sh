#!/bin/sh
# The whole test suite, as CI runs it (the README's second command):
#   1. build with warnings as errors and run `make check` (unit suites, the
#      program tests, the multi-rank tests; the GPU suites SKIP without a GPU),
#      then `make check-slurm` (the SLURM templates on a private local SLURM);
#   2. build again with AddressSanitizer + UBSan (CPU backend) and run the
#      unit suites under them;
#   3. fuzz the file readers and the option parser with libFuzzer for a
#      fixed time (tests/fuzz/run-fuzz.sh; SKIPs loudly without clang
#      outside CI);
#   4. `make distcheck`: the tarball builds, tests, installs and uninstalls
#      cleanly from a read-only source tree.
# Everything runs on a pristine copy of the sources in build-tests/src (the
# files git tracks plus untracked, non-ignored ones), so an in-tree build from
# the README's first command neither breaks these out-of-tree builds nor is
# touched by them, and the script can be re-run.
set -eu
cd "$(dirname "$0")/.."
src=$(pwd)
top=$src/build-tests/src
jobs=$(nproc 2>/dev/null || echo 2)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
stage() { printf '\n==== %s ====\n' "$*"; }
elapsed() { echo "($(( $(date +%s) - $1 )) s)"; }

stage "staging sources and running autoreconf"
rm -rf build-tests && mkdir -p "$top"
if git -C "$src" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  (cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -P -t "$top")
else
  tar -C "$src" --exclude=./build-tests --exclude=./.git -cf - . | tar -C "$top" -xf -
  (cd "$top" && { make distclean > /dev/null 2>&1 || true; })
fi
(cd "$top" && autoreconf -fi > /dev/null)
cd "$src"

t=$(date +%s)
stage "1/4 build (warnings are errors) and make check"
mkdir -p build-tests/main && cd build-tests/main
"$top/configure" --enable-werror > configure.log || { tail -40 configure.log; exit 1; }
sed -n '/^ddptrain .* configuration/,$p' configure.log
make -j"$jobs" > make.log 2>&1 || { tail -60 make.log; exit 1; }
make -j"$jobs" check || { cat test-suite.log; exit 1; }
make check-slurm # a private SLURM on this machine: launch templates, srun, preemption
cd "$src"; elapsed "$t"

t=$(date +%s)
stage "2/4 sanitizer build (ASan + UBSan), unit suites"
mkdir -p build-tests/asan && cd build-tests/asan
"$top/configure" --enable-werror --enable-sanitizers --without-cuda > configure.log \
  || { tail -40 configure.log; exit 1; }
make -j"$jobs" > make.log 2>&1 || { tail -60 make.log; exit 1; }
make -j"$jobs" check-unit || { cat test-suite.log; exit 1; }
cd "$src"; elapsed "$t"

t=$(date +%s)
stage "3/4 fuzzing: 60 s per target (libFuzzer, ASan + UBSan)"
rc=0
sh tests/fuzz/run-fuzz.sh --seconds 60 --src "$top" --build build-tests/fuzz \
  --out build-tests/fuzz/out || rc=$?
case $rc in
  0) ;;
  77) echo "fuzzing: SKIPPED (no clang/libFuzzer here; CI installs them)" ;;
  *) echo "fuzzing: FAILED; crash inputs are in build-tests/fuzz/out/crashes/"; exit 1 ;;
esac
elapsed "$t"

t=$(date +%s)
stage "4/4 make distcheck"
cd build-tests/main
make -j"$jobs" distcheck > distcheck.log 2>&1 || { tail -80 distcheck.log; exit 1; }
grep -A3 "archives ready for distribution" distcheck.log || true
cd "$src"; elapsed "$t"
echo "all test stages passed"
