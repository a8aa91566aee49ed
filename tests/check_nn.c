/* Tests for the CPU layer ops (ddptrain/nn.h, ddp_nn_cpu_ops).
 *
 * Every backward is checked against central finite differences of its own
 * forward: with a fixed random R, the objective L = sum(out * R) (in double)
 * has dL/dout = R, so backward(dout = R) must give dL/dx for every input x.
 * Forwards are checked against direct double-precision computations, and the
 * contract details are tested one by one: accumulate / overwrite semantics
 * (overwritten buffers are pre-filled with NaN, which must not survive),
 * causality, eval == training, ignore index, aliasing, rejection of bad
 * arguments with nothing written, and large-value stability.
 *
 * The CPU backend's memory is host memory, so buffers are plain malloc
 * blocks of exact size (the sanitizers then see an overrun at either end)
 * read and written directly; the ops are the CPU implementation, and the
 * CUDA kernels are later tested against them through the backend.
 *
 * Shapes are small and odd (B=2, T=5, C=12, NH=3, V=11, Vp=16, N=B*T), so
 * every element is perturbed; a few larger cases (attention over several row
 * blocks, odd channel counts that leave vector tails) check a random subset
 * of about 200 elements.
 *
 * Finite-difference tolerance, derived for fp32 with inputs and R of order 1:
 *   step H = 1e-2, and the denominator is the perturbation actually applied
 *   after rounding to fp32 (x + H and x - H are not exact);
 *   truncation error of the central difference: H^2 |f'''| / 6 ~ 2e-5 for
 *   the O(1) third derivatives of these ops;
 *   rounding: the k outputs a perturbation touches each carry ~u |out|
 *   (u = 2^-24 ~ 6e-8) of forward rounding, differing between the two
 *   evaluations, so the difference quotient has error ~ sqrt(k) u |out R| / H,
 *   2e-4 for k = 1000 (attention over T = 150), ~2e-5 for the small shapes.
 *   Hence ATOL = 1e-3 with RTOL = 1e-2 of the gradient (room for the larger
 *   f''' of sharp softmax rows). Smaller H would trade truncation for
 *   rounding (1e-3 makes the rounding term 10x larger), larger H the reverse.
 *   A wrong formula (a dropped term, a transposed index) shifts gradients of
 *   order 0.1-1 by a comparable amount, far outside this, and
 *   test_nn_fd_check_detects_wrong_gradient shows the check fails on a 5%
 *   error of one element. Each check also asserts the gradients it compared
 *   are not all tiny, so it cannot pass vacuously.
 * Measured worst error / tolerance over all checks: 0.09 (attention at
 * T = 150), 0.03 or less elsewhere. Set DDP_NN_VERBOSE=1 to print the
 * ratio of each check. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "ddptrain/backend.h"
#include "ddptrain/nn.h"
#include "ddptrain/rng.h"
#include "ddptrain/status.h"

#define FD_H 1e-2f
#define FD_RTOL 1e-2
#define FD_ATOL 1e-3
#define FD_SUBSET 200

/* The default small, odd shapes. */
enum { SB = 2, ST = 5, SC = 12, SNH = 3, SV = 11, SVP = 16, SN = SB * ST };

static ddp_backend_t *g_be;
static const ddp_nn_ops_t *const nn = &ddp_nn_cpu_ops;
static ddp_rng_t g_rng_u, g_rng_n, g_rng_pick; /* one stream per kind of draw */
static uint64_t g_off_u, g_off_n, g_off_pick;

static void setup(void) {
  g_be = ddp_test_cpu_backend();
  ddp_rng_t base;
  ddp_rng_init(&base, 20240520, 7);
  ddp_rng_derive(&base, 1, &g_rng_u);
  ddp_rng_derive(&base, 2, &g_rng_n);
  ddp_rng_derive(&base, 3, &g_rng_pick);
  g_off_u = g_off_n = g_off_pick = 0;
  ddp_test_free_tracked();
}

static void teardown(void) {
  ddp_test_free_tracked();
  ddp_backend_destroy(g_be);
  g_be = NULL;
}

/* ---- buffers and random inputs --------------------------------------------- */

static float *fbuf(size_t n) {
  return ddp_test_track(malloc(n * sizeof(float)));
}

static float *fill_const(float *x, size_t n, float v) {
  for (size_t i = 0; i < n; ++i) x[i] = v;
  return x;
}

static float *fnan(size_t n) {
  return fill_const(fbuf(n), n, NAN);
}

static float *fzero(size_t n) {
  return fill_const(fbuf(n), n, 0.0f);
}

static float *fcopy(const float *src, size_t n) {
  float *x = fbuf(n);
  memcpy(x, src, n * sizeof *x);
  return x;
}

/* Uniform in [lo, hi). */
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

static uint64_t pick(uint64_t bound) {
  return ddp_rng_below(&g_rng_pick, g_off_pick++, bound);
}

static int32_t *ibuf(size_t n) {
  return ddp_test_track(malloc(n * sizeof(int32_t)));
}

static int32_t *tokens_below(size_t n, int32_t bound) {
  int32_t *t = ibuf(n);
  for (size_t i = 0; i < n; ++i) t[i] = (int32_t)pick((uint64_t)bound);
  return t;
}

static void expect_ok(ddp_status_t st, const char *what) {
  if (st != DDP_OK) ck_abort_msg("%s failed: %s", what, ddp_status_name(st));
}

/* Counts elements with |got - want| > atol + rtol |want| (or non-finite
 * got) and fails with the first one. */
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

static void expect_close_f(const char *what, const float *got, const float *want, size_t n,
                           double rtol, double atol) {
  double *w = ddp_test_track(malloc(n * sizeof *w));
  for (size_t i = 0; i < n; ++i) w[i] = want[i];
  expect_close(what, got, w, n, rtol, atol);
}

static void expect_all_finite(const char *what, const float *x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    ck_assert_msg(isfinite(x[i]), "%s: element %zu is %g", what, i, (double)x[i]);
}

static void expect_bits_equal(const char *what, const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    ck_assert_msg(memcmp(&a[i], &b[i], sizeof a[i]) == 0, "%s: element %zu: %.9g vs %.9g", what, i,
                  (double)a[i], (double)b[i]);
}

/* ---- the finite-difference checker ------------------------------------------ */

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

/* Perturbs x[i] (all i, or max_checks random ones) by +-H, re-runs fwd and
 * compares the central difference of sum(out * R) with grad[i]. Leaves x
 * and out as they were. */
static fd_result_t fd_compare(fwd_fn fwd, void *ctx, const float *out, const float *R, size_t n_out,
                              float *x, const float *grad, size_t n, size_t max_checks) {
  fd_result_t r = {0};
  const size_t count = max_checks && max_checks < n ? max_checks : n;
  for (size_t c = 0; c < count; ++c) {
    const size_t i = count == n ? c : (size_t)pick(n);
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
                     size_t n_out, float *x, const float *grad, size_t n, size_t max_checks) {
  const fd_result_t r = fd_compare(fwd, ctx, out, R, n_out, x, grad, n, max_checks);
  if (getenv("DDP_NN_VERBOSE"))
    fprintf(stderr, "fd %-28s checked %4zu  worst err/tol %.3f  max |grad| %.3g\n", what, r.checked,
            r.worst_ratio, r.max_grad);
  ck_assert_msg(r.bad == 0, "%s: %zu of %zu gradients off, first [%zu] fd %.7g analytic %.7g", what,
                r.bad, r.checked, r.first, r.first_fd, r.first_an);
  ck_assert_msg(r.max_grad > 20 * FD_ATOL, "%s: all %zu gradients below %g: vacuous check", what,
                r.checked, 20 * FD_ATOL);
}

/* ---- double-precision references ------------------------------------------- */

/* GELU, tanh form. For u << 0, 1 + tanh(u) cancels even in double (it is 0
 * from u < -19), so there the identical 0.5 (1 + tanh u) = 1 / (1 + e^-2u)
 * gives the true tail. */
static double gelu_ref(double x) {
  const double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return u > -3.0 ? 0.5 * x * (1.0 + tanh(u)) : x / (1.0 + exp(-2.0 * u));
}

/* out (B,T,C) and att (B,NH,T,T) (lower triangle) of causal attention. */
static void attention_ref(double *out, double *att, const float *qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const double scale = 1.0 / sqrt((double)hs);
  double *p = malloc((size_t)T * sizeof *p);
  ck_assert_ptr_nonnull(p);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        double mx = -INFINITY, sum = 0;
        for (int s = 0; s <= t; ++s) {
          const float *k = qkv + ((size_t)b * T + s) * 3 * C + C + h * hs;
          double dot = 0;
          for (int i = 0; i < hs; ++i) dot += (double)q[i] * k[i];
          p[s] = dot * scale;
          mx = fmax(mx, p[s]);
        }
        for (int s = 0; s <= t; ++s) sum += (p[s] = exp(p[s] - mx));
        for (int i = 0; i < hs; ++i) {
          double acc = 0;
          for (int s = 0; s <= t; ++s)
            acc += p[s] / sum * qkv[((size_t)b * T + s) * 3 * C + 2 * C + h * hs + i];
          out[((size_t)b * T + t) * C + h * hs + i] = acc;
        }
        if (att)
          for (int s = 0; s <= t; ++s) att[(((size_t)b * NH + h) * T + t) * T + s] = p[s] / sum;
      }
  free(p);
}

