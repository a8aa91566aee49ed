#!/bin/bash
# GPT-2 124M on one GPU: ddptrain against PyTorch (eager and torch.compile)
# on the same model, weights and micro-batches, in the same run.
#   model: L12 H12 C768, vocabulary 50257, T 1024; B rows of 1024 tokens per
#   step (synthetic GPT-2 tokens, documents of exactly 1025 tokens, so no
#   padding); AdamW, clipping 1.0; bf16 (fp32 master weights).
# ddptrain trains first (dumping its micro-batches and exporting its weights),
# then its variants on the same data: --recompute on (activations of GELU and
# LayerNorm recomputed in backward) and --attention matrix (the T x T path),
# each skipped with a line when this ddptrain lacks the flag. PyTorch replays
# the batches from those weights, one process per mode (bench/pytorch_gpu_bench.py).
# Reported: useful tokens/s and ms/step after the first log window, MFU
# against the bf16 GEMM rate ddptrain measures at start-up (the same peak and
# FLOP formula for PyTorch: rows*T*(6N + 6*L*C*T) per micro-batch), peak
# device memory (ddptrain's peak_mem_mb, torch.cuda.max_memory_allocated),
# speed-ups, and the targets as PASS/FAIL lines: MFU >= 50%, ddptrain >= 1.1x
# the fastest torch.compile run.
# Without a Python with CUDA torch the PyTorch rows say why they did not run
# and ddptrain's figures stand alone.
#
# Usage: bench/gpu_gpt2.sh [--smoke] [--out DIR] [--ddptrain PATH] [--steps N]
#          [--rows B] [--torch-modes "eager compile-sdpa"] [--timeout S] [--nvtx]
#   --smoke   the plumbing on a CPU: GPT L2 H2 C64 T128, a 512-token
#             vocabulary, 12 steps, --device cpu, PyTorch on the CPU
#   --out     where the dated block is appended (DIR/gpu_bench.log) and the
#             raw logs kept (DIR/gpu_gpt2-STAMP/) [./bench-out]
#   --timeout seconds allowed to each ddptrain run and each PyTorch mode [300]
#   --nvtx    pass --nvtx on to ddptrain (for a trace under nsys)
# Python: $TORCH_PYTHON, else python3. DDP_COMMIT names the commit when the
# tree has no .git (a packed GPU build).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exe=./ddptrain out=./bench-out steps=40 rows=8 smoke=0 tmo=300 nvtx=0
modes="eager compile-sdpa"
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) smoke=1 ;;
    --out) out=$2; shift ;;
    --ddptrain) exe=$2; shift ;;
    --steps) steps=$2; shift ;;
    --rows) rows=$2; shift ;;
    --torch-modes) modes=$2; shift ;;
    --timeout) tmo=$2; shift ;;
    --nvtx) nvtx=1 ;;
    *) echo "gpu_gpt2: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
  shift
done
case "$steps$rows$tmo" in *[!0-9]*) echo "gpu_gpt2: --steps, --rows, --timeout take integers" >&2; exit 2 ;; esac
[ -x "$exe" ] || { echo "gpu_gpt2: no ddptrain at '$exe' (--ddptrain PATH)" >&2; exit 2; }
py=${TORCH_PYTHON:-python3}
if [ $smoke = 1 ]; then
  model="--n-layer 2 --n-head 2 --n-embd 64 --seq-len 128" T=128 vocab="--vocab 512" log=4
  dev="--device cpu --threads 1" tdev="--device cpu --threads 1"
  [ "$steps" = 40 ] && steps=12
  [ "$rows" = 8 ] && rows=4
else
  model="--n-layer 12 --n-head 12 --n-embd 768 --seq-len 1024" T=1024 vocab="" log=10
  dev="--device cuda" tdev="--device cuda"
fi
[ "$steps" -ge $((2 * log)) ] || { echo "gpu_gpt2: --steps must be >= $((2 * log)) (a warm-up log window and one more)" >&2; exit 2; }
mkdir -p "$out"
stamp=$(date -u +%Y%m%d-%H%M%S)
work=$out/gpu_gpt2-$stamp
mkdir -p "$work"
recs=$work/records.jsonl
: > "$recs"
has() { "$exe" --help 2>/dev/null | grep -q -- "$1"; }
flags=""
[ $nvtx = 1 ] && { if has --nvtx; then flags="--nvtx on"; else echo "gpu_gpt2: this ddptrain has no --nvtx; tracing without ranges" >&2; fi; }
has --recompute && flags="$flags --recompute off"

