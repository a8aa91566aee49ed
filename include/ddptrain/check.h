/* Error-propagation macros.
 *
 * The rule: an error is logged once, where it is first seen, with file:line
 * and rank; callers above only propagate the status. So:
 *   - DDP_CHECK / DDP_CHECK_GOTO propagate a ddp_status_t silently;
 *   - DDP_FAIL / DDP_FAIL_GOTO report a new error of ours (log + status);
 *   - foreign codes (CUDA, cuBLAS, cuDNN, NCCL, MPI) go through one generator,
 *     DDP_FOREIGN_STATUS, which calls a per-library converter that logs the
 *     library's own message and maps the code to a ddp_status_t. The
 *     per-library macros (DDP_CUDA_CHECK, DDP_MPI_CHECK, ...) are one line each
 *     in the internal header src/foreign_check.h, beside their converters.
 * Cleanup uses goto labels named for what they undo. */
#ifndef DDPTRAIN_CHECK_H
#define DDPTRAIN_CHECK_H

#include "ddptrain/log.h"
#include "ddptrain/status.h"

#define DDP_CHECK(expr)                                \
  do {                                                 \
    ddp_status_t ddp_check_st_ = (expr);               \
    if (ddp_check_st_ != DDP_OK) return ddp_check_st_; \
  } while (0)

#define DDP_CHECK_GOTO(expr, st, label) \
  do {                                  \
    (st) = (expr);                      \
    if ((st) != DDP_OK) goto label;     \
  } while (0)

#define DDP_FAIL(status, ...)                                         \
  do {                                                                \
    ddp_log_at(DDP_LOG_LEVEL_ERROR, __FILE__, __LINE__, __VA_ARGS__); \
    return (status);                                                  \
  } while (0)

#define DDP_FAIL_GOTO(st, status, label, ...)                         \
  do {                                                                \
    ddp_log_at(DDP_LOG_LEVEL_ERROR, __FILE__, __LINE__, __VA_ARGS__); \
    (st) = (status);                                                  \
    goto label;                                                       \
  } while (0)

/* The generator: `conv` has the signature
 *   ddp_status_t conv(long code, const char *expr, const char *file, int line)
 * returning DDP_OK for the library's success code and otherwise logging
 * "<expr> failed: <library message>" and returning the mapped status. */
#define DDP_FOREIGN_STATUS(conv, expr) conv((long)(expr), #expr, __FILE__, __LINE__)

#endif
