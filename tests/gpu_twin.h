/* Shared fixture for the GPU suites that check a CUDA op against its CPU
 * twin (the CPU backend's op of the same name).
 *
 * A "twin" tensor lives three times: host values (fp32, already rounded to
 * the op's dtype, so both backends see the same numbers), a CPU-backend
 * buffer and a GPU buffer, both in the op's dtype. Inputs are fresh random
 * values every run (the seed comes from the clock and is printed, so a
 * failure can be replayed with DDPTRAIN_TEST_SEED=<seed>), never zeros.
 * Outputs are poisoned first: NaN bit patterns (0xFF bytes) on both
 * backends, so an element the GPU op leaves unwritten shows as NaN where the
 * CPU result is finite. Accumulating outputs start from the same random
 * values on both.
 *
 * Comparison is normwise: err = max|gpu - cpu| / max|cpu| over the tensor,
 * plus "no NaN/inf where the CPU has a finite value". Each suite states its
 * thresholds per precision beside the test (twin_tol() holds the defaults).
 *
 * Exit 77 (SKIP) when the registry has no usable CUDA backend. Tests run in
 * process (CK_NOFORK): a CUDA context does not survive fork. */
#ifndef DDPTRAIN_TESTS_GPU_TWIN_H
#define DDPTRAIN_TESTS_GPU_TWIN_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_util.h"
#include "ddptrain/backend.h"
#include "ddptrain/dtype.h"
#include "ddptrain/rng.h"

static ddp_backend_t *twin_gpu; /* "cuda" */
static ddp_backend_t *twin_cpu; /* "cpu", one thread: the oracle */
static ddp_rng_t twin_rng;
static uint64_t twin_off;

/* Creates both backends, or exits 77 when there is no usable GPU. Call from
 * main() before running the suite. */
static inline void twin_start(void) {
  ddp_backend_config_t g = {.device = "cuda"};
  if (ddp_backend_create(&g, &twin_gpu) != DDP_OK || !twin_gpu ||
      twin_gpu->ops->kind != DDP_DEVICE_KIND_CUDA) {
    fprintf(stderr, "SKIP: no usable CUDA device\n");
    exit(77);
  }
  ddp_backend_config_t c = {.device = "cpu", .threads = 1};
  if (ddp_backend_create(&c, &twin_cpu) != DDP_OK) {
    fprintf(stderr, "cannot create the CPU backend\n");
    exit(99);
  }
  const char *env = getenv("DDPTRAIN_TEST_SEED");
  const uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)clock();
  fprintf(stderr, "gpu twin suite: seed %llu (DDPTRAIN_TEST_SEED=%llu replays it)\n",
          (unsigned long long)seed, (unsigned long long)seed);
  ddp_rng_init(&twin_rng, seed, 7);
  twin_off = 0;
}

static inline void twin_stop(void) {
  ddp_backend_destroy(twin_gpu);
  ddp_backend_destroy(twin_cpu);
  twin_gpu = twin_cpu = NULL;
}

/* Runs a twin suite in process (a CUDA context does not survive fork),
 * then twin_stop(); the exit status for main(). */
