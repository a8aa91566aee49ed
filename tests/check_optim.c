/* Optimizers, schedule and gradient norm (src/optim/optim.c, src/backend/cpu/): AdamW, SGD and LAMB
 * against scalar double-precision references over several steps, values
 * worked out by hand, clipping and grad_scale order, the sum of squares, the
 * learning-rate schedule, rejection of bad input without side effects, and
 * run-to-run bit identity.
 *
 * Tolerance of the reference comparisons: 1e-6 relative, normwise: for each
 * quantity (p, m, v) after each step, |got_i - ref_i| <= 1e-6 * max_j |ref_j|.
 * Element-wise relative error would demand more than fp32 has from values
 * that pass through zero (a momentum buffer that cancels); the worst case
 * seen is 1.7e-7 (fp32 rounding over five steps), a margin of 6x. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ddptrain/backend.h"
#include "ddptrain/rng.h"
#include "check_util.h"
#include "optim/optim.h"

static ddp_backend_t *g_be;

static void setup(void) {
  g_be = ddp_test_cpu_backend();
}

static void teardown(void) {
  ddp_backend_destroy(g_be);
  g_be = NULL;
}

/* ---- fixtures ---------------------------------------------------------- */

/* Odd sizes around the implementation's 64-element blocks, an empty segment,
 * and decay / no-decay interleaved. */
static const size_t k_sizes[] = {1, 67, 0, 3, 200, 129, 5};
static const int k_decay[] = {0, 1, 1, 0, 1, 0, 1};
#define N_SEG ((int)(sizeof k_sizes / sizeof k_sizes[0]))

static size_t make_segments(ddp_param_t *segs) {
  size_t off = 0;
  for (int i = 0; i < N_SEG; ++i) {
    segs[i] = (ddp_param_t){.offset = off, .count = k_sizes[i], .decay = k_decay[i]};
    off += k_sizes[i];
  }
  return off;
}

/* Deterministic values in [lo, hi). */
static float uniform(uint64_t *s, float lo, float hi) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  double u = (double)(*s >> 40) / (double)(1ULL << 24);
  return (float)(lo + (hi - lo) * u);
}

static void fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (size_t i = 0; i < n; ++i) x[i] = uniform(&s, lo, hi);
}

static ddp_optim_config_t adamw_config(void) {
  return (ddp_optim_config_t){.kind = DDP_OPTIM_KIND_ADAMW,
                              .beta1 = 0.9f,
                              .beta2 = 0.95f,
                              .eps = 1e-8f,
                              .weight_decay = 0.1f};
}

static ddp_optim_config_t sgd_config(float momentum, int nesterov) {
  return (ddp_optim_config_t){.kind = DDP_OPTIM_KIND_SGD,
                              .weight_decay = 0.05f,
                              .momentum = momentum,
                              .nesterov = nesterov};
}

static ddp_optim_config_t lamb_config(void) {
  return (ddp_optim_config_t){.kind = DDP_OPTIM_KIND_LAMB,
                              .beta1 = 0.9f,
                              .beta2 = 0.999f,
                              .eps = 1e-6f,
                              .weight_decay = 0.01f};
}

static ddp_optim_step_args_t step_args(const ddp_optim_config_t *cfg, float *p, const float *g,
                                       float *state, const ddp_param_t *segs, int n_seg, size_t n,
                                       int64_t t, float lr) {
  return (ddp_optim_step_args_t){.cfg = cfg,
                                 .params = p,
                                 .grads = g,
                                 .state = state,
                                 .tensors = segs,
                                 .n_tensors = n_seg,
                                 .n = n,
                                 .t = t,
                                 .lr = lr,
                                 .grad_scale = 1.0f,
                                 .grad_sumsq = NULL};
}

/* got: n floats at stride 1; ref: n doubles. */
static void assert_close(const char *what, int64_t t, const float *got, const double *ref,
                         size_t n) {
  double scale = 0;
  for (size_t i = 0; i < n; ++i) scale = fmax(scale, fabs(ref[i]));
  for (size_t i = 0; i < n; ++i) {
    double rel = fabs(got[i] - ref[i]) / scale;
    ck_assert_msg(rel <= 1e-6, "%s[%zu] step %lld: got %.9g, reference %.9g (%.3g of max %.3g)",
                  what, i, (long long)t, got[i], ref[i], rel, scale);
  }
}

/* ---- double-precision references ---------------------------------------- */

typedef struct ref_state {
  double *p, *m, *v; /* m doubles as the SGD buffer */
} ref_state_t;

static void ref_adamw(ref_state_t *r, const float *gf, double gmul, const ddp_optim_config_t *cfg,
                      const ddp_param_t *segs, int n_seg, int64_t t, double lr) {
  double b1 = cfg->beta1, b2 = cfg->beta2, eps = cfg->eps, wd = cfg->weight_decay;
  double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
  for (int k = 0; k < n_seg; ++k) {
    for (size_t i = segs[k].offset; i < segs[k].offset + segs[k].count; ++i) {
      double g = gf[i] * gmul;
      if (segs[k].decay) r->p[i] -= lr * wd * r->p[i];
      r->m[i] = b1 * r->m[i] + (1.0 - b1) * g;
      r->v[i] = b2 * r->v[i] + (1.0 - b2) * g * g;
      r->p[i] -= lr * (r->m[i] / bc1) / (sqrt(r->v[i] / bc2) + eps);
    }
  }
}

static void ref_sgd(ref_state_t *r, const float *gf, double gmul, const ddp_optim_config_t *cfg,
                    const ddp_param_t *segs, int n_seg, int64_t t, double lr) {
  double mom = cfg->momentum, wd = cfg->weight_decay;
  for (int k = 0; k < n_seg; ++k) {
    for (size_t i = segs[k].offset; i < segs[k].offset + segs[k].count; ++i) {
      double g = gf[i] * gmul;
      if (segs[k].decay) g += wd * r->p[i];
      if (mom != 0.0) {
        r->m[i] = t == 1 ? g : mom * r->m[i] + g;
        g = cfg->nesterov ? g + mom * r->m[i] : r->m[i];
      }
      r->p[i] -= lr * g;
    }
  }
}

static void ref_lamb(ref_state_t *r, const float *gf, double gmul, const ddp_optim_config_t *cfg,
                     const ddp_param_t *segs, int n_seg, int64_t t, double lr) {
  double b1 = cfg->beta1, b2 = cfg->beta2, eps = cfg->eps;
  double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
  for (int k = 0; k < n_seg; ++k) {
    size_t lo = segs[k].offset, hi = lo + segs[k].count;
    double wd = segs[k].decay ? cfg->weight_decay : 0.0;
    double pn = 0, rn = 0;
    for (size_t i = lo; i < hi; ++i) {
      double g = gf[i] * gmul;
      r->m[i] = b1 * r->m[i] + (1.0 - b1) * g;
      r->v[i] = b2 * r->v[i] + (1.0 - b2) * g * g;
      double u = (r->m[i] / bc1) / (sqrt(r->v[i] / bc2) + eps) + wd * r->p[i];
      pn += r->p[i] * r->p[i];
      rn += u * u;
    }
    double trust = pn > 0 && rn > 0 ? sqrt(pn) / sqrt(rn) : 1.0;
    for (size_t i = lo; i < hi; ++i) {
      double u = (r->m[i] / bc1) / (sqrt(r->v[i] / bc2) + eps) + wd * r->p[i];
      r->p[i] -= lr * trust * u;
    }
  }
}

typedef void (*ref_fn)(ref_state_t *, const float *, double, const ddp_optim_config_t *,
                       const ddp_param_t *, int, int64_t, double);

/* Five steps with fresh gradients each step and a changing lr; grad_scale
 * 0.25 (exact in fp32) so its application is covered too. */
static void compare_with_reference(const ddp_optim_config_t *cfg, ref_fn ref) {
  ddp_param_t segs[N_SEG];
  size_t n = make_segments(segs);
  size_t per = ddp_optim_state_per_param(cfg);
  float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g);
  float *state = calloc(2 * n + 1, sizeof *state);
  ref_state_t r = {calloc(n, sizeof(double)), calloc(n, sizeof(double)), calloc(n, sizeof(double))};
  fill_uniform(p, n, 1, -1.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) r.p[i] = p[i];
  for (int64_t t = 1; t <= 5; ++t) {
    float lr = 0.01f * (float)(6 - t) / 5.0f;
    fill_uniform(g, n, 100 + (uint64_t)t, -2.0f, 2.0f);
    ddp_optim_step_args_t a = step_args(cfg, p, g, per ? state : NULL, segs, N_SEG, n, t, lr);
    a.grad_scale = 0.25f;
    ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
    ref(&r, g, 0.25, cfg, segs, N_SEG, t, lr);
    assert_close("p", t, p, r.p, n);
    if (per >= 1) assert_close(cfg->kind == DDP_OPTIM_KIND_SGD ? "buf" : "m", t, state, r.m, n);
    if (per >= 2) assert_close("v", t, state + n, r.v, n);
  }
  free(r.p);
  free(r.m);
  free(r.v);
  free(state);
  free(g);
  free(p);
}

/* ---- against the references --------------------------------------------- */

START_TEST(test_optim_adamw_matches_reference) {
  ddp_optim_config_t cfg = adamw_config();
  compare_with_reference(&cfg, ref_adamw);
}
END_TEST

