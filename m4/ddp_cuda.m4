# ddp_cuda.m4 - the CUDA toolkit: nvcc, the runtime, and target architectures.
#
# --with-cuda=guess|yes|no|DIR   where the toolkit is (default: guess = nvcc on
#                                PATH, else /usr/local/cuda)
# --with-cuda-arch=LIST          compute capabilities, e.g. "80 90" (default);
#                                the highest also embeds PTX so newer GPUs can
#                                JIT the kernels.
# nvcc is probed by compiling and linking a real kernel launch for the chosen
# architectures: finding the binary proves nothing about whether it works with
# the host compiler and those architectures. The runtime is then checked from
# the C compiler's side (cuda_runtime_api.h + -lcudart), which is how the
# library's C files use it.
#
# Sets NVCC, NVCCFLAGS (precious), NVCC_GENCODE, CUDA_CPPFLAGS, CUDA_LDFLAGS,
# CUDA_LIBS, ddp_have_cuda, ddp_cuda_home, ddp_cuda_version.
AC_DEFUN([DDP_CHECK_CUDA], [
  DDP_ARG_WITH_DIR([cuda], [build the CUDA backend with the toolkit in DIR])
  AC_ARG_WITH([cuda-arch], [AS_HELP_STRING([--with-cuda-arch=LIST],
              [CUDA compute capabilities to build for (default: "80 90")])],
              [ddp_cuda_arch=$withval], [ddp_cuda_arch="80 90"])
  AC_ARG_VAR([NVCC], [CUDA compiler])
  AC_ARG_VAR([NVCCFLAGS], [extra flags for nvcc (C compiler flags are never passed to it)])
  ddp_have_cuda=0
  ddp_cuda_home=
  ddp_cuda_version=
  NVCC_GENCODE=
  CUDA_CPPFLAGS=
  CUDA_LDFLAGS=
  CUDA_LIBS=
  AS_CASE([$ddp_with_cuda],
    [no], [],
    [guess|yes], [
      AS_IF([test -z "$NVCC"], [AC_PATH_PROG([NVCC], [nvcc], [], [$PATH$PATH_SEPARATOR/usr/local/cuda/bin])])],
    [ AS_IF([test -x "$ddp_with_cuda/bin/nvcc"], [NVCC="$ddp_with_cuda/bin/nvcc"],
            [AC_MSG_ERROR([--with-cuda=$ddp_with_cuda: $ddp_with_cuda/bin/nvcc does not exist])])])
  AS_IF([test "x$ddp_with_cuda" != xno && test -n "$NVCC"], [
    ddp_cuda_home=`AS_DIRNAME(["$NVCC"])`
    ddp_cuda_home=`AS_DIRNAME(["$ddp_cuda_home"])`
    ddp_cuda_version=`"$NVCC" --version 2>/dev/null | sed -n 's/.*release \([[0-9.]]*\).*/\1/p'`
    # Architecture list -> gencode flags; the last (highest) one also gets PTX.
    ddp_cuda_arch_list=`echo "$ddp_cuda_arch" | tr ',;' '  '`
    ddp_last_arch=
    for ddp_a in $ddp_cuda_arch_list; do
      AS_CASE([$ddp_a], [[[1-9][0-9]]|[[1-9][0-9][0-9]]|[[1-9][0-9]a]|[[1-9][0-9][0-9]a]], [],
              [AC_MSG_ERROR([--with-cuda-arch: '$ddp_a' is not a compute capability like 80 or 90])])
      NVCC_GENCODE="$NVCC_GENCODE -gencode arch=compute_$ddp_a,code=sm_$ddp_a"
      ddp_last_arch=$ddp_a
    done
    AS_IF([test -n "$ddp_last_arch"],
          [NVCC_GENCODE="$NVCC_GENCODE -gencode arch=compute_$ddp_last_arch,code=compute_$ddp_last_arch"],
          [AC_MSG_ERROR([--with-cuda-arch is empty])])
    AC_MSG_CHECKING([whether $NVCC compiles and links a kernel launch for sm_$ddp_cuda_arch_list])
    cat > conftest.cu <<_DDP_EOF
#include <cuda_runtime.h>
static __global__ void ddp_probe(int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[[i]] = i;
}
int main(void) {
  int *d = 0;
  ddp_probe<<<1, 32>>>(d, 0);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
_DDP_EOF
    AS_IF([AC_RUN_LOG(["$NVCC" $NVCC_GENCODE $NVCCFLAGS -o conftest$EXEEXT conftest.cu])],
          [ddp_have_cuda=1; AC_MSG_RESULT([yes])],
          [AC_MSG_RESULT([no])
           DDP_PROBE_FAILED([cuda], [$ddp_with_cuda],
             [$NVCC could not compile and link a kernel for '$ddp_cuda_arch' (see config.log)])])
    rm -f conftest.cu conftest$EXEEXT
  ], [AS_IF([test "x$ddp_with_cuda" = xyes], [AC_MSG_ERROR([--with-cuda=yes, but nvcc was not found])])])

  AS_IF([test $ddp_have_cuda = 1], [
    ddp_cuda_libdir="$ddp_cuda_home/lib64"
    AS_IF([test -d "$ddp_cuda_libdir"], [], [ddp_cuda_libdir="$ddp_cuda_home/lib"])
    # -isystem: the toolkit headers are not -Wundef/-Wstrict-prototypes clean.
    CUDA_CPPFLAGS="-isystem $ddp_cuda_home/include"
    # rpath: the toolkit's lib dir is rarely in the loader's default path.
    CUDA_LDFLAGS="-L$ddp_cuda_libdir -Wl,-rpath,$ddp_cuda_libdir"
    DDP_SAVE_FLAGS
    CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
    LDFLAGS="$LDFLAGS $CUDA_LDFLAGS"
    AC_MSG_CHECKING([for cudaGetDeviceCount in -lcudart])
    LIBS="-lcudart $LIBS"
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cuda_runtime_api.h>]],
                                    [[int n; return (int)cudaGetDeviceCount(&n);]])],
      [AC_MSG_RESULT([yes])
       # nvcc emits C++ objects (static guards, exceptions ABI): link libstdc++.
       CUDA_LIBS="-lcudart -lstdc++"],
      [AC_MSG_RESULT([no]); ddp_have_cuda=0
       DDP_PROBE_FAILED([cuda], [$ddp_with_cuda],
                        [the C compiler cannot use cuda_runtime_api.h with -lcudart from $ddp_cuda_home])])
    DDP_RESTORE_FLAGS
  ])
  AS_IF([test $ddp_have_cuda = 1], [DDP_CHECK_CUBLAS])
  AC_SUBST([NVCC_GENCODE])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([CUDA_LDFLAGS])
  AC_SUBST([CUDA_LIBS])
  DDP_DEFINE_HAVE([CUDA], [$ddp_have_cuda], [Define to 1 when the CUDA backend is built.])
  AC_DEFINE_UNQUOTED([DDP_CUDA_ARCH], ["$ddp_cuda_arch"], [CUDA architectures built for.])
  AM_CONDITIONAL([DDP_HAVE_CUDA], [test $ddp_have_cuda = 1])
])