static inline int twin_run_suite(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  twin_stop();
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

typedef struct twin {
  float *host; /* n fp32 values (inputs: the values both backends hold) */
  void *cpu, *gpu;
  ddp_dtype_t dt;
  size_t n;
} twin_t;

static inline void *twin_dev_alloc(ddp_backend_t *be, size_t bytes) {
  void *p = NULL;
  ck_assert_int_eq(ddp_backend_alloc(be, bytes ? bytes : 1, &p), DDP_OK);
  return p;
}

static inline void twin_upload(ddp_backend_t *be, void *dst, const void *src, size_t bytes) {
  ck_assert_int_eq(ddp_backend_copy(be, dst, src, bytes, DDP_COPY_KIND_HOST_TO_DEVICE, NULL),
                   DDP_OK);
  ck_assert_int_eq(ddp_backend_sync(be, NULL), DDP_OK);
}

static inline void twin_download(ddp_backend_t *be, void *dst, const void *src, size_t bytes) {
  ck_assert_int_eq(ddp_backend_copy(be, dst, src, bytes, DDP_COPY_KIND_DEVICE_TO_HOST, NULL),
                   DDP_OK);
  ck_assert_int_eq(ddp_backend_sync(be, NULL), DDP_OK);
}

/* Host fp32 values -> both backends in dt (the values are rounded to dt in
 * place first, so host, CPU and GPU agree exactly). */
static inline void twin_set(twin_t *t) {
  const size_t esz = ddp_dtype_size(t->dt);
  ck_assert_int_eq(ddp_round_host(t->host, t->host, t->dt, t->n), DDP_OK);
  void *bits = malloc(t->n * esz + 1);
  ck_assert_ptr_nonnull(bits);
  ck_assert_int_eq(ddp_convert_host(bits, t->dt, t->host, DDP_DTYPE_F32, t->n), DDP_OK);
  twin_upload(twin_cpu, t->cpu, bits, t->n * esz);
  twin_upload(twin_gpu, t->gpu, bits, t->n * esz);
  free(bits);
}

static inline twin_t twin_alloc(ddp_dtype_t dt, size_t n) {
  twin_t t = {.dt = dt, .n = n};
  t.host = malloc((n ? n : 1) * sizeof(float));
  ck_assert_ptr_nonnull(t.host);
  t.cpu = twin_dev_alloc(twin_cpu, n * ddp_dtype_size(dt));
  t.gpu = twin_dev_alloc(twin_gpu, n * ddp_dtype_size(dt));
  return t;
}

/* Random N(mean, std^2) values, redrawn where one rounds to exactly zero. */
static inline twin_t twin_input(ddp_dtype_t dt, size_t n, float mean, float std) {
  twin_t t = twin_alloc(dt, n);
  ddp_rng_fill_normal(&twin_rng, twin_off, mean, std, t.host, n);
  twin_off += n;
  for (size_t i = 0; i < n; ++i)
    if (t.host[i] == 0.0f) t.host[i] = std > 0 ? std * 0.5f : 0.5f;
  twin_set(&t);
  return t;
}

/* An output: all 0xFF bytes (NaN in every float type) on both backends. */
static inline twin_t twin_output(ddp_dtype_t dt, size_t n) {
  twin_t t = twin_alloc(dt, n);
  const size_t bytes = n * ddp_dtype_size(dt);
  void *poison = malloc(bytes + 1);
  ck_assert_ptr_nonnull(poison);
  memset(poison, 0xFF, bytes);
  twin_upload(twin_cpu, t.cpu, poison, bytes);
  twin_upload(twin_gpu, t.gpu, poison, bytes);
  free(poison);
  for (size_t i = 0; i < n; ++i) t.host[i] = NAN;
  return t;
}

static inline void twin_free(twin_t *t) {
  free(t->host);
  ddp_backend_free(twin_cpu, t->cpu);
  ddp_backend_free(twin_gpu, t->gpu);
  memset(t, 0, sizeof *t);
}

/* Reads one backend's copy back as fp32. */
static inline float *twin_fetch(const twin_t *t, ddp_backend_t *be) {
  const size_t esz = ddp_dtype_size(t->dt);
  void *bits = malloc(t->n * esz + 1);
  float *out = malloc((t->n ? t->n : 1) * sizeof(float));
  ck_assert(bits && out);
  twin_download(be, bits, be == twin_gpu ? t->gpu : t->cpu, t->n * esz);
  ck_assert_int_eq(ddp_convert_host(out, DDP_DTYPE_F32, bits, t->dt, t->n), DDP_OK);
  free(bits);
  return out;
}

/* Default normwise relative-error thresholds per storage type of the
 * compared output: fp32 outputs of fp32 math differ only by summation order
 * (a few ulps over reductions of ~1e3 terms); a half output may differ by
 * one rounding of its own (bf16 2^-8, fp16 2^-11) on top of an fp32
 * difference that the rounding can amplify to one more half ulp. */
static inline double twin_tol(ddp_dtype_t out_dtype) {
  switch (out_dtype) {
    case DDP_DTYPE_BF16: return 1.6e-2;
    case DDP_DTYPE_F16: return 2.0e-3;
    default: return 2e-5;
  }
}

/* Compares the GPU result with the CPU result: normwise relative error at
 * most tol, and no non-finite GPU value where the CPU's is finite (an
 * unwritten, poisoned element). Returns the error for reporting. */
static inline double twin_expect(const twin_t *t, double tol, const char *what) {
  float *g = twin_fetch(t, twin_gpu), *c = twin_fetch(t, twin_cpu);
  double num = 0.0, den = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < t->n; ++i) {
    if (isfinite(c[i]) && !isfinite(g[i]))
      ck_abort_msg("%s (%s): element %zu is %g on the GPU, %g on the CPU (unwritten?)", what,
                   ddp_dtype_name(t->dt), i, (double)g[i], (double)c[i]);
    const double d = fabs((double)g[i] - (double)c[i]);
    if (d > num) num = d, worst = i;
    if (fabs((double)c[i]) > den) den = fabs((double)c[i]);
  }
  const double err = den > 0 ? num / den : num;
  if (!(err <= tol))
    ck_abort_msg("%s (%s): normwise relative error %.3g > %.3g (element %zu: gpu %.8g cpu %.8g)",
                 what, ddp_dtype_name(t->dt), err, tol, worst, t->n ? (double)g[worst] : 0.0,
                 t->n ? (double)c[worst] : 0.0);
  free(g);
  free(c);
  return err;
}

/* The same for a plain fp32 buffer pair (parameter gradients, statistics). */
static inline twin_t twin_f32_view(void *cpu, void *gpu, size_t n) {
  twin_t t = {.host = NULL, .cpu = cpu, .gpu = gpu, .dt = DDP_DTYPE_F32, .n = n};
  return t;
}

static const ddp_dtype_t twin_dtypes[] = {DDP_DTYPE_F32, DDP_DTYPE_BF16, DDP_DTYPE_F16};

#endif
