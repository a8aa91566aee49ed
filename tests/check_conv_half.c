/* Tests for the CPU conv table over bf16 and fp16 storage
 * (backend/cpu/cpu_conv_table.c).
 *
 * A half op is defined as the fp32 op on the stored (half) inputs with each
 * half output rounded once to nearest even, so on the CPU every op must
 * equal that, bit for bit: inputs are drawn, rounded to the type
 * (ddp_round_host) and stored both ways; the op under bf16/fp16 on the half
 * storage, widened, must equal the fp32 op on the rounded fp32 values with
 * its output rounded; fp32 outputs (statistics, sums, parameter gradients,
 * under accumulate too) must equal the fp32 op's exactly. Every op of the
 * table, in both types.
 *
 * And the staging: a library op or batch-norm part under a half type whose
 * prepare has not run (after a release) is refused, naming the prepare,
 * with its outputs untouched; a NULL pointer under a half type is refused
 * with the fp32 op's own message. Other types' refusals are in
 * check_conv_ops.c. */
#include <config.h>

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_dnnl.h"
#include "check_util.h"
#include "ddptrain/backend.h"
#include "ddptrain/conv.h"
#include "ddptrain/dtype.h"
#include "ddptrain/rng.h"
#include "ddptrain/status.h"

static ddp_backend_t *g_be;
static const ddp_conv_ops_t *g_ops;
static ddp_rng_t g_rng;
static uint64_t g_off;

static void setup(void) {
  g_be = ddp_test_cpu_backend();
  g_ops = g_be->ops->conv;
  ck_assert_ptr_nonnull(g_ops);
  ddp_rng_t base;
  ddp_rng_init(&base, 20261126, 4);
  ddp_rng_derive(&base, 7, &g_rng);
  g_off = 0;
  ddp_test_free_tracked();
}

static void teardown(void) {
  ddp_test_free_tracked();
  ddp_backend_destroy(g_be);
  g_be = NULL;
  g_ops = NULL;
}

static const ddp_dtype_t k_types[] = {DDP_DTYPE_BF16, DDP_DTYPE_F16};

/* ---- buffers: each value in two storages -------------------------------- */

/* A tensor as the half op sees it (h, dt storage) and as its fp32 oracle
 * sees it (f: the same values widened). */
typedef struct twin {
  float *f;
  uint16_t *h;
  size_t n;
} twin_t;

static float *fbuf(size_t n) {
  return ddp_test_track(malloc((n ? n : 1) * sizeof(float)));
}

static uint16_t *hbuf(size_t n) {
  return ddp_test_track(malloc((n ? n : 1) * sizeof(uint16_t)));
}

/* Values uniform in [lo, hi), rounded to dt, in both storages. */
static twin_t twin_uniform(ddp_dtype_t dt, size_t n, float lo, float hi) {
  twin_t t = {fbuf(n), hbuf(n), n};
  ddp_rng_fill_uniform(&g_rng, g_off, t.f, n);
  g_off += n;
  for (size_t i = 0; i < n; ++i) t.f[i] = lo + (hi - lo) * t.f[i];
  ck_assert_int_eq(ddp_round_host(t.f, t.f, dt, n), DDP_OK);
  ck_assert_int_eq(ddp_convert_host(t.h, dt, t.f, DDP_DTYPE_F32, n), DDP_OK);
  return t;
}

/* An output: both storages filled with a sentinel. */
static twin_t twin_out(size_t n) {
  twin_t t = {fbuf(n), hbuf(n), n};
  for (size_t i = 0; i < n; ++i) t.f[i] = 7.0f, t.h[i] = 0x4321;
  return t;
}

static float *fcopy(const float *x, size_t n) {
  return memcpy(fbuf(n), x, n * sizeof *x);
}

/* The half output equals the fp32 output rounded once to dt, bit for bit. */
static void expect_rounded(const char *what, ddp_dtype_t dt, const twin_t *t) {
  float *want = fbuf(t->n), *got = fbuf(t->n);
  ck_assert_int_eq(ddp_round_host(want, t->f, dt, t->n), DDP_OK);
  ck_assert_int_eq(ddp_convert_host(got, DDP_DTYPE_F32, t->h, dt, t->n), DDP_OK);
  for (size_t i = 0; i < t->n; ++i)
    ck_assert_msg(memcmp(&want[i], &got[i], sizeof(float)) == 0,
                  "%s (%s) [%zu]: %.9g, the fp32 op rounded gives %.9g", what, ddp_dtype_name(dt),
                  i, (double)got[i], (double)want[i]);
}

