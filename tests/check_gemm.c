/* Tests for the backend GEMM contract (ddptrain/backend.h), through the public
 * API only, on the CPU backend.
 *
 * Every result is compared with a double-precision triple loop. Inputs are
 * laid out the way the descriptor says and everything the descriptor does not
 * cover is poisoned: padding of A and B holds NaN (a backend that reads it
 * produces NaN), padding of C holds a sentinel that must survive bit for bit
 * (a backend that writes it is caught), and buffers are allocated to their
 * exact extent so the sanitizers see any overrun. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/backend.h"
#include "ddptrain/rng.h"
#include "ddptrain/status.h"
#include "check_util.h"
#include "gemm_layout.h"

#define SENTINEL (-777.25f)

static ddp_backend_t *g_be;
static uint64_t g_case_id; /* gives every case its own random inputs */

static void setup(void) {
  g_be = ddp_test_cpu_backend();
}

static void teardown(void) {
  ddp_backend_destroy(g_be);
  g_be = NULL;
}

/* One GEMM problem as the test builds it. ld* == 0 means the minimal pitch,
 * pad_* is the gap between consecutive matrices of a batch (stride = rows *
 * ld + pad), broadcast_b gives B stride 0. */
typedef struct gemm_case {
  ddp_transpose_t ta, tb;
  int64_t m, n, k, batch;
  int64_t lda, ldb, ldc;
  int64_t pad_a, pad_b, pad_c;
  int broadcast_b;
  float alpha, beta;
  float c_fill; /* C's initial in-matrix value; 0 = random in [-1, 1) */
  int reps;     /* times the GEMM is applied to the same C (0 = once) */
} gemm_case_t;

/* Host buffer of the layout: NaN everywhere, then the matrices filled with
 * uniforms in [-1, 1) (exact in float: 2u - 1 with u on the 2^-24 grid). */
static float *make_input(const layout_t *l, int64_t batch, const ddp_rng_t *rng) {
  const size_t n = alloc_elems(l);
  float *x = malloc(n * sizeof *x);
  float *u = malloc(n * sizeof *u);
  ck_assert_ptr_nonnull(x);
  ck_assert_ptr_nonnull(u);
  ddp_rng_fill_uniform(rng, 0, u, n);
  for (size_t i = 0; i < n; ++i) x[i] = NAN;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < l->rows; ++r)
      for (int64_t c = 0; c < l->cols; ++c) {
        const size_t at = (size_t)(b * l->stride + r * l->ld + c);
        x[at] = 2.0f * u[at] - 1.0f;
      }
  free(u);
  return x;
}

static void *to_device(const void *host, size_t bytes) {
  void *dev = NULL;
  ck_assert_int_eq(ddp_backend_alloc(g_be, bytes, &dev), DDP_OK);
  ck_assert_ptr_nonnull(dev);
  ck_assert_int_eq(ddp_backend_copy(g_be, dev, host, bytes, DDP_COPY_KIND_HOST_TO_DEVICE, NULL),
                   DDP_OK);
  return dev;
}

static void from_device(void *host, const void *dev, size_t bytes) {
  ck_assert_int_eq(ddp_backend_copy(g_be, host, dev, bytes, DDP_COPY_KIND_DEVICE_TO_HOST, NULL),
                   DDP_OK);
  ck_assert_int_eq(ddp_backend_sync(g_be, NULL), DDP_OK);
}

/* Runs one case and compares it with the reference.
 *
 * Tolerance: with u = 2^-24, a length-k fp32 dot product in any summation
 * order (blocked, pairwise, with or without FMA) has error at most
 * gamma_k * sum|a||b|, gamma_k = k u / (1 - k u) (Higham, Accuracy and
 * Stability, 3.1); scaling by alpha, by beta and the final add add at most
 * three more roundings. So |C - ref| <= 2 (k + 3) u * mag per application,
 * mag = |alpha| sum_l |a_il b_lj| + |beta| |C_in|, with a factor 2 of slack
 * for backends that fold alpha in early and gamma's denominator. Repeated
 * applications (reps) add their bounds. The bound is relative to mag, not to
 * |ref|, which cancellation can make arbitrarily small; an indexing error
 * costs a whole term, about mag / k, far above it for every k tested. */
