/* Tests for the CPU layer ops under bf16/fp16 activations (ddptrain/nn.h's
 * `dt`): each op against its own fp32 result on the same inputs.
 *
 * Inputs are drawn in fp32 and rounded to the half type, so the fp32 run and
 * the half run see the same numbers. The CPU half path is defined as "widen
 * exactly, compute in fp32, round each stored output once to nearest even",
 * so the stated tolerance is zero: every half output must equal the fp32
 * output rounded to the half type bit for bit, and every fp32 output of a
 * half run (parameter gradients, LayerNorm statistics, attention
 * probabilities, losses) must equal the fp32 run's exactly. (The CUDA
 * kernels, which accumulate in another order, are compared with this oracle
 * at a tolerance of their own.) A missed store, a wrong offset into a half
 * buffer or a double rounding each break equality.
 *
 * Half outputs are poisoned with 0xFFFF (NaN in bf16 and fp16) and fp32
 * outputs with NaN first, so an element the op never wrote cannot match.
 * Sizes are odd (C = 15, IC = 13, OC = 7, N = 10, V = 11 padded to 16, and
 * element-wise lengths past the ops' internal block of 2048 with a tail), so
 * vector tails and block edges are covered. The workspace contract (an op
 * without reserve() fails and writes nothing) and the dtype check are tested
 * too. */
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

enum { B = 2, T = 5, N = B * T, C = 15, NH = 3, IC = 13, OC = 7, V = 11, VP = 16 };
enum { EW = 2 * 2048 + 37 }; /* element-wise length: two full blocks and a tail */

static const ddp_nn_ops_t *const nn = &ddp_nn_cpu_ops;
static ddp_backend_t *g_be;
static ddp_dtype_t g_dt;
static ddp_rng_t g_rng;
static uint64_t g_off;

static void setup(void) {
  g_be = ddp_test_cpu_backend();
  ddp_rng_init(&g_rng, 20261123, 3);
  g_off = 0;
  ddp_test_free_tracked();
}

static void teardown(void) {
  ddp_test_free_tracked();
  ddp_backend_destroy(g_be);
  g_be = NULL;
}

/* One tensor in both storages: f for the fp32 run, h (g_dt bits) for the
 * half run. */
typedef struct pair {
  float *f;
  uint16_t *h;
  size_t n;
} pair_t;

/* Random N(0, scale^2) values that the half type represents exactly. */
static pair_t input(size_t n, float scale) {
  pair_t p = {ddp_test_track(malloc(n * sizeof(float))),
              ddp_test_track(malloc(n * sizeof(uint16_t))), n};
  ddp_rng_fill_normal(&g_rng, g_off, 0.0f, scale, p.f, n);
  g_off += n;
  ck_assert_int_eq(ddp_round_host(p.f, p.f, g_dt, n), DDP_OK);
  ck_assert_int_eq(ddp_convert_host(p.h, g_dt, p.f, DDP_DTYPE_F32, n), DDP_OK);
  return p;
}

/* An output: NaN in both storages. */
static pair_t output(size_t n) {
  pair_t p = {ddp_test_track(malloc(n * sizeof(float))),
              ddp_test_track(malloc(n * sizeof(uint16_t))), n};
  for (size_t i = 0; i < n; ++i) p.f[i] = NAN;
  memset(p.h, 0xFF, n * sizeof(uint16_t));
  return p;
}

/* An fp32-only output (two copies: one per run), NaN-poisoned, or a copy of
 * `init` when given (accumulating outputs). */
static float *f32_out(size_t n, const float *init) {
  float *x = ddp_test_track(malloc(n * sizeof(float)));
  for (size_t i = 0; i < n; ++i) x[i] = init ? init[i] : NAN;
  return x;
}

/* The half run's output equals the fp32 run's rounded to the half type. */
static void expect_half(const pair_t *p, const char *what) {
  uint16_t *want = ddp_test_track(malloc(p->n * sizeof(uint16_t)));
  ck_assert_int_eq(ddp_convert_host(want, g_dt, p->f, DDP_DTYPE_F32, p->n), DDP_OK);
  for (size_t i = 0; i < p->n; ++i)
    ck_assert_msg(want[i] == p->h[i], "%s (%s): element %zu is 0x%04x, want 0x%04x (fp32 %g)", what,
                  ddp_dtype_name(g_dt), i, p->h[i], want[i], (double)p->f[i]);
}

