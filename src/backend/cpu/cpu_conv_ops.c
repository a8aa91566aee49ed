/* The conv table's element-wise and pooling kernels of ours on the CPU
 * (ddptrain/conv.h): ReLU, the residual block's fused add + ReLU, the ReLU
 * backward, and global average pooling forward and backward, fp32 NHWC.
 *
 * oneDNN has eltwise and pooling primitives too, but these are single
 * memory-bound passes that the CUDA twins write as kernels of their own:
 * plain loops here keep the two sides one definition (NaN propagation, the
 * rounding of the sum before the ReLU, the order of the average's sum) and
 * need no primitive cache. Like cpu_nn.c they run on the calling thread in
 * a fixed order, vectorised across elements or channels, so results are
 * bit-reproducible; the average pool sums in double. Nothing here
 * allocates, and every op validates all its arguments before writing
 * anything. */
#include <config.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_conv.h"
#include "backend/cpu/cpu_nn_impl.h"
#include "ddptrain/check.h"

/* Channels per block of the pooling sums: a block's double accumulators
 * live on the stack (2 KiB) and each pass over the positions reads one
 * contiguous run of every row. */
#define CHANNEL_BLOCK 256

/* Loops over channels run in fixed chunks of 8 (and a tail) with restrict
 * pointers: what GCC's -O2 vectoriser needs (cpu_nn.c does the same). */
#define CHUNK 8

void ddp_cpu_add_row_f64(double *restrict acc, const float *restrict row, size_t n) {
  size_t j = 0;
  for (; j + CHUNK <= n; j += CHUNK)
    for (size_t k = 0; k < CHUNK; ++k) acc[j + k] += row[j + k];
  for (; j < n; ++j) acc[j] += row[j];
}

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
 * -0 to +0, a definition a GPU twin can match bit for bit: lanes x <= 0
 * become 0, and a NaN compares false. */
static inline cpu_vf relu_v(cpu_vf x) {
  return cpu_vselect(x <= 0.0f, cpu_vsplat(0.0f), x);
}

/* The element-wise loops go through cpu_nn_impl.h's 8-lane vectors (plain
 * -O2 would leave them scalar); loads and stores are unaligned moves, so an
 * output may alias an input element for element. */
DDP_CPU_CLONES ddp_status_t ddp_cpu_relu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out,
                                             const void *inp, size_t n, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_conv_ops_admit(be, dt, "relu_fwd"));
  if (n == 0) return DDP_OK;
  if (!out || !inp) DDP_FAIL(DDP_ERR_INVALID_ARG, "relu_fwd: out and inp are required");
  float *y = out;
  const float *x = inp;
  size_t i = 0;
  for (; i + CPU_VW <= n; i += CPU_VW) cpu_vstore(y + i, relu_v(cpu_vload(x + i)));
  if (i < n) cpu_vstore_part(y + i, relu_v(cpu_vload_part(x + i, n - i, 0.0f)), n - i);
  return DDP_OK;
}

DDP_CPU_CLONES ddp_status_t ddp_cpu_add_relu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out,
                                                 const void *a, const void *b, size_t n,
                                                 ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_conv_ops_admit(be, dt, "add_relu_fwd"));
  if (n == 0) return DDP_OK;
  if (!out || !a || !b) DDP_FAIL(DDP_ERR_INVALID_ARG, "add_relu_fwd: out, a and b are required");
  float *y = out;
  const float *x1 = a, *x2 = b;
  size_t i = 0;
  /* The sum is rounded to fp32 once (a vector add), then clipped. */
  for (; i + CPU_VW <= n; i += CPU_VW)
    cpu_vstore(y + i, relu_v(cpu_vload(x1 + i) + cpu_vload(x2 + i)));
  if (i < n)
    cpu_vstore_part(
        y + i, relu_v(cpu_vload_part(x1 + i, n - i, 0.0f) + cpu_vload_part(x2 + i, n - i, 0.0f)),
        n - i);
  return DDP_OK;
}

static inline cpu_vf relu_bwd_v(cpu_vf dy, cpu_vf y) {
  return cpu_vselect(y > 0.0f, dy, cpu_vsplat(0.0f));
}

DDP_CPU_CLONES ddp_status_t ddp_cpu_relu_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp,
                                             const void *dout, const void *out, size_t n,
                                             ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_conv_ops_admit(be, dt, "relu_bwd"));
  if (n == 0) return DDP_OK;
  if (!dinp || !dout || !out)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "relu_bwd: dinp, dout and out are required");
  float *dx = dinp;
  const float *dy = dout, *y = out;
  size_t i = 0;
  for (; i + CPU_VW <= n; i += CPU_VW)
    cpu_vstore(dx + i, relu_bwd_v(cpu_vload(dy + i), cpu_vload(y + i)));
  if (i < n)
    cpu_vstore_part(
        dx + i, relu_bwd_v(cpu_vload_part(dy + i, n - i, 0.0f), cpu_vload_part(y + i, n - i, 0.0f)),
        n - i);
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
      for (size_t p = 0; p < hw; ++p) ddp_cpu_add_row_f64(acc, xn + p * c + c0, nc);
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
  float *dx = dinp;
  const float *dy = dout;
  const size_t c = (size_t)C, hw = (size_t)HW;
  for (size_t n = 0; n < (size_t)N; ++n) {
    const float *g = dy + n * c;
    float *dxn = dx + n * hw * c;
    /* Each position gets dout / HW, the same quotient everywhere: the first
     * row computed, the others copies of it. */
    for (size_t j = 0; j < c; ++j) dxn[j] = g[j] / (float)HW;
    for (size_t p = 1; p < hw; ++p) memcpy(dxn + p * c, dxn, c * sizeof *dxn);
  }
  return DDP_OK;
}