START_TEST(test_optim_sgd_matches_reference) {
  const struct {
    float momentum;
    int nesterov;
  } cases[] = {{0.0f, 0}, {0.9f, 0}, {0.9f, 1}, {0.5f, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    ddp_optim_config_t cfg = sgd_config(cases[c].momentum, cases[c].nesterov);
    compare_with_reference(&cfg, ref_sgd);
  }
}
END_TEST

START_TEST(test_optim_lamb_matches_reference) {
  ddp_optim_config_t cfg = lamb_config();
  compare_with_reference(&cfg, ref_lamb);
}
END_TEST

/* ---- by hand ------------------------------------------------------------ */

START_TEST(test_optim_adamw_first_step_by_hand) {
  /* t = 1: mhat = g, vhat = g^2, so the step is lr * g / (|g| + eps) ~ lr * sign(g).
   * p0: no decay, g 0.5 -> 1 - 0.1 = 0.9; p1: decay 0.1 -> 1 * (1 - 0.01) - 0.1 = 0.89;
   * p2: no decay, g -2 -> 1 + 0.1 = 1.1. */
  ddp_optim_config_t cfg = adamw_config();
  cfg.beta2 = 0.999f;
  ddp_param_t segs[] = {{.offset = 0, .count = 1, .decay = 0},
                        {.offset = 1, .count = 1, .decay = 1},
                        {.offset = 2, .count = 1, .decay = 0}};
  float p[3] = {1.0f, 1.0f, 1.0f}, g[3] = {0.5f, 0.5f, -2.0f}, state[6] = {0};
  ddp_optim_step_args_t a = step_args(&cfg, p, g, state, segs, 3, 3, 1, 0.1f);
  ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
  ck_assert_double_eq_tol(p[0], 0.9, 1e-6);
  ck_assert_double_eq_tol(p[1], 0.89, 1e-6);
  ck_assert_double_eq_tol(p[2], 1.1, 1e-6);
  /* m = (1 - b1) g, v = (1 - b2) g^2 */
  ck_assert_double_eq_tol(state[0], (1.0 - (double)0.9f) * 0.5, 1e-9);
  ck_assert_double_eq_tol(state[3 + 2], (1.0 - (double)0.999f) * 4.0, 1e-9);
}
END_TEST

START_TEST(test_optim_sgd_nesterov_two_steps_by_hand) {
  /* lr 0.1, momentum 0.9, wd 0.1 on the second element only.
   * elem 0 (no decay), g = 1 then 0.5:
   *   t1: buf = 1, d = 1 + 0.9 * 1 = 1.9, p = 1 - 0.19 = 0.81
   *   t2: buf = 0.9 + 0.5 = 1.4, d = 0.5 + 1.26 = 1.76, p = 0.81 - 0.176 = 0.634
   * elem 1 (decay), same gradients:
   *   t1: g = 1 + 0.1 = 1.1, buf = 1.1, d = 1.1 + 0.99 = 2.09, p = 1 - 0.209 = 0.791
   *   t2: g = 0.5 + 0.0791 = 0.5791, buf = 0.99 + 0.5791 = 1.5691,
   *       d = 0.5791 + 1.41219 = 1.99129, p = 0.791 - 0.199129 = 0.591871 */
  ddp_optim_config_t cfg = sgd_config(0.9f, 1);
  cfg.weight_decay = 0.1f;
  ddp_param_t segs[] = {{.offset = 0, .count = 1, .decay = 0},
                        {.offset = 1, .count = 1, .decay = 1}};
  float p[2] = {1.0f, 1.0f}, g[2] = {1.0f, 1.0f}, buf[2] = {0};
  ddp_optim_step_args_t a = step_args(&cfg, p, g, buf, segs, 2, 2, 1, 0.1f);
  ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
  ck_assert_double_eq_tol(p[0], 0.81, 1e-6);
  ck_assert_double_eq_tol(p[1], 0.791, 1e-6);
  g[0] = g[1] = 0.5f;
  a.t = 2;
  ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
  ck_assert_double_eq_tol(buf[0], 1.4, 1e-6);
  ck_assert_double_eq_tol(p[0], 0.634, 1e-6);
  ck_assert_double_eq_tol(buf[1], 1.5691, 1e-6);
  ck_assert_double_eq_tol(p[1], 0.591871, 1e-6);
}
END_TEST

START_TEST(test_optim_sgd_first_step_ignores_stale_buffer) {
  /* t == 1 sets buf = g whatever the buffer holds (torch's "buffer is None"). */
  ddp_optim_config_t cfg = sgd_config(0.9f, 0);
  cfg.weight_decay = 0.0f;
  ddp_param_t seg = {.offset = 0, .count = 2, .decay = 0};
  float p[2] = {1.0f, 2.0f}, g[2] = {1.0f, -1.0f}, buf[2] = {NAN, 1e30f};
  ddp_optim_step_args_t a = step_args(&cfg, p, g, buf, &seg, 1, 2, 1, 0.5f);
  ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
  ck_assert_float_eq(buf[0], 1.0f);
  ck_assert_float_eq(buf[1], -1.0f);
  ck_assert_float_eq(p[0], 0.5f);
  ck_assert_float_eq(p[1], 2.5f);
}
END_TEST

START_TEST(test_optim_sgd_without_momentum_uses_no_state) {
  ddp_optim_config_t cfg = sgd_config(0.0f, 0);
  ck_assert_uint_eq(ddp_optim_state_per_param(&cfg), 0);
  ddp_param_t seg = {.offset = 0, .count = 3, .decay = 1};
  float p[3] = {1.0f, 2.0f, 3.0f}, g[3] = {1.0f, 1.0f, 1.0f}, untouched[3] = {7.0f, 7.0f, 7.0f};
  ddp_optim_step_args_t a = step_args(&cfg, p, g, untouched, &seg, 1, 3, 3, 0.1f);
  ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
  for (int i = 0; i < 3; ++i) {
    ck_assert_float_eq(untouched[i], 7.0f);
    double want = (i + 1) - 0.1 * (1.0 + 0.05 * (i + 1));
    ck_assert_double_eq_tol(p[i], want, 1e-6);
  }
  a.state = NULL; /* no state needed */
  ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
}
END_TEST

START_TEST(test_optim_lamb_trust_ratio_by_hand) {
  /* t = 1, eps tiny: r = g / |g| + wd p.
   * seg 0, no decay, p = (3, 4), g = (1, -1): r = (1, -1), ||p|| = 5, ||r|| = sqrt 2,
   *   p -= 0.01 * (5 / sqrt 2) * r.
   * seg 1, decay 0.1, p = (3, 4), g = (1, -1): r = (1.3, -0.6), ||r|| = sqrt 2.05,
   *   p -= 0.01 * (5 / sqrt 2.05) * r.
   * seg 2, p = (0, 0): ||p|| = 0, so trust 1: p = -0.01 * (1, -1). */
  ddp_optim_config_t cfg = lamb_config();
  cfg.eps = 1e-10f;
  cfg.weight_decay = 0.1f;
  ddp_param_t segs[] = {{.offset = 0, .count = 2, .decay = 0},
                        {.offset = 2, .count = 2, .decay = 1},
                        {.offset = 4, .count = 2, .decay = 0}};
  float p[6] = {3, 4, 3, 4, 0, 0}, g[6] = {1, -1, 1, -1, 1, -1}, state[12] = {0};
  ddp_optim_step_args_t a = step_args(&cfg, p, g, state, segs, 3, 6, 1, 0.01f);
  ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
  double t0 = 5.0 / sqrt(2.0), t1 = 5.0 / sqrt(2.05);
  ck_assert_double_eq_tol(p[0], 3.0 - 0.01 * t0, 1e-6);
  ck_assert_double_eq_tol(p[1], 4.0 + 0.01 * t0, 1e-6);
  ck_assert_double_eq_tol(p[2], 3.0 - 0.01 * t1 * 1.3, 1e-6);
  ck_assert_double_eq_tol(p[3], 4.0 + 0.01 * t1 * 0.6, 1e-6);
  ck_assert_double_eq_tol(p[4], -0.01, 1e-8);
  ck_assert_double_eq_tol(p[5], 0.01, 1e-8);
}
END_TEST

/* ---- clipping and grad_scale -------------------------------------------- */

/* 300 gradients scaled to a norm of exactly `norm` (up to fp32 rounding). */
static size_t clip_fixture(float *g, float norm) {
  const size_t n = 300;
  fill_uniform(g, n, 7, -1.0f, 1.0f);
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += (double)g[i] * g[i];
  for (size_t i = 0; i < n; ++i) g[i] = (float)(g[i] * norm / sqrt(ss));
  return n;
}

START_TEST(test_optim_clipping_scales_gradients_to_max_norm) {
  float g[300], gs[300], p[300], q[300], s1[600] = {0}, s2[600] = {0}, sumsq;
  size_t n = clip_fixture(g, 10.0f);
  ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(g_be, &sumsq, g, n, 1.0f, NULL), DDP_OK);
  ck_assert_double_eq_tol(sumsq, 100.0, 1e-3);
  double coef = 1.0 / (sqrt((double)sumsq) + 1e-6);
  ck_assert_double_eq_tol(coef, 0.1, 1e-6);
  for (size_t i = 0; i < n; ++i) gs[i] = g[i] * (float)coef;
  ddp_param_t seg = {.offset = 0, .count = n, .decay = 1};

  /* SGD is linear in g: the update is lr * 0.1 * g. */
  ddp_optim_config_t sgd = sgd_config(0.0f, 0);
  sgd.weight_decay = 0.0f;
  sgd.max_grad_norm = 1.0f;
  fill_uniform(p, n, 3, -1.0f, 1.0f);
  memcpy(q, p, sizeof p);
  ddp_optim_step_args_t a = step_args(&sgd, p, g, NULL, &seg, 1, n, 1, 1.0f);
  a.grad_sumsq = &sumsq;
  ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
  for (size_t i = 0; i < n; ++i) ck_assert_double_eq_tol(p[i], q[i] - 0.1 * g[i], 1e-6);

  /* AdamW over three steps: clipped == unclipped on pre-scaled gradients. */
  ddp_optim_config_t adam = adamw_config();
  adam.max_grad_norm = 1.0f;
  fill_uniform(p, n, 3, -1.0f, 1.0f);
  memcpy(q, p, sizeof p);
  for (int64_t t = 1; t <= 3; ++t) {
    ddp_optim_step_args_t c = step_args(&adam, p, g, s1, &seg, 1, n, t, 0.01f);
    c.grad_sumsq = &sumsq;
    ck_assert_int_eq(ddp_optim_step_cpu(g_be, &c, NULL), DDP_OK);
    ddp_optim_config_t unclipped = adam;
    unclipped.max_grad_norm = 0.0f;
    ddp_optim_step_args_t u = step_args(&unclipped, q, gs, s2, &seg, 1, n, t, 0.01f);
    ck_assert_int_eq(ddp_optim_step_cpu(g_be, &u, NULL), DDP_OK);
  }
  for (size_t i = 0; i < n; ++i) {
    ck_assert_float_eq_tol(p[i], q[i], 1e-6f * fmaxf(1.0f, fabsf(q[i])));
    ck_assert_float_eq_tol(s1[n + i], s2[n + i], 1e-6f * s2[n + i]);
  }
}
END_TEST

START_TEST(test_optim_clipping_off_or_below_max_leaves_gradients_alone) {
  float g[300], p[300], q[300], sumsq;
  size_t n = clip_fixture(g, 10.0f);
  ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(g_be, &sumsq, g, n, 1.0f, NULL), DDP_OK);
  ddp_param_t seg = {.offset = 0, .count = n, .decay = 1};
  fill_uniform(q, n, 3, -1.0f, 1.0f);
  /* Reference: no sumsq at all. */
  ddp_optim_config_t cfg = sgd_config(0.0f, 0);
  float ref[300];
  memcpy(ref, q, sizeof q);
  ddp_optim_step_args_t a = step_args(&cfg, ref, g, NULL, &seg, 1, n, 1, 0.1f);
  ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
  /* max_grad_norm 0, -1 (off) and 20 (above the norm of 10): same bits. */
  const float maxes[] = {0.0f, -1.0f, 20.0f};
  for (size_t k = 0; k < 3; ++k) {
    cfg.max_grad_norm = maxes[k];
    memcpy(p, q, sizeof q);
    a = step_args(&cfg, p, g, NULL, &seg, 1, n, 1, 0.1f);
    a.grad_sumsq = &sumsq;
    ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
    ck_assert_mem_eq(p, ref, sizeof p);
  }
}
END_TEST

