# ddp_openblas.m4 - OpenBLAS's CBLAS (required: the CPU backend's GEMM).
# pkg-config first (Debian's openblas.pc points at the threaded variant), then
# a plain search for cblas_sgemm in -lopenblas. openblas_set_num_threads is
# OpenBLAS-specific; its presence is recorded so thread control can use it.
AC_DEFUN([DDP_CHECK_OPENBLAS], [
  PKG_CHECK_MODULES([OPENBLAS], [openblas], [], [
    OPENBLAS_CFLAGS=
    OPENBLAS_LIBS=-lopenblas
  ])
  DDP_SAVE_FLAGS
  CPPFLAGS="$CPPFLAGS $OPENBLAS_CFLAGS"
  LIBS="$OPENBLAS_LIBS $LIBS"
  AC_CHECK_HEADER([cblas.h], [],
    [AC_MSG_ERROR([cblas.h not found: install OpenBLAS (Debian: libopenblas-dev)])])
  AC_MSG_CHECKING([for cblas_sgemm in $OPENBLAS_LIBS])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cblas.h>]],
      [[float a = 1, b = 1, c = 0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([cblas_sgemm does not link with $OPENBLAS_LIBS: install OpenBLAS (Debian: libopenblas-dev)])])
  AC_CHECK_FUNCS([openblas_set_num_threads openblas_get_config])
  DDP_RESTORE_FLAGS
  AS_IF([test "x$ac_cv_func_openblas_set_num_threads" = xyes], [ddp_have_openblas_threads=1],
        [ddp_have_openblas_threads=0])
  DDP_DEFINE_HAVE([OPENBLAS_THREADS], [$ddp_have_openblas_threads],
                  [Define to 1 when openblas_set_num_threads is available.])
])
