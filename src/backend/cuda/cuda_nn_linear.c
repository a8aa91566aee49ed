/* The CUDA linear ops (ddptrain/nn.h's linear_fwd, linear_bwd and the
 * fused MLP pair linear_gelu_fwd / linear_dgelu_bwd; prototypes in
 * cuda_nn.h).
 *
 * Every product goes through the backend's own GEMM (operands in the
 * activation type, fp32 accumulation; the weight gradient with an fp32 C so
 * it accumulates across micro-steps without rounding to 16 bits).
 *
 * Element-wise work rides in cuBLASLt epilogues where Lt has an algorithm
 * for it (cuda_gemm.c): the forward bias (CUBLASLT_EPILOGUE_BIAS, no pass
 * seeding out with the bias), the MLP's bias + GELU with the pre-activation
 * saved (GELU_AUX_BIAS; GELU_BIAS in eval) and, backward, the GELU gradient
 * with the bias gradient of the first MLP linear (DGELU_BGRAD). Where Lt
 * declines (an odd width breaks the aux pitch Lt needs, or a type
 * combination it lacks), each op composes the unfused kernels instead, the
 * arithmetic of the CPU twins: bias seeded into out and added by the GEMM
 * with beta 1 (rounded once); gelu_fwd / gelu_bwd passes; the bias gradient
 * as a deterministic column sum (kernels/linear.cu) whose block partials
 * live in the shared scratch. A given shape always takes the same path.
 *
 * The fused bias gradient lands in the shared scratch first and is then
 * stored or added into dbias (DGELU_BGRAD overwrites, and accumulating
 * micro-steps need +=). Going through the scratch also gives every call of
 * a shape the same 256-byte-aligned bias-gradient pointer, hence one plan
 * and one algorithm for accumulate 0 and 1.
 *
 * What it saves (computed, not measured): in GPT-2's MLP (C -> 4C -> C,
 * bf16, X = N*C*2 bytes), the activation traffic per layer and micro-step
 * goes from 65X (forward: bias seeds 5X, c_fc GEMM 9X, GELU 8X, c_proj GEMM
 * 6X; backward: c_proj GEMMs 10X and dbias 1X, GELU' 12X, c_fc GEMMs 10X
 * and dbias 4X) to 39X (forward: GELU_AUX_BIAS GEMM 9X, c_proj 5X;
 * backward: c_proj dW 5X and dbias 1X, DGELU_BGRAD GEMM 9X, c_fc GEMMs
 * 10X), 40% less, and the full-tensor element-wise passes from 6 to 1
 * (c_proj's dbias). */
#include <config.h>

#include <stdint.h>

#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"
#include "ddptrain/check.h"
#include "linear.h"
#include "pointwise.h"

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
 * (4C) or the vocabulary, whichever is wider. The fused bias gradient of
 * linear_dgelu_bwd (4C floats) fits in that too: there is at least one
 * block of rows. */
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
    const ddp_cuda_epilogue_args_t e = {.kind = DDP_CUDA_EPILOGUE_BIAS, .bias = bias};
    int fused;
    DDP_CHECK(ddp_cuda_gemm_epilogue(be, &g, &e, s, &fused));
    if (fused) return DDP_OK;
    DDP_CHECK(ddp_cuda_bias_seed(dt, out, bias, N, OC, ddp_cuda_stream(be, s)));
    g.beta = 1.0f;
  }
  return ddp_backend_gemm(be, &g, s);
}

