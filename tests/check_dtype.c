/* Check suite for src/core/dtype.c and src/tensor.c.
 *
 * The half conversions are the oracle for every GPU conversion kernel, so they
 * are tested against references that share no code with them: widening over
 * all 65,536 patterns of both formats (bf16: a 16-bit shift; fp16: GCC's
 * _Float16 where the compiler has it, else exact ldexp arithmetic), narrowing
 * at every rounding tie of both formats, and a strided sweep over all 2^32
 * fp32 patterns against _Float16 casts and a libm-based round-to-nearest-even
 * reference. Exit status: 0 when every test passes, 1 otherwise. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/dtype.h"
#include "ddptrain/log.h"
#include "check_util.h"
#include "core/tensor.h"

/* GCC defines __FLT16_MANT_DIG__ exactly when _Float16 is usable. */
#ifdef __FLT16_MANT_DIG__
#define HAVE_FLOAT16 1
#else
#define HAVE_FLOAT16 0
#endif

/* Prime, so the sweep visits every residue class of the low bits (mantissa
 * patterns, round and sticky bits) and not a lattice. */
#define SWEEP_STRIDE 1031u

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

static int is_nan_bits(uint32_t u) {
  return (u & 0x7FFFFFFFu) > 0x7F800000u;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rng_u32(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

/* Lines logged since ddp_test_log_start(): an error is logged once. */
static int log_capture_end(void) {
  char *text = ddp_test_log_stop();
  int lines = 0;
  for (const char *c = text; *c; ++c) lines += *c == '\n';
  free(text);
  return lines;
}

/* ---- a description of each half format, for tests run on both -------- */

typedef struct half_fmt {
  const char *name;
  uint16_t (*narrow)(float);
  float (*widen)(uint16_t);
  uint16_t max_finite; /* pattern; max_finite + 1 is +inf */
  uint16_t qnan;       /* canonical quiet NaN, positive */
  double top;          /* the power of two just past max_finite */
  int mant_bits;
  int emin;
} half_fmt_t;

static const half_fmt_t k_bf16 = {
    "bf16", ddp_f32_to_bf16, ddp_bf16_to_f32, 0x7F7F, 0x7FC0, 0x1p128, 7, -126};
static const half_fmt_t k_f16 = {"fp16", ddp_f32_to_f16, ddp_f16_to_f32, 0x7BFF, 0x7E00, 0x1p16, 10,
                                 -14};

/* Round finite x to the format by arithmetic: scale so the format's quantum
 * at x's exponent is 1, round with nearbyint (the default mode is
 * nearest-even), scale back. Every step is exact in double. */
static float ref_round(float x, const half_fmt_t *f) {
  double ax = fabs((double)x);
  if (ax == 0.0) return x;
  int e;
  (void)frexp(ax, &e); /* ax in [2^(e-1), 2^e) */
  int q = (e - 1 < f->emin ? f->emin : e - 1) - f->mant_bits;
  double r = ldexp(nearbyint(ldexp(ax, -q)), q);
  if (r > (double)f->widen(f->max_finite)) r = INFINITY;
  return (float)copysign(r, (double)x);
}

/* ---- dtype table ------------------------------------------------------- */

START_TEST(test_dtype_size_name_is_float) {
  ck_assert_uint_eq(ddp_dtype_size(DDP_DTYPE_F32), 4);
  ck_assert_uint_eq(ddp_dtype_size(DDP_DTYPE_BF16), 2);
  ck_assert_uint_eq(ddp_dtype_size(DDP_DTYPE_F16), 2);
  ck_assert_uint_eq(ddp_dtype_size(DDP_DTYPE_I32), 4);
  ck_assert_uint_eq(ddp_dtype_size(DDP_DTYPE_COUNT_), 0);
  ck_assert_uint_eq(ddp_dtype_size((ddp_dtype_t)-1), 0);
  ck_assert_str_eq(ddp_dtype_name(DDP_DTYPE_F32), "fp32");
  ck_assert_str_eq(ddp_dtype_name(DDP_DTYPE_BF16), "bf16");
  ck_assert_str_eq(ddp_dtype_name(DDP_DTYPE_F16), "fp16");
  ck_assert_str_eq(ddp_dtype_name(DDP_DTYPE_I32), "int32");
  ck_assert_str_eq(ddp_dtype_name((ddp_dtype_t)99), "invalid");
  ck_assert_str_eq(ddp_dtype_name((ddp_dtype_t)-1), "invalid");
  ck_assert(ddp_dtype_is_float(DDP_DTYPE_F32));
  ck_assert(ddp_dtype_is_float(DDP_DTYPE_BF16));
  ck_assert(ddp_dtype_is_float(DDP_DTYPE_F16));
  ck_assert(!ddp_dtype_is_float(DDP_DTYPE_I32));
  ck_assert(!ddp_dtype_is_float(DDP_DTYPE_COUNT_));
}
END_TEST

START_TEST(test_dtype_parse_accepts_spellings) {
  static const struct {
    const char *text;
    ddp_dtype_t want;
  } cases[] = {
      {"fp32", DDP_DTYPE_F32},      {"f32", DDP_DTYPE_F32},       {"float32", DDP_DTYPE_F32},
      {"float", DDP_DTYPE_F32},     {"FP32", DDP_DTYPE_F32},      {"Float", DDP_DTYPE_F32},
      {"bf16", DDP_DTYPE_BF16},     {"bfloat16", DDP_DTYPE_BF16}, {"BF16", DDP_DTYPE_BF16},
      {"BFloat16", DDP_DTYPE_BF16}, {"fp16", DDP_DTYPE_F16},      {"f16", DDP_DTYPE_F16},
      {"float16", DDP_DTYPE_F16},   {"half", DDP_DTYPE_F16},      {"HALF", DDP_DTYPE_F16},
      {"int32", DDP_DTYPE_I32},     {"i32", DDP_DTYPE_I32},       {"INT32", DDP_DTYPE_I32},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    ddp_dtype_t d = DDP_DTYPE_COUNT_;
    ck_assert_msg(ddp_dtype_parse(cases[i].text, &d) == DDP_OK, "parse(\"%s\") failed",
                  cases[i].text);
    ck_assert_msg(d == cases[i].want, "parse(\"%s\") = %d, want %d", cases[i].text, (int)d,
                  (int)cases[i].want);
  }
  /* Names round-trip through parse. */
  for (int t = 0; t < (int)DDP_DTYPE_COUNT_; ++t) {
    ddp_dtype_t d = DDP_DTYPE_COUNT_;
    ck_assert_int_eq(ddp_dtype_parse(ddp_dtype_name((ddp_dtype_t)t), &d), DDP_OK);
    ck_assert_int_eq((int)d, t);
  }
}
END_TEST

START_TEST(test_dtype_parse_rejects_bad_input) {
  static const char *const bad[] = {"fp8", "",    "fp3",   "fp322",  " fp32",   "fp32 ",
                                    "bf",  "int", "int64", "double", "invalid", "f 32"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    ddp_dtype_t d = DDP_DTYPE_BF16;
    ck_assert_msg(ddp_dtype_parse(bad[i], &d) == DDP_ERR_INVALID_ARG, "parse(\"%s\") accepted",
                  bad[i]);
    ck_assert_msg(d == DDP_DTYPE_BF16, "parse(\"%s\") wrote its output on failure", bad[i]);
  }
  ddp_dtype_t d;
  ck_assert_int_eq(ddp_dtype_parse(NULL, &d), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_dtype_parse("fp32", NULL), DDP_ERR_INVALID_ARG);
}
END_TEST

/* ---- widening, exhaustive --------------------------------------------- */

START_TEST(test_dtype_bf16_widen_exhaustive) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    uint32_t got = bits_of(ddp_bf16_to_f32((uint16_t)h));
    if (got != h << 16) ck_abort_msg("bf16 0x%04X -> 0x%08X, want 0x%08X", h, got, h << 16);
  }
}
END_TEST

