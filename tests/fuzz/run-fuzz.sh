#!/bin/sh
# Builds the fuzz targets with clang's libFuzzer (AddressSanitizer and
# UndefinedBehaviorSanitizer) and runs each for a fixed time (docs/fuzzing.md).
#
#   tests/fuzz/run-fuzz.sh [--seconds N] [--jobs J] [--targets "shard ..."]
#                          [--build DIR] [--out DIR] [--src DIR] [-- FLAGS]
#
#   --seconds N  how long each target runs (default 60)
#   --jobs J     targets run at once (default: the number of cores, at most 4)
#   --targets    a subset of: shard safetensors checkpoint options image_shard
#   --build DIR  where the library is configured and built with clang
#                (default tests/fuzz/build; kept between runs, so a second
#                run only rebuilds what changed)
#   --out DIR    results (default tests/fuzz/out):
#                  corpus/<target>/   the working corpus: the seeds, the
#                                     regressions and what the fuzzer added
#                                     (a later run continues from it)
#                  crashes/<target>/  crash-*, leak-*, timeout-*, oom-* inputs
#                  <target>.log       libFuzzer's output
#   --src DIR    an autoreconf'ed copy of the sources to configure (default:
#                a copy of this tree's files made under the build directory,
#                so an in-tree build does not get in the way)
#   -- FLAGS     passed to every libFuzzer run (e.g. -max_len=65536)
#
# The library is built by the project's own configure with CC=clang, without
# MPI or CUDA (the readers use neither), and each tests/fuzz/fuzz_<target>.c
# is linked against it with -fsanitize=fuzzer. The normal build never needs
# clang.
#
# Prints, per target, the executions, executions per second, the coverage
# libFuzzer reports (cov: edges, ft: features), the corpus size and the crash
# inputs. Exit status: 0 no crash; 1 a crash (its input is kept under
# OUT/crashes/<target>/: copy it to tests/fuzz/regressions/<target>/ and fix
# the reader; `make check` then replays it forever); 2 bad usage; 77 clang or
# libFuzzer missing outside CI. Under CI (the CI environment variable set, as
# every CI service does) a missing clang is a failure: scripts/install-deps.sh
# --test installs it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
seconds=60
jobs=$(nproc 2>/dev/null || echo 2)
[ "$jobs" -le 4 ] || jobs=4
targets="shard safetensors checkpoint options image_shard"
build=$here/build
out=$here/out
src=
usage() { sed -n '5,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=${2:?}; shift 2 ;;
    --jobs) jobs=${2:?}; shift 2 ;;
    --targets) targets=${2:?}; shift 2 ;;
    --build) build=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --src) src=${2:?}; shift 2 ;;
    --) shift; break ;;
    -h | --help) usage ;;
    *) echo "run-fuzz: unknown argument '$1'" >&2; usage ;;
  esac
done
extra=$* # libFuzzer's flags: no spaces inside one
case $seconds in '' | *[!0-9]*) echo "run-fuzz: --seconds needs a whole number" >&2; exit 2 ;; esac
case $jobs in '' | *[!0-9]* | 0) echo "run-fuzz: --jobs needs a positive number" >&2; exit 2 ;; esac
for t in $targets; do
  [ -f "$here/fuzz_$t.c" ] || { echo "run-fuzz: no target '$t' (tests/fuzz/fuzz_$t.c)" >&2; exit 2; }
done

# ---- clang and libFuzzer ---------------------------------------------------
missing() {
  if [ -n "${CI:-}" ]; then
    echo "run-fuzz: FAIL: $1 (CI must have it: scripts/install-deps.sh --test)" >&2
    exit 1
  fi
  echo "run-fuzz: SKIPPED: $1; no fuzzing was done." >&2
  echo "run-fuzz: install it with scripts/install-deps.sh --test" >&2
  exit 77
}
cc=
for c in clang clang-14 clang-15 clang-16; do
  if command -v "$c" > /dev/null 2>&1; then cc=$c; break; fi
done
[ -n "$cc" ] || missing "clang is not installed"
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' \
  > "$probe/probe.c"
"$cc" -fsanitize=fuzzer,address,undefined "$probe/probe.c" -o "$probe/probe" > "$probe/log" 2>&1 \
  || missing "$cc cannot link -fsanitize=fuzzer (the libFuzzer runtime, Debian: libclang-rt-14-dev)"

# ---- the library, built by clang ---------------------------------------------
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
mkdir -p "$build" "$out"
build=$(cd "$build" && pwd)
out=$(cd "$out" && pwd)
t0=$(date +%s)
if [ -z "$src" ]; then
  src=$build/src
  # a fresh copy of the tracked and untracked-but-not-ignored files; files
  # that did not change keep their times, so make rebuilds only what did
  mkdir -p "$src"
  if git -C "$top" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    (cd "$top" && git ls-files -co --exclude-standard -z | xargs -0 cp -u --parents -P -t "$src")
  else # an unpacked tarball: copy it whole, without what builds left in it
    (cd "$top" && tar --exclude=./build-tests --exclude=./tests/fuzz/build \
      --exclude=./tests/fuzz/out -cf - .) | (cd "$src" && tar -xf -)
    (cd "$src" && { make distclean > /dev/null 2>&1 || true; })
  fi
  [ -x "$src/configure" ] || (cd "$src" && autoreconf -fi > /dev/null 2>&1) \
    || { echo "run-fuzz: autoreconf failed in $src" >&2; exit 1; }
