# ddp_mpi.m4 - MPI detection (--with-mpi=guess|yes|no).
#
# DDP_MPI_CC must run before AC_PROG_CC: when MPI is wanted and the user did
# not choose CC, the compiler becomes mpicc, which carries MPI's include and
# library flags itself (the wrapper knows the right ones for its own install,
# which pkg-config files often do not). DDP_CHECK_MPI then proves MPI_Init
# links, and finds mpirun for the multi-rank tests. When CC was chosen (set
# in the environment, as some GPU images do, or CC=clang on the command
# line) and does not link MPI by itself, the user's compiler is kept and the
# wrapper's own compile and link flags are borrowed (Open MPI's --showme,
# MPICH's -compile-info/-link-info).
AC_DEFUN([DDP_MPI_CC], [
  AC_ARG_WITH([mpi], [AS_HELP_STRING([--with-mpi=guess|yes|no],
              [build with MPI, compiling with mpicc (default: guess)])],
              [ddp_with_mpi=$withval], [ddp_with_mpi=guess])
  AS_IF([test "x$ddp_with_mpi" != xno && test -z "$CC"], [
    AC_PATH_PROGS([MPICC], [mpicc mpicc.openmpi])
    AS_IF([test -n "$MPICC"], [CC=$MPICC; ddp_mpi_cc_chosen=1])
  ])
])

# DDP_MPI_BORROW_FLAGS: CC is the user's and does not link MPI: try it with
# the flags of the MPI wrapper found on PATH; on success they stay in
# CPPFLAGS and LIBS for the whole build, as the wrapper would add them.
AC_DEFUN([DDP_MPI_BORROW_FLAGS], [
  AC_PATH_PROGS([MPICC], [mpicc mpicc.openmpi])
  AS_IF([test -n "$MPICC"], [
    ddp_mpi_cflags=`$MPICC --showme:compile 2>/dev/null` ||
      ddp_mpi_cflags=`$MPICC -compile-info 2>/dev/null | cut -d' ' -f2-`
    ddp_mpi_ldflags=`$MPICC --showme:link 2>/dev/null` ||
      ddp_mpi_ldflags=`$MPICC -link-info 2>/dev/null | cut -d' ' -f2-`
    AC_MSG_CHECKING([whether $CC links MPI programs with the flags of $MPICC])
    DDP_SAVE_FLAGS
    CPPFLAGS="$CPPFLAGS $ddp_mpi_cflags"
    LIBS="$ddp_mpi_ldflags $LIBS"
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
                    [[int provided; MPI_Init_thread(0, 0, MPI_THREAD_MULTIPLE, &provided);
                      MPI_Finalize();]])],
                   [ddp_have_mpi=1; AC_MSG_RESULT([yes])],
                   [DDP_RESTORE_FLAGS
                    AC_MSG_RESULT([no])])
  ])
])

AC_DEFUN([DDP_CHECK_MPI], [
  AC_REQUIRE([DDP_MPI_CC])
  ddp_have_mpi=0
  AS_IF([test "x$ddp_with_mpi" != xno], [
    AC_MSG_CHECKING([whether $CC compiles and links MPI programs])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
                    [[int provided; MPI_Init_thread(0, 0, MPI_THREAD_MULTIPLE, &provided);
                      MPI_Finalize();]])],
                   [ddp_have_mpi=1; AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no])])
    AS_IF([test $ddp_have_mpi = 0 && test "x$ddp_mpi_cc_chosen" != x1], [DDP_MPI_BORROW_FLAGS])
    AS_IF([test $ddp_have_mpi = 0],
          [DDP_PROBE_FAILED([mpi], [$ddp_with_mpi],
                            [no working MPI (mpicc not found or mpi.h/MPI_Init_thread unusable)])])
  ])
  AS_IF([test $ddp_have_mpi = 1], [
    AC_PATH_PROGS([MPIRUN], [mpirun mpiexec mpirun.openmpi])
    AS_IF([$MPIRUN --version 2>&1 | grep -q "Open MPI"], [ddp_mpi_impl="Open MPI"],
          [ddp_mpi_impl="MPI"])
  ])
  AC_SUBST([MPIRUN])
  DDP_DEFINE_HAVE([MPI], [$ddp_have_mpi], [Define to 1 when built with MPI.])
  AM_CONDITIONAL([DDP_HAVE_MPI], [test $ddp_have_mpi = 1])
])
