#!/bin/sh
# --metrics end to end, 2 ranks: a run stopped at step 6 with an evaluation
# every 3 steps, then resumed to step 12, both appending to one file:
#  - every line is JSON; each run segment starts with a header record
#    (version, commit, flags, world size, device, start time) and the
#    resumed one says so (start_step 6);
#  - every record has time and elapsed_s, non-decreasing within a segment;
#  - each evaluation has its own record with val_loss, at steps 3 and 9;
#  - an evaluation between two log points leaves the losses alone: every
#    train and val loss stays near ln(257) = 5.55, the loss of an untrained
#    byte model (an evaluation that took the window's training loss into its
#    own sum read about twice that, and the window's train loss about half);
#  - progress lines end with elapsed time and an ETA;
#  - a --metrics path that cannot be opened is an error naming it.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$MPIRUN" ]; then echo "SKIP: no mpirun (configure found no MPI)"; exit 77; fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $1"; [ -z "${2:-}" ] || sed 's/^/  | /' "$2"; fail=1; }
train() { # LOG ARGS...
  log=$1
  shift
  # shellcheck disable=SC2086
  timeout 120 "$MPIRUN" -np 2 "$DDPTRAIN" $TINY --steps 12 --log-every 2 --eval-every 3 \
    --save "$dir/ck" --metrics "$dir/m.jsonl" "$@" > "$log" 2>&1
}

train "$dir/a.log" --stop-at 6 || bad "first segment (--stop-at 6)" "$dir/a.log"
train "$dir/b.log" --resume "$dir/ck" || bad "resumed segment" "$dir/b.log"

python3 - "$dir/m.jsonl" <<'PY' || fail=1
import json, math, re, sys
path = sys.argv[1]
bad = 0
def check(cond, what):
    global bad
    print(("ok: " if cond else "FAIL: ") + what)
    bad |= not cond
recs = []
for n, line in enumerate(open(path), 1):
    try:
        recs.append(json.loads(line))
    except ValueError as e:
        check(False, "%s:%d is not JSON (%s): %s" % (path, n, e, line[:120]))
        sys.exit(1)
segs = []
for r in recs:
    if r.get("record") == "header":
        segs.append([])
    if not segs:
        check(False, "the first line is a header record: %s" % recs[0])
        sys.exit(1)
    segs[-1].append(r)
check(len(segs) == 2, "two run segments, each opened by a header (got %d)" % len(segs))
ln257 = math.log(257)
for i, seg in enumerate(segs):
    h = seg[0]
    check(isinstance(h.get("version"), str) and h["version"] != "" and isinstance(h.get("commit"), str),
          "segment %d header: version %r, commit %r" % (i + 1, h.get("version"), h.get("commit")))
    check(h.get("world_size") == 2 and "cpu" in h.get("device", "") and h.get("precision") == "fp32",
          "segment %d header: world_size %r, device %r, precision %r" % (i + 1, h.get("world_size"), h.get("device"), h.get("precision")))
    flags = h.get("flags", {})
    check(flags.get("steps") == "12" and flags.get("eval-every") == "3" and flags.get("metrics") == path,
          "segment %d header: the run's flags (steps %r, eval-every %r)" % (i + 1, flags.get("steps"), flags.get("eval-every")))
    check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", h.get("start_time", "")) is not None
          and abs(h.get("start_unix", 0) - h.get("time", -1)) < 60,
          "segment %d header: start_time %r, start_unix %r" % (i + 1, h.get("start_time"), h.get("start_unix")))
    check(h.get("start_step") == 6 * i, "segment %d header: start_step %r" % (i + 1, h.get("start_step")))
    times = [(r.get("time"), r.get("elapsed_s")) for r in seg]
    check(all(isinstance(t, float) and isinstance(e, float) and e >= 0 for t, e in times)
          and all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(times, times[1:])),
          "segment %d: every record has time and elapsed_s, non-decreasing" % (i + 1))
    steps = [r["step"] for r in seg if r.get("record") == "step"]
    evals = [r for r in seg if r.get("record") == "eval"]
    final = [r for r in seg if r.get("record") == "final"]
    check(steps == [2, 4, 6] if i == 0 else steps == [8, 10, 12], "segment %d: step records %s" % (i + 1, steps))
    want = 3 if i == 0 else 9
    check([e.get("step") for e in evals] == [want] and all(isinstance(e.get("val_loss"), float) and e.get("tokens", 0) > 0 for e in evals),
          "segment %d: one eval record, at step %d, with val_loss and tokens: %s" % (i + 1, want, evals))
    check(len(final) == 1 and final[0].get("final") is True and seg[-1] is final[0],
          "segment %d ends with its final record" % (i + 1))
    losses = [r["loss"] for r in seg if r.get("record") == "step"] + [e["val_loss"] for e in evals]
    check(all(0.8 * ln257 < x < 1.2 * ln257 for x in losses),
          "segment %d: train and val losses near ln 257 = %.2f: %s" % (i + 1, ln257, ["%.3f" % x for x in losses]))
sys.exit(bad)
PY

# "... | data wait 0.00 ms | elapsed 0s | ETA 0s"
for log in a b; do
  n=$(grep -c 'step  *[0-9]*/12 | .* | data wait [0-9.]* ms | elapsed [0-9hms]* | ETA [0-9hms]*$' "$dir/$log.log")
  if [ "$n" -eq 3 ]; then ok "$log: 3 progress lines end with elapsed time and ETA"; else bad "$log: progress lines" "$dir/$log.log"; fi
done

# a directory is no metrics file: exit status 1, the flag and the path named
mkdir "$dir/d"
# shellcheck disable=SC2086
"$DDPTRAIN" $TINY --metrics "$dir/d" > "$dir/d.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "ERROR: .*--metrics $dir/d: Is a directory" "$dir/d.log"; then
  ok "--metrics on a directory: exit status 1, named"
else
  bad "--metrics on a directory (exit status $rc)" "$dir/d.log"
fi
exit $fail