/* ---- embedding --------------------------------------------------------------- */

typedef struct embed_ctx {
  float *out, *wte, *wpe;
  const int32_t *tokens;
  int B, T, C;
} embed_ctx_t;

static void embed_forward(void *p) {
  embed_ctx_t *c = p;
  expect_ok(
      nn->embed_fwd(g_be, DDP_DTYPE_F32, c->out, c->tokens, c->wte, c->wpe, c->B, c->T, c->C, NULL),
      "embed_fwd");
}

START_TEST(test_nn_embed_fwd_matches_reference) {
  const int B = SB, T = ST, C = SC, V = SV;
  int32_t *tok = tokens_below((size_t)B * T, V);
  float *wte = funi((size_t)V * C, -1, 1), *wpe = funi((size_t)T * C, -1, 1);
  float *out = fnan((size_t)B * T * C);
  expect_ok(nn->embed_fwd(g_be, DDP_DTYPE_F32, out, tok, wte, wpe, B, T, C, NULL), "embed_fwd");
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < C; ++i) {
        const float want = wte[(size_t)tok[b * T + t] * C + i] + wpe[(size_t)t * C + i];
        ck_assert_float_eq(out[((size_t)b * T + t) * C + i], want);
      }
}
END_TEST

START_TEST(test_nn_embed_bwd_finite_differences) {
  const int B = SB, T = ST, C = SC, V = SV;
  embed_ctx_t c = {.B = B, .T = T, .C = C};
  int32_t *tok = tokens_below((size_t)B * T, V);
  tok[0] = tok[T + 1] = tok[T + 3] = 4; /* a token seen several times */
  c.tokens = tok;
  c.wte = funi((size_t)V * C, -1, 1);
  c.wpe = funi((size_t)T * C, -1, 1);
  c.out = fbuf((size_t)B * T * C);
  const size_t n_out = (size_t)B * T * C;
  float *R = funi(n_out, -1, 1);
  float *dwte = fzero((size_t)V * C), *dwpe = fnan((size_t)T * C);
  embed_forward(&c);
  expect_ok(nn->embed_bwd(g_be, DDP_DTYPE_F32, dwte, dwpe, R, tok, B, T, C, 0, NULL), "embed_bwd");
  fd_check("embed dwte", embed_forward, &c, c.out, R, n_out, c.wte, dwte, (size_t)V * C, 0);
  fd_check("embed dwpe", embed_forward, &c, c.out, R, n_out, c.wpe, dwpe, (size_t)T * C, 0);
}
END_TEST

START_TEST(test_nn_embed_bwd_accumulate_semantics) {
  const int B = SB, T = ST, C = SC, V = SV;
  int32_t *tok = tokens_below((size_t)B * T, V);
  float *dout = funi((size_t)B * T * C, -1, 1);
  /* Reference sums in the (t, b) order the contract fixes, from zero. */
  float *ref_te = fzero((size_t)V * C), *ref_pe = fzero((size_t)T * C);
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < C; ++i) {
        const float g = dout[((size_t)b * T + t) * C + i];
        ref_te[(size_t)tok[b * T + t] * C + i] += g;
        ref_pe[(size_t)t * C + i] += g;
      }
  /* dwte always accumulates onto what the LM head wrote; dwpe with
   * accumulate = 0 overwrites NaN. */
  float *prev = funi((size_t)V * C, -1, 1);
  float *dwte = fcopy(prev, (size_t)V * C), *dwpe = fnan((size_t)T * C);
  expect_ok(nn->embed_bwd(g_be, DDP_DTYPE_F32, dwte, dwpe, dout, tok, B, T, C, 0, NULL),
            "embed_bwd");
  double *want = ddp_test_track(malloc((size_t)V * C * sizeof *want));
  for (size_t i = 0; i < (size_t)V * C; ++i) want[i] = (double)prev[i] + ref_te[i];
  expect_close("dwte += (accumulate 0)", dwte, want, (size_t)V * C, 1e-6, 1e-6);
  expect_close_f("dwpe = (overwrites NaN)", dwpe, ref_pe, (size_t)T * C, 1e-6, 1e-7);
  /* A second call with accumulate = 1 doubles both contributions. */
  expect_ok(nn->embed_bwd(g_be, DDP_DTYPE_F32, dwte, dwpe, dout, tok, B, T, C, 1, NULL),
            "embed_bwd");
  for (size_t i = 0; i < (size_t)V * C; ++i) want[i] = (double)prev[i] + 2.0 * ref_te[i];
  expect_close("dwte after two calls", dwte, want, (size_t)V * C, 1e-6, 1e-6);
  double *want_pe = ddp_test_track(malloc((size_t)T * C * sizeof *want_pe));
  for (size_t i = 0; i < (size_t)T * C; ++i) want_pe[i] = 2.0 * ref_pe[i];
  expect_close("dwpe after accumulate", dwpe, want_pe, (size_t)T * C, 1e-6, 1e-7);
}
END_TEST

/* ---- layernorm -------------------------------------------------------------- */

typedef struct ln_ctx {
  float *out, *mean, *rstd, *inp, *w, *b;
  int N, C;
} ln_ctx_t;

static void ln_forward(void *p) {
  ln_ctx_t *c = p;
  expect_ok(nn->layernorm_fwd(g_be, DDP_DTYPE_F32, c->out, c->mean, c->rstd, c->inp, c->w, c->b,
                              c->N, c->C, NULL),
            "layernorm_fwd");
}

/* The double reference of one row: mean, rstd and out. */
static void ln_ref_row(double *out, double *mean, double *rstd, const float *x, const float *w,
                       const float *b, int C) {
  double m = 0, v = 0;
  for (int i = 0; i < C; ++i) m += x[i];
  m /= C;
  for (int i = 0; i < C; ++i) v += (x[i] - m) * (x[i] - m);
  v /= C;
  const double r = 1.0 / sqrt(v + 1e-5);
  for (int i = 0; i < C; ++i) out[i] = (x[i] - m) * r * w[i] + b[i];
  *mean = m;
  *rstd = r;
}

START_TEST(test_nn_layernorm_fwd_matches_double_reference) {
  static const int Cs[] = {SC, 1, 3, 77, 300};
  for (int k = 0; k < 5; ++k) {
    const int N = 7, C = Cs[k];
    float *x = fnormal((size_t)N * C, 0.3f, 2.0f), *w = funi(C, 0.5f, 1.5f), *b = funi(C, -1, 1);
    float *out = fnan((size_t)N * C), *mean = fnan(N), *rstd = fnan(N);
    expect_ok(nn->layernorm_fwd(g_be, DDP_DTYPE_F32, out, mean, rstd, x, w, b, N, C, NULL),
              "layernorm_fwd");
    double *ref = ddp_test_track(malloc((size_t)N * C * sizeof *ref));
    double *rm = ddp_test_track(malloc(N * sizeof *rm)),
           *rr = ddp_test_track(malloc(N * sizeof *rr));
    for (int r = 0; r < N; ++r)
      ln_ref_row(ref + (size_t)r * C, &rm[r], &rr[r], x + (size_t)r * C, w, b, C);
    expect_close("layernorm out", out, ref, (size_t)N * C, 1e-5, 1e-5);
    expect_close("layernorm mean", mean, rm, N, 1e-6, 1e-6);
    expect_close("layernorm rstd", rstd, rr, N, 1e-6, 0);
    /* Eval (no mean/rstd saved) computes the same output. */
    float *out2 = fnan((size_t)N * C);
    expect_ok(nn->layernorm_fwd(g_be, DDP_DTYPE_F32, out2, NULL, NULL, x, w, b, N, C, NULL),
              "layernorm eval");
    expect_bits_equal("layernorm eval == training", out2, out, (size_t)N * C);
  }
}
END_TEST

