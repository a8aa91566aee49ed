/* Tests for the CPU convolution, batch normalization and max pooling (backend/cpu/
 * cpu_conv.h, through oneDNN).
 *
 * The convolution forward is checked against a direct convolution written
 * here in double precision (the oracle lives only in this test); its
 * backward-data and backward-weights against central finite differences of
 * the forward, as tests/check_nn.c does for the nn ops: with a fixed random
 * R, L = sum(out * R) (summed in double) has dL/dout = R, so backward(dout =
 * R) must give dL/dx. Batch norm's forward is checked against its formula
 * (batch statistics, the running statistics' momentum update, inference on
 * the running statistics) and its backward against finite differences of
 * the training forward (so through the batch mean and variance too).
 *
 * Shapes are small (N=2, H, W = 5..7, C = 3..8, 3x3 and 1x1 kernels, stride 1
 * and 2, padding 0 and 1), so every element is perturbed. Tolerance as in
 * check_nn.c: H = 1e-2 (the denominator is the perturbation actually applied
 * after rounding to fp32), ATOL 1e-3 + RTOL 1e-2. The convolution is linear
 * in each argument, so its differences have no truncation error at all;
 * what remains is fp32 rounding of the k <= K*R*S outputs one element
 * touches, ~ sqrt(k) u |out R| / H ~ 1e-4. Batch norm's third derivatives are
 * of order 1 for unit-variance inputs: truncation ~ H^2 / 6 ~ 2e-5. Each check
 * also asserts that the gradients it compared are not all tiny, and
 * test_conv_fd_check_detects_wrong_gradient shows a 5% error in one element
 * fails it. Set DDP_NN_VERBOSE=1 to print each check's worst error/tolerance.
 *
 * Max pooling's forward is checked against a direct maximum and its
 * backward against finite differences on inputs whose values are 0.05
 * apart, so no perturbation changes a window's winner.
 *
 * Without oneDNN in the build the suite checks that the ops say so
 * (DDP_ERR_UNSUPPORTED naming oneDNN) and then exits 77 (skip). */
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
#include "ddptrain/rng.h"
#include "ddptrain/status.h"

#define FD_H 1e-2f
#define FD_RTOL 1e-2
#define FD_ATOL 1e-3

static ddp_backend_t *g_be;
static ddp_rng_t g_rng_u, g_rng_n;
static uint64_t g_off_u, g_off_n;

static void setup(void) {
  g_be = ddp_test_cpu_backend();
  ddp_rng_t base;
  ddp_rng_init(&base, 20261126, 3);
  ddp_rng_derive(&base, 1, &g_rng_u);
  ddp_rng_derive(&base, 2, &g_rng_n);
  g_off_u = g_off_n = 0;
  ddp_test_free_tracked();
}

static void teardown(void) {
  ddp_cpu_dnnl_cache_clear();
  ddp_test_free_tracked();
  ddp_backend_destroy(g_be);
  g_be = NULL;
}

/* ---- buffers ----------------------------------------------------------------- */

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

static double *dbuf(size_t n) {
  return ddp_test_track(malloc(n * sizeof(double)));
}

static void expect_ok(ddp_status_t st, const char *what) {
  if (st != DDP_OK) ck_abort_msg("%s failed: %s", what, ddp_status_name(st));
}

/* Fails on the first element with |got - want| > atol + rtol |want|. */
static void expect_close(const char *what, const float *got, const double *want, size_t n,
                         double rtol, double atol) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; ++i) {
    const double err = fabs((double)got[i] - want[i]);
    if (!(err <= atol + rtol * fabs(want[i])) && bad++ == 0) first = i;
  }
  ck_assert_msg(bad == 0, "%s: %zu of %zu wrong, first [%zu] got %.9g want %.9g", what, bad, n,
                first, bad ? (double)got[first] : 0.0, bad ? want[first] : 0.0);
}

static void expect_bits_equal(const char *what, const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    ck_assert_msg(memcmp(&a[i], &b[i], sizeof a[i]) == 0, "%s: element %zu: %.9g vs %.9g", what, i,
                  (double)a[i], (double)b[i]);
}

/* ---- the finite-difference checker (as in check_nn.c) --------------------- */

typedef void (*fwd_fn)(void *ctx);

static double objective(const float *out, const float *R, size_t n) {
  double L = 0;
  for (size_t i = 0; i < n; ++i) L += (double)out[i] * (double)R[i];
  return L;
}

typedef struct fd_result {
  size_t checked, bad, first;
  double first_fd, first_an, worst_ratio, max_grad;
} fd_result_t;

/* Perturbs every x[i] by +-H, re-runs fwd and compares the central
 * difference of sum(out * R) with grad[i]. Leaves x and out as they were. */
static fd_result_t fd_compare(fwd_fn fwd, void *ctx, const float *out, const float *R, size_t n_out,
                              float *x, const float *grad, size_t n) {
  fd_result_t r = {0};
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
    const double err = fabs(fd - an);
    if (err / tol > r.worst_ratio || !isfinite(an)) r.worst_ratio = isfinite(an) ? err / tol : 1e30;
    if (fabs(an) > r.max_grad) r.max_grad = fabs(an);
    if (!(err <= tol) && r.bad++ == 0) {
      r.first = i;
      r.first_fd = fd;
      r.first_an = an;
    }
    ++r.checked;
  }
  fwd(ctx);
  return r;
}

static void fd_check(const char *what, fwd_fn fwd, void *ctx, const float *out, const float *R,
                     size_t n_out, float *x, const float *grad, size_t n) {
  const fd_result_t r = fd_compare(fwd, ctx, out, R, n_out, x, grad, n);
  if (getenv("DDP_NN_VERBOSE"))
    fprintf(stderr, "fd %-40s checked %4zu  worst err/tol %.3f  max |grad| %.3g\n", what, r.checked,
            r.worst_ratio, r.max_grad);
  ck_assert_msg(r.bad == 0, "%s: %zu of %zu gradients off, first [%zu] fd %.7g analytic %.7g", what,
                r.bad, r.checked, r.first, r.first_fd, r.first_an);
  ck_assert_msg(r.max_grad > 20 * FD_ATOL, "%s: all %zu gradients below %g: vacuous check", what,
                r.checked, 20 * FD_ATOL);
}

