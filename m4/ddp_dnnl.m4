# ddp_dnnl.m4 - oneDNN (--with-dnnl=guess|yes|no|DIR, default guess).
# The CPU backend's convolution, batch normalization and max pooling run
# through its primitives (src/backend/cpu/cpu_conv*.c). Debian's libdnnl-dev ships no
# pkg-config file, so the probe looks for dnnl.h and links dnnl_version
# against -ldnnl (under DIR/include and DIR/lib when a DIR is given).
# Without it everything else builds, and those ops report that this build
# has no oneDNN.
AC_DEFUN([DDP_CHECK_DNNL], [
  DDP_ARG_WITH_DIR([dnnl], [use oneDNN for the CPU convolution, batch norm and pooling])
  ddp_have_dnnl=0
  ddp_have_dnnl_omp=0
  DNNL_CPPFLAGS=
  DNNL_LIBS=
  AS_IF([test "x$ddp_with_dnnl" != xno], [
    AS_CASE([$ddp_with_dnnl],
      [guess|yes], [],
      [AS_IF([test -f "$ddp_with_dnnl/include/dnnl.h"], [],
             [AC_MSG_ERROR([--with-dnnl=$ddp_with_dnnl: $ddp_with_dnnl/include/dnnl.h does not exist])])
       DNNL_CPPFLAGS="-I$ddp_with_dnnl/include"
       DNNL_LIBS="-L$ddp_with_dnnl/lib -Wl,-rpath,$ddp_with_dnnl/lib"])
    DNNL_LIBS="$DNNL_LIBS -ldnnl"
    DDP_SAVE_FLAGS
    CPPFLAGS="$CPPFLAGS $DNNL_CPPFLAGS"
    LIBS="$DNNL_LIBS $LIBS"
    AC_MSG_CHECKING([for oneDNN (dnnl.h, dnnl_version in -ldnnl)])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <dnnl.h>]],
        [[#if DNNL_VERSION_MAJOR < 2
          #error "oneDNN 2.x or later needed"
          #endif
          return dnnl_version()->major < 2;]])],
      [AC_MSG_RESULT([yes]); ddp_have_dnnl=1],
      [AC_MSG_RESULT([no])])
    # Debian's oneDNN runs on OpenMP, whose team defaults to every core: the
    # ops size it to the backend's thread count instead (ranks sharing a
    # node must not oversubscribe it), which needs omp_set_num_threads.
    AS_IF([test $ddp_have_dnnl = 1], [
      AC_MSG_CHECKING([whether oneDNN runs on OpenMP (omp_set_num_threads in -lgomp)])
      LIBS="$DNNL_LIBS -lgomp $ddp_save_LIBS"
      AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <dnnl.h>
                                        #include <omp.h>]],
          [[#if DNNL_CPU_RUNTIME != DNNL_RUNTIME_OMP
            #error "not an OpenMP build"
            #endif
            omp_set_num_threads(1);]])],
        [AC_MSG_RESULT([yes]); DNNL_LIBS="$DNNL_LIBS -lgomp"; ddp_have_dnnl_omp=1],
        [AC_MSG_RESULT([no])])
    ])
    DDP_RESTORE_FLAGS
    AS_IF([test $ddp_have_dnnl = 0], [
      ddp_have_dnnl_omp=0
      DNNL_CPPFLAGS=
      DNNL_LIBS=
      DDP_PROBE_FAILED([dnnl], [$ddp_with_dnnl],
                       [oneDNN >= 2 (dnnl.h and -ldnnl) was not found (Debian: libdnnl-dev)])
    ])
  ])
  AC_SUBST([DNNL_CPPFLAGS])
  AC_SUBST([DNNL_LIBS])
  DDP_DEFINE_HAVE([DNNL], [$ddp_have_dnnl], [Define to 1 when oneDNN is available.])
  DDP_DEFINE_HAVE([DNNL_OMP], [$ddp_have_dnnl_omp],
                  [Define to 1 when oneDNN runs on OpenMP and its team size can be set.])
])