START_TEST(test_optim_grad_scale_applies_before_the_norm) {
  /* Raw norm 10, max 1. grad_scale 0.05: scaled norm 0.5, no clipping, the
   * step uses 0.05 g. grad_scale 0.5: scaled norm 5, clip 1/5, the step
   * uses 0.5 * 0.2 g = 0.1 g. */
  float g[300], p[300], q[300], sumsq;
  size_t n = clip_fixture(g, 10.0f);
  ddp_param_t seg = {.offset = 0, .count = n, .decay = 0};
  ddp_optim_config_t cfg = sgd_config(0.0f, 0);
  cfg.max_grad_norm = 1.0f;
  const float scales[] = {0.05f, 0.5f};
  const double effective[] = {0.05, 0.1};
  fill_uniform(q, n, 3, -1.0f, 1.0f);
  for (int k = 0; k < 2; ++k) {
    ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(g_be, &sumsq, g, n, scales[k], NULL), DDP_OK);
    ck_assert_double_eq_tol(sumsq, 100.0 * scales[k] * scales[k], 1e-4);
    memcpy(p, q, sizeof q);
    ddp_optim_step_args_t a = step_args(&cfg, p, g, NULL, &seg, 1, n, 1, 1.0f);
    a.grad_scale = scales[k];
    a.grad_sumsq = &sumsq;
    ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
    for (size_t i = 0; i < n; ++i) ck_assert_double_eq_tol(p[i], q[i] - effective[k] * g[i], 1e-6);
  }
}
END_TEST

/* ---- sum of squares ----------------------------------------------------- */

START_TEST(test_optim_grad_sumsq_known_values) {
  float g4[4] = {1, 2, 3, -4}, out = 123.0f;
  ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(g_be, &out, g4, 4, 0.5f, NULL), DDP_OK);
  ck_assert_float_eq(out, 7.5f); /* 0.25 + 1 + 2.25 + 4, overwriting 123 */
  ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(g_be, &out, g4, 0, 1.0f, NULL), DDP_OK);
  ck_assert_float_eq(out, 0.0f);
  /* 1001 elements (blocks and a tail): sum of (2 * (i % 7 - 3))^2, exact. */
  float g[1001];
  double want = 0;
  for (int i = 0; i < 1001; ++i) {
    g[i] = (float)(i % 7 - 3);
    want += 4.0 * g[i] * g[i];
  }
  ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(g_be, &out, g, 1001, 2.0f, NULL), DDP_OK);
  ck_assert_float_eq(out, (float)want);
  /* Accumulation in double: 1e6 small terms that fp32 summation would lose. */
  const size_t big = 1u << 20;
  float *ones = malloc(big * sizeof *ones);
  for (size_t i = 0; i < big; ++i) ones[i] = 1.0f;
  ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(g_be, &out, ones, big, 1e-3f, NULL), DDP_OK);
  ck_assert_double_eq_tol(out, big * 1e-6, big * 1e-6 * 1e-6);
  free(ones);
}
END_TEST

/* ---- schedule ----------------------------------------------------------- */

START_TEST(test_optim_lr_schedule_warmup_then_cosine) {
  const float lr = 1.0f, min_lr = 0.1f;
  /* warmup 10, total 110: warmup values (step + 1) / 10 */
  ck_assert_float_eq_tol(ddp_lr_schedule(0, lr, min_lr, 10, 110), 0.1f, 1e-7f);
  ck_assert_float_eq_tol(ddp_lr_schedule(4, lr, min_lr, 10, 110), 0.5f, 1e-7f);
  ck_assert_float_eq_tol(ddp_lr_schedule(9, lr, min_lr, 10, 110), 1.0f, 1e-7f);
  /* peak, then the cosine: midpoint (lr + min_lr) / 2, end min_lr */
  ck_assert_float_eq_tol(ddp_lr_schedule(10, lr, min_lr, 10, 110), 1.0f, 1e-7f);
  ck_assert_float_eq_tol(ddp_lr_schedule(60, lr, min_lr, 10, 110), 0.55f, 1e-7f);
  ck_assert_float_eq_tol(ddp_lr_schedule(35, lr, min_lr, 10, 110),
                         (float)(0.1 + 0.45 * (1.0 + cos(3.14159265358979323846 * 0.25))), 1e-7f);
  float prev = 2.0f;
  for (int64_t s = 10; s < 110; ++s) {
    float x = ddp_lr_schedule(s, lr, min_lr, 10, 110);
    ck_assert_msg(x <= prev && x >= min_lr, "step %lld: %g after %g", (long long)s, x, prev);
    prev = x;
  }
  ck_assert_float_eq(ddp_lr_schedule(110, lr, min_lr, 10, 110), min_lr);
  ck_assert_float_eq(ddp_lr_schedule(5000, lr, min_lr, 10, 110), min_lr);
  /* warmup 0: the cosine starts at step 0 with lr */
  ck_assert_float_eq(ddp_lr_schedule(0, lr, min_lr, 0, 100), lr);
  ck_assert_float_eq_tol(ddp_lr_schedule(50, lr, min_lr, 0, 100), 0.55f, 1e-7f);
  ck_assert_float_eq(ddp_lr_schedule(100, lr, min_lr, 0, 100), min_lr);
  /* edges: negative step counts as 0; warmup beyond total ends at min_lr */
  ck_assert_float_eq_tol(ddp_lr_schedule(-3, lr, min_lr, 10, 110), 0.1f, 1e-7f);
  ck_assert_float_eq_tol(ddp_lr_schedule(19, lr, min_lr, 20, 10), 1.0f, 1e-7f);
  ck_assert_float_eq(ddp_lr_schedule(20, lr, min_lr, 20, 10), min_lr);
}
END_TEST

/* ---- names -------------------------------------------------------------- */

START_TEST(test_optim_kind_parse_and_name) {
  const ddp_optim_kind_t kinds[] = {DDP_OPTIM_KIND_ADAMW, DDP_OPTIM_KIND_SGD, DDP_OPTIM_KIND_LAMB};
  for (int i = 0; i < 3; ++i) {
    ddp_optim_kind_t k = (ddp_optim_kind_t)-1;
    ck_assert_int_eq(ddp_optim_kind_parse(ddp_optim_kind_name(kinds[i]), &k), DDP_OK);
    ck_assert_int_eq(k, kinds[i]);
  }
  ck_assert_str_eq(ddp_optim_kind_name(DDP_OPTIM_KIND_ADAMW), "adamw");
  ck_assert_str_eq(ddp_optim_kind_name((ddp_optim_kind_t)42), "invalid");
  ddp_optim_kind_t k;
  ck_assert_int_eq(ddp_optim_kind_parse("LAMB", &k), DDP_OK);
  ck_assert_int_eq(k, DDP_OPTIM_KIND_LAMB);
  ddp_test_log_start();
  k = DDP_OPTIM_KIND_SGD;
  ck_assert_int_eq(ddp_optim_kind_parse("adam", &k), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_optim_kind_parse("", &k), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_optim_kind_parse(NULL, &k), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_optim_kind_parse("sgd", NULL), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ck_assert_str_eq(log, ""); /* silent */
  ck_assert_int_eq(k, DDP_OPTIM_KIND_SGD);
  free(log);
}
END_TEST

START_TEST(test_optim_state_per_param) {
  ddp_optim_config_t a = adamw_config(), l = lamb_config();
  ddp_optim_config_t s0 = sgd_config(0.0f, 0), s1 = sgd_config(0.9f, 0);
  ck_assert_uint_eq(ddp_optim_state_per_param(&a), 2);
  ck_assert_uint_eq(ddp_optim_state_per_param(&l), 2);
  ck_assert_uint_eq(ddp_optim_state_per_param(&s0), 0);
  ck_assert_uint_eq(ddp_optim_state_per_param(&s1), 1);
  ck_assert_uint_eq(ddp_optim_state_per_param(NULL), 0);
}
END_TEST

/* ---- bad input ---------------------------------------------------------- */

typedef struct bad_fixture {
  ddp_optim_config_t cfg;
  ddp_param_t segs[3];
  float p[10], g[10], state[20];
  float p0[10], state0[20];
} bad_fixture_t;

static void bad_init(bad_fixture_t *f) {
  memset(f, 0, sizeof *f);
  f->cfg = adamw_config();
  f->segs[0] = (ddp_param_t){.offset = 0, .count = 3, .decay = 1};
  f->segs[1] = (ddp_param_t){.offset = 3, .count = 4, .decay = 0};
  f->segs[2] = (ddp_param_t){.offset = 7, .count = 3, .decay = 1};
  fill_uniform(f->p, 10, 1, -1, 1);
  fill_uniform(f->g, 10, 2, -1, 1);
  fill_uniform(f->state, 20, 3, 0, 1);
  memcpy(f->p0, f->p, sizeof f->p);
  memcpy(f->state0, f->state, sizeof f->state);
}

static ddp_optim_step_args_t bad_args(bad_fixture_t *f) {
  return step_args(&f->cfg, f->p, f->g, f->state, f->segs, 3, 10, 1, 0.01f);
}

/* Runs the step expecting `want`, a log line containing `needle`, and no
 * change to params or state. */
static void expect_rejected(bad_fixture_t *f, const ddp_optim_step_args_t *a, ddp_status_t want,
                            const char *needle, const char *label) {
  ddp_test_log_start();
  ddp_status_t st = ddp_optim_step_cpu(g_be, a, NULL);
  char *log = ddp_test_log_stop();
  ck_assert_msg(st == want, "%s: got %s", label, ddp_status_name(st));
  ddp_assert_contains(log, needle);
  ck_assert_msg(memcmp(f->p, f->p0, sizeof f->p) == 0, "%s: params modified", label);
  ck_assert_msg(memcmp(f->state, f->state0, sizeof f->state) == 0, "%s: state modified", label);
  free(log);
}

START_TEST(test_optim_rejects_bad_input_without_side_effects) {
  bad_fixture_t f;
  ddp_optim_step_args_t a;
  const ddp_status_t E = DDP_ERR_INVALID_ARG;
#define BAD(mutation, needle)                      \
  do {                                             \
    bad_init(&f);                                  \
    a = bad_args(&f);                              \
    mutation;                                      \
    expect_rejected(&f, &a, E, needle, #mutation); \
  } while (0)
  BAD(a.cfg = NULL, "NULL cfg");
  BAD(a.params = NULL, "NULL params");
  BAD(a.grads = NULL, "NULL grads");
  BAD(a.state = NULL, "NULL state");
  BAD(a.tensors = NULL, "NULL segments");
  BAD(a.n_tensors = 0, "n_segments = 0");
  BAD(a.n_tensors = -1, "n_segments = -1");
  BAD(f.segs[1].offset = 4, "segment 1");       /* gap */
  BAD(f.segs[1].offset = 2, "segment 1");       /* overlap */
  BAD(f.segs[2].count = 2, "cover [0, 9)");     /* short of n */
  BAD(f.segs[2].count = 4, "segment 2");        /* past n */
  BAD(f.segs[1].count = SIZE_MAX, "segment 1"); /* overflow */
  BAD((f.segs[0] = (ddp_param_t){.offset = 7, .count = 3, .decay = 1},
       f.segs[2] = (ddp_param_t){.offset = 0, .count = 3, .decay = 1}),
      "segment 0"); /* unsorted */
  BAD(a.t = 0, "t = 0");
  BAD(a.t = -5, "t = -5");
  BAD(a.lr = NAN, "lr nan");
  BAD(a.lr = INFINITY, "lr inf");
  BAD(a.lr = -0.1f, "lr -0.1");
  BAD(a.grad_scale = NAN, "grad_scale");
  BAD(f.cfg.eps = 0.0f, "eps 0");
  BAD(f.cfg.eps = -1e-8f, "eps");
  BAD(f.cfg.eps = NAN, "eps");
  BAD(f.cfg.beta1 = 1.0f, "betas (1, 0.95)");
  BAD(f.cfg.beta1 = -0.1f, "betas");
  BAD(f.cfg.beta2 = 1.5f, "betas");
  BAD(f.cfg.beta2 = NAN, "betas");
  BAD((f.cfg = lamb_config(), f.cfg.beta2 = 1.0f), "lamb betas");
  BAD(f.cfg.weight_decay = -0.1f, "weight_decay");
  BAD(f.cfg.max_grad_norm = NAN, "max_grad_norm");
  BAD(f.cfg.kind = (ddp_optim_kind_t)9, "unknown optimizer kind 9");
  BAD((f.cfg = sgd_config(0.0f, 1)), "nesterov needs momentum");
  BAD((f.cfg = sgd_config(-0.5f, 0)), "momentum -0.5");
  BAD(a.grads = f.p + 1, "overlap"); /* aliasing buffers */
#undef BAD
  bad_init(&f);
  a = bad_args(&f);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_optim_step_cpu(NULL, &a, NULL), E);
  ck_assert_int_eq(ddp_optim_step_cpu(g_be, NULL, NULL), E);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "NULL backend");
  ddp_assert_contains(log, "NULL arguments");
  free(log);
  /* A backend whose memory the host cannot touch is refused. */
  ddp_backend_ops_t fake_ops = {.name = "fake-cuda", .kind = DDP_DEVICE_KIND_CUDA};
  ddp_backend_t fake = {.ops = &fake_ops};
  ddp_test_log_start();
  ck_assert_int_eq(ddp_optim_step_cpu(&fake, &a, NULL), DDP_ERR_UNSUPPORTED);
  float out = 5.0f;
  ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(&fake, &out, f.g, 10, 1.0f, NULL), DDP_ERR_UNSUPPORTED);
  ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(g_be, NULL, f.g, 10, 1.0f, NULL), E);
  ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(g_be, &out, NULL, 10, 1.0f, NULL), E);
  ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(g_be, &out, f.g, 10, INFINITY, NULL), E);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "fake-cuda");
  ck_assert_float_eq(out, 5.0f);
  ck_assert_mem_eq(f.p, f.p0, sizeof f.p);
  free(log);
  /* The valid call still works after all that. */
  ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
}
END_TEST

