#!/bin/sh
# Sampler benchmark (--plan-only, no training):
#  1. the Debian `fortunes` corpus, prepared by ddpprep with --doc-sep '%':
#     seq-len 256, 4096 padded tokens per micro-batch, world 4, accum 2;
#     padding and per-step rank imbalance of the bucket sampler beside the
#     random baseline (targets: padding <= 5%, imbalance mean <= 1.03 and
#     worst <= 1.10);
#  2. planning time and plan memory for 10 million synthetic documents
#     (targets: <= 10 s on one core, <= 32 bytes per document), at world
#     8 x accum 4 and at 1024 x accum 1;
#  3. one micro-batch per rank at scale: 1 million synthetic documents
#     (log-normal lengths of median 16, the shard's default, and of median
#     256, where most tokens are in long rows), GPT-2 124M costs, seq-len
#     1024, 16384 tokens, world 256 and 1024 x accum 1 (targets: imbalance
#     mean and worst <= 1.01, padding <= 1%).
# Usage: bench/sampler.sh [BUILD_DIR]   (needs: apt-get install fortunes;
# python3 with numpy for the synthetic shard)
set -eu
build=${1:-.}
here=$(cd "$(dirname "$0")" && pwd)
fort=/usr/share/games/fortunes
[ -d "$fort" ] || { echo "no $fort: apt-get install fortunes" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# fortune text files: not the .dat indexes, not the .u8 links, not off/
files=$(find "$fort" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
# shellcheck disable=SC2086
"$build/ddpprep" --doc-sep '%' -o "$work/fortunes" $files 2>&1 | sed 's/^/  /'
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
echo
echo "| fortunes, seq-len 256, 4096 tok/micro-batch, world 4 x accum 2 | micro-batches | steps | padding | imbalance mean | imbalance worst | plan s |"
echo "|---|---|---|---|---|---|---|"
for s in bucket random; do
  j=$("$build/ddptrain" --plan-only --json --data "$work/fortunes_train_*.bin" --seq-len 256 \
    --tokens-per-batch 4096 --world-size 4 --accum 2 --n-layer 4 --n-head 4 --n-embd 256 \
    --sampler $s)
  printf '| %s | %s | %s | %.2f%% | %.4f | %.4f | %.4f |\n' "$s" \
    "$(echo "$j" | field micro_batches)" "$(echo "$j" | field steps)" \
    "$(echo "$j" | python3 -c 'import json,sys; print(100*json.load(sys.stdin)["pad_frac"])')" \
    "$(echo "$j" | field imbalance_mean)" "$(echo "$j" | field imbalance_max)" \
    "$(echo "$j" | field plan_seconds)"
done
echo
# GPT-2 124M's shape: the plan's costs are its dense and attention FLOPs
gpt2() {
  "$build/ddptrain" --plan-only --json --data "$1" --seq-len 1024 --tokens-per-batch 16384 \
    --world-size "$2" --accum "$3" --n-layer 12 --n-head 12 --n-embd 768 2> /dev/null
}
python3 "$here/synthetic_shard.py" "$work/syn.bin" 10000000 | sed 's/^/  /'
echo "| 10M synthetic documents (GPT-2 124M costs, seq-len 1024, 16384 tok) | plan s | plan bytes/doc | index bytes/doc | padding | imbalance mean / worst |"
echo "|---|---|---|---|---|---|"
for wa in "8 4" "1024 1"; do
  # shellcheck disable=SC2086
  gpt2 "$work/syn.bin" $wa | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("| world %d x accum %d | %.2f | %.1f | %.1f | %.2f%% | %.4f / %.4f |" % (r["world"],
      r["accum"], r["plan_seconds"], r["plan_bytes"] / r["docs"], 16.0 * r["windows"] / r["docs"],
      100 * r["pad_frac"], r["imbalance_mean"], r["imbalance_max"]))'
done
echo "(load: $(uptime | sed 's/.*load average/load average/'))"
rm -f "$work/syn.bin"
echo
echo "| 1M synthetic documents (GPT-2 124M costs, seq-len 1024, 16384 tok) | micro-batches | steps | padding | imbalance mean | imbalance worst | plan s |"
echo "|---|---|---|---|---|---|---|"
for median in 16 256; do
  python3 "$here/synthetic_shard.py" "$work/syn1m.bin" 1000000 1 "lognormal:$median" > /dev/null
  for w in 256 1024; do
    gpt2 "$work/syn1m.bin" "$w" 1 | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("| median %s, world %d x accum 1 | %d | %d | %.2f%% | %.4f | %.4f | %.2f |" % (sys.argv[1],
      r["world"], r["micro_batches"], r["steps"], 100 * r["pad_frac"], r["imbalance_mean"],
      r["imbalance_max"], r["plan_seconds"]))' "$median"
  done
done
