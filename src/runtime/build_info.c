/* --version and --build-info (see ddptrain/version.h). The DDP_HAVE_* macros
 * are read here, once, rather than by the code that uses the features. */
#include <config.h>

#include <cblas.h>
#include <string.h>
#if DDP_HAVE_HWLOC
#include <hwloc.h>
#endif
#if DDP_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif
#if DDP_HAVE_CUDNN
#include <cudnn.h>
#endif
#if DDP_HAVE_NCCL
#include <nccl.h>
#endif

#include "backend/cpu/cpu_dnnl.h"
#include "ddptrain/backend.h"
#include "ddptrain/version.h"
#include "runtime/dist.h"

#if DDP_HAVE_OPENBLAS_THREADS
char *openblas_get_config(void);
#endif

const char *ddp_version(void) {
  return PACKAGE_VERSION;
}

const char *ddp_build_backends(void) {
  static char buf[64];
  if (!buf[0]) {
    for (const ddp_backend_ops_t *const *r = ddp_backend_registry(); *r; ++r) {
      if (buf[0]) strncat(buf, ", ", sizeof buf - strlen(buf) - 1);
      strncat(buf, (*r)->name, sizeof buf - strlen(buf) - 1);
    }
  }
  return buf;
}

static void row(FILE *out, const char *what, int have, const char *detail) {
  fprintf(out, "  %-10s %s%s%s\n", what, have ? "yes" : "no", detail && *detail ? "  " : "",
          detail && *detail ? detail : "");
}

void ddp_build_info_print(FILE *out) {
  char buf[160];
  fprintf(out, "ddptrain %s\n", ddp_version());
  fprintf(out, "backends: %s\n", ddp_build_backends());
  fprintf(out, "dependencies:\n");
  row(out, "MPI", DDP_HAVE_MPI, DDP_HAVE_MPI ? ddp_dist_library() : "");
#if DDP_HAVE_OPENBLAS_THREADS
  row(out, "OpenBLAS", 1, openblas_get_config());
#else
  row(out, "CBLAS", 1, "");
#endif
  row(out, "oneDNN", DDP_HAVE_DNNL, ddp_cpu_dnnl_version());
  /* ddpprep --images folder links these, ddptrain does not: the versions
   * are the ones configure found */
  row(out, "libpng", DDP_HAVE_PNG, DDP_PNG_VERSION);
  row(out, "libjpeg", DDP_HAVE_JPEG, DDP_JPEG_VERSION);
#if DDP_HAVE_HWLOC
  snprintf(buf, sizeof buf, "API %#x", (unsigned)hwloc_get_api_version());
  row(out, "hwloc", 1, buf);
#else
  row(out, "hwloc", 0, "");
#endif
#if DDP_HAVE_CUDA
  int rt = 0, drv = 0, ndev = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
  snprintf(buf, sizeof buf, "runtime %d.%d, driver %d.%d, %d GPU%s visible, built for sm %s",
           rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10, ndev, ndev == 1 ? "" : "s",
           DDP_CUDA_ARCH);
  row(out, "CUDA", 1, buf);
  snprintf(buf, sizeof buf, "%d.%d.%d", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);
  row(out, "cuBLAS", 1, buf);
#else
  row(out, "CUDA", 0, "");
#endif
#if DDP_HAVE_CUDNN
  size_t v = cudnnGetVersion();
  snprintf(buf, sizeof buf, "%zu (built with %d.%d.%d)", v, CUDNN_MAJOR, CUDNN_MINOR,
           CUDNN_PATCHLEVEL);
  row(out, "cuDNN", 1, buf);
#else
  row(out, "cuDNN", 0, "");
#endif
#if DDP_HAVE_NCCL
  int nv = 0;
  ncclGetVersion(&nv);
  snprintf(buf, sizeof buf, "%d", nv);
  row(out, "NCCL", 1, buf);
#else
  row(out, "NCCL", 0, "");
#endif
  row(out, "sanitizers", DDP_BUILD_SANITIZERS, "");
}