static void expect_f32(const float *got, const float *want, size_t n, const char *what) {
  for (size_t i = 0; i < n; ++i)
    ck_assert_msg(memcmp(&got[i], &want[i], sizeof(float)) == 0,
                  "%s (%s): fp32 element %zu is %g, want %g", what, ddp_dtype_name(g_dt), i,
                  (double)got[i], (double)want[i]);
}

/* Two half buffers hold the same bits. */
static void expect_bits16(const uint16_t *got, const uint16_t *want, size_t n, const char *what) {
  for (size_t i = 0; i < n; ++i)
    ck_assert_msg(got[i] == want[i], "%s (%s): element %zu is 0x%04x, want 0x%04x", what,
                  ddp_dtype_name(g_dt), i, got[i], want[i]);
}

static const ddp_dtype_t k_halves[] = {DDP_DTYPE_BF16, DDP_DTYPE_F16};

/* Starts round d of a test (bf16, then fp16) with the workspace reserved;
 * 0 after the last. */
static int begin_half(int d) {
  if (d >= 2) return 0;
  g_dt = k_halves[d];
  ck_assert_int_eq(nn->reserve(g_be, g_dt, N, 4 * C, 4 * VP), DDP_OK);
  return 1;
}

#define FOR_EACH_HALF for (int d_ = 0; begin_half(d_); ++d_, nn->release(g_be))

/* ---- per op --------------------------------------------------------------- */

START_TEST(test_half_embed) {
  FOR_EACH_HALF {
    int32_t tok[N];
    for (int i = 0; i < N; ++i) tok[i] = (i * 7 + 3) % V;
    pair_t wte = input((size_t)V * C, 1.0f), wpe = input((size_t)T * C, 1.0f);
    pair_t out = output((size_t)N * C);
    ck_assert_int_eq(nn->embed_fwd(g_be, DDP_DTYPE_F32, out.f, tok, wte.f, wpe.f, B, T, C, NULL),
                     DDP_OK);
    ck_assert_int_eq(nn->embed_fwd(g_be, g_dt, out.h, tok, wte.h, wpe.h, B, T, C, NULL), DDP_OK);
    expect_half(&out, "embed_fwd");
    /* backward: dwte accumulates into its old values, dwpe is overwritten */
    pair_t dout = input((size_t)N * C, 1.0f), dwte0 = input((size_t)V * C, 1.0f);
    float *dwte_f = f32_out(dwte0.n, dwte0.f), *dwte_h = f32_out(dwte0.n, dwte0.f);
    float *dwpe_f = f32_out((size_t)T * C, NULL), *dwpe_h = f32_out((size_t)T * C, NULL);
    ck_assert_int_eq(
        nn->embed_bwd(g_be, DDP_DTYPE_F32, dwte_f, dwpe_f, dout.f, tok, B, T, C, 0, NULL), DDP_OK);
    ck_assert_int_eq(nn->embed_bwd(g_be, g_dt, dwte_h, dwpe_h, dout.h, tok, B, T, C, 0, NULL),
                     DDP_OK);
    expect_f32(dwte_h, dwte_f, dwte0.n, "embed_bwd dwte");
    expect_f32(dwpe_h, dwpe_f, (size_t)T * C, "embed_bwd dwpe");
  }
}
END_TEST

