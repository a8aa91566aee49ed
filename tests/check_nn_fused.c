/* Tests for the CPU backend's fused MLP ops (ddptrain/nn.h's
 * linear_gelu_fwd and linear_dgelu_bwd, src/backend/cpu/cpu_nn_fused.c).
 *
 * The CPU ops are defined as the composition of the unfused ops the model
 * would otherwise call, and they are the oracle of the CUDA epilogues, so
 * the tolerance here is zero under every dt: out, pre, dpre and dbias must
 * equal, bit for bit, what linear_fwd + gelu_fwd and linear_bwd (its dinp) +
 * gelu_bwd + linear_bwd of the previous layer (its dbias) produce on the
 * same inputs, with accumulate 0 and 1. The half runs are also held against
 * the fp32 run at the precision of their type (normwise 2^-7 bf16, 2^-10
 * fp16: a few roundings of the stored values), which an op computing in the
 * wrong type would miss. The backward is checked against finite
 * differences of the forward chain (fp32). Eval (pre NULL) must give the
 * training run's out. Bad sizes, types, NULL pointers, aliasing and a
 * missing workspace reservation are rejected before anything is written.
 *
 * Shapes: N = 37 (two blocks of the 32-row column sums, the second partial)
 * and N = 70 with K = 264 (two 256-column strips of the column sums); odd
 * IC and OC. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "ddptrain/backend.h"
#include "ddptrain/dtype.h"
#include "ddptrain/nn.h"
#include "ddptrain/rng.h"

static const ddp_nn_ops_t *const nn = &ddp_nn_cpu_ops;
static ddp_backend_t *g_be;
static ddp_rng_t g_rng;
static uint64_t g_off;
static ddp_dtype_t g_round; /* inputs are drawn rounded to this type */

typedef struct shape {
  int N, IC, K, OC; /* x (N,IC) -> pre (N,K) -> y (N,OC) */
} shape_t;
static const shape_t k_shapes[] = {{37, 13, 24, 7}, {70, 5, 264, 3}};
static const ddp_dtype_t k_dts[] = {DDP_DTYPE_F32, DDP_DTYPE_BF16, DDP_DTYPE_F16};

static void setup(void) {
  g_be = ddp_test_cpu_backend();
  ddp_rng_init(&g_rng, 20261125, 11);
  g_off = 0;
  g_round = DDP_DTYPE_F32;
  ddp_test_free_tracked();
}

static void teardown(void) {
  ddp_test_free_tracked();
  ddp_backend_destroy(g_be);
  g_be = NULL;
}

static void reserve(ddp_dtype_t dt, shape_t s) {
  int c = s.K > s.IC ? s.K : s.IC;
  if (s.OC > c) c = s.OC;
  /* GPT shapes (C, 4C) and (4C, C) cover every product here */
  ck_assert_int_eq(nn->reserve(g_be, dt, s.N, c, c), DDP_OK);
}

/* n elements of dt (host memory: the CPU backend's buffers). */
static void *buf(ddp_dtype_t dt, size_t n) {
  return ddp_test_track(malloc((n ? n : 1) * ddp_dtype_size(dt)));
}

/* Random N(mean, std^2) values in dt, rounded to g_round first (so an
 * fp32 run and a half run can see the same numbers). */
static void *input(ddp_dtype_t dt, size_t n, float mean, float std) {
  float *f = ddp_test_track(malloc(n * sizeof *f));
  ddp_rng_fill_normal(&g_rng, g_off, mean, std, f, n);
  g_off += n;
  ck_assert_int_eq(ddp_round_host(f, f, g_round, n), DDP_OK);
  void *b = buf(dt, n);
  ck_assert_int_eq(ddp_convert_host(b, dt, f, DDP_DTYPE_F32, n), DDP_OK);
  return b;
}

/* An output: 0xFF bytes, NaN in every float type. */
static void *poisoned(ddp_dtype_t dt, size_t n) {
  void *b = buf(dt, n);
  memset(b, 0xFF, n * ddp_dtype_size(dt));
  return b;
}

static void *copy_of(const void *src, ddp_dtype_t dt, size_t n) {
  void *b = buf(dt, n);
  memcpy(b, src, n * ddp_dtype_size(dt));
  return b;
}