// out (N,OC), pre (N,OC) or NULL, inp (N,IC), w (OC,IC), bias (OC)
ddp_status_t ddp_cuda_nn_linear_gelu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, void *pre,
                                         const void *inp, const void *w, const void *bias, int N,
                                         int IC, int OC, ddp_stream_t s) {
  DDP_CHECK(check_args("linear_gelu_fwd", dt, N, IC, OC));
  NN_REQUIRE(out && inp && w && bias, "linear_gelu_fwd: NULL pointer");
  NN_REQUIRE(out != pre && out != inp && pre != inp,
             "linear_gelu_fwd: out, pre and inp must be distinct buffers");
  ddp_gemm_t g = ddp_gemm_packed_f32(N, OC, IC, inp, w, out);
  g.trans_b = DDP_TRANSPOSE_YES; /* w is (OC, IC): out = inp w^T */
  g.ldb = IC;
  g.ab_dtype = g.c_dtype = dt;
  /* the aux (pre) has out's layout: row pitch OC */
  const ddp_cuda_epilogue_args_t e = {
      .kind = pre ? DDP_CUDA_EPILOGUE_GELU_AUX_BIAS : DDP_CUDA_EPILOGUE_GELU_BIAS,
      .bias = bias,
      .aux = pre,
      .aux_ld = pre ? OC : 0};
  int fused;
  DDP_CHECK(ddp_cuda_gemm_epilogue(be, &g, &e, s, &fused));
  if (fused) return DDP_OK;
  /* linear_fwd then gelu_fwd (in place in eval, where there is no pre) */
  void *y = pre ? pre : out;
  DDP_CHECK(ddp_cuda_nn_linear_fwd(be, dt, y, inp, w, bias, N, IC, OC, s));
  return ddp_cuda_gelu_fwd(dt, out, y, (size_t)N * (size_t)OC, ddp_cuda_stream(be, s));
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
    DDP_CHECK(ddp_cuda_scratch_get(be, ddp_cuda_column_sums_scratch_floats(N, OC) * sizeof(float),
                                   "linear_bwd", &scratch));
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
    DDP_CHECK(
        ddp_cuda_column_sums(dt, dbias, scratch, dout, N, OC, accumulate, ddp_cuda_stream(be, s)));
  return DDP_OK;
}

// dpre (N,K), dbias (K) fp32 = / +=, dout (N,OC), w (OC,K), pre (N,K)
ddp_status_t ddp_cuda_nn_linear_dgelu_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dpre,
                                          float *dbias, const void *dout, const void *w,
                                          const void *pre, int N, int K, int OC, int accumulate,
                                          ddp_stream_t s) {
  DDP_CHECK(check_args("linear_dgelu_bwd", dt, N, K, OC));
  NN_REQUIRE(dpre && dbias && dout && w && pre, "linear_dgelu_bwd: NULL pointer");
  NN_REQUIRE(dpre != pre && dpre != dout && dpre != w,
             "linear_dgelu_bwd: dpre must not alias pre, dout or w");
  const cudaStream_t cs = ddp_cuda_stream(be, s);
  /* the fallback's column-sum partials; the fused bias gradient (K floats)
   * takes the first of them. Asked for on both paths so that a short
   * reserve() fails the same way whichever path a shape takes. */
  void *scratch = NULL;
  DDP_CHECK(ddp_cuda_scratch_get(be, ddp_cuda_column_sums_scratch_floats(N, K) * sizeof(float),
                                 "linear_dgelu_bwd", &scratch));
  /* dpre (N,K) = dout (N,OC) @ w (OC,K) */
  ddp_gemm_t g = ddp_gemm_packed_f32(N, K, OC, dout, w, dpre);
  g.ab_dtype = g.c_dtype = dt;
  /* Lt reads the aux; it is const here (the cast only fits the struct) */
  const ddp_cuda_epilogue_args_t e = {.kind = DDP_CUDA_EPILOGUE_DGELU_BGRAD,
                                      .aux = (void *)(uintptr_t)pre,
                                      .aux_ld = K,
                                      .bgrad = (float *)scratch};
  int fused;
  DDP_CHECK(ddp_cuda_gemm_epilogue(be, &g, &e, s, &fused));
  if (fused) return ddp_cuda_bias_grad_update(dbias, (const float *)scratch, K, accumulate, cs);
  /* the GEMM, gelu_bwd in place, the bias gradient's column sums */
  DDP_CHECK(ddp_backend_gemm(be, &g, s));
  DDP_CHECK(ddp_cuda_gelu_bwd(dt, dpre, pre, dpre, (size_t)N * (size_t)K, cs));
  return ddp_cuda_column_sums(dt, dbias, (float *)scratch, dpre, N, K, accumulate, cs);
}
