/* The CUDA conv table (ddptrain/conv.h): the ops that run on kernels of
 * ours (kernels/conv_ops.cu, bn_reduce.cu) — ReLU, add + ReLU, pooling and the --sync-bn
 * parts of batch normalization — and the table that joins them to the
 * cuDNN ops of cuda_conv.c and cuda_conv_bn.c.
 *
 * Each op validates its arguments on the host with the contract's rules
 * before anything is enqueued, so a rejected call writes nothing; the
 * batch-norm parts take their per-slice partial sums from the table's
 * shared workspace (sized by bn_prepare, or on first use). */
#include <config.h>

#include <limits.h>
#include <stdint.h>

#include "backend/cuda/cuda_conv.h"
#include "backend/cuda/cuda_impl.h"
#include "conv_ops.h"
#include "ddptrain/check.h"

#define REQUIRE(cond, ...)                                   \
  do {                                                       \
    if (!(cond)) DDP_FAIL(DDP_ERR_INVALID_ARG, __VA_ARGS__); \
  } while (0)

/* ---- pooling ------------------------------------------------------------------ */

/* The shared checks (backend/conv_check.h), and this backend's own limit. */
static ddp_status_t pool_check_shape(const char *op, const ddp_pool_shape_t *sh) {
  DDP_CHECK(ddp_pool_check_shape(op, sh));
  /* The winner's place in its window is kept in 16 bits. */
  if (sh->kernel > 255)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "%s: kernel %d is above the 255 this backend records", op,
             sh->kernel);
  return DDP_OK;
}

static ddp_cuda_pool_dims_t pool_dims(const ddp_pool_shape_t *sh) {
  const ddp_cuda_pool_dims_t d = {sh->N,
                                  sh->H,
                                  sh->W,
                                  sh->C,
                                  sh->kernel,
                                  sh->stride,
                                  sh->pad,
                                  ddp_pool_out_h(sh),
                                  ddp_pool_out_w(sh)};
  return d;
}

static ddp_status_t cuda_maxpool_workspace_bytes(ddp_backend_t *be, ddp_dtype_t dt,
                                                 const ddp_pool_shape_t *sh, size_t *bytes) {
  (void)be;
  DDP_CHECK(ddp_cuda_conv_check_dt("max_pool_workspace", dt));
  DDP_CHECK(pool_check_shape("max_pool_workspace", sh));
  REQUIRE(bytes, "max_pool_workspace: bytes is NULL");
  const ddp_cuda_pool_dims_t d = pool_dims(sh);
  *bytes = ddp_cuda_maxpool_ws_bytes(&d);
  return DDP_OK;
}

static ddp_status_t cuda_maxpool_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, void *ws,
                                     const void *inp, const ddp_pool_shape_t *sh, ddp_stream_t s) {
  DDP_CHECK(ddp_cuda_conv_check_dt("max_pool_fwd", dt));
  DDP_CHECK(pool_check_shape("max_pool_fwd", sh));
  REQUIRE(out && inp, "max_pool_fwd: out and inp are required");
  const ddp_cuda_pool_dims_t d = pool_dims(sh);
  return ddp_cuda_maxpool_fwd(dt, out, (uint16_t *)ws, inp, &d, ddp_cuda_stream(be, s));
}

static ddp_status_t cuda_maxpool_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp,
                                     const void *dout, const void *ws, const ddp_pool_shape_t *sh,
                                     ddp_stream_t s) {
  DDP_CHECK(ddp_cuda_conv_check_dt("max_pool_bwd", dt));
  DDP_CHECK(pool_check_shape("max_pool_bwd", sh));
  REQUIRE(dinp && dout && ws,
          "max_pool_bwd: dinp, dout and ws (the training forward's) are required");
  const ddp_cuda_pool_dims_t d = pool_dims(sh);
  return ddp_cuda_maxpool_bwd(dt, dinp, dout, (const uint16_t *)ws, &d, ddp_cuda_stream(be, s));
}

static ddp_status_t check_avgpool(const char *op, ddp_dtype_t dt, const void *a, const void *b,
                                  int N, int HW, int C) {
  DDP_CHECK(ddp_cuda_conv_check_dt(op, dt));
  REQUIRE(N >= 1 && HW >= 1 && C >= 1, "%s: sizes N=%d HW=%d C=%d must be positive", op, N, HW, C);
  REQUIRE(a && b, "%s: NULL buffer", op);
  return DDP_OK;
}

static ddp_status_t cuda_avgpool_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                                     int N, int HW, int C, ddp_stream_t s) {
  DDP_CHECK(check_avgpool("avg_pool_fwd", dt, out, inp, N, HW, C));
  return ddp_cuda_avgpool_fwd(dt, out, inp, N, HW, C, ddp_cuda_stream(be, s));
}