static float *as_f32(const void *src, ddp_dtype_t dt, size_t n) {
  float *f = ddp_test_track(malloc(n * sizeof *f));
  ck_assert_int_eq(ddp_convert_host(f, DDP_DTYPE_F32, src, dt, n), DDP_OK);
  return f;
}

static void expect_same_bits(const void *got, const void *want, ddp_dtype_t dt, size_t n,
                             const char *what) {
  const size_t esz = ddp_dtype_size(dt);
  for (size_t i = 0; i < n; ++i)
    if (memcmp((const char *)got + i * esz, (const char *)want + i * esz, esz) != 0) {
      const float *g = as_f32(got, dt, n), *w = as_f32(want, dt, n);
      ck_abort_msg("%s (%s): element %zu is %.9g, the unfused ops give %.9g", what,
                   ddp_dtype_name(dt), i, (double)g[i], (double)w[i]);
    }
}

/* Normwise max|a - b| / max|b| <= tol, and every value finite. */
static void expect_close(const float *a, const float *b, size_t n, double tol, const char *what) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    ck_assert_msg(isfinite(a[i]) && isfinite(b[i]), "%s: element %zu not finite (%g, %g)", what, i,
                  (double)a[i], (double)b[i]);
    num = fmax(num, fabs((double)a[i] - (double)b[i]));
    den = fmax(den, fabs((double)b[i]));
  }
  ck_assert_msg(num <= tol * den, "%s: normwise error %.3g > %.3g", what, den > 0 ? num / den : num,
                tol);
}

/* The unit roundoff of a half type (2^-8 bf16, 2^-11 fp16). */
static double unit_roundoff(ddp_dtype_t dt) {
  return dt == DDP_DTYPE_BF16 ? 0x1p-8 : dt == DDP_DTYPE_F16 ? 0x1p-11 : 0.0;
}

/* ---- forward -------------------------------------------------------------- */

typedef struct fwd_run {
  float *out, *pre; /* as fp32, for cross-type comparison */
} fwd_run_t;

/* One dt: fused with pre, fused in eval, and the unfused pair, from the
 * same fp32 draws (so the runs of different dt see the same numbers up to
 * their rounding). */
static fwd_run_t fwd_case(ddp_dtype_t dt, shape_t s, uint64_t draw) {
  reserve(dt, s);
  g_off = draw;
  const size_t nx = (size_t)s.N * s.IC, nw = (size_t)s.K * s.IC, np = (size_t)s.N * s.K;
  void *x = input(dt, nx, 0.0f, 1.0f), *w = input(dt, nw, 0.0f, 0.3f);
  void *b = input(dt, (size_t)s.K, 0.1f, 0.5f);
  void *out = poisoned(dt, np), *pre = poisoned(dt, np);
  ck_assert_int_eq(nn->linear_gelu_fwd(g_be, dt, out, pre, x, w, b, s.N, s.IC, s.K, NULL), DDP_OK);
  /* the unfused pair */
  void *pre_ref = poisoned(dt, np), *out_ref = poisoned(dt, np);
  ck_assert_int_eq(nn->linear_fwd(g_be, dt, pre_ref, x, w, b, s.N, s.IC, s.K, NULL), DDP_OK);
  ck_assert_int_eq(nn->gelu_fwd(g_be, dt, out_ref, pre_ref, np, NULL), DDP_OK);
  expect_same_bits(pre, pre_ref, dt, np, "linear_gelu_fwd pre");
  expect_same_bits(out, out_ref, dt, np, "linear_gelu_fwd out");
  /* eval: no pre, the same out */
  void *out_eval = poisoned(dt, np);
  ck_assert_int_eq(nn->linear_gelu_fwd(g_be, dt, out_eval, NULL, x, w, b, s.N, s.IC, s.K, NULL),
                   DDP_OK);
  expect_same_bits(out_eval, out_ref, dt, np, "linear_gelu_fwd out (eval, pre NULL)");
  nn->release(g_be);
  fwd_run_t r = {as_f32(out, dt, np), as_f32(pre, dt, np)};
  return r;
}