/* ---- determinism -------------------------------------------------------- */

static void run_five_steps(const ddp_optim_config_t *cfg, float *p, float *state, size_t n,
                           const ddp_param_t *segs) {
  float *g = malloc(n * sizeof *g);
  float sumsq;
  fill_uniform(p, n, 11, -1.0f, 1.0f);
  memset(state, 0, 2 * n * sizeof *state);
  for (int64_t t = 1; t <= 5; ++t) {
    fill_uniform(g, n, 50 + (uint64_t)t, -3.0f, 3.0f);
    ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(g_be, &sumsq, g, n, 0.5f, NULL), DDP_OK);
    ddp_optim_step_args_t a =
        step_args(cfg, p, g, state, segs, N_SEG, n, t, ddp_lr_schedule(t - 1, 0.01f, 0.001f, 2, 5));
    a.grad_scale = 0.5f;
    a.grad_sumsq = &sumsq;
    ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
  }
  free(g);
}

/* The mixed-precision pass: with compute_params every optimizer writes the
 * updated weights rounded to the half type (uint16 bit patterns), and the fp32 weights and state
 * are bit-identical to a run without the copy; with skip_nonfinite an inf or
 * NaN gradient norm leaves weights, state and copy untouched. */
START_TEST(test_optim_compute_copy_and_skip) {
  ddp_param_t segs[N_SEG];
  const size_t n = make_segments(segs);
  ddp_optim_config_t cfgs[] = {adamw_config(), sgd_config(0.9f, 1), sgd_config(0.0f, 0),
                               lamb_config()};
  const ddp_dtype_t dts[] = {DDP_DTYPE_BF16, DDP_DTYPE_F16};
  float *p = malloc(n * sizeof *p), *p_ref = malloc(n * sizeof *p), *g = malloc(n * sizeof *g);
  float *st = malloc(2 * n * sizeof *st), *st_ref = malloc(2 * n * sizeof *st);
  uint16_t *cp = malloc(n * sizeof *cp), *want = malloc(n * sizeof *cp),
           *keep = malloc(n * sizeof *cp);
  for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; ++k)
    for (size_t d = 0; d < 2; ++d) {
      fill_uniform(p, n, 3, -1.0f, 1.0f);
      fill_uniform(g, n, 4, -2.0f, 2.0f);
      memcpy(p_ref, p, n * sizeof *p);
      memset(st, 0, 2 * n * sizeof *st);
      memset(st_ref, 0, 2 * n * sizeof *st);
      float sumsq;
      ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(g_be, &sumsq, g, n, 1.0f, NULL), DDP_OK);
      ddp_optim_step_args_t a = step_args(&cfgs[k], p_ref, g, st_ref, segs, N_SEG, n, 1, 0.01f);
      a.grad_sumsq = &sumsq;
      ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
      a.params = p;
      a.state = st;
      a.compute_params = cp;
      a.compute_dtype = dts[d];
      a.skip_nonfinite = 1;
      ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
      ck_assert_mem_eq(p, p_ref, n * sizeof *p);
      ck_assert_mem_eq(st, st_ref, 2 * n * sizeof *st);
      ck_assert_int_eq(ddp_convert_host(want, dts[d], p, DDP_DTYPE_F32, n), DDP_OK);
      ck_assert_mem_eq(cp, want, n * sizeof *cp);
      /* An overflowed step: nothing moves. */
      memcpy(keep, cp, n * sizeof *cp);
      const float bad[] = {INFINITY, NAN};
      for (int b = 0; b < 2; ++b) {
        a.grad_sumsq = &bad[b];
        a.t = 2;
        ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
        ck_assert_mem_eq(p, p_ref, n * sizeof *p);
        ck_assert_mem_eq(st, st_ref, 2 * n * sizeof *st);
        ck_assert_mem_eq(cp, keep, n * sizeof *cp);
      }
    }
  /* skip_nonfinite needs the norm; a copy may not overlap the weights. */
  ddp_optim_step_args_t a = step_args(&cfgs[0], p, g, st, segs, N_SEG, n, 1, 0.01f);
  a.skip_nonfinite = 1;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_ERR_INVALID_ARG);
  a.skip_nonfinite = 0;
  a.compute_params = p + 1;
  a.compute_dtype = DDP_DTYPE_BF16;
  ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_ERR_INVALID_ARG);
  a.compute_params = cp;
  a.compute_dtype = DDP_DTYPE_I32;
  ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_ERR_INVALID_ARG);
  free(ddp_test_log_stop());
  free(p), free(p_ref), free(g), free(st), free(st_ref), free(cp), free(want), free(keep);
}
END_TEST

START_TEST(test_optim_two_runs_are_bit_identical) {
  ddp_param_t segs[N_SEG];
  size_t n = make_segments(segs);
  ddp_optim_config_t cfgs[] = {adamw_config(), sgd_config(0.9f, 1), lamb_config()};
  for (size_t k = 0; k < 3; ++k) {
    cfgs[k].max_grad_norm = 1.0f;
    float *p1 = malloc(n * sizeof(float)), *p2 = malloc(n * sizeof(float));
    float *s1 = malloc(2 * n * sizeof(float)), *s2 = malloc(2 * n * sizeof(float));
    run_five_steps(&cfgs[k], p1, s1, n, segs);
    run_five_steps(&cfgs[k], p2, s2, n, segs);
    ck_assert_mem_eq(p1, p2, n * sizeof(float));
    ck_assert_mem_eq(s1, s2, 2 * n * sizeof(float));
    free(p1);
    free(p2);
    free(s1);
    free(s2);
  }
}
END_TEST

/* The backend-neutral plan + dispatchers: on the CPU backend the same bits
 * as the _cpu functions, for every kind, five steps with clipping. */
START_TEST(test_optim_plan_dispatch_matches_cpu_functions) {
  ddp_param_t segs[N_SEG];
  const size_t n = make_segments(segs);
  ddp_optim_config_t cfgs[] = {adamw_config(), sgd_config(0.9f, 1), sgd_config(0.0f, 0),
                               lamb_config()};
  float *p1 = malloc(n * sizeof(float)), *p2 = malloc(n * sizeof(float));
  float *s1 = malloc(2 * n * sizeof(float)), *s2 = malloc(2 * n * sizeof(float));
  float *g = malloc(n * sizeof(float));
  for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; ++k) {
    cfgs[k].max_grad_norm = 1.0f;
    run_five_steps(&cfgs[k], p1, s1, n, segs);
    ddp_optim_plan_t *plan = NULL;
    ck_assert_int_eq(ddp_optim_plan_create(g_be, &cfgs[k], segs, N_SEG, n, &plan), DDP_OK);
    fill_uniform(p2, n, 11, -1.0f, 1.0f);
    memset(s2, 0, 2 * n * sizeof(float));
    for (int64_t t = 1; t <= 5; ++t) {
      float sumsq;
      fill_uniform(g, n, 50 + (uint64_t)t, -3.0f, 3.0f);
      ck_assert_int_eq(ddp_optim_grad_sumsq(g_be, &sumsq, g, n, 0.5f, NULL), DDP_OK);
      ddp_optim_step_args_t a = step_args(&cfgs[k], p2, g, s2, segs, N_SEG, n, t,
                                          ddp_lr_schedule(t - 1, 0.01f, 0.001f, 2, 5));
      a.grad_scale = 0.5f;
      a.grad_sumsq = &sumsq;
      ck_assert_int_eq(ddp_optim_step(g_be, plan, &a, NULL), DDP_OK);
    }
    ck_assert_mem_eq(p1, p2, n * sizeof(float));
    ck_assert_mem_eq(s1, s2, 2 * n * sizeof(float));
    ddp_optim_plan_destroy(plan);
  }
  free(p1), free(p2), free(s1), free(s2), free(g);
}
END_TEST

/* Plans reject what the step rejects (bad config, segments that do not
 * cover [0, n)), and a step refuses a plan of another layout or backend. */