/* ---- convolution ------------------------------------------------------------- */

/* The cases: stride 1 and 2, padding 0 and 1, odd sizes, a 1x1 projection. */
static const ddp_conv_shape_t k_cases[] = {
    {.N = 2, .H = 5, .W = 5, .C = 3, .K = 4, .R = 3, .S = 3, .stride = 1, .pad = 0},
    {.N = 2, .H = 6, .W = 6, .C = 4, .K = 5, .R = 3, .S = 3, .stride = 2, .pad = 1},
    {.N = 2, .H = 7, .W = 7, .C = 8, .K = 6, .R = 3, .S = 3, .stride = 1, .pad = 1},
    {.N = 2, .H = 7, .W = 5, .C = 3, .K = 8, .R = 3, .S = 3, .stride = 2, .pad = 0},
    {.N = 2, .H = 6, .W = 7, .C = 8, .K = 4, .R = 1, .S = 1, .stride = 2, .pad = 0},
    /* a ResNet downsample on an even size: the last row and column are in
     * no window, so the right padding is -1 (a oneDNN kernel given 0 there
     * wrote past its weight buffer) */
    {.N = 4, .H = 8, .W = 8, .C = 4, .K = 8, .R = 1, .S = 1, .stride = 2, .pad = 0},
    /* channels in whole blocks of 8: oneDNN's blocked kernels, with the
     * activations reordered to and from NHWC (and its Winograd ones on
     * AVX-512, 3x3 stride 1) */
    {.N = 2, .H = 6, .W = 6, .C = 16, .K = 16, .R = 3, .S = 3, .stride = 1, .pad = 1},
    /* Winograd's 4x4 output tiles, the last ones partial (9 = 4 + 4 + 1),
     * without padding */
    {.N = 2, .H = 11, .W = 11, .C = 16, .K = 32, .R = 3, .S = 3, .stride = 1, .pad = 0},
};
enum { N_CASES = sizeof k_cases / sizeof *k_cases };

static void describe(char *buf, size_t n, const char *what, const ddp_conv_shape_t *sh) {
  snprintf(buf, n, "%s N%d H%d W%d C%d K%d %dx%d s%d p%d", what, sh->N, sh->H, sh->W, sh->C, sh->K,
           sh->R, sh->S, sh->stride, sh->pad);
}

static size_t in_elems(const ddp_conv_shape_t *sh) {
  return (size_t)sh->N * sh->H * sh->W * sh->C;
}

static size_t out_elems(const ddp_conv_shape_t *sh) {
  return (size_t)sh->N * ddp_conv_out_h(sh) * ddp_conv_out_w(sh) * sh->K;
}

static size_t w_elems(const ddp_conv_shape_t *sh) {
  return (size_t)sh->K * sh->R * sh->S * sh->C;
}

/* The oracle: out[n,oh,ow,k] = sum over r,s,c of inp[n, oh*stride - pad + r,
 * ow*stride - pad + s, c] * w[k,r,s,c], zero outside the input. */
static void conv_direct(double *out, const float *inp, const float *w, const ddp_conv_shape_t *sh) {
  const int OH = ddp_conv_out_h(sh), OW = ddp_conv_out_w(sh);
  for (int n = 0; n < sh->N; ++n)
    for (int oh = 0; oh < OH; ++oh)
      for (int ow = 0; ow < OW; ++ow)
        for (int k = 0; k < sh->K; ++k) {
          double acc = 0;
          for (int r = 0; r < sh->R; ++r)
            for (int s = 0; s < sh->S; ++s) {
              const int h = oh * sh->stride - sh->pad + r, x = ow * sh->stride - sh->pad + s;
              if (h < 0 || h >= sh->H || x < 0 || x >= sh->W) continue;
              for (int c = 0; c < sh->C; ++c)
                acc += (double)inp[(((size_t)n * sh->H + h) * sh->W + x) * sh->C + c] *
                       w[(((size_t)k * sh->R + r) * sh->S + s) * sh->C + c];
            }
          out[(((size_t)n * OH + oh) * OW + ow) * sh->K + k] = acc;
        }
}

typedef struct conv_ctx {
  const ddp_conv_shape_t *sh;
  float *out, *inp, *w;
} conv_ctx_t;

static void conv_forward(void *p) {
  conv_ctx_t *c = p;
  expect_ok(ddp_cpu_conv_fwd(g_be, DDP_DTYPE_F32, c->out, c->inp, c->w, c->sh, NULL), "conv_fwd");
}

static conv_ctx_t conv_setup(const ddp_conv_shape_t *sh) {
  conv_ctx_t c = {.sh = sh, .inp = funi(in_elems(sh), -1, 1), .w = funi(w_elems(sh), -1, 1)};
  c.out = fnan(out_elems(sh));
  return c;
}

/* The implementations the checks below run, by loop index: 0 the
 * default; 1 the autotuned ones (--deterministic off); 2 the blocked
 * layout first (on an AVX-512 machine the default takes NHWC); 3 direct
 * kernels only (--winograd off; the default takes Winograd for 3x3
 * stride 1 on AVX-512). Other oneDNN implementations, which must compute
 * the same thing. */
static int g_variant;

static void use_variant(int i) {
  g_variant = i;
  ddp_cpu_conv_set_autotune(i == 1);
  ddp_cpu_conv_set_prefer_blocked(i == 2);
  ddp_cpu_conv_set_winograd(i != 3);
}

/* The forward the finite differences of the backward checks difference:
 * the direct kernels, whatever the variant under test. Winograd's
 * forward rounds each output of a tile with an error about ten times the
 * direct kernels' (its transforms), and perturbing one input re-rounds
 * every output of the tiles it is in: on a 16 -> 32 channel layer that
 * noise reached 8% of a small gradient's difference quotient. The
 * forward's own accuracy is checked against the oracle above. */
