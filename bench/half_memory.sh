#!/bin/bash
# Activation memory and step time per precision on the default model (CPU).
#
# Usage: bench/half_memory.sh [DDPTRAIN] [STEPS]
#   DDPTRAIN  the ddptrain program (default ./ddptrain)
#   STEPS     training steps per precision (default 20; the first logged
#             window is dropped as warm-up)
#
# Runs the default model (GPT L2 H4 C128, seq-len 128, 4096 tokens per
# micro-batch, built-in data) on one rank with one thread in fp32, bf16 and
# fp16, and prints per precision: the activation arena (MiB, from the
# start-up summary), the process's peak resident memory (MiB, GNU time:
# weights, optimizer state, arena, the CPU ops' fp32 workspace, libraries)
# and the mean ms per step. Record results in
# bench/RESULTS.md with the date, machine and commit.
set -eu
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
exe=${1:-./ddptrain}
steps=${2:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '| precision | activation arena MiB | peak RSS MiB | ms per step |\n|---|---|---|---|\n'
for p in fp32 bf16 fp16; do
  /usr/bin/time -f '%M' -o "$work/$p.rss" "$exe" --threads 1 --precision "$p" --steps "$steps" --warmup 5 --log-every 5 --eval-every 0 \
    --eval-tokens 1 --metrics "$work/$p.jsonl" > "$work/$p.log" 2>&1 ||
    { cat "$work/$p.log"; exit 1; }
  mib=$(sed -n 's/.*parameters, \([0-9.]*\) MiB activations.*/\1/p' "$work/$p.log")
  ms=$(grep '"record":"step"' "$work/$p.jsonl" | tail -n +2 | python3 -c '
import json, sys
r = [json.loads(l) for l in sys.stdin]
print("%.0f" % (sum(x["ms_per_step"] for x in r) / len(r)))')
  rss=$(($(tail -n 1 "$work/$p.rss") / 1024))
  printf '| %s | %s | %s | %s |\n' "$p" "$mib" "$rss" "$ms"
done
