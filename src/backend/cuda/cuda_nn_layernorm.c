/* The CUDA LayerNorm ops (ddptrain/nn.h's layernorm_fwd,
 * residual_layernorm_fwd and layernorm_bwd; prototypes in cuda_nn.h).
 *
 * Validates the arguments with the CPU backend's messages (so a bad call is
 * rejected the same way on either backend, before anything is enqueued),
 * takes the backward's partial sums from the shared scratch, and launches
 * kernels/layernorm.cu on the op's stream. The forward needs no scratch. */
#include <config.h>

#include <stdint.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"
#include "ddptrain/check.h"
#include "layernorm.h"

#define NN_REQUIRE(cond, ...)                                       \
  do {                                                              \
    if (!(cond)) DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: " __VA_ARGS__); \
  } while (0)

static ddp_status_t check_dt_sizes(const char *op, ddp_dtype_t dt, int N, int C) {
  NN_REQUIRE(dt == DDP_DTYPE_F32 || dt == DDP_DTYPE_BF16 || dt == DDP_DTYPE_F16,
             "%s: activation dtype %s (%d) is not fp32, bf16 or fp16", op, ddp_dtype_name(dt),
             (int)dt);
  NN_REQUIRE(N > 0 && C > 0, "%s: sizes N=%d C=%d must be positive", op, N, C);
  return DDP_OK;
}

/* The backward's per-group partials of dw and db; the forward takes none. */
size_t ddp_cuda_layernorm_scratch_bytes(ddp_dtype_t dt, int64_t N, int C, int V) {
  (void)dt;
  (void)V;
  return ddp_cuda_layernorm_bwd_scratch_floats(N, C) * sizeof(float);
}

// out (N,C), mean, rstd (N) or NULL, inp (N,C), w, b (C)
ddp_status_t ddp_cuda_nn_layernorm_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *mean,
                                       float *rstd, const void *inp, const void *w, const void *b,
                                       int N, int C, ddp_stream_t s) {
  DDP_CHECK(check_dt_sizes("layernorm_fwd", dt, N, C));
  NN_REQUIRE(out && inp && w && b, "layernorm_fwd: NULL pointer");
  return ddp_cuda_layernorm_fwd(dt, out, mean, rstd, inp, w, b, N, C, ddp_cuda_stream(be, s));
}

// resid (N,C) (may alias a), out (N,C), mean, rstd (N) or NULL, a, b (N,C), w, bias (C)
ddp_status_t ddp_cuda_nn_residual_layernorm_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *resid,
                                                void *out, float *mean, float *rstd, const void *a,
                                                const void *b, const void *w, const void *bias,
                                                int N, int C, ddp_stream_t s) {
  DDP_CHECK(check_dt_sizes("residual_layernorm_fwd", dt, N, C));
  NN_REQUIRE(resid && out && a && b && w && bias, "residual_layernorm_fwd: NULL pointer");
  NN_REQUIRE(out != resid && out != a && out != b,
             "residual_layernorm_fwd: out must not alias resid, a or b");
  return ddp_cuda_residual_layernorm_fwd(dt, resid, out, mean, rstd, a, b, w, bias, N, C,
                                         ddp_cuda_stream(be, s));
}

// dinp (N,C) +=, dw, db (C) = / +=, dout, inp (N,C), w (C), mean, rstd (N)
ddp_status_t ddp_cuda_nn_layernorm_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dw,
                                       float *db, const void *dout, const void *inp, const void *w,
                                       const float *mean, const float *rstd, int N, int C,
                                       int accumulate, ddp_stream_t s) {
  DDP_CHECK(check_dt_sizes("layernorm_bwd", dt, N, C));
  NN_REQUIRE(dinp && dw && db && dout && inp && w && mean && rstd, "layernorm_bwd: NULL pointer");
  void *scratch = NULL;
  DDP_CHECK(ddp_cuda_scratch_get(be, ddp_cuda_layernorm_scratch_bytes(dt, N, C, 0), "layernorm_bwd",
                                 &scratch));
  return ddp_cuda_layernorm_bwd(dt, dinp, dw, db, scratch, dout, inp, w, mean, rstd, N, C,
                                accumulate, ddp_cuda_stream(be, s));
}