START_TEST(test_optim_plan_rejects_bad_input) {
  ddp_param_t segs[N_SEG];
  const size_t n = make_segments(segs);
  ddp_optim_config_t cfg = adamw_config();
  ddp_optim_plan_t *plan = (ddp_optim_plan_t *)1;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_optim_plan_create(g_be, &cfg, segs, N_SEG, n + 1, &plan),
                   DDP_ERR_INVALID_ARG);
  ck_assert_ptr_null(plan);
  ck_assert_int_eq(ddp_optim_plan_create(g_be, &cfg, segs, 0, n, &plan), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_optim_plan_create(NULL, &cfg, segs, N_SEG, n, &plan), DDP_ERR_INVALID_ARG);
  ddp_optim_config_t bad = cfg;
  bad.beta1 = 1.0f;
  ck_assert_int_eq(ddp_optim_plan_create(g_be, &bad, segs, N_SEG, n, &plan), DDP_ERR_INVALID_ARG);
  /* a plan for the first segments only, used for the whole layout */
  const size_t n_first = segs[0].count + segs[1].count;
  ck_assert_int_eq(ddp_optim_plan_create(g_be, &cfg, segs, 2, n_first, &plan), DDP_OK);
  float *p = calloc(n, sizeof *p), *gr = calloc(n, sizeof *gr), *st = calloc(2 * n, sizeof *st);
  ddp_optim_step_args_t a = step_args(&cfg, p, gr, st, segs, N_SEG, n, 1, 0.01f);
  ck_assert_int_eq(ddp_optim_step(g_be, plan, &a, NULL), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_optim_step(g_be, NULL, &a, NULL), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ck_assert_ptr_nonnull(strstr(log, "segments cover"));
  ck_assert_ptr_nonnull(strstr(log, "the plan was made for"));
  free(log);
  for (size_t i = 0; i < n; ++i) ck_assert(p[i] == 0.0f); /* nothing written */
  ddp_optim_plan_destroy(plan);
  free(p), free(gr), free(st);
}
END_TEST

/* skip_nonfinite steps are counted by the plan (what a trainer reads at its
 * log interval instead of after every step); clean steps are not. */
START_TEST(test_optim_plan_counts_skipped_steps) {
  ddp_param_t segs[N_SEG];
  const size_t n = make_segments(segs);
  ddp_optim_config_t cfg = adamw_config();
  ddp_optim_plan_t *plan = NULL;
  ck_assert_int_eq(ddp_optim_plan_create(g_be, &cfg, segs, N_SEG, n, &plan), DDP_OK);
  float *p = calloc(n, sizeof *p), *gr = calloc(n, sizeof *gr), *st = calloc(2 * n, sizeof *st);
  float sumsq = 1.0f;
  ddp_optim_step_args_t a = step_args(&cfg, p, gr, st, segs, N_SEG, n, 1, 0.01f);
  a.grad_sumsq = &sumsq;
  a.skip_nonfinite = 1;
  int64_t count = -1;
  ck_assert_int_eq(ddp_optim_step(g_be, plan, &a, NULL), DDP_OK);
  ck_assert_int_eq(ddp_optim_plan_skipped_steps(plan, &count), DDP_OK);
  ck_assert_int_eq(count, 0);
  sumsq = INFINITY;
  ck_assert_int_eq(ddp_optim_step(g_be, plan, &a, NULL), DDP_OK);
  sumsq = NAN;
  ck_assert_int_eq(ddp_optim_step(g_be, plan, &a, NULL), DDP_OK);
  ck_assert_int_eq(ddp_optim_plan_skipped_steps(plan, &count), DDP_OK);
  ck_assert_int_eq(count, 2);
  ddp_optim_plan_destroy(plan);
  free(p), free(gr), free(st);
}
END_TEST

/* --zero 1's fp32 shard: the epilogue in place (dst == src) scales each
 * gradient and takes the sum of squares exactly as ddp_optim_grad_sumsq_cpu
 * does (same lanes: the same bits), and out of place gives the same. */
START_TEST(test_optim_grad_epilogue_fp32_in_place) {
  const size_t sizes[] = {1, 63, 64, 65, 1000, 4099};
  const float scales[] = {1.0f, 1.0f / 1024.0f, 0.3f};
  enum { MAXN = 4099 };
  static float g[MAXN], orig[MAXN], out[MAXN];
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k)
    for (int c = 0; c < 3; ++c) {
      const size_t n = sizes[k];
      ddp_rng_t rng;
      ddp_rng_init(&rng, 500 + k, 3);
      ddp_rng_fill_normal(&rng, 0, 0.0f, 1024.0f, orig, n);
      float sumsq = -1.0f;
      ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(g_be, &sumsq, orig, n, scales[c], NULL), DDP_OK);
      memcpy(g, orig, n * sizeof(float));
      if (n < MAXN) g[n] = 12345.0f;
      double partial = NAN, partial2 = NAN;
      ck_assert_int_eq(
          ddp_optim_grad_epilogue(g_be, g, g, DDP_DTYPE_F32, n, scales[c], &partial, NULL), DDP_OK);
      ck_assert_int_eq(
          ddp_optim_grad_epilogue(g_be, out, orig, DDP_DTYPE_F32, n, scales[c], &partial2, NULL),
          DDP_OK);
      for (size_t i = 0; i < n; ++i) {
        const float want = scales[c] * orig[i];
        ck_assert_msg(memcmp(&g[i], &want, sizeof want) == 0, "n=%zu: element %zu", n, i);
      }
      ck_assert(memcmp(g, out, n * sizeof(float)) == 0);
      ck_assert(memcmp(&partial, &partial2, sizeof partial) == 0);
      ck_assert_msg(memcmp(&(float){(float)partial}, &sumsq, sizeof sumsq) == 0,
                    "n=%zu: partial %.17g vs grad_sumsq %.9g", n, partial, (double)sumsq);
      if (n < MAXN) ck_assert_float_eq(g[n], 12345.0f); /* nothing past n */
    }
}
END_TEST

/* ---- the half all-reduce's fused epilogue -------------------------------- */

/* n random N(0, 1) gradients as a loss-scaled half reduction would hold
 * them (times 2^10), rounded into dt: the uint16 bits, and their fp32 image. */
static void half_grads(ddp_dtype_t dt, size_t n, uint64_t seed, uint16_t *bits, float *wide) {
  ddp_rng_t rng;
  ddp_rng_init(&rng, seed, 3);
  ddp_rng_fill_normal(&rng, 0, 0.0f, 1024.0f, wide, n);
  ck_assert_int_eq(ddp_convert_host(bits, dt, wide, DDP_DTYPE_F32, n), DDP_OK);
  ck_assert_int_eq(ddp_convert_host(wide, DDP_DTYPE_F32, bits, dt, n), DDP_OK);
}

/* The fused op against the passes it replaces: widen (convert), then
 * ddp_optim_grad_sumsq_cpu with the scale. dst must be the scaled widened
 * values bit for bit (every element written: it starts as NaN), the partial
 * rounded to fp32 must be that function's sum bit for bit (same lanes), and
 * within double rounding of a plain double sum; a repeat gives the same bits.
 * Sizes around the 64-element blocks; a power-of-two scale (the loss
 * scaler's) and an inexact one. */
START_TEST(test_optim_grad_epilogue_equals_convert_scale_sumsq) {
  const ddp_dtype_t dts[] = {DDP_DTYPE_BF16, DDP_DTYPE_F16};
  const size_t sizes[] = {1, 7, 63, 64, 65, 128, 1000, 4099};
  const float scales[] = {1.0f / 1024.0f, 1.0f, 0.3f};
  enum { MAXN = 4099 };
  static uint16_t bits[MAXN];
  static float wide[MAXN], dst[MAXN], want[MAXN], dst2[MAXN];
  for (int d = 0; d < 2; ++d)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k)
      for (int c = 0; c < 3; ++c) {
        const size_t n = sizes[k];
        const float scale = scales[c];
        half_grads(dts[d], n, 100 + k, bits, wide);
        for (size_t i = 0; i < n; ++i) want[i] = scale * wide[i];
        float sumsq = -1.0f;
        ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(g_be, &sumsq, wide, n, scale, NULL), DDP_OK);
        memset(dst, 0xFF, sizeof dst);
        double partial = NAN, partial2 = NAN;
        ck_assert_int_eq(
            ddp_optim_grad_epilogue_cpu(g_be, dst, bits, dts[d], n, scale, &partial, NULL), DDP_OK);
        ck_assert_msg(memcmp(dst, want, n * sizeof(float)) == 0, "%s n=%zu scale %g: dst",
                      ddp_dtype_name(dts[d]), n, (double)scale);
        ck_assert_msg(memcmp(&(float){(float)partial}, &sumsq, sizeof sumsq) == 0,
                      "%s n=%zu: partial %.17g vs grad_sumsq %.9g", ddp_dtype_name(dts[d]), n,
                      partial, (double)sumsq);
        double ref = 0.0;
        for (size_t i = 0; i < n; ++i) ref += (double)want[i] * (double)want[i];
        ck_assert_msg(fabs(partial - ref) <= 1e-13 * ref, "n=%zu: %.17g vs %.17g", n, partial, ref);
        /* the same call on the same call again: the same bits */
        memset(dst2, 0, sizeof dst2);
        ck_assert_int_eq(
            ddp_optim_grad_epilogue_cpu(g_be, dst2, bits, dts[d], n, scale, &partial2, NULL),
            DDP_OK);
        ck_assert(memcmp(dst, dst2, n * sizeof(float)) == 0);
        ck_assert(memcmp(&partial, &partial2, sizeof partial) == 0);
        /* the unused tail of dst is untouched */
        if (n < MAXN) ck_assert(isnan(dst[n]));
      }
}
END_TEST

/* One inf or NaN anywhere (first element, inside a block, in the tail)
 * makes the bucket's partial, and so the in-order total, non-finite; the
 * largest finite half values do not. */
START_TEST(test_optim_grad_epilogue_nonfinite_reaches_the_norm) {
  enum { N = 200 };
  static uint16_t bits[N];
  static float wide[N], dst[N];
  const ddp_dtype_t dts[] = {DDP_DTYPE_BF16, DDP_DTYPE_F16};
  const float bad[] = {INFINITY, -INFINITY, NAN};
  const size_t where[] = {0, 70, N - 1};
  for (int d = 0; d < 2; ++d)
    for (int b = 0; b < 3; ++b)
      for (int w = 0; w < 3; ++w) {
        half_grads(dts[d], N, 7, bits, wide);
        wide[where[w]] = bad[b];
        ck_assert_int_eq(ddp_convert_host(bits, dts[d], wide, DDP_DTYPE_F32, N), DDP_OK);
        double partials[3] = {1.0, 0.0, 2.0};
        ck_assert_int_eq(ddp_optim_grad_epilogue_cpu(g_be, dst, bits, dts[d], N, 1.0f / 65536.0f,
                                                     &partials[1], NULL),
                         DDP_OK);
        ck_assert_msg(!isfinite(partials[1]), "%s %g at %zu: partial %g", ddp_dtype_name(dts[d]),
                      (double)bad[b], where[w], partials[1]);
        float total = 0.0f;
        ck_assert_int_eq(ddp_optim_sum_partials_cpu(g_be, &total, partials, 3, NULL), DDP_OK);
        ck_assert(!isfinite(total));
        ck_assert(!isfinite(dst[where[w]]));
      }
  /* the largest finite values: fp16 65504, bf16 3.39e38 (whose square
   * overflows fp32 but not the double partial; the fp32 total then is inf,
   * as ddp_optim_grad_sumsq_cpu's would be) */
  for (int i = 0; i < N; ++i) wide[i] = 65504.0f;
  ck_assert_int_eq(ddp_convert_host(bits, DDP_DTYPE_F16, wide, DDP_DTYPE_F32, N), DDP_OK);
  double partial = 0.0;
  ck_assert_int_eq(
      ddp_optim_grad_epilogue_cpu(g_be, dst, bits, DDP_DTYPE_F16, N, 1.0f, &partial, NULL), DDP_OK);
  ck_assert(isfinite(partial));
  ck_assert(partial == (double)N * 65504.0 * 65504.0);
}
END_TEST

