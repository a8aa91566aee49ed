/* Start-up GEMM rate measurement (see ddp_backend_measure_gemm_gflops). */
#include <config.h>

#include "backend/cpu/cpu_dnnl.h"
#include "backend/gemm_peak.h"
#include "core/clock.h"
#include "ddptrain/backend.h"
#include "ddptrain/check.h"
#include "ddptrain/log.h"

ddp_status_t ddp_gemm_fastest_window(ddp_gemm_step_fn product, ddp_gemm_step_fn sync, void *ctx,
                                     int64_t n, double seconds, double *gflops) {
  DDP_CHECK(product(ctx)); /* warm-up: threads, caches */
  if (sync) DDP_CHECK(sync(ctx));
  const double flops = 2.0 * (double)n * (double)n * (double)n * 4;
  const double start = ddp_clock_seconds();
  double best = 0.0, t0 = start;
  do {
    for (int i = 0; i < 4; ++i) DDP_CHECK(product(ctx));
    if (sync) DDP_CHECK(sync(ctx));
    const double t1 = ddp_clock_seconds();
    if (t1 > t0 && flops / (t1 - t0) > best) best = flops / (t1 - t0);
    t0 = t1;
  } while (t0 - start < seconds);
  *gflops = best * 1e-9;
  return DDP_OK;
}

typedef struct backend_gemm {
  ddp_backend_t *be;
  ddp_gemm_t g;
} backend_gemm_t;

static ddp_status_t backend_product(void *ctx) {
  backend_gemm_t *c = ctx;
  return ddp_backend_gemm(c->be, &c->g, NULL);
}

static ddp_status_t backend_sync(void *ctx) {
  return ddp_backend_sync(((backend_gemm_t *)ctx)->be, NULL);
}

ddp_status_t ddp_backend_measure_gemm_gflops(ddp_backend_t *be, int64_t n, double seconds,
                                             double *gflops) {
  return ddp_backend_measure_gemm_gflops_dtype(be, DDP_DTYPE_F32, n, seconds, gflops);
}

/* The CPU's fp32 peak also counts oneDNN's GEMM, where the build has it:
 * the convolutions run on oneDNN's kernels, which may use wider vectors
 * than the OpenBLAS at hand (cpu_dnnl.h, ddp_cpu_dnnl_sgemm_gflops). */
static ddp_status_t cpu_library_peak(ddp_backend_t *be, int64_t n, double seconds,
                                     double *gflops) {
  if (be->device >= 0 || !ddp_cpu_dnnl_available()) return DDP_OK;
  double dnnl = 0.0;
  DDP_CHECK(ddp_cpu_dnnl_sgemm_gflops(n, seconds, be->threads, &dnnl));
  if (dnnl > *gflops) {
    DDP_LOG_DEBUG("fp32 GEMM peak: oneDNN %.1f GFLOP/s, above the backend's %.1f", dnnl, *gflops);
    *gflops = dnnl;
  }
  return DDP_OK;
}

ddp_status_t ddp_backend_measure_gemm_gflops_dtype(ddp_backend_t *be, ddp_dtype_t dtype, int64_t n,
                                                   double seconds, double *gflops) {
  if (!be || !gflops || n < 1 || n > 16384 || !(seconds >= 0) || !ddp_dtype_is_float(dtype))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "measure_gemm_gflops: bad arguments (n = %lld, %s)", (long long)n,
             ddp_dtype_name(dtype));
  const size_t bytes = (size_t)(n * n) * ddp_dtype_size(dtype);
  void *a = NULL, *b = NULL, *c = NULL;
  ddp_status_t st = DDP_OK;
  DDP_CHECK_GOTO(ddp_backend_alloc(be, bytes, &a), st, out);
  DDP_CHECK_GOTO(ddp_backend_alloc(be, bytes, &b), st, out);
  DDP_CHECK_GOTO(ddp_backend_alloc(be, bytes, &c), st, out);
  /* Small non-zero values: some BLAS kernels take shortcuts on zeros. */
  DDP_CHECK_GOTO(be->ops->fill(be, a, dtype, 0.5f, (size_t)(n * n), NULL), st, out);
  DDP_CHECK_GOTO(be->ops->fill(be, b, dtype, 0.25f, (size_t)(n * n), NULL), st, out);
  backend_gemm_t ctx = {.be = be, .g = ddp_gemm_packed_f32(n, n, n, a, b, c)};
  ctx.g.ab_dtype = ctx.g.c_dtype = dtype; /* half operands and output, fp32 accumulation */
  DDP_CHECK_GOTO(ddp_gemm_fastest_window(backend_product, backend_sync, &ctx, n, seconds, gflops),
                 st, out);
  if (dtype == DDP_DTYPE_F32) st = cpu_library_peak(be, n, seconds, gflops);
out:
  ddp_backend_free(be, c);
  ddp_backend_free(be, b);
  ddp_backend_free(be, a);
  return st;
}
