#!/bin/bash
# The GPU benchmark scripts' plumbing, run for real on the CPU (--smoke: a
# tiny model, --device cpu, PyTorch on the CPU): option handling, the
# synthetic shards, ddptrain's dumped batches and exported weights replayed
# by PyTorch (as-is, re-padded, dynamic), the parsing of ddptrain's metrics,
# the memory search (doubling, bisection, out-of-memory classification),
# the report tables and the PASS/FAIL verdicts, which are also checked on
# hand-made records where the right verdict is known. Without a GPU, the
# real (non-smoke) mode must fail with ddptrain's message or record why
# each part did not run. SKIPs without a Python that has torch.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$TORCH_PYTHON" ]; then echo "SKIP: no Python with torch (configure found none)"; exit 77; fi
bench=$top_srcdir/bench
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
# Eager modes only: torch.compile on a CPU would spend a minute compiling,
# and eager-sdpa exercises the "this torch cannot" path on torch 1.x.
modes="eager eager-sdpa"
export TORCH_PYTHON

# ---- 1. verdicts on records whose right answer is known --------------------
report() { python3 "$bench/gpu_report.py" "$@"; }
cat > "$dir/pass.jsonl" << 'EOF'
{"run": "ddptrain", "framework": "ddptrain", "tok_per_s": 1200.0, "ms_per_step": 10, "mfu": 0.55, "peak_mem_mb": 1000, "peak_gflops": 100}
{"run": "ddptrain recompute on", "framework": "ddptrain", "tok_per_s": 1000.0, "ms_per_step": 12, "mfu": 0.46, "peak_mem_mb": 600}
{"run": "eager", "framework": "pytorch", "mode": "eager", "tok_per_s": 500.0, "ms_per_step": 20, "mfu": 0.2, "peak_mem_mb": 2000}
{"run": "compile", "framework": "pytorch", "mode": "compile", "tok_per_s": 900.0, "ms_per_step": 13, "mfu": 0.4, "peak_mem_mb": 1500}
{"run": "compile-sdpa", "framework": "pytorch", "mode": "compile-sdpa", "tok_per_s": 1050.0, "ms_per_step": 11, "mfu": 0.45, "peak_mem_mb": 1200}
EOF
out=$(report summary gpt2 "$dir/pass.jsonl")
echo "$out" | grep -q "^PASS: ddptrain MFU 55.0% >= 50%" || fail "gpt2 MFU verdict: $out"
# 1200 / 1050 = 1.14 >= 1.1: PASS against the fastest compiled run, not the slower one
echo "$out" | grep -q "^PASS: ddptrain 1.14x the fastest torch.compile run (compile-sdpa) >= 1.10x" ||
  fail "gpt2 speed-up verdict: $out"
echo "$out" | grep -q "ddptrain recompute on vs ddptrain: tokens/s -16.7%, peak memory 600 MiB (-40.0%)" ||
  fail "recompute cost line: $out"
out=$(report summary gpt2 "$dir/pass.jsonl" --mfu-target 0.6 --vs-compiled 1.2)
echo "$out" | grep -q "^FAIL: ddptrain MFU 55.0% >= 60%" || fail "gpt2 MFU FAIL verdict: $out"
echo "$out" | grep -q "^FAIL: ddptrain 1.14x .* >= 1.20x" || fail "gpt2 speed-up FAIL verdict: $out"
cat > "$dir/varlen.jsonl" << 'EOF'
{"run": "ddptrain", "framework": "ddptrain", "tok_per_s": 3000.0, "ms_per_step": 10, "mfu": 0.4, "peak_mem_mb": 1000, "pad_frac": 0.02}
{"run": "pad-compile-sdpa", "framework": "pytorch", "mode": "compile-sdpa", "tok_per_s": 1400.0, "ms_per_step": 10, "useful_tokens": 300, "padded_tokens": 1000}
{"run": "bucket-eager", "framework": "pytorch", "mode": "eager", "tok_per_s": 2900.0, "ms_per_step": 10, "useful_tokens": 980, "padded_tokens": 1000}
{"run": "bucket-compile-sdpa", "framework": "pytorch", "mode": "compile-sdpa", "tok_per_s": 2700.0, "ms_per_step": 10, "useful_tokens": 980, "padded_tokens": 1000}
EOF
out=$(report summary varlen "$dir/varlen.jsonl")
echo "$out" | grep -q "^PASS: ddptrain >= 2.00x compiled PyTorch on every document padded to T: 2.14x" ||
  fail "varlen (a) verdict: $out"
