#!/bin/sh
# `make install` gives a usable library: install into a scratch DESTDIR, then
# build and run examples/backend_gemm.c against it using only ddptrain.pc, as
# a user's program would.
. "${top_builddir:-.}/tests/env.sh"
set -u
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
if ! make -s -C "$top_builddir" install DESTDIR="$dest" > "$dest/install.log" 2>&1; then
  echo "FAIL: make install"; tail -20 "$dest/install.log"; exit 1
fi
pc=$(find "$dest" -name ddptrain.pc | head -n 1)
[ -n "$pc" ] || { echo "FAIL: ddptrain.pc was not installed"; exit 1; }
for h in ddptrain.h backend.h status.h; do
  find "$dest" -path "*/include/ddptrain/$h" | grep -q . || { echo "FAIL: $h not installed"; exit 1; }
done
find "$dest" -name 'ddptrain' -type f -perm -u+x | grep -q . || { echo "FAIL: program not installed"; exit 1; }
find "$dest" -path '*/bin/ddpsample' -perm -u+x | grep -q . || { echo "FAIL: ddpsample not installed"; exit 1; }
find "$dest" -path '*/bin/ddprun' -perm -u+x | grep -q . || { echo "FAIL: ddprun not installed"; exit 1; }
find "$dest" -path '*/bin/ddpplot' -perm -u+x | grep -q . || { echo "FAIL: ddpplot not installed"; exit 1; }
# The SLURM templates source their helper from where it was installed.
for t in ddptrain-1node.sbatch ddptrain-multinode.sbatch; do
  tpl=$(find "$dest" -path "*/slurm/$t" | head -n 1)
  [ -n "$tpl" ] || { echo "FAIL: SLURM template $t not installed"; exit 1; }
  helper=$(sed -n 's/.*DDPTRAIN_SLURM_DIR:-\([^}]*\)}.*/\1/p' "$tpl")/ddptrain-job.sh
  [ -f "$dest$helper" ] || { echo "FAIL: $t sources $helper, which is not installed"; exit 1; }
done
# The man pages (the generated three only where help2man or the tarball made
# them) and the bash completion under each program's name.
mans=ddprun
if [ -n "$(sed -n 's/^HELP2MAN = //p' "$top_builddir/Makefile")" ] || [ -f "$top_srcdir/man/ddptrain.1" ]; then
  mans="ddptrain ddpprep ddpsample ddprun"
fi
for m in $mans; do
  find "$dest" -path "*/man/man1/$m.1" | grep -q . || { echo "FAIL: man page $m.1 not installed"; exit 1; }
done
compdir=$(sed -n 's/^bashcompdir = //p' "$top_builddir/Makefile")
if [ -n "$compdir" ]; then
  for p in ddptrain ddpprep ddpsample ddprun; do
    find "$dest" -path "*/bash-completion/completions/$p" | grep -q . ||
      { echo "FAIL: bash completion for $p not installed (in $compdir)"; exit 1; }
    # what bash-completion does on first use: source the file of that name
    if command -v bash > /dev/null 2>&1; then
      f=$(find "$dest" -path "*/bash-completion/completions/$p" | head -n 1)
      bash -c '. "$1" && complete -p "$2"' sh "$f" "$p" > /dev/null 2>&1 ||
        { echo "FAIL: sourcing the installed completion $f does not register $p"; exit 1; }
    fi
  done
fi
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$dest
flags=$(pkg-config --cflags --libs ddptrain) || { echo "FAIL: pkg-config ddptrain"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
cc=$(sed -n 's/^CC = //p' "$top_builddir/Makefile")
# shellcheck disable=SC2086
if ! $cc -std=gnu11 -o "$dest/backend_gemm" "$top_srcdir/examples/backend_gemm.c" $flags -lm \
     > "$dest/cc.log" 2>&1; then
  echo "FAIL: compiling the example against the installed library"; cat "$dest/cc.log"; exit 1
fi
# The install's libdir first, then whatever the environment already needs
# (dependencies outside the system paths, as on a host with them unpacked
# elsewhere): replacing it would test the environment, not the install.
if ! LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$dest/backend_gemm"; then
  echo "FAIL: the example did not run correctly"; exit 1
fi
echo "ok: installed library, headers, program and ddptrain.pc work (flags: $flags)"
