/* Element types and host-side fp32 <-> bf16/fp16 conversion (see ddptrain/dtype.h).
 *
 * Everything here is integer arithmetic on bit patterns: results do not depend
 * on the FP rounding mode, on FTZ/DAZ, or on whether the compiler has a half
 * type, and no FP exception flag is ever raised. The GPU kernels in
 * kernels/convert.cu are tested bit for bit against these functions, so these
 * are the definition of "correct" for the whole project.
 *
 * The scalar helpers are branch-free (selects, no variable shifts) so that the
 * bulk loops below can be vectorised: those loops run fixed-length inner
 * blocks, which gcc's -O2 "very cheap" vectoriser accepts because no scalar
 * epilogue is needed inside a block. */
#include "ddptrain/dtype.h"

#include <stdint.h>
#include <string.h>

#include "ddptrain/check.h"
#include "core/ascii.h"

/* ---- bit-level helpers ------------------------------------------------- */

static inline uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static inline float f32_from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* bf16 is the top half of an fp32, with the same exponent range, so one
 * rounding add does everything: subnormals need no special case, and a carry
 * out of the mantissa lands in the exponent (up to 0x7F80, inf) as it should. */
static inline uint16_t bits_f32_to_bf16(uint32_t u) {
  uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = ((u >> 16) & 0x8000u) | 0x7FC0u;
  return (uint16_t)((u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

static inline uint32_t bits_bf16_to_f32(uint16_t h) {
  return (uint32_t)h << 16;
}

/* Shift right by k (a constant at each call site) and fold the bits shifted
 * out into the lowest bit ("sticky"), so a later round-to-nearest-even that
 * drops at least two more bits still sees whether anything was lost. */
static inline uint32_t shr_sticky(uint32_t x, uint32_t k, uint32_t take) {
  uint32_t shifted = (x >> k) | ((x & ((1u << k) - 1u)) != 0u);
  return take ? shifted : x;
}

static inline uint16_t bits_f32_to_f16(uint32_t u) {
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7FFFFFFFu;

  /* Normal result: rebias the exponent (127 -> 15) and round away 13 bits.
   * Wraps harmlessly for small a, whose result is not selected. */
  uint32_t r = a - 0x38000000u;
  uint32_t normal = (r + 0x0FFFu + ((r >> 13) & 1u)) >> 13;

  /* Subnormal result (|x| < 2^-14): the value in units of 2^-24 is
   * mant * 2^(e - 126); shift by the extra amount beyond the fixed 14 with a
   * select ladder (vector units lack per-lane variable shifts on baseline
   * x86_64), then round once. Anything below 2^-25 ends up 0; shifting by up
   * to 15 extra covers that, including fp32 subnormals (e == 0). */
  uint32_t e = a >> 23;
  uint32_t mant = (a & 0x007FFFFFu) | 0x00800000u;
  uint32_t extra = e < 112u - 15u ? 15u : 112u - e; /* only used when e < 113 */
  uint32_t m = mant;
  m = shr_sticky(m, 8, extra & 8u);
  m = shr_sticky(m, 4, extra & 4u);
  m = shr_sticky(m, 2, extra & 2u);
  m = shr_sticky(m, 1, extra & 1u);
  uint32_t sub = (m + 0x1FFFu + ((m >> 14) & 1u)) >> 14;

  /* 0x477FF000 is 65520, halfway between 65504 (odd mantissa) and 2^16, so
   * it and everything above round to inf. */
  uint32_t mag = a > 0x7F800000u    ? 0x7E00u
                 : a >= 0x477FF000u ? 0x7C00u
                 : a >= 0x38800000u ? normal
                                    : sub;
  return (uint16_t)(sign | mag);
}

static inline uint32_t bits_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1Fu;
  uint32_t m = h & 0x3FFu;

  uint32_t normal = ((e + 112u) << 23) | (m << 13);
  uint32_t infnan = 0x7F800000u | (m << 13); /* keeps the NaN payload */

  /* Subnormal: bring the leading one of the 10-bit m up to bit 9 with a
   * select ladder (no clz, so the loop stays vectorisable); then the value is
   * 1.f * 2^(-15 - shift). */
  uint32_t s = m, shift = 0;
  uint32_t c;
  c = s < (1u << 2);
  s = c ? s << 8 : s;
  shift += c ? 8u : 0u;
  c = s < (1u << 6);
  s = c ? s << 4 : s;
  shift += c ? 4u : 0u;
  c = s < (1u << 8);
  s = c ? s << 2 : s;
  shift += c ? 2u : 0u;
  c = s < (1u << 9);
  s = c ? s << 1 : s;
  shift += c ? 1u : 0u;
  uint32_t sub = m == 0 ? 0u : ((112u - shift) << 23) | ((s & 0x1FFu) << 14);

  uint32_t mag = e == 0x1Fu ? infnan : e != 0 ? normal : sub;
  return sign | mag;
}

/* ---- dtype table ------------------------------------------------------- */

size_t ddp_dtype_size(ddp_dtype_t dtype) {
  switch (dtype) {
    case DDP_DTYPE_F32:
    case DDP_DTYPE_I32:
      return 4;
    case DDP_DTYPE_BF16:
    case DDP_DTYPE_F16:
      return 2;
    default:
      return 0;
  }
}

const char *ddp_dtype_name(ddp_dtype_t dtype) {
  switch (dtype) {
    case DDP_DTYPE_F32:
      return "fp32";
    case DDP_DTYPE_BF16:
      return "bf16";
    case DDP_DTYPE_F16:
      return "fp16";
    case DDP_DTYPE_I32:
      return "int32";
    default:
      return "invalid";
  }
}

int ddp_dtype_is_float(ddp_dtype_t dtype) {
  return dtype == DDP_DTYPE_F32 || dtype == DDP_DTYPE_BF16 || dtype == DDP_DTYPE_F16;
}

/* Parsing user input is not logged here (like ddp_log_level_parse): the
 * caller knows which option or config key was wrong and reports that. */
ddp_status_t ddp_dtype_parse(const char *text, ddp_dtype_t *dtype) {
  static const struct {
    const char *name;
    ddp_dtype_t dtype;
  } k_names[] = {
      {"fp32", DDP_DTYPE_F32},  {"f32", DDP_DTYPE_F32},   {"float32", DDP_DTYPE_F32},
      {"float", DDP_DTYPE_F32}, {"bf16", DDP_DTYPE_BF16}, {"bfloat16", DDP_DTYPE_BF16},
      {"fp16", DDP_DTYPE_F16},  {"f16", DDP_DTYPE_F16},   {"float16", DDP_DTYPE_F16},
      {"half", DDP_DTYPE_F16},  {"int32", DDP_DTYPE_I32}, {"i32", DDP_DTYPE_I32},
  };
  if (!text || !dtype) return DDP_ERR_INVALID_ARG;
  for (size_t i = 0; i < sizeof k_names / sizeof k_names[0]; ++i) {
    if (ddp_ascii_ieq(text, k_names[i].name)) {
      *dtype = k_names[i].dtype;
      return DDP_OK;
    }
  }
  return DDP_ERR_INVALID_ARG;
}

/* ---- scalar conversions ------------------------------------------------ */

uint16_t ddp_f32_to_bf16(float x) {
  return bits_f32_to_bf16(f32_bits(x));
}

float ddp_bf16_to_f32(uint16_t h) {
  return f32_from_bits(bits_bf16_to_f32(h));
}

uint16_t ddp_f32_to_f16(float x) {
  return bits_f32_to_f16(f32_bits(x));
}

float ddp_f16_to_f32(uint16_t h) {
  return f32_from_bits(bits_f16_to_f32(h));
}

/* ---- bulk conversion --------------------------------------------------- */

/* Elements are moved with memcpy so that any alignment is valid (the buffers
 * come in as void *); gcc turns each into a plain (vector) load or store.
 * BLOCK elements per inner loop: a multiple of every vector width of interest,
 * so the inner loop needs no epilogue. */
#define BLOCK 32

static inline uint32_t load32(const unsigned char *p, size_t i) {
  uint32_t v;
  memcpy(&v, p + 4 * i, 4);
  return v;
}
static inline uint16_t load16(const unsigned char *p, size_t i) {
  uint16_t v;
  memcpy(&v, p + 2 * i, 2);
  return v;
}
static inline void store32(unsigned char *p, size_t i, uint32_t v) {
  memcpy(p + 4 * i, &v, 4);
}
static inline void store16(unsigned char *p, size_t i, uint16_t v) {
  memcpy(p + 2 * i, &v, 2);
}

/* One loop shape for every pair; `body` converts element i. */
#define CONVERT_LOOP(body)                    \
  do {                                        \
    size_t i_ = 0;                            \
    for (; i_ + BLOCK <= n; i_ += BLOCK) {    \
      for (size_t j_ = 0; j_ < BLOCK; ++j_) { \
        size_t i = i_ + j_;                   \
        body;                                 \
      }                                       \
    }                                         \
    for (size_t i = i_; i < n; ++i) {         \
      body;                                   \
    }                                         \
  } while (0)

static void f32_to_bf16_n(unsigned char *restrict d, const unsigned char *restrict s, size_t n) {
  CONVERT_LOOP(store16(d, i, bits_f32_to_bf16(load32(s, i))));
}
static void f32_to_f16_n(unsigned char *restrict d, const unsigned char *restrict s, size_t n) {
  CONVERT_LOOP(store16(d, i, bits_f32_to_f16(load32(s, i))));
}
static void bf16_to_f32_n(unsigned char *restrict d, const unsigned char *restrict s, size_t n) {
  CONVERT_LOOP(store32(d, i, bits_bf16_to_f32(load16(s, i))));
}
static void f16_to_f32_n(unsigned char *restrict d, const unsigned char *restrict s, size_t n) {
  CONVERT_LOOP(store32(d, i, bits_f16_to_f32(load16(s, i))));
}
/* Through fp32: widening is exact, so the only rounding is the narrowing. */
static void bf16_to_f16_n(unsigned char *restrict d, const unsigned char *restrict s, size_t n) {
  CONVERT_LOOP(store16(d, i, bits_f32_to_f16(bits_bf16_to_f32(load16(s, i)))));
}
static void f16_to_bf16_n(unsigned char *restrict d, const unsigned char *restrict s, size_t n) {
  CONVERT_LOOP(store16(d, i, bits_f32_to_bf16(bits_f16_to_f32(load16(s, i)))));
}

ddp_status_t ddp_convert_host(void *dst, ddp_dtype_t dst_dtype, const void *src,
                              ddp_dtype_t src_dtype, size_t n) {
  if (!ddp_dtype_is_float(dst_dtype) || !ddp_dtype_is_float(src_dtype))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_convert_host: unsupported conversion %s (%d) -> %s (%d)",
             ddp_dtype_name(src_dtype), (int)src_dtype, ddp_dtype_name(dst_dtype), (int)dst_dtype);
  if (n == 0) return DDP_OK;
  if (!dst || !src)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_convert_host: NULL %s with n = %zu", !dst ? "dst" : "src",
             n);
  size_t dst_bytes = n * ddp_dtype_size(dst_dtype);
  size_t src_bytes = n * ddp_dtype_size(src_dtype);
  if (dst_bytes / ddp_dtype_size(dst_dtype) != n || src_bytes / ddp_dtype_size(src_dtype) != n)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_convert_host: n = %zu overflows size_t", n);
  uintptr_t d0 = (uintptr_t)dst, s0 = (uintptr_t)src;
  if (d0 < s0 + src_bytes && s0 < d0 + dst_bytes)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_convert_host: dst and src overlap");

  unsigned char *d = dst;
  const unsigned char *s = src;
  if (dst_dtype == src_dtype) {
    memcpy(d, s, dst_bytes);
  } else if (src_dtype == DDP_DTYPE_F32) {
    if (dst_dtype == DDP_DTYPE_BF16)
      f32_to_bf16_n(d, s, n);
    else
      f32_to_f16_n(d, s, n);
  } else if (src_dtype == DDP_DTYPE_BF16) {
    if (dst_dtype == DDP_DTYPE_F32)
      bf16_to_f32_n(d, s, n);
    else
      bf16_to_f16_n(d, s, n);
  } else {
    if (dst_dtype == DDP_DTYPE_F32)
      f16_to_f32_n(d, s, n);
    else
      f16_to_bf16_n(d, s, n);
  }
  return DDP_OK;
}

