#!/bin/sh
# ddptrain --plan-only --scale as a user meets it: the text report has the
# table from 1 to 1024 GPUs (and --world-size's row) and a recommendation;
# --json is one object whose figures agree with themselves (1 GPU: no
# communication, efficiency 1; a slower network: lower efficiency at 1024);
# a GPU too small for the model states gets --zero 1; under mpirun only rank
# 0 prints; --scale-from takes the compute time of a run's metrics. Bad
# --cluster values, --scale-from files that are not the same model's run
# and flags out of place exit 2 with one line naming the flag and the
# field, and print nothing on stdout.
. "${top_builddir:-.}/tests/env.sh"
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
MODEL="--n-layer 2 --n-head 2 --n-embd 64 --seq-len 64 --tokens-per-batch 512"
# shellcheck disable=SC2086
scale() { "$DDPTRAIN" --plan-only --scale $MODEL "$@"; }

expect_status "text report" 0 "recommend --bucket-mb" scale
for row in "     1 |" "  1024 |" "GPUs |" "bucket sizes at 1024 GPUs"; do
  grep -qF -- "$row" "$dir/out.log" || { echo "FAIL: the report lacks '$row'"; fail=1; }
done
expect_status "--world-size adds its row and is the recommendation's" 0 "at 3 GPUs" \
  scale --world-size 3
grep -qF "     3 |" "$dir/out.log" || { echo "FAIL: no row for 3 GPUs"; fail=1; }

# A two-host cluster as a file; DGX A100 with 1 Gbit/s between nodes, and
# with a GPU of 1 MiB.
cat > "$dir/slow.json" << 'EOF'
{"name": "two hosts", "gpus_per_node": 1, "intra_gbps": 100, "inter_gbps": 1,
 "intra_latency_us": 5, "inter_latency_us": 50, "gemm_tflops": 0.05,
 "memory_gbytes_s": 10, "gpu_memory_gib": 8}
EOF
printf '{"preset": "dgx-a100", "gpu_memory_gib": 0.001}\n' > "$dir/tiny.json"
printf '{"preset": "dgx-a100", "inter_gbps": 1}\n' > "$dir/1g.json"
scale --json > "$dir/a100.json" 2> "$dir/err" || { echo "FAIL: --json"; cat "$dir/err"; fail=1; }
scale --json --cluster "$dir/slow.json" > "$dir/slow.out" 2> "$dir/err" ||
  { echo "FAIL: --json --cluster FILE"; cat "$dir/err"; fail=1; }
scale --json --cluster "$dir/tiny.json" > "$dir/tiny.out" 2> "$dir/err" ||
  { echo "FAIL: --cluster with a tiny GPU"; cat "$dir/err"; fail=1; }
scale --json --cluster "$dir/1g.json" > "$dir/1g.out" 2> "$dir/err" ||
  { echo "FAIL: --cluster with a preset changed"; cat "$dir/err"; fail=1; }
if command -v python3 > /dev/null 2>&1; then
  python3 - "$dir/a100.json" "$dir/slow.out" "$dir/tiny.out" "$dir/1g.out" << 'PY' || fail=1
import json, sys
a100, slow, tiny, net1g = (json.load(open(p)) for p in sys.argv[1:5])
ok = True
def check(cond, what):
    global ok
    print(("ok: " if cond else "FAIL: ") + what)
    ok = ok and cond
rows = a100["table"]
check(len(rows) == 22 and sorted({r["gpus"] for r in rows}) == [2 ** k for k in range(11)],
      "the table has 1..1024 GPUs for --zero 0 and 1")
for r in (r for r in rows if r["gpus"] == 1):
    check(r["comm_ms"] == 0 and r["exposed_ms"] == 0 and abs(r["efficiency"] - 1) < 1e-9,
          "1 GPU, --zero %d: no communication, efficiency 1" % r["zero"])
for r in rows:
    total = r["compute_ms"] + r["exposed_ms"] + r["optimizer_ms"] + r["gather_ms"]
    if abs(total - r["step_ms"]) > 1e-6 * r["step_ms"] or not 0 <= r["exposed_ms"] <= r["comm_ms"] + 1e-9:
        check(False, "step = compute + exposed + optimizer + gather, exposed <= comm: %r" % r)
        break
eff = lambda d: next(r["efficiency"] for r in d["table"] if r["gpus"] == 1024 and r["zero"] == 0)
check(eff(net1g) < eff(a100), "DGX A100 nodes on 1 Gbit/s scale worse than on 1600 (%.3f < %.3f)"
      % (eff(net1g), eff(a100)))
check(slow["cluster"]["name"] == "two hosts", "the file's cluster name is reported")
rec = tiny["recommend"]
check(rec["zero"] == 1 and "more than the" in rec["reason"],
      "a GPU too small for the model states gets --zero 1: " + rec["reason"])