fi
src=$(cd "$src" && pwd)
lib=$build/lib
mkdir -p "$lib"
if [ ! -f "$lib/Makefile" ]; then
  echo "run-fuzz: configuring the library with $cc in $lib"
  (cd "$lib" && "$src/configure" CC="$cc" CFLAGS="-g -O1 $san -fsanitize=fuzzer-no-link" \
    LDFLAGS="$san" --without-cuda --with-mpi=no --disable-shared --enable-static \
    > configure.log 2>&1) || { tail -30 "$lib/configure.log" >&2; exit 1; }
fi
echo "run-fuzz: building the library with $cc"
make -C "$lib" -j"$jobs" libddpcore.la > "$lib/make.log" 2>&1 || { tail -30 "$lib/make.log" >&2; exit 1; }
for t in $targets; do
  (cd "$lib" && ./libtool --quiet --tag=CC --mode=link "$cc" -g -O1 $san -fsanitize=fuzzer \
    -I"$src/include" -I"$src/src" -I. $(sed -n 's/^JANSSON_CFLAGS = //p' Makefile) \
    -o "$build/fuzz_$t" "$src/tests/fuzz/fuzz_$t.c" libddpcore.la) > "$build/link_$t.log" 2>&1 \
    || { cat "$build/link_$t.log" >&2; exit 1; }
done
echo "run-fuzz: built $(echo $targets | wc -w) targets in $(($(date +%s) - t0)) s"

# ---- the runs ---------------------------------------------------------------------
# LeakSanitizer ignores what third-party runtimes keep for good, as in make check.
LSAN_OPTIONS=suppressions=$src/tests/lsan.supp:print_suppressions=0
ASAN_OPTIONS=detect_odr_violation=0
export LSAN_OPTIONS ASAN_OPTIONS
run_one() { # TARGET
  t=$1
  mkdir -p "$out/corpus/$t" "$out/crashes/$t"
  touch "$out/$t.start" # crashes of this run are the files newer than it
  regress=
  [ -d "$src/tests/fuzz/regressions/$t" ] && regress=$src/tests/fuzz/regressions/$t
  # the first folder is where new inputs go; the seeds and the regressions
  # are read. -timeout: an input taking 10 s is a hang; -rss_limit_mb: a
  # reader asking for gigabytes is a finding too.
  "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$out/crashes/$t/" $extra \
    "$out/corpus/$t" "$src/tests/fuzz/corpus/$t" $regress > "$out/$t.log" 2>&1
  echo $? > "$out/$t.rc"
}
echo "run-fuzz: running $targets for ${seconds} s each, $jobs at a time"
running=0
for t in $targets; do
  rm -f "$out/$t.rc"
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait
    running=0
  fi
done
wait

# ---- the report -------------------------------------------------------------------
stat_of() { sed -n "s/^stat::$2: *//p" "$out/$1.log" | tail -1; }
rc=0
printf '\n%-12s %10s %8s %7s %7s %7s %s\n' target execs exec/s cov ft corpus result
for t in $targets; do
  done_line=$(grep -E '^#[0-9]+[[:space:]]+(DONE|INITED)' "$out/$t.log" | tail -1 || true)
  cov=$(echo "$done_line" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
  ft=$(echo "$done_line" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
  crashes=$(find "$out/crashes/$t" -type f -newer "$out/$t.start" | wc -l)
  result=ok
  if [ "$(cat "$out/$t.rc" 2> /dev/null || echo 1)" != 0 ] || [ "$crashes" -gt 0 ]; then
    result="CRASH ($crashes input(s) in $out/crashes/$t)"
    rc=1
  fi
  printf '%-12s %10s %8s %7s %7s %7s %s\n' "$t" "$(stat_of "$t" number_of_executed_units)" \
    "$(stat_of "$t" average_exec_per_sec)" "${cov:-?}" "${ft:-?}" \
    "$(find "$out/corpus/$t" -type f | wc -l)" "$result"
done
if [ $rc -ne 0 ]; then
  for t in $targets; do
    if [ "$(cat "$out/$t.rc" 2> /dev/null || echo 1)" != 0 ]; then
      echo "---- $t: the end of $out/$t.log"
      grep -v '^#[0-9]' "$out/$t.log" | tail -40
    fi
  done
  echo "run-fuzz: FAILED: keep each crash input as a regression test:"
  echo "  cp $out/crashes/<target>/* tests/fuzz/regressions/<target>/"
  echo "and fix the reader; make check replays tests/fuzz/regressions/."
fi
exit $rc