/* The value of an fp16 pattern by exact arithmetic (used when the compiler
 * has no _Float16). */
static float f16_value_by_ldexp(uint16_t h) {
  int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 0x400), e - 25);
  return (h & 0x8000) ? -v : v;
}

START_TEST(test_dtype_f16_widen_exhaustive) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    uint32_t got = bits_of(ddp_f16_to_f32((uint16_t)h));
    uint32_t want;
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0) {
      /* NaN: the reference would quiet a signalling NaN, our policy keeps the
       * payload exactly. */
      want = ((h & 0x8000u) << 16) | 0x7F800000u | ((h & 0x3FFu) << 13);
    } else if ((h & 0x7C00) == 0x7C00) {
      want = ((h & 0x8000u) << 16) | 0x7F800000u;
    } else {
#if HAVE_FLOAT16
      uint16_t hh = (uint16_t)h;
      _Float16 x;
      memcpy(&x, &hh, sizeof x);
      want = bits_of((float)x);
      /* Both references must agree; a disagreement is a broken reference. */
      ck_assert_uint_eq(want, bits_of(f16_value_by_ldexp((uint16_t)h)));
#else
      want = bits_of(f16_value_by_ldexp((uint16_t)h));
#endif
    }
    if (got != want) ck_abort_msg("fp16 0x%04X -> 0x%08X, want 0x%08X", h, got, want);
  }
}
END_TEST

/* ---- narrowing of every half value, exhaustive ------------------------ */

static void check_roundtrip_exhaustive(const half_fmt_t *f) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    uint32_t wide = bits_of(f->widen((uint16_t)h));
    uint16_t back = f->narrow(float_of(wide));
    uint16_t want = is_nan_bits(wide) ? (uint16_t)((h & 0x8000) | f->qnan) : (uint16_t)h;
    if (back != want)
      ck_abort_msg("%s 0x%04X -> fp32 0x%08X -> 0x%04X, want 0x%04X", f->name, h, wide, back, want);
  }
}

