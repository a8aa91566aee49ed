/* CUDA token + position embedding ops (cuda_nn.h; contract in ddptrain/nn.h,
 * kernels in kernels/embed.cu, CPU twin ddp_nn_cpu_ops.embed_*).
 *
 * The launchers validate sizes, pointers and dtype on the host. Backward
 * needs scratch for its deterministic sort-by-token: the shared CUDA scratch
 * buffer, sized by reserve() through ddp_cuda_embed_scratch_bytes. */
#include <config.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"
#include "ddptrain/check.h"
#include "embed.h"

/* Forward needs none; backward needs the sort's buffers for N tokens. 0 when
 * N is out of range or CUB cannot size its storage (logged): the op itself
 * then fails with that error rather than reserve() with a bogus size. */
size_t ddp_cuda_embed_scratch_bytes(ddp_dtype_t dt, int64_t N, int C, int V) {
  size_t bytes = 0;
  if (ddp_cuda_embed_bwd_scratch_bytes(N, &bytes) != DDP_OK) return 0;
  return bytes;
}

// out (B,T,C), tokens (B,T), wte (V,C), wpe (>=T,C)
ddp_status_t ddp_cuda_nn_embed_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out,
                                   const int32_t *tokens, const void *wte, const void *wpe, int B,
                                   int T, int C, ddp_stream_t s) {
  return ddp_cuda_embed_fwd(dt, out, tokens, wte, wpe, B, T, C, ddp_cuda_stream(be, s));
}

// dwte (V,C) +=, dwpe (>=T,C) = / +=, dout (B,T,C), tokens (B,T)
ddp_status_t ddp_cuda_nn_embed_bwd(ddp_backend_t *be, ddp_dtype_t dt, float *dwte, float *dwpe,
                                   const void *dout, const int32_t *tokens, int B, int T, int C,
                                   int accumulate, ddp_stream_t s) {
  if (B <= 0 || T <= 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: embed_bwd: sizes B=%d T=%d C=%d must be positive", B, T, C);
  size_t need = 0;
  DDP_CHECK(ddp_cuda_embed_bwd_scratch_bytes((int64_t)B * T, &need));
  void *scratch = NULL;
  DDP_CHECK(ddp_cuda_scratch_get(be, need, "embed_bwd", &scratch));
  return ddp_cuda_embed_bwd(dt, dwte, dwpe, dout, tokens, B, T, C, accumulate, scratch, need,
                            ddp_cuda_stream(be, s));
}