static void expect_same(const char *what, ddp_dtype_t dt, const float *got, const float *want,
                        size_t n) {
  for (size_t i = 0; i < n; ++i)
    ck_assert_msg(memcmp(&want[i], &got[i], sizeof(float)) == 0,
                  "%s (%s) [%zu]: %.9g, the fp32 op gives %.9g", what, ddp_dtype_name(dt), i,
                  (double)got[i], (double)want[i]);
}

static void ok(ddp_status_t st, const char *what) {
  ck_assert_msg(st == DDP_OK, "%s: %s", what, ddp_status_name(st));
}

/* ---- convolution --------------------------------------------------------- */

/* A 3x3 padded convolution, a strided one, and a strided 1x1 with channels
 * that are not a multiple of 8 (the shape cpu_conv.c steers off oneDNN's
 * 1x1 kernels). */
static const ddp_conv_shape_t k_convs[] = {
    {.N = 2, .H = 6, .W = 5, .C = 3, .K = 4, .R = 3, .S = 3, .stride = 1, .pad = 1},
    {.N = 3, .H = 7, .W = 7, .C = 8, .K = 16, .R = 3, .S = 3, .stride = 2, .pad = 1},
    {.N = 2, .H = 6, .W = 6, .C = 5, .K = 6, .R = 1, .S = 1, .stride = 2, .pad = 0},
};

START_TEST(test_conv_ops_are_fp32_rounded) {
  if (!ddp_cpu_dnnl_available()) return;
  for (size_t ci = 0; ci < sizeof k_convs / sizeof *k_convs; ++ci)
    for (size_t ti = 0; ti < 2; ++ti) {
      const ddp_conv_shape_t sh = k_convs[ci];
      const ddp_dtype_t dt = k_types[ti];
      const size_t nin = (size_t)sh.N * sh.H * sh.W * sh.C;
      const size_t nout = (size_t)sh.N * ddp_conv_out_h(&sh) * ddp_conv_out_w(&sh) * sh.K;
      const size_t nw = (size_t)sh.K * sh.R * sh.S * sh.C;
      ok(g_ops->conv_prepare(g_be, dt, &sh), "conv_prepare");
      twin_t x = twin_uniform(dt, nin, -1, 1), w = twin_uniform(dt, nw, -0.5f, 0.5f);
      twin_t dy = twin_uniform(dt, nout, -1, 1);
      twin_t y = twin_out(nout), dx = twin_out(nin);
      ok(g_ops->conv_fwd(g_be, DDP_DTYPE_F32, y.f, x.f, w.f, &sh, NULL), "fp32 conv_fwd");
      ok(g_ops->conv_fwd(g_be, dt, y.h, x.h, w.h, &sh, NULL), "conv_fwd");
      expect_rounded("conv_fwd out", dt, &y);
      ok(g_ops->conv_bwd_data(g_be, DDP_DTYPE_F32, dx.f, dy.f, w.f, &sh, NULL), "fp32 bwd_data");
      ok(g_ops->conv_bwd_data(g_be, dt, dx.h, dy.h, w.h, &sh, NULL), "conv_bwd_data");
      expect_rounded("conv_bwd_data dinp", dt, &dx);
      /* dw fp32: overwritten, then accumulated onto a given start. */
      float *start = twin_uniform(dt, nw, -1, 1).f;
      for (int acc = 0; acc <= 1; ++acc) {
        float *want = fcopy(start, nw), *got = fcopy(start, nw);
        ok(g_ops->conv_bwd_weights(g_be, DDP_DTYPE_F32, want, dy.f, x.f, &sh, acc, NULL),
           "fp32 bwd_weights");
        ok(g_ops->conv_bwd_weights(g_be, dt, got, dy.h, x.h, &sh, acc, NULL), "conv_bwd_weights");
        expect_same(acc ? "conv_bwd_weights dw (accumulate)" : "conv_bwd_weights dw", dt, got, want,
                    nw);
      }
    }
}
END_TEST

/* ---- batch normalization ------------------------------------------------- */

