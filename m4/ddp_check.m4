# ddp_check.m4 - the Check unit-test framework (>= 0.15) through pkg-config.
# Without it the library and programs still build; `make check` then stops
# with a message saying what to install instead of silently testing nothing.
AC_DEFUN([DDP_CHECK_CHECK], [
  PKG_CHECK_MODULES([CHECK], [check >= 0.15], [ddp_have_check=1], [ddp_have_check=0
    AC_MSG_WARN([Check >= 0.15 not found: 'make check' will fail until it is installed (Debian: check)])])
  AM_CONDITIONAL([DDP_HAVE_CHECK], [test $ddp_have_check = 1])
])