START_TEST(test_nn_fused_fwd_is_the_composition) {
  for (size_t k = 0; k < sizeof k_shapes / sizeof k_shapes[0]; ++k) {
    const uint64_t draw = 1000000 * (k + 1);
    const size_t np = (size_t)k_shapes[k].N * k_shapes[k].K;
    (void)fwd_case(DDP_DTYPE_F32, k_shapes[k], draw);
    /* each half run against an fp32 run on the same (half-exact) inputs:
     * pre is the fp32 pre rounded once (within u), out one rounding of
     * GELU at the rounded pre (within about 2u; 4u allowed) */
    for (int d = 1; d < 3; ++d) {
      const double u = unit_roundoff(k_dts[d]);
      g_round = k_dts[d];
      const fwd_run_t f32 = fwd_case(DDP_DTYPE_F32, k_shapes[k], draw);
      const fwd_run_t h = fwd_case(k_dts[d], k_shapes[k], draw);
      g_round = DDP_DTYPE_F32;
      expect_close(h.pre, f32.pre, np, u, "linear_gelu_fwd pre, half vs fp32");
      expect_close(h.out, f32.out, np, 4 * u, "linear_gelu_fwd out, half vs fp32");
      ddp_test_free_tracked();
    }
  }
}
END_TEST

/* ---- backward ------------------------------------------------------------- */

typedef struct bwd_run {
  float *dpre, *dbias;
} bwd_run_t;

static bwd_run_t bwd_case(ddp_dtype_t dt, shape_t s, int accumulate, uint64_t draw) {
  reserve(dt, s);
  g_off = draw;
  const size_t np = (size_t)s.N * s.K, ny = (size_t)s.N * s.OC;
  const size_t nx = (size_t)s.N * s.IC;
  void *dout = input(dt, ny, 0.0f, 1.0f), *w2 = input(dt, (size_t)s.OC * s.K, 0.0f, 0.3f);
  void *pre = input(dt, np, 0.0f, 1.5f);
  /* the previous layer's input and weight, for the reference dbias */
  void *x = input(dt, nx, 0.0f, 1.0f), *w1 = input(dt, (size_t)s.K * s.IC, 0.0f, 0.3f);
  void *h = input(dt, np, 0.0f, 1.0f); /* GELU(pre) as stored: only feeds dw */
  float *db0 = ddp_test_track(malloc((size_t)s.K * sizeof *db0));
  ddp_rng_fill_normal(&g_rng, g_off, 0.0f, 1.0f, db0, (size_t)s.K);
  g_off += (size_t)s.K;
  float *dbias =
      accumulate ? copy_of(db0, DDP_DTYPE_F32, (size_t)s.K) : poisoned(DDP_DTYPE_F32, (size_t)s.K);
  float *dbias_ref = copy_of(dbias, DDP_DTYPE_F32, (size_t)s.K);
  void *dpre = poisoned(dt, np);
  ck_assert_int_eq(
      nn->linear_dgelu_bwd(g_be, dt, dpre, dbias, dout, w2, pre, s.N, s.K, s.OC, accumulate, NULL),
      DDP_OK);
  /* the model's unfused sequence: the next linear's backward (its dinp),
   * gelu_bwd in place, the first linear's backward (its dbias) */
  void *dpre_ref = poisoned(dt, np);
  float *dw2 = poisoned(DDP_DTYPE_F32, (size_t)s.OC * s.K);
  float *dw1 = poisoned(DDP_DTYPE_F32, (size_t)s.K * s.IC);
  ck_assert_int_eq(
      nn->linear_bwd(g_be, dt, dpre_ref, dw2, NULL, dout, h, w2, s.N, s.K, s.OC, 0, 0, NULL),
      DDP_OK);
  ck_assert_int_eq(nn->gelu_bwd(g_be, dt, dpre_ref, pre, dpre_ref, np, NULL), DDP_OK);
  ck_assert_int_eq(nn->linear_bwd(g_be, dt, NULL, dw1, dbias_ref, dpre_ref, x, w1, s.N, s.IC, s.K,
                                  accumulate, 0, NULL),
                   DDP_OK);
  expect_same_bits(dpre, dpre_ref, dt, np, "linear_dgelu_bwd dpre");
  expect_same_bits(dbias, dbias_ref, DDP_DTYPE_F32, (size_t)s.K, "linear_dgelu_bwd dbias");
  nn->release(g_be);
  bwd_run_t r = {as_f32(dpre, dt, np), copy_of(dbias, DDP_DTYPE_F32, (size_t)s.K)};
  return r;
}

