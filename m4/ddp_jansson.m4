# ddp_jansson.m4 - jansson (required): JSON for safetensors headers, the
# JSONL metrics and configuration records. Through pkg-config.
AC_DEFUN([DDP_CHECK_JANSSON], [
  PKG_CHECK_MODULES([JANSSON], [jansson >= 2.10], [],
    [AC_MSG_ERROR([jansson >= 2.10 not found: install it (Debian: libjansson-dev)])])
])
