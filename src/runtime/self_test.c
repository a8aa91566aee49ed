/* The smoke job (see smoke.h). On every rank it:
 *   1. draws matrices from the seeded counter-based RNG and checks that all
 *      ranks drew identical bits (the reproducibility contract);
 *   2. runs a GEMM through the backend (device memory, copies, a stream) and
 *      compares it with a plain loop on the host;
 *   3. round-trips the result through bf16 and fp16 on the backend and checks
 *      the error is within half an ulp of each format;
 *   4. measures the GEMM rate (the MFU reference) unless --peak-gflops is set,
 *      and reports it per rank and for the job. */
#include "runtime/self_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/rng.h"
#include "core/arena.h"
#include "core/hash.h"

enum { SMOKE_M = 67, SMOKE_N = 45, SMOKE_K = 129 };

/* Largest |x - ref| / max(|ref|, 1) over n values. */
static double max_rel_err(const float *x, const float *ref, size_t n) {
  double worst = 0.0;
  for (size_t i = 0; i < n; ++i) {
    double d = fabs((double)x[i] - ref[i]) / fmax(fabs((double)ref[i]), 1.0);
    if (!(d <= worst)) worst = d; /* NaN counts as the worst */
  }
  return worst;
}

static ddp_status_t check_round_trip(ddp_backend_t *be, ddp_arena_t *arena, const void *dev_c,
                                     const float *host_c, size_t n, ddp_dtype_t half,
                                     float *host_back) {
  void *dev_half = NULL, *dev_back = NULL;
  size_t mark = ddp_arena_mark(arena);
  DDP_CHECK(ddp_arena_alloc(arena, n * ddp_dtype_size(half), &dev_half));
  DDP_CHECK(ddp_arena_alloc(arena, n * sizeof(float), &dev_back));
  DDP_CHECK(be->ops->convert(be, dev_half, half, dev_c, DDP_DTYPE_F32, n, NULL));
  DDP_CHECK(be->ops->convert(be, dev_back, DDP_DTYPE_F32, dev_half, half, n, NULL));
  DDP_CHECK(ddp_backend_copy(be, host_back, dev_back, n * sizeof(float),
                             DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  DDP_CHECK(ddp_backend_sync(be, NULL));
  ddp_arena_release(arena, mark);
  /* Round to nearest: relative error <= 2^-(mantissa bits + 1). */
  const double bound = half == DDP_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
  double err = max_rel_err(host_back, host_c, n);
  if (!(err <= bound))
    DDP_FAIL(DDP_ERR_NUMERIC, "smoke: fp32 -> %s -> fp32 relative error %.3g exceeds %.3g",
             ddp_dtype_name(half), err, bound);
  return DDP_OK;
}

ddp_status_t ddp_smoke_run(const ddp_options_t *opts, const ddp_dist_t *dist, ddp_backend_t *be) {
  const size_t na = (size_t)SMOKE_M * SMOKE_K, nb = (size_t)SMOKE_K * SMOKE_N;
  const size_t nc = (size_t)SMOKE_M * SMOKE_N;
  ddp_status_t st = DDP_OK;
  ddp_arena_t arena = {0};
  float *host = calloc(na + nb + 3 * nc, sizeof(float));
  if (!host) DDP_FAIL(DDP_ERR_OOM, "smoke: out of host memory");
  float *a = host, *b = a + na, *c = b + nb, *ref = c + nc, *back = ref + nc;

  /* 1. Every rank draws the same numbers from the seed. */
  ddp_rng_t rng;
  ddp_rng_init(&rng, (uint64_t)opts->seed, 0);
  ddp_rng_fill_normal(&rng, 0, 0.0f, 1.0f, a, na);
  ddp_rng_fill_normal(&rng, na, 0.0f, 1.0f, b, nb);
  DDP_CHECK_GOTO(ddp_dist_agree_u64(dist, "the seeded RNG stream",
                                    ddp_fnv1a64(DDP_FNV1A64_INIT, a, (na + nb) * 4)),
                 st, out);

  /* 2. GEMM on the backend against a host loop. */
  DDP_CHECK_GOTO(ddp_arena_init(&arena, be, "smoke", 8 * (na + nb + 4 * nc)), st, out);
  void *da, *db, *dc;
  DDP_CHECK_GOTO(ddp_arena_alloc(&arena, na * 4, &da), st, out);
  DDP_CHECK_GOTO(ddp_arena_alloc(&arena, nb * 4, &db), st, out);
  DDP_CHECK_GOTO(ddp_arena_alloc(&arena, nc * 4, &dc), st, out);
  DDP_CHECK_GOTO(ddp_backend_copy(be, da, a, na * 4, DDP_COPY_KIND_HOST_TO_DEVICE, NULL), st, out);
  DDP_CHECK_GOTO(ddp_backend_copy(be, db, b, nb * 4, DDP_COPY_KIND_HOST_TO_DEVICE, NULL), st, out);
  ddp_gemm_t g = ddp_gemm_packed_f32(SMOKE_M, SMOKE_N, SMOKE_K, da, db, dc);
  DDP_CHECK_GOTO(ddp_backend_gemm(be, &g, NULL), st, out);
  DDP_CHECK_GOTO(ddp_backend_copy(be, c, dc, nc * 4, DDP_COPY_KIND_DEVICE_TO_HOST, NULL), st, out);
  DDP_CHECK_GOTO(ddp_backend_sync(be, NULL), st, out);
  for (int i = 0; i < SMOKE_M; ++i)
    for (int j = 0; j < SMOKE_N; ++j) {
      double s = 0.0;
      for (int k = 0; k < SMOKE_K; ++k) s += (double)a[i * SMOKE_K + k] * b[k * SMOKE_N + j];
      ref[i * SMOKE_N + j] = (float)s;
    }
  /* fp32 dot products of length K with O(1) terms: error ~ K * 2^-24 each. */
  double gemm_err = max_rel_err(c, ref, nc), gemm_bound = SMOKE_K * 0x1p-24 * 4;
  if (!(gemm_err <= gemm_bound))
    DDP_FAIL_GOTO(st, DDP_ERR_NUMERIC, out, "smoke: GEMM differs from the host loop by %.3g > %.3g",
                  gemm_err, gemm_bound);

  /* 3. Half-precision round trips on the backend. */
  DDP_CHECK_GOTO(check_round_trip(be, &arena, dc, c, nc, DDP_DTYPE_BF16, back), st, out);
  DDP_CHECK_GOTO(check_round_trip(be, &arena, dc, c, nc, DDP_DTYPE_F16, back), st, out);

  /* 4. The GEMM rate MFU will be reported against. */
  double gflops = opts->peak_gflops, total = 0.0;
  const char *how = "given";
  if (gflops == 0.0) {
    DDP_CHECK_GOTO(ddp_backend_measure_gemm_gflops(be, be->device < 0 ? 512 : 4096, 0.25, &gflops),
                   st, out);
    how = "measured";
  }
  total = gflops;
  DDP_CHECK_GOTO(ddp_dist_sum_double(dist, &total), st, out);
  DDP_LOG_INFO("fp32 GEMM peak %s: %.1f GFLOP/s on rank 0, %.1f GFLOP/s for the job", how, gflops,
               total);
  DDP_LOG_INFO(
      "smoke job passed on %d rank%s: RNG streams agree, GEMM error %.2g, bf16/fp16 "
      "round trips within half an ulp",
      dist->world, dist->world == 1 ? "" : "s", gemm_err);
out:
  ddp_arena_destroy(&arena);
  free(host);
  return st;
}