START_TEST(test_nn_fused_bwd_is_the_composition) {
  for (size_t k = 0; k < sizeof k_shapes / sizeof k_shapes[0]; ++k)
    for (int acc = 0; acc < 2; ++acc) {
      const uint64_t draw = 5000000 * (k + 1) + 100 * (uint64_t)acc;
      const size_t np = (size_t)k_shapes[k].N * k_shapes[k].K;
      (void)bwd_case(DDP_DTYPE_F32, k_shapes[k], acc, draw);
      /* half against fp32 on the same (half-exact) inputs: dpre is two
       * roundings (the product, then dout * GELU') away, dbias sums those
       * dpre (errors of random sign: far below 4u of the largest sum) */
      for (int d = 1; d < 3; ++d) {
        const double u = unit_roundoff(k_dts[d]);
        g_round = k_dts[d];
        const bwd_run_t f32 = bwd_case(DDP_DTYPE_F32, k_shapes[k], acc, draw);
        const bwd_run_t h = bwd_case(k_dts[d], k_shapes[k], acc, draw);
        g_round = DDP_DTYPE_F32;
        expect_close(h.dpre, f32.dpre, np, 4 * u, "linear_dgelu_bwd dpre, half vs fp32");
        expect_close(h.dbias, f32.dbias, (size_t)k_shapes[k].K, 4 * u,
                     "linear_dgelu_bwd dbias, half vs fp32");
        ddp_test_free_tracked();
      }
    }
}
END_TEST

/* accumulate 1 adds the same sums that accumulate 0 stores. */
START_TEST(test_nn_fused_bwd_accumulates) {
  const shape_t s = k_shapes[0];
  const ddp_dtype_t dt = DDP_DTYPE_F32;
  reserve(dt, s);
  const size_t np = (size_t)s.N * s.K;
  void *dout = input(dt, (size_t)s.N * s.OC, 0.0f, 1.0f);
  void *w2 = input(dt, (size_t)s.OC * s.K, 0.0f, 0.3f), *pre = input(dt, np, 0.0f, 1.5f);
  float *once = poisoned(dt, (size_t)s.K), *twice = poisoned(dt, (size_t)s.K);
  void *dpre = poisoned(dt, np);
  ck_assert_int_eq(
      nn->linear_dgelu_bwd(g_be, dt, dpre, once, dout, w2, pre, s.N, s.K, s.OC, 0, NULL), DDP_OK);
  ck_assert_int_eq(
      nn->linear_dgelu_bwd(g_be, dt, dpre, twice, dout, w2, pre, s.N, s.K, s.OC, 0, NULL), DDP_OK);
  ck_assert_int_eq(
      nn->linear_dgelu_bwd(g_be, dt, dpre, twice, dout, w2, pre, s.N, s.K, s.OC, 1, NULL), DDP_OK);
  for (int j = 0; j < s.K; ++j) {
    ck_assert(isfinite(once[j]));
    ck_assert_msg(fabsf(twice[j] - 2.0f * once[j]) <= 1e-6f * fabsf(once[j]) + 1e-7f,
                  "dbias[%d]: %g after two micro-steps, %g after one", j, (double)twice[j],
                  (double)once[j]);
  }
  nn->release(g_be);
}
END_TEST

/* ---- finite differences of the chain (fp32) ---------------------------------- */

/* L = sum R .* linear_fwd(GELU(x W1^T + b1), W2, b2) through the fused
 * forward. */
static double chain_loss(shape_t s, const float *x, const float *w1, const float *b1,
                         const float *w2, const float *b2, const float *R, float *out, float *pre,
                         float *y) {
  ck_assert_int_eq(
      nn->linear_gelu_fwd(g_be, DDP_DTYPE_F32, out, pre, x, w1, b1, s.N, s.IC, s.K, NULL), DDP_OK);
  ck_assert_int_eq(nn->linear_fwd(g_be, DDP_DTYPE_F32, y, out, w2, b2, s.N, s.K, s.OC, NULL),
                   DDP_OK);
  double L = 0.0;
  for (size_t i = 0; i < (size_t)s.N * s.OC; ++i) L += (double)R[i] * y[i];
  return L;
}