START_TEST(test_dtype_bf16_roundtrip_exhaustive) {
  check_roundtrip_exhaustive(&k_bf16);
}
END_TEST

START_TEST(test_dtype_f16_roundtrip_exhaustive) {
  check_roundtrip_exhaustive(&k_f16);
}
END_TEST

/* ---- rounding at every tie -------------------------------------------- */

/* For each pair of adjacent non-negative values (h, h + 1), from (0, smallest
 * subnormal) to (max finite, inf), the fp32 midpoint must round to the one
 * with an even pattern and its fp32 neighbours to the nearer one; same for
 * the negatives. */
static void check_midpoints(const half_fmt_t *f) {
  for (uint32_t h = 0; h <= f->max_finite; ++h) {
    double a = (double)f->widen((uint16_t)h);
    double b = h < f->max_finite ? (double)f->widen((uint16_t)(h + 1)) : f->top;
    double mid = (a + b) / 2; /* exact: both are floats of nearby magnitude */
    float mf = (float)mid;
    ck_assert_msg((double)mf == mid, "%s: midpoint after 0x%04X not exact in fp32", f->name, h);
    float below = nextafterf(mf, 0.0f), above = nextafterf(mf, INFINITY);
    uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
    for (int neg = 0; neg <= 1; ++neg) {
      uint16_t s = neg ? 0x8000 : 0;
      float sg = neg ? -1.0f : 1.0f;
      uint16_t got_mid = f->narrow(sg * mf);
      uint16_t got_below = f->narrow(sg * below);
      uint16_t got_above = f->narrow(sg * above);
      if (got_mid != (s | even))
        ck_abort_msg("%s: tie 0x%08X -> 0x%04X, want 0x%04X", f->name, bits_of(sg * mf), got_mid,
                     s | even);
      if (got_below != (s | h))
        ck_abort_msg("%s: tie-1ulp 0x%08X -> 0x%04X, want 0x%04X", f->name, bits_of(sg * below),
                     got_below, s | h);
      if (got_above != (s | (h + 1)))
        ck_abort_msg("%s: tie+1ulp 0x%08X -> 0x%04X, want 0x%04X", f->name, bits_of(sg * above),
                     got_above, s | (h + 1));
    }
  }
}

START_TEST(test_dtype_bf16_midpoints_round_to_even) {
  check_midpoints(&k_bf16);
}
END_TEST

START_TEST(test_dtype_f16_midpoints_round_to_even) {
  check_midpoints(&k_f16);
}
END_TEST

/* ---- strided sweep of all fp32 patterns ------------------------------- */

static void check_sweep_against_ref_round(const half_fmt_t *f) {
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += SWEEP_STRIDE) {
    if (is_nan_bits((uint32_t)u)) continue; /* policy, tested separately */
    float x = float_of((uint32_t)u);
    uint16_t got = f->narrow(x);
    uint32_t got_wide = bits_of(f->widen(got));
    uint32_t want_wide = bits_of(isinf(x) ? x : ref_round(x, f));
    if (got_wide != want_wide)
      ck_abort_msg("%s: fp32 0x%08X -> 0x%04X (0x%08X), reference 0x%08X", f->name, (uint32_t)u,
                   got, got_wide, want_wide);
  }
}

START_TEST(test_dtype_bf16_sweep_matches_reference) {
  check_sweep_against_ref_round(&k_bf16);
}
END_TEST

START_TEST(test_dtype_f16_sweep_matches_reference) {
  check_sweep_against_ref_round(&k_f16);
}
END_TEST

START_TEST(test_dtype_f16_sweep_matches_float16_cast) {
#if HAVE_FLOAT16
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += SWEEP_STRIDE) {
    if (is_nan_bits((uint32_t)u)) continue; /* NaN policy differs by design */
    float x = float_of((uint32_t)u);
    _Float16 y = (_Float16)x;
    uint16_t want;
    memcpy(&want, &y, sizeof want);
    uint16_t got = ddp_f32_to_f16(x);
    if (got != want)
      ck_abort_msg("fp32 0x%08X -> 0x%04X, (_Float16) gives 0x%04X", (uint32_t)u, got, want);
  }
#else
  fprintf(stderr, "check_dtype: no _Float16 in this compiler; cast comparison not run\n");
#endif
}
END_TEST

/* ---- special values ---------------------------------------------------- */

