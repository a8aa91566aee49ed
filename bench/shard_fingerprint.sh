#!/bin/sh
# The cost of the shard content hash that ranks compare at start-up:
# builds bench/shard_fingerprint.c against a build tree's libddpcore, writes
# one synthetic uint16 shard per size into a scratch directory, and prints a
# markdown table: the bytes the sampled hash reads, its time with a cold and
# a warm page cache, the whole ddp_shard_read (header checks, index pass
# over every token, sampled hash) cold and warm, and a full FNV-1a hash of
# every byte cold and warm, medians in milliseconds.
# Usage: bench/shard_fingerprint.sh [build dir, default .] [MiB sizes, default "256 4096"]
#        [passes, default 3] [scratch dir, default a temporary one on /tmp's disk]
set -eu
build=$(cd "${1:-.}" && pwd)
sizes=${2:-256 4096}
passes=${3:-3}
cc=$(sed -n 's/^CC = //p' "$build/Makefile")
src=$(sed -n 's/^abs_top_srcdir = //p' "$build/Makefile")
[ -f "$build/libddpcore.la" ] || { echo "no $build/libddpcore.la: run make first" >&2; exit 1; }
work=${4:-$(mktemp -d)}
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2086
"$build/libtool" --quiet --tag=CC --mode=link $cc -std=gnu11 -O2 -I"$src/include" -I"$src/src" \
  "$src/bench/shard_fingerprint.c" -o "$work/shard_fingerprint" "$build/libddpcore.la"
echo "$(nproc) cores, load $(cut -d" " -f1 /proc/loadavg), $(date -u +%Y-%m-%d), commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo
echo "| shard | sampled | sampled cold ms | sampled warm ms | shard read cold ms | shard read warm ms | full hash cold ms | full hash warm ms |"
echo "|---|---|---|---|---|---|---|---|"
for mib in $sizes; do
  "$work/shard_fingerprint" "$work/shard_$mib.bin" "$mib" "$passes" 2>> "$work/notes"
  rm -f "$work/shard_$mib.bin"
done
echo
cat "$work/notes"