START_TEST(test_nn_fused_chain_matches_finite_differences) {
  const shape_t s = {9, 6, 16, 5};
  const ddp_dtype_t dt = DDP_DTYPE_F32;
  const size_t np = (size_t)s.N * s.K;
  float *x = input(dt, (size_t)s.N * s.IC, 0.0f, 1.0f);
  float *w1 = input(dt, (size_t)s.K * s.IC, 0.0f, 0.4f), *b1 = input(dt, (size_t)s.K, 0.0f, 0.5f);
  float *w2 = input(dt, (size_t)s.OC * s.K, 0.0f, 0.4f), *b2 = input(dt, (size_t)s.OC, 0.0f, 0.5f);
  float *R = input(dt, (size_t)s.N * s.OC, 0.0f, 1.0f);
  float *out = poisoned(dt, np), *pre = poisoned(dt, np), *y = poisoned(dt, (size_t)s.N * s.OC);
  chain_loss(s, x, w1, b1, w2, b2, R, out, pre, y);
  /* analytic: dL/dy = R; dpre and db1 fused; dx through the first linear */
  float *dpre = poisoned(dt, np), *db1 = poisoned(dt, (size_t)s.K);
  ck_assert_int_eq(nn->linear_dgelu_bwd(g_be, dt, dpre, db1, R, w2, pre, s.N, s.K, s.OC, 0, NULL),
                   DDP_OK);
  float *dx = poisoned(dt, (size_t)s.N * s.IC), *dw1 = poisoned(dt, (size_t)s.K * s.IC);
  ck_assert_int_eq(nn->linear_bwd(g_be, dt, dx, dw1, NULL, dpre, x, w1, s.N, s.IC, s.K, 0, 0, NULL),
                   DDP_OK);
  const float eps = 1e-2f;
  /* every bias element, every weight element of the first row, the first
   * row of x: central differences (error O(eps^2) ~ 1e-4 relative) */
  struct {
    float *p, *g;
    int n;
    const char *name;
  } probes[] = {{b1, db1, s.K, "b1"}, {w1, dw1, s.IC, "w1"}, {x, dx, s.IC, "x"}};
  for (size_t q = 0; q < sizeof probes / sizeof probes[0]; ++q)
    for (int i = 0; i < probes[q].n; ++i) {
      float *p = probes[q].p + i;
      const float keep = *p;
      *p = keep + eps;
      const double lp = chain_loss(s, x, w1, b1, w2, b2, R, out, pre, y);
      *p = keep - eps;
      const double lm = chain_loss(s, x, w1, b1, w2, b2, R, out, pre, y);
      *p = keep;
      const double fd = (lp - lm) / (2.0 * eps), an = probes[q].g[i];
      ck_assert_msg(fabs(fd - an) <= 2e-3 + 1e-2 * fabs(fd),
                    "d L / d %s[%d]: analytic %.6g, finite difference %.6g", probes[q].name, i, an,
                    fd);
    }
}
END_TEST

/* ---- bad input -------------------------------------------------------------- */