static void run_case(const gemm_case_t *gc) {
  const int64_t m = gc->m, n = gc->n, k = gc->k, batch = gc->batch;
  const int reps = gc->reps > 0 ? gc->reps : 1;
  const int ta = gc->ta == DDP_TRANSPOSE_YES, tb = gc->tb == DDP_TRANSPOSE_YES;
  const layout_t la = make_layout(ta ? k : m, ta ? m : k, gc->lda, gc->pad_a, batch, 0);
  const layout_t lb =
      make_layout(tb ? n : k, tb ? k : n, gc->ldb, gc->pad_b, batch, gc->broadcast_b);
  const layout_t lc = make_layout(m, n, gc->ldc, gc->pad_c, batch, 0);

  ddp_rng_t base, rng_a, rng_b, rng_c;
  ddp_rng_init(&base, 20240520, 0);
  const uint64_t id = g_case_id++;
  ddp_rng_derive(&base, 3 * id, &rng_a);
  ddp_rng_derive(&base, 3 * id + 1, &rng_b);
  ddp_rng_derive(&base, 3 * id + 2, &rng_c);

  float *a = make_input(&la, batch, &rng_a);
  float *b = make_input(&lb, batch, &rng_b);
  const size_t nc = alloc_elems(&lc);
  float *c0 = malloc(nc * sizeof *c0), *c = malloc(nc * sizeof *c), *u = malloc(nc * sizeof *u);
  char *inside = calloc(nc, 1);
  ck_assert(c0 && c && u && inside);
  ddp_rng_fill_uniform(&rng_c, 0, u, nc);
  for (size_t i = 0; i < nc; ++i) c0[i] = SENTINEL;
  for (int64_t bb = 0; bb < batch; ++bb)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const size_t at = (size_t)(bb * lc.stride + i * lc.ld + j);
        c0[at] = gc->c_fill != 0.0f ? gc->c_fill : 2.0f * u[at] - 1.0f;
        inside[at] = 1;
      }

  void *da = to_device(a, alloc_elems(&la) * sizeof(float));
  void *db = to_device(b, alloc_elems(&lb) * sizeof(float));
  void *dc = to_device(c0, nc * sizeof(float));
  const ddp_gemm_t g = {.trans_a = gc->ta,
                        .trans_b = gc->tb,
                        .m = m,
                        .n = n,
                        .k = k,
                        .alpha = gc->alpha,
                        .beta = gc->beta,
                        .a = da,
                        .lda = la.ld,
                        .stride_a = la.stride,
                        .b = db,
                        .ldb = lb.ld,
                        .stride_b = lb.stride,
                        .c = dc,
                        .ldc = lc.ld,
                        .stride_c = lc.stride,
                        .batch = batch,
                        .ab_dtype = DDP_DTYPE_F32,
                        .c_dtype = DDP_DTYPE_F32};
  char what[200];
  snprintf(what, sizeof what,
           "m=%lld n=%lld k=%lld %c%c batch=%lld alpha=%g beta=%g lda=%lld ldb=%lld ldc=%lld "
           "strides=%lld/%lld/%lld reps=%d",
           (long long)m, (long long)n, (long long)k, ta ? 'T' : 'N', tb ? 'T' : 'N',
           (long long)batch, (double)gc->alpha, (double)gc->beta, (long long)la.ld,
           (long long)lb.ld, (long long)lc.ld, (long long)la.stride, (long long)lb.stride,
           (long long)lc.stride, reps);
  ck_assert_msg(ddp_gemm_validate(&g) == DDP_OK, "validate rejected %s", what);
  for (int r = 0; r < reps; ++r) {
    const ddp_status_t st = ddp_backend_gemm(g_be, &g, NULL);
    ck_assert_msg(st == DDP_OK, "gemm failed (%s): %s", ddp_status_name(st), what);
  }
  ck_assert_int_eq(ddp_backend_sync(g_be, NULL), DDP_OK);
  from_device(c, dc, nc * sizeof(float));

  /* Element checks are counted, not asserted one by one: each passing
   * ck_assert costs a write to Check's pipe. */
  size_t bad = 0, touched = 0;
  char first[200] = "";
  const double u32 = 0x1p-24;
  for (int64_t bb = 0; bb < batch; ++bb)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0, mag_dot = 0;
        for (int64_t l = 0; l < k; ++l) {
          const double x = at_op(a, &la, gc->ta, bb, i, l), y = at_op(b, &lb, gc->tb, bb, l, j);
          dot += x * y;
          mag_dot += fabs(x * y);
        }
        const size_t at = (size_t)(bb * lc.stride + i * lc.ld + j);
        double ref = c0[at], mag = fabs((double)c0[at]);
        for (int r = 0; r < reps; ++r) {
          /* beta == 0 ignores C, even NaN, so it must not be multiplied. */
          const double keep = gc->beta == 0.0f ? 0.0 : (double)gc->beta * ref;
          const double keep_mag = gc->beta == 0.0f ? 0.0 : fabs((double)gc->beta) * mag;
          ref = (double)gc->alpha * dot + keep;
          mag = fabs((double)gc->alpha) * mag_dot + keep_mag;
        }
        const double tol = 2.0 * reps * (double)(k + 3) * u32 * mag;
        const double got = c[at];
        if (!(fabs(got - ref) <= tol)) {
          if (bad++ == 0)
            snprintf(first, sizeof first, "batch %lld (%lld,%lld): got %.9g want %.9g tol %.3g",
                     (long long)bb, (long long)i, (long long)j, got, ref, tol);
        }
      }
  for (size_t i = 0; i < nc; ++i)
    if (!inside[i] && memcmp(&c[i], &c0[i], sizeof c[i]) != 0) ++touched;
  ck_assert_msg(bad == 0, "%zu wrong elements, first %s; %s", bad, first, what);
  ck_assert_msg(touched == 0, "%zu elements outside C written; %s", touched, what);

  ddp_backend_free(g_be, dc);
  ddp_backend_free(g_be, db);
  ddp_backend_free(g_be, da);
  free(inside);
  free(u);
  free(c);
  free(c0);
  free(b);
  free(a);
}

