#!/bin/sh
# What --zero 1 saves and costs on the CPU backend: per-rank memory of the
# optimizer state (AdamW's two slots, from the start-up line) and of the
# shard's reduced gradients that --zero 1 adds, the
# backend's peak memory (metrics `peak_mem_mb`), and step time, for 1, 2 and
# 4 ranks with --zero 0 and --zero 1.
#   model: GPT L8 H8 C512 (about 25 M parameters: AdamW state alone is about
#   200 MB unsharded), the Debian `fortunes` corpus prepared by ddpprep (a
#   shard: no end-of-run task evaluation to wait for), seq-len 128, 1024
#   tokens per micro-batch, fp32, one thread per rank, STEPS steps (default 12).
# Why: ZeRO-1's promise is that the optimizer's bytes per rank fall as 1/N
# while the weights stay the same; the peak shows what is left (weights,
# gradients, activations), and the step time shows what the reduce-scatter
# + all-gather cost against the all-reduce (on a loopback MPI, where
# bandwidth is cheap). 4 ranks on a 2-core machine are oversubscribed: their
# times are not a scaling figure, only the memory is.
# Usage: bench/zero_memory.sh [BUILD_DIR, default .] [STEPS]
# Needs: Open MPI's mpirun; apt-get install fortunes.
set -eu
build=$(cd "${1:-.}" && pwd)
steps=${2:-12}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fort=/usr/share/games/fortunes
[ -d "$fort" ] || { echo "no $fort: apt-get install fortunes" >&2; exit 1; }
files=$(find "$fort" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
# shellcheck disable=SC2086
"$build/ddpprep" --doc-sep '%' -o "$work/fortunes" $files > "$work/prep.log" 2>&1 ||
  { cat "$work/prep.log"; exit 1; }
MODEL="--data $work/fortunes_train_*.bin --threads 1 --n-layer 8 --n-head 8 --n-embd 512 --seq-len 128 --tokens-per-batch 1024 \
--steps $steps --warmup 2 --log-every 4 --eval-every 0 --eval-tokens 128 --peak-gflops 50"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| ranks | --zero | params | updated by rank 0 | AdamW state MiB per rank | + reduced gradients MiB | peak_mem_mb (rank 0) | ms/step (steps 5+) |"
echo "|---|---|---|---|---|---|---|---|"
for np in 1 2 4; do
  for z in 0 1; do
    log="$work/np$np-z$z.log"
    # shellcheck disable=SC2086
    mpirun --oversubscribe -np "$np" "$build/ddptrain" $MODEL --zero $z \
      --metrics "$work/np$np-z$z.jsonl" > "$log" 2>&1 || { echo "run np $np zero $z failed:"; tail -5 "$log"; exit 1; }
    python3 - "$log" "$work/np$np-z$z.jsonl" "$np" "$z" <<'PY'
import json, re, sys
log, metrics, np, z = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
text = open(log).read()
params = re.search(r"model: GPT [^,]*, ([0-9.]+)M parameters", text)
params = float(params.group(1)) * 1e6 if params else float("nan")
m = re.search(r"updates (\d+) of (\d+) parameters; optimizer state ([0-9.]+) MiB per rank "
              r"\(([0-9.]+) MiB unsharded\), plus ([0-9.]+) MiB of reduced gradients", text)
recs = [json.loads(l) for l in open(metrics)]
final = [r for r in recs if "peak_mem_mb" in r][-1]
steps = [r for r in recs if "ms_per_step" in r and r.get("step", 0) > 4]
ms = sum(r["ms_per_step"] for r in steps) / max(1, len(steps))
if m:
    owned, full, state, extra = m.group(1), m.group(2), m.group(3), m.group(5)
else:  # --zero 0: every rank holds all of it, 2 AdamW slots x 4 bytes
    owned = full = "%d" % params  # the model line's 2 decimals of a million
    state, extra = "%.1f" % (params * 8 / 1048576), "0"
print("| %s | %s | %.2f M | %.2f M | %s | %s | %.0f | %.1f |" % (np, z, float(full) / 1e6,
      float(owned) / 1e6, state, extra, final["peak_mem_mb"], ms))
PY
  done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