START_TEST(test_half_layernorm) {
  FOR_EACH_HALF {
    pair_t x = input((size_t)N * C, 3.0f), w = input(C, 1.0f), b = input(C, 1.0f);
    pair_t out = output((size_t)N * C);
    float *mean_f = f32_out(N, NULL), *rstd_f = f32_out(N, NULL);
    float *mean_h = f32_out(N, NULL), *rstd_h = f32_out(N, NULL);
    ck_assert_int_eq(
        nn->layernorm_fwd(g_be, DDP_DTYPE_F32, out.f, mean_f, rstd_f, x.f, w.f, b.f, N, C, NULL),
        DDP_OK);
    ck_assert_int_eq(
        nn->layernorm_fwd(g_be, g_dt, out.h, mean_h, rstd_h, x.h, w.h, b.h, N, C, NULL), DDP_OK);
    expect_half(&out, "layernorm_fwd");
    expect_f32(mean_h, mean_f, N, "layernorm_fwd mean");
    expect_f32(rstd_h, rstd_f, N, "layernorm_fwd rstd");
    pair_t eval = output((size_t)N * C);
    ck_assert_int_eq(
        nn->layernorm_fwd(g_be, DDP_DTYPE_F32, eval.f, NULL, NULL, x.f, w.f, b.f, N, C, NULL),
        DDP_OK);
    ck_assert_int_eq(nn->layernorm_fwd(g_be, g_dt, eval.h, NULL, NULL, x.h, w.h, b.h, N, C, NULL),
                     DDP_OK);
    expect_half(&eval, "layernorm_fwd eval");
    /* backward, both accumulate settings: dinp always adds to its values */
    for (int acc = 0; acc < 2; ++acc) {
      pair_t dinp = input((size_t)N * C, 1.0f), dout = input((size_t)N * C, 1.0f);
      const pair_t dw0 = input(C, 1.0f), db0 = input(C, 1.0f);
      float *dw_f = f32_out(C, acc ? dw0.f : NULL), *db_f = f32_out(C, acc ? db0.f : NULL);
      float *dw_h = f32_out(C, acc ? dw0.f : NULL), *db_h = f32_out(C, acc ? db0.f : NULL);
      ck_assert_int_eq(nn->layernorm_bwd(g_be, DDP_DTYPE_F32, dinp.f, dw_f, db_f, dout.f, x.f, w.f,
                                         mean_f, rstd_f, N, C, acc, NULL),
                       DDP_OK);
      ck_assert_int_eq(nn->layernorm_bwd(g_be, g_dt, dinp.h, dw_h, db_h, dout.h, x.h, w.h, mean_h,
                                         rstd_h, N, C, acc, NULL),
                       DDP_OK);
      expect_half(&dinp, "layernorm_bwd dinp");
      expect_f32(dw_h, dw_f, C, "layernorm_bwd dw");
      expect_f32(db_h, db_f, C, "layernorm_bwd db");
    }
  }
}
END_TEST

/* The fused residual op under a half type equals `add` followed by
 * layernorm_fwd under the same type bit for bit (the sum rounded once, then
 * normalised from the rounded value), also in place (resid == a) and in
 * eval. C = 15 (a vector body and a tail) and a wider odd row. */
START_TEST(test_half_residual_layernorm) {
  FOR_EACH_HALF {
    static const int Cs[] = {C, 4 * C - 1};
    for (int k = 0; k < 2; ++k) {
      const int c = Cs[k];
      const size_t n = (size_t)N * c;
      pair_t a = input(n, 2.0f), b = input(n, 1.0f), w = input(c, 1.0f), bias = input(c, 1.0f);
      pair_t sum = output(n), ref = output(n);
      float *rm = f32_out(N, NULL), *rr = f32_out(N, NULL);
      ck_assert_int_eq(nn->add(g_be, g_dt, sum.h, a.h, b.h, n, NULL), DDP_OK);
      ck_assert_int_eq(nn->layernorm_fwd(g_be, g_dt, ref.h, rm, rr, sum.h, w.h, bias.h, N, c, NULL),
                       DDP_OK);
      pair_t resid = output(n), out = output(n);
      float *mean = f32_out(N, NULL), *rstd = f32_out(N, NULL);
      ck_assert_int_eq(nn->residual_layernorm_fwd(g_be, g_dt, resid.h, out.h, mean, rstd, a.h, b.h,
                                                  w.h, bias.h, N, c, NULL),
                       DDP_OK);
      expect_bits16(resid.h, sum.h, n, "residual_layernorm_fwd resid");
      expect_bits16(out.h, ref.h, n, "residual_layernorm_fwd out");
      expect_f32(mean, rm, N, "residual_layernorm_fwd mean");
      expect_f32(rstd, rr, N, "residual_layernorm_fwd rstd");
      pair_t eval = output(n);
      ck_assert_int_eq(nn->residual_layernorm_fwd(g_be, g_dt, a.h, eval.h, NULL, NULL, a.h, b.h,
                                                  w.h, bias.h, N, c, NULL),
                       DDP_OK);
      expect_bits16(a.h, sum.h, n, "residual_layernorm_fwd in place resid");
      expect_bits16(eval.h, ref.h, n, "residual_layernorm_fwd in place out");
    }
  }
}
END_TEST