static const ddp_transpose_t k_trans[4][2] = {{DDP_TRANSPOSE_NO, DDP_TRANSPOSE_NO},
                                              {DDP_TRANSPOSE_NO, DDP_TRANSPOSE_YES},
                                              {DDP_TRANSPOSE_YES, DDP_TRANSPOSE_NO},
                                              {DDP_TRANSPOSE_YES, DDP_TRANSPOSE_YES}};

static gemm_case_t simple_case(int t, int64_t m, int64_t n, int64_t k) {
  gemm_case_t gc = {.ta = k_trans[t][0],
                    .tb = k_trans[t][1],
                    .m = m,
                    .n = n,
                    .k = k,
                    .batch = 1,
                    .alpha = 1.0f,
                    .beta = 0.0f};
  return gc;
}

START_TEST(test_gemm_odd_sizes_all_transposes) {
  static const int64_t sizes[] = {1, 3, 17, 33, 65};
  for (int t = 0; t < 4; ++t)
    for (int im = 0; im < 5; ++im)
      for (int in = 0; in < 5; ++in)
        for (int ik = 0; ik < 5; ++ik) {
          gemm_case_t gc = simple_case(t, sizes[im], sizes[in], sizes[ik]);
          run_case(&gc);
        }
}
END_TEST

START_TEST(test_gemm_large_odd_all_transposes) {
  for (int t = 0; t < 4; ++t) {
    gemm_case_t gc = simple_case(t, 127, 129, 131);
    gc.alpha = 0.75f;
    gc.beta = -0.5f;
    run_case(&gc);
  }
}
END_TEST

START_TEST(test_gemm_alpha_beta_combinations) {
  static const float alphas[] = {1.0f, -0.5f, 2.25f, 0.0f};
  static const float betas[] = {0.0f, 1.0f, -1.5f, 0.5f};
  static const int64_t shapes[][3] = {{17, 33, 65}, {3, 1, 17}, {33, 17, 1}};
  for (int t = 0; t < 4; ++t)
    for (int s = 0; s < 3; ++s)
      for (int ia = 0; ia < 4; ++ia)
        for (int ib = 0; ib < 4; ++ib) {
          gemm_case_t gc = simple_case(t, shapes[s][0], shapes[s][1], shapes[s][2]);
          gc.alpha = alphas[ia];
          gc.beta = betas[ib];
          run_case(&gc);
        }
}
END_TEST

