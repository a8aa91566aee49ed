#!/bin/sh
# --init-from FILE starts training from saved weights:
#  - a run that exports after 10 steps, and a run started from that export
#    with --lr 0 (its weights stay the file's), give the same final
#    validation loss on the same validation batches, bit for bit (the same
#    fp32 weights through the same deterministic CPU kernels and thread
#    count: any difference would be a tensor loaded wrong); the second run
#    gives no architecture flag: L, H, C and T come from the file;
#  - the same weights rewritten in the Hugging Face GPT-2 layout (no
#    "transformer." prefix, Conv1D weights transposed, attn.bias and
#    masked_bias buffers, n_head in a config.json beside the file) give the
#    same loss; with the prefix, in BF16 and with a tied lm_head.weight they
#    give the loss of the same values rounded to bf16 in ddptrain's layout;
#    a wider vocabulary than the data's is kept;
#  - bad input ends with a clear error naming the tensor or flag, exit 1
#    for a bad file (not safetensors, a tensor of the wrong shape, a missing
#    or unknown tensor, an untied LM head, a vocabulary smaller than the
#    data's, a NaN) and exit 2 for a command line the file contradicts
#    (--n-embd, --n-layer, --seq-len, --n-head, a --tokens-per-batch below
#    the file's rows, no --n-head where nothing tells it, --resume DIR),
#    and nothing written (--export, --save);
#  - bf16 compute reads the loaded weights, --resume auto prefers a
#    checkpoint to the file, and two ranks derive the same flags.
# The Hugging Face files are written with Python and torch; without them
# those parts are skipped and the rest still runs.
. "${top_builddir:-.}/tests/env.sh"
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
# the architecture flags of $TINY are left out where they come from the file
RUN="--threads 1 --peak-gflops 10 --tokens-per-batch 256 --log-every 1 --eval-every 0 --eval-tokens 256"
ARCH="--n-layer 1 --n-head 2 --n-embd 16 --seq-len 48"
# a run from weights that change nothing: its final validation loss is the file's
FROZEN="$RUN --steps 1 --lr 0 --min-lr 0"

val_loss() { # the final record's val_loss of a metrics file
  sed -n 's/.*"final":true.*"val_loss":\([-0-9.e+]*\).*/\1/p' "$1" 2> /dev/null
}

step_loss() { # metrics file, step: that step's training loss
  sed -n "s/.*\"step\":$2,.*\"loss\":\([-0-9.e+]*\).*/\1/p" "$1" 2> /dev/null
}


# same_loss DESC METRICS: its final val_loss equals the exporter's, exactly
same_loss() {
  got=$(val_loss "$2")
  if [ -n "$got" ] && [ "$got" = "$want_loss" ]; then
    echo "ok: $1: val loss $got, the exporter's"
  else
    echo "FAIL: $1: val loss '$got', the exporter's is '$want_loss'"; fail=1
  fi
}

# ---- export, then start from it ---------------------------------------------------
# shellcheck disable=SC2086
if ! "$DDPTRAIN" $RUN $ARCH --steps 10 --export "$dir/e.st" --metrics "$dir/a.jsonl" \
  > "$dir/a.log" 2>&1; then
  echo "FAIL: the exporting run"; sed 's/^/  | /' "$dir/a.log"; exit 1
fi
want_loss=$(val_loss "$dir/a.jsonl")
# shellcheck disable=SC2086
expect_status "--init-from an export, no architecture flags" 0 "model: GPT L1 H2 C16 T48," \
  "$DDPTRAIN" $FROZEN --init-from "$dir/e.st" --metrics "$dir/b.jsonl"
same_loss "--init-from the export" "$dir/b.jsonl"
if grep -q "step     1/1 | loss" "$dir/out.log"; then
  echo "ok: the step count starts at 0"
else
  echo "FAIL: the run from weights does not start at step 0"; fail=1
fi
# the flags that agree with the file may be given
# shellcheck disable=SC2086
expect_status "--init-from with the file's own flags" 0 "from $dir/e.st (Linear layout)" \
  "$DDPTRAIN" $FROZEN $ARCH --init-from "$dir/e.st" --metrics "$dir/c.jsonl"
