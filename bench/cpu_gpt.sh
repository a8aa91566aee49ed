#!/bin/sh
# Single-process CPU benchmark: ddptrain against PyTorch on the same model and
# the same micro-batches, one thread each.
#   model: GPT L4 H4 C256, seq-len 256, 4096 padded tokens per micro-batch,
#   AdamW, the built-in variable-length text (heavy-tailed document lengths).
# ddptrain trains first and dumps its micro-batches; PyTorch replays them.
# Both report useful (non-padding) tokens/s over the steps after a warm-up.
# Usage: bench/cpu_gpt.sh [path/to/ddptrain] [steps]   (run from a build dir)
# Needs a Python with torch: $TORCH_PYTHON, else /usr/bin/python3.
set -eu
# torch.set_num_threads(1) does not reach the OpenBLAS inside Debian's torch,
# which otherwise starts a thread per core: pin both libraries to one thread.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
exe=${1:-./ddptrain}
steps=${2:-30}
here=$(cd "$(dirname "$0")" && pwd)
py=${TORCH_PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model="--n-layer 4 --n-head 4 --n-embd 256 --seq-len 256"
# shellcheck disable=SC2086
"$exe" --threads 1 $model --tokens-per-batch 4096 --steps "$steps" --warmup 5 --log-every 5 \
  --eval-every 0 --eval-tokens 1 --metrics "$work/m.jsonl" --dump-batches "$work/b.st" \
  > "$work/ddp.log" 2>&1 || { cat "$work/ddp.log"; exit 1; }
peak=$(sed -n 's/.*peak \([0-9.]*\) GFLOP\/s.*/\1/p' "$work/ddp.log")
# Skip the first log window (warm-up), average the rest weighted by time.
ddp=$(grep '"record":"step"' "$work/m.jsonl" | tail -n +2 | python3 -c '
import json, sys
r = [json.loads(l) for l in sys.stdin]
t = sum(x["ms_per_step"] for x in r)
tok = sum(x["tok_per_s"] * x["ms_per_step"] for x in r) / t
mfu = sum(x["mfu"] * x["ms_per_step"] for x in r) / t
print(f"{tok:.1f} {t / len(r):.1f} {mfu:.3f}")')
set -- $ddp
ddp_tok=$1 ddp_ms=$2 ddp_mfu=$3
# shellcheck disable=SC2086
torch_json=$("$py" "$here/pytorch_gpt_bench.py" "$work/b.st" $model --vocab 257 --threads 1 \
  --warmup-steps 5)
torch_tok=$(echo "$torch_json" | python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["tok_per_s"])')
torch_ms=$(echo "$torch_json" | python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["ms_per_step"])')
torch_ver=$(echo "$torch_json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["torch"])')
pad=$(grep -o 'pad [0-9.]*%' "$work/ddp.log" | tail -n 1)
echo "| | useful tok/s | ms/step | MFU (vs measured sgemm peak $peak GFLOP/s) |"
echo "|---|---|---|---|"
echo "| ddptrain | $ddp_tok | $ddp_ms | $ddp_mfu |"
echo "| PyTorch $torch_ver (1 thread) | $torch_tok | $torch_ms | |"
echo "| ratio ddptrain / PyTorch | $(python3 -c "print('%.2f' % ($ddp_tok / $torch_tok))") | | |"
echo "(steps $steps, first 5 excluded; $pad of computed tokens were padding)"
