#!/bin/sh
# Checkpoints that must not be lost (CPU, 1 rank):
#  - a corrupt ckpt_200 and a resume from 180 with --save-every 5 --keep 1
#    --stop-at 195: the corrupt file is moved to superseded/ (not deleted,
#    not kept in place), --keep spares the resumed-from 180, and the next
#    --resume loads 195, the newest valid state;
#  - a fresh run into a directory of higher steps sets them aside too, so
#    --keep 1 keeps its own checkpoint and --resume takes it; one that
#    cannot be moved stops the run (exit 1) before anything is written;
#  - temporary files of dead writers are removed at start-up; a live PID's
#    and another host's are kept;
#  - two tensor names swapped in a checkpoint's header (same shapes, same
#    name lengths: still well-formed safetensors) fail the CRC at load.
. "${top_builddir:-.}/tests/env.sh"
set -u
LC_ALL=C # ls order
export LC_ALL
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
# shellcheck disable=SC2086
train() { # LOG ARGS...: one run, exit status returned
  log=$1
  shift
  timeout 300 "$DDPTRAIN" $TINY --steps 250 --log-every 50 "$@" > "$log" 2>&1
}
ok() { echo "ok: $*"; }
bad() { # message, log
  echo "FAIL: $1"
  sed 's/^/  | /' "$2"
  fail=1
}
ckpt() { printf '%s/ckpt_%08d.safetensors' "$1" "$2"; }

# ---- item: a corrupt higher step must not win over a resumed run ----------------------
d="$dir/prune"
train "$d.a.log" --save "$d" --save-every 60 --stop-at 200 || bad "first run" "$d.a.log"
f=$(ckpt "$d" 200)
size=$(wc -c < "$f")
printf X | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc 2> /dev/null
corrupt=$(cksum < "$f")
train "$d.b.log" --resume "$d" --save "$d" --save-every 5 --keep 1 --stop-at 195
rc=$?
got=$(ls "$d" | tr '\n' ' ')
if [ $rc -eq 0 ] && grep -q "resume: loaded .*ckpt_00000180.safetensors (step 180)" "$d.b.log" &&
  grep -q "moved $f to $d/superseded/ckpt_00000200.safetensors: its step 200 is above the step 180" "$d.b.log" &&
  [ "$got" = "ckpt_00000180.safetensors ckpt_00000195.safetensors superseded " ] &&
  [ "$(cksum < "$d/superseded/ckpt_00000200.safetensors")" = "$corrupt" ]; then
  ok "corrupt step 200 set aside whole; --keep 1 keeps step 195 and the resumed-from 180"
else
  bad "resume below a corrupt step 200 (exit $rc; directory: $got)" "$d.b.log"
fi
if train "$d.c.log" --resume "$d" --stop-at 196 && grep -q "resume: loaded .*ckpt_00000195.safetensors (step 195)" "$d.c.log" &&
  ! grep -q "corrupt" "$d.c.log"; then
  ok "the next --resume takes step 195, the newest valid state"
else
  bad "second resume" "$d.c.log"
fi

# a fresh run (no --resume) into that directory: its step 10 must not lose
# to the abandoned run's 180 and 195
train "$d.d.log" --save "$d" --keep 1 --stop-at 10
rc=$?
got=$(ls "$d" | tr '\n' ' ')
aside=$(ls "$d/superseded" | tr '\n' ' ')
if [ $rc -eq 0 ] && [ "$got" = "ckpt_00000010.safetensors superseded " ] &&
  [ "$aside" = "ckpt_00000180.safetensors ckpt_00000195.safetensors ckpt_00000200.safetensors " ] &&
  train "$d.e.log" --resume "$d" --stop-at 11 && grep -q "resume: loaded .*ckpt_00000010.safetensors (step 10)" "$d.e.log"; then
  ok "a fresh run sets the old run's higher steps aside and resumes from its own step 10"
else
  bad "fresh run into a used directory (exit $rc; directory: $got; superseded: $aside)" "$d.d.log"
