/* Tests for the CPU flash attention ops (ddptrain/nn.h flash_attention_fwd /
 * flash_attention_bwd, src/backend/cpu/cpu_flash_attention.c), the oracle of
 * the CUDA kernels.
 *
 * The reference is the matrix attention of the same table (attention_fwd /
 * attention_bwd, itself checked against double precision and finite
 * differences in check_nn.c): the two compute the same function in other
 * orders, so fp32 results agree to rounding. Thresholds are normwise,
 * max|flash - ref| / max|ref| over the tensor: 1e-5 for out (sums of up to
 * T ~ 200 products of O(1) values, ~10 ulps of reordering), 2e-5 for dqkv
 * (the softmax backward subtracts D = rowsum(dO * O), a cancellation that
 * scales absolute errors up relative to small gradients; measured worst
 * 3e-6). lse is checked against a double-precision log-sum-exp at 1e-5
 * absolute (lse is O(1-10)).
 *
 * Shapes are odd: T not a multiple of the 64-row blocks or the 128-key
 * tiles, B > 1, head sizes 3, 12, 16, 32, 64, 128 and 160 (the CPU has no
 * head-size limit; the GPU's unsupported sizes are tested in
 * check_gpu_flash_attention.c).
 *
 * Also: central finite differences of the backward (with lens, so padding
 * is differentiated too: its gradient must be exactly zero); lens against
 * the truncated sequence run alone (bit-identical: the same tiles on the same
 * values), padding rows exactly zero, lens 0 and T; two runs bit-identical;
 * bf16/fp16 equal, bit for bit, to the fp32 op on the widened operands
 * rounded once (the documented half semantics), and within 1.6e-2 / 2e-3
 * (bf16 / fp16) of fp32 on unrounded inputs; bad arguments rejected with a
 * message and nothing written. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "ddptrain/backend.h"
#include "ddptrain/dtype.h"
#include "ddptrain/nn.h"
#include "ddptrain/rng.h"
#if DDP_HAVE_CUDA
#include "flash_attention.h"
#endif
#include "ddptrain/status.h"

#define TOL_OUT 1e-5
#define TOL_GRAD 2e-5
#define TOL_LSE 1e-5

static ddp_backend_t *g_be;
static const ddp_nn_ops_t *const nn = &ddp_nn_cpu_ops;
static ddp_rng_t g_rng;
static uint64_t g_off;

static void setup(void) {
  g_be = ddp_test_cpu_backend();
  ddp_rng_init(&g_rng, 20251124, 11);
  g_off = 0;
  ddp_test_free_tracked();
}

static void teardown(void) {
  ddp_test_free_tracked();
  ddp_backend_destroy(g_be);
  g_be = NULL;
}

typedef struct shape {
  int B, T, C, NH;
} shape_t;

static float *fbuf(size_t n) {
  return ddp_test_track(malloc((n ? n : 1) * sizeof(float)));
}

static float *fnan(size_t n) {
  float *p = fbuf(n);
  for (size_t i = 0; i < n; ++i) p[i] = NAN;
  return p;
}

static float *frand(size_t n, float std) {
  float *p = fbuf(n);
  ddp_rng_fill_normal(&g_rng, g_off, 0.0f, std, p, n);
  g_off += n;
  return p;
}

static size_t nqkv(const shape_t *s) {
  return (size_t)s->B * s->T * 3 * s->C;
}
static size_t nout(const shape_t *s) {
  return (size_t)s->B * s->T * s->C;
}
static size_t nrow(const shape_t *s) {
  return (size_t)s->B * s->NH * s->T;
}

static double normwise(const float *x, const float *ref, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    expect(isfinite(x[i]) && isfinite(ref[i]));
    const double d = fabs((double)x[i] - (double)ref[i]);
    if (d > num) num = d;
    if (fabs((double)ref[i]) > den) den = fabs((double)ref[i]);
  }
  return den > 0 ? num / den : num;
}

static void flash_fwd(const shape_t *s, float *out, float *lse, const float *qkv,
                      const int32_t *lens) {
  ck_assert_int_eq(nn->flash_attention_fwd(g_be, DDP_DTYPE_F32, out, lse, qkv, lens, s->B, s->T,
                                           s->C, s->NH, NULL),
                   DDP_OK);
}

static void flash_bwd(const shape_t *s, float *dqkv, const float *dout, const float *qkv,
                      const float *out, const float *lse, const int32_t *lens) {
  float *scratch = fnan(nrow(s));
  ck_assert_int_eq(nn->flash_attention_bwd(g_be, DDP_DTYPE_F32, dqkv, scratch, dout, qkv, out, lse,
                                           lens, s->B, s->T, s->C, s->NH, NULL),
                   DDP_OK);
}

/* The matrix attention: out, and dqkv for dout when dqkv is non-NULL. */
static void matrix_attention(const shape_t *s, float *out, float *dqkv, const float *dout,
                             const float *qkv) {
  const size_t tt = (size_t)s->B * s->NH * s->T * s->T;
  float *att = fnan(tt), *scratch = fnan(tt);
  ck_assert_int_eq(
      nn->attention_fwd(g_be, DDP_DTYPE_F32, out, att, qkv, s->B, s->T, s->C, s->NH, NULL), DDP_OK);
  if (dqkv)
    ck_assert_int_eq(nn->attention_bwd(g_be, DDP_DTYPE_F32, dqkv, scratch, dout, qkv, att, s->B,
                                       s->T, s->C, s->NH, NULL),
                     DDP_OK);
}