# eager is not a compiled baseline: 3000/2700 = 1.11 < 1.15
echo "$out" | grep -q "^FAIL: ddptrain >= 1.15x compiled PyTorch on the same bucketed batches: 1.11x" ||
  fail "varlen (b) verdict: $out"
echo "$out" | grep -q "pad-compile-sdpa: padding 70.0%" || fail "varlen padding line: $out"
echo '{"run": "x", "framework": "pytorch"}' > "$dir/bad.jsonl"
report summary gpt2 "$dir/bad.jsonl" > "$dir/bad.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "no tok_per_s" "$dir/bad.out" || fail "a record without figures: exit $rc, $(cat "$dir/bad.out")"
report summary gpt2 "$dir/pass.jsonl" --ref nosuch > "$dir/bad.out" 2>&1
[ $? = 2 ] && grep -q "no ddptrain record named 'nosuch'" "$dir/bad.out" || fail "a missing reference run"
[ $fails = 0 ] && ok "verdicts on known records"

# ---- 2. gpu_gpt2.sh --smoke ------------------------------------------------
field() { # $1 records, $2 run, $3 key
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["run"] == sys.argv[2]:
        print(r.get(sys.argv[3])); break' "$@"
}
run_smoke() { # $1 script, then its options; sets rec (the records file)
  local s=$1
  shift
  if ! "$bench/$s" --smoke --ddptrain "$DDPTRAIN" --out "$dir/out" --torch-modes "$modes" "$@" \
    > "$dir/$s.out" 2> "$dir/$s.err"; then
    fail "$s --smoke exited non-zero"
    sed 's/^/  | /' "$dir/$s.err" "$dir/$s.out"
    rec=/dev/null
    return 1
  fi
  rec=$(ls -d "$dir"/out/"${s%.sh}"-* | tail -n 1)/records.jsonl
}
if run_smoke gpu_gpt2.sh; then
  out=$(cat "$dir/gpu_gpt2.sh.out")
  echo "$out" | grep -q "gpu_gpt2 (SMOKE" || fail "gpt2: no SMOKE header"
  echo "$out" | grep -Eq '^\| ddptrain \| [0-9]+ \| [0-9.]+ \| [0-9.]+% \| [0-9]+ \| 1.00x \|$' ||
    fail "gpt2: no ddptrain row with figures: $out"
  echo "$out" | grep -Eq '^\| eager \| [0-9]+ \| [0-9.]+ \| [0-9.]+% \| - \| [0-9.]+x \|$' ||
    fail "gpt2: no PyTorch eager row with figures: $out"
  echo "$out" | grep -Eq '^(PASS|FAIL): ddptrain MFU [0-9.]+% >= 50%$' || fail "gpt2: no MFU verdict"
  echo "$out" | grep -Eq '^(PASS|FAIL|SKIP): ddptrain >= 1.10x torch.compile|^(PASS|FAIL): ddptrain [0-9.]+x' ||
    fail "gpt2: no speed-up verdict"
  # every dumped batch after the warm-up window replayed: 8 steps x 4 rows x 128 targets
  [ "$(field "$rec" eager useful_tokens)" = 4096 ] || fail "gpt2: eager replayed $(field "$rec" eager useful_tokens) target tokens, not 4096"
  # both MFUs from one formula and one peak: their ratio is the tokens/s ratio
  python3 -c 'import json,sys
