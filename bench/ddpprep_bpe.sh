#!/bin/sh
# ddpprep --tokenizer throughput: MB of input text per second of wall time
# (reading, BPE encoding, writing the shards) with 1 and with 2 threads.
# The corpus is text every Debian host has: the packages' copyright files
# (English prose) and Python's standard library (code), one document per
# file, copied into a scratch directory up to the size asked for. Each
# thread count runs `passes` times; the table has the median and the best
# wall time, the median CPU time (what a busy host cannot inflate), and
# whether the shards of every run were identical (they must be).
# With the Python `tokenizers` package, TRAIN_VOCAB=N first trains a
# byte-level BPE of N tokens (GPT-2's settings) on the corpus and uses it,
# which gives a GPT-2-sized vocabulary without downloading one; and the same
# package's encode_batch is timed on the first 4 MiB of the documents for
# reference, and its ids are compared with ddpprep's for those documents.
# Usage: bench/ddpprep_bpe.sh [build dir, default .] [tokenizer dir, default
#        tests/data/bpe; "" for the default] [MiB of text, default 8] [passes, default 3]
set -eu
build=$(cd "${1:-.}" && pwd)
src=$(sed -n 's/^abs_top_srcdir = //p' "$build/Makefile")
tok=${2:-$src/tests/data/bpe}
mib=${3:-8}
passes=${4:-3}
python=${PYTHON:-python3}
[ -x "$build/ddpprep" ] || { echo "no $build/ddpprep: run make first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
"$python" - "$work/corpus" "$mib" <<'PY'
import glob, os, sys
out, limit = sys.argv[1], int(sys.argv[2]) << 20
files = sorted(glob.glob("/usr/share/doc/*/copyright")) + sorted(glob.glob("/usr/lib/python3*/**/*.py", recursive=True))
# Alternate prose and code so that any prefix of the corpus has both.
prose = [f for f in files if f.endswith("copyright")]
code = [f for f in files if f.endswith(".py")]
order = [f for pair in zip(prose, code) for f in pair] + prose[len(code):] + code[len(prose):]
total = n = 0
for f in order:
    try:
        data = open(f, "rb").read()
    except OSError:
        continue
    if not data or total >= limit:
        continue
    data = data[: limit - total]
    open(os.path.join(out, "%06d.txt" % n), "wb").write(data)
    total += len(data); n += 1
print("corpus: %d documents, %.1f MiB" % (n, total / 1048576), file=sys.stderr)
PY
bytes=$(cat "$work/corpus"/* | wc -c)
if [ -n "${TRAIN_VOCAB:-}" ]; then
  mkdir "$work/tok"
  "$python" - "$work/corpus" "$work/tok" "$TRAIN_VOCAB" <<'PY'
import glob, sys
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
corpus, out, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train_from_iterator((open(f, "rb").read().decode("utf-8", "replace") for f in sorted(glob.glob(corpus + "/*"))), trainer)
tok.model.save(out)
PY
  tok=$work/tok
fi
echo "$(nproc) cores, load $(cut -d" " -f1 /proc/loadavg), $(date -u +%Y-%m-%d), commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "corpus: $(ls "$work/corpus" | wc -l) documents, $bytes bytes; tokenizer: $("$python" -c 'import json, sys; print(len(json.load(open(sys.argv[1]))))' "$tok/vocab.json") tokens"
echo
"$python" - "$build/ddpprep" "$tok" "$work" "$bytes" "$passes" <<'PY'
import filecmp, glob, os, resource, subprocess, sys, time
prep, tok, work, nbytes, passes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
print("| threads | median wall s | best wall s | median MB/s | best MB/s | CPU s (user+sys) | MB per CPU s | tokens | identical |")
print("|---|---|---|---|---|---|---|---|---|")
ref = None
for threads in (1, 2):
    walls, cpus, same, tokens = [], [], True, 0
    for _ in range(passes):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        run = subprocess.run([prep, "--threads", str(threads), "--tokenizer", tok, "-o", work + "/out",
                              work + "/corpus"], stderr=subprocess.PIPE, text=True, check=True)
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        tokens = int(run.stderr.split("tokens: ")[1].split()[0])
        shards = sorted(glob.glob(work + "/out_train_*.bin"))
        if ref is None:
            ref = []
            for i, f in enumerate(shards):
                os.rename(f, "%s/ref%d.bin" % (work, i))
                ref.append("%s/ref%d.bin" % (work, i))
        else:
            same &= len(shards) == len(ref) and all(filecmp.cmp(a, b, shallow=False) for a, b in zip(shards, ref))
            for f in shards:
                os.unlink(f)
    walls.sort(); cpus.sort()
    m, c = walls[(len(walls) - 1) // 2], cpus[(len(cpus) - 1) // 2]
    print("| %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %d | %s |" % (threads, m, walls[0], nbytes / m / 1e6,
          nbytes / walls[0] / 1e6, c, nbytes / c / 1e6, tokens, "yes" if same else "NO"))
PY
if "$python" -c "import tokenizers" 2> /dev/null; then
  echo
  echo "reference: Hugging Face tokenizers encode_batch on the same documents (the first 4 MiB):"
  for threads in 1 2; do
    RAYON_NUM_THREADS=$threads "$python" - "$work" "$tok" "$threads" <<'PY'
import glob, struct, sys, time
from tokenizers import Tokenizer, models, pre_tokenizers
work, tokdir, threads = sys.argv[1:4]
tok = Tokenizer(models.BPE.from_file(tokdir + "/vocab.json", tokdir + "/merges.txt"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
# Up to the first document that is not UTF-8 (tokenizers takes text).
docs, nbytes = [], 0
for f in sorted(glob.glob(work + "/corpus/*")):
    data = open(f, "rb").read()
    if nbytes + len(data) > 4 << 20:
        break
    try:
        docs.append(data.decode("utf-8"))
    except UnicodeDecodeError:
        break
    nbytes += len(data)
t = time.time(); enc = tok.encode_batch(docs); s = time.time() - t
# ddpprep's shards of the same documents (EOT first, empty ones skipped).
eot, want = tok.token_to_id("<|endoftext|>"), []
for d, e in zip(docs, enc):
    if d:
        want += [eot] + e.ids
data = open(work + "/ref0.bin", "rb").read()
got = struct.unpack("<%dH" % min(len(want), (len(data) - 1024) // 2), data[1024:1024 + 2 * len(want)])
print("  %s thread(s): %.2f s, %.2f MB/s; ddpprep's %d tokens of these %d documents equal: %s"
      % (threads, s, nbytes / s / 1e6, len(want), len(docs), "yes" if list(got) == want else "NO"))
PY
  done
fi