/* log sum_j<=t exp(scale q_t . k_j) in double, row (b, h, t). */
static double lse_ref(const shape_t *s, const float *qkv, int b, int h, int t) {
  const int hs = s->C / s->NH, C3 = 3 * s->C;
  const float *seq = qkv + (size_t)b * s->T * C3;
  double mx = -INFINITY, sc[1024];
  ck_assert_int_le(t, 1023);
  for (int j = 0; j <= t; ++j) {
    double d = 0.0;
    for (int e = 0; e < hs; ++e)
      d += (double)seq[(size_t)t * C3 + h * hs + e] * seq[(size_t)j * C3 + s->C + h * hs + e];
    sc[j] = d / sqrt((double)hs);
    if (sc[j] > mx) mx = sc[j];
  }
  double sum = 0.0;
  for (int j = 0; j <= t; ++j) sum += exp(sc[j] - mx);
  return mx + log(sum);
}

static const shape_t k_shapes[] = {
    {3, 37, 60, 5},   /* hs 12, one tile */
    {2, 150, 48, 3},  /* hs 16, three row blocks, two key tiles */
    {2, 130, 64, 2},  /* hs 32, T just past a key tile */
    {1, 200, 128, 2}, /* hs 64 */
    {2, 70, 128, 1},  /* hs 128 */
    {2, 23, 21, 7},   /* hs 3 */
    {1, 67, 160, 1},  /* hs 160 */
};
#define NSHAPES (sizeof k_shapes / sizeof k_shapes[0])

START_TEST(test_flash_fwd_matches_matrix_attention) {
  for (size_t i = 0; i < NSHAPES; ++i) {
    const shape_t *s = &k_shapes[i];
    const float *qkv = frand(nqkv(s), 1.0f);
    float *out = fnan(nout(s)), *lse = fnan(nrow(s)), *ref = fnan(nout(s));
    flash_fwd(s, out, lse, qkv, NULL);
    matrix_attention(s, ref, NULL, NULL, qkv);
    const double err = normwise(out, ref, nout(s));
    ck_assert_msg(err <= TOL_OUT, "shape %zu: out error %.3g", i, err);
    double worst = 0.0;
    for (int b = 0; b < s->B; ++b)
      for (int h = 0; h < s->NH; ++h)
        for (int t = 0; t < s->T; t += 7) {
          const double d = fabs(lse[((size_t)b * s->NH + h) * s->T + t] - lse_ref(s, qkv, b, h, t));
          if (d > worst) worst = d;
        }
    ck_assert_msg(worst <= TOL_LSE, "shape %zu: lse error %.3g", i, worst);
    /* eval (lse NULL) computes the same out */
    float *eval = fnan(nout(s));
    flash_fwd(s, eval, NULL, qkv, NULL);
    ck_assert(memcmp(eval, out, nout(s) * sizeof *out) == 0);
  }
}
END_TEST