static const ddp_bn_shape_t k_bn = {.N = 3, .H = 4, .W = 5, .C = 6, .eps = 1e-5f, .momentum = 0.1f};

START_TEST(test_bn_library_is_fp32_rounded) {
  if (!ddp_cpu_dnnl_available()) return;
  const ddp_bn_shape_t sh = k_bn;
  const size_t n = (size_t)sh.N * sh.H * sh.W * sh.C, C = (size_t)sh.C;
  for (size_t ti = 0; ti < 2; ++ti) {
    const ddp_dtype_t dt = k_types[ti];
    ok(g_ops->bn_prepare(g_be, dt, &sh), "bn_prepare");
    twin_t x = twin_uniform(dt, n, -2, 3), dy = twin_uniform(dt, n, -1, 1);
    const float *gamma = twin_uniform(dt, C, 0.5f, 1.5f).f, *beta = twin_uniform(dt, C, -1, 1).f;
    const float *rm0 = twin_uniform(dt, C, -1, 1).f, *rv0 = twin_uniform(dt, C, 0.5f, 2).f;
    for (int training = 1; training >= 0; --training) {
      twin_t y = twin_out(n);
      float *rm_w = fcopy(rm0, C), *rv_w = fcopy(rv0, C), *rm_g = fcopy(rm0, C);
      float *rv_g = fcopy(rv0, C);
      float *sa_w = fbuf(C), *sb_w = fbuf(C), *sa_g = fbuf(C), *sb_g = fbuf(C);
      ok(g_ops->bn_fwd(g_be, DDP_DTYPE_F32, y.f, sa_w, sb_w, rm_w, rv_w, x.f, gamma, beta, &sh,
                       training, NULL),
         "fp32 bn_fwd");
      ok(g_ops->bn_fwd(g_be, dt, y.h, sa_g, sb_g, rm_g, rv_g, x.h, gamma, beta, &sh, training,
                       NULL),
         "bn_fwd");
      expect_rounded(training ? "bn_fwd out (training)" : "bn_fwd out (inference)", dt, &y);
      expect_same("bn_fwd running_mean", dt, rm_g, rm_w, C);
      expect_same("bn_fwd running_var", dt, rv_g, rv_w, C);
      if (!training) continue;
      expect_same("bn_fwd save_a", dt, sa_g, sa_w, C);
      expect_same("bn_fwd save_b", dt, sb_g, sb_w, C);
      for (int acc = 0; acc <= 1; ++acc) {
        twin_t dx = twin_out(n);
        float *dg_w = fcopy(gamma, C), *db_w = fcopy(beta, C);
        float *dg_g = fcopy(gamma, C), *db_g = fcopy(beta, C);
        ok(g_ops->bn_bwd(g_be, DDP_DTYPE_F32, dx.f, dg_w, db_w, dy.f, x.f, gamma, sa_w, sb_w, &sh,
                         acc, NULL),
           "fp32 bn_bwd");
        ok(g_ops->bn_bwd(g_be, dt, dx.h, dg_g, db_g, dy.h, x.h, gamma, sa_g, sb_g, &sh, acc, NULL),
           "bn_bwd");
        expect_rounded("bn_bwd dinp", dt, &dx);
        expect_same("bn_bwd dgamma", dt, dg_g, dg_w, C);
        expect_same("bn_bwd dbeta", dt, db_g, db_w, C);
      }
    }
  }
}
END_TEST