/* The buckets' partials are added in bucket order, one after the other, in
 * double: with 1e16 (whose double ulp is 2) the order decides the result
 * (in order 1; reversed or pairwise 0). */
START_TEST(test_optim_sum_partials_adds_in_bucket_order) {
  const double p[4] = {1e16, 1.0, -1e16, 1.0};
  float total = -1.0f;
  ck_assert_int_eq(ddp_optim_sum_partials_cpu(g_be, &total, p, 4, NULL), DDP_OK);
  ck_assert_float_eq(total, 1.0f);
  const double q[4] = {1.0, -1e16, 1.0, 1e16}; /* the reverse */
  ck_assert_int_eq(ddp_optim_sum_partials_cpu(g_be, &total, q, 4, NULL), DDP_OK);
  ck_assert_float_eq(total, 0.0f);
  const double one[1] = {2.5};
  ck_assert_int_eq(ddp_optim_sum_partials(g_be, &total, one, 1, NULL), DDP_OK);
  ck_assert_float_eq(total, 2.5f);
  /* a double total beyond fp32's range is an overflow, as for grad_sumsq */
  const double big[2] = {3e38, 3e38};
  ck_assert_int_eq(ddp_optim_sum_partials(g_be, &total, big, 2, NULL), DDP_OK);
  ck_assert(isinf(total));
}
END_TEST

/* Bad arguments: a clear message, DDP_ERR_INVALID_ARG, nothing written; a
 * backend whose memory the host cannot read is refused. The backend-neutral
 * entry points on the CPU backend behave the same. */
START_TEST(test_optim_grad_epilogue_rejects_bad_input) {
  enum { N = 16 };
  uint16_t bits[2 * N] = {0};
  float dst[N];
  for (int i = 0; i < N; ++i) dst[i] = 7.0f;
  double partial = 42.0;
  float total = 42.0f;
  const ddp_status_t E = DDP_ERR_INVALID_ARG;
  ddp_backend_ops_t fake_ops = {.name = "fake-cuda", .kind = DDP_DEVICE_KIND_CUDA};
  ddp_backend_t fake = {.ops = &fake_ops};
  for (int neutral = 0; neutral < 2; ++neutral) {
    ddp_status_t (*epi)(ddp_backend_t *, float *, const void *, ddp_dtype_t, size_t, float,
                        double *, ddp_stream_t) =
        neutral ? ddp_optim_grad_epilogue : ddp_optim_grad_epilogue_cpu;
    ddp_status_t (*sum)(ddp_backend_t *, float *, const double *, int, ddp_stream_t) =
        neutral ? ddp_optim_sum_partials : ddp_optim_sum_partials_cpu;
    ddp_test_log_start();
    ck_assert_int_eq(epi(g_be, NULL, bits, DDP_DTYPE_BF16, N, 1.0f, &partial, NULL), E);
    ck_assert_int_eq(epi(g_be, dst, NULL, DDP_DTYPE_BF16, N, 1.0f, &partial, NULL), E);
    ck_assert_int_eq(epi(g_be, dst, bits, DDP_DTYPE_BF16, N, 1.0f, NULL, NULL), E);
    /* fp32 runs in place only exactly: dst == src */
    ck_assert_int_eq(epi(g_be, dst + 1, dst, DDP_DTYPE_F32, N - 1, 1.0f, &partial, NULL), E);
    ck_assert_int_eq(epi(g_be, dst, bits, DDP_DTYPE_I32, N, 1.0f, &partial, NULL), E);
    ck_assert_int_eq(epi(g_be, dst, bits, DDP_DTYPE_F16, N, NAN, &partial, NULL), E);
    ck_assert_int_eq(epi(g_be, dst, bits, DDP_DTYPE_F16, N, INFINITY, &partial, NULL), E);
    /* in place: the halves inside the floats they widen into */
    ck_assert_int_eq(
        epi(g_be, (float *)(void *)bits, bits + 4, DDP_DTYPE_F16, N / 2, 1.0f, &partial, NULL), E);
    ck_assert_int_eq(sum(g_be, NULL, &partial, 1, NULL), E);
    ck_assert_int_eq(sum(g_be, &total, NULL, 1, NULL), E);
    ck_assert_int_eq(sum(g_be, &total, &partial, 0, NULL), E);
    ck_assert_int_eq(sum(g_be, &total, &partial, -3, NULL), E);
    char *log = ddp_test_log_stop();
    ddp_assert_contains(log, "optim_grad_epilogue: NULL dst");
    ddp_assert_contains(log, "optim_grad_epilogue: NULL src");
    ddp_assert_contains(log, "optim_grad_epilogue: NULL partial");
    ddp_assert_contains(log,
                        "the reduced gradients are int32; the epilogue reads bf16, fp16 or fp32");
    ddp_assert_contains(log, "only fp32 runs in place, with dst == src");
    ddp_assert_contains(log, "optim_grad_epilogue: scale nan");
    ddp_assert_contains(log, "optim_grad_epilogue: scale inf");
    ddp_assert_contains(log, "dst and src overlap");
    ddp_assert_contains(log, "optim_sum_partials: NULL sumsq");
    ddp_assert_contains(log, "optim_sum_partials: NULL partials");
    ddp_assert_contains(log, "optim_sum_partials: n = 0 (need >= 1)");
    ddp_assert_contains(log, "optim_sum_partials: n = -3");
    free(log);
    for (int i = 0; i < N; ++i) ck_assert_float_eq(dst[i], 7.0f);
    ck_assert(partial == 42.0);
    ck_assert_float_eq(total, 42.0f);
  }
  ddp_test_log_start();
  ck_assert_int_eq(
      ddp_optim_grad_epilogue_cpu(&fake, dst, bits, DDP_DTYPE_BF16, N, 1.0f, &partial, NULL),
      DDP_ERR_UNSUPPORTED);
  ck_assert_int_eq(ddp_optim_sum_partials_cpu(&fake, &total, &partial, 1, NULL),
                   DDP_ERR_UNSUPPORTED);
  ck_assert_int_eq(
      ddp_optim_grad_epilogue_cpu(NULL, dst, bits, DDP_DTYPE_BF16, N, 1.0f, &partial, NULL), E);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "optim_grad_epilogue: the CPU implementation needs host memory");
  ddp_assert_contains(log, "optim_sum_partials: the CPU implementation needs host memory");
  ddp_assert_contains(log, "optim_grad_epilogue: NULL backend");
  free(log);
}
END_TEST

/* ---- LAMB over a shard (--zero 1) ------------------------------------------
 * A simulation of --zero 1 in one process: the test table cut into pieces
 * (at `cuts`, flat element indices inside tensors), the pieces dealt to
 * `world` ranks in contiguous runs, each rank with its own plan, state and
 * groups; every step runs the three parts on every rank, with the exchange
 * an array all ranks write their rows into. */
#define MAX_PIECES 32
#define MAX_WORLD 4

typedef struct lamb_shards {
  int world, stride;
  int n_pieces;                  /* over all ranks, in flat order */
  ddp_param_t piece[MAX_PIECES]; /* flat offsets */
  int tensor[MAX_PIECES];        /* its tensor */
  int rank_first[MAX_WORLD + 1]; /* rank r holds pieces [rank_first[r], rank_first[r+1]) */
  ddp_param_t local[MAX_WORLD][MAX_PIECES]; /* each rank's table (shard offsets) */
  size_t base[MAX_WORLD], n_local[MAX_WORLD];
  int32_t begin[MAX_WORLD][MAX_PIECES + 1], index[MAX_WORLD][MAX_PIECES * MAX_PIECES];
} lamb_shards_t;

static void lamb_shards_make(lamb_shards_t *sh, const ddp_param_t *segs, int n_seg, int world,
                             const size_t *cuts, int n_cuts) {
  memset(sh, 0, sizeof *sh);
  sh->world = world;
  for (int t = 0; t < n_seg; ++t) {
    size_t at = segs[t].offset, end = segs[t].offset + segs[t].count;
    for (int c = 0; c < n_cuts; ++c)
      if (cuts[c] > at && cuts[c] < end) {
        sh->tensor[sh->n_pieces] = t;
        sh->piece[sh->n_pieces++] =
            (ddp_param_t){.offset = at, .count = cuts[c] - at, .decay = segs[t].decay};
        at = cuts[c];
      }
    sh->tensor[sh->n_pieces] = t;
    sh->piece[sh->n_pieces++] =
        (ddp_param_t){.offset = at, .count = end - at, .decay = segs[t].decay};
  }
  ck_assert_int_le(sh->n_pieces, MAX_PIECES);
  for (int r = 0; r <= world; ++r) sh->rank_first[r] = r * sh->n_pieces / world;
  for (int r = 0; r < world; ++r) {
    const int first = sh->rank_first[r], np = sh->rank_first[r + 1] - first;
    if (np > sh->stride) sh->stride = np;
    sh->base[r] = sh->piece[first].offset;
    for (int j = 0; j < np; ++j) {
      sh->local[r][j] = sh->piece[first + j];
      sh->local[r][j].offset -= sh->base[r];
      sh->n_local[r] += sh->piece[first + j].count;
    }
  }
  /* groups: the pieces of the same tensor, by global index r x stride + j */
  for (int r = 0; r < world; ++r) {
    int k = 0;
    for (int j = 0; j < sh->rank_first[r + 1] - sh->rank_first[r]; ++j) {
      sh->begin[r][j] = k;
      for (int q = 0; q < world; ++q)
        for (int i = sh->rank_first[q]; i < sh->rank_first[q + 1]; ++i)
          if (sh->tensor[i] == sh->tensor[sh->rank_first[r] + j])
            sh->index[r][k++] = q * sh->stride + (i - sh->rank_first[q]);
      sh->begin[r][j + 1] = k;
    }
  }
}

static ddp_optim_lamb_groups_t lamb_shards_groups(const lamb_shards_t *sh, int r) {
  return (ddp_optim_lamb_groups_t){.n_ranks = sh->world,
                                   .rank = r,
                                   .stride = sh->stride,
                                   .begin = sh->begin[r],
                                   .index = sh->index[r]};
}

/* Five LAMB steps with clipping, grad_scale and a bf16 compute copy, the
 * third skipped (an inf norm), sharded as sh and unsharded; returns the
 * worst normwise relative difference of the weights over the tensors and
 * checks what must be exact: the moments, the compute copy as the rounding
 * of the sharded weights and the skip; *ratios_agree tells whether each
 * tensor's ratio was the same bits on every rank holding a piece of it. */
