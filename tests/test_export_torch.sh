#!/bin/sh
# Weights exported at a checkpoint load into the PyTorch reference model
# (tests/reference/gpt_reference.py) and give ddptrain's loss: a run stops
# at step 10 (--stop-at, --export), the resumed run logs the loss of step 11
# (computed with exactly those weights) and dumps its batches; PyTorch's
# loss on step 11's batch with the exported weights must match (1e-5
# relative). SKIPs without a Python that has torch.
. "${top_builddir:-.}/tests/env.sh"
set -u
if [ -z "$TORCH_PYTHON" ]; then echo "SKIP: no Python with torch (configure found none)"; exit 77; fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ARGS="$TINY --steps 20 --log-every 1"
# shellcheck disable=SC2086
if ! "$DDPTRAIN" $ARGS --stop-at 10 --save "$dir/ck" --export "$dir/w10.st" > "$dir/a.log" 2>&1 ||
  ! "$DDPTRAIN" $ARGS --resume "$dir/ck" --metrics "$dir/m.jsonl" --dump-batches "$dir/b.st" > "$dir/b.log" 2>&1; then
  echo "FAIL: training runs"
  sed 's/^/  | /' "$dir/a.log" "$dir/b.log"
  exit 1
fi
"$TORCH_PYTHON" - "$top_srcdir/tests/reference" "$dir/w10.st" "$dir/b.st" "$dir/m.jsonl" << 'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import torch.nn.functional as F
from gpt_reference import GPT, read_safetensors
torch.set_num_threads(1)
weights, meta = read_safetensors(sys.argv[2])
cfg = [int(meta[k]) for k in ("n_layer", "n_head", "n_embd", "max_seq_len", "vocab_size")]
model = GPT(*cfg)
missing, unexpected = model.load_state_dict(weights, strict=False)
if missing or unexpected:
    sys.exit("FAIL: exported weights do not fit the reference model: %s %s" % (missing, unexpected))
batches, _ = read_safetensors(sys.argv[3])
inputs, targets = batches["batch.10.inputs"].long(), batches["batch.10.targets"].long()
with torch.no_grad():
    logits = model(inputs)
    loss = F.cross_entropy(logits.view(-1, cfg[4]), targets.view(-1), ignore_index=-1, reduction="sum")
    loss = float(loss) / int((targets != -1).sum())
ours = [r["loss"] for r in map(json.loads, open(sys.argv[4])) if r.get("step") == 11][0]
rel = abs(loss - ours) / abs(ours)
ok = rel <= 1e-5
print("%s: step 11 loss: ddptrain %.7f, PyTorch on the exported step-10 weights %.7f (relative %.1e)"
      % ("ok" if ok else "FAIL", ours, loss, rel))
sys.exit(0 if ok else 1)
PY