static void ln_fd_case(int N, int C, size_t max_checks) {
  ln_ctx_t c = {.N = N, .C = C};
  const size_t n = (size_t)N * C;
  c.inp = fnormal(n, 0.2f, 1.0f);
  c.w = funi(C, 0.5f, 1.5f);
  c.b = funi(C, -1, 1);
  c.out = fbuf(n);
  c.mean = fbuf(N);
  c.rstd = fbuf(N);
  float *R = funi(n, -1, 1);
  float *dinp = fzero(n), *dw = fnan(C), *db = fnan(C);
  ln_forward(&c);
  expect_ok(nn->layernorm_bwd(g_be, DDP_DTYPE_F32, dinp, dw, db, R, c.inp, c.w, c.mean, c.rstd, N,
                              C, 0, NULL),
            "layernorm_bwd");
  char what[64];
  snprintf(what, sizeof what, "layernorm dinp C=%d", C);
  fd_check(what, ln_forward, &c, c.out, R, n, c.inp, dinp, n, max_checks);
  snprintf(what, sizeof what, "layernorm dw C=%d", C);
  fd_check(what, ln_forward, &c, c.out, R, n, c.w, dw, C, max_checks);
  snprintf(what, sizeof what, "layernorm db C=%d", C);
  fd_check(what, ln_forward, &c, c.out, R, n, c.b, db, C, max_checks);
}

START_TEST(test_nn_layernorm_bwd_finite_differences) {
  ln_fd_case(SN, SC, 0);
  ln_fd_case(9, 77, FD_SUBSET); /* vector bodies and scalar tails */
}
END_TEST

START_TEST(test_nn_layernorm_bwd_accumulate_semantics) {
  const int N = SN, C = SC;
  const size_t n = (size_t)N * C;
  float *x = fnormal(n, 0, 1), *w = funi(C, 0.5f, 1.5f), *b = funi(C, -1, 1);
  float *out = fbuf(n), *mean = fbuf(N), *rstd = fbuf(N), *dout = funi(n, -1, 1);
  expect_ok(nn->layernorm_fwd(g_be, DDP_DTYPE_F32, out, mean, rstd, x, w, b, N, C, NULL),
            "layernorm_fwd");
  /* Reference gradients from zeroed buffers. */
  float *dinp0 = fzero(n), *dw0 = fzero(C), *db0 = fzero(C);
  expect_ok(nn->layernorm_bwd(g_be, DDP_DTYPE_F32, dinp0, dw0, db0, dout, x, w, mean, rstd, N, C, 1,
                              NULL),
            "layernorm_bwd");
  /* dinp accumulates onto what the residual stream already holds; dw, db
   * overwrite NaN with accumulate = 0 ... */
  float *prev = funi(n, -1, 1);
  float *dinp = fcopy(prev, n), *dw = fnan(C), *db = fnan(C);
  expect_ok(
      nn->layernorm_bwd(g_be, DDP_DTYPE_F32, dinp, dw, db, dout, x, w, mean, rstd, N, C, 0, NULL),
      "layernorm_bwd");
  double *want = ddp_test_track(malloc(n * sizeof *want));
  for (size_t i = 0; i < n; ++i) want[i] = (double)prev[i] + dinp0[i];
  expect_close("layernorm dinp +=", dinp, want, n, 1e-6, 1e-6);
  expect_close_f("layernorm dw overwrites NaN", dw, dw0, C, 1e-6, 0);
  expect_close_f("layernorm db overwrites NaN", db, db0, C, 1e-6, 0);
  /* ... and add with accumulate = 1: two calls give twice the gradient. */
  expect_ok(
      nn->layernorm_bwd(g_be, DDP_DTYPE_F32, dinp, dw, db, dout, x, w, mean, rstd, N, C, 1, NULL),
      "layernorm_bwd");
  double *w2 = ddp_test_track(malloc(C * sizeof *w2)), *b2 = ddp_test_track(malloc(C * sizeof *b2));
  for (int i = 0; i < C; ++i) w2[i] = 2.0 * dw0[i], b2[i] = 2.0 * db0[i];
  expect_close("layernorm dw twice", dw, w2, C, 1e-6, 1e-7);
  expect_close("layernorm db twice", db, b2, C, 1e-6, 1e-7);
}
END_TEST

START_TEST(test_nn_layernorm_large_mean_stays_accurate) {
  /* Rows 1e4 + N(0, 1): the variance is 1e-8 of the mean's square, below
   * fp32 resolution, so E[x^2] - E[x]^2 in fp32 returns noise (or a negative
   * number). And a long row (C = 8192, mean 1e3). The only error left is the
   * fp32 rounding of the saved mean, at most half an ulp of it, times rstd,
   * plus a few roundings of the output. */
  static const int Cs[] = {SC, 768, 8192};
  static const float offs[] = {1e4f, 1e4f, 1e3f};
  for (int k = 0; k < 3; ++k) {
    const int N = 3, C = Cs[k];
    float *x = fnormal((size_t)N * C, offs[k], 1.0f), *w = fill_const(fbuf(C), C, 1.0f);
    float *b = fzero(C), *out = fnan((size_t)N * C), *mean = fbuf(N), *rstd = fbuf(N);
    expect_ok(nn->layernorm_fwd(g_be, DDP_DTYPE_F32, out, mean, rstd, x, w, b, N, C, NULL),
              "layernorm_fwd");
    double *ref = ddp_test_track(malloc((size_t)C * sizeof *ref));
    for (int r = 0; r < N; ++r) {
      double rm, rr;
      ln_ref_row(ref, &rm, &rr, x + (size_t)r * C, w, b, C);
      const double half_ulp = 0.5 * (nextafterf((float)rm, INFINITY) - (float)rm);
      const double atol = half_ulp * rr + 1e-6;
      expect_close("layernorm of 1e4 + N(0,1)", out + (size_t)r * C, ref, C, 1e-6, atol);
      ck_assert_msg(fabs(rstd[r] - rr) <= 1e-6 * rr, "rstd %g want %g", (double)rstd[r], rr);
      ck_assert_msg(fabs(mean[r] - rm) <= half_ulp, "mean %.9g want %.9g", (double)mean[r], rm);
    }
  }
}
END_TEST

/* ---- residual add + layernorm ----------------------------------------------- */

/* The fused op is defined as `add` followed by layernorm_fwd on the stored
 * sum: resid, out, mean and rstd must equal that pair's bit for bit, for odd
 * channel counts (a lone channel, vector bodies with and without a tail), in
 * training and eval, and with the residual stream updated in place
 * (resid == a, as the model calls it). */
START_TEST(test_nn_residual_layernorm_equals_add_then_layernorm) {
  static const int Cs[] = {1, 7, SC, 67, 203};
  for (size_t k = 0; k < sizeof Cs / sizeof Cs[0]; ++k) {
    const int N = 11, C = Cs[k];
    const size_t n = (size_t)N * C;
    float *a = fnormal(n, 0.5f, 2.0f), *b = fnormal(n, 0.0f, 1.0f);
    float *w = funi(C, 0.5f, 1.5f), *bias = funi(C, -1, 1);
    float *sum = fnan(n), *ref = fnan(n), *rm = fnan(N), *rr = fnan(N);
    expect_ok(nn->add(g_be, DDP_DTYPE_F32, sum, a, b, n, NULL), "add");
    expect_ok(nn->layernorm_fwd(g_be, DDP_DTYPE_F32, ref, rm, rr, sum, w, bias, N, C, NULL),
              "layernorm_fwd");
    float *resid = fnan(n), *out = fnan(n), *mean = fnan(N), *rstd = fnan(N);
    expect_ok(nn->residual_layernorm_fwd(g_be, DDP_DTYPE_F32, resid, out, mean, rstd, a, b, w, bias,
                                         N, C, NULL),
              "residual_layernorm_fwd");
    expect_bits_equal("fused resid == add", resid, sum, n);
    expect_bits_equal("fused out == layernorm(add)", out, ref, n);
    expect_bits_equal("fused mean", mean, rm, N);
    expect_bits_equal("fused rstd", rstd, rr, N);
    /* Eval, in place on the residual stream. */
    float *out2 = fnan(n);
    expect_ok(nn->residual_layernorm_fwd(g_be, DDP_DTYPE_F32, a, out2, NULL, NULL, a, b, w, bias, N,
                                         C, NULL),
              "residual_layernorm_fwd in place");
    expect_bits_equal("fused in place resid", a, sum, n);
    expect_bits_equal("fused in place out", out2, ref, n);
  }
}
END_TEST

/* ---- linear ------------------------------------------------------------------ */

typedef struct lin_ctx {
  float *out, *inp, *w, *bias;
  int N, IC, OC;
} lin_ctx_t;

static void lin_forward(void *p) {
  lin_ctx_t *c = p;
  expect_ok(
      nn->linear_fwd(g_be, DDP_DTYPE_F32, c->out, c->inp, c->w, c->bias, c->N, c->IC, c->OC, NULL),
      "linear_fwd");
}