static void conv_forward_direct(void *p) {
  const int variant = g_variant;
  use_variant(3);
  conv_forward(p);
  use_variant(variant);
}

START_TEST(test_conv_fwd_matches_direct_convolution) {
  use_variant(_i);
  for (int i = 0; i < N_CASES; ++i) {
    const ddp_conv_shape_t *sh = &k_cases[i];
    conv_ctx_t c = conv_setup(sh);
    conv_forward(&c);
    double *want = dbuf(out_elems(sh));
    conv_direct(want, c.inp, c.w, sh);
    char what[96];
    describe(what, sizeof what, "conv_fwd", sh);
    /* Sums of up to 72 products of O(1) values: fp32 rounding ~1e-6. */
    expect_close(what, c.out, want, out_elems(sh), 1e-5, 1e-5);
  }
  use_variant(0);
}
END_TEST

START_TEST(test_conv_bwd_data_finite_differences) {
  use_variant(_i);
  for (int i = 0; i < N_CASES; ++i) {
    const ddp_conv_shape_t *sh = &k_cases[i];
    conv_ctx_t c = conv_setup(sh);
    conv_forward(&c);
    const float *R = fnormal(out_elems(sh), 0, 1);
    float *dinp = fnan(in_elems(sh)); /* overwritten: no NaN may survive */
    expect_ok(ddp_cpu_conv_bwd_data(g_be, DDP_DTYPE_F32, dinp, R, c.w, sh, NULL), "conv_bwd_data");
    char what[96];
    describe(what, sizeof what, "conv dinp", sh);
    fd_check(what, conv_forward_direct, &c, c.out, R, out_elems(sh), c.inp, dinp, in_elems(sh));
  }
  use_variant(0);
}
END_TEST

START_TEST(test_conv_bwd_weights_finite_differences) {
  use_variant(_i);
  for (int i = 0; i < N_CASES; ++i) {
    const ddp_conv_shape_t *sh = &k_cases[i];
    conv_ctx_t c = conv_setup(sh);
    conv_forward(&c);
    const float *R = fnormal(out_elems(sh), 0, 1);
    float *dw = fnan(w_elems(sh));
    expect_ok(ddp_cpu_conv_bwd_weights(g_be, DDP_DTYPE_F32, dw, R, c.inp, sh, 0, NULL),
              "conv_bwd_weights");
    char what[96];
    describe(what, sizeof what, "conv dw", sh);
    fd_check(what, conv_forward_direct, &c, c.out, R, out_elems(sh), c.w, dw, w_elems(sh));
  }
  use_variant(0);
}
END_TEST

/* Winograd where oneDNN has it: the 3x3 stride-1 cases whose channels fill
 * whole blocks of 16 take it for all three ops on AVX-512, its only ISA
 * for them; nothing else does: not with --winograd off, not a stride-2 or
 * 1x1 shape, not 3 or 8 channels (which oneDNN would pad, at a cost),
 * nothing on a machine without AVX-512. */
START_TEST(test_conv_winograd_where_onednn_has_it) {
  const int avx512 = ddp_cpu_dnnl_avx512();
  int taken = 0;
  for (int off = 0; off < 2; ++off) {
    ddp_cpu_conv_set_winograd(!off);
    for (int i = 0; i < N_CASES; ++i) {
      const ddp_conv_shape_t *sh = &k_cases[i];
      const int fits = sh->R == 3 && sh->S == 3 && sh->stride == 1 && sh->C % 16 == 0 &&
                       sh->K % 16 == 0;
      for (int op = 0; op < 3; ++op) {
        char name[96], what[96];
        expect_ok(ddp_cpu_conv_describe(g_be, op, sh, name, sizeof name), "conv_describe");
        describe(what, sizeof what, "conv", sh);
        const int wino = strstr(name, "wino") != NULL;
        ck_assert_msg(wino == (avx512 && fits && !off), "%s op %d, winograd %s: took %s", what, op,
                      off ? "off" : "on", name);
        taken += wino;
      }
    }
  }
  ddp_cpu_conv_set_winograd(1);
  if (avx512) ck_assert_int_eq(taken, 6); /* two cases, three ops */
}
END_TEST

START_TEST(test_conv_bwd_weights_accumulates) {
  const ddp_conv_shape_t *sh = &k_cases[2];
  conv_ctx_t c = conv_setup(sh);
  const float *R = fnormal(out_elems(sh), 0, 1);
  const size_t n = w_elems(sh);
  float *fresh = fnan(n), *dw = funi(n, -1, 1);
  const float *before = fcopy(dw, n);
  expect_ok(ddp_cpu_conv_bwd_weights(g_be, DDP_DTYPE_F32, fresh, R, c.inp, sh, 0, NULL), "dw = ");
  expect_ok(ddp_cpu_conv_bwd_weights(g_be, DDP_DTYPE_F32, dw, R, c.inp, sh, 1, NULL), "dw += ");
  double *want = dbuf(n);
  for (size_t i = 0; i < n; ++i) want[i] = (double)before[i] + fresh[i];
  expect_close("dw += fresh", dw, want, n, 1e-6, 1e-6);
}
END_TEST

/* The checker itself: a 5% error in one element of a correct gradient must
 * fail it (so the tolerance cannot hide a wrong formula). */
START_TEST(test_conv_fd_check_detects_wrong_gradient) {
  const ddp_conv_shape_t *sh = &k_cases[0];
  conv_ctx_t c = conv_setup(sh);
  conv_forward(&c);
  const float *R = fnormal(out_elems(sh), 0, 1);
  float *dw = fnan(w_elems(sh));
  expect_ok(ddp_cpu_conv_bwd_weights(g_be, DDP_DTYPE_F32, dw, R, c.inp, sh, 0, NULL), "dw");
  size_t big = 0;
  for (size_t i = 0; i < w_elems(sh); ++i)
    if (fabsf(dw[i]) > fabsf(dw[big])) big = i;
  dw[big] *= 1.05f;
  const fd_result_t r = fd_compare(conv_forward, &c, c.out, R, out_elems(sh), c.w, dw, w_elems(sh));
  ck_assert_uint_eq(r.bad, 1);
  ck_assert_uint_eq(r.first, big);
}
END_TEST