START_TEST(test_gemm_beta_zero_ignores_nan_in_c) {
  /* The "grad = None" contract: C is write-only when beta == 0, so NaN or Inf
   * left in it must not reach the result (0 * NaN would). */
  static const float fills[] = {NAN, INFINITY, -INFINITY};
  static const float alphas[] = {1.0f, -2.0f, 0.0f};
  for (int t = 0; t < 4; ++t)
    for (int f = 0; f < 3; ++f)
      for (int ia = 0; ia < 3; ++ia) {
        gemm_case_t gc = simple_case(t, 17, 33, 65);
        gc.c_fill = fills[f];
        gc.alpha = alphas[ia];
        run_case(&gc);
        gc.m = 3, gc.n = 5, gc.k = 1;
        gc.batch = 3, gc.pad_c = 2;
        run_case(&gc);
      }
}
END_TEST

START_TEST(test_gemm_beta_one_accumulates) {
  /* Gradient accumulation: applying C += A B three times gives C0 + 3 A B. */
  for (int t = 0; t < 4; ++t) {
    gemm_case_t gc = simple_case(t, 33, 17, 65);
    gc.beta = 1.0f;
    gc.reps = 3;
    run_case(&gc);
    gc.alpha = -0.5f;
    gc.batch = 3;
    gc.pad_a = 1, gc.pad_b = 2, gc.pad_c = 3;
    run_case(&gc);
  }
}
END_TEST

START_TEST(test_gemm_padded_pitches) {
  for (int t = 0; t < 4; ++t) {
    const int ta = k_trans[t][0] == DDP_TRANSPOSE_YES, tb = k_trans[t][1] == DDP_TRANSPOSE_YES;
    gemm_case_t gc = simple_case(t, 17, 33, 65);
    gc.lda = (ta ? 17 : 65) + 3;
    gc.ldb = (tb ? 65 : 33) + 5;
    gc.ldc = 33 + 7;
    gc.alpha = 1.5f;
    gc.beta = 0.25f;
    run_case(&gc);
    /* Only one matrix padded at a time, so a backend using one pitch for
     * another is caught. */
    gemm_case_t only_a = simple_case(t, 3, 17, 33);
    only_a.lda = (ta ? 3 : 33) + 1;
    run_case(&only_a);
    gemm_case_t only_b = simple_case(t, 3, 17, 33);
    only_b.ldb = (tb ? 33 : 17) + 2;
    run_case(&only_b);
    gemm_case_t only_c = simple_case(t, 3, 17, 33);
    only_c.ldc = 17 + 1;
    only_c.beta = 1.0f;
    run_case(&only_c);
  }
}
END_TEST

START_TEST(test_gemm_strided_batched) {
  for (int t = 0; t < 4; ++t) {
    const int ta = k_trans[t][0] == DDP_TRANSPOSE_YES, tb = k_trans[t][1] == DDP_TRANSPOSE_YES;
    gemm_case_t gc = simple_case(t, 17, 33, 65);
    gc.batch = 3;
    gc.pad_a = 5, gc.pad_b = 7, gc.pad_c = 11; /* non-packed strides */
    run_case(&gc);
    gc.beta = -1.0f;
    gc.lda = (ta ? 17 : 65) + 2;
    gc.ldb = (tb ? 65 : 33) + 1;
    gc.ldc = 33 + 4;
    run_case(&gc);
    gemm_case_t tiny = simple_case(t, 1, 3, 1);
    tiny.batch = 3;
    tiny.pad_a = 1, tiny.pad_b = 2, tiny.pad_c = 3;
    run_case(&tiny);
  }
}
END_TEST

START_TEST(test_gemm_strided_batched_broadcast_b) {
  /* X_b = x + b * stride_x with stride_b == 0: one B shared by every batch
   * (a weight applied to several inputs). */
  for (int t = 0; t < 4; ++t) {
    gemm_case_t gc = simple_case(t, 17, 33, 3);
    gc.batch = 3;
    gc.pad_a = 1, gc.pad_c = 2;
    gc.broadcast_b = 1;
    gc.beta = 0.5f;
    run_case(&gc);
  }
}
END_TEST

START_TEST(test_gemm_empty_output_is_noop) {
  /* m == 0 or n == 0: nothing to compute and nothing may be written (the whole
   * C buffer is sentinel). */
  for (int t = 0; t < 4; ++t) {
    gemm_case_t gc = simple_case(t, 0, 5, 3);
    gc.c_fill = NAN;
    run_case(&gc);
    gc.m = 4, gc.n = 0;
    gc.batch = 2;
    run_case(&gc);
  }
}
END_TEST