START_TEST(test_nn_fused_rejects_bad_input) {
  const shape_t s = k_shapes[0];
  const ddp_dtype_t dt = DDP_DTYPE_F32;
  const size_t np = (size_t)s.N * s.K;
  void *x = input(dt, (size_t)s.N * s.IC, 0.0f, 1.0f), *w = input(dt, (size_t)s.K * s.IC, 0, 1);
  void *b = input(dt, (size_t)s.K, 0.0f, 1.0f), *w2 = input(dt, (size_t)s.OC * s.K, 0.0f, 1.0f);
  void *dout = input(dt, (size_t)s.N * s.OC, 0.0f, 1.0f), *pre = input(dt, np, 0.0f, 1.0f);
  void *out = poisoned(dt, np), *pre_out = poisoned(dt, np), *dpre = poisoned(dt, np);
  float *db = poisoned(DDP_DTYPE_F32, (size_t)s.K);
  ddp_test_log_start();
  const int bad_sizes[][3] = {{0, s.IC, s.K}, {s.N, 0, s.K}, {s.N, s.IC, 0}, {-1, s.IC, s.K}};
  for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; ++i) {
    const int *z = bad_sizes[i];
    ck_assert_int_eq(nn->linear_gelu_fwd(g_be, dt, out, pre_out, x, w, b, z[0], z[1], z[2], NULL),
                     DDP_ERR_INVALID_ARG);
    ck_assert_int_eq(
        nn->linear_dgelu_bwd(g_be, dt, dpre, db, dout, w2, pre, z[0], z[2], z[1], 0, NULL),
        DDP_ERR_INVALID_ARG);
  }
  /* not a float type */
  ck_assert_int_eq(
      nn->linear_gelu_fwd(g_be, DDP_DTYPE_I32, out, pre_out, x, w, b, s.N, s.IC, s.K, NULL),
      DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(
      nn->linear_dgelu_bwd(g_be, DDP_DTYPE_I32, dpre, db, dout, w2, pre, s.N, s.K, s.OC, 0, NULL),
      DDP_ERR_INVALID_ARG);
  /* NULL pointers: bias and dbias are required */
  ck_assert_int_eq(nn->linear_gelu_fwd(g_be, dt, out, pre_out, x, w, NULL, s.N, s.IC, s.K, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(nn->linear_gelu_fwd(g_be, dt, NULL, pre_out, x, w, b, s.N, s.IC, s.K, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(
      nn->linear_dgelu_bwd(g_be, dt, dpre, NULL, dout, w2, pre, s.N, s.K, s.OC, 0, NULL),
      DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(
      nn->linear_dgelu_bwd(g_be, dt, dpre, db, dout, w2, NULL, s.N, s.K, s.OC, 0, NULL),
      DDP_ERR_INVALID_ARG);
  /* aliasing */
  ck_assert_int_eq(nn->linear_gelu_fwd(g_be, dt, out, out, x, w, b, s.N, s.IC, s.K, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(nn->linear_dgelu_bwd(g_be, dt, pre, db, dout, w2, pre, s.N, s.K, s.OC, 0, NULL),
                   DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ck_assert_ptr_nonnull(strstr(log, "must be distinct"));
  ck_assert_ptr_nonnull(strstr(log, "must not alias"));
  ck_assert_ptr_nonnull(strstr(log, "is not fp32, bf16 or fp16"));
  ck_assert_ptr_nonnull(strstr(log, "sizes N=37 K=24 OC=0 must be positive"));
  free(log);
  /* bf16 without reserve(): the workspace error, nothing written */
  void *dout_h = input(DDP_DTYPE_BF16, (size_t)s.N * s.OC, 0, 1);
  void *w2_h = input(DDP_DTYPE_BF16, (size_t)s.OC * s.K, 0, 1);
  void *pre_h = input(DDP_DTYPE_BF16, np, 0, 1), *dpre_h = poisoned(DDP_DTYPE_BF16, np);
  ddp_test_log_start();
  ck_assert_int_eq(nn->linear_dgelu_bwd(g_be, DDP_DTYPE_BF16, dpre_h, db, dout_h, w2_h, pre_h, s.N,
                                        s.K, s.OC, 0, NULL),
                   DDP_ERR_INVALID_ARG);
  log = ddp_test_log_stop();
  ck_assert_ptr_nonnull(strstr(log, "linear_dgelu_bwd"));
  free(log);
  /* every rejected call left its outputs as they were */
  const void *outs[] = {out, pre_out, dpre, db};
  const size_t bytes[] = {np * 4, np * 4, np * 4, (size_t)s.K * 4};
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = 0; j < bytes[i]; ++j)
      ck_assert_uint_eq(((const unsigned char *)outs[i])[j], 0xFF);
  for (size_t j = 0; j < np * 2; ++j) ck_assert_uint_eq(((const unsigned char *)dpre_h)[j], 0xFF);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("nn_fused");
  TCase *tc = tcase_create("ops");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_nn_fused_fwd_is_the_composition);
  tcase_add_test(tc, test_nn_fused_bwd_is_the_composition);
  tcase_add_test(tc, test_nn_fused_bwd_accumulates);
  tcase_add_test(tc, test_nn_fused_chain_matches_finite_differences);
  tcase_add_test(tc, test_nn_fused_rejects_bad_input);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(suite());
}