START_TEST(test_half_linear) {
  FOR_EACH_HALF {
    pair_t x = input((size_t)N * IC, 1.0f), w = input((size_t)OC * IC, 0.3f);
    pair_t bias = input(OC, 1.0f);
    for (int with_bias = 0; with_bias < 2; ++with_bias) {
      pair_t out = output((size_t)N * OC);
      ck_assert_int_eq(nn->linear_fwd(g_be, DDP_DTYPE_F32, out.f, x.f, w.f,
                                      with_bias ? bias.f : NULL, N, IC, OC, NULL),
                       DDP_OK);
      ck_assert_int_eq(
          nn->linear_fwd(g_be, g_dt, out.h, x.h, w.h, with_bias ? bias.h : NULL, N, IC, OC, NULL),
          DDP_OK);
      expect_half(&out, with_bias ? "linear_fwd" : "linear_fwd no bias");
    }
    /* backward: dinp overwritten, then accumulated; dw, dbias fp32 */
    pair_t dout = input((size_t)N * OC, 1.0f);
    for (int acc = 0; acc < 2; ++acc) {
      pair_t dinp = acc ? input((size_t)N * IC, 1.0f) : output((size_t)N * IC);
      const pair_t dw0 = input((size_t)OC * IC, 1.0f), db0 = input(OC, 1.0f);
      float *dw_f = f32_out(dw0.n, acc ? dw0.f : NULL), *db_f = f32_out(OC, acc ? db0.f : NULL);
      float *dw_h = f32_out(dw0.n, acc ? dw0.f : NULL), *db_h = f32_out(OC, acc ? db0.f : NULL);
      ck_assert_int_eq(nn->linear_bwd(g_be, DDP_DTYPE_F32, dinp.f, dw_f, db_f, dout.f, x.f, w.f, N,
                                      IC, OC, acc, acc, NULL),
                       DDP_OK);
      ck_assert_int_eq(nn->linear_bwd(g_be, g_dt, dinp.h, dw_h, db_h, dout.h, x.h, w.h, N, IC, OC,
                                      acc, acc, NULL),
                       DDP_OK);
      expect_half(&dinp, "linear_bwd dinp");
      expect_f32(dw_h, dw_f, dw0.n, "linear_bwd dw");
      expect_f32(db_h, db_f, OC, "linear_bwd dbias");
    }
    /* no dinp wanted, no bias */
    float *dw_f = f32_out((size_t)OC * IC, NULL), *dw_h = f32_out((size_t)OC * IC, NULL);
    ck_assert_int_eq(nn->linear_bwd(g_be, DDP_DTYPE_F32, NULL, dw_f, NULL, dout.f, x.f, w.f, N, IC,
                                    OC, 0, 0, NULL),
                     DDP_OK);
    ck_assert_int_eq(
        nn->linear_bwd(g_be, g_dt, NULL, dw_h, NULL, dout.h, x.h, w.h, N, IC, OC, 0, 0, NULL),
        DDP_OK);
    expect_f32(dw_h, dw_f, (size_t)OC * IC, "linear_bwd dw only");
  }
}
END_TEST

START_TEST(test_half_elementwise) {
  FOR_EACH_HALF {
    pair_t x = input(EW, 2.0f), y = input(EW, 2.0f);
    pair_t out = output(EW);
    ck_assert_int_eq(nn->gelu_fwd(g_be, DDP_DTYPE_F32, out.f, x.f, EW, NULL), DDP_OK);
    ck_assert_int_eq(nn->gelu_fwd(g_be, g_dt, out.h, x.h, EW, NULL), DDP_OK);
    expect_half(&out, "gelu_fwd");
    /* gelu_bwd in place (dinp == dout), as the model calls it */
    pair_t g = input(EW, 1.0f);
    ck_assert_int_eq(nn->gelu_bwd(g_be, DDP_DTYPE_F32, g.f, x.f, g.f, EW, NULL), DDP_OK);
    ck_assert_int_eq(nn->gelu_bwd(g_be, g_dt, g.h, x.h, g.h, EW, NULL), DDP_OK);
    expect_half(&g, "gelu_bwd in place");
    pair_t sum = output(EW);
    ck_assert_int_eq(nn->add(g_be, DDP_DTYPE_F32, sum.f, x.f, y.f, EW, NULL), DDP_OK);
    ck_assert_int_eq(nn->add(g_be, g_dt, sum.h, x.h, y.h, EW, NULL), DDP_OK);
    expect_half(&sum, "add");
    /* add in place (out == a), as the residual stream does */
    ck_assert_int_eq(nn->add(g_be, DDP_DTYPE_F32, x.f, x.f, y.f, EW, NULL), DDP_OK);
    ck_assert_int_eq(nn->add(g_be, g_dt, x.h, x.h, y.h, EW, NULL), DDP_OK);
    expect_half(&x, "add in place");
  }
}
END_TEST