START_TEST(test_gemm_k_zero_scales_c) {
  /* An empty product: C = beta * C, and beta == 0 writes exact zeros even
   * over NaN. */
  for (int t = 0; t < 4; ++t) {
    gemm_case_t gc = simple_case(t, 3, 5, 0);
    gc.beta = 0.5f;
    run_case(&gc);
    gc.beta = 0.0f;
    gc.c_fill = NAN;
    gc.batch = 2;
    run_case(&gc);
  }
}
END_TEST

/* A valid 5x6x7 problem on device buffers large enough for any variant below,
 * so a backend that fails to reject a descriptor touches only valid memory. */
typedef struct reject_env {
  void *a, *b, *c;
  float host_c[256];
  ddp_gemm_t g;
} reject_env_t;

static void reject_env_init(reject_env_t *e) {
  float zeros[256] = {0};
  e->a = to_device(zeros, sizeof zeros);
  e->b = to_device(zeros, sizeof zeros);
  for (int i = 0; i < 256; ++i) e->host_c[i] = SENTINEL;
  e->c = to_device(e->host_c, sizeof e->host_c);
  const ddp_gemm_t g = {.trans_a = DDP_TRANSPOSE_NO,
                        .trans_b = DDP_TRANSPOSE_NO,
                        .m = 5,
                        .n = 6,
                        .k = 7,
                        .alpha = 1.0f,
                        .beta = 0.0f,
                        .a = e->a,
                        .lda = 7,
                        .stride_a = 35,
                        .b = e->b,
                        .ldb = 6,
                        .stride_b = 42,
                        .c = e->c,
                        .ldc = 6,
                        .stride_c = 30,
                        .batch = 1,
                        .ab_dtype = DDP_DTYPE_F32,
                        .c_dtype = DDP_DTYPE_F32};
  e->g = g;
}

/* C must be exactly as it was: a rejected call writes nothing. */
static void reject_env_finish(reject_env_t *e) {
  float after[256];
  from_device(after, e->c, sizeof after);
  ck_assert_msg(memcmp(after, e->host_c, sizeof after) == 0, "a rejected GEMM wrote C");
  ddp_backend_free(g_be, e->c);
  ddp_backend_free(g_be, e->b);
  ddp_backend_free(g_be, e->a);
}

static void expect_rejected(const ddp_gemm_t *g, const char *what) {
  ddp_status_t st = ddp_gemm_validate(g);
  ck_assert_msg(st == DDP_ERR_INVALID_ARG, "validate: %s gave %s", what, ddp_status_name(st));
  st = ddp_backend_gemm(g_be, g, NULL);
  ck_assert_msg(st == DDP_ERR_INVALID_ARG, "backend: %s gave %s", what, ddp_status_name(st));
}

START_TEST(test_gemm_validate_accepts_minimal_pitches) {
  /* The boundary of every pitch rule, in all four transpose combinations, so
   * the rejections below are not passing for the wrong reason. */
  reject_env_t e;
  reject_env_init(&e);
  for (int t = 0; t < 4; ++t) {
    ddp_gemm_t g = e.g;
    g.trans_a = k_trans[t][0];
    g.trans_b = k_trans[t][1];
    g.lda = g.trans_a == DDP_TRANSPOSE_YES ? g.m : g.k;
    g.ldb = g.trans_b == DDP_TRANSPOSE_YES ? g.k : g.n;
    g.ldc = g.n;
    ck_assert_msg(ddp_gemm_validate(&g) == DDP_OK, "transposes %d", t);
    ck_assert_int_eq(ddp_backend_gemm(g_be, &g, NULL), DDP_OK);
  }
  ddp_backend_free(g_be, e.c);
  ddp_backend_free(g_be, e.b);
  ddp_backend_free(g_be, e.a);
}
END_TEST

START_TEST(test_gemm_rejects_negative_sizes) {
  reject_env_t e;
  reject_env_init(&e);
  ddp_gemm_t g = e.g;
  g.m = -1;
  expect_rejected(&g, "m = -1");
  g = e.g;
  g.n = -1;
  expect_rejected(&g, "n = -1");
  g = e.g;
  g.k = -1;
  expect_rejected(&g, "k = -1");
  reject_env_finish(&e);
}
END_TEST

