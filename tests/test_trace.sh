#!/bin/sh
# --trace end to end, 2 ranks on the CPU, a 3-block GPT with small buckets
# (several per step), a checkpoint every 2 steps, 3 traced steps:
#  - the file is JSON {"traceEvents": [...], "displayTimeUnit": "ms"};
#  - every event has ph, pid, tid, name; every "X" event ts, dur >= 0 and
#    args.step; both ranks have a process name "rank R on HOST";
#  - per traced step and rank: one forward and one backward span for each
#    block (an evaluation at step 2 adds no forwards),
#    at least 3 bucket all-reduces with their bytes, the optimizer, a data
#    wait and (at steps 2 and 4) a checkpoint pause;
#  - overlap: in some step a bucket's all-reduce starts before the step's
#    last backward block ends (buckets are launched during backward);
#  - ts never decreases along a track;
#  - a --trace path whose directory is missing, or that is a directory, is
#    refused before training with exit status 2 and a message naming it;
#  - a write that fails at the end (the temporary file's name is taken by a
#    directory, made while the run starts) is exit status 1, names the file,
#    and leaves no trace file.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $1"; [ -z "${2:-}" ] || sed 's/^/  | /' "$2"; fail=1; }

# shellcheck disable=SC2086
timeout 120 "$MPIRUN" -np 2 "$DDPTRAIN" $TINY --steps 5 --n-layer 3 --n-embd 32 \
  --bucket-mb 0.02 --first-bucket-mb 0.02 --save "$dir/ck" --save-every 2 --eval-every 2 \
  --trace "$dir/trace.json" --trace-steps 3 > "$dir/run.log" 2>&1 ||
  bad "2-rank run with --trace" "$dir/run.log"
grep -q -- "--trace: wrote .* spans of 2 ranks" "$dir/run.log" && ok "rank 0 says it wrote the trace" ||
  bad "no 'wrote' line" "$dir/run.log"
for f in "$dir"/trace.json.tmp.*; do
  [ -e "$f" ] && bad "a temporary file was left beside the trace: $f"
done

python3 - "$dir/trace.json" <<'PY' || fail=1
import json, sys
bad = 0
def check(cond, what):
    global bad
    print(("ok: " if cond else "FAIL: ") + what)
    bad |= not cond
doc = json.load(open(sys.argv[1]))
check(doc.get("displayTimeUnit") == "ms", "displayTimeUnit is ms")
ev = doc["traceEvents"]
check(all(all(k in e for k in ("ph", "pid", "tid", "name")) for e in ev),
      "every event has ph, pid, tid, name")
xs = [e for e in ev if e["ph"] == "X"]
check(all(isinstance(e.get("ts"), (int, float)) and e.get("dur", -1) >= 0 and "step" in e.get("args", {})
          for e in xs), "every X event has ts, dur >= 0 and args.step")
procs = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
check(sorted(procs) == [0, 1] and all(procs[r].startswith("rank %d on " % r) for r in procs),
      "both ranks named 'rank R on HOST': %s" % procs)
threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
check(all((e["pid"], e["tid"]) in threads for e in xs), "every track is named")
steps = sorted({e["args"]["step"] for e in xs})
check(steps == [1, 2, 3], "the traced steps are 1..3 (the first is skipped): %s" % steps)
overlap = False
for r in (0, 1):
    for s in steps:
        here = [e for e in xs if e["pid"] == r and e["args"]["step"] == s]
        names = [e["name"] for e in here]
        for b in range(3):
            check(names.count("forward h.%d" % b) == 1 and names.count("backward h.%d" % b) == 1,
                  "rank %d step %d: forward and backward of block %d" % (r, s, b))
        red = [e for e in here if e["name"].startswith("all-reduce bucket")]
        check(len(red) >= 3 and all(e["args"].get("bytes", 0) > 0 and "bucket" in e["args"] for e in red),
              "rank %d step %d: %d bucket all-reduces with bytes" % (r, s, len(red)))
        for n in ("optimizer", "data wait", "step %d" % s):
            check(n in names, "rank %d step %d: %s" % (r, s, n))
        if (s + 1) % 2 == 0:
            check("checkpoint" in names, "rank %d step %d: a checkpoint pause" % (r, s))
        back_end = max(e["ts"] + e["dur"] for e in here if e["name"].startswith("backward"))
        if any(e["ts"] < back_end for e in red):
            overlap = True
check(overlap, "a bucket all-reduce starts before backward's last block ends")
last = {}
mono = True
for e in xs:
    k = (e["pid"], e["tid"])
    mono &= e["ts"] >= last.get(k, float("-inf"))
    last[k] = e["ts"]
check(mono, "ts never decreases along a track")
sys.exit(bad)
PY

# refused before training: exit 2, the path named, nothing written
# shellcheck disable=SC2086
"$DDPTRAIN" $TINY --trace "$dir/missing/t.json" > "$dir/bad1.log" 2>&1
st=$?
[ $st -eq 2 ] && grep -q "option --trace $dir/missing/t.json: its directory .* does not exist" "$dir/bad1.log" &&
  ! grep -q "step " "$dir/bad1.log" && ok "a missing directory: exit 2 before training" ||
  bad "a missing directory: exit $st" "$dir/bad1.log"
# shellcheck disable=SC2086
"$DDPTRAIN" $TINY --trace "$dir" > "$dir/bad2.log" 2>&1
st=$?
[ $st -eq 2 ] && grep -q "option --trace $dir: is a directory" "$dir/bad2.log" &&
  ok "a directory: exit 2" || bad "a directory: exit $st" "$dir/bad2.log"
# the end's write fails: one rank, so the temporary file's name (FILE.tmp.PID) is known
# shellcheck disable=SC2086
"$DDPTRAIN" $TINY --trace "$dir/late.json" > "$dir/late.log" 2>&1 &
pid=$!
mkdir "$dir/late.json.tmp.$pid"
wait $pid
st=$?
[ $st -eq 1 ] && grep -q -- "--trace $dir/late.json: cannot create the file" "$dir/late.log" &&
  [ ! -e "$dir/late.json" ] && ok "a failed write: exit 1, the file named, nothing written" ||
  bad "a failed write: exit $st" "$dir/late.log"
exit $fail