START_TEST(test_nn_linear_fwd_matches_reference) {
  const int N = SN, IC = SC, OC = 7;
  float *x = funi((size_t)N * IC, -1, 1), *w = funi((size_t)OC * IC, -1, 1);
  float *bias = funi(OC, -1, 1), *out = fnan((size_t)N * OC), *out_nb = fnan((size_t)N * OC);
  expect_ok(nn->linear_fwd(g_be, DDP_DTYPE_F32, out, x, w, bias, N, IC, OC, NULL), "linear_fwd");
  expect_ok(nn->linear_fwd(g_be, DDP_DTYPE_F32, out_nb, x, w, NULL, N, IC, OC, NULL),
            "linear_fwd no bias");
  double *ref = ddp_test_track(malloc((size_t)N * OC * sizeof *ref));
  double *ref_nb = ddp_test_track(malloc((size_t)N * OC * sizeof *ref_nb));
  for (int r = 0; r < N; ++r)
    for (int o = 0; o < OC; ++o) {
      double acc = 0;
      for (int i = 0; i < IC; ++i) acc += (double)x[r * IC + i] * w[o * IC + i];
      ref_nb[r * OC + o] = acc;
      ref[r * OC + o] = acc + bias[o];
    }
  /* Length-12 dot products of O(1) terms: fp32 error below 12 u * 12. */
  expect_close("linear out", out, ref, (size_t)N * OC, 1e-6, 1e-5);
  expect_close("linear out without bias (NaN overwritten)", out_nb, ref_nb, (size_t)N * OC, 1e-6,
               1e-5);
}
END_TEST

static void lin_fd_case(int N, int IC, int OC, size_t max_checks) {
  lin_ctx_t c = {.N = N, .IC = IC, .OC = OC};
  c.inp = funi((size_t)N * IC, -1, 1);
  c.w = funi((size_t)OC * IC, -0.5f, 0.5f);
  c.bias = funi(OC, -1, 1);
  const size_t n_out = (size_t)N * OC;
  c.out = fbuf(n_out);
  float *R = funi(n_out, -1, 1);
  float *dinp = fnan((size_t)N * IC), *dw = fnan((size_t)OC * IC), *db = fnan(OC);
  lin_forward(&c);
  expect_ok(nn->linear_bwd(g_be, DDP_DTYPE_F32, dinp, dw, db, R, c.inp, c.w, N, IC, OC, 0, 0, NULL),
            "linear_bwd");
  char what[64];
  snprintf(what, sizeof what, "linear dinp %dx%dx%d", N, IC, OC);
  fd_check(what, lin_forward, &c, c.out, R, n_out, c.inp, dinp, (size_t)N * IC, max_checks);
  snprintf(what, sizeof what, "linear dw %dx%dx%d", N, IC, OC);
  fd_check(what, lin_forward, &c, c.out, R, n_out, c.w, dw, (size_t)OC * IC, max_checks);
  snprintf(what, sizeof what, "linear dbias %dx%dx%d", N, IC, OC);
  fd_check(what, lin_forward, &c, c.out, R, n_out, c.bias, db, OC, max_checks);
}

START_TEST(test_nn_linear_bwd_finite_differences) {
  lin_fd_case(SN, SC, 7, 0);
  lin_fd_case(64, 96, 80, FD_SUBSET);
}
END_TEST

static void lin_accumulate_case(int N, int IC, int OC) {
  float *x = funi((size_t)N * IC, -1, 1), *w = funi((size_t)OC * IC, -1, 1);
  float *dout = funi((size_t)N * OC, -1, 1);
  /* References in double. */
  double *rdx = ddp_test_track(malloc((size_t)N * IC * sizeof *rdx));
  double *rdw = ddp_test_track(malloc((size_t)OC * IC * sizeof *rdw)),
         *rdb = ddp_test_track(malloc(OC * sizeof *rdb));
  for (int r = 0; r < N; ++r)
    for (int i = 0; i < IC; ++i) {
      double acc = 0;
      for (int o = 0; o < OC; ++o) acc += (double)dout[r * OC + o] * w[o * IC + i];
      rdx[r * IC + i] = acc;
    }
  for (int o = 0; o < OC; ++o) {
    double accb = 0;
    for (int i = 0; i < IC; ++i) {
      double acc = 0;
      for (int r = 0; r < N; ++r) acc += (double)dout[r * OC + o] * x[r * IC + i];
      rdw[o * IC + i] = acc;
    }
    for (int r = 0; r < N; ++r) accb += dout[r * OC + o];
    rdb[o] = accb;
  }
  /* What is tested is the semantics (overwrite, add), not GEMM accuracy
   * (tests/check_gemm.c): the tolerance is a generous 4e-7 per term of the
   * reduction (OC terms for dinp, N for dw and dbias, each below 1 in
   * magnitude), far below the O(1) error of a wrong semantics.
   * accumulate = 0 and accumulate_dinp = 0 overwrite NaN. */
  const double tx = 4e-7 * OC, tw = 4e-7 * N;
  float *dinp = fnan((size_t)N * IC), *dw = fnan((size_t)OC * IC), *db = fnan(OC);
  expect_ok(nn->linear_bwd(g_be, DDP_DTYPE_F32, dinp, dw, db, dout, x, w, N, IC, OC, 0, 0, NULL),
            "linear_bwd");
  expect_close("linear dinp =", dinp, rdx, (size_t)N * IC, 1e-6, tx);
  expect_close("linear dw =", dw, rdw, (size_t)OC * IC, 1e-6, tw);
  expect_close("linear dbias =", db, rdb, OC, 1e-6, tw);
  /* accumulate = 1 twice: twice the parameter gradient; accumulate_dinp = 1
   * adds onto what dinp held. */
  float *prev = funi((size_t)N * IC, -1, 1), *dinp2 = fcopy(prev, (size_t)N * IC);
  expect_ok(nn->linear_bwd(g_be, DDP_DTYPE_F32, dinp2, dw, db, dout, x, w, N, IC, OC, 1, 1, NULL),
            "linear_bwd");
  for (size_t i = 0; i < (size_t)N * IC; ++i) rdx[i] += prev[i];
  for (size_t i = 0; i < (size_t)OC * IC; ++i) rdw[i] *= 2;
  for (int o = 0; o < OC; ++o) rdb[o] *= 2;
  expect_close("linear dinp +=", dinp2, rdx, (size_t)N * IC, 1e-6, tx);
  expect_close("linear dw twice", dw, rdw, (size_t)OC * IC, 1e-6, 2 * tw);
  expect_close("linear dbias twice", db, rdb, OC, 1e-6, 2 * tw);
  /* dinp NULL (first layer) and dbias NULL (no bias) are allowed and
   * leave the other gradients as before. */
  float *dw3 = fnan((size_t)OC * IC);
  expect_ok(nn->linear_bwd(g_be, DDP_DTYPE_F32, NULL, dw3, NULL, dout, x, w, N, IC, OC, 0, 0, NULL),
            "linear_bwd without dinp, dbias");
  for (size_t i = 0; i < (size_t)OC * IC; ++i) rdw[i] /= 2;
  expect_close("linear dw (no dinp, no dbias)", dw3, rdw, (size_t)OC * IC, 1e-6, tw);
}

START_TEST(test_nn_linear_bwd_accumulate_semantics) {
  lin_accumulate_case(SN, SC, 7);
  /* Several row blocks (the last partial) and column strips of the bias
   * column sums. */
  lin_accumulate_case(70, 5, 300);
}
END_TEST

/* ---- GELU -------------------------------------------------------------------- */

typedef struct gelu_ctx {
  float *out, *inp;
  size_t n;
} gelu_ctx_t;

static void gelu_forward(void *p) {
  gelu_ctx_t *c = p;
  expect_ok(nn->gelu_fwd(g_be, DDP_DTYPE_F32, c->out, c->inp, c->n, NULL), "gelu_fwd");
}

START_TEST(test_nn_gelu_fwd_matches_tanh_formula) {
  /* A sweep over [-12, 12] plus random points; n = 4803 leaves a vector
   * tail. Relative error: the fp32 argument u = sqrt(2/pi)(x + 0.044715x^3)
   * carries ~2u32 |u| of rounding, which exp() turns into a relative error
   * of the same size where GELU is dominated by exp(-2u) (x << 0), so the
   * tolerance grows with |u|; elsewhere a few ulps. Below x ~ -9.6 the op
   * caps exp(-2u) at e^80 and returns ~1e-34 x instead of values down to
   * 1e-60: the 1e-30 absolute slack (PyTorch's fp32 gives exactly 0 there). */
  const size_t n = 4803;
  float *x = funi(n, -4, 4);
  for (size_t i = 0; i < 2401; ++i) x[i] = -12.0f + 24.0f * (float)i / 2400.0f;
  float *out = fnan(n);
  expect_ok(nn->gelu_fwd(g_be, DDP_DTYPE_F32, out, x, n, NULL), "gelu_fwd");
  for (size_t i = 0; i < n; ++i) {
    const double xi = x[i], ref = gelu_ref(xi);
    const double u = fabs(sqrt(2.0 / M_PI) * (xi + 0.044715 * xi * xi * xi));
    const double tol = fabs(ref) * (4e-7 + 5e-7 * u) + 1e-30;
    ck_assert_msg(fabs(out[i] - ref) <= tol, "gelu(%.9g) = %.9g want %.9g", xi, (double)out[i],
                  ref);
  }
}
END_TEST

