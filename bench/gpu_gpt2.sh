#!/bin/sh
# GPT-2 124M on one GPU: ddptrain against PyTorch (eager, torch.compile, and
# torch.compile with SDPA flash attention) on the same model, weights and
# micro-batches, in the same run.
#   model: L12 H12 C768, vocabulary 50257, T 1024; B rows of 1024 tokens per
#   step (synthetic GPT-2 tokens, documents of exactly 1025 tokens, so no
#   padding); AdamW, clipping 1.0; bf16 (fp32 master weights).
# ddptrain trains first (dumping its micro-batches and exporting its
# weights); PyTorch replays the batches from those weights. Reported:
# useful tokens/s and ms/step after a warm-up window, MFU against the bf16
# GEMM rate ddptrain measures at start-up, and peak device memory.
# Usage: bench/gpu_gpt2.sh [path/to/ddptrain] [steps] [B]   (from a build dir)
# Needs a Python with CUDA torch: $TORCH_PYTHON, else python3.
set -eu
exe=${1:-./ddptrain}
steps=${2:-40}
rows=${3:-8}
here=$(cd "$(dirname "$0")" && pwd)
py=${TORCH_PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model="--n-layer 12 --n-head 12 --n-embd 768 --seq-len 1024"
"$py" "$here/synthetic_shard.py" "$work/gpt2.bin" $((rows * steps + 64)) 1 fixed:1025 > /dev/null
# shellcheck disable=SC2086
"$exe" --device cuda --precision bf16 $model --data "$work/gpt2.bin" \
  --tokens-per-batch $((rows * 1024)) --steps "$steps" --warmup 5 --lr 1e-4 --log-every 10 \
  --eval-every 0 --eval-tokens 1 --metrics "$work/m.jsonl" --dump-batches "$work/b.st" \
  --export "$work/w.safetensors" > "$work/ddp.log" 2>&1 || { cat "$work/ddp.log"; exit 1; }
grep -E "backend|binding|model:|GEMM peak" "$work/ddp.log" | sed 's/^/# /'
# The first log window is warm-up; the rest are averaged weighted by time.
grep -v final "$work/m.jsonl" | tail -n +2 | python3 -c '
import json, sys
r = [json.loads(l) for l in sys.stdin]
t = sum(x["ms_per_step"] for x in r)
tok = sum(x["tok_per_s"] * x["ms_per_step"] for x in r) / t
mfu = sum(x["mfu"] * x["ms_per_step"] for x in r) / t
print(json.dumps({"mode": "ddptrain", "tok_per_s": tok, "ms_per_step": t / len(r),
                  "mfu": mfu, "peak_mem_mb": r[-1]["peak_mem_mb"]}))' > "$work/ddp.json"
# shellcheck disable=SC2086
"$py" "$here/pytorch_gpu_bench.py" "$work/b.st" "$work/w.safetensors" $model --vocab 50257 \
  --mode eager --mode compile --mode compile-sdpa > "$work/torch.json" 2> "$work/torch.err" ||
  { tail -n 20 "$work/torch.err"; }
cat "$work/ddp.json" "$work/torch.json" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
ddp = rows[0]
print("| run | tokens/s | ms/step | MFU (bf16 GEMM peak) | peak mem MiB | ddptrain speed-up |")
print("|---|---|---|---|---|---|")
for r in rows:
    mfu = r["tok_per_s"] / ddp["tok_per_s"] * ddp["mfu"]
    print("| %s | %.0f | %.1f | %.1f%% | %.0f | %.2fx |" % (r["mode"], r["tok_per_s"], r["ms_per_step"],
          100 * mfu, r["peak_mem_mb"], ddp["tok_per_s"] / r["tok_per_s"]))'