static ddp_status_t cuda_avgpool_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp,
                                     const void *dout, int N, int HW, int C, ddp_stream_t s) {
  DDP_CHECK(check_avgpool("avg_pool_bwd", dt, dinp, dout, N, HW, C));
  return ddp_cuda_avgpool_bwd(dt, dinp, dout, N, HW, C, ddp_cuda_stream(be, s));
}

/* ---- activations ---------------------------------------------------------------- */

static ddp_status_t check_ew(const char *op, ddp_dtype_t dt, size_t n, const void *a, const void *b,
                             const void *c) {
  DDP_CHECK(ddp_cuda_conv_check_dt(op, dt));
  if (n == 0) return DDP_OK;
  REQUIRE(a && b && c, "%s: NULL buffer with n = %zu", op, n);
  const size_t esz = ddp_dtype_size(dt);
  /* A misaligned element access faults on the device. */
  REQUIRE((uintptr_t)a % esz == 0 && (uintptr_t)b % esz == 0 && (uintptr_t)c % esz == 0,
          "%s: a buffer is not aligned to its %zu-byte elements", op, esz);
  return DDP_OK;
}

static ddp_status_t cuda_relu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                                  size_t n, ddp_stream_t s) {
  DDP_CHECK(check_ew("relu_fwd", dt, n, out, inp, inp));
  return ddp_cuda_relu_fwd(dt, out, inp, n, ddp_cuda_stream(be, s));
}

static ddp_status_t cuda_add_relu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *a,
                                      const void *b, size_t n, ddp_stream_t s) {
  DDP_CHECK(check_ew("add_relu_fwd", dt, n, out, a, b));
  return ddp_cuda_add_relu_fwd(dt, out, a, b, n, ddp_cuda_stream(be, s));
}

static ddp_status_t cuda_relu_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                  const void *out, size_t n, ddp_stream_t s) {
  DDP_CHECK(check_ew("relu_bwd", dt, n, dinp, dout, out));
  return ddp_cuda_relu_bwd(dt, dinp, dout, out, n, ddp_cuda_stream(be, s));
}

/* ---- batch normalization in parts --------------------------------------------- */

static ddp_status_t part_scratch(ddp_backend_t *be, const ddp_bn_shape_t *sh, float **scratch,
                                 unsigned **counters) {
  const int64_t M = (int64_t)sh->N * sh->H * sh->W;
  void *ws = NULL;
  DDP_CHECK(ddp_cuda_conv_bn_counters(be, ddp_cuda_bn_counters_needed(M, sh->C), counters));
  DDP_CHECK(ddp_cuda_conv_workspace(be, ddp_cuda_bn_scratch_floats(M, sh->C) * sizeof(float), &ws));
  *scratch = ws;
  return DDP_OK;
}

static ddp_status_t check_m_total(const char *op, int64_t M_total, const ddp_bn_shape_t *sh,
                                  int need_two) {
  const int64_t M = (int64_t)sh->N * sh->H * sh->W;
  REQUIRE(M_total >= M, "%s: M_total %lld is less than this rank's %lld positions", op,
          (long long)M_total, (long long)M);
  REQUIRE(!need_two || M_total >= 2,
          "%s: the running variance needs at least 2 values per channel (M_total = %lld)", op,
          (long long)M_total);
  return DDP_OK;
}

static ddp_status_t cuda_bn_reduce_fwd(ddp_backend_t *be, ddp_dtype_t dt, float *sums,
                                       const void *inp, const float *mean, const ddp_bn_shape_t *sh,
                                       ddp_stream_t s) {
  DDP_CHECK(ddp_cuda_conv_check_dt("bn_reduce_fwd", dt));
  DDP_CHECK(ddp_bn_check_shape("bn_reduce_fwd", sh, 0));
  REQUIRE(sums && inp, "bn_reduce_fwd: sums and inp are required");
  float *scratch = NULL;
  unsigned *counters = NULL;
  DDP_CHECK(part_scratch(be, sh, &scratch, &counters));
  return ddp_cuda_bn_reduce(dt, sums, scratch, counters, inp, NULL, mean, NULL,
                            (int64_t)sh->N * sh->H * sh->W, sh->C, ddp_cuda_stream(be, s));
}