START_TEST(test_nn_gelu_bwd_finite_differences) {
  gelu_ctx_t c = {.n = 4 * SN * SC + 3};
  c.inp = funi(c.n, -4, 4);
  c.out = fbuf(c.n);
  float *R = funi(c.n, -1, 1), *dinp = fnan(c.n);
  gelu_forward(&c);
  expect_ok(nn->gelu_bwd(g_be, DDP_DTYPE_F32, dinp, c.inp, R, c.n, NULL), "gelu_bwd");
  fd_check("gelu dinp", gelu_forward, &c, c.out, R, c.n, c.inp, dinp, c.n, 0);
  /* dinp may alias dout. */
  float *inplace = fcopy(R, c.n);
  expect_ok(nn->gelu_bwd(g_be, DDP_DTYPE_F32, inplace, c.inp, inplace, c.n, NULL),
            "gelu_bwd in place");
  expect_bits_equal("gelu_bwd in place", inplace, dinp, c.n);
}
END_TEST

START_TEST(test_nn_add_matches_and_allows_aliasing) {
  const size_t n = 1001;
  float *a = funi(n, -1, 1), *b = funi(n, -1, 1), *out = fnan(n);
  expect_ok(nn->add(g_be, DDP_DTYPE_F32, out, a, b, n, NULL), "add");
  for (size_t i = 0; i < n; ++i) ck_assert_float_eq(out[i], a[i] + b[i]);
  expect_ok(nn->add(g_be, DDP_DTYPE_F32, a, a, b, n, NULL), "add in place");
  expect_bits_equal("add in place", a, out, n);
  expect_ok(nn->add(g_be, DDP_DTYPE_F32, out, a, b, 0, NULL), "add n = 0");
}
END_TEST

/* ---- attention --------------------------------------------------------------- */

typedef struct att_ctx {
  float *out, *att;
  float *qkv;
  int B, T, C, NH;
} att_ctx_t;

static void att_forward(void *p) {
  att_ctx_t *c = p;
  expect_ok(
      nn->attention_fwd(g_be, DDP_DTYPE_F32, c->out, c->att, c->qkv, c->B, c->T, c->C, c->NH, NULL),
      "attention_fwd");
}

static att_ctx_t att_make(int B, int T, int C, int NH) {
  att_ctx_t c = {.B = B, .T = T, .C = C, .NH = NH};
  c.qkv = funi((size_t)B * T * 3 * C, -1.5f, 1.5f);
  c.out = fnan((size_t)B * T * C);
  c.att = fnan((size_t)B * NH * T * T);
  return c;
}

START_TEST(test_nn_attention_fwd_matches_reference) {
  /* T = 150 spans several row blocks of cpu_attention.c (64 rows), the
   * last one partial. */
  static const int shapes[][4] = {{SB, ST, SC, SNH}, {1, 1, 8, 2}, {2, 150, 32, 2}};
  for (int k = 0; k < 3; ++k) {
    const int B = shapes[k][0], T = shapes[k][1], C = shapes[k][2], NH = shapes[k][3];
    att_ctx_t c = att_make(B, T, C, NH);
    att_forward(&c);
    const size_t n = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    double *ref = ddp_test_track(malloc(n * sizeof *ref)),
           *ref_att = ddp_test_track(malloc(na * sizeof *ref_att));
    attention_ref(ref, ref_att, c.qkv, B, T, C, NH);
    expect_close("attention out", c.out, ref, n, 1e-5, 1e-6);
    for (size_t bh = 0; bh < (size_t)B * NH; ++bh)
      for (int t = 0; t < T; ++t) {
        const size_t row = (bh * T + t) * T;
        expect_close("attention probabilities", c.att + row, ref_att + row, (size_t)t + 1, 1e-5,
                     1e-7);
      }
  }
}
END_TEST

static void att_fd_case(int B, int T, int C, int NH, size_t max_checks) {
  att_ctx_t c = att_make(B, T, C, NH);
  const size_t n_out = (size_t)B * T * C, n_qkv = (size_t)B * T * 3 * C;
  float *R = funi(n_out, -1, 1);
  float *dqkv = fnan(n_qkv), *scratch = fnan((size_t)B * NH * T * T);
  att_forward(&c);
  expect_ok(
      nn->attention_bwd(g_be, DDP_DTYPE_F32, dqkv, scratch, R, c.qkv, c.att, B, T, C, NH, NULL),
      "attention_bwd");
  char what[64];
  snprintf(what, sizeof what, "attention dqkv T=%d", T);
  fd_check(what, att_forward, &c, c.out, R, n_out, c.qkv, dqkv, n_qkv, max_checks);
}

START_TEST(test_nn_attention_bwd_finite_differences) {
  att_fd_case(SB, ST, SC, SNH, 0);
  att_fd_case(1, 1, 8, 2, 0);
}
END_TEST

START_TEST(test_nn_attention_bwd_finite_differences_multiblock) {
  att_fd_case(2, 150, 32, 2, FD_SUBSET);
}
END_TEST

START_TEST(test_nn_attention_is_causal) {
  /* Changing the keys and values of positions after t0 leaves outputs 0..t0
   * unchanged bit for bit (their masked probabilities are exactly 0), while
   * later outputs do change. */
  const int B = 2, T = 150, C = 32, NH = 2, t0 = 70;
  att_ctx_t c = att_make(B, T, C, NH);
  att_forward(&c);
  float *before = fcopy(c.out, (size_t)B * T * C);
  for (int b = 0; b < B; ++b)
    for (int t = t0 + 1; t < T; ++t)
      for (int i = C; i < 3 * C; ++i) c.qkv[((size_t)b * T + t) * 3 * C + i] += 0.75f;
  att_forward(&c);
  int changed = 0;
  for (int b = 0; b < B; ++b) {
    const size_t first = (size_t)b * T * C;
    expect_bits_equal("outputs before the change", c.out + first, before + first,
                      (size_t)(t0 + 1) * C);
    for (size_t i = first + (size_t)(t0 + 1) * C; i < first + (size_t)T * C; ++i)
      changed += c.out[i] != before[i];
  }
  ck_assert_int_gt(changed, 0);
}
END_TEST

START_TEST(test_nn_attention_rows_sum_to_one) {
  const int B = 2, T = 150, C = 32, NH = 2;
  att_ctx_t c = att_make(B, T, C, NH);
  for (size_t i = 0; i < (size_t)B * T * 3 * C; ++i) c.qkv[i] *= 4; /* sharp rows */
  att_forward(&c);
  for (size_t bh = 0; bh < (size_t)B * NH; ++bh)
    for (int t = 0; t < T; ++t) {
      const float *row = c.att + (bh * T + t) * T;
      double sum = 0;
      for (int s = 0; s <= t; ++s) {
        ck_assert_msg(row[s] >= 0.0f && row[s] <= 1.0f, "p = %g", (double)row[s]);
        sum += row[s];
      }
      ck_assert_msg(fabs(sum - 1.0) <= 1e-6 * (t + 1), "row %d sums to %.9g", t, sum);
    }
}
END_TEST

START_TEST(test_nn_attention_eval_matches_training) {
  static const int shapes[][4] = {{SB, ST, SC, SNH}, {2, 150, 32, 2}};
  for (int k = 0; k < 2; ++k) {
    const int B = shapes[k][0], T = shapes[k][1], C = shapes[k][2], NH = shapes[k][3];
    att_ctx_t c = att_make(B, T, C, NH);
    att_forward(&c);
    float *eval = fnan((size_t)B * T * C);
    expect_ok(nn->attention_fwd(g_be, DDP_DTYPE_F32, eval, NULL, c.qkv, B, T, C, NH, NULL),
              "attention eval");
    expect_bits_equal("eval == training", eval, c.out, (size_t)B * T * C);
  }
}
END_TEST