/* ---- rounding in fp32 storage ------------------------------------------ */

/* Narrow then widen: the fp32 value of the nearest half value. dst may be
 * src (rounding in place), so each block goes through a local array: the
 * loop over it has no aliasing question left, which is what lets -O2
 * vectorise it (the cheap cost model adds no run-time alias checks). */
#define ROUND_LOOP(expr)                                 \
  do {                                                   \
    uint32_t t_[BLOCK];                                  \
    for (size_t i_ = 0; i_ < n; i_ += BLOCK) {           \
      const size_t k_ = n - i_ < BLOCK ? n - i_ : BLOCK; \
      memcpy(t_, s + 4 * i_, 4 * k_);                    \
      if (k_ == BLOCK)                                   \
        for (size_t j_ = 0; j_ < BLOCK; ++j_) {          \
          uint32_t u = t_[j_];                           \
          t_[j_] = (expr);                               \
        }                                                \
      else                                               \
        for (size_t j_ = 0; j_ < k_; ++j_) {             \
          uint32_t u = t_[j_];                           \
          t_[j_] = (expr);                               \
        }                                                \
      memcpy(d + 4 * i_, t_, 4 * k_);                    \
    }                                                    \
  } while (0)

static void round_bf16_n(unsigned char *d, const unsigned char *s, size_t n) {
  ROUND_LOOP(bits_bf16_to_f32(bits_f32_to_bf16(u)));
}
static void round_f16_n(unsigned char *d, const unsigned char *s, size_t n) {
  ROUND_LOOP(bits_f16_to_f32(bits_f32_to_f16(u)));
}

ddp_status_t ddp_round_host(float *dst, const float *src, ddp_dtype_t dtype, size_t n) {
  if (!ddp_dtype_is_float(dtype))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_round_host: %s (%d) is not a floating type",
             ddp_dtype_name(dtype), (int)dtype);
  if (n == 0) return DDP_OK;
  if (!dst || !src)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_round_host: NULL %s with n = %zu", !dst ? "dst" : "src", n);
  if (n > SIZE_MAX / sizeof(float))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_round_host: n = %zu overflows size_t", n);
  const uintptr_t d0 = (uintptr_t)dst, s0 = (uintptr_t)src, bytes = n * sizeof(float);
  if (d0 != s0 && d0 < s0 + bytes && s0 < d0 + bytes)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_round_host: dst and src overlap without being equal");
  if (dtype == DDP_DTYPE_F32) {
    if (dst != src) memcpy(dst, src, bytes);
  } else if (dtype == DDP_DTYPE_BF16) {
    round_bf16_n((unsigned char *)dst, (const unsigned char *)src, n);
  } else {
    round_f16_n((unsigned char *)dst, (const unsigned char *)src, n);
  }
  return DDP_OK;
}