static ddp_status_t cuda_bn_apply_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out,
                                      float *running_mean, float *running_var, const void *inp,
                                      const float *mean, const float *var, const float *gamma,
                                      const float *beta, int64_t M_total, const ddp_bn_shape_t *sh,
                                      ddp_stream_t s) {
  DDP_CHECK(ddp_cuda_conv_check_dt("bn_apply_fwd", dt));
  DDP_CHECK(ddp_bn_check_shape("bn_apply_fwd", sh, 0));
  REQUIRE(out && inp && mean && var && gamma && beta,
          "bn_apply_fwd: out, inp, mean, var, gamma and beta are required");
  REQUIRE(!running_mean == !running_var,
          "bn_apply_fwd: running_mean and running_var are given together or not at all");
  DDP_CHECK(check_m_total("bn_apply_fwd", M_total, sh, running_mean != NULL));
  const float unbias = M_total >= 2 ? (float)((double)M_total / (double)(M_total - 1)) : 1.0f;
  return ddp_cuda_bn_apply_fwd(dt, out, running_mean, running_var, inp, mean, var, gamma, beta,
                               sh->eps, sh->momentum, unbias, (int64_t)sh->N * sh->H * sh->W, sh->C,
                               ddp_cuda_stream(be, s));
}

static ddp_status_t cuda_bn_reduce_bwd(ddp_backend_t *be, ddp_dtype_t dt, float *sums,
                                       const void *dout, const void *inp, const float *mean,
                                       const ddp_bn_shape_t *sh, ddp_stream_t s) {
  DDP_CHECK(ddp_cuda_conv_check_dt("bn_reduce_bwd", dt));
  DDP_CHECK(ddp_bn_check_shape("bn_reduce_bwd", sh, 0));
  REQUIRE(sums && dout && inp && mean, "bn_reduce_bwd: sums, dout, inp and mean are required");
  float *scratch = NULL;
  unsigned *counters = NULL;
  DDP_CHECK(part_scratch(be, sh, &scratch, &counters));
  return ddp_cuda_bn_reduce(dt, sums, scratch, counters, inp, dout, mean, NULL,
                            (int64_t)sh->N * sh->H * sh->W, sh->C, ddp_cuda_stream(be, s));
}

static ddp_status_t cuda_bn_apply_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                                      float *dbeta, const void *dout, const void *inp,
                                      const float *mean, const float *var, const float *gamma,
                                      const float *g, const float *l, int64_t M_total,
                                      const ddp_bn_shape_t *sh, int accumulate, ddp_stream_t s) {
  DDP_CHECK(ddp_cuda_conv_check_dt("bn_apply_bwd", dt));
  DDP_CHECK(ddp_bn_check_shape("bn_apply_bwd", sh, 0));
  REQUIRE(dinp && dgamma && dbeta && dout && inp && mean && var && gamma && g && l,
          "bn_apply_bwd: dinp, dgamma, dbeta, dout, inp, mean, var, gamma, g and l are required");
  DDP_CHECK(check_m_total("bn_apply_bwd", M_total, sh, 0));
  return ddp_cuda_bn_apply_bwd(dt, dinp, dgamma, dbeta, dout, inp, mean, var, NULL, gamma, g, l,
                               sh->eps, (double)M_total, (int64_t)sh->N * sh->H * sh->W, sh->C,
                               accumulate, NULL, ddp_cuda_stream(be, s));
}

const ddp_conv_ops_t ddp_conv_cuda_ops = {
    .conv_fwd = ddp_cuda_conv_fwd,
    .conv_bwd_data = ddp_cuda_conv_bwd_data,
    .conv_bwd_data_add = ddp_cuda_conv_bwd_data_add,
    .conv_bwd_weights = ddp_cuda_conv_bwd_weights,
    .conv_prepare = ddp_cuda_conv_prepare,
    .conv_algos_reload = ddp_cuda_conv_algos_reload,
    .bn_fwd = ddp_cuda_bn_fwd,
    .bn_bwd = ddp_cuda_bn_bwd,
    .bn_prepare = ddp_cuda_bn_prepare,
    .bn_relu_fwd = ddp_cuda_bn_relu_fwd,
    .bn_relu_bwd = ddp_cuda_bn_relu_bwd,
    .bn_reduce_fwd = cuda_bn_reduce_fwd,
    .bn_apply_fwd = cuda_bn_apply_fwd,
    .bn_reduce_bwd = cuda_bn_reduce_bwd,
    .bn_apply_bwd = cuda_bn_apply_bwd,
    .maxpool_workspace_bytes = cuda_maxpool_workspace_bytes,
    .maxpool_fwd = cuda_maxpool_fwd,
    .maxpool_bwd = cuda_maxpool_bwd,
    .avgpool_fwd = cuda_avgpool_fwd,
    .avgpool_bwd = cuda_avgpool_bwd,
    .relu_fwd = cuda_relu_fwd,
    .add_relu_fwd = cuda_add_relu_fwd,
    .relu_bwd = cuda_relu_bwd,
    .release = ddp_cuda_conv_release,
};