START_TEST(test_dtype_nan_inputs_become_canonical) {
  /* Every fp32 NaN, quiet and signalling, both signs. */
  for (uint32_t m = 1; m <= 0x7FFFFFu; ++m) {
    for (uint32_t s = 0; s <= 1; ++s) {
      float x = float_of((s << 31) | 0x7F800000u | m);
      uint16_t b = ddp_f32_to_bf16(x), h = ddp_f32_to_f16(x);
      if (b != ((s << 15) | 0x7FC0u) || h != ((s << 15) | 0x7E00u))
        ck_abort_msg("NaN 0x%08X -> bf16 0x%04X, fp16 0x%04X", bits_of(x), b, h);
    }
  }
  ck_assert_uint_eq(ddp_f32_to_bf16(NAN), 0x7FC0);
  ck_assert_uint_eq(ddp_f32_to_f16(NAN), 0x7E00);
  ck_assert_uint_eq(ddp_f32_to_bf16(-NAN), 0xFFC0);
  ck_assert_uint_eq(ddp_f32_to_f16(-NAN), 0xFE00);
  /* Widening keeps payloads, including the signalling bit pattern. */
  ck_assert_uint_eq(bits_of(ddp_bf16_to_f32(0x7F81)), 0x7F810000u);
  ck_assert_uint_eq(bits_of(ddp_f16_to_f32(0xFC01)), 0xFF802000u);
}
END_TEST

START_TEST(test_dtype_zeros_infs_subnormals) {
  const float fmin_sub = float_of(0x00000001u); /* 2^-149 */
  /* Signed zeros and infinities survive both ways. */
  ck_assert_uint_eq(ddp_f32_to_bf16(0.0f), 0x0000);
  ck_assert_uint_eq(ddp_f32_to_bf16(-0.0f), 0x8000);
  ck_assert_uint_eq(ddp_f32_to_f16(0.0f), 0x0000);
  ck_assert_uint_eq(ddp_f32_to_f16(-0.0f), 0x8000);
  ck_assert_uint_eq(ddp_f32_to_bf16(INFINITY), 0x7F80);
  ck_assert_uint_eq(ddp_f32_to_bf16(-INFINITY), 0xFF80);
  ck_assert_uint_eq(ddp_f32_to_f16(INFINITY), 0x7C00);
  ck_assert_uint_eq(ddp_f32_to_f16(-INFINITY), 0xFC00);
  ck_assert_uint_eq(bits_of(ddp_bf16_to_f32(0x8000)), 0x80000000u);
  ck_assert_uint_eq(bits_of(ddp_f16_to_f32(0x8000)), 0x80000000u);
  ck_assert_uint_eq(bits_of(ddp_f16_to_f32(0x7C00)), 0x7F800000u);
  ck_assert_uint_eq(bits_of(ddp_f16_to_f32(0xFC00)), 0xFF800000u);

  /* fp32 subnormals: bf16 shares fp32's exponent range, so they round within
   * bf16's own subnormals; for fp16 they are far below half the smallest
   * subnormal and become zero of the same sign. */
  ck_assert_uint_eq(ddp_f32_to_bf16(fmin_sub), 0x0000);
  ck_assert_uint_eq(ddp_f32_to_bf16(-fmin_sub), 0x8000);
  ck_assert_uint_eq(ddp_f32_to_bf16(float_of(0x00008000u)), 0x0000); /* tie to even 0 */
  ck_assert_uint_eq(ddp_f32_to_bf16(float_of(0x00008001u)), 0x0001);
  ck_assert_uint_eq(ddp_f32_to_bf16(float_of(0x00018000u)), 0x0002); /* tie to even 2 */
  ck_assert_uint_eq(ddp_f32_to_bf16(float_of(0x007FFFFFu)), 0x0080); /* to FLT_MIN */
  ck_assert_uint_eq(ddp_f32_to_bf16(float_of(0x807F7FFFu)), 0x807F);
  ck_assert_uint_eq(bits_of(ddp_bf16_to_f32(0x0001)), 0x00010000u);
  ck_assert_uint_eq(ddp_f32_to_f16(fmin_sub), 0x0000);
  ck_assert_uint_eq(ddp_f32_to_f16(-fmin_sub), 0x8000);
  ck_assert_uint_eq(ddp_f32_to_f16(float_of(0x007FFFFFu)), 0x0000);
  ck_assert_uint_eq(ddp_f32_to_f16(FLT_MIN), 0x0000);

  /* fp16 subnormal edges. */
  ck_assert_uint_eq(ddp_f32_to_f16(0x1p-24f), 0x0001);
  ck_assert_uint_eq(ddp_f32_to_f16(0x1p-25f), 0x0000); /* tie to even 0 */
  ck_assert_uint_eq(ddp_f32_to_f16(-0x1p-25f), 0x8000);
  ck_assert_uint_eq(ddp_f32_to_f16(nextafterf(0x1p-25f, 1.0f)), 0x0001);
  ck_assert_uint_eq(ddp_f32_to_f16(0x1.8p-24f), 0x0002); /* 1.5 ulp: tie to even 2 */
  ck_assert_uint_eq(ddp_f32_to_f16(0x1p-14f), 0x0400);   /* smallest normal */
  ck_assert_uint_eq(ddp_f32_to_f16(1023.5f * 0x1p-24f), 0x0400);
  ck_assert_uint_eq(ddp_f32_to_f16(nextafterf(0x1p-14f, 0.0f)), 0x0400);
  ck_assert_uint_eq(bits_of(ddp_f16_to_f32(0x0001)), bits_of(0x1p-24f));
  ck_assert_uint_eq(bits_of(ddp_f16_to_f32(0x03FF)), bits_of(1023.0f * 0x1p-24f));

  /* A few ordinary values. */
  ck_assert_uint_eq(ddp_f32_to_f16(1.0f), 0x3C00);
  ck_assert_uint_eq(ddp_f32_to_f16(-2.0f), 0xC000);
  ck_assert_uint_eq(ddp_f32_to_bf16(1.0f), 0x3F80);
  ck_assert_uint_eq(ddp_f32_to_bf16(-2.0f), 0xC000);
  ck_assert_uint_eq(ddp_f32_to_bf16(3.140625f), 0x4049);
}
END_TEST