# shellcheck disable=SC2086
"$py" "$here/synthetic_shard.py" "$work/data.bin" $((rows * steps + 64)) 1 fixed:$((T + 1)) $vocab \
  > "$work/shard.log"
# $1 run name, $2 log/metrics stem, the rest extra ddptrain flags. Appends a record.
ddp_run() {
  local name=$1 stem=$2 rc=0
  shift 2
  # shellcheck disable=SC2086
  timeout "$tmo" "$exe" $dev --precision bf16 $model --data "$work/data.bin" \
    --tokens-per-batch $((rows * T)) --steps "$steps" --warmup 5 --lr 1e-4 --min-lr 1e-5 --log-every $log \
    --eval-every 0 --eval-tokens 1 --metrics "$work/$stem.jsonl" $flags "$@" > "$work/$stem.log" 2>&1 || rc=$?
  if [ $rc != 0 ]; then
    echo "gpu_gpt2: ddptrain run '$name' failed (exit $rc$([ $rc = 124 ] && echo ", timed out after ${tmo}s")):" >&2
    tail -n 15 "$work/$stem.log" | sed 's/^/  | /' >&2
    printf '{"run": "%s", "framework": "ddptrain", "skipped": "failed: exit %s, see %s"}\n' \
      "$name" $rc "$work/$stem.log" >> "$recs"
    return 1
  fi
  python3 "$here/gpu_report.py" ddp-record "$work/$stem.jsonl" "$work/$stem.log" --run "$name" >> "$recs"
}
ddp_run ddptrain ddp --dump-batches "$work/batches.st" --export "$work/weights.st" || exit 1
peak=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["peak_gflops"] or 0)' "$recs")
variant() { # $1 name, $2 flag, $3 value
  if has "$2"; then
    ddp_run "$1" "$(echo "$1" | tr ' ' _)" --peak-gflops "$peak" "$2" "$3" || true
  else
    echo "gpu_gpt2: SKIP '$1': this ddptrain has no $2 (not in --help)" >&2
    printf '{"run": "%s", "framework": "ddptrain", "skipped": "this ddptrain has no %s"}\n' "$1" "$2" >> "$recs"
  fi
}
variant "ddptrain recompute on" --recompute on
variant "ddptrain attention matrix" --attention matrix

torch_ver=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null) || torch_ver=""
for m in $modes; do
  if [ -z "$torch_ver" ]; then
    printf '{"run": "%s", "framework": "pytorch", "mode": "%s", "skipped": "no torch in %s"}\n' "$m" "$m" "$py" >> "$recs"
    continue
  fi
  rc=0
  # shellcheck disable=SC2086
  timeout "$tmo" "$py" "$here/pytorch_gpu_bench.py" "$work/batches.st" "$work/weights.st" $tdev \
    --mode "$m" --warmup-steps $log --peak-gflops "$peak" > "$work/torch-$m.json" 2> "$work/torch-$m.err" || rc=$?
  if [ $rc = 0 ] && [ -s "$work/torch-$m.json" ]; then
    cat "$work/torch-$m.json" >> "$recs"
  else
    echo "gpu_gpt2: PyTorch mode $m failed (exit $rc):" >&2
    tail -n 15 "$work/torch-$m.err" | sed 's/^/  | /' >&2
    printf '{"run": "%s", "framework": "pytorch", "mode": "%s", "skipped": "failed: exit %s%s, see %s"}\n' \
      "$m" "$m" $rc "$([ $rc = 124 ] && echo ", timed out after ${tmo}s")" "$work/torch-$m.err" >> "$recs"
  fi
done

gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1) || true
commit=${DDP_COMMIT:-$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
  echo
  echo "## $(date -u '+%Y-%m-%d %H:%M UTC') gpu_gpt2$([ $smoke = 1 ] && echo ' (SMOKE: tiny model on the CPU, figures mean nothing)')"
  echo "commit $commit; device: ${gpu:-none}; ddptrain: $(grep -m1 -o 'rank 0 on [^ ]*: .*' "$work/ddp.log" || echo '?')"
  echo "torch: ${torch_ver:-none in $py (ddptrain figures only)}; model: $model, $rows x $T tokens per step, $steps steps, first $log excluded; ddptrain flags:${flags:- none}"
  echo '```'
  cat "$recs"
  echo '```'
  python3 "$here/gpu_report.py" summary gpt2 "$recs"
} > "$work/block.md"
cat "$work/block.md" >> "$out/gpu_bench.log"
cat "$work/block.md"
