/* NVTX ranges behind --nvtx (internal).
 *
 * With --nvtx on, the trainer, the model and the reducer name what the host
 * is doing (a step, each micro-step, each block's forward and backward, the
 * fused classifier, each bucket's all-reduce launch, the wait for the
 * reductions, the optimizer), so an Nsight Systems trace shows backward's
 * kernels on the compute stream beside the NCCL kernels of the buckets on
 * the comm stream: the overlap is visible rather than inferred. Off (the
 * default) a range costs one predictable branch and formats nothing.
 *
 * NVTX v3 is header-only (it loads a profiler's injection library only when
 * one is attached), so CUDA builds need no extra library; a build without
 * CUDA has no NVTX and refuses to enable it. */
#ifndef DDPTRAIN_TRACE_NVTX_H
#define DDPTRAIN_TRACE_NVTX_H

#include "ddptrain/status.h"

/* Turns ranges on or off for the process. On in a build without CUDA:
 * DDP_ERR_UNSUPPORTED, with a message naming the flag. */
ddp_status_t ddp_nvtx_enable(int on);
int ddp_nvtx_enabled(void);

/* Opens a range named by the printf-style format (formatted only when
 * ranges are on); every push is matched by one pop on the same thread. */
__attribute__((format(printf, 1, 2))) void ddp_nvtx_push_impl(const char *fmt, ...);
void ddp_nvtx_pop_impl(void);

extern int ddp_nvtx_on;

#define DDP_NVTX_PUSH(...)                            \
  do {                                                \
    if (ddp_nvtx_on) ddp_nvtx_push_impl(__VA_ARGS__); \
  } while (0)
#define DDP_NVTX_POP()                    \
  do {                                    \
    if (ddp_nvtx_on) ddp_nvtx_pop_impl(); \
  } while (0)

#endif
