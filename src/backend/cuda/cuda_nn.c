/* The CUDA nn ops table (ddptrain/nn.h) and its scratch reservation.
 *
 * Each op lives in its family's file (src/backend/cuda/cuda_nn_*.c, kernels
 * in kernels/); this file only assembles the table and implements
 * reserve()/release(). The ops share one scratch buffer (cuda_impl.h): they
 * run in order on the compute stream and none keeps scratch across calls,
 * so reserve() sizes it for the largest single need among the families for
 * the shapes it is told about, once, before the step loop. */
#include <config.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"
#include "ddptrain/check.h"

static ddp_status_t cuda_nn_reserve(ddp_backend_t *be, ddp_dtype_t dt, int64_t N, int C, int V) {
  if (!ddp_dtype_is_float(dt))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "nn reserve: %s is not a float type", ddp_dtype_name(dt));
  if (N < 1 || C < 1 || V < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "nn reserve: N %lld, C %d and V %d must be positive",
             (long long)N, C, V);
  size_t (*const need[])(ddp_dtype_t, int64_t, int, int) = {
      ddp_cuda_embed_scratch_bytes, ddp_cuda_layernorm_scratch_bytes,
      ddp_cuda_linear_scratch_bytes, ddp_cuda_attention_scratch_bytes,
      ddp_cuda_xent_scratch_bytes};
  size_t bytes = 256; /* never zero, so a hold always owns a buffer */
  for (size_t i = 0; i < sizeof need / sizeof need[0]; ++i) {
    const size_t b = need[i](dt, N, C, V);
    if (b > bytes) bytes = b;
  }
  return ddp_cuda_scratch_reserve(be, bytes);
}

const ddp_nn_ops_t ddp_nn_cuda_ops = {
    .embed_fwd = ddp_cuda_nn_embed_fwd,
    .embed_bwd = ddp_cuda_nn_embed_bwd,
    .layernorm_fwd = ddp_cuda_nn_layernorm_fwd,
    .layernorm_bwd = ddp_cuda_nn_layernorm_bwd,
    .linear_fwd = ddp_cuda_nn_linear_fwd,
    .linear_bwd = ddp_cuda_nn_linear_bwd,
    .gelu_fwd = ddp_cuda_nn_gelu_fwd,
    .gelu_bwd = ddp_cuda_nn_gelu_bwd,
    .add = ddp_cuda_nn_add,
    .attention_fwd = ddp_cuda_nn_attention_fwd,
    .attention_bwd = ddp_cuda_nn_attention_bwd,
    .xent_fused = ddp_cuda_nn_xent_fused,
    .residual_layernorm_fwd = ddp_cuda_nn_residual_layernorm_fwd,
    .reserve = cuda_nn_reserve,
    .release = ddp_cuda_scratch_release,
    .linear_gelu_fwd = ddp_cuda_nn_linear_gelu_fwd,
    .linear_dgelu_bwd = ddp_cuda_nn_linear_dgelu_bwd,
    .flash_attention_fwd = ddp_cuda_nn_flash_attention_fwd,
    .flash_attention_bwd = ddp_cuda_nn_flash_attention_bwd,
    .attention_decode = ddp_cuda_nn_attention_decode,
};