r = {x["run"]: x for x in map(json.loads, open(sys.argv[1]))}
d, e = r["ddptrain"], r["eager"]
a, b = d["mfu"] / e["mfu"], d["tok_per_s"] / e["tok_per_s"]
sys.exit(0 if abs(a / b - 1) < 0.02 else "MFU ratio %.4f vs tokens/s ratio %.4f" % (a, b))' "$rec" ||
    fail "gpt2: PyTorch's MFU does not use ddptrain's formula and peak"
  grep -q "gpu_gpt2 (SMOKE" "$dir/out/gpu_bench.log" || fail "gpt2: block not appended to the log"
  ls "$dir"/out/gpu_gpt2-*/weights.st > /dev/null 2>&1 && fail "gpt2: the exported weights were left behind"
  [ $fails = 0 ] && ok "gpu_gpt2.sh --smoke"
fi

# ---- 3. gpu_varlen.sh --smoke ----------------------------------------------
f0=$fails
if run_smoke gpu_varlen.sh; then
  out=$(cat "$dir/gpu_varlen.sh.out")
  for r in ddptrain pad-eager bucket-eager; do
    echo "$out" | grep -Eq "^\| $r \| [0-9]+ \|" || fail "varlen: no $r row: $out"
  done
  echo "$out" | grep -Eq '^(PASS|FAIL|SKIP): ddptrain >= 2.00x compiled PyTorch on every document padded' ||
    fail "varlen: no (a) verdict"
  echo "$out" | grep -Eq '^(PASS|FAIL|SKIP): ddptrain >= 1.15x compiled PyTorch on the same bucketed' ||
    fail "varlen: no (b) verdict"
  # (a) re-pads the same windows to 128 in batches of 4, (b) replays ddptrain's own
  python3 -c 'import json,sys
r = {x["run"]: x for x in map(json.loads, open(sys.argv[1]))}
a, b = r["pad-eager"], r["bucket-eager"]
assert a["repacked"] == "4x128" and a["padded_tokens"] == a["steps"] * 4 * 128, a
assert b["dynamic"] and b["padded_tokens"] != b["steps"] * 4 * 128, b
pa, pb = 1 - a["useful_tokens"] / a["padded_tokens"], 1 - b["useful_tokens"] / b["padded_tokens"]
assert pa > 0.5 and pb < 0.2, (pa, pb)' "$rec" || fail "varlen: the PyTorch batches are not what they should be"
  [ $fails = "$f0" ] && ok "gpu_varlen.sh --smoke"
fi

# ---- 4. gpu_memory.sh --smoke ----------------------------------------------
f0=$fails
if run_smoke gpu_memory.sh --torch-modes eager; then
  python3 -c 'import json,sys
for r in map(json.loads, open(sys.argv[1])):
    if "skipped" in r:
        continue
    lo, hi, t = r["max_seqs"], r["first_fail"], dict(r["trials"])
    assert lo >= 1 and t[lo] == "ok", r            # the answer was tried and fitted
    assert hi is None or (t[hi] == "oom" and 0 < hi - lo <= 4), r  # bisected to --resolution 4
    assert all(v == "ok" for b, v in t.items() if b <= lo), r
    assert all(v == "oom" for b, v in t.items() if hi and b >= hi), r
    print("ok:", r["run"], lo, hi)' "$rec" || fail "memory: inconsistent search: $(cat "$rec")"
  grep -Eq '^\| ddptrain \| [0-9]+ \| [0-9]+ \| [0-9]+ \|' "$dir/gpu_memory.sh.out" ||
    fail "memory: no ddptrain row: $(cat "$dir/gpu_memory.sh.out")"
  [ $fails = "$f0" ] && ok "gpu_memory.sh --smoke"
fi

# ---- 5. no torch: ddptrain's figures alone, said so ------------------------
f0=$fails
cat > "$dir/notorch.py" << 'EOF'
import runpy, sys
sys.modules["torch"] = None  # import torch fails as if it were not installed
args = sys.argv[1:]
if args[0] == "-c":
    sys.argv = ["-c"] + args[2:]
    exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
else:
    sys.argv = args
    runpy.run_path(args[0], run_name="__main__")
