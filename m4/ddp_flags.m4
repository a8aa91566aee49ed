# ddp_flags.m4 - shared helpers for the dependency macros.
#
# DDP_SAVE_FLAGS / DDP_RESTORE_FLAGS bracket a probe that needs extra
# CPPFLAGS/LDFLAGS/LIBS, so one dependency's search paths never leak into the
# next probe or into the final link line.
AC_DEFUN([DDP_SAVE_FLAGS], [
  ddp_save_CPPFLAGS=$CPPFLAGS
  ddp_save_LDFLAGS=$LDFLAGS
  ddp_save_LIBS=$LIBS
])
AC_DEFUN([DDP_RESTORE_FLAGS], [
  CPPFLAGS=$ddp_save_CPPFLAGS
  LDFLAGS=$ddp_save_LDFLAGS
  LIBS=$ddp_save_LIBS
])

# DDP_DEFINE_HAVE(NAME, VALUE-0-OR-1, DESCRIPTION)
# Feature macros are always defined, to 0 or 1, and tested with #if under
# -Wundef, so a misspelt or missing macro is a compile error, not a silent 0.
AC_DEFUN([DDP_DEFINE_HAVE], [
  AC_DEFINE_UNQUOTED([DDP_HAVE_$1], [$2], [$3])
])

# DDP_ARG_WITH_DIR(NAME, HELP) - --with-NAME=guess|yes|no|DIR, default guess.
# Sets ddp_with_NAME. "yes" means "must be found"; a DIR means "must be found
# there"; both turn a failed probe into a configure error.
AC_DEFUN([DDP_ARG_WITH_DIR], [
  AC_ARG_WITH([$1], [AS_HELP_STRING([--with-$1=guess|yes|no|DIR], [$2 (default: guess)])],
              [ddp_with_$1=$withval], [ddp_with_$1=guess])
])

# DDP_PROBE_FAILED(NAME, WITH-VALUE, MESSAGE) - fail hard when the user asked
# for NAME explicitly, warn and continue in guess mode.
AC_DEFUN([DDP_PROBE_FAILED], [
  AS_CASE([$2],
    [guess], [AC_MSG_WARN([$3; building without $1])],
    [AC_MSG_ERROR([--with-$1=$2 was given, but $3])])
])
