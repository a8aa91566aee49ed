/* Per-library check macros (internal).
 *
 * Each library gets one converter, defined beside the code that links that
 * library, and one-line macros built on the generator in ddptrain/check.h.
 * A converter returns DDP_OK for the library's success code; otherwise it logs
 * "<expression> failed: <library message>" with file:line (the rank comes from
 * the log prefix; CUDA converters add the device) and returns the mapped
 * ddp_status_t (out-of-memory codes map to DDP_ERR_OOM). */
#ifndef DDPTRAIN_FOREIGN_CHECK_H
#define DDPTRAIN_FOREIGN_CHECK_H

#include "ddptrain/check.h"

#ifdef __cplusplus
extern "C" {
#endif

ddp_status_t ddp_cuda_status_(long code, const char *expr, const char *file, int line);
ddp_status_t ddp_cublas_status_(long code, const char *expr, const char *file, int line);
ddp_status_t ddp_cudnn_status_(long code, const char *expr, const char *file, int line);
ddp_status_t ddp_nccl_status_(long code, const char *expr, const char *file, int line);
ddp_status_t ddp_mpi_status_(long code, const char *expr, const char *file, int line);

#ifdef __cplusplus
}
#endif

#define DDP_CUDA_CHECK(e) DDP_CHECK(DDP_FOREIGN_STATUS(ddp_cuda_status_, e))
#define DDP_CUDA_CHECK_GOTO(e, st, label) \
  DDP_CHECK_GOTO(DDP_FOREIGN_STATUS(ddp_cuda_status_, e), st, label)
#define DDP_CUBLAS_CHECK(e) DDP_CHECK(DDP_FOREIGN_STATUS(ddp_cublas_status_, e))
#define DDP_CUBLAS_CHECK_GOTO(e, st, label) \
  DDP_CHECK_GOTO(DDP_FOREIGN_STATUS(ddp_cublas_status_, e), st, label)
#define DDP_CUDNN_CHECK(e) DDP_CHECK(DDP_FOREIGN_STATUS(ddp_cudnn_status_, e))
#define DDP_CUDNN_CHECK_GOTO(e, st, label) \
  DDP_CHECK_GOTO(DDP_FOREIGN_STATUS(ddp_cudnn_status_, e), st, label)
#define DDP_NCCL_CHECK(e) DDP_CHECK(DDP_FOREIGN_STATUS(ddp_nccl_status_, e))
#define DDP_NCCL_CHECK_GOTO(e, st, label) \
  DDP_CHECK_GOTO(DDP_FOREIGN_STATUS(ddp_nccl_status_, e), st, label)
#define DDP_MPI_CHECK(e) DDP_CHECK(DDP_FOREIGN_STATUS(ddp_mpi_status_, e))
#define DDP_MPI_CHECK_GOTO(e, st, label) \
  DDP_CHECK_GOTO(DDP_FOREIGN_STATUS(ddp_mpi_status_, e), st, label)

#endif