EOF
printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$TORCH_PYTHON" "$dir/notorch.py" > "$dir/notorch"
chmod +x "$dir/notorch"
if TORCH_PYTHON=$dir/notorch run_smoke gpu_gpt2.sh; then
  out=$(cat "$dir/gpu_gpt2.sh.out")
  echo "$out" | grep -q "torch: none in .*: ddptrain figures only" || fail "no-torch: not said: $out"
  echo "$out" | grep -q "| eager | not run: no torch in " || fail "no-torch: eager row: $out"
  echo "$out" | grep -Eq '^\| ddptrain \| [0-9]+ \|' || fail "no-torch: no ddptrain figures"
  [ $fails = "$f0" ] && ok "gpu_gpt2.sh --smoke without torch"
fi

# ---- 6. the real mode on a host without a GPU ------------------------------
f0=$fails
if ! nvidia-smi -L > /dev/null 2>&1; then
  "$bench/gpu_gpt2.sh" --ddptrain "$DDPTRAIN" --out "$dir/real" > "$dir/real.out" 2>&1
  rc=$?
  [ $rc = 1 ] && grep -q "ddptrain run 'ddptrain' failed (exit 1)" "$dir/real.out" &&
    grep -qE "no usable|this build has no cuda backend" "$dir/real.out" ||
    fail "gpt2 without a GPU: exit $rc: $(cat "$dir/real.out")"
  "$bench/gpu_memory.sh" --ddptrain "$DDPTRAIN" --out "$dir/real" --cap 8 > "$dir/realm.out" 2>&1 ||
    fail "memory without a GPU exited non-zero: $(cat "$dir/realm.out")"
  grep -q '| ddptrain | not run: search stopped: exit 1 without an out-of-memory message at 8 sequences' \
    "$dir/realm.out" || fail "memory without a GPU: ddptrain's failure not reported: $(cat "$dir/realm.out")"
  grep -q "| pytorch compile-sdpa | not run: .*" "$dir/realm.out" ||
    fail "memory without a GPU: no PyTorch row: $(cat "$dir/realm.out")"
  [ $fails = "$f0" ] && ok "the real mode without a GPU fails with reasons"
fi

# ---- 7. bad options ---------------------------------------------------------
f0=$fails
for args in "--steps 5" "--rows x" "--bogus" "--timeout" "--ddptrain /nonexistent"; do
  # shellcheck disable=SC2086
  "$bench/gpu_gpt2.sh" --smoke --ddptrain "$DDPTRAIN" --out "$dir/bad" $args > "$dir/b.out" 2>&1
  rc=$?
  [ $rc = 2 ] && grep -q "^gpu_gpt2: " "$dir/b.out" || fail "gpu_gpt2.sh $args: exit $rc, $(cat "$dir/b.out")"
done
"$bench/gpu_memory.sh" --smoke --ddptrain "$DDPTRAIN" --out "$dir/bad" --start 9 --cap 8 > "$dir/b.out" 2>&1
[ $? = 2 ] && grep -q "need 1 <= --start <= --cap" "$dir/b.out" || fail "gpu_memory.sh --start 9 --cap 8"
"$TORCH_PYTHON" "$bench/synthetic_shard.py" "$dir/x.bin" 10 1 lognormal:0 > "$dir/b.out" 2>&1
[ $? != 0 ] && grep -q "LENGTHS must be" "$dir/b.out" || fail "synthetic_shard.py lognormal:0 accepted"
[ -e "$dir/x.bin" ] && fail "synthetic_shard.py wrote a shard for bad input"
"$bench/gpu_gpt2.sh" --smoke --ddptrain "$DDPTRAIN" --out "$dir/bad" --budget 1 > "$dir/b.out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q '"run": "ddptrain", "framework": "ddptrain", "skipped": "the --budget of 1s was spent"' "$dir/b.out" ||
  fail "gpu_gpt2.sh --budget 1: exit $rc, $(cat "$dir/b.out")"
[ $fails = "$f0" ] && ok "bad options are refused with a message; a spent budget is reported"

[ $fails = 0 ] || { echo "FAIL: $fails check(s)"; exit 1; }
echo "PASS"
