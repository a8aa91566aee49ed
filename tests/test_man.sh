#!/bin/sh
# The man pages: ddptrain.1, ddpprep.1 and ddpsample.1 (help2man, from
# --help, at build time; shipped in the tarball for builds without
# help2man) and the hand-written ddprun.1. Each page exists in the build or the source tree,
# renders with groff (and man -l, where man-db is installed) without a
# warning, and names every long flag its program's --help lists, so that a
# page cannot fall behind a new flag unnoticed. SKIPs (77) without groff.
. "${top_builddir:-.}/tests/env.sh"
set -u
command -v groff > /dev/null 2>&1 || { echo "SKIP: groff is not installed (Debian: groff-base)"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0 checked=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
help2man=$(sed -n 's/^HELP2MAN = //p' "$top_builddir/Makefile")

# page NAME: the page a build installs (the build's own, else the shipped one)
page() {
  if [ -f "$top_builddir/man/$1.1" ]; then echo "$top_builddir/man/$1.1"
  elif [ -f "$top_srcdir/man/$1.1" ]; then echo "$top_srcdir/man/$1.1"; fi
}

# check NAME PROGRAM: the page of NAME against PROGRAM --help
check() {
  name=$1 prog=$2 p=$(page "$1")
  if [ -z "$p" ]; then
    if [ -z "$help2man" ] && [ "$name" != ddprun ]; then
      echo "note: no $name.1: configure found no help2man and the source tree has none (a git checkout)"
      return
    fi
    bad "$name.1 is neither in the build nor in the source tree"
    return
  fi
  checked=$((checked + 1))
  # -ww: every warning; -z: no output, only the diagnostics
  if groff -man -Tutf8 -ww -z "$p" > "$dir/warn" 2>&1 && [ ! -s "$dir/warn" ]; then
    ok "$name.1 renders without warnings ($p)"
  else
    bad "$name.1: groff warns:"; sed 's/^/  | /' "$dir/warn"
  fi
  if command -v man > /dev/null 2>&1; then
    if MANWIDTH=80 man --warnings -l "$p" > /dev/null 2> "$dir/warn" && [ ! -s "$dir/warn" ]; then
      ok "$name.1: man -l renders it without warnings"
    else
      bad "$name.1: man -l:"; sed 's/^/  | /' "$dir/warn"
    fi
  fi
  # the text as a reader sees it: wide lines, no hyphenation, plain ASCII
  groff -man -Tascii -rLL=400n -rHY=0 -P-cbu "$p" 2> /dev/null > "$dir/text"
  grep -q "^NAME" "$dir/text" && grep -q "^SYNOPSIS" "$dir/text" || bad "$name.1 lacks NAME or SYNOPSIS"
  # option rows start at most 8 columns in; deeper lines continue a row
  "$prog" --help 2> /dev/null | grep -oE '^ {1,8}(-[A-Za-z], )?--[A-Za-z0-9][A-Za-z0-9-]*' |
    sed 's/.*--/--/' | sort -u > "$dir/flags"
  n=$(wc -l < "$dir/flags")
  [ "$n" -ge 5 ] || { bad "$prog --help lists only $n flags"; return; }
  missing=
  while read -r f; do
    grep -qE -- "(^|[^A-Za-z0-9-])$f([^A-Za-z0-9-]|\$)" "$dir/text" || missing="$missing $f"
  done < "$dir/flags"
  if [ -z "$missing" ]; then
    ok "$name.1 names all $n long flags of $name --help"
  else
    bad "$name.1 lacks flags of its --help:$missing"
  fi
}
check ddptrain "$DDPTRAIN"
check ddpprep "$top_builddir/ddpprep"
check ddpsample "$top_builddir/ddpsample"
check ddprun "$top_srcdir/launch/ddprun"
# what --help leaves out, from man/ddptrain.h2m
if p=$(page ddptrain) && [ -n "$p" ]; then
  groff -man -Tascii -rLL=400n -rHY=0 -P-cbu "$p" 2> /dev/null | grep -q "^CONFIGURATION FILE" &&
    ok "ddptrain.1 has the CONFIGURATION FILE section" || bad "ddptrain.1 lacks CONFIGURATION FILE"
fi
# and from man/ddpsample.h2m: its own NAME line and the examples
if p=$(page ddpsample) && [ -n "$p" ]; then
  groff -man -Tascii -rLL=400n -rHY=0 -P-cbu "$p" 2> /dev/null > "$dir/sample"
  grep -q "^EXAMPLES" "$dir/sample" && grep -q "ddpsample - continue a prompt" "$dir/sample" &&
    ok "ddpsample.1 has its NAME line and EXAMPLES" || bad "ddpsample.1 lacks its NAME line or EXAMPLES"
fi
[ "$checked" -gt 0 ] || [ "$fail" -ne 0 ] || { echo "SKIP: no page to check"; exit 77; }
exit $fail