START_TEST(test_nn_attention_bwd_reads_only_causal_part) {
  /* Backward overwrites dqkv and needs nothing in its scratch (both start as
   * NaN), and never reads the masked half of att: NaN there must not change
   * the result. */
  const int B = 2, T = 150, C = 32, NH = 2;
  att_ctx_t c = att_make(B, T, C, NH);
  att_forward(&c);
  const size_t nq = (size_t)B * T * 3 * C, na = (size_t)B * NH * T * T;
  float *dout = funi((size_t)B * T * C, -1, 1);
  float *d1 = fzero(nq), *s1 = fzero(na), *d2 = fnan(nq), *s2 = fnan(na);
  expect_ok(nn->attention_bwd(g_be, DDP_DTYPE_F32, d1, s1, dout, c.qkv, c.att, B, T, C, NH, NULL),
            "attention_bwd");
  for (size_t bh = 0; bh < (size_t)B * NH; ++bh)
    for (int t = 0; t < T; ++t)
      for (int s = t + 1; s < T; ++s) c.att[(bh * T + t) * T + s] = NAN;
  expect_ok(nn->attention_bwd(g_be, DDP_DTYPE_F32, d2, s2, dout, c.qkv, c.att, B, T, C, NH, NULL),
            "attention_bwd");
  expect_all_finite("dqkv", d2, nq);
  expect_bits_equal("dqkv with NaN in masked att and buffers", d2, d1, nq);
}
END_TEST

/* ---- cross-entropy ----------------------------------------------------------- */

typedef struct xent_ctx {
  float *losses, *logits;
  const int32_t *targets;
  float smoothing;
  int N, V, Vp;
} xent_ctx_t;

static void xent_forward(void *p) {
  xent_ctx_t *c = p;
  float sum = 0;
  expect_ok(nn->xent_fused(g_be, DDP_DTYPE_F32, c->losses, &sum, NULL, c->logits, c->targets, 1.0f,
                           c->smoothing, c->N, c->V, c->Vp, NULL),
            "xent_fused");
}

/* The label smoothings the tests cover: none, PyTorch's usual, and heavy. */
static const float k_smoothings[] = {0.0f, 0.1f, 0.5f};

/* Targets in [0, V) with rows 2 and 7 ignored. */
static int32_t *xent_targets(int N, int V) {
  int32_t *t = tokens_below(N, V);
  t[2] = -1;
  if (N > 7) t[7] = -1;
  return t;
}

/* loss and dlogits (as the contract defines them) in double: with label
 * smoothing e, (1-e)(-log p_t) + e mean_c(-log p_c), each term its own sum
 * of -log p_c (not the simplified form the op computes). */
static void xent_ref(double *loss, double *dlogits, const float *logits, const int32_t *targets,
                     float dloss, float smoothing, int N, int V, int Vp) {
  const double e = smoothing;
  for (int r = 0; r < N; ++r) {
    const float *x = logits + (size_t)r * Vp;
    double *d = dlogits + (size_t)r * Vp;
    for (int i = 0; i < Vp; ++i) d[i] = 0;
    if (targets[r] < 0) {
      loss[r] = 0;
      continue;
    }
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < V; ++i) mx = fmax(mx, x[i]);
    for (int i = 0; i < V; ++i) sum += exp(x[i] - mx);
    double nll_mean = 0;
    for (int i = 0; i < V; ++i) nll_mean += (mx + log(sum) - x[i]) / V;
    loss[r] = (1 - e) * (mx + log(sum) - x[targets[r]]) + e * nll_mean;
    for (int i = 0; i < V; ++i) d[i] = (exp(x[i] - mx) / sum - e / V) * dloss;
    d[targets[r]] -= (1 - e) * dloss;
  }
}

START_TEST(test_nn_xent_matches_double_reference) {
  static const int shapes[][3] = {{SN, SV, SVP}, {6, 257, 320}, {3, 1, 1}};
  for (int k = 0; k < 9; ++k) {
    const int N = shapes[k % 3][0], V = shapes[k % 3][1], Vp = shapes[k % 3][2];
    const float dloss = 0.37f, eps = k_smoothings[k / 3];
    float *logits = funi((size_t)N * Vp, -4, 4);
    int32_t *tg = xent_targets(N, V);
    float *losses = fnan(N), *dl = fnan((size_t)N * Vp), sum = 0.0f;
    expect_ok(nn->xent_fused(g_be, DDP_DTYPE_F32, losses, &sum, dl, logits, tg, dloss, eps, N, V,
                             Vp, NULL),
              "xent_fused");
    double *rl = ddp_test_track(malloc(N * sizeof *rl)),
           *rd = ddp_test_track(malloc((size_t)N * Vp * sizeof *rd));
    xent_ref(rl, rd, logits, tg, dloss, eps, N, V, Vp);
    double rsum = 0;
    for (int r = 0; r < N; ++r) rsum += rl[r];
    expect_close("xent losses", losses, rl, N, 1e-6, 1e-6);
    expect_close("xent dlogits", dl, rd, (size_t)N * Vp, 1e-5, 1e-7);
    ck_assert_msg(fabs(sum - rsum) <= 1e-6 * (1 + rsum), "loss_sum %.9g want %.9g", (double)sum,
                  rsum);
    /* Padding columns are exactly 0 (they held NaN). */
    for (int r = 0; r < N; ++r)
      for (int i = V; i < Vp; ++i) ck_assert_float_eq(dl[(size_t)r * Vp + i], 0.0f);
    /* Without dlogits, the same losses. */
    float *l2 = fnan(N), sum2 = 0.0f;
    expect_ok(nn->xent_fused(g_be, DDP_DTYPE_F32, l2, &sum2, NULL, logits, tg, dloss, eps, N, V, Vp,
                             NULL),
              "xent_fused loss only");
    expect_bits_equal("xent losses without dlogits", l2, losses, N);
  }
}
END_TEST

START_TEST(test_nn_xent_bwd_finite_differences) {
  for (int k = 0; k < 3; ++k) {
    xent_ctx_t c = {.N = SN, .V = SV, .Vp = SVP, .smoothing = k_smoothings[k]};
    const size_t n = (size_t)c.N * c.Vp;
    c.logits = funi(n, -2, 2);
    c.targets = xent_targets(c.N, c.V);
    c.losses = fbuf(c.N);
    /* L = dloss * sum(losses): R is dloss for every row. */
    const float dloss = 0.7f;
    float *R = fill_const(fbuf(c.N), c.N, dloss), *dl = fnan(n), sum = 0.0f;
    expect_ok(nn->xent_fused(g_be, DDP_DTYPE_F32, c.losses, &sum, dl, c.logits, c.targets, dloss,
                             c.smoothing, c.N, c.V, c.Vp, NULL),
              "xent_fused");
    char what[48];
    snprintf(what, sizeof what, "xent dlogits (smoothing %g)", (double)c.smoothing);
    fd_check(what, xent_forward, &c, c.losses, R, c.N, c.logits, dl, n, 0);
  }
}
END_TEST

START_TEST(test_nn_xent_ignore_index_rows) {
  const int N = SN, V = SV, Vp = SVP;
  float *logits = funi((size_t)N * Vp, -4, 4);
  int32_t *tg = xent_targets(N, V);
  tg[N - 1] = -1;
  float *losses = fnan(N), *dl = fnan((size_t)N * Vp), sum = 0.0f;
  expect_ok(
      nn->xent_fused(g_be, DDP_DTYPE_F32, losses, &sum, dl, logits, tg, 1.0f, 0.0f, N, V, Vp, NULL),
      "xent_fused");
  double kept = 0;
  for (int r = 0; r < N; ++r) {
    if (tg[r] >= 0) {
      ck_assert_float_gt(losses[r], 0.0f);
      kept += losses[r];
      continue;
    }
    ck_assert_float_eq(losses[r], 0.0f);
    for (int i = 0; i < Vp; ++i) ck_assert_float_eq(dl[(size_t)r * Vp + i], 0.0f);
  }
  ck_assert_msg(fabs(sum - kept) <= 1e-6 * kept, "loss_sum %g counts ignored rows", (double)sum);
  /* All rows ignored: loss 0, nothing added. */
  int32_t *none = ibuf(N);
  for (int r = 0; r < N; ++r) none[r] = -1;
  float sum0 = 2.5f;
  expect_ok(nn->xent_fused(g_be, DDP_DTYPE_F32, losses, &sum0, dl, logits, none, 1.0f, 0.0f, N, V,
                           Vp, NULL),
            "xent_fused all ignored");
  ck_assert_float_eq(sum0, 2.5f);
  for (size_t i = 0; i < (size_t)N * Vp; ++i) ck_assert_float_eq(dl[i], 0.0f);
}
END_TEST