same_loss "--init-from with flags" "$dir/c.jsonl"
# training from the weights goes on from the exporter's loss, not from scratch
# shellcheck disable=SC2086
"$DDPTRAIN" $RUN $ARCH --steps 1 --metrics "$dir/fresh.jsonl" > "$dir/fresh.log" 2>&1
fresh=$(val_loss "$dir/fresh.jsonl")
if [ -n "$fresh" ] && [ "$fresh" != "$want_loss" ]; then
  echo "ok: a run without --init-from has another loss ($fresh)"
else
  echo "FAIL: a fresh run has the loss of the file ('$fresh')"; fail=1
fi

# bf16 compute reads a compute copy refreshed from the loaded masters: the
# file's loss to bf16 rounding, not the ~5.55 of zero or random weights
# shellcheck disable=SC2086
"$DDPTRAIN" $FROZEN --precision bf16 --init-from "$dir/e.st" --metrics "$dir/bf.jsonl" > "$dir/bf.log" 2>&1
got=$(val_loss "$dir/bf.jsonl")
if [ -n "$got" ] && awk -v a="$got" -v b="$want_loss" 'BEGIN { d = a - b; exit !(d < 0.01 && d > -0.01) }'; then
  echo "ok: --precision bf16 from the file: val loss $got (fp32 $want_loss)"
else
  echo "FAIL: --precision bf16 from the file: val loss '$got', fp32 $want_loss"; fail=1
fi
# --resume auto: a checkpoint in --save wins over the file, and the run
# stopped at step 2 and resumed ends like the uninterrupted one
J="$RUN --steps 4 --init-from $dir/e.st"
# shellcheck disable=SC2086
"$DDPTRAIN" $J --metrics "$dir/whole.jsonl" > "$dir/whole.log" 2>&1
# shellcheck disable=SC2086
"$DDPTRAIN" $J --save "$dir/rck" --resume auto --stop-at 2 > "$dir/r1.log" 2>&1
# shellcheck disable=SC2086
expect_status "--init-from with --resume auto resumes from the checkpoint" 0 "resume: loaded $dir/rck/ckpt_00000002.safetensors (step 2)" \
  "$DDPTRAIN" $J --save "$dir/rck" --resume auto --metrics "$dir/resumed.jsonl"
a=$(step_loss "$dir/whole.jsonl" 4) b=$(step_loss "$dir/resumed.jsonl" 4)
if [ -n "$a" ] && [ "$a" = "$b" ]; then
  echo "ok: resumed from the checkpoint, step 4 loss $a as without the stop"
else
  echo "FAIL: step 4 loss '$b' after the resume, '$a' without the stop"; fail=1
fi
if [ -n "$MPIRUN" ]; then
  # every rank derives the same flags from the file
  # shellcheck disable=SC2086
  expect_status "two ranks from the file" 0 "model: GPT L1 H2 C16 T48," \
    timeout 120 "$MPIRUN" -np 2 "$DDPTRAIN" $FROZEN --init-from "$dir/e.st"
fi

# ---- command lines the file contradicts: exit 2, nothing written ------------------
# shellcheck disable=SC2086
expect_status "--n-embd against wte" 2 "option --n-embd 32 contradicts --init-from $dir/e.st: 'transformer.wte.weight' has shape (257, 16)" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/e.st" --n-embd 32 --n-head 2 --export "$dir/x.st" --save "$dir/ck"
# shellcheck disable=SC2086
expect_status "--n-layer against the blocks" 2 "option --n-layer 2 contradicts --init-from $dir/e.st: its blocks are h.0 .. h.0" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/e.st" --n-layer 2
# shellcheck disable=SC2086
expect_status "--seq-len against wpe" 2 "'transformer.wpe.weight' has shape (48, 16)" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/e.st" --seq-len 64
# shellcheck disable=SC2086
expect_status "--tokens-per-batch below the file's rows" 2 "option --tokens-per-batch 32 is smaller than --init-from $dir/e.st's sequence length 48" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/e.st" --tokens-per-batch 32
# shellcheck disable=SC2086
expect_status "--n-head against the metadata" 2 "the file's metadata says n_head 2" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/e.st" --n-head 4
# shellcheck disable=SC2086
expect_status "--init-from with --resume DIR" 2 "option --init-from starts a new run from weights, --resume $dir/ck continues one" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/e.st" --resume "$dir/ck"
printf 'not a weights file at all\n' > "$dir/text.st"
# shellcheck disable=SC2086
expect_status "a file that is not safetensors" 1 "$dir/text.st: header length" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/text.st" --export "$dir/x.st" --save "$dir/ck"
# shellcheck disable=SC2086
expect_status "a file that is not there" 1 "cannot open $dir/none.st" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/none.st"
if [ -e "$dir/x.st" ] || [ -e "$dir/ck" ]; then
  echo "FAIL: a refused --init-from wrote an export or a checkpoint"; fail=1
