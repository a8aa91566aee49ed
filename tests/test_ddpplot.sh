#!/bin/sh
# tools/ddpplot on real metrics files:
#  - two runs (1 rank fp32; 2 ranks bf16, stopped and resumed into the same
#    file) and one in the format from before header records, whose last line
#    is unfinished (a run still writing: left out with a warning): five PNGs,
#    runs labelled from their headers, the resumed run as one of 2 segments;
#  - --tensorboard writes event files through whichever writer imports
#    (torch.utils.tensorboard or tensorboardX), and with neither (hidden by
#    stub modules) is an error, exit status 2, with nothing written;
#  - a missing file, an empty one, a line that is not JSON or not an object:
#    exit status 2 naming file and line, no PNGs.
# SKIPs only when no Python 3 here imports matplotlib.
. "${top_builddir:-.}/tests/env.sh"
set -u
PLOT="$top_srcdir/tools/ddpplot"
PY=
for p in python3 /usr/bin/python3 "$TORCH_PYTHON"; do
  if [ -n "$p" ] && "$p" -c "import matplotlib" > /dev/null 2>&1; then PY=$p; break; fi
done
if [ -z "$PY" ]; then echo "SKIP: no python3 with matplotlib (apt-get install python3-matplotlib)"; exit 77; fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $1"; [ -z "${2:-}" ] || sed 's/^/  | /' "$2"; fail=1; }
plot() { "$PY" "$PLOT" "$@"; }
is_png() { [ -s "$1" ] && [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }

# shellcheck disable=SC2086
"$DDPTRAIN" $TINY --steps 8 --eval-every 4 --metrics "$dir/one.jsonl" > "$dir/one.log" 2>&1 ||
  bad "1-rank run" "$dir/one.log"
# the second run on 2 ranks where MPI is there (one process otherwise)
launch=
ranks="1 rank"
if [ -n "$MPIRUN" ]; then launch="$MPIRUN -np 2"; ranks="2 ranks"; fi
two() {
  # shellcheck disable=SC2086
  $launch "$DDPTRAIN" $TINY --steps 8 --eval-every 4 --precision bf16 --save "$dir/ck" \
    --metrics "$dir/two.jsonl" "$@" > "$dir/two.log" 2>&1
}
if ! two --stop-at 4 || ! two --resume "$dir/ck"; then bad "2-rank run, stopped and resumed" "$dir/two.log"; fi
# the format of the older ddptrain: no header, no "record" key, no time
"$PY" - "$dir/one.jsonl" "$dir/old.jsonl" <<'PY'
import json, sys
with open(sys.argv[2], "w") as out:
    for line in open(sys.argv[1]):
        r = json.loads(line)
        if r.pop("record") != "header":
            r.pop("time"); r.pop("elapsed_s")
            out.write(json.dumps(r) + "\n")
    out.write('{"step": 10, "lo')  # a run still writing its last line
PY

if plot --out "$dir/png" "$dir/one.jsonl" "$dir/two.jsonl" "$dir/old.jsonl" > "$dir/plot.log" 2>&1; then
  n=0
  for f in loss throughput mfu comm balance; do is_png "$dir/png/$f.png" && n=$((n + 1)); done
  if [ $n -eq 5 ]; then ok "five PNGs"; else bad "$n of 5 PNGs" "$dir/plot.log"; fi
  if grep -qx "one (1 rank, fp32, cpu): 4 log points, 2 evaluations, steps 2-8" "$dir/plot.log" &&
     grep -qx "two ($ranks, bf16, cpu, 2 segments): 4 log points, 2 evaluations, steps 2-8" "$dir/plot.log" &&
     grep -qx "old: 4 log points, 2 evaluations, steps 2-8" "$dir/plot.log"; then
    ok "runs labelled from their headers (a resumed run is one run; a file without header by name)"
  else
    bad "run labels" "$dir/plot.log"
  fi
  if grep -qF "$dir/old.jsonl:$(($(wc -l < "$dir/old.jsonl") + 1)): an unfinished last line" "$dir/plot.log"; then
    ok "an unfinished last line (a run still writing) is left out with a warning"
  else
    bad "unfinished last line" "$dir/plot.log"
  fi
else
  bad "ddpplot on three files" "$dir/plot.log"
fi

# --tensorboard through a real writer, when one imports here
if "$PY" -c "from torch.utils.tensorboard import SummaryWriter" > /dev/null 2>&1 ||
   "$PY" -c "from tensorboardX import SummaryWriter" > /dev/null 2>&1; then
  if plot --out "$dir/png" --tensorboard "$dir/tb" "$dir/one.jsonl" "$dir/two.jsonl" > "$dir/tb.log" 2>&1 &&
     ev=$(find "$dir/tb/two" -name 'events.out.tfevents.*' | head -n 1) && [ -s "$ev" ] &&
     grep -q "train/loss" "$ev" && grep -q "val/loss" "$ev" && grep -q "comm/exposed_ms" "$ev"; then
    ok "--tensorboard wrote event files with train/loss, val/loss, comm/exposed_ms"
  else
    bad "--tensorboard" "$dir/tb.log"
  fi
else
  echo "note: no TensorBoard writer imports here; only its error is checked"
fi
# neither writer: stubs that fail to import shadow the real modules
mkdir -p "$dir/stub/torch" "$dir/stub/tensorboardX"
echo 'raise ImportError("hidden by the test")' > "$dir/stub/torch/__init__.py"
cp "$dir/stub/torch/__init__.py" "$dir/stub/tensorboardX/__init__.py"
PYTHONPATH="$dir/stub" plot --out "$dir/png-tb" --tensorboard "$dir/tb-none" "$dir/one.jsonl" > "$dir/nt.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "ddpplot: --tensorboard needs torch.utils.tensorboard .* or tensorboardX, and neither imports" "$dir/nt.log" &&
   [ ! -e "$dir/png-tb" ] && [ ! -e "$dir/tb-none" ]; then
  ok "--tensorboard without a writer: exit status 2, nothing written"
else
  bad "--tensorboard without a writer (exit status $rc)" "$dir/nt.log"
fi
mkdir -p "$dir/stub/matplotlib"
cp "$dir/stub/torch/__init__.py" "$dir/stub/matplotlib/__init__.py"
PYTHONPATH="$dir/stub" plot --out "$dir/png-mpl" "$dir/one.jsonl" > "$dir/nm.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "ddpplot: matplotlib does not import" "$dir/nm.log" && [ ! -e "$dir/png-mpl" ]; then
  ok "without matplotlib: exit status 2, nothing written"
else
  bad "without matplotlib (exit status $rc)" "$dir/nm.log"
fi

# bad input: exit status 2, the file (and line) named, no PNGs
: > "$dir/empty.jsonl"
{ head -n 2 "$dir/one.jsonl"; echo '{"record":"step","step":4,"loss":'; tail -n +3 "$dir/one.jsonl"; } > "$dir/cut.jsonl"
{ head -n 1 "$dir/one.jsonl"; echo '[1, 2]'; } > "$dir/array.jsonl"
expect_bad() { # NAME MESSAGE FILE...
  name=$1 msg=$2
  shift 2
  plot --out "$dir/png-$name" "$dir/one.jsonl" "$@" > "$dir/$name.log" 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -qF "ddpplot: $msg" "$dir/$name.log" && [ ! -e "$dir/png-$name" ]; then
    ok "$name: exit status 2, '$msg'"
  else
    bad "$name (exit status $rc, wanted 2 and '$msg')" "$dir/$name.log"
  fi
}
expect_bad missing "$dir/nosuch.jsonl: cannot read: No such file or directory" "$dir/nosuch.jsonl"
expect_bad empty "$dir/empty.jsonl: no step or eval records (empty file)" "$dir/empty.jsonl"
expect_bad notjson "$dir/cut.jsonl:3: not JSON" "$dir/cut.jsonl"
expect_bad array "$dir/array.jsonl:2: not a JSON object" "$dir/array.jsonl"
exit $fail