START_TEST(test_dtype_f16_overflow_threshold) {
  ck_assert_uint_eq(ddp_f32_to_f16(65504.0f), 0x7BFF);
  ck_assert_uint_eq(ddp_f32_to_f16(65520.0f), 0x7C00); /* tie: 0x7BFF is odd */
  ck_assert_uint_eq(ddp_f32_to_f16(-65520.0f), 0xFC00);
  ck_assert_uint_eq(ddp_f32_to_f16(65519.99f), 0x7BFF);
  ck_assert_uint_eq(ddp_f32_to_f16(nextafterf(65520.0f, 0.0f)), 0x7BFF);
  ck_assert_uint_eq(ddp_f32_to_f16(-nextafterf(65520.0f, 0.0f)), 0xFBFF);
  ck_assert_uint_eq(ddp_f32_to_f16(65536.0f), 0x7C00);
  ck_assert_uint_eq(ddp_f32_to_f16(1e10f), 0x7C00);
  ck_assert_uint_eq(ddp_f32_to_f16(FLT_MAX), 0x7C00);
  ck_assert_uint_eq(ddp_f32_to_f16(-FLT_MAX), 0xFC00);
}
END_TEST

START_TEST(test_dtype_bf16_overflow_threshold) {
  ck_assert_uint_eq(ddp_f32_to_bf16(float_of(0x7F7F0000u)), 0x7F7F); /* max finite */
  ck_assert_uint_eq(ddp_f32_to_bf16(float_of(0x7F7F7FFFu)), 0x7F7F);
  ck_assert_uint_eq(ddp_f32_to_bf16(float_of(0x7F7F8000u)), 0x7F80); /* tie: 0x7F7F is odd */
  ck_assert_uint_eq(ddp_f32_to_bf16(FLT_MAX), 0x7F80);
  ck_assert_uint_eq(ddp_f32_to_bf16(-FLT_MAX), 0xFF80);
  ck_assert_uint_eq(ddp_f32_to_bf16(float_of(0x7F7E8000u)), 0x7F7E); /* tie: 0x7F7E even */
  ck_assert_uint_eq(ddp_f32_to_bf16(float_of(0x7F7E8001u)), 0x7F7F);
}
END_TEST

/* ---- rounding in fp32 storage ------------------------------------------ */

/* ddp_round_host over the strided sweep (NaNs included): in place and out of
 * place, the result is the widened narrowing, bit for bit, so fp32 slots
 * hold exactly what half storage would. */
static void check_round_sweep(const half_fmt_t *f, ddp_dtype_t dtype) {
  enum { CHUNK = 4099 };
  static float in[CHUNK], out[CHUNK];
  size_t k = 0;
  for (uint64_t u = 0;; u += SWEEP_STRIDE) {
    const int last = u > 0xFFFFFFFFull;
    if (!last) in[k++] = float_of((uint32_t)u);
    if (k == CHUNK || (last && k)) {
      ck_assert_int_eq(ddp_round_host(out, in, dtype, k), DDP_OK);
      for (size_t i = 0; i < k; ++i) {
        const uint32_t want = bits_of(f->widen(f->narrow(in[i])));
        if (bits_of(out[i]) != want)
          ck_abort_msg("%s: round 0x%08X -> 0x%08X, want 0x%08X", f->name, bits_of(in[i]),
                       bits_of(out[i]), want);
      }
      ck_assert_int_eq(ddp_round_host(in, in, dtype, k), DDP_OK); /* in place */
      ck_assert_int_eq(memcmp(in, out, k * sizeof *in), 0);
      k = 0;
    }
    if (last) break;
  }
}

START_TEST(test_dtype_round_host_matches_round_trip) {
  check_round_sweep(&k_bf16, DDP_DTYPE_BF16);
  check_round_sweep(&k_f16, DDP_DTYPE_F16);
  /* Edges: fp16 overflow to inf and underflow to (signed) zero. */
  float x[6] = {65520.0f, -65520.0f, 0x1p-26f, -0x1p-26f, 0x1p-25f * 1.5f, 1.0f + 0x1p-11f};
  ck_assert_int_eq(ddp_round_host(x, x, DDP_DTYPE_F16, 6), DDP_OK);
  ck_assert(isinf(x[0]) && x[0] > 0 && isinf(x[1]) && x[1] < 0);
  ck_assert_uint_eq(bits_of(x[2]), 0u);
  ck_assert_uint_eq(bits_of(x[3]), 0x80000000u);
  ck_assert(x[4] == 0x1p-24f); /* above half the smallest subnormal: rounds up */
  ck_assert(x[5] == 1.0f);     /* tie: even */
  float y[2] = {0.1f, -3.0f}, z[2];
  ck_assert_int_eq(ddp_round_host(z, y, DDP_DTYPE_F32, 2), DDP_OK); /* fp32: a copy */
  ck_assert_int_eq(memcmp(y, z, sizeof y), 0);
}
END_TEST

