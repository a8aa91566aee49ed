# ddp_zlib.m4 - zlib (required): the CRC-32 that checkpoints carry to detect
# corruption. Through pkg-config.
AC_DEFUN([DDP_CHECK_ZLIB], [
  PKG_CHECK_MODULES([ZLIB], [zlib >= 1.2], [],
    [AC_MSG_ERROR([zlib >= 1.2 not found: install it (Debian: zlib1g-dev)])])
])
