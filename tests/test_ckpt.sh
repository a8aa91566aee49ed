#!/bin/sh
# Checkpoints end to end (CPU; fp32 unless said):
#  - resume is exact: --steps 20 in one go and --steps 20 --stop-at 10 --save
#    then --steps 20 --resume give bit-identical weights (cmp of --export):
#    1 rank, 2 ranks, --accum 2 with SGD, 2 ranks x accum 2 with LAMB, bf16,
#    and fp16 with a skipped (overflowed) step before the stop;
#  - 2 ranks -> 1 rank resumes at the same global step and says so;
#  - --save-every and --keep; --resume auto starts fresh, then resumes;
#  - a corrupt newest checkpoint is reported and skipped;
#  - a different model shape is an error naming the flag, exit 1, nothing
#    written; --resume of a directory without checkpoints is an error;
#  - disk full (fault injection always; a real full tmpfs when root) and an
#    unwritable directory: training continues, a warning names the path,
#    the previous checkpoint stays intact;
#  - a final checkpoint that fails: the evaluation and --export still run,
#    the last line says so, exit 74 (on every rank with 2 ranks), not 0.
. "${top_builddir:-.}/tests/env.sh"
set -u
dir=$(mktemp -d)
mnt=
cleanup() {
  [ -n "$mnt" ] && umount "$mnt" 2> /dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
fail=0
# shellcheck disable=SC2086
train() { # NP LOG ARGS...: one run, log to LOG, exit status returned
  np=$1 log=$2
  shift 2
  if [ "$np" -gt 1 ]; then
    timeout 300 "$MPIRUN" -np "$np" "$DDPTRAIN" $TINY --steps 20 "$@" > "$log" 2>&1
  else
    timeout 300 "$DDPTRAIN" $TINY --steps 20 "$@" > "$log" 2>&1
  fi
}
ok() { echo "ok: $*"; }
bad() { # message, log
  echo "FAIL: $1"
  sed 's/^/  | /' "$2"
  fail=1
}

# ---- exact resume --------------------------------------------------------------
exact() { # NAME NP ARGS...
  name=$1 np=$2
  shift 2
  d="$dir/$name"
  mkdir -p "$d"
  train "$np" "$d/full.log" --export "$d/full.st" "$@" || { bad "$name: uninterrupted run" "$d/full.log"; return; }
  train "$np" "$d/a.log" --stop-at 10 --save "$d/ck" "$@" || { bad "$name: first half" "$d/a.log"; return; }
  train "$np" "$d/b.log" --resume "$d/ck" --export "$d/res.st" "$@" || { bad "$name: second half" "$d/b.log"; return; }
  if [ -e "$d/ck/ckpt_00000010.safetensors" ] && grep -q "resume: loaded .*ckpt_00000010.safetensors (step 10)" "$d/b.log" &&
    cmp -s "$d/full.st" "$d/res.st"; then
    ok "$name: stop at 10 + resume = 20 in one go, bit-identical"
  else
    bad "$name: resumed weights differ from the uninterrupted run" "$d/b.log"
  fi
}
exact np1 1
exact np1-accum2-sgd 1 --accum 2 --optimizer sgd --lr 0.05 --min-lr 0.005
exact np1-bf16 1 --precision bf16
# fp16 with an overflow (skipped step) at step 4 and growth every 3 clean
# steps: bit-identical only if the resume restores the scale, the growth
# counter and the optimizer's count of applied steps.
export DDPTRAIN_FAULT_OVERFLOW_RANK=0 DDPTRAIN_FAULT_OVERFLOW_STEP=4
exact np1-fp16-overflow 1 --precision fp16 --loss-scale-window 3
unset DDPTRAIN_FAULT_OVERFLOW_RANK DDPTRAIN_FAULT_OVERFLOW_STEP
if [ -n "$MPIRUN" ]; then
  exact np2 2
  exact np2-accum2-lamb 2 --accum 2 --optimizer lamb
else
  echo "SKIP: 2-rank resume (no mpirun)"
fi

# ---- world size change: 2 ranks -> 1 --------------------------------------------
if [ -n "$MPIRUN" ]; then
  d="$dir/world"
  train 2 "$d.a.log" --stop-at 10 --save "$d" &&
    train 1 "$d.b.log" --resume "$d"
  rc=$?
  if [ $rc -eq 0 ] && grep -q "checkpoint comes from 2 ranks x accum 1, this run has 1 x 1: the data continues at global step 10" "$d.b.log" &&
    grep -q "step    20/20" "$d.b.log"; then
    ok "2 ranks -> 1 rank resumes at global step 10 and says so"
  else
    bad "2 -> 1 rank resume (exit $rc)" "$d.b.log"
  fi
fi

# ---- save-every, keep, resume auto ------------------------------------------------
d="$dir/auto"
train 1 "$d.a.log" --save "$d" --resume auto --save-every 3 --keep 2 --stop-at 10
got=$(ls "$d" | tr '\n' ' ')
if grep -q "no checkpoint in $d yet; starting from step 0" "$d.a.log" &&
  [ "$got" = "ckpt_00000009.safetensors ckpt_00000010.safetensors " ]; then
  ok "--resume auto on an empty directory starts fresh; --save-every 3 --keep 2 leaves steps 9 and 10"
else
  bad "save-every/keep: directory holds '$got'" "$d.a.log"
fi
train 1 "$d.b.log" --save "$d" --resume auto --save-every 3 --keep 2
if grep -q "resume: loaded .*ckpt_00000010.safetensors (step 10)" "$d.b.log" && [ -e "$d/ckpt_00000020.safetensors" ]; then
  ok "--resume auto continues from the --save directory"
else
  bad "--resume auto with a checkpoint" "$d.b.log"
fi

# ---- a corrupt newest checkpoint is skipped -------------------------------------------
d="$dir/corrupt"
train 1 "$d.a.log" --save "$d" --save-every 5 --stop-at 10
size=$(wc -c < "$d/ckpt_00000010.safetensors")
printf garbage | dd of="$d/ckpt_00000010.safetensors" bs=1 seek=$((size - 100)) conv=notrunc 2> /dev/null
train 1 "$d.b.log" --resume "$d" --stop-at 12
if grep -q "checksum mismatch" "$d.b.log" && grep -q "ckpt_00000010.safetensors is corrupt or unreadable (see above); skipping it" "$d.b.log" &&
  grep -q "resume: loaded .*ckpt_00000005.safetensors (step 5)" "$d.b.log"; then
  ok "a corrupt newest checkpoint is reported and the one before it is used"
else
  bad "corrupt checkpoint" "$d.b.log"
fi

size=$(wc -c < "$d/ckpt_00000005.safetensors")
printf garbage | dd of="$d/ckpt_00000005.safetensors" bs=1 seek=$((size - 100)) conv=notrunc 2> /dev/null
train 1 "$d.c.log" --resume "$d" --save "$d"
rc=$?
if [ $rc -eq 1 ] && grep -q "corrupt holds no valid checkpoint" "$d.c.log" && [ "$(ls "$d" | wc -l)" -eq 2 ]; then
  ok "only corrupt checkpoints: exit 1, nothing written"
else
  bad "only corrupt checkpoints (exit $rc)" "$d.c.log"
fi
# resuming a finished run, or with --stop-at below the checkpoint, trains
# nothing and writes no checkpoint that would rewind the step
d="$dir/done"
train 1 "$d.a.log" --save "$d" --stop-at 8 --export "$d.a.st"
train 1 "$d.b.log" --save "$d" --resume "$d" --stop-at 4 --export "$d.b.st"
if [ $? -eq 0 ] && grep -q "8 steps already done; nothing to train" "$d.b.log" && [ "$(ls "$d")" = "ckpt_00000008.safetensors" ] &&
  cmp -s "$d.a.st" "$d.b.st"; then
  ok "--stop-at below the resumed step trains nothing and rewinds nothing"
else
  bad "--stop-at below the resumed step: $(ls "$d" | tr '\n' ' ')" "$d.b.log"
fi

# ---- configuration mismatch ----------------------------------------------------------
d="$dir/mismatch"
train 1 "$d.a.log" --save "$d" --stop-at 5
before=$(cksum < "$d/ckpt_00000005.safetensors")
train 1 "$d.b.log" --resume "$d" --save "$d" --n-embd 32 --export "$d/x.st"
rc=$?
if [ $rc -eq 1 ] && grep -q "cannot resume from .*ckpt_00000005.safetensors: --n-embd is '16' there and '32' now" "$d.b.log" &&
  [ "$(cksum < "$d/ckpt_00000005.safetensors")" = "$before" ] && [ "$(ls "$d")" = "ckpt_00000005.safetensors" ] &&
  [ ! -e "$d/x.st" ]; then
  ok "a different --n-embd: exit 1 naming the flag, nothing written"
else
  bad "config mismatch (exit $rc)" "$d.b.log"
fi
# the built-in task mix is part of the data: another one is refused too
train 1 "$d.t.log" --resume "$d" --save "$d" --tasks copy --export "$d/x.st"
rc=$?
if [ $rc -eq 1 ] && grep -q "cannot resume from .*ckpt_00000005.safetensors: --tasks is 'copy=4,reverse,sort,add' there and 'copy' now" "$d.t.log" &&
  [ "$(cksum < "$d/ckpt_00000005.safetensors")" = "$before" ] && [ "$(ls "$d")" = "ckpt_00000005.safetensors" ] &&
  [ ! -e "$d/x.st" ]; then
  ok "a different --tasks: exit 1 naming the flag, nothing written"
else
  bad "--tasks mismatch (exit $rc)" "$d.t.log"
fi
train 1 "$d.c.log" --resume "$d" --lr 1e-3 --stop-at 6
if grep -q "resume: --lr is '0.001' now, '0.0030000000000000001' in the run" "$d.c.log"; then
  ok "a different --lr is a warning"
else
  bad "--lr change warning" "$d.c.log"
fi
mkdir -p "$dir/empty"
train 1 "$dir/empty.log" --resume "$dir/empty"
rc=$?
if [ $rc -eq 1 ] && grep -q "empty holds no checkpoint" "$dir/empty.log"; then
  ok "--resume of a directory without checkpoints: exit 1"
else
  bad "--resume of an empty directory (exit $rc)" "$dir/empty.log"
fi
train 1 "$dir/auto-nosave.log" --resume auto
rc=$?
if [ $rc -eq 2 ] && grep -q "resume auto needs --save DIR" "$dir/auto-nosave.log"; then
  ok "--resume auto without --save: exit 2"
else
  bad "--resume auto without --save (exit $rc)" "$dir/auto-nosave.log"
fi

# ---- disk full and unwritable directories --------------------------------------------
d="$dir/full"
DDPTRAIN_FAULT_CKPT_FULL_STEP=10 train 1 "$d.log" --save "$d" --save-every 5 --export "$d.st"
rc=$?
if [ $rc -eq 0 ] && grep -q "No space left on device" "$d.log" &&
  grep -q "checkpoint: step 10 NOT written to $d/ckpt_00000010.safetensors .* the newest checkpoint is still $d/ckpt_00000005.safetensors" "$d.log" &&
  grep -q "step    20/20" "$d.log" && [ "$(ls -A "$d" | tr '\n' ' ')" = "ckpt_00000005.safetensors ckpt_00000015.safetensors ckpt_00000020.safetensors " ]; then
  ok "fault-injected ENOSPC at step 10: warning names the path, training continues, no temporary file left"
else
  bad "fault-injected full disk (exit $rc; directory: $(ls -A "$d" | tr '\n' ' '))" "$d.log"
fi
train 1 "$dir/notdir.log" --save "$dir/full.st/sub" --save-every 5
rc=$?
if [ $rc -eq 74 ] && grep -q "cannot create checkpoint directory $dir/full.st/sub" "$dir/notdir.log" &&
  grep -q "step 20 NOT written to $dir/full.st/sub/ckpt_00000020.safetensors" "$dir/notdir.log" &&
  grep -q "step    20/20" "$dir/notdir.log"; then
  ok "an unusable --save directory: warnings name it, training completes, exit 74"
else
  bad "unwritable directory (exit $rc)" "$dir/notdir.log"
fi
if [ "$(id -u)" -eq 0 ] && mkdir -p "$dir/mnt" && mount -t tmpfs -o size=160k tmpfs "$dir/mnt" 2> /dev/null; then
  mnt="$dir/mnt"
  # one checkpoint of this model is about 105 KiB: the second does not fit
  train 1 "$dir/tmpfs.log" --save "$mnt" --save-every 5 --keep 3
  rc=$?
  if [ $rc -eq 74 ] && grep -q "No space left on device" "$dir/tmpfs.log" &&
    grep -q "step 10 NOT written to $mnt/ckpt_00000010.safetensors" "$dir/tmpfs.log" &&
    [ "$(ls -A "$mnt")" = "ckpt_00000005.safetensors" ] && grep -q "step    20/20" "$dir/tmpfs.log" &&
    train 1 "$dir/tmpfs2.log" --resume "$mnt" --stop-at 6 && grep -q "loaded .*ckpt_00000005" "$dir/tmpfs2.log"; then
    ok "a really full file system (160 KiB tmpfs): training continues, step 5's checkpoint stays valid"
  else
    bad "full tmpfs (exit $rc)" "$dir/tmpfs.log"
  fi
  umount "$mnt" && mnt=
else
  echo "SKIP: full tmpfs test (needs root and mount; the fault-injected ENOSPC above covers the path)"
fi

# ---- the final checkpoint fails ----------------------------------------------------
d="$dir/final"
DDPTRAIN_FAULT_CKPT_FULL_STEP=20 train 1 "$d.log" --save "$d" --save-every 5 --export "$d.st"
rc=$?
if [ $rc -eq 74 ] && [ -s "$d.st" ] && grep -q "summary: final train loss" "$d.log" &&
  tail -n 1 "$d.log" | grep -q "ERROR: the final checkpoint (step 20) was NOT written to $d (see the warning above): exit status 74" &&
  [ "$(ls -A "$d" | tr '\n' ' ')" = "ckpt_00000005.safetensors ckpt_00000010.safetensors ckpt_00000015.safetensors " ]; then
  ok "a failed final checkpoint: the export is written, the last line says so, exit 74"
else
  bad "failed final checkpoint (exit $rc; directory: $(ls -A "$d" | tr '\n' ' '))" "$d.log"
fi
if [ -n "$MPIRUN" ]; then
  # each rank's own exit status, through a shell around it
  d="$dir/final2"
  # shellcheck disable=SC2016,SC2086
  DDPTRAIN_FAULT_CKPT_FULL_STEP=20 timeout 300 "$MPIRUN" -x DDPTRAIN_FAULT_CKPT_FULL_STEP -np 2 \
    sh -c '"$0" "$@"; echo "rank $OMPI_COMM_WORLD_RANK exit status $?"' "$DDPTRAIN" $TINY --steps 20 --save "$d" > "$d.log" 2>&1
  if grep -q "^rank 0 exit status 74$" "$d.log" && grep -q "^rank 1 exit status 74$" "$d.log"; then
    ok "2 ranks, a failed final checkpoint: both ranks exit 74"
  else
    bad "2 ranks, failed final checkpoint" "$d.log"
  fi
fi
exit $fail