START_TEST(test_dtype_round_host_invalid_args) {
  float a[4] = {0};
  ddp_test_log_start();
  ck_assert_int_eq(ddp_round_host(a, a, DDP_DTYPE_I32, 4), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_round_host(NULL, a, DDP_DTYPE_BF16, 4), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_round_host(a + 1, a, DDP_DTYPE_BF16, 3), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(log_capture_end(), 3);
  ck_assert_int_eq(ddp_round_host(NULL, NULL, DDP_DTYPE_BF16, 0), DDP_OK);
}
END_TEST

/* ---- bulk conversion --------------------------------------------------- */

static const ddp_dtype_t k_float_types[] = {DDP_DTYPE_F32, DDP_DTYPE_BF16, DDP_DTYPE_F16};

static uint32_t load_elem(const unsigned char *p, ddp_dtype_t t, size_t i) {
  if (t == DDP_DTYPE_F32) {
    uint32_t v;
    memcpy(&v, p + 4 * i, 4);
    return v;
  }
  uint16_t v;
  memcpy(&v, p + 2 * i, 2);
  return v;
}

/* The scalar route, element by element: the bulk path must match it. */
static uint32_t convert_scalar(uint32_t v, ddp_dtype_t dst, ddp_dtype_t src) {
  if (dst == src) return v;
  float x = src == DDP_DTYPE_F32    ? float_of(v)
            : src == DDP_DTYPE_BF16 ? ddp_bf16_to_f32((uint16_t)v)
                                    : ddp_f16_to_f32((uint16_t)v);
  return dst == DDP_DTYPE_F32    ? bits_of(x)
         : dst == DDP_DTYPE_BF16 ? ddp_f32_to_bf16(x)
                                 : ddp_f32_to_f16(x);
}

/* Converts n random elements from src+offset to dst+offset (byte offsets, so
 * misaligned buffers are covered) and compares with the scalar route. */
static void check_bulk(ddp_dtype_t dst_t, ddp_dtype_t src_t, size_t n, size_t offset) {
  size_t ssz = ddp_dtype_size(src_t), dsz = ddp_dtype_size(dst_t);
  unsigned char *sbuf = malloc(n * ssz + offset + 1);
  unsigned char *dbuf = malloc(n * dsz + offset + 1);
  ck_assert_ptr_nonnull(sbuf);
  ck_assert_ptr_nonnull(dbuf);
  unsigned char *s = sbuf + offset, *d = dbuf + offset;
  for (size_t i = 0; i < n * ssz; ++i) s[i] = (unsigned char)rng_u32();
  memset(dbuf, 0xA5, n * dsz + offset + 1);
  ck_assert_int_eq(ddp_convert_host(d, dst_t, s, src_t, n), DDP_OK);
  for (size_t i = 0; i < n; ++i) {
    uint32_t in = load_elem(s, src_t, i);
    uint32_t got = load_elem(d, dst_t, i);
    uint32_t want = convert_scalar(in, dst_t, src_t);
    if (got != want)
      ck_abort_msg("%s -> %s, n %zu, offset %zu: [%zu] 0x%X -> 0x%X, want 0x%X",
                   ddp_dtype_name(src_t), ddp_dtype_name(dst_t), n, offset, i, in, got, want);
  }
  ck_assert_msg(dbuf[n * dsz + offset] == 0xA5, "wrote past the end");
  for (size_t i = 0; i < offset; ++i) ck_assert_msg(dbuf[i] == 0xA5, "wrote before the start");
  free(sbuf);
  free(dbuf);
}

START_TEST(test_dtype_convert_host_all_pairs) {
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) check_bulk(k_float_types[a], k_float_types[b], 100003, 0);
}
END_TEST

/* Every length around the vector block (so both the blocked loop and the
 * tail run) and misaligned buffers. */
START_TEST(test_dtype_convert_host_lengths_and_alignment) {
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b)
      for (size_t n = 0; n <= 100; ++n)
        for (size_t off = 0; off <= 3; ++off)
          check_bulk(k_float_types[a], k_float_types[b], n, off);
}
END_TEST

