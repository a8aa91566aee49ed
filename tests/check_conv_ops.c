/* Tests for the CPU conv table's kernels of ours (backend/cpu/cpu_conv_ops.c,
 * cpu_conv_bn_parts.c), called through the table models use,
 * be->ops->conv (ddptrain/conv.h).
 *
 * ReLU, add + ReLU and the global average pool: forwards against their
 * definitions, backwards against central finite differences of the
 * forwards (the checker of check_conv.c: L = sum(out * R) in double, so
 * backward(dout = R) must be dL/dx; H = 1e-2, ATOL 1e-3 + RTOL 1e-2). ReLU
 * inputs stay at least 0.05 from its kink, so no perturbation crosses it.
 *
 * The batch-norm parts: their composition (reduce, reduce with the mean,
 * apply; reduce_bwd, apply_bwd) against finite differences of that same
 * forward (input, gamma, beta); with one rank (g == l) against the
 * library's bn_fwd / bn_bwd (outputs, statistics, running statistics,
 * dinp, dgamma, dbeta) to 1e-5; and with two simulated ranks — the batch
 * split in halves, their partial sums added here as the all-reduce would —
 * against the library over the whole batch, which is what --sync-bn
 * promises. Without oneDNN the library comparisons become comparisons with
 * the parts over the whole batch (checked by finite differences above).
 *
 * And: the table is filled (every slot; without oneDNN its library slots
 * refuse, saying so), release empties the primitive cache, `accumulate`,
 * and every refusal (sizes, M_total, a type that is not fp32/bf16/fp16, NULL pointers) with a
 * message naming the op and an untouched output. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_conv.h"
#include "backend/cpu/cpu_dnnl.h"
#include "check_util.h"
#include "ddptrain/backend.h"
#include "ddptrain/conv.h"
#include "ddptrain/rng.h"
#include "ddptrain/status.h"

#define FD_H 1e-2f
#define FD_RTOL 1e-2
#define FD_ATOL 1e-3
/* The parts against the library: both fp32 with different summation
 * orders. */
#define LIB_RTOL 1e-5
#define LIB_ATOL 1e-5

static ddp_backend_t *g_be;
static const ddp_conv_ops_t *g_ops;
static ddp_rng_t g_rng_u, g_rng_n;
static uint64_t g_off_u, g_off_n;

static void setup(void) {
  g_be = ddp_test_cpu_backend();
  g_ops = g_be->ops->conv;
  ck_assert_ptr_nonnull(g_ops);
  ddp_rng_t base;
  ddp_rng_init(&base, 20261126, 4);
  ddp_rng_derive(&base, 1, &g_rng_u);
  ddp_rng_derive(&base, 2, &g_rng_n);
  g_off_u = g_off_n = 0;
  ddp_test_free_tracked();
}

static void teardown(void) {
  ddp_test_free_tracked();
  ddp_backend_destroy(g_be);
  g_be = NULL;
  g_ops = NULL;
}

/* ---- buffers ------------------------------------------------------------- */

static float *fbuf(size_t n) {
  return ddp_test_track(malloc(n * sizeof(float)));
}

static float *fill(float *x, size_t n, float v) {
  for (size_t i = 0; i < n; ++i) x[i] = v;
  return x;
}

static float *fnan(size_t n) {
  return fill(fbuf(n), n, NAN);
}

static float *fcopy(const float *src, size_t n) {
  return memcpy(fbuf(n), src, n * sizeof(float));
}

static float *funi(size_t n, float lo, float hi) {
  float *x = fbuf(n);
  ddp_rng_fill_uniform(&g_rng_u, g_off_u, x, n);
  g_off_u += n;
  for (size_t i = 0; i < n; ++i) x[i] = lo + (hi - lo) * x[i];
  return x;
}

static float *fnormal(size_t n, float mean, float std) {
  float *x = fbuf(n);
  ddp_rng_fill_normal(&g_rng_n, g_off_n, mean, std, x, n);
  g_off_n += n;
  return x;
}

/* Values at least 0.05 away from 0, either sign: a ReLU's kink is never
 * within a finite-difference step. */
static float *away_from_zero(size_t n) {
  float *x = funi(n, -1, 1);
  for (size_t i = 0; i < n; ++i) x[i] = x[i] < 0 ? x[i] - 0.05f : x[i] + 0.05f;
  return x;
}

static void expect_ok(ddp_status_t st, const char *what) {
  if (st != DDP_OK) ck_abort_msg("%s failed: %s", what, ddp_status_name(st));
}

/* Fails on the first element with |got - want| > atol + rtol |want|. */
static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         double rtol, double atol) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; ++i) {
    const double err = fabs((double)got[i] - want[i]);
    if (!(err <= atol + rtol * fabs(want[i])) && bad++ == 0) first = i;
  }
  ck_assert_msg(bad == 0, "%s: %zu of %zu wrong, first [%zu] got %.9g want %.9g", what, bad, n,
                first, bad ? (double)got[first] : 0.0, bad ? (double)want[first] : 0.0);
}

static void expect_bits_equal(const char *what, const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    ck_assert_msg(memcmp(&a[i], &b[i], sizeof a[i]) == 0, "%s: element %zu: %.9g vs %.9g", what, i,
                  (double)a[i], (double)b[i]);
}

/* ---- the finite-difference checker (check_conv.c's) ------------------------- */

typedef void (*fwd_fn)(void *ctx);

static double objective(const float *out, const float *R, size_t n) {
  double L = 0;
  for (size_t i = 0; i < n; ++i) L += (double)out[i] * (double)R[i];
  return L;
}

/* Perturbs every x[i] by +-H, re-runs fwd and compares the central
 * difference of sum(out * R) with grad[i]; leaves x and out as they were.
 * Also fails when every gradient is tiny (a vacuous check). */
static void fd_check(const char *what, fwd_fn fwd, void *ctx, const float *out, const float *R,
                     size_t n_out, float *x, const float *grad, size_t n) {
  size_t bad = 0, first = 0;
  double first_fd = 0, first_an = 0, max_grad = 0;
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i], xp = v + FD_H, xm = v - FD_H;
    x[i] = xp;
    fwd(ctx);
    const double Lp = objective(out, R, n_out);
    x[i] = xm;
    fwd(ctx);
    const double Lm = objective(out, R, n_out);
    x[i] = v;
    const double fd = (Lp - Lm) / ((double)xp - (double)xm), an = grad[i];
    const double tol = FD_ATOL + FD_RTOL * fmax(fabs(fd), fabs(an));
    if (fabs(an) > max_grad) max_grad = fabs(an);
    if (!(fabs(fd - an) <= tol) && bad++ == 0) first = i, first_fd = fd, first_an = an;
  }
  fwd(ctx);
  ck_assert_msg(bad == 0, "%s: %zu of %zu gradients off, first [%zu] fd %.7g analytic %.7g", what,
                bad, n, first, first_fd, first_an);
  ck_assert_msg(max_grad > 20 * FD_ATOL, "%s: all %zu gradients below %g: vacuous check", what, n,
                20 * FD_ATOL);
}

static const ddp_bn_shape_t k_bn_small = {
    .N = 1, .H = 4, .W = 4, .C = 3, .eps = 1e-5f, .momentum = 0.1f};