START_TEST(test_flash_bwd_matches_matrix_attention) {
  for (size_t i = 0; i < NSHAPES; ++i) {
    const shape_t *s = &k_shapes[i];
    const float *qkv = frand(nqkv(s), 1.0f), *dout = frand(nout(s), 1.0f);
    float *out = fnan(nout(s)), *lse = fnan(nrow(s)), *dqkv = fnan(nqkv(s));
    float *ref = fnan(nout(s)), *dref = fnan(nqkv(s));
    flash_fwd(s, out, lse, qkv, NULL);
    flash_bwd(s, dqkv, dout, qkv, out, lse, NULL);
    matrix_attention(s, ref, dref, dout, qkv);
    const double err = normwise(dqkv, dref, nqkv(s));
    if (getenv("DDP_NN_VERBOSE")) fprintf(stderr, "shape %zu: dqkv error %.3g\n", i, err);
    ck_assert_msg(err <= TOL_GRAD, "shape %zu: dqkv error %.3g", i, err);
  }
}
END_TEST

/* L = sum(out * R) in double, for the finite-difference check. */
static double objective(const shape_t *s, const float *qkv, const int32_t *lens, const float *R,
                        float *out) {
  flash_fwd(s, out, NULL, qkv, lens);
  double L = 0.0;
  for (size_t i = 0; i < nout(s); ++i) L += (double)out[i] * R[i];
  return L;
}

START_TEST(test_flash_bwd_finite_differences) {
  /* T = 70 crosses a row block; lens leave padding in row 1. */
  const shape_t s = {2, 70, 12, 3};
  const int32_t lens[2] = {70, 41};
  float *qkv = frand(nqkv(&s), 1.0f);
  const float *R = frand(nout(&s), 1.0f);
  float *out = fnan(nout(&s)), *lse = fnan(nrow(&s)), *dqkv = fnan(nqkv(&s));
  flash_fwd(&s, out, lse, qkv, lens);
  flash_bwd(&s, dqkv, R, qkv, out, lse, lens);
  const float H = 1e-2f;
  size_t checked = 0, big = 0;
  /* every 5th element: ~1000 of them, padding included */
  for (size_t i = 0; i < nqkv(&s); i += 5) {
    const float x = qkv[i];
    qkv[i] = x + H;
    const float up = qkv[i];
    const double lp = objective(&s, qkv, lens, R, out);
    qkv[i] = x - H;
    const float dn = qkv[i];
    const double lm = objective(&s, qkv, lens, R, out);
    qkv[i] = x;
    const double fd = (lp - lm) / ((double)up - (double)dn);
    const size_t t = i / (3 * (size_t)s.C) % (size_t)s.T, b = i / (3 * (size_t)s.C * s.T);
    if ((int)t >= lens[b]) {
      ck_assert_msg(dqkv[i] == 0.0f && fd == 0.0, "padding element %zu: grad %g fd %g", i,
                    (double)dqkv[i], fd);
      continue;
    }
    ck_assert_msg(fabs(fd - dqkv[i]) <= 1e-3 + 1e-2 * fabs(fd), "element %zu: grad %.6g fd %.6g", i,
                  (double)dqkv[i], fd);
    ++checked;
    if (fabs(fd) > 0.05) ++big;
  }
  ck_assert_uint_gt(checked, 500);
  ck_assert_uint_gt(big, checked / 4); /* not vacuous */
}
END_TEST