/* ---- batch normalization ------------------------------------------------------ */

static const ddp_bn_shape_t k_bn = {.N = 2, .H = 5, .W = 6, .C = 7, .eps = 1e-5f, .momentum = 0.1f};

typedef struct bn_ctx {
  const ddp_bn_shape_t *sh;
  size_t n;
  float *out, *inp, *gamma, *beta, *mean, *var, *run_mean, *run_var;
} bn_ctx_t;

static bn_ctx_t bn_setup(const ddp_bn_shape_t *sh) {
  bn_ctx_t b = {.sh = sh, .n = (size_t)sh->N * sh->H * sh->W * sh->C};
  const size_t C = (size_t)sh->C;
  /* Channels with different offsets and scales, so that the statistics
   * matter. */
  b.inp = fnormal(b.n, 0, 1);
  for (size_t i = 0; i < b.n; ++i)
    b.inp[i] = b.inp[i] * (1.0f + 0.25f * (float)(i % C)) + (float)(i % C) - 3;
  b.gamma = funi(C, 0.5f, 1.5f);
  b.beta = funi(C, -0.5f, 0.5f);
  b.out = fnan(b.n);
  b.mean = fnan(C);
  b.var = fnan(C);
  b.run_mean = funi(C, -0.2f, 0.2f);
  b.run_var = funi(C, 0.5f, 2.0f);
  return b;
}

static void bn_forward(void *p) {
  bn_ctx_t *b = p;
  expect_ok(ddp_cpu_bn_fwd(g_be, DDP_DTYPE_F32, b->out, b->mean, b->var, b->run_mean, b->run_var,
                           b->inp, b->gamma, b->beta, b->sh, 1, NULL),
            "batch_norm_fwd");
}

/* Per-channel mean and biased variance of x (N,H,W,C), in double. */
static void bn_stats(double *mean, double *var, const float *x, size_t n, int C) {
  const size_t M = n / (size_t)C;
  for (int c = 0; c < C; ++c) {
    double s = 0, ss = 0;
    for (size_t m = 0; m < M; ++m) s += x[m * C + c];
    mean[c] = s / (double)M;
    for (size_t m = 0; m < M; ++m) {
      const double d = x[m * C + c] - mean[c];
      ss += d * d;
    }
    var[c] = ss / (double)M;
  }
}

static void bn_formula(double *out, const float *x, size_t n, int C, const double *mean,
                       const double *var, const float *gamma, const float *beta, double eps) {
  for (size_t i = 0; i < n; ++i) {
    const int c = (int)(i % (size_t)C);
    out[i] = (x[i] - mean[c]) / sqrt(var[c] + eps) * gamma[c] + beta[c];
  }
}

START_TEST(test_bn_fwd_training_matches_formula) {
  bn_ctx_t b = bn_setup(&k_bn);
  const int C = k_bn.C;
  const float *rm0 = fcopy(b.run_mean, C), *rv0 = fcopy(b.run_var, C);
  bn_forward(&b);
  double *mean = dbuf(C), *var = dbuf(C), *want = dbuf(b.n);
  bn_stats(mean, var, b.inp, b.n, C);
  bn_formula(want, b.inp, b.n, C, mean, var, b.gamma, b.beta, k_bn.eps);
  expect_close("bn out (training)", b.out, want, b.n, 1e-5, 1e-5);
  expect_close("bn save_mean", b.mean, mean, C, 1e-5, 1e-5);
  expect_close("bn save_var (biased)", b.var, var, C, 1e-5, 1e-5);
  /* PyTorch's rule: the running variance takes the unbiased estimate. */
  const double M = (double)b.n / C, m = k_bn.momentum;
  double *want_rm = dbuf(C), *want_rv = dbuf(C);
  for (int c = 0; c < C; ++c) {
    want_rm[c] = (1 - m) * rm0[c] + m * mean[c];
    want_rv[c] = (1 - m) * rv0[c] + m * var[c] * M / (M - 1);
  }
  expect_close("bn running_mean", b.run_mean, want_rm, C, 1e-5, 1e-6);
  expect_close("bn running_var", b.run_var, want_rv, C, 1e-5, 1e-6);
}
END_TEST

START_TEST(test_bn_fwd_inference_uses_running_stats) {
  bn_ctx_t b = bn_setup(&k_bn);
  const int C = k_bn.C;
  const float *rm0 = fcopy(b.run_mean, C), *rv0 = fcopy(b.run_var, C);
  expect_ok(ddp_cpu_bn_fwd(g_be, DDP_DTYPE_F32, b.out, NULL, NULL, b.run_mean, b.run_var, b.inp,
                           b.gamma, b.beta, &k_bn, 0, NULL),
            "batch_norm_fwd (inference)");
  double *mean = dbuf(C), *var = dbuf(C), *want = dbuf(b.n);
  for (int c = 0; c < C; ++c) mean[c] = rm0[c], var[c] = rv0[c];
  bn_formula(want, b.inp, b.n, C, mean, var, b.gamma, b.beta, k_bn.eps);
  expect_close("bn out (inference)", b.out, want, b.n, 1e-5, 1e-5);
  expect_bits_equal("running_mean untouched", b.run_mean, rm0, C);
  expect_bits_equal("running_var untouched", b.run_var, rv0, C);
}
END_TEST

