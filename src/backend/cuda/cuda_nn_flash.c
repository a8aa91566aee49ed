/* Flash-style causal self-attention on CUDA (ddptrain/nn.h's
 * flash_attention_fwd and flash_attention_bwd): argument checks, then the
 * kernels of kernels/flash_attention.cu on the op's stream. The CPU twin is
 * src/backend/cpu/cpu_flash_attention.c.
 *
 * No shared scratch: the forward keeps its running statistics in registers
 * and the backward's only fp32 intermediate, D = rowsum(dout * out), goes to
 * the caller's B*NH*T-float scratch; dQ and dK/dV are computed by separate
 * kernels that each own their output (no atomics, no fp32 accumulation
 * buffer), so reserve() needs nothing for these ops. No host
 * synchronisation; lens stays on the device (the kernels clamp it). */
#include <config.h>

#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"
#include "ddptrain/check.h"
#include "flash_attention.h"

/* The matrix attention's checks, plus the kernels' head-size limit. */
static ddp_status_t check_args(const char *op, ddp_dtype_t dt, int B, int T, int C, int NH) {
  DDP_CHECK(ddp_cuda_attention_check_args(op, dt, B, T, C, NH));
  if (C / NH > DDP_FLASH_MAX_HS)
    DDP_FAIL(DDP_ERR_UNSUPPORTED,
             "nn: %s: head size hs=%d (C=%d / NH=%d) is not supported on CUDA (at most %d)", op,
             C / NH, C, NH, DDP_FLASH_MAX_HS);
  return DDP_OK;
}

// out (B,T,C), lse (B,NH,T) fp32 or NULL, qkv (B,T,3C), lens (B) int32 or NULL
ddp_status_t ddp_cuda_nn_flash_attention_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out,
                                             float *lse, const void *qkv, const int32_t *lens,
                                             int B, int T, int C, int NH, ddp_stream_t s) {
  if (!be || !out || !qkv) DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: flash_attention_fwd: NULL pointer");
  DDP_CHECK(check_args("flash_attention_fwd", dt, B, T, C, NH));
  return ddp_cuda_flash_attention_fwd(out, lse, qkv, lens, dt, B, T, C, NH, ddp_cuda_stream(be, s));
}

// dqkv (B,T,3C) =, scratch (B,NH,T) fp32, dout, out (B,T,C), qkv (B,T,3C), lse (B,NH,T)
ddp_status_t ddp_cuda_nn_flash_attention_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dqkv,
                                             float *scratch, const void *dout, const void *qkv,
                                             const void *out, const float *lse, const int32_t *lens,
                                             int B, int T, int C, int NH, ddp_stream_t s) {
  if (!be || !dqkv || !scratch || !dout || !qkv || !out || !lse)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: flash_attention_bwd: NULL pointer");
  DDP_CHECK(check_args("flash_attention_bwd", dt, B, T, C, NH));
  return ddp_cuda_flash_attention_bwd(dqkv, scratch, dout, qkv, out, lse, lens, dt, B, T, C, NH,
                                      ddp_cuda_stream(be, s));
}