START_TEST(test_dtype_convert_host_invalid_args) {
  float f[4] = {0};
  uint16_t h[4] = {0};
  ddp_test_log_start();
  ck_assert_int_eq(ddp_convert_host(h, DDP_DTYPE_BF16, f, DDP_DTYPE_I32, 4), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_convert_host(f, DDP_DTYPE_I32, h, DDP_DTYPE_F16, 4), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_convert_host(f, DDP_DTYPE_I32, f, DDP_DTYPE_I32, 4), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_convert_host(h, (ddp_dtype_t)7, f, DDP_DTYPE_F32, 4), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_convert_host(h, DDP_DTYPE_F16, f, (ddp_dtype_t)-1, 4), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_convert_host(NULL, DDP_DTYPE_F16, f, DDP_DTYPE_F32, 4), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_convert_host(h, DDP_DTYPE_F16, NULL, DDP_DTYPE_F32, 4), DDP_ERR_INVALID_ARG);
  /* Overlap, including the in-place case. */
  ck_assert_int_eq(ddp_convert_host(f, DDP_DTYPE_BF16, f, DDP_DTYPE_F32, 4), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_convert_host((char *)f + 2, DDP_DTYPE_F32, f, DDP_DTYPE_F32, 2),
                   DDP_ERR_INVALID_ARG);
  int lines = log_capture_end();
  ck_assert_int_eq(lines, 9); /* each error logged exactly once */

  /* n == 0 is a no-op that needs no buffers, but the types are still checked. */
  ck_assert_int_eq(ddp_convert_host(NULL, DDP_DTYPE_F16, NULL, DDP_DTYPE_F32, 0), DDP_OK);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_convert_host(NULL, DDP_DTYPE_I32, NULL, DDP_DTYPE_F32, 0),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(log_capture_end(), 1);
  /* Adjacent but disjoint buffers are fine. */
  ck_assert_int_eq(ddp_convert_host(f + 2, DDP_DTYPE_F32, f, DDP_DTYPE_F32, 2), DDP_OK);
}
END_TEST

/* ---- tensors ----------------------------------------------------------- */

START_TEST(test_dtype_tensor_numel_and_bytes) {
  ddp_tensor_t t;
  const int64_t shape[] = {2, 3, 4};
  ck_assert_int_eq(ddp_tensor_init(&t, NULL, DDP_DTYPE_F16, 3, shape), DDP_OK);
  ck_assert_int_eq(ddp_tensor_numel(&t), 24);
  ck_assert_uint_eq(ddp_tensor_bytes(&t), 48);
  ck_assert_int_eq(ddp_tensor_init(&t, NULL, DDP_DTYPE_I32, 3, shape), DDP_OK);
  ck_assert_uint_eq(ddp_tensor_bytes(&t), 96);
  /* Scalar. */
  ck_assert_int_eq(ddp_tensor_init(&t, NULL, DDP_DTYPE_F32, 0, NULL), DDP_OK);
  ck_assert_int_eq(ddp_tensor_numel(&t), 1);
  ck_assert_uint_eq(ddp_tensor_bytes(&t), 4);
  /* Empty. */
  const int64_t empty[] = {5, 0, 7, 9};
  ck_assert_int_eq(ddp_tensor_init(&t, NULL, DDP_DTYPE_BF16, 4, empty), DDP_OK);
  ck_assert_int_eq(ddp_tensor_numel(&t), 0);
  ck_assert_uint_eq(ddp_tensor_bytes(&t), 0);
  ck_assert_int_eq(ddp_tensor_numel(NULL), 0);
  ck_assert_uint_eq(ddp_tensor_bytes(NULL), 0);
}
END_TEST

START_TEST(test_dtype_tensor_init_fills_descriptor) {
  float data[6];
  ddp_tensor_t t;
  memset(&t, 0xEE, sizeof t);
  const int64_t shape[] = {2, 3};
  ck_assert_int_eq(ddp_tensor_init(&t, data, DDP_DTYPE_F32, 2, shape), DDP_OK);
  ck_assert_ptr_eq(t.data, data);
  ck_assert_int_eq(t.dtype, DDP_DTYPE_F32);
  ck_assert_int_eq(t.ndim, 2);
  ck_assert_int_eq(t.shape[0], 2);
  ck_assert_int_eq(t.shape[1], 3);
  ck_assert_int_eq(t.shape[2], 1); /* unused extents are 1 */
  ck_assert_int_eq(t.shape[3], 1);
}
END_TEST