START_TEST(test_flash_lens_match_truncated_sequences) {
  const shape_t s = {4, 150, 64, 2};
  const int32_t lens[4] = {150, 65, 0, 1};
  const float *qkv = frand(nqkv(&s), 1.0f), *dout = frand(nout(&s), 1.0f);
  float *out = fnan(nout(&s)), *lse = fnan(nrow(&s)), *dqkv = fnan(nqkv(&s));
  flash_fwd(&s, out, lse, qkv, lens);
  flash_bwd(&s, dqkv, dout, qkv, out, lse, lens);
  const size_t C = (size_t)s.C, T = (size_t)s.T;
  for (int b = 0; b < s.B; ++b) {
    const int len = lens[b];
    for (size_t t = (size_t)len; t < T; ++t) {
      for (size_t c = 0; c < C; ++c) expect(out[((size_t)b * T + t) * C + c] == 0.0f);
      for (size_t c = 0; c < 3 * C; ++c) expect(dqkv[((size_t)b * T + t) * 3 * C + c] == 0.0f);
      for (int h = 0; h < s.NH; ++h) expect(lse[((size_t)b * s.NH + h) * T + t] == 0.0f);
    }
    if (len == 0) continue;
    /* the valid prefix alone, as its own batch of one */
    const shape_t one = {1, len, s.C, s.NH};
    const float *q1 = qkv + (size_t)b * T * 3 * C, *g1 = dout + (size_t)b * T * C;
    float *o1 = fnan(nout(&one)), *l1 = fnan(nrow(&one)), *d1 = fnan(nqkv(&one));
    float *mo = fnan(nout(&one)), *md = fnan(nqkv(&one));
    flash_fwd(&one, o1, l1, q1, NULL);
    flash_bwd(&one, d1, g1, q1, o1, l1, NULL);
    ck_assert(memcmp(o1, out + (size_t)b * T * C, nout(&one) * sizeof *o1) == 0);
    ck_assert(memcmp(d1, dqkv + (size_t)b * T * 3 * C, nqkv(&one) * sizeof *d1) == 0);
    for (int h = 0; h < s.NH; ++h)
      ck_assert(memcmp(l1 + (size_t)h * len, lse + ((size_t)b * s.NH + h) * T,
                       (size_t)len * sizeof *l1) == 0);
    matrix_attention(&one, mo, md, g1, q1);
    ck_assert_double_le(normwise(o1, mo, nout(&one)), TOL_OUT);
    ck_assert_double_le(normwise(d1, md, nqkv(&one)), TOL_GRAD);
  }
  /* lens all T is the same as no lens */
  const int32_t full[4] = {150, 150, 150, 150};
  float *o2 = fnan(nout(&s)), *o3 = fnan(nout(&s));
  flash_fwd(&s, o2, NULL, qkv, full);
  flash_fwd(&s, o3, NULL, qkv, NULL);
  ck_assert(memcmp(o2, o3, nout(&s) * sizeof *o2) == 0);
}
END_TEST

START_TEST(test_flash_is_deterministic) {
  const shape_t s = {2, 300, 128, 4};
  const int32_t lens[2] = {300, 187};
  const float *qkv = frand(nqkv(&s), 1.0f), *dout = frand(nout(&s), 1.0f);
  float *o[2], *l[2], *d[2];
  for (int r = 0; r < 2; ++r) {
    o[r] = fnan(nout(&s)), l[r] = fnan(nrow(&s)), d[r] = fnan(nqkv(&s));
    flash_fwd(&s, o[r], l[r], qkv, lens);
    flash_bwd(&s, d[r], dout, qkv, o[r], l[r], lens);
  }
  ck_assert(memcmp(o[0], o[1], nout(&s) * sizeof(float)) == 0);
  ck_assert(memcmp(l[0], l[1], nrow(&s) * sizeof(float)) == 0);
  ck_assert(memcmp(d[0], d[1], nqkv(&s) * sizeof(float)) == 0);
}
END_TEST

/* Half buffers of n values from fp32 (rounded), and back. */
static void *to_half(ddp_dtype_t dt, const float *x, size_t n) {
  void *h = ddp_test_track(malloc(n * 2 + 2));
  ck_assert_int_eq(ddp_convert_host(h, dt, x, DDP_DTYPE_F32, n), DDP_OK);
  return h;
}

static float *from_half(ddp_dtype_t dt, const void *h, size_t n) {
  float *x = fbuf(n);
  ck_assert_int_eq(ddp_convert_host(x, DDP_DTYPE_F32, h, dt, n), DDP_OK);
  return x;
}