START_TEST(test_bn_bwd_finite_differences) {
  bn_ctx_t b = bn_setup(&k_bn);
  const int C = k_bn.C;
  bn_forward(&b);
  const float *R = fnormal(b.n, 0, 1);
  const float *mean = fcopy(b.mean, C), *var = fcopy(b.var, C);
  float *dinp = fnan(b.n), *dgamma = fnan(C), *dbeta = fnan(C);
  expect_ok(ddp_cpu_bn_bwd(g_be, DDP_DTYPE_F32, dinp, dgamma, dbeta, R, b.inp, b.gamma, mean, var,
                           &k_bn, 0, NULL),
            "batch_norm_bwd");
  /* The training forward, re-run per perturbation, moves the running
   * statistics too; the check reads only out. */
  fd_check("bn dinp", bn_forward, &b, b.out, R, b.n, b.inp, dinp, b.n);
  fd_check("bn dgamma", bn_forward, &b, b.out, R, b.n, b.gamma, dgamma, C);
  fd_check("bn dbeta", bn_forward, &b, b.out, R, b.n, b.beta, dbeta, C);
}
END_TEST

START_TEST(test_bn_bwd_accumulates) {
  bn_ctx_t b = bn_setup(&k_bn);
  const int C = k_bn.C;
  bn_forward(&b);
  const float *R = fnormal(b.n, 0, 1);
  float *dinp = fnan(b.n), *dg = fnan(C), *db = fnan(C);
  expect_ok(ddp_cpu_bn_bwd(g_be, DDP_DTYPE_F32, dinp, dg, db, R, b.inp, b.gamma, b.mean, b.var,
                           &k_bn, 0, NULL),
            "bn bwd =");
  float *dg2 = funi(C, -1, 1), *db2 = funi(C, -1, 1), *dinp2 = fnan(b.n);
  const float *g0 = fcopy(dg2, C), *b0 = fcopy(db2, C);
  expect_ok(ddp_cpu_bn_bwd(g_be, DDP_DTYPE_F32, dinp2, dg2, db2, R, b.inp, b.gamma, b.mean, b.var,
                           &k_bn, 1, NULL),
            "bn bwd +=");
  double *wg = dbuf(C), *wb = dbuf(C);
  for (int c = 0; c < C; ++c) wg[c] = (double)g0[c] + dg[c], wb[c] = (double)b0[c] + db[c];
  expect_close("dgamma +=", dg2, wg, C, 1e-6, 1e-6);
  expect_close("dbeta +=", db2, wb, C, 1e-6, 1e-6);
  expect_bits_equal("dinp is overwritten, not accumulated", dinp2, dinp, b.n);
}
END_TEST

/* ---- max pooling ------------------------------------------------------------------ */

static const ddp_pool_shape_t k_pools[] = {
    {.N = 2, .H = 7, .W = 7, .C = 3, .kernel = 3, .stride = 2, .pad = 1}, /* a ResNet stem's */
    {.N = 2, .H = 6, .W = 5, .C = 4, .kernel = 2, .stride = 2, .pad = 0},
    {.N = 2, .H = 5, .W = 6, .C = 5, .kernel = 3, .stride = 1, .pad = 1},
};
enum { N_POOLS = sizeof k_pools / sizeof *k_pools };

static size_t pool_in(const ddp_pool_shape_t *sh) {
  return (size_t)sh->N * sh->H * sh->W * sh->C;
}

static size_t pool_outn(const ddp_pool_shape_t *sh) {
  return (size_t)sh->N * ddp_pool_out_h(sh) * ddp_pool_out_w(sh) * sh->C;
}

/* Distinct values 0.05 apart, negative and positive, in scrambled order:
 * a perturbation of +-H never changes which element of a window wins, so
 * max pooling is exactly linear around them and the differences exact. */
static float *pool_input(size_t n) {
  float *x = fbuf(n);
  for (size_t i = 0; i < n; ++i) x[i] = 0.05f * (float)((i * 7919) % n) - 0.025f * (float)n;
  return x;
}

/* The oracle: the maximum over each window's positions inside the input. */
static void maxpool_direct(double *out, const float *inp, const ddp_pool_shape_t *sh) {
  const int OH = ddp_pool_out_h(sh), OW = ddp_pool_out_w(sh);
  for (int n = 0; n < sh->N; ++n)
    for (int oh = 0; oh < OH; ++oh)
      for (int ow = 0; ow < OW; ++ow)
        for (int c = 0; c < sh->C; ++c) {
          double m = -INFINITY;
          for (int r = 0; r < sh->kernel; ++r)
            for (int q = 0; q < sh->kernel; ++q) {
              const int h = oh * sh->stride - sh->pad + r, w = ow * sh->stride - sh->pad + q;
              if (h < 0 || h >= sh->H || w < 0 || w >= sh->W) continue;
              m = fmax(m, inp[(((size_t)n * sh->H + h) * sh->W + w) * sh->C + c]);
            }
          out[(((size_t)n * OH + oh) * OW + ow) * sh->C + c] = m;
        }
}

typedef struct pool_ctx {
  const ddp_pool_shape_t *sh;
  float *out, *inp;
  void *ws;
} pool_ctx_t;

static void pool_forward(void *p) {
  pool_ctx_t *c = p;
  expect_ok(ddp_cpu_maxpool_fwd(g_be, DDP_DTYPE_F32, c->out, c->ws, c->inp, c->sh, NULL),
            "maxpool_fwd");
}

static pool_ctx_t pool_setup(const ddp_pool_shape_t *sh) {
  size_t bytes = 0;
  expect_ok(ddp_cpu_maxpool_workspace_bytes(g_be, DDP_DTYPE_F32, sh, &bytes), "workspace_bytes");
  pool_ctx_t c = {.sh = sh, .inp = pool_input(pool_in(sh)), .out = fnan(pool_outn(sh))};
  c.ws = ddp_test_track(calloc(1, bytes ? bytes : 1));
  return c;
}

START_TEST(test_maxpool_fwd_matches_direct) {
  for (int i = 0; i < N_POOLS; ++i) {
    const ddp_pool_shape_t *sh = &k_pools[i];
    pool_ctx_t c = pool_setup(sh);
    pool_forward(&c);
    double *want = dbuf(pool_outn(sh));
    maxpool_direct(want, c.inp, sh);
    expect_close("maxpool_fwd (training)", c.out, want, pool_outn(sh), 0, 0);
    float *eval = fnan(pool_outn(sh));
    expect_ok(ddp_cpu_maxpool_fwd(g_be, DDP_DTYPE_F32, eval, NULL, c.inp, sh, NULL),
              "maxpool_fwd (inference)");
    expect_close("maxpool_fwd (inference)", eval, want, pool_outn(sh), 0, 0);
  }
}
END_TEST