fi

# a checkpoint that cannot be set aside (superseded is a file here) stops
# the run before it writes anything, naming the file
d="$dir/stuck"
train "$d.a.log" --save "$d" --stop-at 8 || bad "first run" "$d.a.log"
printf 'not a directory' > "$d/superseded"
train "$d.b.log" --save "$d" --stop-at 4
rc=$?
got=$(ls "$d" | tr '\n' ' ')
if [ $rc -eq 1 ] && grep -q "cannot move $d/ckpt_00000008.safetensors (step 8, above the step 0 this run starts at) to $d/superseded/: it is not a directory" "$d.b.log" &&
  [ "$got" = "ckpt_00000008.safetensors superseded " ]; then
  ok "a checkpoint that cannot be set aside: exit 1 naming it, nothing written or lost"
else
  bad "set-aside failure (exit $rc; directory: $got)" "$d.b.log"
fi

# ---- item: temporary files of killed writers ------------------------------------------
d="$dir/tmp"
mkdir -p "$d"
host=$(uname -n | tr -c 'A-Za-z0-9._\n-' '_')
sh -c 'exit 0' &
dead=$!
wait $dead
sleep 300 &
live=$!
for name in ".ckpt_00000005.safetensors.tmp.$host.$dead" ".ckpt_00000006.safetensors.tmp.$dead" \
  ".ckpt_00000007.safetensors.tmp.$host.$live" ".ckpt_00000008.safetensors.tmp.other-node.$dead"; do
  printf partial > "$d/$name"
done
train "$d.log" --save "$d" --stop-at 2
rc=$?
kill $live
got=$(ls -A "$d" | tr '\n' ' ')
if [ $rc -eq 0 ] && [ "$got" = ".ckpt_00000007.safetensors.tmp.$host.$live .ckpt_00000008.safetensors.tmp.other-node.$dead ckpt_00000002.safetensors " ] &&
  grep -q "removed $d/.ckpt_00000005.safetensors.tmp.$host.$dead, left by a writer (process $dead) that is gone" "$d.log" &&
  grep -q "kept $d/.ckpt_00000007.safetensors.tmp.$host.$live: process $live is running on this host" "$d.log" &&
  grep -q "kept $d/.ckpt_00000008.safetensors.tmp.other-node.$dead: written by process $dead on host other-node" "$d.log"; then
  ok "dead writers' temporary files removed at start-up; a live PID's and another host's kept"
else
  bad "stale temporary files (exit $rc; directory: $got)" "$d.log"
fi

# ---- item: the CRC covers the tensor names ----------------------------------------------
d="$dir/swap"
train "$d.a.log" --save "$d" --stop-at 5 || bad "first run" "$d.a.log"
f=$(ckpt "$d" 5)
hlen=$(od -An -t u8 -N 8 "$f" | tr -d ' ')
# ln_1.weight <-> ln_2.weight (both [16]) in the header, for the model and
# every optimizer slot: the file stays well-formed, only the names move
swaps=0
for hit in $(grep -aob 'ln_[12]\.weight' "$f"); do
  at=${hit%%:*}
  [ "$at" -lt $((hlen + 8)) ] || continue
  case ${hit#*:} in ln_1*) digit=2 ;; *) digit=1 ;; esac
  printf %s "$digit" | dd of="$f" bs=1 seek=$((at + 3)) conv=notrunc 2> /dev/null
  swaps=$((swaps + 1))
done
train "$d.b.log" --resume "$d" --stop-at 6
rc=$?
if [ "$swaps" -eq 6 ] && [ $rc -eq 1 ] && grep -q "$f: checksum mismatch .*names, shapes or offsets" "$d.b.log" &&
  grep -q "swap holds no valid checkpoint" "$d.b.log"; then
  ok "two tensor names swapped in the header: checksum mismatch, nothing loaded"
else
  bad "swapped tensor names ($swaps names edited, exit $rc)" "$d.b.log"
fi
exit $fail
