#!/bin/bash
# The largest bf16 micro-batch (sequences of T = 1024 tokens, GPT-2 124M) that
# trains without running out of GPU memory: ddptrain with --recompute off and
# on (the second skipped with a line when this ddptrain lacks the flag), and
# PyTorch torch.compile with SDPA (bench/pytorch_gpu_memory.py, one process,
# dynamic batch size). A size fits when two optimizer steps finish (the
# second with the AdamW state allocated). Sizes: doubling from --start until
# one fails or --cap fits, then bisection until the bracket is at most
# --resolution sequences wide. Reported: the largest size that fits, its peak
# memory (ddptrain's peak_mem_mb, torch.cuda.max_memory_allocated) and the
# smallest that fails.
# ddptrain runs once per size under `timeout`: exit 0 fits; a non-zero exit
# whose log says "out of memory" does not; anything else (a crash, a
# timeout, another error) stops that search with the log's tail, because an
# out-of-memory condition must end ddptrain cleanly.
#
# Usage: bench/gpu_memory.sh [--smoke] [--out DIR] [--ddptrain PATH] [--start B]
#          [--cap B] [--resolution N] [--torch-modes "compile-sdpa"]
#          [--timeout S] [--budget S] [--nvtx] [--keep]
#   --smoke  the plumbing on a CPU: GPT L2 H2 C64 T128, a 512-token
#            vocabulary; the limit is emulated (a size "fits" when the peak
#            RSS stays within one sequence's plus 16 MiB), for ddptrain here
#            and for PyTorch in pytorch_gpu_memory.py
#   defaults: --start 8 --cap 1024 --resolution 8 (smoke: 4, 512, 4);
#   --timeout applies to each ddptrain run and to the whole PyTorch search
#   other options as in bench/gpu_gpt2.sh
set -euo pipefail
bench=gpu_memory
# shellcheck source=bench/gpu_common.sh
. "$(dirname "$0")/gpu_common.sh"
gpu_parse_args "$@"
start="" cap="" res=""
set -- ${rest[@]+"${rest[@]}"}
while [ $# -gt 0 ]; do
  case $1 in
    --start) [ $# -ge 2 ] || gpu_die "--start needs a value"; start=$2; shift ;;
    --cap) [ $# -ge 2 ] || gpu_die "--cap needs a value"; cap=$2; shift ;;
    --resolution) [ $# -ge 2 ] || gpu_die "--resolution needs a value"; res=$2; shift ;;
    *) gpu_die "unknown argument '$1' (see the header of $0)" ;;
  esac
  shift
done
if [ $smoke = 1 ]; then
  model="--n-layer 2 --n-head 2 --n-embd 64 --seq-len 128" T=128 vocab=512 vflag="--vocab 512"
  start=${start:-4} cap=${cap:-512} res=${res:-4}
  modes=${modes:-eager compile-sdpa}
  tsearch="--cpu-headroom-mb 16 --threads 1"
else
  model="--n-layer 12 --n-head 12 --n-embd 768 --seq-len 1024" T=1024 vocab=50257 vflag=""
  start=${start:-8} cap=${cap:-1024} res=${res:-8}
  modes=${modes:-compile-sdpa}
  tsearch=""
fi
gpu_int --start "$start"
gpu_int --cap "$cap"
gpu_int --resolution "$res"
[ "$start" -ge 1 ] && [ "$start" -le "$cap" ] && [ "$res" -ge 1 ] ||
  gpu_die "need 1 <= --start <= --cap and --resolution >= 1"
gpu_setup

# Two steps of up to --cap rows of T tokens: documents of exactly T + 1 tokens.
# shellcheck disable=SC2086
"$py" "$here/synthetic_shard.py" "$work/data.bin" $((2 * cap + 16)) 1 fixed:$((T + 1)) $vflag \
  > "$work/shard.log"
budget=""

# $1 sequences, $2 file stem, then extra flags. Prints ok, oom or err:REASON.
ddp_trial() {
  local B=$1 stem=$2 rc=0 cmd t
  shift 2
  t=$(gpu_time_for)
  [ "$t" -ge 10 ] || { echo "err:the --budget of ${budget}s was spent"; return; }
  # shellcheck disable=SC2206
  cmd=(timeout -k 10 "$t" "$exe" $dev $flags --precision bf16 $model --data "$work/data.bin"
    --tokens-per-batch $((B * T)) --steps 2 --warmup 1 --lr 1e-4 --min-lr 1e-5 --log-every 1
    --eval-every 0 --eval-tokens 1 --peak-gflops 1 "$@" --metrics "$work/$stem.jsonl")
  if [ $smoke = 1 ]; then # run it from a fresh process that reports its children's peak RSS
    "$rpy" -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write("%d\n" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024))
sys.exit(rc)' "$work/$stem.rss" "${cmd[@]}" > "$work/$stem.log" 2>&1 || rc=$?
  else
    "${cmd[@]}" > "$work/$stem.log" 2>&1 || rc=$?
  fi
  if [ $rc = 0 ]; then
    if [ -n "$budget" ] && [ "$(cat "$work/$stem.rss")" -gt "$budget" ]; then echo oom; else echo ok; fi
  elif [ $rc = 1 ] && grep -qi "out of memory" "$work/$stem.log"; then
    echo oom
  elif [ $rc = 124 ] || [ $rc = 137 ]; then
    echo "err:timed out after ${t}s"
  else
    echo "err:exit $rc without an out-of-memory message"
  fi
}