START_TEST(test_flash_half_is_fp32_rounded_once) {
  const shape_t s = {3, 130, 96, 3};
  const int32_t lens[3] = {130, 77, 0};
  const ddp_dtype_t dts[2] = {DDP_DTYPE_BF16, DDP_DTYPE_F16};
  const double tol[2] = {1.6e-2, 2e-3};
  const float *qkv = frand(nqkv(&s), 1.0f), *dout = frand(nout(&s), 1.0f);
  float *ref = fnan(nout(&s)), *rl = fnan(nrow(&s)), *rd = fnan(nqkv(&s));
  flash_fwd(&s, ref, rl, qkv, lens);
  flash_bwd(&s, rd, dout, qkv, ref, rl, lens);
  for (int k = 0; k < 2; ++k) {
    const ddp_dtype_t dt = dts[k];
    ck_assert_int_eq(nn->reserve(g_be, dt, (int64_t)s.B * s.T, s.C, 50), DDP_OK);
    void *hq = to_half(dt, qkv, nqkv(&s)), *hg = to_half(dt, dout, nout(&s));
    void *ho = to_half(dt, fnan(nout(&s)), nout(&s)), *hd = to_half(dt, fnan(nqkv(&s)), nqkv(&s));
    float *hl = fnan(nrow(&s)), *scratch = fnan(nrow(&s));
    ck_assert_int_eq(nn->flash_attention_fwd(g_be, dt, ho, hl, hq, lens, s.B, s.T, s.C, s.NH, NULL),
                     DDP_OK);
    ck_assert_int_eq(nn->flash_attention_bwd(g_be, dt, hd, scratch, hg, hq, ho, hl, lens, s.B, s.T,
                                             s.C, s.NH, NULL),
                     DDP_OK);
    /* fp32 on exactly the widened operands, each output rounded once */
    const float *wq = from_half(dt, hq, nqkv(&s)), *wg = from_half(dt, hg, nout(&s));
    const float *wo = from_half(dt, ho, nout(&s));
    float *fo = fnan(nout(&s)), *fl = fnan(nrow(&s)), *fd = fnan(nqkv(&s));
    flash_fwd(&s, fo, fl, wq, lens);
    flash_bwd(&s, fd, wg, wq, wo, fl, lens); /* out as stored in dt */
    ck_assert(memcmp(to_half(dt, fo, nout(&s)), ho, nout(&s) * 2) == 0);
    ck_assert(memcmp(fl, hl, nrow(&s) * sizeof *fl) == 0);
    ck_assert(memcmp(to_half(dt, fd, nqkv(&s)), hd, nqkv(&s) * 2) == 0);
    /* and close to fp32 on the unrounded inputs */
    const double eo = normwise(from_half(dt, ho, nout(&s)), ref, nout(&s));
    const double ed = normwise(from_half(dt, hd, nqkv(&s)), rd, nqkv(&s));
    ck_assert_msg(eo <= tol[k] && ed <= tol[k], "%s: out %.3g dqkv %.3g", ddp_dtype_name(dt), eo,
                  ed);
    nn->release(g_be);
  }
}
END_TEST

#define EXPECT_REJECT(call, needle)             \
  do {                                          \
    ddp_test_log_start();                       \
    const ddp_status_t st_ = (call);            \
    char *log_ = ddp_test_log_stop();           \
    ck_assert_int_eq(st_, DDP_ERR_INVALID_ARG); \
    ddp_assert_contains(log_, needle);          \
    free(log_);                                 \
  } while (0)

