# ddp_docs.m4 - what the system-facing files need: help2man for the man pages
# of ddptrain, ddpprep and ddpsample, and where bash completions are installed.

# DDP_CHECK_HELP2MAN: HELP2MAN, and the conditional DDP_HAVE_HELP2MAN. With
# it the pages are made from the programs' --help at build time, so they
# cannot fall behind a new flag; without it (or cross-compiling: the built
# programs cannot run here) the pages shipped in the tarball are installed.
AC_DEFUN([DDP_CHECK_HELP2MAN], [
  AC_ARG_VAR([HELP2MAN], [help2man, which makes the man pages from --help])
  AC_PATH_PROG([HELP2MAN], [help2man])
  AS_IF([test "x$cross_compiling" = xyes], [HELP2MAN=])
  AM_CONDITIONAL([DDP_HAVE_HELP2MAN], [test -n "$HELP2MAN"])
  # the pages a tarball carries, for a build without help2man
  AM_CONDITIONAL([DDP_SHIPPED_MAN], [test -f "$srcdir/man/ddptrain.1" && test -f "$srcdir/man/ddpprep.1" &&
                                      test -f "$srcdir/man/ddpsample.1"])
])

# DDP_BASH_COMPLETION_DIR: bashcompdir, where the completion scripts go.
# --with-bash-completion-dir=DIR names it, =no installs none; by default it
# is bash-completion's own completionsdir (pkg-config), moved under this
# prefix (so `make install` and distcheck stay inside it), else
# $(datadir)/bash-completion/completions.
AC_DEFUN([DDP_BASH_COMPLETION_DIR], [
  AC_ARG_WITH([bash-completion-dir],
    [AS_HELP_STRING([--with-bash-completion-dir=DIR],
                    [install the bash completions in DIR (no: none) @<:@bash-completion's completionsdir under PREFIX, else DATADIR/bash-completion/completions@:>@])],
    [], [with_bash_completion_dir=yes])
  AC_MSG_CHECKING([where bash completions go])
  AS_CASE([$with_bash_completion_dir],
    [yes], [bashcompdir=
            AS_IF([test -n "$PKG_CONFIG"],
                  [bashcompdir=`$PKG_CONFIG --define-variable=prefix='${prefix}' \
                     --define-variable=datadir='${datadir}' --variable=completionsdir bash-completion 2>/dev/null`])
            AS_IF([test -z "$bashcompdir"], [bashcompdir='${datadir}/bash-completion/completions'])],
    [no], [bashcompdir=],
    [bashcompdir=$with_bash_completion_dir])
  AC_MSG_RESULT([${bashcompdir:-none}])
  AC_SUBST([bashcompdir])
  AM_CONDITIONAL([DDP_BASH_COMPLETION], [test -n "$bashcompdir"])
])