START_TEST(test_half_attention) {
  FOR_EACH_HALF {
    const size_t att_n = (size_t)B * NH * T * T;
    pair_t qkv = input((size_t)N * 3 * C, 1.0f);
    pair_t out = output((size_t)N * C), eval = output((size_t)N * C);
    float *att_f = f32_out(att_n, NULL), *att_h = f32_out(att_n, NULL);
    ck_assert_int_eq(nn->attention_fwd(g_be, DDP_DTYPE_F32, out.f, att_f, qkv.f, B, T, C, NH, NULL),
                     DDP_OK);
    ck_assert_int_eq(nn->attention_fwd(g_be, g_dt, out.h, att_h, qkv.h, B, T, C, NH, NULL), DDP_OK);
    expect_half(&out, "attention_fwd");
    /* only the causal part (row t, columns 0..t) is defined */
    for (size_t r = 0; r < att_n / T; ++r)
      expect_f32(att_h + r * T, att_f + r * T, r % T + 1, "attention_fwd probabilities");
    ck_assert_int_eq(nn->attention_fwd(g_be, DDP_DTYPE_F32, eval.f, NULL, qkv.f, B, T, C, NH, NULL),
                     DDP_OK);
    ck_assert_int_eq(nn->attention_fwd(g_be, g_dt, eval.h, NULL, qkv.h, B, T, C, NH, NULL), DDP_OK);
    expect_half(&eval, "attention_fwd eval");
    pair_t dout = input((size_t)N * C, 1.0f), dqkv = output((size_t)N * 3 * C);
    float *scratch = f32_out(att_n, NULL);
    ck_assert_int_eq(nn->attention_bwd(g_be, DDP_DTYPE_F32, dqkv.f, scratch, dout.f, qkv.f, att_f,
                                       B, T, C, NH, NULL),
                     DDP_OK);
    ck_assert_int_eq(
        nn->attention_bwd(g_be, g_dt, dqkv.h, scratch, dout.h, qkv.h, att_h, B, T, C, NH, NULL),
        DDP_OK);
    expect_half(&dqkv, "attention_bwd");
  }
}
END_TEST

START_TEST(test_half_xent) {
  FOR_EACH_HALF {
    int32_t tg[N];
    for (int i = 0; i < N; ++i) tg[i] = i == 3 ? -1 : (i * 5 + 1) % V; /* one ignored row */
    pair_t logits = input((size_t)N * VP, 4.0f);
    float *loss_f = f32_out(N, NULL), *loss_h = f32_out(N, NULL);
    float sum_f = 1.5f, sum_h = 1.5f;
    /* loss only */
    ck_assert_int_eq(nn->xent_fused(g_be, DDP_DTYPE_F32, loss_f, &sum_f, NULL, logits.f, tg, 0.0f,
                                    0.0f, N, V, VP, NULL),
                     DDP_OK);
    ck_assert_int_eq(
        nn->xent_fused(g_be, g_dt, loss_h, &sum_h, NULL, logits.h, tg, 0.0f, 0.0f, N, V, VP, NULL),
        DDP_OK);
    expect_f32(loss_h, loss_f, N, "xent_fused losses");
    expect_f32(&sum_h, &sum_f, 1, "xent_fused loss sum");
    /* fused backward in place over the logits, padding columns included */
    ck_assert_int_eq(nn->xent_fused(g_be, DDP_DTYPE_F32, loss_f, &sum_f, logits.f, logits.f, tg,
                                    0.25f, 0.0f, N, V, VP, NULL),
                     DDP_OK);
    ck_assert_int_eq(nn->xent_fused(g_be, g_dt, loss_h, &sum_h, logits.h, logits.h, tg, 0.25f, 0.0f,
                                    N, V, VP, NULL),
                     DDP_OK);
    expect_half(&logits, "xent_fused dlogits");
    expect_f32(&sum_h, &sum_f, 1, "xent_fused loss sum (second)");
  }
}
END_TEST

