/* The CPU backend's fused MLP ops (ddptrain/nn.h's linear_gelu_fwd and
 * linear_dgelu_bwd) over fp32, bf16 and fp16 activations.
 *
 * The CPU gains nothing from fusing a GEMM with its epilogue (OpenBLAS owns
 * the product), and these ops are the oracle of the CUDA backend's cuBLASLt
 * epilogues, so each is the exact composition of the unfused ops the model
 * would otherwise call, in the same order on the same values:
 *   linear_gelu_fwd  = linear_fwd into pre (into out in eval), gelu_fwd;
 *   linear_dgelu_bwd = the dinp product of linear_bwd (beta 0), gelu_bwd
 *                      in place, then the bias gradient summed exactly as
 *                      linear_bwd sums its dout into dbias.
 * Results are bit-identical to that sequence under every dt (tested in
 * tests/check_nn_fused.c). Under bf16/fp16 the stored (rounded) dpre is
 * what gets summed, as in the unfused sequence. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_nn_impl.h"
#include "ddptrain/check.h"
#include "ddptrain/dtype.h"
#include "ddptrain/nn.h"

#define NN_REQUIRE(cond, ...)                                       \
  do {                                                              \
    if (!(cond)) DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: " __VA_ARGS__); \
  } while (0)

/* names: the two inner sizes' names ("IC", "OC" or "K", "OC") */
static ddp_status_t check_args(const char *op, ddp_dtype_t dt, int N, const char *na, int a,
                               const char *nb, int b) {
  NN_REQUIRE(dt == DDP_DTYPE_F32 || dt == DDP_DTYPE_BF16 || dt == DDP_DTYPE_F16,
             "%s: activation dtype %s (%d) is not fp32, bf16 or fp16", op, ddp_dtype_name(dt),
             (int)dt);
  NN_REQUIRE(N > 0 && a > 0 && b > 0, "%s: sizes N=%d %s=%d %s=%d must be positive", op, N, na, a,
             nb, b);
  return DDP_OK;
}

// out (N,OC), pre (N,OC) or NULL, inp (N,IC), w (OC,IC), bias (OC)
ddp_status_t ddp_cpu_linear_gelu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, void *pre,
                                     const void *inp, const void *w, const void *bias, int N,
                                     int IC, int OC, ddp_stream_t s) {
  DDP_CHECK(check_args("linear_gelu_fwd", dt, N, "IC", IC, "OC", OC));
  NN_REQUIRE(out && inp && w && bias, "linear_gelu_fwd: NULL pointer");
  NN_REQUIRE(out != pre && out != inp && pre != inp,
             "linear_gelu_fwd: out, pre and inp must be distinct buffers");
  void *y = pre ? pre : out; /* eval: GELU in place over out */
  DDP_CHECK(ddp_nn_cpu_ops.linear_fwd(be, dt, y, inp, w, bias, N, IC, OC, s));
  return ddp_nn_cpu_ops.gelu_fwd(be, dt, out, y, (size_t)N * (size_t)OC, s);
}

// dpre (N,K), dbias (K) fp32 = / +=, dout (N,OC), w (OC,K), pre (N,K)
ddp_status_t ddp_cpu_linear_dgelu_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dpre, float *dbias,
                                      const void *dout, const void *w, const void *pre, int N,
                                      int K, int OC, int accumulate, ddp_stream_t s) {
  DDP_CHECK(check_args("linear_dgelu_bwd", dt, N, "K", K, "OC", OC));
  NN_REQUIRE(dpre && dbias && dout && w && pre, "linear_dgelu_bwd: NULL pointer");
  NN_REQUIRE(dpre != pre && dpre != dout && dpre != w,
             "linear_dgelu_bwd: dpre must not alias pre, dout or w");
  const size_t n = (size_t)N, k = (size_t)K, oc = (size_t)OC;
  if (dt == DDP_DTYPE_F32) {
    /* linear_bwd's dinp product: dpre (N,K) = dout (N,OC) @ w (OC,K) */
    ddp_gemm_t g = ddp_gemm_packed_f32(N, K, OC, dout, w, dpre);
    DDP_CHECK(ddp_backend_gemm(be, &g, s));
    DDP_CHECK(ddp_cpu_gelu_bwd_f32(be, dpre, pre, dpre, n * k, s));
    ddp_cpu_column_sums(dbias, dpre, n, k, accumulate);
    return DDP_OK;
  }
  /* linear_bwd's half path for dinp: operands widened into the workspace
   * (its layout's first n*OC + n*K + OC*K floats, within what reserve()
   * sizes for linear_bwd), one fp32 product, dpre rounded once */
  float *ws;
  DDP_CHECK(ddp_cpu_nn_workspace(be, n * oc + n * k + oc * k, "linear_dgelu_bwd", &ws));
  float *gf = ws, *dx = gf + n * oc, *wf = dx + n * k;
  DDP_CHECK(ddp_convert_host(gf, DDP_DTYPE_F32, dout, dt, n * oc));
  DDP_CHECK(ddp_convert_host(wf, DDP_DTYPE_F32, w, dt, oc * k));
  ddp_gemm_t g = ddp_gemm_packed_f32(N, K, OC, gf, wf, dx);
  DDP_CHECK(ddp_backend_gemm(be, &g, s));
  DDP_CHECK(ddp_convert_host(dpre, dt, dx, DDP_DTYPE_F32, n * k));
  /* gelu_bwd on the stored values, in place, as the unfused sequence */
  DDP_CHECK(ddp_nn_cpu_ops.gelu_bwd(be, dt, dpre, pre, dpre, n * k, s));
  /* the bias gradient of the stored dpre, as linear_bwd widens its dout */
  DDP_CHECK(ddp_convert_host(dx, DDP_DTYPE_F32, dpre, dt, n * k));
  ddp_cpu_column_sums(dbias, dx, n, k, accumulate);
  return DDP_OK;
}
