/* The conv table's element-wise and pooling kernels of ours on the CPU
 * (ddptrain/conv.h): ReLU, the residual block's fused add + ReLU, the ReLU
 * backward, and global average pooling forward and backward, fp32 NHWC.
 *
 * oneDNN has eltwise and pooling primitives too, but these are single
 * memory-bound passes that the CUDA twins write as kernels of their own:
 * plain loops here keep the two sides one definition (NaN propagation, the
 * rounding of the sum before the ReLU, the order of the average's sum) and
 * need no primitive cache. Like cpu_nn.c they run on the calling thread in
 * a fixed order, so results are bit-reproducible; the average pool sums in
 * double. Nothing here allocates, and every op validates all its arguments
 * before writing anything. */
#include <config.h>

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/cpu_conv.h"
#include "ddptrain/check.h"

/* Channels per block of the pooling sums: a block's double accumulators
 * live on the stack (2 KiB) and each pass over the positions reads one
 * contiguous run of every row. */
#define CHANNEL_BLOCK 256

ddp_status_t ddp_cpu_conv_ops_admit(const ddp_backend_t *be, ddp_dtype_t dt, const char *op) {
  if (!be || be->device != -1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: the CPU conv kernels need the CPU backend (got %s)", op,
             be ? "a GPU backend" : "no backend");
  if (dt != DDP_DTYPE_F32)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "%s: only fp32 is implemented on the CPU, not %s", op,
             ddp_dtype_name(dt));
  return DDP_OK;
}

/* max(x, 0) that keeps a NaN (a diverging run must still show it) and maps
 * -0 to +0, so the two backends agree bit for bit. */
static inline float relu1(float x) {
  return x <= 0.0f ? 0.0f : x;
}

ddp_status_t ddp_cpu_relu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                              size_t n, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_conv_ops_admit(be, dt, "relu_fwd"));
  if (n == 0) return DDP_OK;
  if (!out || !inp) DDP_FAIL(DDP_ERR_INVALID_ARG, "relu_fwd: out and inp are required");
  /* No restrict: out may alias inp (each element is read before written). */
  float *y = out;
  const float *x = inp;
  for (size_t i = 0; i < n; ++i) y[i] = relu1(x[i]);
  return DDP_OK;
}

ddp_status_t ddp_cpu_add_relu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *a,
                                  const void *b, size_t n, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_conv_ops_admit(be, dt, "add_relu_fwd"));
  if (n == 0) return DDP_OK;
  if (!out || !a || !b) DDP_FAIL(DDP_ERR_INVALID_ARG, "add_relu_fwd: out, a and b are required");
  float *y = out;
  const float *x1 = a, *x2 = b;
  for (size_t i = 0; i < n; ++i) {
    const float sum = x1[i] + x2[i]; /* rounded to fp32 once, then clipped */
    y[i] = relu1(sum);
  }
  return DDP_OK;
}

ddp_status_t ddp_cpu_relu_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                              const void *out, size_t n, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_conv_ops_admit(be, dt, "relu_bwd"));
  if (n == 0) return DDP_OK;
  if (!dinp || !dout || !out)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "relu_bwd: dinp, dout and out are required");
  float *dx = dinp;
  const float *dy = dout, *y = out;
  for (size_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
  return DDP_OK;
}

static ddp_status_t check_pool_sizes(int N, int HW, int C, const char *op) {
  if (N < 1 || HW < 1 || C < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: every size must be positive (N=%d HW=%d C=%d)", op, N, HW,
             C);
  return DDP_OK;
}

ddp_status_t ddp_cpu_avgpool_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                                 int N, int HW, int C, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_conv_ops_admit(be, dt, "avgpool_fwd"));
  DDP_CHECK(check_pool_sizes(N, HW, C, "avgpool_fwd"));
  if (!out || !inp) DDP_FAIL(DDP_ERR_INVALID_ARG, "avgpool_fwd: out and inp are required");
  float *y = out;
  const float *x = inp;
  const size_t c = (size_t)C, hw = (size_t)HW;
  double acc[CHANNEL_BLOCK];
  for (size_t n = 0; n < (size_t)N; ++n) {
    const float *xn = x + n * hw * c;
    for (size_t c0 = 0; c0 < c; c0 += CHANNEL_BLOCK) {
      const size_t nc = c - c0 < CHANNEL_BLOCK ? c - c0 : CHANNEL_BLOCK;
      for (size_t j = 0; j < nc; ++j) acc[j] = 0.0;
      /* Positions in order for every channel: a fixed summation order. */
      for (size_t p = 0; p < hw; ++p) {
        const float *row = xn + p * c + c0;
        for (size_t j = 0; j < nc; ++j) acc[j] += row[j];
      }
      for (size_t j = 0; j < nc; ++j) y[n * c + c0 + j] = (float)(acc[j] / (double)HW);
    }
  }
  return DDP_OK;
}

ddp_status_t ddp_cpu_avgpool_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                 int N, int HW, int C, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_conv_ops_admit(be, dt, "avgpool_bwd"));
  DDP_CHECK(check_pool_sizes(N, HW, C, "avgpool_bwd"));
  if (!dinp || !dout) DDP_FAIL(DDP_ERR_INVALID_ARG, "avgpool_bwd: dinp and dout are required");
  float *restrict dx = dinp;
  const float *restrict dy = dout;
  const size_t c = (size_t)C, hw = (size_t)HW;
  for (size_t n = 0; n < (size_t)N; ++n) {
    const float *g = dy + n * c;
    float *dxn = dx + n * hw * c;
    /* Each position gets dout / HW, the same quotient everywhere. */
    for (size_t p = 0; p < hw; ++p)
      for (size_t j = 0; j < c; ++j) dxn[p * c + j] = g[j] / (float)HW;
  }
  return DDP_OK;
}
