# shellcheck shell=sh
# Shared by the scripts that build one of bench/'s C programs against a
# build tree's libddpcore and run it. Sourced after `build` (the build
# directory, absolute) is set: sets `cc` and `src` (the compiler and the
# source tree the build was configured with) from its Makefile, and stops
# with a message when the library is not built yet.
#   c_bench_link NAME DIR [LIBS...]  links bench/NAME.c to DIR/NAME, with
#                                    the public, internal and config.h
#                                    headers on the include path
#   c_bench_machine                  prints "N cores, load L, date, commit C"
# shellcheck disable=SC2154 # build: set by the sourcing script
cc=$(sed -n 's/^CC = //p' "$build/Makefile")
src=$(sed -n 's/^abs_top_srcdir = //p' "$build/Makefile")
[ -f "$build/libddpcore.la" ] || { echo "no $build/libddpcore.la: run make first" >&2; exit 1; }

c_bench_link() {
  c_bench_name=$1 c_bench_dir=$2
  shift 2
  # shellcheck disable=SC2086
  "$build/libtool" --quiet --tag=CC --mode=link $cc -std=gnu11 -O2 -I"$build" -I"$src/include" \
    -I"$src/src" "$src/bench/$c_bench_name.c" -o "$c_bench_dir/$c_bench_name" \
    "$build/libddpcore.la" "$@"
}

c_bench_machine() {
  echo "$(nproc) cores, load $(cut -d" " -f1 /proc/loadavg), $(date -u +%Y-%m-%d), commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)"
}