START_TEST(test_nn_xent_loss_sum_accumulates) {
  const int N = SN, V = SV, Vp = SVP;
  float *logits = funi((size_t)N * Vp, -4, 4);
  int32_t *tg = xent_targets(N, V);
  float *losses = fbuf(N), sum = 1.5f;
  expect_ok(nn->xent_fused(g_be, DDP_DTYPE_F32, losses, &sum, NULL, logits, tg, 1.0f, 0.0f, N, V,
                           Vp, NULL),
            "xent 1");
  double once = 0;
  for (int r = 0; r < N; ++r) once += losses[r];
  expect_ok(nn->xent_fused(g_be, DDP_DTYPE_F32, losses, &sum, NULL, logits, tg, 1.0f, 0.0f, N, V,
                           Vp, NULL),
            "xent 2");
  ck_assert_msg(fabs(sum - (1.5 + 2 * once)) <= 1e-6 * (1.5 + 2 * once), "loss_sum %.9g want %.9g",
                (double)sum, 1.5 + 2 * once);
}
END_TEST

START_TEST(test_nn_xent_rejects_bad_target) {
  const int N = SN, V = SV, Vp = SVP;
  static const int32_t bad[] = {SV, -2};
  static const char *const bad_text[] = {"target 11 at row 3", "target -2 at row 3"};
  for (int k = 0; k < 2; ++k) {
    float *logits = funi((size_t)N * Vp, -4, 4), *keep = fcopy(logits, (size_t)N * Vp);
    int32_t *tg = xent_targets(N, V);
    tg[3] = bad[k];
    float *losses = fill_const(fbuf(N), N, -7.0f),
          *dl = fill_const(fbuf((size_t)N * Vp), (size_t)N * Vp, -7.0f);
    float *ls_keep = fcopy(losses, N), *dl_keep = fcopy(dl, (size_t)N * Vp), sum = 4.0f;
    ddp_test_log_start();
    const ddp_status_t st = nn->xent_fused(g_be, DDP_DTYPE_F32, losses, &sum, dl, logits, tg, 1.0f,
                                           0.0f, N, V, Vp, NULL);
    char *log = ddp_test_log_stop();
    ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
    ddp_assert_contains(log, bad_text[k]);
    free(log);
    ck_assert_float_eq(sum, 4.0f);
    expect_bits_equal("losses untouched", losses, ls_keep, N);
    expect_bits_equal("dlogits untouched", dl, dl_keep, (size_t)N * Vp);
    /* Also when dlogits aliases the logits. */
    ddp_test_log_start();
    ck_assert_int_eq(nn->xent_fused(g_be, DDP_DTYPE_F32, losses, &sum, logits, logits, tg, 1.0f,
                                    0.0f, N, V, Vp, NULL),
                     DDP_ERR_INVALID_ARG);
    free(ddp_test_log_stop());
    expect_bits_equal("aliased logits untouched", logits, keep, (size_t)N * Vp);
  }
}
END_TEST

START_TEST(test_nn_xent_dlogits_may_alias_logits) {
  static const int shapes[][3] = {{SN, SV, SVP}, {6, 257, 320}};
  for (int k = 0; k < 6; ++k) {
    const int N = shapes[k % 2][0], V = shapes[k % 2][1], Vp = shapes[k % 2][2];
    const float eps = k_smoothings[k / 2];
    const size_t n = (size_t)N * Vp;
    float *logits = funi(n, -4, 4), *inplace = fcopy(logits, n);
    int32_t *tg = xent_targets(N, V);
    float *l1 = fbuf(N), *l2 = fbuf(N), *dl = fnan(n), s1 = 0.0f, s2 = 0.0f;
    expect_ok(
        nn->xent_fused(g_be, DDP_DTYPE_F32, l1, &s1, dl, logits, tg, 0.5f, eps, N, V, Vp, NULL),
        "xent");
    expect_ok(nn->xent_fused(g_be, DDP_DTYPE_F32, l2, &s2, inplace, inplace, tg, 0.5f, eps, N, V,
                             Vp, NULL),
              "xent in place");
    expect_bits_equal("in-place dlogits", inplace, dl, n);
    expect_bits_equal("in-place losses", l2, l1, N);
  }
}
END_TEST

START_TEST(test_nn_xent_large_logits_stable) {
  /* Logits around 1e4 (and one row near -1e4): exp() of them overflows, so
   * only a max-subtracted computation is finite; the loss, an O(1) number,
   * must not carry the ~1e-3 rounding of a 1e4-sized log-sum-exp. */
  const int N = 4, V = 257, Vp = 320;
  const size_t n = (size_t)N * Vp;
  float *logits = funi(n, -5, 5);
  for (size_t i = 0; i < n; ++i) logits[i] += i < (size_t)Vp ? -1e4f : 1e4f;
  int32_t *tg = tokens_below(N, V);
  float *losses = fbuf(N), *dl = fnan(n), sum = 0.0f;
  expect_ok(
      nn->xent_fused(g_be, DDP_DTYPE_F32, losses, &sum, dl, logits, tg, 1.0f, 0.0f, N, V, Vp, NULL),
      "xent");
  double *rl = ddp_test_track(malloc(N * sizeof *rl)), *rd = ddp_test_track(malloc(n * sizeof *rd));
  xent_ref(rl, rd, logits, tg, 1.0f, 0.0f, N, V, Vp);
  expect_all_finite("losses", losses, N);
  expect_all_finite("dlogits", dl, n);
  ck_assert(isfinite(sum));
  expect_close("losses at 1e4", losses, rl, N, 1e-6, 1e-6);
  expect_close("dlogits at 1e4", dl, rd, n, 1e-5, 1e-7);
}
END_TEST

/* ---- argument checks ----------------------------------------------------------- */

/* Runs a call expected to be rejected; its log must name the problem. */
#define EXPECT_REJECT(call, needle)             \
  do {                                          \
    ddp_test_log_start();                       \
    const ddp_status_t st_ = (call);            \
    char *log_ = ddp_test_log_stop();           \
    ck_assert_int_eq(st_, DDP_ERR_INVALID_ARG); \
    ddp_assert_contains(log_, needle);          \
    free(log_);                                 \
  } while (0)