START_TEST(test_maxpool_bwd_finite_differences) {
  for (int i = 0; i < N_POOLS; ++i) {
    const ddp_pool_shape_t *sh = &k_pools[i];
    pool_ctx_t c = pool_setup(sh);
    pool_forward(&c);
    const float *R = fnormal(pool_outn(sh), 0, 1);
    float *dinp = fnan(pool_in(sh));
    expect_ok(ddp_cpu_maxpool_bwd(g_be, DDP_DTYPE_F32, dinp, R, c.ws, sh, NULL), "maxpool_bwd");
    char what[64];
    snprintf(what, sizeof what, "maxpool dinp k%d s%d p%d", sh->kernel, sh->stride, sh->pad);
    fd_check(what, pool_forward, &c, c.out, R, pool_outn(sh), c.inp, dinp, pool_in(sh));
  }
}
END_TEST

START_TEST(test_maxpool_rejects_bad_shapes) {
  float *out = fill(fbuf(256), 256, 7.0f), *inp = pool_input(256), *ws = fbuf(256);
  const float *sentinel = fill(fbuf(256), 256, 7.0f);
  ddp_pool_shape_t sh = k_pools[0];
  sh.pad = 2;
  ddp_test_log_start();
  ddp_status_t st = ddp_cpu_maxpool_fwd(g_be, DDP_DTYPE_F32, out, ws, inp, &sh, NULL);
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "padding 2 must be in [0, kernel / 2] for kernel 3");
  free(log);
  sh = k_pools[1];
  sh.H = 1;
  ddp_test_log_start();
  st = ddp_cpu_maxpool_fwd(g_be, DDP_DTYPE_F32, out, ws, inp, &sh, NULL);
  log = ddp_test_log_stop();
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "the 2x2 window does not fit the 1x5 input padded by 0");
  free(log);
  ddp_test_log_start();
  st = ddp_cpu_maxpool_bwd(g_be, DDP_DTYPE_F32, out, inp, NULL, &k_pools[1], NULL);
  log = ddp_test_log_stop();
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "ws (the training forward's workspace) are required");
  free(log);
  expect_bits_equal("out after a refusal", out, sentinel, 256);
  ck_assert_uint_eq(ddp_cpu_dnnl_cache_entries(), 0);
}
END_TEST

/* ---- the primitive cache --------------------------------------------------------- */

START_TEST(test_conv_primitive_cache_reused) {
  const ddp_conv_shape_t *sh = &k_cases[1];
  expect_ok(ddp_cpu_conv_prepare(g_be, DDP_DTYPE_F32, sh), "conv_prepare");
  expect_ok(ddp_cpu_bn_prepare(g_be, DDP_DTYPE_F32, &k_bn), "bn_prepare");
  const uint64_t made = ddp_cpu_dnnl_primitives_created();
  const size_t entries = ddp_cpu_dnnl_cache_entries();
  ck_assert_uint_eq(entries, 6); /* three convolutions, three batch norms */
  ck_assert_uint_ge(made, 6);
  conv_ctx_t c = conv_setup(sh);
  bn_ctx_t b = bn_setup(&k_bn);
  float *dinp = fnan(in_elems(sh)), *dw = fnan(w_elems(sh)), *R = fnormal(out_elems(sh), 0, 1);
  float *bdin = fnan(b.n), *dg = fnan(k_bn.C), *db = fnan(k_bn.C);
  for (int step = 0; step < 5; ++step) {
    conv_forward(&c);
    expect_ok(ddp_cpu_conv_bwd_data(g_be, DDP_DTYPE_F32, dinp, R, c.w, sh, NULL), "bwd_data");
    expect_ok(ddp_cpu_conv_bwd_weights(g_be, DDP_DTYPE_F32, dw, R, c.inp, sh, step > 0, NULL),
              "bwd_weights");
    bn_forward(&b);
    expect_ok(ddp_cpu_bn_fwd(g_be, DDP_DTYPE_F32, b.out, NULL, NULL, b.run_mean, b.run_var, b.inp,
                             b.gamma, b.beta, &k_bn, 0, NULL),
              "bn inference");
    expect_ok(ddp_cpu_bn_bwd(g_be, DDP_DTYPE_F32, bdin, dg, db, b.out, b.inp, b.gamma, b.mean,
                             b.var, &k_bn, step > 0, NULL),
              "bn bwd");
  }
  ck_assert_uint_eq(ddp_cpu_dnnl_primitives_created(), made);
  ck_assert_uint_eq(ddp_cpu_dnnl_cache_entries(), entries);
  /* A new shape builds its own. */
  conv_ctx_t c2 = conv_setup(&k_cases[0]);
  conv_forward(&c2);
  ck_assert_uint_gt(ddp_cpu_dnnl_primitives_created(), made);
  ck_assert_uint_eq(ddp_cpu_dnnl_cache_entries(), entries + 1);
}
END_TEST

/* The reordered activations of every entry share two staging buffers: a
 * larger shape grows (moves) them, and an older entry must then find them
 * at their new place, not write where they were. */
