/* Converters from CUDA-family error codes to ddp_status_t (see
 * src/foreign_check.h). Each logs the library's own message once, with the
 * failing operation, file:line, the rank and the current device, so a report
 * from rank 3 of 64 says which GPU and which call failed (wording in
 * backend/device_error.c, tested without a GPU). */
#include <config.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#if DDP_HAVE_CUDNN
#include <cudnn.h>
#endif
#if DDP_HAVE_NCCL
#include <nccl.h>
#endif

#include "backend/device_error.h"
#include "core/foreign_check.h"

static int current_device(void) {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) dev = -1;
  return dev;
}

static ddp_status_t report(ddp_status_t st, const char *lib, const char *expr, const char *msg,
                           long code, const char *file, int line) {
  char text[512];
  ddp_device_error_message(text, sizeof text, ddp_log_rank(), current_device(), expr, lib, msg,
                           code);
  ddp_log_at(DDP_LOG_LEVEL_ERROR, file, line, "%s", text);
  return st;
}

ddp_status_t ddp_cuda_status_(long code, const char *expr, const char *file, int line) {
  if (code == (long)cudaSuccess) return DDP_OK;
  cudaError_t err = (cudaError_t)code;
  ddp_status_t st = err == cudaErrorMemoryAllocation ? DDP_ERR_OOM
                    : (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver)
                        ? DDP_ERR_NO_DEVICE
                        : DDP_ERR_CUDA;
  return report(st, "CUDA", expr, cudaGetErrorString(err), code, file, line);
}

ddp_status_t ddp_cublas_status_(long code, const char *expr, const char *file, int line) {
  if (code == (long)CUBLAS_STATUS_SUCCESS) return DDP_OK;
  cublasStatus_t s = (cublasStatus_t)code;
  ddp_status_t st = s == CUBLAS_STATUS_ALLOC_FAILED    ? DDP_ERR_OOM
                    : s == CUBLAS_STATUS_INVALID_VALUE ? DDP_ERR_INVALID_ARG
                    : s == CUBLAS_STATUS_NOT_SUPPORTED ? DDP_ERR_UNSUPPORTED
                                                       : DDP_ERR_CUBLAS;
  return report(st, "cuBLAS", expr, cublasGetStatusString(s), code, file, line);
}

#if DDP_HAVE_CUDNN
ddp_status_t ddp_cudnn_status_(long code, const char *expr, const char *file, int line) {
  if (code == (long)CUDNN_STATUS_SUCCESS) return DDP_OK;
  cudnnStatus_t s = (cudnnStatus_t)code;
  ddp_status_t st = s == CUDNN_STATUS_ALLOC_FAILED ? DDP_ERR_OOM : DDP_ERR_CUDNN;
  return report(st, "cuDNN", expr, cudnnGetErrorString(s), code, file, line);
}
#endif

#if DDP_HAVE_NCCL
ddp_status_t ddp_nccl_status_(long code, const char *expr, const char *file, int line) {
  if (code == (long)ncclSuccess) return DDP_OK;
  ncclResult_t r = (ncclResult_t)code;
  ddp_status_t st =
      r == ncclInvalidArgument || r == ncclInvalidUsage ? DDP_ERR_INVALID_ARG : DDP_ERR_NCCL;
  return report(st, "NCCL", expr, ncclGetErrorString(r), code, file, line);
}
#endif