static double lamb_sharded_vs_step(const lamb_shards_t *sh, const ddp_param_t *segs, int n_seg,
                                   size_t n, int *ratios_agree) {
  ddp_optim_config_t cfg = lamb_config();
  cfg.max_grad_norm = 1.0f;
  float *p = malloc(n * sizeof *p), *p_ref = malloc(n * sizeof *p), *g = malloc(n * sizeof *g);
  float *st_ref = calloc(2 * n, sizeof *st_ref), *st[MAX_WORLD];
  uint16_t *cp = calloc(n, sizeof *cp), *cp_ref = calloc(n, sizeof *cp);
  double *all = calloc(2 * (size_t)sh->stride * (size_t)sh->world, sizeof *all);
  float ratio[MAX_WORLD][MAX_PIECES];
  *ratios_agree = 1;
  ddp_optim_plan_t *plan[MAX_WORLD], *ref_plan = NULL;
  fill_uniform(p, n, 11, -1.0f, 1.0f);
  memcpy(p_ref, p, n * sizeof *p);
  ck_assert_int_eq(ddp_optim_plan_create(g_be, &cfg, segs, n_seg, n, &ref_plan), DDP_OK);
  for (int r = 0; r < sh->world; ++r) {
    const int np = sh->rank_first[r + 1] - sh->rank_first[r];
    st[r] = calloc(2 * sh->n_local[r], sizeof(float));
    ck_assert_int_eq(ddp_optim_plan_create(g_be, &cfg, sh->local[r], np, sh->n_local[r], &plan[r]),
                     DDP_OK);
    ddp_optim_lamb_groups_t gr = lamb_shards_groups(sh, r);
    ck_assert_int_eq(ddp_optim_plan_set_lamb_groups(plan[r], &gr), DDP_OK);
  }
  for (int64_t t = 1; t <= 5; ++t) {
    float sumsq;
    fill_uniform(g, n, 50 + (uint64_t)t, -3.0f, 3.0f);
    ck_assert_int_eq(ddp_optim_grad_sumsq(g_be, &sumsq, g, n, 0.5f, NULL), DDP_OK);
    if (t == 3) sumsq = INFINITY;
    const float lr = ddp_lr_schedule(t - 1, 0.05f, 0.005f, 2, 5);
    ddp_optim_step_args_t a = step_args(&cfg, p_ref, g, st_ref, segs, n_seg, n, t, lr);
    a.grad_scale = 0.5f;
    a.grad_sumsq = &sumsq;
    a.skip_nonfinite = 1;
    a.compute_params = cp_ref;
    a.compute_dtype = DDP_DTYPE_BF16;
    ck_assert_int_eq(ddp_optim_step(g_be, ref_plan, &a, NULL), DDP_OK);
    ddp_optim_step_args_t ra[MAX_WORLD];
    for (int r = 0; r < sh->world; ++r) {
      ra[r] = a;
      ra[r].params = p + sh->base[r];
      ra[r].grads = g + sh->base[r];
      ra[r].state = st[r];
      ra[r].tensors = sh->local[r];
      ra[r].n_tensors = sh->rank_first[r + 1] - sh->rank_first[r];
      ra[r].n = sh->n_local[r];
      ra[r].compute_params = cp + sh->base[r];
      ck_assert_int_eq(
          ddp_optim_lamb_sums(g_be, plan[r], &ra[r], all + 2 * (size_t)r * sh->stride, NULL),
          DDP_OK);
    }
    for (int r = 0; r < sh->world; ++r) {
      ck_assert_int_eq(ddp_optim_lamb_ratios(g_be, plan[r], lr, all, ratio[r], NULL), DDP_OK);
      ck_assert_int_eq(ddp_optim_lamb_apply(g_be, plan[r], &ra[r], ratio[r], NULL), DDP_OK);
    }
    /* a tensor's ratio is the same bits on every rank (non-skipped steps) */
    for (int i = 0; i < sh->n_pieces && t != 3; ++i)
      for (int k = 0; k < sh->n_pieces; ++k) {
        if (sh->tensor[i] != sh->tensor[k]) continue;
        int ri = 0, rk = 0;
        while (i >= sh->rank_first[ri + 1]) ri++;
        while (k >= sh->rank_first[rk + 1]) rk++;
        const float a_i = ratio[ri][i - sh->rank_first[ri]],
                    a_k = ratio[rk][k - sh->rank_first[rk]];
        if (memcmp(&a_i, &a_k, sizeof a_i) != 0) *ratios_agree = 0;
      }
  }
  /* the moments do not depend on the ratios: exact; so is the skip count */
  for (int r = 0; r < sh->world; ++r) {
    const size_t b = sh->base[r], nl = sh->n_local[r];
    ck_assert_mem_eq(st[r], st_ref + b, nl * sizeof(float));
    ck_assert_mem_eq(st[r] + nl, st_ref + n + b, nl * sizeof(float));
    int64_t skipped = -1;
    ck_assert_int_eq(ddp_optim_plan_skipped_steps(plan[r], &skipped), DDP_OK);
    ck_assert_int_eq(skipped, 1);
  }
  uint16_t *want = malloc(n * sizeof *want);
  ck_assert_int_eq(ddp_convert_host(want, DDP_DTYPE_BF16, p, DDP_DTYPE_F32, n), DDP_OK);
  ck_assert_mem_eq(cp, want, n * sizeof *cp);
  double worst = 0.0;
  for (int t = 0; t < n_seg; ++t) {
    double d = 0.0, ref = 0.0;
    for (size_t i = segs[t].offset; i < segs[t].offset + segs[t].count; ++i) {
      d += ((double)p[i] - p_ref[i]) * ((double)p[i] - p_ref[i]);
      ref += (double)p_ref[i] * p_ref[i];
    }
    if (ref > 0) worst = fmax(worst, sqrt(d / ref));
  }
  for (int r = 0; r < sh->world; ++r) {
    ddp_optim_plan_destroy(plan[r]);
    free(st[r]);
  }
  ddp_optim_plan_destroy(ref_plan);
  free(p), free(p_ref), free(g), free(st_ref), free(cp), free(cp_ref), free(all), free(want);
  return worst;
}

/* Whole tensors on one rank: the parts are the step, bit for bit (the same
 * sums, the same expression). */
START_TEST(test_optim_lamb_parts_unsplit_equal_step) {
  ddp_param_t segs[N_SEG];
  const size_t n = make_segments(segs);
  lamb_shards_t sh;
  lamb_shards_make(&sh, segs, N_SEG, 1, NULL, 0);
  ck_assert_int_eq(sh.n_pieces, N_SEG);
  int agree;
  ck_assert(lamb_sharded_vs_step(&sh, segs, N_SEG, n, &agree) == 0.0);
  ck_assert(agree);
}
END_TEST

/* Tensors cut within a rank and across 1-4 ranks (the 200-element tensor
 * into four pieces, on two ranks from 3 ranks up, the 67 one into two, the
 * 129 one into two; an empty tensor among them): the norms are the same
 * sums in another order, so the weights agree up to the rounding of the
 * ratio to fp32: 1e-6 of each tensor after five steps at lr 0.05 allows a
 * few ulps a step (seen: 0, the double sums rounded to the same ratios);
 * a ratio per piece is off by 6e-3 (the next test). */
START_TEST(test_optim_lamb_parts_split_across_ranks) {
  ddp_param_t segs[N_SEG];
  const size_t n = make_segments(segs);
  /* tensor 1 is [1, 68), tensor 4 [71, 271), tensor 5 [271, 400) */
  const size_t cuts[] = {65, 100, 150, 230, 300};
  for (int world = 1; world <= MAX_WORLD; ++world) {
    lamb_shards_t sh;
    lamb_shards_make(&sh, segs, N_SEG, world, cuts, 5);
    int agree;
    const double worst = lamb_sharded_vs_step(&sh, segs, N_SEG, n, &agree);
    ck_assert_msg(worst <= 1e-6, "%d ranks: worst relative weight difference %.3g", world, worst);
    ck_assert_msg(agree, "%d ranks: a tensor's pieces got different ratios", world);
  }
}
END_TEST

/* A ratio per piece (every piece its own group) is what the groups are
 * for: it must differ, or the test above could not tell. */
START_TEST(test_optim_lamb_parts_need_whole_tensor_norms) {
  ddp_param_t segs[N_SEG];
  const size_t n = make_segments(segs);
  const size_t cuts[] = {65, 100, 150, 230, 300};
  lamb_shards_t sh;
  lamb_shards_make(&sh, segs, N_SEG, 2, cuts, 5);
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < sh.rank_first[r + 1] - sh.rank_first[r]; ++j) {
      sh.begin[r][j] = j;
      sh.index[r][j] = r * sh.stride + j;
      sh.begin[r][j + 1] = j + 1;
    }
  int agree;
  const double worst = lamb_sharded_vs_step(&sh, segs, N_SEG, n, &agree);
  ck_assert_msg(worst > 1e-4, "per-piece ratios: difference %.3g", worst);
  ck_assert(!agree);
}
END_TEST

/* The ratios add a group's sums in ascending global index, from 0: values
 * chosen so that any other order gives another ratio ((1e20 + -1e20) + 9
 * is 9; (1e20 + 9) + -1e20 is 0, trust 1). Both ranks holding the tensor
 * get the same bits; a padding piece alone with zero norms gets lr. */
START_TEST(test_optim_lamb_ratios_add_in_index_order) {
  ddp_optim_config_t cfg = lamb_config();
  /* rank 0: pieces 0 (tensor A), 1 (padding); rank 1: pieces 0, 1 (both A) */
  ddp_param_t t0[] = {{.offset = 0, .count = 4}, {.offset = 4, .count = 2}};
  ddp_param_t t1[] = {{.offset = 0, .count = 3}, {.offset = 3, .count = 3}};
  const int32_t b0[] = {0, 3, 4}, i0[] = {0, 2, 3, 1};
  const int32_t b1[] = {0, 3, 6}, i1[] = {0, 2, 3, 0, 2, 3};
  const ddp_optim_lamb_groups_t g0 = {
      .n_ranks = 2, .rank = 0, .stride = 2, .begin = b0, .index = i0};
  const ddp_optim_lamb_groups_t g1 = {
      .n_ranks = 2, .rank = 1, .stride = 2, .begin = b1, .index = i1};
  ddp_optim_plan_t *p0 = NULL, *p1 = NULL;
  ck_assert_int_eq(ddp_optim_plan_create(g_be, &cfg, t0, 2, 6, &p0), DDP_OK);
  ck_assert_int_eq(ddp_optim_plan_create(g_be, &cfg, t1, 2, 6, &p1), DDP_OK);
  ck_assert_int_eq(ddp_optim_plan_set_lamb_groups(p0, &g0), DDP_OK);
  ck_assert_int_eq(ddp_optim_plan_set_lamb_groups(p1, &g1), DDP_OK);
  /* (||p||^2, ||r||^2) of global pieces 0..3 */
  const double all[] = {1e20, 0.0, 0.0, 0.0, -1e20, 1.0, 9.0, 3.0};
  float r0[2], r1[2];
  ck_assert_int_eq(ddp_optim_lamb_ratios(g_be, p0, 0.5f, all, r0, NULL), DDP_OK);
  ck_assert_int_eq(ddp_optim_lamb_ratios(g_be, p1, 0.5f, all, r1, NULL), DDP_OK);
  ck_assert_float_eq(r0[0], (float)(0.5 * (3.0 / 2.0))); /* sqrt 9 / sqrt (0 + 1 + 3) */
  ck_assert_float_eq(r0[1], 0.5f);                       /* zero norms: trust 1 */
  ck_assert_mem_eq(&r1[0], &r0[0], sizeof(float));
  ck_assert_mem_eq(&r1[1], &r0[0], sizeof(float));
  ddp_optim_plan_destroy(p0);
  ddp_optim_plan_destroy(p1);
}
END_TEST

