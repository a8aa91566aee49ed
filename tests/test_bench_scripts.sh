#!/bin/bash
# The GPU benchmark scripts' plumbing, run for real on the CPU (--smoke: a
# tiny model, --device cpu, PyTorch on the CPU): option handling, the
# synthetic shards, ddptrain's dumped batches and exported weights replayed
# by PyTorch (as-is, re-padded, dynamic), the parsing of ddptrain's metrics,
# the memory search (doubling, bisection, out-of-memory classification),
# the report tables and the PASS/FAIL verdicts, which are also checked on
# hand-made records where the right verdict is known; the ResNet script's
# synthetic image shard, its bf16-or-fp32 fallback, set-up and
# first-step costs and --deterministic off run. Without a GPU, the
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

# ---- 8. ResNet: verdicts on records whose right answer is known ------------
f0=$fails
cat > "$dir/resnet.jsonl" << 'EOF'
{"run": "ddptrain", "framework": "ddptrain", "images_per_s": 3300.0, "ms_per_step": 38.8, "mfu": 0.33, "peak_mem_mb": 20000, "peak_gflops": 800000, "setup_s": 9.5, "precision": "bf16", "first_window_ms": 60.0, "first_window_steps": 5, "data_wait_ms": 0.5}
{"run": "pytorch-compile", "framework": "pytorch", "mode": "compile", "images_per_s": 2900.0, "step_ms": 44.1, "peak_mem_mb": 18000, "warmup_s": 70.0}
{"run": "pytorch-eager", "framework": "pytorch", "mode": "eager", "images_per_s": 2000.0, "step_ms": 64.0, "peak_mem_mb": 21000, "warmup_s": 4.0}
{"run": "ddptrain deterministic off", "framework": "ddptrain", "images_per_s": 3630.0, "ms_per_step": 35.3, "mfu": 0.363, "peak_mem_mb": 21000, "setup_s": 12.0, "precision": "bf16"}
{"run": "ddptrain set-up baseline", "framework": "ddptrain", "images_per_s": 500.0, "ms_per_step": 4.0, "mfu": 0.001, "setup_s": 1.5, "precision": "bf16", "role": "setup-baseline"}
EOF
out=$(report summary resnet "$dir/resnet.jsonl")
# 3300 / 2900 = 1.138 >= 1.1: PASS; eager is not the baseline of the target
echo "$out" | grep -q "^PASS: ddptrain 1.14x the fastest torch.compile run (pytorch-compile) >= 1.10x" ||
  fail "resnet speed-up verdict: $out"
# PyTorch's MFU from ddptrain's FLOPs per image: 0.33 x 2900 / 3300 = 29.0%
echo "$out" | grep -qF '| pytorch-compile | 2900.0 | 44.1 | 29.0% | 18000 | 70.00 | 1.14x |' ||
  fail "resnet: PyTorch row (MFU from ddptrain's FLOPs per image): $out"
echo "$out" | grep -q "^autotuning: ddptrain set-up 9.50 s, ddptrain set-up baseline 1.50 s .*: 8.00 s for building the full net" ||
  fail "resnet: autotuning line: $out"
echo "$out" | grep -qF "ddptrain deterministic off vs ddptrain: images/s +10.0%, peak memory +5.0%, set-up 12.00 s (+2.50 s)" ||
  fail "resnet: --deterministic off line: $out"
# the first window: 5 x (60 - 38.8) = 106 ms more than steady steps
echo "$out" | grep -qF "first steps: ddptrain's first 5 step(s) 60.0 ms/step against 38.8 ms/step after: 106 ms extra" ||
  fail "resnet: first steps line: $out"
echo "$out" | grep -q "| ddptrain set-up baseline |" && fail "resnet: the set-up baseline is in the throughput table"
out=$(report summary resnet "$dir/resnet.jsonl" --vs-compiled 1.2)
echo "$out" | grep -q "^FAIL: ddptrain 1.14x .* >= 1.20x" || fail "resnet FAIL verdict: $out"
# an fp32 stand-in is no verdict on a bf16 target
sed -e 's/"run": "ddptrain"/"run": "ddptrain fp32"/; s/"precision": "bf16"/"precision": "fp32"/' \
  "$dir/resnet.jsonl" > "$dir/resnet32.jsonl"
out=$(report summary resnet "$dir/resnet32.jsonl" --ref "ddptrain fp32")
echo "$out" | grep -qF "SKIP: ddptrain fp32 >= 1.10x the fastest torch.compile run: ddptrain fp32 ran in fp32, PyTorch in bf16 (1.14x, not a verdict)" ||
  fail "resnet: fp32 reference judged: $out"
grep -v compile "$dir/resnet.jsonl" > "$dir/resnet-nc.jsonl"
echo '{"run": "pytorch-compile", "framework": "pytorch", "mode": "compile", "skipped": "no CUDA device"}' >> "$dir/resnet-nc.jsonl"
out=$(report summary resnet "$dir/resnet-nc.jsonl")
echo "$out" | grep -qF "SKIP: ddptrain >= 1.10x the fastest torch.compile run (no torch.compile run: pytorch-compile: no CUDA device)" ||
  fail "resnet: no compiled run: $out"
