/* The gradient epilogue of a half-precision all-reduce on the CPU backend
 * (ddp_optim_grad_epilogue_cpu, ddp_optim_sum_partials_cpu; see
 * optim/optim.h), and the same work as entries of the CPU optimizer
 * table, which src/optim/optim.c calls once it has checked the arguments.
 *
 * These are the CUDA kernels' twins (kernels/grad_epilogue.cu). The CPU
 * backend's memory is host memory, so the buffers are read directly; work
 * runs at once on the calling thread in a fixed order, so the results are
 * the same bits from run to run. */
#include <config.h>

#include <stddef.h>

#include "ddptrain/check.h"
#include "backend/cpu/cpu_optim.h"
#include "optim/optim.h"

#define BLOCK DDP_CPU_OPTIM_BLOCK
#define LANES DDP_CPU_OPTIM_LANES

ddp_status_t ddp_cpu_optim_grad_epilogue(ddp_backend_t *be, float *dst, const void *src,
                                         ddp_dtype_t src_dtype, size_t n, float scale,
                                         double *partial, ddp_stream_t s) {
  (void)be, (void)s; /* CPU: work runs at once */
  const unsigned char *h = src;
  const size_t esz = ddp_dtype_size(src_dtype);
  /* Block by block while the block is in L1: widen into t, scale into dst,
   * square dst, with the block and lane layout of ddp_optim_grad_sumsq_cpu
   * so one bucket's sum is that function's bit for bit. */
  double acc[LANES] = {0};
  float t[BLOCK];
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK) {
    (void)ddp_convert_host(t, DDP_DTYPE_F32, h + i * esz, src_dtype, BLOCK); /* checked */
    ddp_cpu_optim_scale_block(dst + i, t, scale, BLOCK);
    ddp_cpu_optim_sumsq_lanes(acc, dst + i, BLOCK);
  }
  if (i < n) {
    (void)ddp_convert_host(t, DDP_DTYPE_F32, h + i * esz, src_dtype, n - i);
    ddp_cpu_optim_scale_block(dst + i, t, scale, n - i);
    ddp_cpu_optim_sumsq_lanes(acc, dst + i, n - i);
  }
  *partial = ddp_cpu_optim_lanes_total(acc);
  return DDP_OK;
}

ddp_status_t ddp_cpu_optim_sum_partials(ddp_backend_t *be, float *sumsq, const double *partials,
                                        int n, ddp_stream_t s) {
  (void)be, (void)s;
  /* in bucket order, in double: the total every backend reproduces */
  double total = 0.0;
  for (int b = 0; b < n; ++b) total += partials[b];
  *sumsq = (float)total;
  return DDP_OK;
}

ddp_status_t ddp_optim_grad_epilogue_cpu(ddp_backend_t *be, float *dst, const void *src,
                                         ddp_dtype_t src_dtype, size_t n, float scale,
                                         double *partial, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_optim_require_host(be, "optim_grad_epilogue"));
  DDP_CHECK(ddp_optim_check_grad_epilogue(dst, src, src_dtype, n, scale, partial));
  return ddp_cpu_optim_grad_epilogue(be, dst, src, src_dtype, n, scale, partial, s);
}

ddp_status_t ddp_optim_sum_partials_cpu(ddp_backend_t *be, float *sumsq, const double *partials,
                                        int n, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_optim_require_host(be, "optim_sum_partials"));
  DDP_CHECK(ddp_optim_check_sum_partials(sumsq, partials, n));
  return ddp_cpu_optim_sum_partials(be, sumsq, partials, n, s);
}