START_TEST(test_bn_parts_are_fp32_rounded) {
  if (!ddp_cpu_dnnl_available()) return; /* the staging is sized by bn_prepare */
  const ddp_bn_shape_t sh = k_bn;
  const size_t n = (size_t)sh.N * sh.H * sh.W * sh.C, C = (size_t)sh.C;
  const int64_t M = 2 * (int64_t)sh.N * sh.H * sh.W; /* as if two ranks */
  for (size_t ti = 0; ti < 2; ++ti) {
    const ddp_dtype_t dt = k_types[ti];
    ok(g_ops->bn_prepare(g_be, dt, &sh), "bn_prepare");
    twin_t x = twin_uniform(dt, n, -2, 3), dy = twin_uniform(dt, n, -1, 1);
    const float *gamma = twin_uniform(dt, C, 0.5f, 1.5f).f, *beta = twin_uniform(dt, C, -1, 1).f;
    const float *mean = twin_uniform(dt, C, -0.5f, 0.5f).f, *var = twin_uniform(dt, C, 0.5f, 2).f;
    const float *g = twin_uniform(dt, 2 * C, -3, 3).f, *l = twin_uniform(dt, 2 * C, -3, 3).f;
    for (int with_mean = 0; with_mean <= 1; ++with_mean) {
      float *sw = fbuf(C), *sg = fbuf(C);
      ok(g_ops->bn_reduce_fwd(g_be, DDP_DTYPE_F32, sw, x.f, with_mean ? mean : NULL, &sh, NULL),
         "fp32 bn_reduce_fwd");
      ok(g_ops->bn_reduce_fwd(g_be, dt, sg, x.h, with_mean ? mean : NULL, &sh, NULL),
         "bn_reduce_fwd");
      expect_same("bn_reduce_fwd sums", dt, sg, sw, C);
    }
    twin_t y = twin_out(n);
    float *rm_w = fcopy(mean, C), *rv_w = fcopy(var, C), *rm_g = fcopy(mean, C);
    float *rv_g = fcopy(var, C);
    ok(g_ops->bn_apply_fwd(g_be, DDP_DTYPE_F32, y.f, rm_w, rv_w, x.f, mean, var, gamma, beta, M,
                           &sh, NULL),
       "fp32 bn_apply_fwd");
    ok(g_ops->bn_apply_fwd(g_be, dt, y.h, rm_g, rv_g, x.h, mean, var, gamma, beta, M, &sh, NULL),
       "bn_apply_fwd");
    expect_rounded("bn_apply_fwd out", dt, &y);
    expect_same("bn_apply_fwd running_var", dt, rv_g, rv_w, C);
    float *s2w = fbuf(2 * C), *s2g = fbuf(2 * C);
    ok(g_ops->bn_reduce_bwd(g_be, DDP_DTYPE_F32, s2w, dy.f, x.f, mean, &sh, NULL),
       "fp32 bn_reduce_bwd");
    ok(g_ops->bn_reduce_bwd(g_be, dt, s2g, dy.h, x.h, mean, &sh, NULL), "bn_reduce_bwd");
    expect_same("bn_reduce_bwd sums", dt, s2g, s2w, 2 * C);
    for (int acc = 0; acc <= 1; ++acc) {
      twin_t dx = twin_out(n);
      float *dg_w = fcopy(gamma, C), *db_w = fcopy(beta, C);
      float *dg_g = fcopy(gamma, C), *db_g = fcopy(beta, C);
      ok(g_ops->bn_apply_bwd(g_be, DDP_DTYPE_F32, dx.f, dg_w, db_w, dy.f, x.f, mean, var, gamma, g,
                             l, M, &sh, acc, NULL),
         "fp32 bn_apply_bwd");
      ok(g_ops->bn_apply_bwd(g_be, dt, dx.h, dg_g, db_g, dy.h, x.h, mean, var, gamma, g, l, M, &sh,
                             acc, NULL),
         "bn_apply_bwd");
      expect_rounded("bn_apply_bwd dinp", dt, &dx);
      expect_same("bn_apply_bwd dgamma", dt, dg_g, dg_w, C);
      expect_same("bn_apply_bwd dbeta", dt, db_g, db_w, C);
    }
  }
}
END_TEST

/* ---- pooling and element-wise ---------------------------------------------- */

