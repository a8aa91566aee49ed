# ddp_cublas.m4 - cuBLAS and cuBLASLt (part of the CUDA backend; called by
# DDP_CHECK_CUDA once the runtime works). The probe is for the _v2 entry
# point, which is what cublas_v2.h maps cublasSgemm to; finding only the
# legacy symbol would mean a toolkit too old for this code. Without cuBLAS
# there is no CUDA GEMM, so the CUDA backend is disabled (guess) or configure
# stops (explicit --with-cuda).
AC_DEFUN([DDP_CHECK_CUBLAS], [
  DDP_SAVE_FLAGS
  CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
  LDFLAGS="$LDFLAGS $CUDA_LDFLAGS"
  LIBS="-lcublasLt -lcublas $CUDA_LIBS $LIBS"
  AC_MSG_CHECKING([for cublasSgemm_v2 and cublasLtMatmul])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cublas_v2.h>
#include <cublasLt.h>]],
      [[cublasHandle_t h = 0; float a = 0;
        (void)cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &a, &a, 1, &a, 1, &a, &a, 1);
        (void)cublasLtMatmul(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);]])],
    [AC_MSG_RESULT([yes]); CUDA_LIBS="-lcublasLt -lcublas $CUDA_LIBS"],
    [AC_MSG_RESULT([no]); ddp_have_cuda=0
     DDP_PROBE_FAILED([cuda], [$ddp_with_cuda], [cuBLAS (cublasSgemm_v2, cublasLtMatmul) does not link])])
  DDP_RESTORE_FLAGS
])
