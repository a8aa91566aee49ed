/* ddptrain status codes.
 *
 * Every library function reports success or failure through ddp_status_t:
 * DDP_OK is 0 and every error is negative, so `if (st)` and `if (st < 0)` both
 * read naturally. Foreign codes (CUDA, cuBLAS, cuDNN, NCCL, MPI) are converted
 * into these at the boundary by the macros in ddptrain/check.h. The list is an
 * X-macro so the enum and its strings can never drift apart. */
#ifndef DDPTRAIN_STATUS_H
#define DDPTRAIN_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, description) */
#define DDP_STATUS_LIST(X)                                             \
  X(DDP_OK, 0, "success")                                              \
  X(DDP_ERR_INVALID_ARG, -1, "invalid argument")                       \
  X(DDP_ERR_OOM, -2, "out of memory")                                  \
  X(DDP_ERR_IO, -3, "I/O error")                                       \
  X(DDP_ERR_FORMAT, -4, "malformed input data")                        \
  X(DDP_ERR_UNSUPPORTED, -5, "not supported by this build or backend") \
  X(DDP_ERR_MISMATCH, -6, "ranks disagree")                            \
  X(DDP_ERR_NUMERIC, -7, "non-finite value")                           \
  X(DDP_ERR_TIMEOUT, -8, "timed out")                                  \
  X(DDP_ERR_INTERRUPTED, -9, "interrupted")                            \
  X(DDP_ERR_INTERNAL, -10, "internal error")                           \
  X(DDP_ERR_NO_DEVICE, -11, "no usable device")                        \
  X(DDP_ERR_CUDA, -12, "CUDA runtime error")                           \
  X(DDP_ERR_CUBLAS, -13, "cuBLAS error")                               \
  X(DDP_ERR_CUDNN, -14, "cuDNN error")                                 \
  X(DDP_ERR_NCCL, -15, "NCCL error")                                   \
  X(DDP_ERR_MPI, -16, "MPI error")                                     \
  X(DDP_ERR_PREEMPTED_UNSAVED, -17, "preempted without a checkpoint")  \
  X(DDP_ERR_FINAL_UNSAVED, -18, "final checkpoint not written")

typedef enum ddp_status {
#define DDP_STATUS_ENUM_(name, value, desc) name = value,
  DDP_STATUS_LIST(DDP_STATUS_ENUM_)
#undef DDP_STATUS_ENUM_
} ddp_status_t;

/* A short, static, human-readable description; never NULL (unknown codes give
 * "unknown status"). */
const char *ddp_status_string(ddp_status_t st);

/* The enumerator's name ("DDP_ERR_OOM"), for logs and tests; never NULL. */
const char *ddp_status_name(ddp_status_t st);

#ifdef __cplusplus
}
#endif
#endif