check(a100["recommend"]["bucket_mb"] in [b["bucket_mb"] for b in a100["buckets"]],
      "the recommended bucket size is one of those compared")
sys.exit(0 if ok else 1)
PY
else
  echo "note: no python3, the JSON report's figures are not checked"
fi

if [ -n "$MPIRUN" ]; then
  # shellcheck disable=SC2086
  "$MPIRUN" -np 2 "$DDPTRAIN" --plan-only --scale $MODEL > "$dir/two.log" 2>&1 ||
    { echo "FAIL: --scale under mpirun -np 2"; sed 's/^/  | /' "$dir/two.log"; fail=1; }
  n=$(grep -c "^recommend " "$dir/two.log")
  [ "$n" -eq 1 ] && echo "ok: 2 ranks print one report" ||
    { echo "FAIL: 2 ranks printed $n recommendations"; fail=1; }
fi

# --scale-from: a run's metrics give the FLOP rate (TINY's model and batch)
FROM="--n-layer 1 --n-head 2 --n-embd 16 --seq-len 48 --tokens-per-batch 256"
# shellcheck disable=SC2086
"$DDPTRAIN" $TINY --metrics "$dir/run.jsonl" > "$dir/run.log" 2>&1 ||
  { echo "FAIL: the training run for --scale-from"; sed 's/^/  | /' "$dir/run.log"; fail=1; }
# shellcheck disable=SC2086
expect_status "--scale-from takes the run's compute time" 0 "the FLOP rate is $dir/run.jsonl's" \
  "$DDPTRAIN" --plan-only --scale $FROM --scale-from "$dir/run.jsonl"
head -2 "$dir/run.jsonl" > "$dir/short.jsonl"

# bad_line DESC TEXT ARGS...: exit 2, one line on stderr with TEXT, no stdout
bad_line() {
  desc=$1 text=$2
  shift 2
  "$DDPTRAIN" "$@" > "$dir/stdout" 2> "$dir/stderr"
  rc=$?
  lines=$(wc -l < "$dir/stderr")
  if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && [ ! -s "$dir/stdout" ] &&
    grep -qF -- "$text" "$dir/stderr"; then
    echo "ok: $desc"
  else
    echo "FAIL: $desc: exit $rc, $lines lines, want 2 and one line with '$text':"
    sed 's/^/  | /' "$dir/stdout" "$dir/stderr"
    fail=1
  fi
}
printf '{"preset": "dgx-a100", "inter_gbps": 0}\n' > "$dir/zero.json"
printf '{"preset": "dgx-a100", "gemm_tflop": 5}\n' > "$dir/typo.json"
printf '{"gpus_per_node": 8}\n' > "$dir/short.json"
printf '{"gpus_per_node": 8,\n' > "$dir/broken.json"
bad_line "--scale without --plan-only" "option --scale needs --plan-only" --scale
bad_line "--cluster without --scale" "option --cluster needs --scale" --plan-only --cluster dgx-h100
bad_line "unknown preset, no such file" "option --cluster dgx-b9000: not a preset (dgx-a100" \
  --plan-only --scale --cluster dgx-b9000
bad_line "a bandwidth of 0" "\"inter_gbps\" must be a number in (0, 1e+06]" \
  --plan-only --scale --cluster "$dir/zero.json"
bad_line "a misspelt field" "unknown field \"gemm_tflop\"" --plan-only --scale --cluster "$dir/typo.json"
bad_line "a missing field" "\"intra_gbps\" is missing" --plan-only --scale --cluster "$dir/short.json"
bad_line "broken JSON" "broken.json line 2" --plan-only --scale --cluster "$dir/broken.json"
bad_line "--scale-from without --scale" "option --scale-from needs --scale" --plan-only \
  --scale-from "$dir/run.jsonl"
# shellcheck disable=SC2086
bad_line "--scale-from, no such file" "option --scale-from: cannot open $dir/none.jsonl" \
  --plan-only --scale $FROM --scale-from "$dir/none.jsonl"
# shellcheck disable=SC2086
bad_line "--scale-from, another model's run" "was a run with --n-layer 1, this command line has 2" \
  --plan-only --scale $FROM --n-layer 2 --scale-from "$dir/run.jsonl"
# shellcheck disable=SC2086
bad_line "--scale-from, one step record" "has 1 step record; the first warms up" \
  --plan-only --scale $FROM --scale-from "$dir/short.jsonl"
# shellcheck disable=SC2086
bad_line "--scale-from, not metrics" "line 1: not a metrics record" \
  --plan-only --scale $FROM --scale-from "$dir/zero.json"
exit $fail