START_TEST(test_maxpool_is_fp32_rounded) {
  if (!ddp_cpu_dnnl_available()) return;
  const ddp_pool_shape_t sh = {.N = 2, .H = 7, .W = 6, .C = 5, .kernel = 3, .stride = 2, .pad = 1};
  const size_t nin = (size_t)sh.N * sh.H * sh.W * sh.C;
  const size_t nout = (size_t)sh.N * ddp_pool_out_h(&sh) * ddp_pool_out_w(&sh) * sh.C;
  for (size_t ti = 0; ti < 2; ++ti) {
    const ddp_dtype_t dt = k_types[ti];
    size_t bytes = 0, bytes32 = 0;
    ok(g_ops->maxpool_workspace_bytes(g_be, dt, &sh, &bytes), "maxpool_workspace_bytes");
    ok(g_ops->maxpool_workspace_bytes(g_be, DDP_DTYPE_F32, &sh, &bytes32), "fp32 workspace");
    ck_assert_uint_eq(bytes, bytes32);
    void *ws_w = ddp_test_track(malloc(bytes + 1)), *ws_g = ddp_test_track(malloc(bytes + 1));
    twin_t x = twin_uniform(dt, nin, -1, 1), dy = twin_uniform(dt, nout, -1, 1);
    twin_t y = twin_out(nout), yi = twin_out(nout), dx = twin_out(nin);
    ok(g_ops->maxpool_fwd(g_be, DDP_DTYPE_F32, y.f, ws_w, x.f, &sh, NULL), "fp32 maxpool_fwd");
    ok(g_ops->maxpool_fwd(g_be, dt, y.h, ws_g, x.h, &sh, NULL), "maxpool_fwd");
    expect_rounded("maxpool_fwd out", dt, &y);
    ok(g_ops->maxpool_fwd(g_be, DDP_DTYPE_F32, yi.f, NULL, x.f, &sh, NULL), "fp32 inference");
    ok(g_ops->maxpool_fwd(g_be, dt, yi.h, NULL, x.h, &sh, NULL), "maxpool_fwd inference");
    expect_rounded("maxpool_fwd out (inference)", dt, &yi);
    ok(g_ops->maxpool_bwd(g_be, DDP_DTYPE_F32, dx.f, dy.f, ws_w, &sh, NULL), "fp32 maxpool_bwd");
    ok(g_ops->maxpool_bwd(g_be, dt, dx.h, dy.h, ws_g, &sh, NULL), "maxpool_bwd");
    expect_rounded("maxpool_bwd dinp", dt, &dx);
  }
}
END_TEST

START_TEST(test_avgpool_is_fp32_rounded) {
  /* C over one channel block (256), so the blocks' seams are covered. */
  const int N = 2, HW = 9, C = 300;
  const size_t nin = (size_t)N * HW * C, nout = (size_t)N * C;
  for (size_t ti = 0; ti < 2; ++ti) {
    const ddp_dtype_t dt = k_types[ti];
    twin_t x = twin_uniform(dt, nin, -1, 1), dy = twin_uniform(dt, nout, -1, 1);
    twin_t y = twin_out(nout), dx = twin_out(nin);
    ok(g_ops->avgpool_fwd(g_be, DDP_DTYPE_F32, y.f, x.f, N, HW, C, NULL), "fp32 avgpool_fwd");
    ok(g_ops->avgpool_fwd(g_be, dt, y.h, x.h, N, HW, C, NULL), "avgpool_fwd");
    expect_rounded("avgpool_fwd out", dt, &y);
    ok(g_ops->avgpool_bwd(g_be, DDP_DTYPE_F32, dx.f, dy.f, N, HW, C, NULL), "fp32 avgpool_bwd");
    ok(g_ops->avgpool_bwd(g_be, dt, dx.h, dy.h, N, HW, C, NULL), "avgpool_bwd");
    expect_rounded("avgpool_bwd dinp", dt, &dx);
  }
}
END_TEST

START_TEST(test_elementwise_is_fp32_rounded) {
  /* Over two blocks of 2048 and odd, and in place as the model calls them. */
  const size_t n = 4100;
  for (size_t ti = 0; ti < 2; ++ti) {
    const ddp_dtype_t dt = k_types[ti];
    twin_t a = twin_uniform(dt, n, -2, 2), b = twin_uniform(dt, n, -2, 2);
    twin_t y = twin_out(n);
    ok(g_ops->relu_fwd(g_be, DDP_DTYPE_F32, y.f, a.f, n, NULL), "fp32 relu_fwd");
    ok(g_ops->relu_fwd(g_be, dt, y.h, a.h, n, NULL), "relu_fwd");
    expect_rounded("relu_fwd out", dt, &y);
    twin_t s = {fcopy(a.f, n), memcpy(hbuf(n), a.h, n * 2), n};
    ok(g_ops->add_relu_fwd(g_be, DDP_DTYPE_F32, s.f, s.f, b.f, n, NULL), "fp32 add_relu_fwd");
    ok(g_ops->add_relu_fwd(g_be, dt, s.h, s.h, b.h, n, NULL), "add_relu_fwd (in place)");
    expect_rounded("add_relu_fwd out", dt, &s);
    twin_t d = {fcopy(b.f, n), memcpy(hbuf(n), b.h, n * 2), n};
    ok(g_ops->relu_bwd(g_be, DDP_DTYPE_F32, d.f, d.f, y.f, n, NULL), "fp32 relu_bwd");
    /* the half op reads the half forward's output, which equals y.f rounded */
    ok(g_ops->relu_bwd(g_be, dt, d.h, d.h, y.h, n, NULL), "relu_bwd (in place)");
    expect_rounded("relu_bwd dinp", dt, &d);
  }
}
END_TEST

