#!/usr/bin/env python3
"""The shared reporting step of the GPU benchmarks (bench/gpu_gpt2.sh,
gpu_varlen.sh, gpu_memory.sh): turns a ddptrain run into a JSON record and
a file of records into the Markdown table for bench/RESULTS.md plus
PASS/FAIL lines computed from the figures. Standard library only, so it runs
with any python3 (also where torch is missing).

  gpu_report.py ddp-record METRICS.jsonl LOG --run NAME [--skip-windows 1]
      One JSON line: ddptrain's tokens/s (useful = target tokens), ms/step and
      MFU averaged over the log windows after the first SKIP (weighted by the
      windows' time), peak_mem_mb (the final record's), the GEMM peak
      (GFLOP/s) and padding from LOG.
  gpu_report.py summary KIND RECORDS.jsonl [--mfu-target 0.5]
      [--vs-compiled 1.1] [--vs-padded 2.0] [--vs-bucketed 1.15]
      KIND gpt2: every run beside the first ddptrain record ("ddptrain"):
        MFU >= target, tokens/s >= factor x the fastest torch.compile run.
      KIND varlen: the ddptrain record against the fastest compiled run of
        each PyTorch group: runs named pad-* (every document padded to T)
        and bucket-* (ddptrain's own bucketed batches).
      KIND memory: largest micro-batch per run, no target.
      KIND resnet: images/s of every run against the --ref ddptrain record
        (bench/gpu_resnet.sh); PyTorch's MFU from ddptrain's FLOPs per image
        and GEMM peak; the set-up and first-steps costs (autotuning), what
        --deterministic off changes; ddptrain >= factor x the fastest
        torch.compile run, judged only when the reference ran in bf16.
  An image model's metrics (samples_per_s) give images_per_s, not tok_per_s.
      Exit status 0 whatever the verdicts (they are the output); 2 on
      unusable input.
"""
import argparse
import json
import re
import sys


def die(msg):
    print(f"gpu_report: {msg}", file=sys.stderr)
    sys.exit(2)


def read_jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        die(f"{path}:{n}: not JSON: {line.strip()[:80]}")
    except OSError as e:
        die(f"cannot read {path}: {e.strerror}")
    return rows


def ddp_record(a):
    rows = read_jsonl(a.metrics)
    windows = [r for r in rows if "loss" in r]  # not eval records
    final = [r for r in rows if r.get("final")]
    head = next((r for r in rows if r.get("record") == "header"), {})
    use = windows[a.skip_windows:]
    if not use:
        die(f"{a.metrics}: {len(windows)} log windows, none left after skipping {a.skip_windows}"
            " (more --steps or a smaller --log-every)")
    t = sum(r["ms_per_step"] for r in use)
    # token models log tok_per_s, record (image) models samples_per_s
    src, key = ("tok_per_s", "tok_per_s") if "tok_per_s" in use[0] else ("samples_per_s", "images_per_s")
    rec = {"run": a.run, "framework": "ddptrain",
           key: sum(r[src] * r["ms_per_step"] for r in use) / t,
           "ms_per_step": t / len(use),
           "mfu": sum(r["mfu"] * r["ms_per_step"] for r in use) / t,
           "peak_mem_mb": (final[-1] if final else use[-1]).get("peak_mem_mb"),
           "pad_frac": sum(r.get("pad_frac", 0.0) * r["ms_per_step"] for r in use) / t,
           "windows": len(use), "last_step": use[-1]["step"]}
    if key == "images_per_s":
        # Set-up: the trainer's start (the device is already open) to the
        # metrics header, written once the data is open and the model built
        # (with its cuDNN algorithm search), before the first step.
        rec["setup_s"] = head.get("elapsed_s")
        rec["precision"] = head.get("precision")
        rec["first_window_ms"] = windows[0]["ms_per_step"]
        rec["first_window_steps"] = windows[0]["step"]
        rec["data_wait_ms"] = sum(r.get("data_wait_ms", 0.0) * r["ms_per_step"] for r in use) / t
    try:
        log = open(a.log, errors="replace").read()
    except OSError as e:
        die(f"cannot read {a.log}: {e.strerror}")
    m = re.search(r"peak ([0-9.]+) GFLOP/s per rank", log)
    rec["peak_gflops"] = float(m.group(1)) if m else None
    m = re.search(r"ddptrain [^:]*: .*?: (\S+) \(([^)]*)\)", log)
    if m:
        rec["device"] = f"{m.group(1)} ({m.group(2)})"
    for k, v in (a.field or []):
        rec[k] = v
    print(json.dumps(rec))