/* Bad groups and bad part calls: an error naming the cause, and nothing
 * written (params, state, sums, ratios). */
START_TEST(test_optim_lamb_parts_reject_bad_input) {
  const ddp_status_t E = DDP_ERR_INVALID_ARG;
  ddp_optim_config_t cfg = lamb_config();
  ddp_param_t t[] = {{.offset = 0, .count = 4, .decay = 1}, {.offset = 4, .count = 2}};
  const int32_t begin[] = {0, 2, 3}, index[] = {0, 3, 1};
  ddp_optim_plan_t *plan = NULL;
  ck_assert_int_eq(ddp_optim_plan_create(g_be, &cfg, t, 2, 6, &plan), DDP_OK);
  float p[6] = {1, 2, 3, 4, 5, 6}, g[6] = {1, 1, 1, 1, 1, 1}, st[12] = {0}, ratio[2] = {7, 7};
  double sums[4] = {42, 42, 42, 42}, all[8] = {0};
  ddp_optim_step_args_t a = step_args(&cfg, p, g, st, t, 2, 6, 1, 0.01f);
  ddp_test_log_start();
  /* parts before the plan has groups */
  ck_assert_int_eq(ddp_optim_lamb_sums(g_be, plan, &a, sums, NULL), E);
  ck_assert_int_eq(ddp_optim_lamb_ratios(g_be, plan, 0.01f, all, ratio, NULL), E);
  ck_assert_int_eq(ddp_optim_lamb_apply(g_be, plan, &a, ratio, NULL), E);
  /* bad groups */
  const ddp_optim_lamb_groups_t good = {
      .n_ranks = 2, .rank = 0, .stride = 2, .begin = begin, .index = index};
  ddp_optim_lamb_groups_t gr;
#define BAD_GROUPS(mutation)                                        \
  do {                                                              \
    gr = good;                                                      \
    mutation;                                                       \
    ck_assert_int_eq(ddp_optim_plan_set_lamb_groups(plan, &gr), E); \
  } while (0)
  BAD_GROUPS(gr.begin = NULL);
  BAD_GROUPS(gr.index = NULL);
  BAD_GROUPS(gr.rank = 2);
  BAD_GROUPS(gr.n_ranks = 0);
  BAD_GROUPS(gr.stride = 1);
  const int32_t b_nonzero[] = {1, 2, 3}, b_empty[] = {0, 0, 3}, b_self[] = {0, 1, 3};
  const int32_t i_range[] = {0, 4, 1}, i_order[] = {3, 0, 1}, i_self[] = {3, 0, 1};
  BAD_GROUPS(gr.begin = b_nonzero);
  BAD_GROUPS(gr.begin = b_empty);
  BAD_GROUPS(gr.index = i_range);
  BAD_GROUPS(gr.index = i_order);
  BAD_GROUPS((gr.begin = b_self, gr.index = i_self)); /* piece 0's group is {3} */
#undef BAD_GROUPS
  ck_assert_int_eq(ddp_optim_plan_set_lamb_groups(NULL, &good), E);
  ck_assert_int_eq(ddp_optim_plan_set_lamb_groups(plan, NULL), E);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "optim_lamb_sums: the plan has no LAMB groups");
  ddp_assert_contains(log, "optim_lamb_ratios: the plan has no LAMB groups");
  ddp_assert_contains(log, "optim_lamb_apply: the plan has no LAMB groups");
  ddp_assert_contains(log, "optim lamb groups: NULL begin");
  ddp_assert_contains(log, "optim lamb groups: NULL index");
  ddp_assert_contains(log, "rank 2 of 2 ranks");
  ddp_assert_contains(log, "rank 0 of 0 ranks");
  ddp_assert_contains(log, "stride 1 for 2 pieces");
  ddp_assert_contains(log, "begin[0] = 1, not 0");
  ddp_assert_contains(log, "piece 0 has no group");
  ddp_assert_contains(log, "piece 0: index 4 outside [0, 4)");
  ddp_assert_contains(log, "piece 0: indices 3, 0 are not ascending");
  ddp_assert_contains(log, "piece 0: its group lacks the piece itself (0)");
  ddp_assert_contains(log, "optim lamb groups: NULL plan");
  ddp_assert_contains(log, "optim lamb groups: NULL groups");
  free(log);
  /* the good table is taken, once */
  ck_assert_int_eq(ddp_optim_plan_set_lamb_groups(plan, &good), DDP_OK);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_optim_plan_set_lamb_groups(plan, &good), E);
  /* bad part calls */
  ck_assert_int_eq(ddp_optim_lamb_sums(g_be, plan, &a, NULL, NULL), E);
  ck_assert_int_eq(ddp_optim_lamb_sums(g_be, NULL, &a, sums, NULL), E);
  ck_assert_int_eq(ddp_optim_lamb_ratios(g_be, plan, 0.01f, NULL, ratio, NULL), E);
  ck_assert_int_eq(ddp_optim_lamb_ratios(g_be, plan, 0.01f, all, NULL, NULL), E);
  ck_assert_int_eq(ddp_optim_lamb_ratios(g_be, plan, NAN, all, ratio, NULL), E);
  ck_assert_int_eq(ddp_optim_lamb_apply(g_be, plan, &a, NULL, NULL), E);
  ddp_optim_config_t adamw = adamw_config();
  ddp_optim_step_args_t b = a;
  b.cfg = &adamw;
  ck_assert_int_eq(ddp_optim_lamb_sums(g_be, plan, &b, sums, NULL), E);
  b = a;
  b.n_tensors = 1, b.n = 4;
  ck_assert_int_eq(ddp_optim_lamb_apply(g_be, plan, &b, ratio, NULL), E);
  b = a;
  b.lr = -1.0f;
  ck_assert_int_eq(ddp_optim_lamb_sums(g_be, plan, &b, sums, NULL), E);
  ddp_backend_t *other = ddp_test_cpu_backend();
  ck_assert_int_eq(ddp_optim_lamb_sums(other, plan, &a, sums, NULL), E);
  ck_assert_int_eq(ddp_optim_lamb_ratios(other, plan, 0.01f, all, ratio, NULL), E);
  ddp_backend_destroy(other);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "the plan has its groups already");
  ddp_assert_contains(log, "optim_lamb_sums: NULL sums");
  ddp_assert_contains(log, "optim_lamb_sums: NULL plan");
  ddp_assert_contains(log, "optim_lamb_ratios: NULL all_sums");
  ddp_assert_contains(log, "optim_lamb_ratios: NULL ratio");
  ddp_assert_contains(log, "optim_lamb_ratios: lr nan");
  ddp_assert_contains(log, "optim_lamb_apply: NULL ratio");
  ddp_assert_contains(log, "optim_lamb_sums: the optimizer is adamw, not lamb");
  ddp_assert_contains(log, "optim_lamb_apply: the plan was made for 6 parameters in 2 tensors");
  ddp_assert_contains(log, "optim_step: lr -1");
  ddp_assert_contains(log, "optim_lamb_sums: the plan was made for another backend");
  ddp_assert_contains(log, "optim_lamb_ratios: the plan was made for another backend");
  free(log);
  const float p0[6] = {1, 2, 3, 4, 5, 6};
  ck_assert_mem_eq(p, p0, sizeof p);
  for (int i = 0; i < 12; ++i) ck_assert(st[i] == 0.0f);
  for (int i = 0; i < 4; ++i) ck_assert(sums[i] == 42.0);
  ck_assert(ratio[0] == 7.0f && ratio[1] == 7.0f);
  /* and the valid parts still run */
  ck_assert_int_eq(ddp_optim_lamb_sums(g_be, plan, &a, all, NULL), DDP_OK);
  ck_assert_int_eq(ddp_optim_lamb_ratios(g_be, plan, 0.01f, all, ratio, NULL), DDP_OK);
  ck_assert_int_eq(ddp_optim_lamb_apply(g_be, plan, &a, ratio, NULL), DDP_OK);
  ck_assert(p[0] != 1.0f);
  ddp_optim_plan_destroy(plan);
}
END_TEST

static Suite *optim_suite(void) {
  Suite *s = suite_create("optim");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_optim_adamw_matches_reference);
  tcase_add_test(tc, test_optim_sgd_matches_reference);
  tcase_add_test(tc, test_optim_lamb_matches_reference);
  tcase_add_test(tc, test_optim_adamw_first_step_by_hand);
  tcase_add_test(tc, test_optim_sgd_nesterov_two_steps_by_hand);
  tcase_add_test(tc, test_optim_sgd_first_step_ignores_stale_buffer);
  tcase_add_test(tc, test_optim_sgd_without_momentum_uses_no_state);
  tcase_add_test(tc, test_optim_lamb_trust_ratio_by_hand);
  tcase_add_test(tc, test_optim_clipping_scales_gradients_to_max_norm);
  tcase_add_test(tc, test_optim_clipping_off_or_below_max_leaves_gradients_alone);
  tcase_add_test(tc, test_optim_grad_scale_applies_before_the_norm);
  tcase_add_test(tc, test_optim_grad_sumsq_known_values);
  tcase_add_test(tc, test_optim_lr_schedule_warmup_then_cosine);
  tcase_add_test(tc, test_optim_kind_parse_and_name);
  tcase_add_test(tc, test_optim_state_per_param);
  tcase_add_test(tc, test_optim_rejects_bad_input_without_side_effects);
  tcase_add_test(tc, test_optim_two_runs_are_bit_identical);
  tcase_add_test(tc, test_optim_compute_copy_and_skip);
  tcase_add_test(tc, test_optim_plan_dispatch_matches_cpu_functions);
  tcase_add_test(tc, test_optim_plan_rejects_bad_input);
  tcase_add_test(tc, test_optim_plan_counts_skipped_steps);
  tcase_add_test(tc, test_optim_grad_epilogue_equals_convert_scale_sumsq);
  tcase_add_test(tc, test_optim_grad_epilogue_fp32_in_place);
  tcase_add_test(tc, test_optim_grad_epilogue_nonfinite_reaches_the_norm);
  tcase_add_test(tc, test_optim_sum_partials_adds_in_bucket_order);
  tcase_add_test(tc, test_optim_grad_epilogue_rejects_bad_input);
  tcase_add_test(tc, test_optim_lamb_parts_unsplit_equal_step);
  tcase_add_test(tc, test_optim_lamb_parts_split_across_ranks);
  tcase_add_test(tc, test_optim_lamb_parts_need_whole_tensor_norms);
  tcase_add_test(tc, test_optim_lamb_ratios_add_in_index_order);
  tcase_add_test(tc, test_optim_lamb_parts_reject_bad_input);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(optim_suite());
}