if [ $smoke = 1 ]; then
  # A CPU has no device memory to fill, and a host limit (ulimit -d) makes
  # OpenBLAS spin forever in its buffer allocation rather than fail, so the
  # smoke test emulates the limit: a size fits when ddptrain's peak RSS stays
  # within one sequence's plus 16 MiB.
  r=$(ddp_trial 1 calib)
  [ "$r" = ok ] || gpu_die "one sequence does not train on the CPU ($r, see $work/calib.log)"
  budget=$(($(cat "$work/calib.rss") + 16))
  echo "$bench: SMOKE: a size fits when ddptrain's peak RSS is <= $budget MiB" >&2
fi

# $1 run name, then ddptrain flags. Searches and appends the record.
ddp_search() {
  local name=$1 stem lo=0 hi="" B=$start r trials="" peak=null err=""
  shift
  stem=mem-$(echo "$name" | tr ' ' _)
  try() { # $1 B, then the flags; sets r and err, extends trials
    local b=$1
    shift
    r=$(ddp_trial "$b" "$stem-$b" "$@")
    trials="$trials${trials:+, }[$b, \"${r%%:*}\"]"
    case $r in err:*) err="${r#err:} at $b sequences, see $work/$stem-$b.log" ;; esac
  }
  while :; do
    try $B "$@"
    [ -z "$err" ] || break
    if [ $r = ok ]; then
      lo=$B
      [ $B -ge "$cap" ] && break
      B=$((2 * B > cap ? cap : 2 * B))
    else
      hi=$B
      break
    fi
  done
  if [ -z "$err" ] && [ -n "$hi" ] && [ $lo = 0 ]; then # even --start failed: halve
    B=$((start / 2))
    while [ $B -ge 1 ] && [ -z "$err" ]; do
      try $B "$@"
      if [ $r = ok ]; then lo=$B; break; fi
      [ -z "$err" ] && hi=$B
      B=$((B / 2))
    done
  fi
  while [ -z "$err" ] && [ -n "$hi" ] && [ $lo -gt 0 ] && [ $((hi - lo)) -gt "$res" ]; do
    B=$(((lo + hi) / 2))
    try $B "$@"
    [ -z "$err" ] || break
    if [ $r = ok ]; then lo=$B; else hi=$B; fi
  done
  if [ -n "$err" ]; then
    echo "$bench: $name: ddptrain did not fail cleanly ($err):" >&2
    tail -n 15 "$work/$stem-$B.log" | sed 's/^/  | /' >&2
    gpu_skip_record "$name" ddptrain "search stopped: $err"
    return 0
  fi
  [ $lo -gt 0 ] && peak=$("$rpy" -c 'import json,sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(json.dumps(r[-1].get("peak_mem_mb")))' "$work/$stem-$lo.jsonl")
  printf '{"run": %s, "framework": "ddptrain", "max_seqs": %d, "peak_mem_mb": %s, "first_fail": %s, "cap": %d, "seq_len": %d, "trials": [%s]%s}\n' \
    "$(gpu_json_str "$name")" $lo "$peak" "${hi:-null}" "$cap" $T "$trials" \
    "$([ -n "$budget" ] && echo ", \"rule\": \"CPU emulation: peak RSS <= $budget MiB (one sequence's + 16)\"")" >> "$recs"
}

if gpu_has --recompute; then
  ddp_search ddptrain --recompute off
  ddp_search "ddptrain recompute on" --recompute on
else
  ddp_search ddptrain
  echo "$bench: SKIP 'ddptrain recompute on': this ddptrain has no --recompute (not in --help)" >&2
  gpu_skip_record "ddptrain recompute on" ddptrain "this ddptrain has no --recompute"
fi
for m in $modes; do
  if [ -z "$torch_ver" ]; then
    gpu_skip_record "pytorch $m" pytorch "no torch in $py"
    continue
  fi
  gpu_out_of_time "pytorch $m" pytorch && continue
  rc=0 t=$(gpu_time_for)
  # shellcheck disable=SC2086
  timeout -k 10 "$t" "$py" "$here/pytorch_gpu_memory.py" $model --vocab $vocab $tdev --mode "$m" \
    --start "$start" --cap "$cap" --resolution "$res" $tsearch \
    > "$work/torch-$m.json" 2> "$work/torch-$m.err" || rc=$?
  if [ $rc = 0 ] && [ -s "$work/torch-$m.json" ]; then
    cat "$work/torch-$m.json" >> "$recs"
  else
    echo "$bench: PyTorch search $m failed (exit $rc):" >&2
    tail -n 15 "$work/torch-$m.err" | sed 's/^/  | /' >&2
    gpu_skip_record "pytorch $m" pytorch "failed: exit $rc$([ $rc = 124 ] || [ $rc = 137 ] && echo ", timed out after ${t}s"), see $work/torch-$m.err"
  fi
done
gpu_block memory "model: $model, bf16, sequences of $T tokens, two optimizer steps per size; doubling from $start to at most $cap, bisection to $res"