def fmt(v, spec, none="-"):
    return none if v is None else spec % v


def pct(v):
    return "-" if v is None else "%.1f%%" % (100 * v)


def compiled(rows, prefix=""):
    return [r for r in rows if r.get("framework") == "pytorch" and "skipped" not in r
            and str(r.get("mode", "")).startswith("compile") and r["run"].startswith(prefix)]


def verdict(ok, text):
    print(f"{'PASS' if ok else 'FAIL'}: {text}")


def skipped_line(rows, prefix, what):
    why = [f"{r['run']}: {r['skipped']}" for r in rows if "skipped" in r
           and r.get("framework") == "pytorch" and r["run"].startswith(prefix)
           and str(r.get("mode", "")).startswith("compile")]
    print(f"SKIP: {what} (no torch.compile run{': ' + '; '.join(why) if why else ''})")


def throughput_table(rows, ref):
    print("| run | useful tokens/s | ms/step | MFU | peak mem MiB | ddptrain speed-up |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "skipped" in r:
            print(f"| {r['run']} | not run: {r['skipped']} | | | | |")
            continue
        print("| %s | %.0f | %.1f | %s | %s | %.2fx |" % (
            r["run"], r["tok_per_s"], r["ms_per_step"], pct(r.get("mfu")),
            fmt(r.get("peak_mem_mb"), "%.0f"), ref["tok_per_s"] / r["tok_per_s"]))


def first_ddp(rows, name):
    for r in rows:
        if r.get("framework") == "ddptrain" and r["run"] == name and "skipped" not in r:
            return r
    die(f"no ddptrain record named '{name}' among the records")


def summary_gpt2(rows, a):
    ref = first_ddp(rows, a.ref)
    throughput_table(rows, ref)
    print()
    if ref.get("peak_gflops"):
        print(f"MFU denominator: {ref['peak_gflops']:.1f} GFLOP/s (the GEMM peak ddptrain measured"
              " at start-up, in the run's precision); numerator: executed FLOPs,"
              " rows*T*(6N + 6*L*C*T) per micro-batch")
    for r in rows:  # what each ddptrain variant costs or saves against the reference run
        if r is ref or r.get("framework") != "ddptrain" or "skipped" in r:
            continue
        mem = ""
        if r.get("peak_mem_mb") and ref.get("peak_mem_mb"):
            mem = ", peak memory %.0f MiB (%+.1f%%)" % (
                r["peak_mem_mb"], 100 * (r["peak_mem_mb"] / ref["peak_mem_mb"] - 1))
        print("%s vs %s: tokens/s %+.1f%%%s" % (r["run"], ref["run"],
                                                100 * (r["tok_per_s"] / ref["tok_per_s"] - 1), mem))
    verdict(ref["mfu"] >= a.mfu_target,
            f"{ref['run']} MFU {100 * ref['mfu']:.1f}% >= {100 * a.mfu_target:.0f}%")
    comp = compiled(rows)
    if comp:
        best = max(comp, key=lambda r: r["tok_per_s"])
        x = ref["tok_per_s"] / best["tok_per_s"]
        verdict(x >= a.vs_compiled, f"{ref['run']} {x:.2f}x the fastest torch.compile run "
                f"({best['run']}) >= {a.vs_compiled:.2f}x")
    else:
        skipped_line(rows, "", f"{ref['run']} >= {a.vs_compiled:.2f}x torch.compile")


def summary_varlen(rows, a):
    ref = first_ddp(rows, a.ref)
    throughput_table(rows, ref)
    print()
    if ref.get("pad_frac") is not None:
        print(f"{ref['run']}: padding {100 * ref['pad_frac']:.1f}% of the computed tokens")
    for r in rows:
        if r.get("framework") == "pytorch" and "skipped" not in r:
            pad = 1 - r["useful_tokens"] / r["padded_tokens"] if r.get("padded_tokens") else None
            extra = f", {r['graphs']} graphs compiled while timed" if r.get("graphs") else ""
            print(f"{r['run']}: padding {pct(pad)}{extra}")
    for prefix, factor, what in (("pad-", a.vs_padded, "every document padded to T"),
                                 ("bucket-", a.vs_bucketed, "the same bucketed batches")):
        comp = compiled(rows, prefix)
        target = f"{ref['run']} >= {factor:.2f}x compiled PyTorch on {what}"
        if not comp:
            skipped_line(rows, prefix, target)
            continue
        best = max(comp, key=lambda r: r["tok_per_s"])
        x = ref["tok_per_s"] / best["tok_per_s"]
        verdict(x >= factor, f"{target}: {x:.2f}x ({best['run']})")


def summary_memory(rows, _a):
    print("| run | largest micro-batch (sequences) | peak mem MiB at it | first failing | trials |")
    print("|---|---|---|---|---|")
    for r in rows:
        if "skipped" in r:
            print(f"| {r['run']} | not run: {r['skipped']} | | | |")
            continue
        fail = r.get("first_fail")
        print("| %s | %s | %s | %s | %d |" % (
            r["run"], r["max_seqs"] if r["max_seqs"] else "none fits",
            fmt(r.get("peak_mem_mb"), "%.0f"),
            fail if fail else "none up to the cap %s" % r.get("cap"), len(r.get("trials", []))))
    ok = [r for r in rows if r.get("max_seqs")]
    for r in ok[1:]:
        print(f"{ok[0]['run']} vs {r['run']}: {ok[0]['max_seqs'] / r['max_seqs']:.2f}x the sequences")


def rate(r):
    return r.get("images_per_s")


def summary_resnet(rows, a):
    ref = first_ddp(rows, a.ref)
    if not rate(ref):
        die(f"ddptrain record '{a.ref}' has no images_per_s")
    base = [r for r in rows if r.get("role") == "setup-baseline" and "skipped" not in r]
    table = [r for r in rows if r.get("role") != "setup-baseline"]
    # PyTorch trains the same net on the same image size: ddptrain's FLOPs per
    # image over its GEMM peak turns any images/s into an MFU.
    per_img = ref["mfu"] / rate(ref) if ref.get("mfu") else None
    print("| run | images/s | ms/step | MFU | peak mem MiB | start-up s | ddptrain speed-up |")
    print("|---|---|---|---|---|---|---|")
    for r in table:
        if "skipped" in r:
            print(f"| {r['run']} | not run: {r['skipped']} | | | | | |")
            continue
        mfu = r.get("mfu") if r.get("framework") == "ddptrain" else (
            rate(r) * per_img if per_img else None)
        start = r.get("setup_s") if r.get("framework") == "ddptrain" else r.get("warmup_s")
        print("| %s | %.1f | %.1f | %s | %s | %s | %.2fx |" % (
            r["run"], rate(r), r.get("ms_per_step", r.get("step_ms")), pct(mfu),
            fmt(r.get("peak_mem_mb"), "%.0f"), fmt(start, "%.2f"), rate(ref) / rate(r)))
    print()
    print("start-up: ddptrain's set-up (the data, the model with the cuDNN algorithm search of"
          " every convolution shape, the optimizer; not the device's opening); PyTorch's warm-up"
          " steps (cudnn.benchmark's search, and compiling for torch.compile)")
    if per_img and ref.get("peak_gflops"):
        print(f"MFU: {ref['peak_gflops']:.1f} GFLOP/s (the GEMM peak ddptrain measured at start-up,"
              f" {ref.get('precision') or 'its precision'}); FLOPs 6 x the multiply-adds per image,"
              " the same figure for PyTorch")
    for r in rows:
        if r.get("framework") != "ddptrain" or "skipped" in r or r is ref:
            continue
        if r.get("role") == "setup-baseline":
            if r.get("setup_s") is not None and ref.get("setup_s") is not None:
                print("autotuning: %s set-up %.2f s, %s %.2f s on the same data and device:"
                      " %.2f s for building the full net (and, before the search moved into the"
                      " first forward, the cuDNN search)" % (
                          ref["run"], ref["setup_s"], r["run"], r["setup_s"],
                          ref["setup_s"] - r["setup_s"]))
            continue
        mem = ""
        if r.get("peak_mem_mb") and ref.get("peak_mem_mb"):
            mem = ", peak memory %+.1f%%" % (100 * (r["peak_mem_mb"] / ref["peak_mem_mb"] - 1))
        setup = ""
        if r.get("setup_s") is not None and ref.get("setup_s") is not None:
            setup = ", set-up %.2f s (%+.2f s)" % (r["setup_s"], r["setup_s"] - ref["setup_s"])
        print("%s vs %s: images/s %+.1f%%%s%s" % (r["run"], ref["run"],
                                                  100 * (rate(r) / rate(ref) - 1), mem, setup))
    if ref.get("first_window_ms") is not None:
        n = ref.get("first_window_steps") or 1
        extra = n * (ref["first_window_ms"] - ref["ms_per_step"])
        print("first steps: %s's first %d step(s) %.1f ms/step against %.1f ms/step after:"
              " %.0f ms extra in all (the cuDNN search among them)" % (ref["run"], n, ref["first_window_ms"],
                                         ref["ms_per_step"], extra))
    if ref.get("data_wait_ms"):
        print(f"{ref['run']}: {ref['data_wait_ms']:.2f} ms/step waiting for the loader")
    comp = [r for r in table if r.get("framework") == "pytorch" and "skipped" not in r
            and str(r.get("mode", "")).startswith("compile")]
    target = f"{ref['run']} >= {a.vs_compiled:.2f}x the fastest torch.compile run"
    if not comp:
        why = [f"{r['run']}: {r['skipped']}" for r in table if "skipped" in r
               and r.get("framework") == "pytorch" and str(r.get("mode", "")).startswith("compile")]
        print(f"SKIP: {target} (no torch.compile run{': ' + '; '.join(why) if why else ''})")
        return
    best = max(comp, key=rate)
    x = rate(ref) / rate(best)
    if ref.get("precision") not in (None, "bf16"):
        print(f"SKIP: {target}: {ref['run']} ran in {ref['precision']}, PyTorch in bf16"
              f" ({x:.2f}x, not a verdict)")
        return
    verdict(x >= a.vs_compiled, f"{ref['run']} {x:.2f}x the fastest torch.compile run "
            f"({best['run']}) >= {a.vs_compiled:.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("ddp-record")
    d.add_argument("metrics")
    d.add_argument("log")
    d.add_argument("--run", required=True)
    d.add_argument("--skip-windows", type=int, default=1)
    d.add_argument("--field", nargs=2, action="append", metavar=("KEY", "VALUE"))
    s = sub.add_parser("summary")
    s.add_argument("kind", choices=["gpt2", "varlen", "memory", "resnet"])
    s.add_argument("records")
    s.add_argument("--ref", default="ddptrain")
    s.add_argument("--mfu-target", type=float, default=0.5)
    s.add_argument("--vs-compiled", type=float, default=1.1)
    s.add_argument("--vs-padded", type=float, default=2.0)
    s.add_argument("--vs-bucketed", type=float, default=1.15)
    a = ap.parse_args()
    if a.cmd == "ddp-record":
        return ddp_record(a)
    rows = read_jsonl(a.records)
    if not rows:
        die(f"{a.records}: no records")
    for n, r in enumerate(rows, 1):
        if "run" not in r:
            die(f"{a.records}: record {n} has no 'run'")
        want = "images_per_s" if a.kind == "resnet" else "tok_per_s"
        if "skipped" not in r and a.kind != "memory" and not r.get(want):
            die(f"{a.records}: record '{r['run']}' has no {want}")
    {"gpt2": summary_gpt2, "varlen": summary_varlen, "memory": summary_memory,
     "resnet": summary_resnet}[a.kind](rows, a)


if __name__ == "__main__":
    main()