/* ---- staging --------------------------------------------------------------- */

START_TEST(test_half_ops_need_their_prepare) {
  if (!ddp_cpu_dnnl_available()) return;
  const ddp_conv_shape_t sh = k_convs[0];
  const size_t big = 4096;
  twin_t x = twin_uniform(DDP_DTYPE_BF16, big, -1, 1), out = twin_out(big);
  const uint16_t *sentinel = memcpy(hbuf(big), out.h, big * 2);
  float *stats = fbuf(big);
  for (size_t i = 0; i < big; ++i) stats[i] = 1.0f;
  g_ops->release(g_be); /* frees the staging too */
  ddp_test_log_start();
  const ddp_status_t st_c = g_ops->conv_fwd(g_be, DDP_DTYPE_BF16, out.h, x.h, x.h, &sh, NULL);
  const ddp_status_t st_b = g_ops->bn_fwd(g_be, DDP_DTYPE_F16, out.h, stats, stats, stats, stats,
                                          x.h, stats, stats, &k_bn, 1, NULL);
  const ddp_status_t st_p =
      g_ops->bn_apply_fwd(g_be, DDP_DTYPE_BF16, out.h, NULL, NULL, x.h, stats, stats, stats, stats,
                          (int64_t)k_bn.N * k_bn.H * k_bn.W, &k_bn, NULL);
  /* bn_relu_bwd masks dout in place before its bn_bwd stages: refused
   * before that, dout untouched */
  uint16_t *dout = memcpy(hbuf(big), x.h, big * 2);
  const ddp_status_t st_r = g_ops->bn_relu_bwd(g_be, DDP_DTYPE_BF16, out.h, stats, stats, dout, x.h,
                                               x.h, stats, stats, stats, stats, 1, &k_bn, 0, NULL);
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(st_r, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "batch_norm_relu_bwd in half precision needs");
  ck_assert_int_eq(memcmp(dout, x.h, big * 2), 0);
  ck_assert_int_eq(st_c, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(st_b, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(st_p, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "conv_fwd in half precision needs");
  ddp_assert_contains(log, "call conv_prepare for this shape before the step loop");
  ddp_assert_contains(log, "batch_norm_fwd in half precision needs");
  ddp_assert_contains(log, "bn_apply_fwd in half precision needs");
  free(log);
  ck_assert_int_eq(memcmp(out.h, sentinel, big * 2), 0);
  /* After the prepare the same call works; a NULL pointer gets the fp32
   * op's own refusal. */
  ok(g_ops->conv_prepare(g_be, DDP_DTYPE_BF16, &sh), "conv_prepare");
  ok(g_ops->conv_fwd(g_be, DDP_DTYPE_BF16, out.h, x.h, x.h, &sh, NULL), "conv_fwd after prepare");
  ddp_test_log_start();
  const ddp_status_t st_n = g_ops->conv_fwd(g_be, DDP_DTYPE_BF16, out.h, NULL, x.h, &sh, NULL);
  log = ddp_test_log_stop();
  ck_assert_int_eq(st_n, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "conv_fwd: out, inp and w are required");
  free(log);
}
END_TEST

int main(void) {
  Suite *s = suite_create("conv_half");
  TCase *tc = tcase_create("cpu");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_conv_ops_are_fp32_rounded);
  tcase_add_test(tc, test_bn_library_is_fp32_rounded);
  tcase_add_test(tc, test_bn_parts_are_fp32_rounded);
  tcase_add_test(tc, test_maxpool_is_fp32_rounded);
  tcase_add_test(tc, test_avgpool_is_fp32_rounded);
  tcase_add_test(tc, test_elementwise_is_fp32_rounded);
  tcase_add_test(tc, test_half_ops_need_their_prepare);
  suite_add_tcase(s, tc);
  return ddp_test_run_suite(s);
}
