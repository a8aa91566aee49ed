#!/bin/sh
# Times a clean build and the test suite from a pristine copy of the sources:
# autoreconf, configure, make -jN (with and without the CUDA backend), and
# make check. Prints one markdown table for bench/RESULTS.md.
set -eu
cd "$(dirname "$0")/.."
src=$(pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
jobs=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
git ls-files -co --exclude-standard -z | xargs -0 cp --parents -P -t "$work"
now() { date +%s.%N; }
t() { # label, command...
  label=$1
  shift
  s=$(now)
  "$@" > "$work/step.log" 2>&1 || { tail -30 "$work/step.log"; exit 1; }
  printf '| %s | %.1f |\n' "$label" "$(echo "$(now) - $s" | bc)"
}
echo "| step ($jobs cores) | seconds |"
echo "|---|---|"
cd "$work"
t "autoreconf -fi" autoreconf -fi
mkdir cuda cpu
cd "$work/cuda"
t "configure (CUDA found)" ../configure
t "make -j$jobs (CUDA + CPU backends)" make -j"$jobs"
t "make check (all suites)" make -j"$jobs" check
cd "$work/cpu"
t "configure --without-cuda" ../configure --without-cuda
t "make -j$jobs (CPU backend only)" make -j"$jobs"