/* ---- the table ---------------------------------------------------------------- */

START_TEST(test_cpu_table_is_filled) {
  /* Every slot, oneDNN or not: an op missing from the table would be a
   * crash in a model rather than a clear refusal. */
  const void *slots[] = {(void *)g_ops->conv_fwd,         (void *)g_ops->conv_bwd_data,
                         (void *)g_ops->conv_bwd_weights, (void *)g_ops->conv_prepare,
                         (void *)g_ops->bn_fwd,           (void *)g_ops->bn_bwd,
                         (void *)g_ops->bn_prepare,       (void *)g_ops->bn_reduce_fwd,
                         (void *)g_ops->bn_apply_fwd,     (void *)g_ops->bn_reduce_bwd,
                         (void *)g_ops->bn_apply_bwd,     (void *)g_ops->maxpool_workspace_bytes,
                         (void *)g_ops->maxpool_fwd,      (void *)g_ops->maxpool_bwd,
                         (void *)g_ops->avgpool_fwd,      (void *)g_ops->avgpool_bwd,
                         (void *)g_ops->relu_fwd,         (void *)g_ops->add_relu_fwd,
                         (void *)g_ops->relu_bwd,         (void *)g_ops->release,
                         (void *)g_ops->bn_relu_fwd,      (void *)g_ops->bn_relu_bwd};
  for (size_t i = 0; i < sizeof slots / sizeof *slots; ++i)
    ck_assert_msg(slots[i] != NULL, "conv table slot %zu is NULL", i);
}
END_TEST

START_TEST(test_release_empties_the_primitive_cache) {
  const ddp_conv_shape_t sh = {
      .N = 1, .H = 4, .W = 4, .C = 2, .K = 3, .R = 3, .S = 3, .stride = 1, .pad = 1};
  const ddp_bn_shape_t bn = k_bn_small;
  g_ops->release(g_be);
  expect_ok(g_ops->conv_prepare(g_be, DDP_DTYPE_F32, &sh), "conv_prepare");
  expect_ok(g_ops->bn_prepare(g_be, DDP_DTYPE_F32, &bn), "bn_prepare");
  /* the 3 convolution ops; batch norm computes with our kernels (no
   * primitives, cpu_conv_bn_parts.c says why) */
  ck_assert_uint_ge(ddp_cpu_dnnl_cache_entries(), 3);
  g_ops->release(g_be);
  ck_assert_uint_eq(ddp_cpu_dnnl_cache_entries(), 0);
  /* The ops still work after a release: they rebuild what they need. */
  expect_ok(g_ops->conv_prepare(g_be, DDP_DTYPE_F32, &sh), "conv_prepare after release");
  ck_assert_uint_gt(ddp_cpu_dnnl_cache_entries(), 0);
  /* The backend's shutdown releases too (the teardown destroys g_be). */
  ddp_backend_destroy(g_be);
  g_be = ddp_test_cpu_backend();
  ck_assert_uint_eq(ddp_cpu_dnnl_cache_entries(), 0);
}
END_TEST

START_TEST(test_table_without_dnnl_refuses_its_library_slots) {
  /* The table is there and its oneDNN slots say what is missing; batch
   * norm computes with our kernels, so it works without oneDNN. */
  float x[64] = {0};
  const ddp_conv_shape_t sh = {
      .N = 1, .H = 4, .W = 4, .C = 2, .K = 3, .R = 3, .S = 3, .stride = 1, .pad = 1};
  ddp_test_log_start();
  const ddp_status_t st = g_ops->conv_fwd(g_be, DDP_DTYPE_F32, x, x, x, &sh, NULL);
  const ddp_status_t st_bn = g_ops->bn_prepare(g_be, DDP_DTYPE_F32, &k_bn_small);
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(st, DDP_ERR_UNSUPPORTED);
  ck_assert_int_eq(st_bn, DDP_OK);
  ddp_assert_contains(log, "conv_fwd: this build has no oneDNN");
  free(log);
}
END_TEST

/* ---- ReLU and add + ReLU ---------------------------------------------------- */

enum { EW_N = 203 }; /* odd, so no vector width divides it */

START_TEST(test_relu_fwd_matches_definition) {
  float *x = funi(EW_N, -2, 2), *y = fnan(EW_N);
  x[0] = NAN, x[1] = -0.0f, x[2] = 0.0f, x[3] = -INFINITY, x[4] = INFINITY;
  expect_ok(g_ops->relu_fwd(g_be, DDP_DTYPE_F32, y, x, EW_N, NULL), "relu_fwd");
  ck_assert_msg(isnan(y[0]), "relu(NaN) must stay NaN (got %g)", (double)y[0]);
  ck_assert_msg(y[1] == 0.0f && !signbit(y[1]), "relu(-0) must be +0");
  ck_assert_msg(y[3] == 0.0f && y[4] == INFINITY, "relu(-inf) = 0, relu(inf) = inf");
  for (size_t i = 1; i < EW_N; ++i) {
    const float want = x[i] > 0 ? x[i] : 0.0f;
    ck_assert_msg(memcmp(&y[i], &want, sizeof want) == 0, "relu [%zu]: %g -> %g", i, (double)x[i],
                  (double)y[i]);
  }
  /* In place (out aliases inp) gives the same. */
  float *z = fcopy(x, EW_N);
  expect_ok(g_ops->relu_fwd(g_be, DDP_DTYPE_F32, z, z, EW_N, NULL), "relu_fwd in place");
  expect_bits_equal("relu in place", z, y, EW_N);
}
END_TEST

typedef struct ew_ctx {
  float *a, *b, *out;
  size_t n;
} ew_ctx_t;

static void relu_forward(void *p) {
  ew_ctx_t *c = p;
  expect_ok(g_ops->relu_fwd(g_be, DDP_DTYPE_F32, c->out, c->a, c->n, NULL), "relu_fwd");
}

static void add_relu_forward(void *p) {
  ew_ctx_t *c = p;
  expect_ok(g_ops->add_relu_fwd(g_be, DDP_DTYPE_F32, c->out, c->a, c->b, c->n, NULL),
            "add_relu_fwd");
}

START_TEST(test_relu_bwd_finite_differences) {
  ew_ctx_t c = {.a = away_from_zero(EW_N), .out = fnan(EW_N), .n = EW_N};
  const float *R = funi(EW_N, -1, 1);
  relu_forward(&c);
  float *dx = fnan(EW_N);
  expect_ok(g_ops->relu_bwd(g_be, DDP_DTYPE_F32, dx, R, c.out, EW_N, NULL), "relu_bwd");
  fd_check("relu_bwd", relu_forward, &c, c.out, R, EW_N, c.a, dx, EW_N);
  /* dinp may alias dout. */
  float *dd = fcopy(R, EW_N);
  expect_ok(g_ops->relu_bwd(g_be, DDP_DTYPE_F32, dd, dd, c.out, EW_N, NULL), "relu_bwd in place");
  expect_bits_equal("relu_bwd in place", dd, dx, EW_N);
}
END_TEST