START_TEST(test_conv_staging_survives_growth) {
  /* the blocked layout first, on any machine (an AVX-512 one would take
   * oneDNN's NHWC kernels, which stage nothing) */
  ddp_cpu_conv_set_prefer_blocked(1);
  const ddp_conv_shape_t small = k_cases[N_CASES - 1];
  const ddp_conv_shape_t large = {
      .N = 4, .H = 16, .W = 16, .C = 16, .K = 32, .R = 3, .S = 3, .stride = 1, .pad = 1};
  conv_ctx_t a = conv_setup(&small), b = conv_setup(&large);
  float *first = fnan(out_elems(&small)), *dinp0 = fnan(in_elems(&small));
  float *dinp1 = fnan(in_elems(&small));
  const float *R = fnormal(out_elems(&small), 0, 1);
  conv_forward(&a);
  memcpy(first, a.out, out_elems(&small) * sizeof *first);
  expect_ok(ddp_cpu_conv_bwd_data(g_be, DDP_DTYPE_F32, dinp0, R, a.w, &small, NULL), "bwd_data");
  const size_t staged = ddp_cpu_dnnl_staging_bytes();
  ck_assert_msg(staged > 0, "the blocked layout staged nothing");
  conv_forward(&b);
  ck_assert_uint_gt(ddp_cpu_dnnl_staging_bytes(), staged);
  a.out = fnan(out_elems(&small));
  conv_forward(&a);
  expect_ok(ddp_cpu_conv_bwd_data(g_be, DDP_DTYPE_F32, dinp1, R, a.w, &small, NULL), "bwd_data");
  expect_bits_equal("forward after the staging grew", a.out, first, out_elems(&small));
  expect_bits_equal("backward-data after the staging grew", dinp1, dinp0, in_elems(&small));
}
END_TEST

/* ---- bad arguments ----------------------------------------------------------------- */

/* Runs the forward on sh with sentinel-filled buffers big enough for any of
 * the bad shapes below, expects `want` and `needle` in the log, and that
 * nothing was written. */
static void expect_conv_refused(ddp_conv_shape_t sh, ddp_dtype_t dt, ddp_status_t want,
                                const char *needle) {
  enum { BIG = 4096 };
  float *out = fill(fbuf(BIG), BIG, 7.0f), *inp = funi(BIG, -1, 1), *w = funi(BIG, -1, 1);
  float *dw = fill(fbuf(BIG), BIG, 7.0f), *dinp = fill(fbuf(BIG), BIG, 7.0f);
  const float *sentinel = fill(fbuf(BIG), BIG, 7.0f);
  ddp_test_log_start();
  const ddp_status_t st_f = ddp_cpu_conv_fwd(g_be, dt, out, inp, w, &sh, NULL);
  const ddp_status_t st_d = ddp_cpu_conv_bwd_data(g_be, dt, dinp, out, w, &sh, NULL);
  const ddp_status_t st_w = ddp_cpu_conv_bwd_weights(g_be, dt, dw, out, inp, &sh, 1, NULL);
  char *log = ddp_test_log_stop();
  ck_assert_msg(st_f == want && st_d == want && st_w == want, "'%s': got %s, %s, %s; log: %s",
                needle, ddp_status_name(st_f), ddp_status_name(st_d), ddp_status_name(st_w), log);
  ddp_assert_contains(log, needle);
  free(log);
  expect_bits_equal("out after a refusal", out, sentinel, BIG);
  expect_bits_equal("dinp after a refusal", dinp, sentinel, BIG);
  expect_bits_equal("dw after a refusal", dw, sentinel, BIG);
}

START_TEST(test_conv_rejects_bad_shapes) {
  const ddp_conv_shape_t ok = k_cases[1];
  ddp_conv_shape_t sh = ok;
  sh.N = 0;
  expect_conv_refused(sh, DDP_DTYPE_F32, DDP_ERR_INVALID_ARG, "every size must be positive (N=0");
  sh = ok;
  sh.C = -3;
  expect_conv_refused(sh, DDP_DTYPE_F32, DDP_ERR_INVALID_ARG, "C=-3");
  sh = ok;
  sh.stride = 0;
  expect_conv_refused(sh, DDP_DTYPE_F32, DDP_ERR_INVALID_ARG, "stride 0 must be at least 1");
  sh = ok;
  sh.pad = -1;
  expect_conv_refused(sh, DDP_DTYPE_F32, DDP_ERR_INVALID_ARG, "padding -1 must be in [0, kernel");
  sh = ok;
  sh.pad = 3;
  expect_conv_refused(sh, DDP_DTYPE_F32, DDP_ERR_INVALID_ARG, "padding 3 must be in [0, kernel");
  sh = ok;
  sh.H = 2, sh.W = 9, sh.R = 5, sh.S = 5, sh.pad = 1;
  expect_conv_refused(sh, DDP_DTYPE_F32, DDP_ERR_INVALID_ARG,
                      "the 5x5 kernel does not fit the 2x9 input padded by 1");
  sh = ok;
  sh.N = 1 << 20, sh.H = 1 << 10;
  expect_conv_refused(sh, DDP_DTYPE_F32, DDP_ERR_INVALID_ARG, "elements exceed");
  expect_conv_refused(ok, DDP_DTYPE_BF16, DDP_ERR_UNSUPPORTED, "only fp32 is implemented");
  ck_assert_uint_eq(ddp_cpu_dnnl_cache_entries(), 0); /* refused before any primitive */
}
END_TEST

/* ddp_cpu_conv_describe: an op that is not 0, 1 or 2, no buffer or an empty
 * one, or a bad shape: refused with a message, the buffer untouched, no
 * primitive built. */