echo '{"run": "ddptrain", "framework": "ddptrain", "tok_per_s": 5.0}' > "$dir/bad.jsonl"
report summary resnet "$dir/bad.jsonl" > "$dir/bad.out" 2>&1
[ $? = 2 ] && grep -q "no images_per_s" "$dir/bad.out" || fail "resnet: a record without images/s: $(cat "$dir/bad.out")"
[ $fails = "$f0" ] && ok "resnet verdicts on known records"

# ---- 9. gpu_resnet.sh --smoke, its bad options, its real mode without a GPU ---
f0=$fails
"$bench/gpu_resnet.sh" --smoke --ddptrain "$DDPTRAIN" --out "$dir/rn" --torch-modes "compile eager" \
  > "$dir/rn.out" 2> "$dir/rn.err"
rc=$?
out=$(cat "$dir/rn.out")
if [ $rc != 0 ]; then
  fail "gpu_resnet.sh --smoke exited $rc"; sed 's/^/  | /' "$dir/rn.err" "$dir/rn.out"
else
  rw=$(ls -d "$dir"/rn/gpu_resnet-* | tail -n 1)
  # bf16 figures, or (a build whose ResNet is fp32 only) the bf16 run
  # reported as not run and the fp32 run standing in
  if echo "$out" | grep -Eq '^\| ddptrain \| [0-9.]+ \| [0-9.]+ \| [0-9.]+% \| [0-9]+ \| [0-9.]+ \| 1.00x \|$'; then
    ref=ddptrain
  elif echo "$out" | grep -q '^| ddptrain | not run: failed: exit 2' &&
       grep -q -- "--precision bf16" "$dir/rn.err" &&
       echo "$out" | grep -Eq '^\| ddptrain fp32 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+% \| [0-9]+ \| [0-9.]+ \| 1.00x \|$'; then
    ref="ddptrain fp32"
  else
    ref=none
    fail "resnet: no ddptrain row with figures: $out"
  fi
  echo "$out" | grep -q "gpu_resnet (SMOKE" || fail "resnet: no SMOKE header"
  echo "$out" | grep -Eq "^\| $ref deterministic off \| [0-9.]+ \|" || fail "resnet: no --deterministic off row"
  echo "$out" | grep -qF "$ref deterministic off vs $ref: images/s " || fail "resnet: no --deterministic off line"
  echo "$out" | grep -q "^autotuning: $ref set-up [0-9.]* s, ddptrain set-up baseline [0-9.]* s" ||
    fail "resnet: no autotuning line"
  echo "$out" | grep -qF "first steps: $ref's first 1 step(s) " || fail "resnet: no first-steps line"
  for m in compile eager; do # PyTorch's GPU benchmark on a CPU: a row that says why
    echo "$out" | grep -Eq "^\| pytorch-$m \| not run: (no CUDA device|torch .* has no torch.compile) \|" ||
      fail "resnet: pytorch-$m row: $out"
  done
  echo "$out" | grep -qF "SKIP: $ref >= 1.10x the fastest torch.compile run" || fail "resnet: no verdict line"
  # ddptrain trained the smoke net on the synthetic 32 x 32 shard
  python3 -c 'import json,sys
h = json.loads(open(sys.argv[1]).readline())["flags"]
want = ("10", "8", "imagenet", "8", "2")
got = (h["depth"], h["width"], h["stem"], h["batch-size"], h["steps"])
assert got == want and h["data"].endswith("data.img"), (got, h["data"])' \
    "$(ls "$rw"/ddp*.jsonl | head -n 1)" || fail "resnet: ddptrain did not train the smoke net"
  ls "$rw"/*.img > /dev/null 2>&1 && fail "resnet: the image shard was left behind"
  grep -q "gpu_resnet (SMOKE" "$dir/rn/gpu_bench.log" || fail "resnet: block not appended to the log"
fi
for args in "--steps 1" "--batch 1" "--images 4" "--torch-modes eager-sdpa" "--bogus"; do
  # shellcheck disable=SC2086
  "$bench/gpu_resnet.sh" --smoke --ddptrain "$DDPTRAIN" --out "$dir/bad" $args > "$dir/b.out" 2>&1
  rc=$?
  [ $rc = 2 ] && grep -q "^gpu_resnet: " "$dir/b.out" || fail "gpu_resnet.sh $args: exit $rc, $(cat "$dir/b.out")"
done
python3 "$bench/image_shard.py" "$dir/x.img" 0 32 > "$dir/b.out" 2>&1
[ $? = 2 ] && grep -q "N must be a whole number" "$dir/b.out" && [ ! -e "$dir/x.img" ] ||
  fail "image_shard.py N=0: $(cat "$dir/b.out")"
if ! nvidia-smi -L > /dev/null 2>&1; then
  "$bench/gpu_resnet.sh" --ddptrain "$DDPTRAIN" --out "$dir/real" --images 16 --batch 16 > "$dir/real.out" 2>&1
  rc=$?
  [ $rc = 1 ] && grep -q "ddptrain run 'ddptrain.*' failed (exit 1)" "$dir/real.out" &&
    grep -qE "no usable|this build has no cuda backend" "$dir/real.out" ||
    fail "resnet without a GPU: exit $rc: $(cat "$dir/real.out")"
fi
[ $fails = "$f0" ] && ok "gpu_resnet.sh: --smoke, bad options, the real mode without a GPU"

[ $fails = 0 ] || { echo "FAIL: $fails check(s)"; exit 1; }
echo "PASS"