START_TEST(test_flash_rejects_bad_arguments) {
  const shape_t s = {2, 9, 12, 3};
  const float *qkv = frand(nqkv(&s), 1.0f), *dout = frand(nout(&s), 1.0f);
  float *out = fnan(nout(&s)), *lse = fnan(nrow(&s)), *dqkv = fnan(nqkv(&s));
  float *scratch = fnan(nrow(&s));
  int32_t lens[2] = {9, 10};
  const ddp_dtype_t f = DDP_DTYPE_F32;
  EXPECT_REJECT(nn->flash_attention_fwd(g_be, f, NULL, lse, qkv, NULL, 2, 9, 12, 3, NULL), "NULL");
  EXPECT_REJECT(nn->flash_attention_fwd(g_be, f, out, lse, NULL, NULL, 2, 9, 12, 3, NULL), "NULL");
  EXPECT_REJECT(nn->flash_attention_fwd(g_be, f, out, lse, qkv, NULL, 2, 9, 12, 5, NULL),
                "C=12 is not a multiple of NH=5");
  EXPECT_REJECT(nn->flash_attention_fwd(g_be, f, out, lse, qkv, NULL, 0, 9, 12, 3, NULL), "B=0");
  EXPECT_REJECT(nn->flash_attention_fwd(g_be, f, out, lse, qkv, lens, 2, 9, 12, 3, NULL),
                "lens[1]=10 is outside [0, T=9]");
  lens[1] = -1;
  EXPECT_REJECT(nn->flash_attention_fwd(g_be, f, out, lse, qkv, lens, 2, 9, 12, 3, NULL),
                "lens[1]=-1");
  EXPECT_REJECT(
      nn->flash_attention_fwd(g_be, DDP_DTYPE_I32, out, lse, qkv, NULL, 2, 9, 12, 3, NULL),
      "activation dtype int32");
  EXPECT_REJECT(
      nn->flash_attention_bwd(g_be, f, dqkv, NULL, dout, qkv, out, lse, NULL, 2, 9, 12, 3, NULL),
      "NULL");
  EXPECT_REJECT(nn->flash_attention_bwd(g_be, f, dqkv, scratch, dout, qkv, out, NULL, NULL, 2, 9,
                                        12, 3, NULL),
                "NULL");
  EXPECT_REJECT(
      nn->flash_attention_bwd(g_be, f, dqkv, scratch, dout, qkv, out, lse, lens, 2, 9, 12, 3, NULL),
      "lens[1]=-1 is outside");
  EXPECT_REJECT(
      nn->flash_attention_bwd(g_be, f, dqkv, scratch, dout, qkv, out, lse, NULL, 2, 9, 12, 0, NULL),
      "NH=0");
  /* half precision without reserve(): the workspace is missing */
  EXPECT_REJECT(
      nn->flash_attention_fwd(g_be, DDP_DTYPE_BF16, out, lse, qkv, NULL, 2, 9, 12, 3, NULL),
      "reserve()");
  /* nothing was written */
  for (size_t i = 0; i < nout(&s); ++i) expect(isnan(out[i]));
  for (size_t i = 0; i < nrow(&s); ++i) expect(isnan(lse[i]) && isnan(scratch[i]));
  for (size_t i = 0; i < nqkv(&s); ++i) expect(isnan(dqkv[i]));
}
END_TEST

#if DDP_HAVE_CUDA
/* The CUDA launcher's shared-memory need (a host computation): every
 * tensor-core head size fits the 163 KiB opt-in limit of sm_80 (so an A100
 * or H100 takes the tensor-core path for all of them), hs = 128 exceeds the
 * 99 KiB of sm_86 / sm_89 (which must therefore fall back to the CUDA-core
 * kernels rather than fail cudaFuncSetAttribute), the need grows with hs,
 * and head sizes without tensor-core kernels need nothing. */
START_TEST(test_flash_cuda_tc_smem_fits_device_limits) {
  const size_t sm80_optin = 163 * 1024, sm86_optin = 99 * 1024;
  const int hs[] = {16, 32, 64, 128};
  size_t prev = 0;
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; ++i) {
    const size_t need = ddp_cuda_flash_attention_tc_smem_bytes(hs[i]);
    ck_assert_msg(need > 0 && need <= sm80_optin, "hs %d: %zu bytes", hs[i], need);
    ck_assert_msg(need > prev, "hs %d: %zu bytes, not more than the smaller head's %zu", hs[i],
                  need, prev);
    prev = need;
  }
  ck_assert_uint_gt(ddp_cuda_flash_attention_tc_smem_bytes(128), sm86_optin);
  ck_assert_uint_le(ddp_cuda_flash_attention_tc_smem_bytes(64), sm86_optin);
  const int none[] = {0, 8, 12, 48, 96, 160, -16};
  for (size_t i = 0; i < sizeof none / sizeof none[0]; ++i)
    ck_assert_uint_eq(ddp_cuda_flash_attention_tc_smem_bytes(none[i]), 0);
}
END_TEST
#endif

static Suite *flash_suite(void) {
  Suite *s = suite_create("flash_attention");
  TCase *tc = tcase_create("cpu");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_flash_fwd_matches_matrix_attention);
  tcase_add_test(tc, test_flash_bwd_matches_matrix_attention);
  tcase_add_test(tc, test_flash_bwd_finite_differences);
  tcase_add_test(tc, test_flash_lens_match_truncated_sequences);
  tcase_add_test(tc, test_flash_is_deterministic);
  tcase_add_test(tc, test_flash_half_is_fp32_rounded_once);
  tcase_add_test(tc, test_flash_rejects_bad_arguments);
#if DDP_HAVE_CUDA
  tcase_add_test(tc, test_flash_cuda_tc_smem_fits_device_limits);
#endif
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(flash_suite());
}