START_TEST(test_add_relu_matches_definition_and_finite_differences) {
  ew_ctx_t c = {.a = funi(EW_N, -1, 1), .b = funi(EW_N, -1, 1), .out = fnan(EW_N), .n = EW_N};
  /* Keep each sum at least 0.05 from the kink. */
  for (size_t i = 0; i < EW_N; ++i) {
    const float s = c.a[i] + c.b[i];
    if (fabsf(s) < 0.05f) c.b[i] += s < 0 ? -0.1f : 0.1f;
  }
  add_relu_forward(&c);
  for (size_t i = 0; i < EW_N; ++i) {
    const float s = c.a[i] + c.b[i], want = s > 0 ? s : 0.0f; /* rounded once, then clipped */
    ck_assert_msg(memcmp(&c.out[i], &want, sizeof want) == 0, "add_relu [%zu]: %g", i,
                  (double)c.out[i]);
  }
  /* One backward serves both summands: dL/da = dL/db = relu_bwd(R). */
  const float *R = funi(EW_N, -1, 1);
  float *grad = fnan(EW_N);
  expect_ok(g_ops->relu_bwd(g_be, DDP_DTYPE_F32, grad, R, c.out, EW_N, NULL), "relu_bwd");
  fd_check("add_relu d/da", add_relu_forward, &c, c.out, R, EW_N, c.a, grad, EW_N);
  fd_check("add_relu d/db", add_relu_forward, &c, c.out, R, EW_N, c.b, grad, EW_N);
  /* out may alias a or b. */
  float *a2 = fcopy(c.a, EW_N), *b2 = fcopy(c.b, EW_N);
  expect_ok(g_ops->add_relu_fwd(g_be, DDP_DTYPE_F32, a2, a2, c.b, EW_N, NULL), "out == a");
  expect_ok(g_ops->add_relu_fwd(g_be, DDP_DTYPE_F32, b2, c.a, b2, EW_N, NULL), "out == b");
  expect_bits_equal("add_relu into a", a2, c.out, EW_N);
  expect_bits_equal("add_relu into b", b2, c.out, EW_N);
}
END_TEST

/* ---- global average pooling ----------------------------------------------------- */

typedef struct pool_ctx {
  float *inp, *out;
  int N, HW, C;
} pool_ctx_t;

static void avgpool_forward(void *p) {
  pool_ctx_t *c = p;
  expect_ok(g_ops->avgpool_fwd(g_be, DDP_DTYPE_F32, c->out, c->inp, c->N, c->HW, c->C, NULL),
            "avgpool_fwd");
}

START_TEST(test_avgpool_fwd_and_bwd) {
  /* C = 300 crosses the kernels' 256-channel blocks. */
  const int shapes[][3] = {{2, 12, 5}, {3, 7, 300}};
  for (size_t k = 0; k < 2; ++k) {
    const int N = shapes[k][0], HW = shapes[k][1], C = shapes[k][2];
    const size_t n_in = (size_t)N * HW * C, n_out = (size_t)N * C;
    pool_ctx_t c = {.inp = fnormal(n_in, 0.5f, 1), .out = fnan(n_out), .N = N, .HW = HW, .C = C};
    avgpool_forward(&c);
    float *want = fbuf(n_out);
    for (int n = 0; n < N; ++n)
      for (int ch = 0; ch < C; ++ch) {
        double s = 0;
        for (int p = 0; p < HW; ++p) s += c.inp[((size_t)n * HW + p) * C + ch];
        want[(size_t)n * C + ch] = (float)(s / HW);
      }
    expect_close("avgpool_fwd", c.out, want, n_out, 1e-6, 1e-7);
    const float *R = funi(n_out, -1, 1);
    float *dx = fnan(n_in);
    expect_ok(g_ops->avgpool_bwd(g_be, DDP_DTYPE_F32, dx, R, N, HW, C, NULL), "avgpool_bwd");
    if (k == 0) /* the finite differences of the small case: every element */
      fd_check("avgpool_bwd", avgpool_forward, &c, c.out, R, n_out, c.inp, dx, n_in);
    for (size_t i = 0; i < n_in; ++i) {
      const size_t n = i / ((size_t)HW * C), ch = i % (size_t)C;
      ck_assert_float_eq(dx[i], R[n * C + ch] / (float)HW);
    }
  }
}
END_TEST

/* ---- batch normalization in parts ------------------------------------------------ */

static const ddp_bn_shape_t k_bn = {
    .N = 2, .H = 5, .W = 6, .C = 11, .eps = 1e-5f, .momentum = 0.1f};
/* Few positions, more channels than one block. */
static const ddp_bn_shape_t k_bn_wide = {
    .N = 2, .H = 2, .W = 1, .C = 300, .eps = 1e-3f, .momentum = 0.25f};

static size_t bn_elems(const ddp_bn_shape_t *sh) {
  return (size_t)sh->N * sh->H * sh->W * sh->C;
}

static int64_t bn_positions(const ddp_bn_shape_t *sh) {
  return (int64_t)sh->N * sh->H * sh->W;
}

/* Channels with different offsets and scales, so the statistics matter. */
static float *bn_input(const ddp_bn_shape_t *sh) {
  const size_t n = bn_elems(sh), C = (size_t)sh->C;
  float *x = fnormal(n, 0, 1);
  for (size_t i = 0; i < n; ++i)
    x[i] = x[i] * (1.0f + 0.25f * (float)(i % C % 8)) + (float)(i % C % 8) - 3;
  return x;
}

/* One rank's forward in parts, as a model runs it with the all-reduce
 * between the calls left out (one rank: the sums are already global);
 * sums is C floats of scratch. */
static void parts_forward(const ddp_bn_shape_t *sh, float *sums, float *out, float *mean,
                          float *var, float *run_mean, float *run_var, const float *x,
                          const float *gamma, const float *beta) {
  const int C = sh->C;
  const double M = (double)bn_positions(sh);
  expect_ok(g_ops->bn_reduce_fwd(g_be, DDP_DTYPE_F32, sums, x, NULL, sh, NULL), "bn_reduce_fwd");
  for (int c = 0; c < C; ++c) mean[c] = (float)(sums[c] / M);
  expect_ok(g_ops->bn_reduce_fwd(g_be, DDP_DTYPE_F32, sums, x, mean, sh, NULL),
            "bn_reduce_fwd (variance)");
  for (int c = 0; c < C; ++c) var[c] = (float)(sums[c] / M);
  expect_ok(g_ops->bn_apply_fwd(g_be, DDP_DTYPE_F32, out, run_mean, run_var, x, mean, var, gamma,
                                beta, bn_positions(sh), sh, NULL),
            "bn_apply_fwd");
}

/* The backward in parts with one rank (g == l); l is 2C floats of scratch. */
static void parts_backward(const ddp_bn_shape_t *sh, float *l, float *dinp, float *dgamma,
                           float *dbeta, const float *dout, const float *x, const float *mean,
                           const float *var, const float *gamma, int accumulate) {
  expect_ok(g_ops->bn_reduce_bwd(g_be, DDP_DTYPE_F32, l, dout, x, mean, sh, NULL), "bn_reduce_bwd");
  expect_ok(g_ops->bn_apply_bwd(g_be, DDP_DTYPE_F32, dinp, dgamma, dbeta, dout, x, mean, var, gamma,
                                l, l, bn_positions(sh), sh, accumulate, NULL),
            "bn_apply_bwd");
}

