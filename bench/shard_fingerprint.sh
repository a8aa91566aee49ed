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
# shellcheck source=bench/c_bench.sh
. "$(dirname "$0")/c_bench.sh"
work=${4:-$(mktemp -d)}
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
c_bench_link shard_fingerprint "$work"
c_bench_machine
echo
echo "| shard | sampled | sampled cold ms | sampled warm ms | shard read cold ms | shard read warm ms | full hash cold ms | full hash warm ms |"
echo "|---|---|---|---|---|---|---|---|"
for mib in $sizes; do
  "$work/shard_fingerprint" "$work/shard_$mib.bin" "$mib" "$passes" 2>> "$work/notes"
  rm -f "$work/shard_$mib.bin"
done
echo
cat "$work/notes"