/* Label smoothing under a half type: the same losses and the gradient
 * rounded once, as unsmoothed. */
START_TEST(test_half_xent_label_smoothing) {
  FOR_EACH_HALF {
    int32_t tg[N];
    for (int i = 0; i < N; ++i) tg[i] = i == 6 ? -1 : (i * 3 + 2) % V;
    pair_t logits = input((size_t)N * VP, 4.0f);
    float *loss_f = f32_out(N, NULL), *loss_h = f32_out(N, NULL);
    float sum_f = 0.5f, sum_h = 0.5f;
    ck_assert_int_eq(nn->xent_fused(g_be, DDP_DTYPE_F32, loss_f, &sum_f, logits.f, logits.f, tg,
                                    0.25f, 0.1f, N, V, VP, NULL),
                     DDP_OK);
    ck_assert_int_eq(nn->xent_fused(g_be, g_dt, loss_h, &sum_h, logits.h, logits.h, tg, 0.25f, 0.1f,
                                    N, V, VP, NULL),
                     DDP_OK);
    expect_f32(loss_h, loss_f, N, "smoothed xent_fused losses");
    expect_f32(&sum_h, &sum_f, 1, "smoothed xent_fused loss sum");
    expect_half(&logits, "smoothed xent_fused dlogits");
  }
}
END_TEST

/* ---- contracts -------------------------------------------------------------- */

/* Without reserve() a half op that needs workspace fails, names the op, and
 * writes nothing; fp32 needs none. A dtype that is not a float type is
 * rejected. */
START_TEST(test_half_workspace_and_dtype) {
  g_dt = DDP_DTYPE_BF16;
  pair_t x = input((size_t)N * IC, 1.0f), w = input((size_t)OC * IC, 1.0f);
  pair_t out = output((size_t)N * OC);
  ddp_test_log_start();
  ck_assert_int_eq(nn->linear_fwd(g_be, g_dt, out.h, x.h, w.h, NULL, N, IC, OC, NULL),
                   DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "linear_fwd in half precision needs");
  free(log);
  for (size_t i = 0; i < out.n; ++i) ck_assert_uint_eq(out.h[i], 0xFFFF);
  ck_assert_int_eq(nn->linear_fwd(g_be, DDP_DTYPE_F32, out.f, x.f, w.f, NULL, N, IC, OC, NULL),
                   DDP_OK);
  /* the fused residual op too: neither resid nor out is touched */
  pair_t resid = output((size_t)N * IC), normed = output((size_t)N * IC);
  ddp_test_log_start();
  ck_assert_int_eq(nn->residual_layernorm_fwd(g_be, g_dt, resid.h, normed.h, NULL, NULL, x.h, x.h,
                                              w.h, w.h, N, IC, NULL),
                   DDP_ERR_INVALID_ARG);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "residual_layernorm_fwd in half precision needs");
  free(log);
  for (size_t i = 0; i < resid.n; ++i) ck_assert_uint_eq(resid.h[i] & normed.h[i], 0xFFFF);
  /* a reserve too small for the call is the same error; release frees */
  ck_assert_int_eq(nn->reserve(g_be, g_dt, 1, 1, 1), DDP_OK);
  ddp_test_log_start();
  ck_assert_int_eq(nn->linear_fwd(g_be, g_dt, out.h, x.h, w.h, NULL, N, IC, OC, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(nn->gelu_fwd(g_be, DDP_DTYPE_I32, out.h, x.h, 3, NULL), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(nn->reserve(g_be, DDP_DTYPE_F16, 0, 1, 1), DDP_ERR_INVALID_ARG);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "activation dtype int32");
  free(log);
  nn->release(g_be);
  for (size_t i = 0; i < out.n; ++i) ck_assert_uint_eq(out.h[i], 0xFFFF);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("nn_half");
  TCase *tc = tcase_create("ops");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_half_embed);
  tcase_add_test(tc, test_half_layernorm);
  tcase_add_test(tc, test_half_residual_layernorm);
  tcase_add_test(tc, test_half_linear);
  tcase_add_test(tc, test_half_elementwise);
  tcase_add_test(tc, test_half_attention);
  tcase_add_test(tc, test_half_xent);
  tcase_add_test(tc, test_half_xent_label_smoothing);
  tcase_add_test(tc, test_half_workspace_and_dtype);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(suite());
}