else
  echo "ok: the refused runs wrote nothing"
fi

# ---- the Hugging Face layout, and broken files (Python with torch) -------------------
if [ -z "$TORCH_PYTHON" ]; then
  echo "SKIP (part): no Python with torch: the Hugging Face layout is not checked"
  exit $fail
fi
mkdir "$dir/hf" "$dir/hfp"
if ! "$TORCH_PYTHON" - "$dir" << 'PY'
import json, struct, sys
import torch

d = sys.argv[1]
CODES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}

def read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        t = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=CODES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out, meta

def write(path, tensors, meta=None, dtype="F32"):
    header, blobs, off = {}, [], 0
    if meta:
        header["__metadata__"] = meta
    for name, t in tensors.items():
        t = t.detach().contiguous().to(CODES[dtype])
        blob = t.view(torch.int16).numpy().tobytes() if dtype != "F32" else t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))

w, meta = read(d + "/e.st")
T = int(meta["max_seq_len"])
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")

def hf(prefix, lm_head=False):
    """The GPT2Model state_dict: Conv1D weights (in, out), mask buffers."""
    out = {}
    for name, t in w.items():
        bare = name[len("transformer."):]
        if any(bare.endswith(s) for s in CONV1D):
            t = t.t()
        out[prefix + bare] = t
        if bare.endswith("ln_1.weight"):
            block = prefix + bare[:-len("ln_1.weight")]
            out[block + "attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
            out[block + "attn.masked_bias"] = torch.tensor(-1e4)
    if lm_head:
        out["lm_head.weight"] = w["transformer.wte.weight"]
    return out

# no prefix, F32, n_head in config.json; the same file alone, without it
write(d + "/hf/model.safetensors", hf(""))
json.dump({"model_type": "gpt2", "n_head": 2}, open(d + "/hf/config.json", "w"))
write(d + "/hfp/nohead.safetensors", hf(""))
# the prefix, BF16, a tied LM head; and ddptrain's layout of the same bf16 values
write(d + "/hfp/model.safetensors", hf("transformer.", lm_head=True), dtype="BF16")
write(d + "/bf16.st", {k: v.to(torch.bfloat16).float() for k, v in w.items()}, meta)
# F16 in ddptrain's layout, and its fp32 image
write(d + "/f16.st", w, meta, dtype="F16")
write(d + "/f16_image.st", {k: v.to(torch.float16).float() for k, v in w.items()}, meta)

# broken files, each from the valid ddptrain export
def variant(name, change):
    t = dict(w)
    change(t)
    write(d + "/" + name, t, meta)
variant("shape.st", lambda t: t.update({"transformer.h.0.mlp.c_fc.bias": t["transformer.h.0.mlp.c_fc.bias"][:60]}))
variant("missing.st", lambda t: t.pop("transformer.h.0.ln_2.weight"))
variant("extra.st", lambda t: t.update({"transformer.h.0.attn.rotary": torch.zeros(4)}))
variant("untied.st", lambda t: t.update({"lm_head.weight": t["transformer.wte.weight"] + 1}))
variant("small_vocab.st", lambda t: t.update({"transformer.wte.weight": t["transformer.wte.weight"][:200]}))
variant("wide_vocab.st", lambda t: t.update({"transformer.wte.weight": torch.cat([t["transformer.wte.weight"], torch.zeros(43, 16)])}))
nan = dict(w)
nan["transformer.ln_f.bias"] = nan["transformer.ln_f.bias"].clone()
nan["transformer.ln_f.bias"][3] = float("nan")
write(d + "/nan.st", nan, meta)
PY
then
  echo "FAIL: writing the Hugging Face files"; exit 1
fi

# shellcheck disable=SC2086
expect_status "the Hugging Face layout (Conv1D, no prefix, config.json)" 0 "GPT-2 Conv1D layout, weights transposed" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/hf/model.safetensors" --metrics "$dir/hf.jsonl"
same_loss "the Hugging Face layout" "$dir/hf.jsonl"
# shellcheck disable=SC2086
"$DDPTRAIN" $FROZEN --init-from "$dir/bf16.st" --metrics "$dir/bf16.jsonl" > "$dir/bf16.log" 2>&1
# shellcheck disable=SC2086
expect_status "the prefix, BF16, a tied lm_head, --n-head given" 0 "model: GPT L1 H2 C16 T48," \
  "$DDPTRAIN" $FROZEN --n-head 2 --init-from "$dir/hfp/model.safetensors" --metrics "$dir/hfp.jsonl"
a=$(val_loss "$dir/bf16.jsonl") b=$(val_loss "$dir/hfp.jsonl")
if [ -n "$a" ] && [ "$a" = "$b" ]; then
  echo "ok: BF16 in the Hugging Face layout = its values in ddptrain's layout ($a)"
else
  echo "FAIL: BF16 file '$b', the same values in fp32 '$a'"; fail=1
fi
# shellcheck disable=SC2086
"$DDPTRAIN" $FROZEN --init-from "$dir/f16.st" --metrics "$dir/f16.jsonl" > /dev/null 2>&1
# shellcheck disable=SC2086
"$DDPTRAIN" $FROZEN --init-from "$dir/f16_image.st" --metrics "$dir/f16i.jsonl" > /dev/null 2>&1
a=$(val_loss "$dir/f16i.jsonl") b=$(val_loss "$dir/f16.jsonl")
if [ -n "$a" ] && [ "$a" = "$b" ]; then
  echo "ok: an F16 file = its values in fp32 ($a)"
else
  echo "FAIL: F16 file '$b', the same values in fp32 '$a'"; fail=1
fi
# shellcheck disable=SC2086
expect_status "a wider vocabulary than the data's is kept" 0 "the model keeps the file's vocabulary of 300 tokens" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/wide_vocab.st"

# shellcheck disable=SC2086
expect_status "no n_head anywhere" 2 "the number of attention heads is not in the tensor shapes" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/hfp/nohead.safetensors"
# shellcheck disable=SC2086
expect_status "a tensor of the wrong shape" 1 "tensor 'transformer.h.0.mlp.c_fc.bias' has shape (60), the model's 'transformer.h.0.mlp.c_fc.bias' needs (64)" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/shape.st" --export "$dir/x.st" --save "$dir/ck"
# shellcheck disable=SC2086
expect_status "a missing tensor" 1 "the model's tensor 'transformer.h.0.ln_2.weight' is not in the file" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/missing.st"
# shellcheck disable=SC2086
expect_status "a tensor of another model" 1 "tensor 'transformer.h.0.attn.rotary' is not a parameter of model gpt" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/extra.st"
# shellcheck disable=SC2086
expect_status "an untied LM head" 1 "'lm_head.weight' differs from the token embedding" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/untied.st"
# shellcheck disable=SC2086
expect_status "a vocabulary smaller than the data's" 1 "'transformer.wte.weight' has shape (200, 16): 200 tokens, fewer than the data's vocabulary of 257" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/small_vocab.st"
# shellcheck disable=SC2086
expect_status "a NaN in the file" 1 "tensor 'transformer.ln_f.bias' holds a non-finite value at 3" \
  "$DDPTRAIN" $FROZEN --init-from "$dir/nan.st" --export "$dir/x.st" --save "$dir/ck"
if [ -e "$dir/x.st" ] || [ -e "$dir/ck" ]; then
  echo "FAIL: a refused --init-from wrote an export or a checkpoint"; fail=1
else
  echo "ok: the refused files wrote nothing"
fi
exit $fail
