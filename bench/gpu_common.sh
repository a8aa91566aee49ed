# shellcheck shell=bash disable=SC2154,SC2034
# Shared by bench/gpu_gpt2.sh, gpu_varlen.sh, gpu_memory.sh and gpu_resnet.sh (sourced, not
# run): the common options, the work directory, one ddptrain or PyTorch run
# turned into a JSON record (a failure or timeout becomes a record that says
# so, never a silent gap), and the dated block appended to OUT/gpu_bench.log.
# The caller sets `bench` (its name), calls gpu_parse_args "$@" (options it
# does not know are left in the array `rest`), checks its own options, then
# gpu_setup; at the end gpu_block writes the report and removes the bulky
# files (data, weights, batches) unless --keep.

gpu_die() { echo "$bench: $*" >&2; exit 2; }

# No bench/__pycache__ in the source tree (pytorch_gpu_memory.py imports
# pytorch_gpu_bench.py): nothing to commit by accident, a read-only tree is fine.
export PYTHONDONTWRITEBYTECODE=1

gpu_parse_args() {
  here=$(cd "$(dirname "$0")" && pwd)
  exe=./ddptrain out=./bench-out smoke=0 tmo=300 nvtx=0 keep=0 modes="" budget=0 rest=()
  while [ $# -gt 0 ]; do
    case $1 in
      -h | --help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
      --smoke) smoke=1 ;;
      --out) [ $# -ge 2 ] || gpu_die "--out needs a value"; out=$2; shift ;;
      --ddptrain) [ $# -ge 2 ] || gpu_die "--ddptrain needs a value"; exe=$2; shift ;;
      --torch-modes) [ $# -ge 2 ] || gpu_die "--torch-modes needs a value"; modes=$2; shift ;;
      --timeout) [ $# -ge 2 ] || gpu_die "--timeout needs a value"; tmo=$2; shift ;;
      --budget) [ $# -ge 2 ] || gpu_die "--budget needs a value"; budget=$2; shift ;;
      --nvtx) nvtx=1 ;;
      --keep) keep=1 ;;
      *) rest+=("$1") ;;
    esac
    shift
  done
  case $tmo in '' | *[!0-9]*) gpu_die "--timeout takes whole seconds, not '$tmo'" ;; esac
  case $budget in '' | *[!0-9]*) gpu_die "--budget takes whole seconds, not '$budget'" ;; esac
  t_end=$((budget > 0 ? SECONDS + budget : 0))
  [ -x "$exe" ] || gpu_die "no ddptrain at '$exe' (--ddptrain PATH)"
  py=${TORCH_PYTHON:-python3}
  # The report needs only the standard library: any python3 will do.
  rpy=python3
  command -v python3 > /dev/null || rpy=$py
  if [ $smoke = 1 ]; then
    dev="--device cpu --threads 1" tdev="--device cpu --threads 1"
  else
    dev="--device cuda" tdev="--device cuda"
  fi
}

gpu_setup() {
  mkdir -p "$out" || gpu_die "cannot create --out '$out'"
  work=$out/$bench-$(date -u +%Y%m%d-%H%M%S)
  mkdir -p "$work"
  recs=$work/records.jsonl
  : > "$recs"
  # GPT-2's exported weights alone are 475 MiB: not something to carry back.
  [ $keep = 1 ] || trap 'rm -f "$work"/*.bin "$work"/*.st' EXIT
  torch_ver=$("$py" -c 'import torch; print(torch.__version__)' 2> /dev/null) || torch_ver=""
  flags=""
  if [ $nvtx = 1 ]; then
    if gpu_has --nvtx; then flags="--nvtx on"; else echo "$bench: this ddptrain has no --nvtx; no trace ranges" >&2; fi
  fi
}

gpu_int() { # $1 flag name, $2 value
  case $2 in '' | *[!0-9]*) gpu_die "$1 takes a whole number, not '$2'" ;; esac
}

# Seconds the next run may take: --timeout, or less when the --budget
# (0: none) runs out first; 5 s are kept to write the report.
gpu_time_for() {
  local left
  if [ "$t_end" = 0 ]; then echo "$tmo"; return; fi
  left=$((t_end - SECONDS - 5))
  echo $((left < tmo ? (left > 0 ? left : 0) : tmo))
}

gpu_out_of_time() { # $1 run, $2 framework; true (and a record) when the budget is spent
  [ "$(gpu_time_for)" -ge 10 ] && return 1
  echo "$bench: SKIP '$1': the --budget of ${budget}s is spent" >&2
  gpu_skip_record "$1" "$2" "the --budget of ${budget}s was spent"
}