START_TEST(test_gemm_rejects_small_pitches) {
  /* m = 5, n = 6, k = 7 are distinct, so each rule must use the right
   * dimension for the transposition. */
  reject_env_t e;
  reject_env_init(&e);
  ddp_gemm_t g = e.g;
  g.lda = 6; /* A is 5 x 7 */
  expect_rejected(&g, "lda = k - 1");
  g = e.g;
  g.trans_a = DDP_TRANSPOSE_YES;
  g.lda = 4; /* A stored 7 x 5 */
  expect_rejected(&g, "transposed lda = m - 1");
  g = e.g;
  g.ldb = 5; /* B is 7 x 6 */
  expect_rejected(&g, "ldb = n - 1");
  g = e.g;
  g.trans_b = DDP_TRANSPOSE_YES;
  g.ldb = 6; /* B stored 6 x 7 */
  expect_rejected(&g, "transposed ldb = k - 1");
  g = e.g;
  g.ldc = 5;
  expect_rejected(&g, "ldc = n - 1");
  reject_env_finish(&e);
}
END_TEST

START_TEST(test_gemm_rejects_bad_batch) {
  reject_env_t e;
  reject_env_init(&e);
  ddp_gemm_t g = e.g;
  g.batch = 0;
  expect_rejected(&g, "batch = 0");
  g.batch = -3;
  expect_rejected(&g, "batch = -3");
  reject_env_finish(&e);
}
END_TEST

START_TEST(test_gemm_rejects_null_pointers) {
  reject_env_t e;
  reject_env_init(&e);
  ddp_gemm_t g = e.g;
  g.a = NULL;
  expect_rejected(&g, "a = NULL");
  g = e.g;
  g.b = NULL;
  expect_rejected(&g, "b = NULL");
  g = e.g;
  g.c = NULL;
  expect_rejected(&g, "c = NULL");
  ck_assert_int_eq(ddp_gemm_validate(NULL), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_backend_gemm(g_be, NULL, NULL), DDP_ERR_INVALID_ARG);
  reject_env_finish(&e);
}
END_TEST

START_TEST(test_gemm_bf16_unsupported_on_cpu) {
  reject_env_t e;
  reject_env_init(&e);
  ddp_gemm_t g = e.g;
  g.ab_dtype = DDP_DTYPE_BF16;
  ck_assert_int_eq(ddp_backend_gemm(g_be, &g, NULL), DDP_ERR_UNSUPPORTED);
  reject_env_finish(&e);
}
END_TEST

static Suite *gemm_suite(void) {
  Suite *s = suite_create("gemm");
  TCase *num = tcase_create("numerics");
  tcase_add_checked_fixture(num, setup, teardown);
  tcase_set_timeout(num, 60);
  tcase_add_test(num, test_gemm_odd_sizes_all_transposes);
  tcase_add_test(num, test_gemm_large_odd_all_transposes);
  tcase_add_test(num, test_gemm_alpha_beta_combinations);
  tcase_add_test(num, test_gemm_beta_zero_ignores_nan_in_c);
  tcase_add_test(num, test_gemm_beta_one_accumulates);
  tcase_add_test(num, test_gemm_padded_pitches);
  tcase_add_test(num, test_gemm_strided_batched);
  tcase_add_test(num, test_gemm_strided_batched_broadcast_b);
  tcase_add_test(num, test_gemm_empty_output_is_noop);
  tcase_add_test(num, test_gemm_k_zero_scales_c);
  suite_add_tcase(s, num);
  TCase *bad = tcase_create("validation");
  tcase_add_checked_fixture(bad, setup, teardown);
  tcase_add_test(bad, test_gemm_validate_accepts_minimal_pitches);
  tcase_add_test(bad, test_gemm_rejects_negative_sizes);
  tcase_add_test(bad, test_gemm_rejects_small_pitches);
  tcase_add_test(bad, test_gemm_rejects_bad_batch);
  tcase_add_test(bad, test_gemm_rejects_null_pointers);
  tcase_add_test(bad, test_gemm_bf16_unsupported_on_cpu);
  suite_add_tcase(s, bad);
  return s;
}

int main(void) {
  return ddp_test_run_suite(gemm_suite());
}