START_TEST(test_nn_rejects_bad_sizes_and_null_pointers) {
  float *x = fnan(4096), *y = fill_const(fbuf(4096), 4096, 3.0f), *keep = fcopy(y, 4096);
  int32_t *tok = tokens_below(64, 4);
  EXPECT_REJECT(nn->embed_fwd(g_be, DDP_DTYPE_F32, y, tok, x, x, 0, 2, 4, NULL), "B=0");
  EXPECT_REJECT(nn->embed_fwd(g_be, DDP_DTYPE_F32, y, NULL, x, x, 1, 2, 4, NULL), "NULL");
  tok[5] = -1;
  EXPECT_REJECT(nn->embed_fwd(g_be, DDP_DTYPE_F32, y, tok, x, x, 2, 4, 4, NULL),
                "token -1 at (b=1, t=1)");
  EXPECT_REJECT(nn->embed_bwd(g_be, DDP_DTYPE_F32, y, y, x, tok, 2, 4, 4, 1, NULL), "negative");
  tok[5] = 0;
  EXPECT_REJECT(nn->embed_bwd(g_be, DDP_DTYPE_F32, y, NULL, x, tok, 2, 4, 4, 1, NULL), "NULL");
  EXPECT_REJECT(nn->layernorm_fwd(g_be, DDP_DTYPE_F32, y, NULL, NULL, x, x, x, 3, -1, NULL),
                "C=-1");
  EXPECT_REJECT(nn->layernorm_fwd(g_be, DDP_DTYPE_F32, y, NULL, NULL, x, NULL, x, 3, 4, NULL),
                "NULL");
  EXPECT_REJECT(nn->layernorm_bwd(g_be, DDP_DTYPE_F32, y, y, y, x, x, x, NULL, x, 3, 4, 0, NULL),
                "NULL");
  EXPECT_REJECT(nn->layernorm_bwd(g_be, DDP_DTYPE_F32, y, y, y, x, x, x, x, x, 0, 4, 0, NULL),
                "N=0");
  /* The fused residual op rejects what layernorm_fwd rejects, and an out
   * that aliases its inputs (resid is y, out y + 2048). */
  EXPECT_REJECT(nn->residual_layernorm_fwd(g_be, DDP_DTYPE_F32, y, y + 2048, NULL, NULL, y, x, x, x,
                                           3, -1, NULL),
                "C=-1");
  EXPECT_REJECT(
      nn->residual_layernorm_fwd(g_be, DDP_DTYPE_F32, y, y + 2048, y, y, y, x, x, x, 0, 4, NULL),
      "N=0");
  EXPECT_REJECT(nn->residual_layernorm_fwd(g_be, DDP_DTYPE_F32, y, y + 2048, NULL, NULL, y, x, NULL,
                                           x, 3, 4, NULL),
                "NULL");
  EXPECT_REJECT(nn->residual_layernorm_fwd(g_be, DDP_DTYPE_F32, y, y + 2048, NULL, NULL, y, NULL, x,
                                           x, 3, 4, NULL),
                "NULL");
  EXPECT_REJECT(
      nn->residual_layernorm_fwd(g_be, DDP_DTYPE_F32, y, y, NULL, NULL, y, x, x, x, 3, 4, NULL),
      "out must not alias");
  EXPECT_REJECT(nn->residual_layernorm_fwd(g_be, DDP_DTYPE_I32, y, y + 2048, NULL, NULL, y, x, x, x,
                                           3, 4, NULL),
                "activation dtype int32");
  EXPECT_REJECT(nn->linear_fwd(g_be, DDP_DTYPE_F32, y, x, x, NULL, 4, 0, 4, NULL), "IC=0");
  EXPECT_REJECT(nn->linear_fwd(g_be, DDP_DTYPE_F32, y, x, NULL, NULL, 4, 4, 4, NULL), "NULL");
  EXPECT_REJECT(nn->linear_bwd(g_be, DDP_DTYPE_F32, y, NULL, y, x, x, x, 4, 4, 4, 0, 0, NULL),
                "NULL");
  EXPECT_REJECT(nn->linear_bwd(g_be, DDP_DTYPE_F32, y, y, y, x, x, x, 4, 4, -4, 0, 0, NULL),
                "OC=-4");
  EXPECT_REJECT(nn->gelu_fwd(g_be, DDP_DTYPE_F32, y, NULL, 8, NULL), "NULL");
  EXPECT_REJECT(nn->gelu_bwd(g_be, DDP_DTYPE_F32, y, x, NULL, 8, NULL), "NULL");
  EXPECT_REJECT(nn->add(g_be, DDP_DTYPE_F32, NULL, x, x, 8, NULL), "NULL");
  EXPECT_REJECT(nn->attention_fwd(g_be, DDP_DTYPE_F32, y, y, x, 1, 4, 12, 5, NULL),
                "C=12 is not a multiple of NH=5");
  EXPECT_REJECT(nn->attention_fwd(g_be, DDP_DTYPE_F32, y, y, x, 1, 0, 12, 3, NULL), "T=0");
  EXPECT_REJECT(nn->attention_fwd(g_be, DDP_DTYPE_F32, NULL, y, x, 1, 4, 12, 3, NULL), "NULL");
  EXPECT_REJECT(nn->attention_bwd(g_be, DDP_DTYPE_F32, y, y, x, x, NULL, 1, 4, 12, 3, NULL),
                "NULL");
  EXPECT_REJECT(nn->attention_bwd(g_be, DDP_DTYPE_F32, y, y, x, x, x, 1, 4, 12, 0, NULL), "NH=0");
  float sum = 0.0f;
  EXPECT_REJECT(
      nn->xent_fused(g_be, DDP_DTYPE_F32, y, &sum, y, x, tok, 1.0f, 0.0f, 4, 17, 16, NULL),
      "Vp >= V");
  EXPECT_REJECT(nn->xent_fused(g_be, DDP_DTYPE_F32, y, NULL, y, x, tok, 1.0f, 0.0f, 4, 4, 4, NULL),
                "NULL");
  EXPECT_REJECT(nn->xent_fused(g_be, DDP_DTYPE_F32, y, &sum, y, x, tok, 1.0f, 0.0f, 0, 4, 4, NULL),
                "N=0");
  /* Label smoothing outside [0, 1) (1 would put no weight on the target),
   * under fp32 and under a half type. */
  static const float bad_eps[] = {1.0f, -0.1f, 1.5f, NAN};
  for (int k = 0; k < 4; ++k) {
    EXPECT_REJECT(
        nn->xent_fused(g_be, DDP_DTYPE_F32, y, &sum, y, x, tok, 1.0f, bad_eps[k], 4, 4, 4, NULL),
        "label smoothing");
    EXPECT_REJECT(
        nn->xent_fused(g_be, DDP_DTYPE_BF16, y, &sum, y, x, tok, 1.0f, bad_eps[k], 4, 4, 4, NULL),
        "is outside [0, 1)");
  }
  /* Nothing was written by any rejected call. */
  expect_bits_equal("outputs of rejected calls", y, keep, 4096);
  ck_assert_float_eq(sum, 0.0f);
}
END_TEST

START_TEST(test_nn_fd_check_detects_wrong_gradient) {
  /* The checker's teeth: a 5% error in one element of a correct gradient,
   * and the gradient of a neighbouring element, are both caught. */
  lin_ctx_t c = {.N = SN, .IC = SC, .OC = 7};
  c.inp = funi((size_t)SN * SC, -1, 1);
  c.w = funi((size_t)7 * SC, -0.5f, 0.5f);
  c.bias = funi(7, -1, 1);
  c.out = fbuf((size_t)SN * 7);
  float *R = funi((size_t)SN * 7, -1, 1), *dw = fbuf((size_t)7 * SC);
  lin_forward(&c);
  expect_ok(
      nn->linear_bwd(g_be, DDP_DTYPE_F32, NULL, dw, NULL, R, c.inp, c.w, SN, SC, 7, 0, 0, NULL),
      "linear_bwd");
  fd_result_t r = fd_compare(lin_forward, &c, c.out, R, (size_t)SN * 7, c.w, dw, (size_t)7 * SC, 0);
  ck_assert_uint_eq(r.bad, 0);
  size_t big = 0;
  for (size_t i = 1; i < (size_t)7 * SC; ++i)
    if (fabsf(dw[i]) > fabsf(dw[big])) big = i;
  dw[big] *= 1.05f;
  r = fd_compare(lin_forward, &c, c.out, R, (size_t)SN * 7, c.w, dw, (size_t)7 * SC, 0);
  ck_assert_uint_eq(r.bad, 1);
  ck_assert_uint_eq(r.first, big);
  dw[big] /= 1.05f;
  const size_t other = big == 0 ? 1 : big - 1;
  const float saved = dw[other];
  dw[other] = dw[big];
  r = fd_compare(lin_forward, &c, c.out, R, (size_t)SN * 7, c.w, dw, (size_t)7 * SC, 0);
  dw[other] = saved;
  ck_assert_uint_ge(r.bad, 1);
}
END_TEST

static Suite *nn_suite(void) {
  Suite *s = suite_create("nn");
  TCase *tc = tcase_create("cpu");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_nn_embed_fwd_matches_reference);
  tcase_add_test(tc, test_nn_embed_bwd_finite_differences);
  tcase_add_test(tc, test_nn_embed_bwd_accumulate_semantics);
  tcase_add_test(tc, test_nn_layernorm_fwd_matches_double_reference);
  tcase_add_test(tc, test_nn_layernorm_bwd_finite_differences);
  tcase_add_test(tc, test_nn_layernorm_bwd_accumulate_semantics);
  tcase_add_test(tc, test_nn_layernorm_large_mean_stays_accurate);
  tcase_add_test(tc, test_nn_residual_layernorm_equals_add_then_layernorm);
  tcase_add_test(tc, test_nn_linear_fwd_matches_reference);
  tcase_add_test(tc, test_nn_linear_bwd_finite_differences);
  tcase_add_test(tc, test_nn_linear_bwd_accumulate_semantics);
  tcase_add_test(tc, test_nn_gelu_fwd_matches_tanh_formula);
  tcase_add_test(tc, test_nn_gelu_bwd_finite_differences);
  tcase_add_test(tc, test_nn_add_matches_and_allows_aliasing);
  tcase_add_test(tc, test_nn_attention_fwd_matches_reference);
  tcase_add_test(tc, test_nn_attention_bwd_finite_differences);
  tcase_add_test(tc, test_nn_attention_bwd_finite_differences_multiblock);
  tcase_add_test(tc, test_nn_attention_is_causal);
  tcase_add_test(tc, test_nn_attention_rows_sum_to_one);
  tcase_add_test(tc, test_nn_attention_eval_matches_training);
  tcase_add_test(tc, test_nn_attention_bwd_reads_only_causal_part);
  tcase_add_test(tc, test_nn_xent_matches_double_reference);
  tcase_add_test(tc, test_nn_xent_bwd_finite_differences);
  tcase_add_test(tc, test_nn_xent_ignore_index_rows);
  tcase_add_test(tc, test_nn_xent_loss_sum_accumulates);
  tcase_add_test(tc, test_nn_xent_rejects_bad_target);
  tcase_add_test(tc, test_nn_xent_dlogits_may_alias_logits);
  tcase_add_test(tc, test_nn_xent_large_logits_stable);
  tcase_add_test(tc, test_nn_rejects_bad_sizes_and_null_pointers);
  tcase_add_test(tc, test_nn_fd_check_detects_wrong_gradient);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(nn_suite());
}