START_TEST(test_conv_describe_rejects_bad_arguments) {
  const ddp_conv_shape_t ok = k_cases[1];
  ddp_conv_shape_t bad = ok;
  bad.stride = 0;
  struct {
    int op;
    size_t len;
    int with_buf;
    const ddp_conv_shape_t *sh;
    const char *needle;
  } cases[] = {
      {3, 64, 1, &ok, "op must be 0, 1 or 2"},   {-1, 64, 1, &ok, "op must be 0, 1 or 2"},
      {0, 64, 0, &ok, "with a buffer"},          {0, 0, 1, &ok, "with a buffer"},
      {0, 64, 1, &bad, "stride 0 must be at least 1"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
    char buf[64] = "untouched";
    ddp_test_log_start();
    const ddp_status_t st = ddp_cpu_conv_describe(g_be, cases[i].op, cases[i].sh,
                                                  cases[i].with_buf ? buf : NULL, cases[i].len);
    char *log = ddp_test_log_stop();
    ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
    ddp_assert_contains(log, "conv_describe");
    ddp_assert_contains(log, cases[i].needle);
    ck_assert_str_eq(buf, "untouched");
    free(log);
  }
  ck_assert_uint_eq(ddp_cpu_dnnl_cache_entries(), 0);
}
END_TEST

static void expect_bn_refused(ddp_bn_shape_t sh, int training, int with_save, const char *needle) {
  enum { BIG = 512 };
  float *out = fill(fbuf(BIG), BIG, 7.0f), *inp = funi(BIG, -1, 1);
  float *rm = fill(fbuf(BIG), BIG, 7.0f), *rv = fill(fbuf(BIG), BIG, 7.0f);
  float *sm = fill(fbuf(BIG), BIG, 7.0f), *sv = fill(fbuf(BIG), BIG, 7.0f);
  const float *g = funi(BIG, 0.5f, 1.5f), *b = funi(BIG, -1, 1);
  const float *sentinel = fill(fbuf(BIG), BIG, 7.0f);
  ddp_test_log_start();
  const ddp_status_t st =
      ddp_cpu_bn_fwd(g_be, DDP_DTYPE_F32, out, with_save ? sm : NULL, with_save ? sv : NULL, rm, rv,
                     inp, g, b, &sh, training, NULL);
  char *log = ddp_test_log_stop();
  ck_assert_msg(st == DDP_ERR_INVALID_ARG, "'%s': got %s; log: %s", needle, ddp_status_name(st),
                log);
  ddp_assert_contains(log, needle);
  free(log);
  expect_bits_equal("bn out after a refusal", out, sentinel, BIG);
  expect_bits_equal("running_mean after a refusal", rm, sentinel, BIG);
  expect_bits_equal("running_var after a refusal", rv, sentinel, BIG);
  expect_bits_equal("save_mean after a refusal", sm, sentinel, BIG);
}

START_TEST(test_bn_rejects_bad_arguments) {
  ddp_bn_shape_t sh = k_bn;
  sh.N = 1, sh.H = 1, sh.W = 1;
  expect_bn_refused(sh, 1, 1, "training needs at least 2 values per channel (N*H*W = 1)");
  sh = k_bn;
  sh.C = 0;
  expect_bn_refused(sh, 0, 1, "every size must be positive");
  sh = k_bn;
  sh.eps = 0;
  expect_bn_refused(sh, 1, 1, "eps 0 must be positive");
  sh = k_bn;
  sh.momentum = 1.5f;
  expect_bn_refused(sh, 1, 1, "momentum 1.5 must be in [0, 1]");
  sh = k_bn;
  sh.momentum = NAN;
  expect_bn_refused(sh, 1, 1, "momentum nan must be in [0, 1]");
  expect_bn_refused(k_bn, 1, 0, "training needs save_mean and save_var");
  ck_assert_uint_eq(ddp_cpu_dnnl_cache_entries(), 0);
}
END_TEST

/* ---- without oneDNN -------------------------------------------------------------- */

START_TEST(test_conv_without_dnnl_says_so) {
  float x[64] = {0};
  ddp_test_log_start();
  const ddp_status_t st = ddp_cpu_conv_fwd(g_be, DDP_DTYPE_F32, x, x, x, &k_cases[0], NULL);
  const ddp_status_t st_bn =
      ddp_cpu_bn_fwd(g_be, DDP_DTYPE_F32, x, x, x, x, x, x, x, x, &k_bn, 1, NULL);
  const ddp_status_t st_pool =
      ddp_cpu_maxpool_fwd(g_be, DDP_DTYPE_F32, x, NULL, x, &k_pools[0], NULL);
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(st, DDP_ERR_UNSUPPORTED);
  ck_assert_int_eq(st_bn, DDP_ERR_UNSUPPORTED);
  ck_assert_int_eq(st_pool, DDP_ERR_UNSUPPORTED);
  ddp_assert_contains(log, "maxpool_fwd: this build has no oneDNN");
  ddp_assert_contains(log, "conv_fwd: this build has no oneDNN");
  ddp_assert_contains(log, "batch_norm_fwd: this build has no oneDNN");
  free(log);
}
END_TEST

int main(void) {
  Suite *s = suite_create("conv");
  TCase *tc = tcase_create("cpu");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  if (!ddp_cpu_dnnl_available()) {
    /* Nothing to compute with: check the ops refuse clearly, then skip. */
    tcase_add_test(tc, test_conv_without_dnnl_says_so);
    suite_add_tcase(s, tc);
    if (ddp_test_run_suite(s) != EXIT_SUCCESS) return EXIT_FAILURE;
    fprintf(stderr, "SKIP: this build has no oneDNN (configure --with-dnnl)\n");
    return 77;
  }
  tcase_add_loop_test(tc, test_conv_fwd_matches_direct_convolution, 0, 4);
  tcase_add_loop_test(tc, test_conv_bwd_data_finite_differences, 0, 4);
  tcase_add_loop_test(tc, test_conv_bwd_weights_finite_differences, 0, 4);
  tcase_add_test(tc, test_conv_winograd_where_onednn_has_it);
  tcase_add_test(tc, test_conv_bwd_weights_accumulates);
  tcase_add_test(tc, test_conv_fd_check_detects_wrong_gradient);
  tcase_add_test(tc, test_bn_fwd_training_matches_formula);
  tcase_add_test(tc, test_bn_fwd_inference_uses_running_stats);
  tcase_add_test(tc, test_bn_bwd_finite_differences);
  tcase_add_test(tc, test_bn_bwd_accumulates);
  tcase_add_test(tc, test_maxpool_fwd_matches_direct);
  tcase_add_test(tc, test_maxpool_bwd_finite_differences);
  tcase_add_test(tc, test_maxpool_rejects_bad_shapes);
  tcase_add_test(tc, test_conv_primitive_cache_reused);
  tcase_add_test(tc, test_conv_staging_survives_growth);
  tcase_add_test(tc, test_conv_rejects_bad_shapes);
  tcase_add_test(tc, test_conv_describe_rejects_bad_arguments);
  tcase_add_test(tc, test_bn_rejects_bad_arguments);
  suite_add_tcase(s, tc);
  return ddp_test_run_suite(s);
}