# grep reads all of --help (no -q): an early exit would kill the writer with
# SIGPIPE, and under pipefail a flag that is there would read as missing.
gpu_has() { "$exe" --help 2> /dev/null | grep -c -- "$1" > /dev/null; }

gpu_json_str() { # a JSON string literal of $1
  "$rpy" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"
}

gpu_skip_record() { # $1 run, $2 framework, $3 reason
  printf '{"run": %s, "framework": "%s", "skipped": %s}\n' "$(gpu_json_str "$1")" "$2" \
    "$(gpu_json_str "$3")" >> "$recs"
}

# $1 run name, $2 file stem, then ddptrain's flags. Appends a record; returns
# ddptrain's exit status (timeout: 124). The caller's `record_args` (e.g.
# "--skip-windows 1 --field role x") go to gpu_report.py ddp-record.
gpu_ddp_run() {
  local name=$1 stem=$2 rc=0 t why
  shift 2
  gpu_out_of_time "$name" ddptrain && return 124
  t=$(gpu_time_for)
  # shellcheck disable=SC2086
  timeout -k 10 "$t" "$exe" $dev $flags "$@" --metrics "$work/$stem.jsonl" > "$work/$stem.log" 2>&1 || rc=$?
  if [ $rc != 0 ]; then
    why="exit $rc$([ $rc = 124 ] || [ $rc = 137 ] && echo ", timed out after ${t}s")"
    echo "$bench: ddptrain run '$name' failed ($why):" >&2
    tail -n 15 "$work/$stem.log" | sed 's/^/  | /' >&2
    gpu_skip_record "$name" ddptrain "failed: $why, see $work/$stem.log"
    return $rc
  fi
  # shellcheck disable=SC2086
  "$rpy" "$here/gpu_report.py" ddp-record "$work/$stem.jsonl" "$work/$stem.log" --run "$name" \
    ${record_args:-} >> "$recs"
}

# $1 run name (label), $2 mode, then pytorch_gpu_bench.py's arguments.
gpu_torch_run() {
  local name=$1 mode=$2 rc=0 f t
  shift 2
  f=$work/torch-$name
  if [ -z "$torch_ver" ]; then
    gpu_skip_record "$name" pytorch "no torch in $py"
    return 0
  fi
  gpu_out_of_time "$name" pytorch && return 0
  t=$(gpu_time_for)
  # shellcheck disable=SC2086
  timeout -k 10 "$t" "$py" "$here/pytorch_gpu_bench.py" $tdev --mode "$mode" --label "$name" "$@" \
    > "$f.json" 2> "$f.err" || rc=$?
  if [ $rc = 0 ] && [ -s "$f.json" ]; then
    cat "$f.json" >> "$recs"
  else
    echo "$bench: PyTorch run $name failed (exit $rc):" >&2
    tail -n 15 "$f.err" | sed 's/^/  | /' >&2
    gpu_skip_record "$name" pytorch "failed: exit $rc$([ $rc = 124 ] || [ $rc = 137 ] && echo ", timed out after ${t}s"), see $f.err"
  fi
}

# $1 summary kind, $2 a line describing the settings, then options for
# gpu_report.py summary (e.g. --ref NAME); the rest of the block comes from
# the records. Appends the block to OUT/gpu_bench.log and prints it.
gpu_block() {
  local kind=$1 settings=$2 gpu commit
  shift 2
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2> /dev/null | head -1) || true
  commit=${DDP_COMMIT:-$(git -C "$here" rev-parse --short HEAD 2> /dev/null || echo unknown)}
  {
    echo
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') $bench$([ $smoke = 1 ] && echo ' (SMOKE: tiny model on the CPU, the figures mean nothing)')"
    echo "commit $commit; GPU: ${gpu:-none}; ddptrain $("$exe" --version 2> /dev/null | head -1)"
    echo "torch: ${torch_ver:-none in $py: ddptrain figures only}; $settings; ddptrain flags:${flags:- none}"
    echo '```'
    cat "$recs"
    echo '```'
    "$rpy" "$here/gpu_report.py" summary "$kind" "$recs" "$@" 2>&1 || echo "(no summary: see the records)"
  } > "$work/block.md"
  cat "$work/block.md" >> "$out/gpu_bench.log"
  cat "$work/block.md"
}