typedef struct bnp_ctx {
  const ddp_bn_shape_t *sh;
  float *sums, *out, *x, *gamma, *beta, *mean, *var;
} bnp_ctx_t;

static void bnp_forward(void *p) {
  bnp_ctx_t *b = p;
  parts_forward(b->sh, b->sums, b->out, b->mean, b->var, NULL, NULL, b->x, b->gamma, b->beta);
}

/* bn_relu_fwd is, by its contract, bn_fwd then the ReLU (with the residual
 * added first): the same bits as bn_fwd followed by the definition of the
 * ReLU, and the same statistics; training and inference; out may not
 * alias its inputs. The GPU's one-pass version is compared with this one
 * in check_gpu_conv. */
START_TEST(test_bn_relu_fwd_is_bn_then_relu) {
  const ddp_bn_shape_t sh = k_bn;
  const size_t n = bn_elems(&sh), C = (size_t)sh.C;
  const float *x = bn_input(&sh), *res = fnormal(n, 0, 1);
  const float *gamma = funi(C, 0.5f, 1.5f), *beta = funi(C, -0.5f, 0.5f);
  for (int training = 0; training <= 1; ++training)
    for (int with_res = 0; with_res <= 1; ++with_res) {
      float *rm = fill(fbuf(C), C, 0.25f), *rv = fill(fbuf(C), C, 2.0f);
      float *rm2 = fcopy(rm, C), *rv2 = fcopy(rv, C);
      float *sa = fnan(C), *sb = fnan(C), *sa2 = fnan(C), *sb2 = fnan(C);
      float *y = fnan(n), *out = fnan(n), *want = fbuf(n);
      expect_ok(g_ops->bn_fwd(g_be, DDP_DTYPE_F32, y, training ? sa : NULL, training ? sb : NULL,
                              rm, rv, x, gamma, beta, &sh, training, NULL),
                "bn_fwd");
      size_t zeros = 0;
      for (size_t i = 0; i < n; ++i) {
        const float v = with_res ? y[i] + res[i] : y[i];
        want[i] = v > 0.0f ? v : 0.0f;
        zeros += want[i] == 0.0f;
      }
      ck_assert_msg(zeros > n / 5 && zeros < n - n / 5, "%zu of %zu cut: not a test", zeros, n);
      expect_ok(
          g_ops->bn_relu_fwd(g_be, DDP_DTYPE_F32, out, training ? sa2 : NULL, training ? sb2 : NULL,
                             rm2, rv2, x, gamma, beta, with_res ? res : NULL, &sh, training, NULL),
          "bn_relu_fwd");
      expect_bits_equal(with_res ? "bn_relu_fwd with a residual" : "bn_relu_fwd", out, want, n);
      expect_bits_equal("bn_relu_fwd running_mean", rm2, rm, C);
      expect_bits_equal("bn_relu_fwd running_var", rv2, rv, C);
      if (training) {
        expect_bits_equal("bn_relu_fwd save_a", sa2, sa, C);
        expect_bits_equal("bn_relu_fwd save_b", sb2, sb, C);
      }
    }
  /* out on top of an input: refused, nothing written */
  float *xx = fcopy(x, n), *r2 = fcopy(res, n), *rm = fill(fbuf(C), C, 0.0f);
  float *rv = fill(fbuf(C), C, 1.0f), *sa = fbuf(C), *sb = fbuf(C);
  ddp_test_log_start();
  const ddp_status_t a = g_ops->bn_relu_fwd(g_be, DDP_DTYPE_F32, xx, sa, sb, rm, rv, xx, gamma,
                                            beta, NULL, &sh, 1, NULL);
  const ddp_status_t b =
      g_ops->bn_relu_fwd(g_be, DDP_DTYPE_F32, r2, sa, sb, rm, rv, x, gamma, beta, r2, &sh, 1, NULL);
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(a, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(b, DDP_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(log, "batch_norm_relu_fwd: out may not alias inp or residual"));
  free(log);
  expect_bits_equal("a refused bn_relu_fwd's input", xx, x, n);
  expect_bits_equal("a refused bn_relu_fwd's residual", r2, res, n);
}
END_TEST

/* bn_relu_bwd is, by its contract, relu_bwd then bn_bwd: the same bits
 * (input gradient, dgamma and dbeta, overwritten and accumulated) from the
 * forward's output and saves, with or without a residual (then dout holds
 * relu_bwd's result after the call). A refusal (aliasing, a missing output)
 * leaves dout as it was, though the op masks it in place when it runs.
 * The GPU's version, which recomputes the mask, is compared with this one
 * in check_gpu_conv. */
START_TEST(test_bn_relu_bwd_is_relu_then_bn) {
  const ddp_bn_shape_t sh = k_bn;
  const size_t n = bn_elems(&sh), C = (size_t)sh.C;
  const float *x = bn_input(&sh), *dy = fnormal(n, 0, 1);
  const float *gamma = funi(C, 0.5f, 1.5f), *beta = funi(C, -0.5f, 0.5f);
  float *rm = fill(fbuf(C), C, 0.0f), *rv = fill(fbuf(C), C, 1.0f);
  float *sa = fbuf(C), *sb = fbuf(C), *y = fnan(n);
  expect_ok(g_ops->bn_relu_fwd(g_be, DDP_DTYPE_F32, y, sa, sb, rm, rv, x, gamma, beta, NULL, &sh, 1,
                               NULL),
            "bn_relu_fwd");
  size_t cut = 0;
  for (size_t i = 0; i < n; ++i) cut += y[i] == 0.0f;
  ck_assert_msg(cut > n / 5 && cut < n - n / 5, "%zu of %zu cut: not a test", cut, n);
  /* residual 1: the mask is out's whatever it came from, and dout holds
   * the masked gradient after the call */
  for (int acc = 0; acc <= 1; ++acc)
    for (int residual = 0; residual <= 1; ++residual) {
      float *masked = fnan(n), *want = fnan(n), *got = fnan(n), *scratch = fcopy(dy, n);
      float *dg = fill(fbuf(C), C, 0.5f), *db = fill(fbuf(C), C, -0.25f);
      float *dg2 = fcopy(dg, C), *db2 = fcopy(db, C);
      expect_ok(g_ops->relu_bwd(g_be, DDP_DTYPE_F32, masked, dy, y, n, NULL), "relu_bwd");
      expect_ok(g_ops->bn_bwd(g_be, DDP_DTYPE_F32, want, dg, db, masked, x, gamma, sa, sb, &sh, acc,
                              NULL),
                "bn_bwd");
      expect_ok(g_ops->bn_relu_bwd(g_be, DDP_DTYPE_F32, got, dg2, db2, scratch, x, y, gamma, beta,
                                   sa, sb, residual, &sh, acc, NULL),
                "bn_relu_bwd");
      expect_bits_equal("bn_relu_bwd dinp", got, want, n);
      expect_bits_equal("bn_relu_bwd dgamma", dg2, dg, C);
      expect_bits_equal("bn_relu_bwd dbeta", db2, db, C);
      if (residual) expect_bits_equal("bn_relu_bwd's dout, with a residual", scratch, masked, n);
    }
  float *d2 = fcopy(dy, n), *dg = fbuf(C), *db = fbuf(C), *din = fbuf(n);
  ddp_test_log_start();
  const ddp_status_t a = g_ops->bn_relu_bwd(g_be, DDP_DTYPE_F32, d2, dg, db, d2, x, y, gamma, beta,
                                            sa, sb, 0, &sh, 0, NULL);
  const ddp_status_t b = g_ops->bn_relu_bwd(g_be, DDP_DTYPE_F32, din, dg, db, d2, x, NULL, gamma,
                                            beta, sa, sb, 1, &sh, 0, NULL);
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(a, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(b, DDP_ERR_INVALID_ARG);
  ck_assert_ptr_nonnull(strstr(log, "batch_norm_relu_bwd: dinp may not alias dout, inp or out"));
  ck_assert_ptr_nonnull(strstr(log, "batch_norm_relu_bwd: dinp, dgamma, dbeta, dout, inp, out"));
  free(log);
  expect_bits_equal("a refused bn_relu_bwd's dout", d2, dy, n);
}
END_TEST

START_TEST(test_bn_parts_finite_differences) {
  const ddp_bn_shape_t *sh = &k_bn;
  const size_t n = bn_elems(sh), C = (size_t)sh->C;
  bnp_ctx_t b = {.sh = sh,
                 .sums = fnan(C),
                 .out = fnan(n),
                 .x = bn_input(sh),
                 .gamma = funi(C, 0.5f, 1.5f),
                 .beta = funi(C, -0.5f, 0.5f),
                 .mean = fnan(C),
                 .var = fnan(C)};
  const float *R = funi(n, -1, 1);
  bnp_forward(&b);
  float *dx = fnan(n), *dg = fnan(C), *db = fnan(C);
  parts_backward(sh, fnan(2 * C), dx, dg, db, R, b.x, b.mean, b.var, b.gamma, 0);
  fd_check("bn parts dinp", bnp_forward, &b, b.out, R, n, b.x, dx, n);
  fd_check("bn parts dgamma", bnp_forward, &b, b.out, R, n, b.gamma, dg, C);
  fd_check("bn parts dbeta", bnp_forward, &b, b.out, R, n, b.beta, db, C);
}
END_TEST

/* The whole batch's batch norm, forward and backward: the library's where
 * the build has it, else the parts with one rank (checked above by finite
 * differences). */
typedef struct bn_result {
  float *out, *mean, *var, *run_mean, *run_var, *dinp, *dgamma, *dbeta;
} bn_result_t;

static bn_result_t bn_alloc_result(const ddp_bn_shape_t *sh, const float *rm0, const float *rv0) {
  const size_t n = bn_elems(sh), C = (size_t)sh->C;
  return (bn_result_t){.out = fnan(n),
                       .mean = fnan(C),
                       .var = fnan(C),
                       .run_mean = fcopy(rm0, C),
                       .run_var = fcopy(rv0, C),
                       .dinp = fnan(n),
                       .dgamma = fnan(C),
                       .dbeta = fnan(C)};
}

static bn_result_t library_bn(const ddp_bn_shape_t *sh, const float *x, const float *dout,
                              const float *gamma, const float *beta, const float *rm0,
                              const float *rv0) {
  bn_result_t r = bn_alloc_result(sh, rm0, rv0);
  /* oneDNN's batch norm itself (the table computes with the parts) */
  expect_ok(ddp_cpu_bn_fwd(g_be, DDP_DTYPE_F32, r.out, r.mean, r.var, r.run_mean, r.run_var, x,
                           gamma, beta, sh, 1, NULL),
            "bn_fwd");
  expect_ok(ddp_cpu_bn_bwd(g_be, DDP_DTYPE_F32, r.dinp, r.dgamma, r.dbeta, dout, x, gamma, r.mean,
                           r.var, sh, 0, NULL),
            "bn_bwd");
  return r;
}

static bn_result_t parts_bn(const ddp_bn_shape_t *sh, const float *x, const float *dout,
                            const float *gamma, const float *beta, const float *rm0,
                            const float *rv0) {
  bn_result_t r = bn_alloc_result(sh, rm0, rv0);
  const size_t C = (size_t)sh->C;
  parts_forward(sh, fnan(C), r.out, r.mean, r.var, r.run_mean, r.run_var, x, gamma, beta);
  parts_backward(sh, fnan(2 * C), r.dinp, r.dgamma, r.dbeta, dout, x, r.mean, r.var, gamma, 0);
  return r;
}

static bn_result_t reference_bn(const ddp_bn_shape_t *sh, const float *x, const float *dout,
                                const float *gamma, const float *beta, const float *rm0,
                                const float *rv0) {
  return ddp_cpu_dnnl_available() ? library_bn(sh, x, dout, gamma, beta, rm0, rv0)
                                  : parts_bn(sh, x, dout, gamma, beta, rm0, rv0);
}

/* dinp cancels (dy minus its mean and its projection on x): its error is
 * relative to the gradient's scale, not to each element. */
static float max_abs(const float *x, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
  return m;
}

static void expect_bn_equal(const char *what, const bn_result_t *got, const bn_result_t *want,
                            const ddp_bn_shape_t *sh, int with_stats) {
  const size_t n = bn_elems(sh), C = (size_t)sh->C;
  char name[96];
#define BN_EXPECT(field, count, atol)                                       \
  do {                                                                      \
    snprintf(name, sizeof name, "%s: " #field, what);                       \
    expect_close(name, got->field, want->field, (count), LIB_RTOL, (atol)); \
  } while (0)
  BN_EXPECT(out, n, LIB_ATOL);
  if (with_stats) {
    BN_EXPECT(mean, C, LIB_ATOL);
    BN_EXPECT(var, C, LIB_ATOL);
  }
  BN_EXPECT(run_mean, C, LIB_ATOL);
  BN_EXPECT(run_var, C, LIB_ATOL);
  BN_EXPECT(dinp, n, LIB_ATOL * max_abs(want->dinp, n));
  BN_EXPECT(dgamma, C, LIB_ATOL * max_abs(want->dgamma, C));
  BN_EXPECT(dbeta, C, LIB_ATOL * max_abs(want->dbeta, C));
#undef BN_EXPECT
}

START_TEST(test_bn_parts_one_rank_equal_library) {
  const ddp_bn_shape_t *shapes[] = {&k_bn, &k_bn_wide};
  for (size_t k = 0; k < 2; ++k) {
    const ddp_bn_shape_t *sh = shapes[k];
    const size_t n = bn_elems(sh), C = (size_t)sh->C;
    const float *x = bn_input(sh), *dout = fnormal(n, 0, 1);
    const float *gamma = funi(C, 0.5f, 1.5f), *beta = funi(C, -0.5f, 0.5f);
    const float *rm0 = funi(C, -0.2f, 0.2f), *rv0 = funi(C, 0.5f, 2.0f);
    const bn_result_t lib = library_bn(sh, x, dout, gamma, beta, rm0, rv0);
    const bn_result_t parts = parts_bn(sh, x, dout, gamma, beta, rm0, rv0);
    expect_bn_equal(k ? "one rank, C = 300" : "one rank", &parts, &lib, sh, 1);
    /* Inference with given statistics (running ones NULL): the library's
     * inference forward. */
    float *want = fnan(n), *got = fnan(n);
    expect_ok(ddp_cpu_bn_fwd(g_be, DDP_DTYPE_F32, want, NULL, NULL, lib.run_mean, lib.run_var, x,
                             gamma, beta, sh, 0, NULL),
              "bn_fwd inference");
    expect_ok(g_ops->bn_apply_fwd(g_be, DDP_DTYPE_F32, got, NULL, NULL, x, lib.run_mean,
                                  lib.run_var, gamma, beta, bn_positions(sh), sh, NULL),
              "bn_apply_fwd inference");
    expect_close("inference", got, want, n, LIB_RTOL, LIB_ATOL);
  }
}
END_TEST

/* Two ranks, each with half the batch: each reduces its half, the sums are
 * added (the all-reduce), each normalises its half by the global
 * statistics; the backward likewise, and the reducer adds the ranks'
 * dgamma, dbeta. Together they must equal batch norm over the whole batch. */
START_TEST(test_bn_parts_two_ranks_equal_whole_batch) {
  const ddp_bn_shape_t whole = {.N = 4, .H = 3, .W = 5, .C = 10, .eps = 1e-5f, .momentum = 0.1f};
  ddp_bn_shape_t half = whole;
  half.N = 2;
  const size_t n = bn_elems(&whole), hn = bn_elems(&half), C = (size_t)whole.C;
  const int64_t M_total = bn_positions(&whole);
  const float *x = bn_input(&whole), *dout = fnormal(n, 0, 1);
  const float *gamma = funi(C, 0.5f, 1.5f), *beta = funi(C, -0.5f, 0.5f);
  const float *rm0 = funi(C, -0.2f, 0.2f), *rv0 = funi(C, 0.5f, 2.0f);
  const bn_result_t want = reference_bn(&whole, x, dout, gamma, beta, rm0, rv0);

  bn_result_t got = bn_alloc_result(&whole, rm0, rv0);
  float *run_mean1 = fcopy(rm0, C), *run_var1 = fcopy(rv0, C); /* rank 1's copies */
  float *run_mean[2] = {got.run_mean, run_mean1}, *run_var[2] = {got.run_var, run_var1};
  float *s[2] = {fnan(C), fnan(C)}, *l[2] = {fnan(2 * C), fnan(2 * C)}, *g = fnan(2 * C);
  float *dg[2] = {fnan(C), fnan(C)}, *db[2] = {fnan(C), fnan(C)};
  for (int r = 0; r < 2; ++r)
    expect_ok(g_ops->bn_reduce_fwd(g_be, DDP_DTYPE_F32, s[r], x + r * hn, NULL, &half, NULL),
              "bn_reduce_fwd");
  for (size_t c = 0; c < C; ++c) got.mean[c] = (float)((s[0][c] + s[1][c]) / (double)M_total);
  for (int r = 0; r < 2; ++r)
    expect_ok(g_ops->bn_reduce_fwd(g_be, DDP_DTYPE_F32, s[r], x + r * hn, got.mean, &half, NULL),
              "bn_reduce_fwd (variance)");
  for (size_t c = 0; c < C; ++c) got.var[c] = (float)((s[0][c] + s[1][c]) / (double)M_total);
  for (int r = 0; r < 2; ++r)
    expect_ok(g_ops->bn_apply_fwd(g_be, DDP_DTYPE_F32, got.out + r * hn, run_mean[r], run_var[r],
                                  x + r * hn, got.mean, got.var, gamma, beta, M_total, &half, NULL),
              "bn_apply_fwd");
  for (int r = 0; r < 2; ++r)
    expect_ok(g_ops->bn_reduce_bwd(g_be, DDP_DTYPE_F32, l[r], dout + r * hn, x + r * hn, got.mean,
                                   &half, NULL),
              "bn_reduce_bwd");
  for (size_t i = 0; i < 2 * C; ++i) g[i] = l[0][i] + l[1][i];
  for (int r = 0; r < 2; ++r)
    expect_ok(
        g_ops->bn_apply_bwd(g_be, DDP_DTYPE_F32, got.dinp + r * hn, dg[r], db[r], dout + r * hn,
                            x + r * hn, got.mean, got.var, gamma, g, l[r], M_total, &half, 0, NULL),
        "bn_apply_bwd");
  for (size_t c = 0; c < C; ++c) {
    got.dgamma[c] = dg[0][c] + dg[1][c];
    got.dbeta[c] = db[0][c] + db[1][c];
  }
  expect_bn_equal("two ranks", &got, &want, &whole, 1);
  /* Both ranks' running statistics moved alike (unbiased by M_total). */
  expect_bits_equal("rank 1's running mean", run_mean1, got.run_mean, C);
  expect_bits_equal("rank 1's running var", run_var1, got.run_var, C);
}
END_TEST

START_TEST(test_bn_apply_bwd_accumulates) {
  const ddp_bn_shape_t *sh = &k_bn;
  const size_t n = bn_elems(sh), C = (size_t)sh->C;
  const float *x = bn_input(sh), *dout = fnormal(n, 0, 1), *gamma = funi(C, 0.5f, 1.5f);
  const float *beta = funi(C, -0.5f, 0.5f);
  float *out = fnan(n), *mean = fnan(C), *var = fnan(C), *l = fnan(2 * C);
  parts_forward(sh, fnan(C), out, mean, var, NULL, NULL, x, gamma, beta);
  float *dx_fresh = fnan(n), *dg_fresh = fnan(C), *db_fresh = fnan(C);
  parts_backward(sh, l, dx_fresh, dg_fresh, db_fresh, dout, x, mean, var, gamma, 0);
  /* accumulate = 1 adds to what is there; dinp is overwritten all the same. */
  const float *dg0 = funi(C, -1, 1), *db0 = funi(C, -1, 1);
  float *dg = fcopy(dg0, C), *db = fcopy(db0, C), *dx = funi(n, 5, 6);
  parts_backward(sh, l, dx, dg, db, dout, x, mean, var, gamma, 1);
  float *want_g = fbuf(C), *want_b = fbuf(C);
  for (size_t c = 0; c < C; ++c) {
    want_g[c] = dg0[c] + dg_fresh[c];
    want_b[c] = db0[c] + db_fresh[c];
  }
  expect_bits_equal("dgamma accumulated", dg, want_g, C);
  expect_bits_equal("dbeta accumulated", db, want_b, C);
  expect_bits_equal("dinp overwritten under accumulate", dx, dx_fresh, n);
  /* accumulate = 0 overwrites whatever was there. */
  fill(dg, C, 9.0f), fill(db, C, 9.0f);
  parts_backward(sh, l, dx, dg, db, dout, x, mean, var, gamma, 0);
  expect_bits_equal("dgamma overwritten", dg, dg_fresh, C);
  expect_bits_equal("dbeta overwritten", db, db_fresh, C);
}
END_TEST

/* ---- refusals ---------------------------------------------------------------------- */

#define EXPECT_REFUSED(want, needle, call)                                                       \
  do {                                                                                           \
    ddp_test_log_start();                                                                        \
    const ddp_status_t st_ = (call);                                                             \
    char *log_ = ddp_test_log_stop();                                                            \
    ck_assert_msg(st_ == (want), "'%s': got %s; log: %s", (needle), ddp_status_name(st_), log_); \
    ddp_assert_contains(log_, (needle));                                                         \
    free(log_);                                                                                  \
  } while (0)

enum { BIG = 2048 };

/* The table's batch norm at a ResNet's size (M = 32768 per channel, inputs
 * around 3.5, where a sum of x in fp32 loses digits) against a double
 * reference: oneDNN 2.6's own batch norm, which the table used before,
 * missed these bounds (dgamma 1.3e-4 relative, dinp 2.2e-6 rms); the
 * parts' double sums meet them with room (1.2e-6, 5e-8). */
START_TEST(test_bn_table_is_accurate_at_resnet_sizes) {
  const ddp_bn_shape_t sh = {.N = 32, .H = 32, .W = 32, .C = 8, .eps = 1e-5f, .momentum = 0.1f};
  const size_t n = bn_elems(&sh), C = (size_t)sh.C;
  const int64_t M = bn_positions(&sh);
  const float *x = funi(n, 3.0f, 4.0f), *dy = funi(n, -0.5f, 0.5f);
  const float *gamma = funi(C, 0.5f, 1.5f), *beta = funi(C, -0.5f, 0.5f);
  float *y = fnan(n), *dx = fnan(n), *sa = fnan(C), *sb = fnan(C), *dg = fnan(C), *db = fnan(C);
  float *rm = funi(C, 0.0f, 0.0f), *rv = funi(C, 1.0f, 1.0f);
  expect_ok(g_ops->bn_prepare(g_be, DDP_DTYPE_F32, &sh), "bn_prepare");
  expect_ok(g_ops->bn_fwd(g_be, DDP_DTYPE_F32, y, sa, sb, rm, rv, x, gamma, beta, &sh, 1, NULL),
            "bn_fwd");
  expect_ok(g_ops->bn_bwd(g_be, DDP_DTYPE_F32, dx, dg, db, dy, x, gamma, sa, sb, &sh, 0, NULL),
            "bn_bwd");
  double err2 = 0, ref2 = 0, worst_dg = 0;
  for (size_t c = 0; c < C; ++c) {
    double m = 0, v = 0, sdy = 0, sdyx = 0;
    for (int64_t i = 0; i < M; ++i) m += x[i * C + c];
    m /= (double)M;
    for (int64_t i = 0; i < M; ++i) v += (x[i * C + c] - m) * (x[i * C + c] - m);
    v /= (double)M;
    const double is = 1.0 / sqrt(v + 1e-5);
    ck_assert_msg(fabs(sa[c] - m) <= 1e-6 * m && fabs(sb[c] - v) <= 1e-5 * v,
                  "channel %zu: mean %.9g (want %.9g), var %.9g (want %.9g)", c, sa[c], m, sb[c],
                  v);
    for (int64_t i = 0; i < M; ++i) {
      sdy += dy[i * C + c];
      sdyx += dy[i * C + c] * (x[i * C + c] - m) * is;
    }
    const double rel = fabs(dg[c] - sdyx) / fabs(sdyx);
    worst_dg = rel > worst_dg ? rel : worst_dg;
    for (int64_t i = 0; i < M; ++i) {
      const double xh = (x[i * C + c] - m) * is;
      const double d = gamma[c] * is * (dy[i * C + c] - sdy / M - xh * sdyx / M);
      err2 += (dx[i * C + c] - d) * (dx[i * C + c] - d);
      ref2 += d * d;
    }
  }
  ck_assert_msg(worst_dg <= 2e-5, "dgamma off by %.3g relative", worst_dg);
  ck_assert_msg(sqrt(err2 / ref2) <= 1e-6, "dinp off by %.3g rms", sqrt(err2 / ref2));
}
END_TEST

START_TEST(test_kernels_refuse_bad_arguments) {
  /* Valid inputs, outputs holding a sentinel that no refusal may touch. */
  const float *x = funi(BIG, -1, 1), *y = funi(BIG, -1, 1), *pos = funi(BIG, 0.5f, 1.5f);
  float *out = fill(fbuf(BIG), BIG, 7.0f), *o2 = fill(fbuf(BIG), BIG, 7.0f);
  float *o3 = fill(fbuf(BIG), BIG, 7.0f), *rm = fill(fbuf(BIG), BIG, 7.0f);
  float *rv = fill(fbuf(BIG), BIG, 7.0f);
  const float *sentinel = fill(fbuf(BIG), BIG, 7.0f);
  const ddp_bn_shape_t ok = k_bn;
  const int64_t M = bn_positions(&ok);
  const ddp_dtype_t F = DDP_DTYPE_F32;
  ddp_backend_t *be = g_be;
  const ddp_conv_ops_t *o = g_ops;

  /* Types: fp32, bf16 and fp16 storage (check_conv_half.c); nothing else. */
  const ddp_dtype_t B = DDP_DTYPE_I32;
  EXPECT_REFUSED(DDP_ERR_UNSUPPORTED,
                 "relu_fwd: the CPU conv ops take fp32, bf16 or fp16, not int32",
                 o->relu_fwd(be, B, out, x, 8, NULL));
  EXPECT_REFUSED(DDP_ERR_UNSUPPORTED, "add_relu_fwd: the CPU conv ops take fp32, bf16 or fp16",
                 o->add_relu_fwd(be, B, out, x, y, 8, NULL));
  EXPECT_REFUSED(DDP_ERR_UNSUPPORTED, "relu_bwd: the CPU conv ops take",
                 o->relu_bwd(be, B, out, x, y, 8, NULL));
  EXPECT_REFUSED(DDP_ERR_UNSUPPORTED, "avgpool_fwd: the CPU conv ops take",
                 o->avgpool_fwd(be, B, out, x, 2, 3, 4, NULL));
  EXPECT_REFUSED(DDP_ERR_UNSUPPORTED,
                 "avgpool_bwd: the CPU conv ops take fp32, bf16 or fp16, not invalid (7)",
                 o->avgpool_bwd(be, (ddp_dtype_t)7, out, x, 2, 3, 4, NULL));
  EXPECT_REFUSED(DDP_ERR_UNSUPPORTED, "bn_reduce_fwd: the CPU conv ops take",
                 o->bn_reduce_fwd(be, B, out, x, NULL, &ok, NULL));
  EXPECT_REFUSED(DDP_ERR_UNSUPPORTED, "bn_apply_fwd: the CPU conv ops take",
                 o->bn_apply_fwd(be, B, out, rm, rv, x, y, pos, pos, y, M, &ok, NULL));
  EXPECT_REFUSED(DDP_ERR_UNSUPPORTED, "bn_reduce_bwd: the CPU conv ops take",
                 o->bn_reduce_bwd(be, B, out, x, y, y, &ok, NULL));
  EXPECT_REFUSED(DDP_ERR_UNSUPPORTED, "bn_apply_bwd: the CPU conv ops take",
                 o->bn_apply_bwd(be, B, out, o2, o3, x, y, y, pos, pos, x, y, M, &ok, 1, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "relu_fwd: the CPU conv ops need the CPU backend",
                 o->relu_fwd(NULL, F, out, x, 8, NULL));

  /* NULL pointers. */
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "relu_fwd: out and inp are required",
                 o->relu_fwd(be, F, out, NULL, 8, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "add_relu_fwd: out, a and b are required",
                 o->add_relu_fwd(be, F, out, x, NULL, 8, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "relu_bwd: dinp, dout and out are required",
                 o->relu_bwd(be, F, out, x, NULL, 8, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "avgpool_fwd: out and inp are required",
                 o->avgpool_fwd(be, F, out, NULL, 2, 3, 4, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "avgpool_bwd: dinp and dout are required",
                 o->avgpool_bwd(be, F, out, NULL, 2, 3, 4, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "bn_reduce_fwd: sums and inp are required",
                 o->bn_reduce_fwd(be, F, out, NULL, NULL, &ok, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "bn_apply_fwd: out, inp, mean, var, gamma and beta are",
                 o->bn_apply_fwd(be, F, out, rm, rv, x, y, pos, NULL, y, M, &ok, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "bn_apply_fwd: running_mean and running_var go together",
                 o->bn_apply_fwd(be, F, out, rm, NULL, x, y, pos, pos, y, M, &ok, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "bn_reduce_bwd: sums, dout, inp and mean are required",
                 o->bn_reduce_bwd(be, F, out, x, y, NULL, &ok, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "bn_apply_bwd: dinp, dgamma, dbeta, dout, inp, mean, var",
                 o->bn_apply_bwd(be, F, out, o2, o3, x, y, y, pos, pos, NULL, y, M, &ok, 1, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "bn_reduce_fwd: no shape given",
                 o->bn_reduce_fwd(be, F, out, x, NULL, NULL, NULL));

  /* Sizes. */
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "avgpool_fwd: every size must be positive (N=0 HW=3 C=4)",
                 o->avgpool_fwd(be, F, out, x, 0, 3, 4, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "avgpool_bwd: every size must be positive (N=2 HW=3 C=-1)",
                 o->avgpool_bwd(be, F, out, x, 2, 3, -1, NULL));
  ddp_bn_shape_t sh = ok;
  sh.H = 0;
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "bn_reduce_fwd: every size must be positive (N=2 H=0",
                 o->bn_reduce_fwd(be, F, out, x, NULL, &sh, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "bn_reduce_bwd: every size must be positive (N=2 H=0",
                 o->bn_reduce_bwd(be, F, out, x, y, y, &sh, NULL));
  sh = ok;
  sh.C = 0;
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "bn_apply_fwd: every size must be positive",
                 o->bn_apply_fwd(be, F, out, rm, rv, x, y, pos, pos, y, M, &sh, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "bn_apply_bwd: every size must be positive",
                 o->bn_apply_bwd(be, F, out, o2, o3, x, y, y, pos, pos, x, y, M, &sh, 0, NULL));
  sh = ok;
  sh.eps = 0;
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "bn_apply_fwd: eps 0 must be positive and finite",
                 o->bn_apply_fwd(be, F, out, rm, rv, x, y, pos, pos, y, M, &sh, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "bn_apply_bwd: eps 0 must be positive and finite",
                 o->bn_apply_bwd(be, F, out, o2, o3, x, y, y, pos, pos, x, y, M, &sh, 0, NULL));
  sh = ok;
  sh.momentum = 1.5f;
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "bn_apply_fwd: momentum 1.5 must be in [0, 1]",
                 o->bn_apply_fwd(be, F, out, rm, rv, x, y, pos, pos, y, M, &sh, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG,
                 "bn_apply_fwd: M_total 59 is fewer than this rank's own N*H*W = 60 positions",
                 o->bn_apply_fwd(be, F, out, rm, rv, x, y, pos, pos, y, M - 1, &ok, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "bn_apply_bwd: M_total 59 is fewer",
                 o->bn_apply_bwd(be, F, out, o2, o3, x, y, y, pos, pos, x, y, M - 1, &ok, 0, NULL));
  /* One position on one rank: training needs a second one somewhere. */
  sh = ok;
  sh.N = sh.H = sh.W = 1;
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG,
                 "bn_apply_fwd: training needs at least 2 values per channel over all ranks "
                 "(M_total = 1)",
                 o->bn_apply_fwd(be, F, out, rm, rv, x, y, pos, pos, y, 1, &sh, NULL));
  EXPECT_REFUSED(DDP_ERR_INVALID_ARG, "bn_apply_bwd: training needs at least 2 values per channel",
                 o->bn_apply_bwd(be, F, out, o2, o3, x, y, y, pos, pos, x, y, 1, &sh, 0, NULL));

  expect_bits_equal("out after the refusals", out, sentinel, BIG);
  expect_bits_equal("second output after the refusals", o2, sentinel, BIG);
  expect_bits_equal("third output after the refusals", o3, sentinel, BIG);
  expect_bits_equal("running_mean after the refusals", rm, sentinel, BIG);
  expect_bits_equal("running_var after the refusals", rv, sentinel, BIG);

  /* ... and with a second position on another rank, the same call works,
   * as does inference on one position with given statistics. */
  expect_ok(o->bn_apply_fwd(be, F, out, rm, rv, x, y, pos, pos, y, 2, &sh, NULL),
            "bn_apply_fwd, one position of two");
  expect_ok(o->bn_apply_bwd(be, F, o2, o3, rm, x, y, y, pos, pos, x, y, 2, &sh, 0, NULL),
            "bn_apply_bwd, one position of two");
  expect_ok(o->bn_apply_fwd(be, F, out, NULL, NULL, x, y, pos, pos, y, 1, &sh, NULL),
            "bn_apply_fwd inference, one position");
  /* Empty element-wise calls are no-ops, as nn.h's. */
  expect_ok(o->relu_fwd(be, F, NULL, NULL, 0, NULL), "relu_fwd of nothing");
}
END_TEST

int main(void) {
  Suite *s = suite_create("conv_ops");
  TCase *tc = tcase_create("cpu");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_cpu_table_is_filled);
  tcase_add_test(tc, test_relu_fwd_matches_definition);
  tcase_add_test(tc, test_relu_bwd_finite_differences);
  tcase_add_test(tc, test_add_relu_matches_definition_and_finite_differences);
  tcase_add_test(tc, test_avgpool_fwd_and_bwd);
  tcase_add_test(tc, test_bn_parts_finite_differences);
  tcase_add_test(tc, test_bn_relu_fwd_is_bn_then_relu);
  tcase_add_test(tc, test_bn_relu_bwd_is_relu_then_bn);
  tcase_add_test(tc, test_bn_parts_two_ranks_equal_whole_batch);
  tcase_add_test(tc, test_bn_apply_bwd_accumulates);
  tcase_add_test(tc, test_bn_table_is_accurate_at_resnet_sizes);
  tcase_add_test(tc, test_kernels_refuse_bad_arguments);
  if (ddp_cpu_dnnl_available()) {
    tcase_add_test(tc, test_release_empties_the_primitive_cache);
    tcase_add_test(tc, test_bn_parts_one_rank_equal_library);
  } else {
    /* The comparisons with the library need oneDNN; two ranks are then
     * compared with the parts over the whole batch. */
    tcase_add_test(tc, test_table_without_dnnl_refuses_its_library_slots);
    fprintf(stderr, "note: no oneDNN in this build: the library comparisons are left out\n");
  }
  suite_add_tcase(s, tc);
  return ddp_test_run_suite(s);
}
