/* The CUDA linear ops (ddptrain/nn.h's linear_fwd and linear_bwd;
 * prototypes in cuda_nn.h).
 *
 * Every product goes through the backend's own GEMM (operands in the
 * activation type, fp32 accumulation; the weight gradient with an fp32 C so
 * it accumulates across micro-steps without rounding to 16 bits). The bias
 * is seeded into out and the GEMM adds to it with beta 1, as the CPU twin
 * does: the result is rounded once, and no second pass over out is needed.
 * The bias gradient is a deterministic column sum (kernels/linear.cu) whose
 * block partials live in the shared scratch. */
#include <config.h>

#include <stdint.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"
#include "ddptrain/check.h"
#include "linear.h"

#define NN_REQUIRE(cond, ...)                                       \
  do {                                                              \
    if (!(cond)) DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: " __VA_ARGS__); \
  } while (0)

static ddp_status_t check_args(const char *op, ddp_dtype_t dt, int N, int IC, int OC) {
  NN_REQUIRE(dt == DDP_DTYPE_F32 || dt == DDP_DTYPE_BF16 || dt == DDP_DTYPE_F16,
             "%s: activation dtype %s (%d) is not fp32, bf16 or fp16", op, ddp_dtype_name(dt),
             (int)dt);
  NN_REQUIRE(N > 0 && IC > 0 && OC > 0, "%s: sizes N=%d IC=%d OC=%d must be positive", op, N, IC,
             OC);
  return DDP_OK;
}

/* The bias gradient's partials, for the widest biased output a GPT has
 * (4C) or the vocabulary, whichever is wider. */
size_t ddp_cuda_linear_scratch_bytes(ddp_dtype_t dt, int64_t N, int C, int V) {
  (void)dt;
  const int64_t oc = 4 * (int64_t)C > V ? 4 * (int64_t)C : V;
  return ddp_cuda_column_sums_scratch_floats(N, oc) * sizeof(float);
}

// out (N,OC), inp (N,IC), w (OC,IC), bias (OC) or NULL
ddp_status_t ddp_cuda_nn_linear_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                                    const void *w, const void *bias, int N, int IC, int OC,
                                    ddp_stream_t s) {
  DDP_CHECK(check_args("linear_fwd", dt, N, IC, OC));
  NN_REQUIRE(out && inp && w, "linear_fwd: NULL pointer");
  ddp_gemm_t g = ddp_gemm_packed_f32(N, OC, IC, inp, w, out);
  g.trans_b = DDP_TRANSPOSE_YES; /* w is (OC, IC): out = inp w^T */
  g.ldb = IC;
  g.ab_dtype = g.c_dtype = dt;
  if (bias) {
    DDP_CHECK(ddp_cuda_bias_seed(dt, out, bias, N, OC, ddp_cuda_stream(be, s)));
    g.beta = 1.0f;
  }
  return ddp_backend_gemm(be, &g, s);
}

// dinp (N,IC) = / += or NULL, dw (OC,IC) fp32 = / +=, dbias (OC) fp32 = / += or NULL,
// dout (N,OC), inp (N,IC), w (OC,IC)
ddp_status_t ddp_cuda_nn_linear_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dw,
                                    float *dbias, const void *dout, const void *inp, const void *w,
                                    int N, int IC, int OC, int accumulate, int accumulate_dinp,
                                    ddp_stream_t s) {
  DDP_CHECK(check_args("linear_bwd", dt, N, IC, OC));
  NN_REQUIRE(dw && dout && inp && w, "linear_bwd: NULL pointer");
  void *scratch = NULL;
  if (dbias)
    DDP_CHECK(ddp_cuda_scratch_get(
        be, ddp_cuda_column_sums_scratch_floats(N, OC) * sizeof(float), "linear_bwd", &scratch));
  if (dinp) {
    /* dinp (N,IC) = dout (N,OC) @ w (OC,IC) */
    ddp_gemm_t g = ddp_gemm_packed_f32(N, IC, OC, dout, w, dinp);
    g.beta = accumulate_dinp ? 1.0f : 0.0f;
    g.ab_dtype = g.c_dtype = dt;
    DDP_CHECK(ddp_backend_gemm(be, &g, s));
  }
  /* dw (OC,IC) = dout^T (OC,N) @ inp (N,IC), fp32 */
  ddp_gemm_t g = ddp_gemm_packed_f32(OC, IC, N, dout, inp, dw);
  g.trans_a = DDP_TRANSPOSE_YES;
  g.lda = OC;
  g.beta = accumulate ? 1.0f : 0.0f;
  g.ab_dtype = dt;
  DDP_CHECK(ddp_backend_gemm(be, &g, s));
  if (dbias)
    DDP_CHECK(ddp_cuda_column_sums(dt, dbias, scratch, dout, N, OC, accumulate,
                                   ddp_cuda_stream(be, s)));
  return DDP_OK;
}