START_TEST(test_dtype_tensor_init_rejects_bad_shapes) {
  ddp_tensor_t t, before;
  memset(&t, 0x5A, sizeof t);
  before = t;
  const int64_t shape5[] = {1, 2, 3, 4, 5};
  const int64_t neg[] = {2, -1, 3};
  const int64_t huge[] = {INT64_MAX / 2, 4};
  const int64_t huge_zero[] = {INT64_MAX, INT64_MAX, 0};
  ddp_test_log_start();
  ck_assert_int_eq(ddp_tensor_init(&t, NULL, DDP_DTYPE_F32, 5, shape5), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_tensor_init(&t, NULL, DDP_DTYPE_F32, -1, shape5), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_tensor_init(&t, NULL, DDP_DTYPE_F32, 3, neg), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_tensor_init(&t, NULL, DDP_DTYPE_F32, 2, huge), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_tensor_init(&t, NULL, DDP_DTYPE_F32, 2, NULL), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_tensor_init(&t, NULL, (ddp_dtype_t)9, 1, shape5), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_tensor_init(NULL, NULL, DDP_DTYPE_F32, 1, shape5), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(log_capture_end(), 7);
  ck_assert_msg(memcmp(&t, &before, sizeof t) == 0, "failed init modified the descriptor");
  /* A zero extent makes any other extent harmless. */
  ck_assert_int_eq(ddp_tensor_init(&t, NULL, DDP_DTYPE_F32, 3, huge_zero), DDP_OK);
  ck_assert_int_eq(ddp_tensor_numel(&t), 0);
}
END_TEST

START_TEST(test_dtype_tensor_shape_str) {
  ddp_tensor_t t;
  char buf[64];
  const int64_t shape[] = {2, 3, 4};
  ck_assert_int_eq(ddp_tensor_init(&t, NULL, DDP_DTYPE_F32, 3, shape), DDP_OK);
  ck_assert_ptr_eq(ddp_tensor_shape_str(&t, buf, sizeof buf), buf);
  ck_assert_str_eq(buf, "[2, 3, 4]");
  ck_assert_int_eq(ddp_tensor_init(&t, NULL, DDP_DTYPE_F32, 0, NULL), DDP_OK);
  ck_assert_str_eq(ddp_tensor_shape_str(&t, buf, sizeof buf), "[]");
  const int64_t big[] = {INT64_MAX / 8};
  ck_assert_int_eq(ddp_tensor_init(&t, NULL, DDP_DTYPE_BF16, 1, big), DDP_OK);
  ck_assert_str_eq(ddp_tensor_shape_str(&t, buf, sizeof buf), "[1152921504606846975]");

  /* Truncation still terminates the string. */
  ck_assert_int_eq(ddp_tensor_init(&t, NULL, DDP_DTYPE_F32, 3, shape), DDP_OK);
  char small[6];
  memset(small, 'x', sizeof small);
  ck_assert_str_eq(ddp_tensor_shape_str(&t, small, sizeof small), "[2, 3");
  char one[1] = {'x'};
  ck_assert_str_eq(ddp_tensor_shape_str(&t, one, 1), "");
  char untouched[2] = {'x', 'y'};
  ck_assert_ptr_eq(ddp_tensor_shape_str(&t, untouched, 0), untouched);
  ck_assert_int_eq(untouched[0], 'x');
  ck_assert_ptr_null(ddp_tensor_shape_str(&t, NULL, 8));
  ck_assert_str_eq(ddp_tensor_shape_str(NULL, buf, sizeof buf), "");
}
END_TEST

/* ---- runner ------------------------------------------------------------ */

static Suite *dtype_suite(void) {
  Suite *s = suite_create("dtype");

  TCase *tc = tcase_create("table");
  tcase_add_test(tc, test_dtype_size_name_is_float);
  tcase_add_test(tc, test_dtype_parse_accepts_spellings);
  tcase_add_test(tc, test_dtype_parse_rejects_bad_input);
  suite_add_tcase(s, tc);

  /* The sweeps take well under a second at -O2 but several under sanitizers. */
  tc = tcase_create("scalar");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_dtype_bf16_widen_exhaustive);
  tcase_add_test(tc, test_dtype_round_host_matches_round_trip);
  tcase_add_test(tc, test_dtype_round_host_invalid_args);
  tcase_add_test(tc, test_dtype_f16_widen_exhaustive);
  tcase_add_test(tc, test_dtype_bf16_roundtrip_exhaustive);
  tcase_add_test(tc, test_dtype_f16_roundtrip_exhaustive);
  tcase_add_test(tc, test_dtype_bf16_midpoints_round_to_even);
  tcase_add_test(tc, test_dtype_f16_midpoints_round_to_even);
  tcase_add_test(tc, test_dtype_bf16_sweep_matches_reference);
  tcase_add_test(tc, test_dtype_f16_sweep_matches_reference);
  tcase_add_test(tc, test_dtype_f16_sweep_matches_float16_cast);
  tcase_add_test(tc, test_dtype_nan_inputs_become_canonical);
  tcase_add_test(tc, test_dtype_zeros_infs_subnormals);
  tcase_add_test(tc, test_dtype_f16_overflow_threshold);
  tcase_add_test(tc, test_dtype_bf16_overflow_threshold);
  suite_add_tcase(s, tc);

  tc = tcase_create("bulk");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_dtype_convert_host_all_pairs);
  tcase_add_test(tc, test_dtype_convert_host_lengths_and_alignment);
  tcase_add_test(tc, test_dtype_convert_host_invalid_args);
  suite_add_tcase(s, tc);

  tc = tcase_create("tensor");
  tcase_add_test(tc, test_dtype_tensor_numel_and_bytes);
  tcase_add_test(tc, test_dtype_tensor_init_fills_descriptor);
  tcase_add_test(tc, test_dtype_tensor_init_rejects_bad_shapes);
  tcase_add_test(tc, test_dtype_tensor_shape_str);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(dtype_suite());
}
