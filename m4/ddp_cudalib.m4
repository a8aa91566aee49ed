# ddp_cudalib.m4 - cuDNN and NCCL, each --with-X=guess|yes|no|DIR.
#
# Both ship either as system packages (header in DIR/include, libX.so in
# DIR/lib64 or DIR/lib) or inside Python wheels, which carry only the
# versioned libX.so.N and no libX.so; DDP_FIND_VERSIONED_LIB links those by
# file name (-l:libX.so.N) so a GPU host with only PyTorch's copies works.
# Neither is useful without the CUDA backend.

# DDP_FIND_VERSIONED_LIB(LIBNAME, DIRS, RESULT-VAR) -> "-LDIR -lNAME" or
# "-LDIR -l:libNAME.so.N", empty when not found.
AC_DEFUN([DDP_FIND_VERSIONED_LIB], [
  $3=
  for ddp_d in $2; do
    AS_IF([test -e "$ddp_d/lib$1.so"], [$3="-L$ddp_d -Wl,-rpath,$ddp_d -l$1"; break])
    ddp_f=`ls "$ddp_d"/lib$1.so.[[0-9]]* 2>/dev/null | sed -n '1p'`
    AS_IF([test -n "$ddp_f"], [$3="-L$ddp_d -Wl,-rpath,$ddp_d -l:`basename $ddp_f`"; break])
  done
])

# DDP_CHECK_CUDA_LIB(NAME, UPPER, HEADER, LIBNAME, PROLOGUE, BODY, DESCRIPTION)
AC_DEFUN([DDP_CHECK_CUDA_LIB], [
  DDP_ARG_WITH_DIR([$1], [use $7 from DIR])
  ddp_have_$1=0
  $2_CPPFLAGS=
  $2_LIBS=
  AS_IF([test "x$ddp_with_$1" != xno], [
    AS_IF([test $ddp_have_cuda = 0], [
      AS_CASE([$ddp_with_$1], [guess], [],
              [AC_MSG_ERROR([--with-$1=$ddp_with_$1 needs the CUDA backend, which is not being built])])
    ], [
      AS_CASE([$ddp_with_$1],
        [guess|yes], [ddp_roots="$ddp_cuda_home /usr /usr/local"],
        [ddp_roots="$ddp_with_$1"])
      AC_MSG_CHECKING([for $7])
      ddp_found=
      for ddp_r in $ddp_roots; do
        for ddp_inc in "$ddp_r/include" "$ddp_r/include/x86_64-linux-gnu"; do
          AS_IF([test -f "$ddp_inc/$3"], [
            DDP_FIND_VERSIONED_LIB([$4], ["$ddp_r/lib64" "$ddp_r/lib" "$ddp_r/lib/x86_64-linux-gnu" /usr/lib/x86_64-linux-gnu], [ddp_libflags])
            AS_IF([test -n "$ddp_libflags"], [ddp_found="$ddp_inc"; break 2])
          ])
        done
      done
      AS_IF([test -n "$ddp_found"], [
        DDP_SAVE_FLAGS
        CPPFLAGS="$CPPFLAGS -I$ddp_found $CUDA_CPPFLAGS"
        LDFLAGS="$LDFLAGS $CUDA_LDFLAGS"
        LIBS="$ddp_libflags $CUDA_LIBS $LIBS"
        AC_LINK_IFELSE([AC_LANG_PROGRAM([$5], [$6])], [
          ddp_have_$1=1
          # System headers (not warning-clean); /usr/include needs no flag.
          AS_IF([test "x$ddp_found" != x/usr/include], [$2_CPPFLAGS="-isystem $ddp_found"])
          $2_LIBS="$ddp_libflags"
        ])
        DDP_RESTORE_FLAGS
      ])
      AS_IF([test $ddp_have_$1 = 1], [AC_MSG_RESULT([$ddp_found])], [
        AC_MSG_RESULT([no])
        DDP_PROBE_FAILED([$1], [$ddp_with_$1], [$7 ($3 and a linkable lib$4) was not found under $ddp_roots])
      ])
    ])
  ])
  AC_SUBST([$2_CPPFLAGS])
  AC_SUBST([$2_LIBS])
  DDP_DEFINE_HAVE([$2], [$ddp_have_$1], [Define to 1 when $7 is available.])
  AM_CONDITIONAL([DDP_HAVE_$2], [test $ddp_have_$1 = 1])
])

AC_DEFUN([DDP_CHECK_CUDNN], [
  DDP_CHECK_CUDA_LIB([cudnn], [CUDNN], [cudnn.h], [cudnn], [[#include <cudnn.h>]],
                     [[cudnnHandle_t h; return (int)cudnnCreate(&h);]], [cuDNN])
])

AC_DEFUN([DDP_CHECK_NCCL], [
  DDP_CHECK_CUDA_LIB([nccl], [NCCL], [nccl.h], [nccl], [[#include <nccl.h>]],
                     [[ncclComm_t c; ncclUniqueId id; return (int)ncclCommInitRank(&c, 1, id, 0);]], [NCCL])
])
