/* Tests for the counter-based RNG (ddptrain/rng.h).
 *
 * Three kinds of checks: the published Philox4x32-10 known-answer vectors; the
 * index conventions of rng.h, recomputed here from ddp_philox4x32_10 and pinned
 * by golden values, because resumed runs and every rank's shuffle depend on
 * them never changing; and statistical sanity with fixed seeds and bounds
 * derived from the sampling distributions (so a correct generator would fail
 * them with probability around 1e-7 or less for a random seed, while a wrong
 * transform fails them by orders of magnitude). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "ddptrain/rng.h"

#define N_STAT 1000000

static uint64_t mul_hi64(uint64_t a, uint64_t b, uint64_t *lo) {
#ifdef __SIZEOF_INT128__
  /* An independent route to the product, so the test does not repeat the
   * library's 32-bit-halves arithmetic. */
  __extension__ typedef unsigned __int128 u128;
  const u128 p = (u128)a * b;
  *lo = (uint64_t)p;
  return (uint64_t)(p >> 64);
#else
  const uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
  const uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  const uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
  *lo = (mid << 32) | (uint32_t)p00;
  return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

/* Block b of (seed, stream) exactly as rng.h defines it. */
static void ref_block(uint64_t seed, uint64_t stream, uint64_t b, uint32_t out[4]) {
  const uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)stream,
                           (uint32_t)(stream >> 32)};
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  ddp_philox4x32_10(ctr, key, out);
}

/* Normal element j (standard, in double) exactly as rng.h defines it. */
static double ref_normal(uint64_t seed, uint64_t stream, uint64_t j) {
  uint32_t w[4];
  ref_block(seed, stream, j / 2, w);
  const uint64_t a = (uint64_t)w[0] | ((uint64_t)w[1] << 32);
  const uint64_t b = (uint64_t)w[2] | ((uint64_t)w[3] << 32);
  const double u1 = (double)((a >> 11) + 1) * 0x1p-53;
  const double u2 = (double)(b >> 11) * 0x1p-53;
  const double r = sqrt(-2.0 * log(u1));
  const double t = 6.283185307179586476925286766559005768 * u2;
  return (j % 2 == 0) ? r * cos(t) : r * sin(t);
}

/* below(index, bound) exactly as rng.h defines it; *attempts reports how many
 * candidates were drawn. */
static uint64_t ref_below(uint64_t seed, uint64_t stream, uint64_t index, uint64_t bound,
                          int *attempts) {
  const uint64_t threshold = (0 - bound) % bound; /* 2^64 mod bound */
  for (uint64_t a = 0;; ++a) {
    uint32_t w[4];
    ref_block(seed, stream, index + a / 2, w);
    const unsigned h = (unsigned)(a % 2);
    const uint64_t x = (uint64_t)w[2 * h] | ((uint64_t)w[2 * h + 1] << 32);
    uint64_t lo;
    const uint64_t hi = mul_hi64(x, bound, &lo);
    if (lo >= threshold) {
      *attempts = (int)a + 1;
      return hi;
    }
  }
}

/* Distance in units in the last place between two finite floats. */
static uint32_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  memcpy(&ia, &a, sizeof ia);
  memcpy(&ib, &b, sizeof ib);
  /* Map sign-magnitude to a monotonic integer line. */
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  int64_t d = (int64_t)ia - (int64_t)ib;
  return (uint32_t)(d < 0 ? -d : d);
}

static size_t count_equal_u32(const ddp_rng_t *x, const ddp_rng_t *y, size_t n) {
  uint32_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_nonnull(b);
  ddp_rng_fill_u32(x, 0, a, n);
  ddp_rng_fill_u32(y, 0, b, n);
  size_t same = 0;
  for (size_t i = 0; i < n; ++i) same += a[i] == b[i];
  free(a);
  free(b);
  return same;
}

/* (offset, length) pairs cutting the first 1000 values: misaligned starts,
 * odd lengths, single values, a whole block, crossing many blocks. */
static const size_t k_slices[][2] = {{0, 1},   {1, 1},   {3, 2},   {5, 7},    {4, 4},
                                     {7, 1},   {9, 13},  {2, 31},  {15, 100}, {123, 457},
                                     {998, 2}, {999, 1}, {0, 1000}};
#define N_SLICES (sizeof k_slices / sizeof k_slices[0])

/* Offsets of the long fills: start, a carry from block lo to block hi word,
 * and the wrap of the 64-bit index. */
static const uint64_t k_bases[] = {0, (UINT64_C(1) << 34) - 501, UINT64_MAX - 499};
#define N_BASES (sizeof k_bases / sizeof k_bases[0])

START_TEST(test_rng_philox_known_answers) {
  /* Random123 kat_vectors, philox4x32_10. */
  static const struct {
    uint32_t ctr[4], key[2], out[4];
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (size_t v = 0; v < sizeof kat / sizeof kat[0]; ++v) {
    uint32_t out[4];
    ddp_philox4x32_10(kat[v].ctr, kat[v].key, out);
    for (int i = 0; i < 4; ++i)
      ck_assert_msg(out[i] == kat[v].out[i], "vector %zu word %d: 0x%08x != 0x%08x", v, i, out[i],
                    kat[v].out[i]);
  }
}
END_TEST

START_TEST(test_rng_philox_output_may_alias_counter) {
  uint32_t buf[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344};
  const uint32_t key[2] = {0xa4093822, 0x299f31d0};
  ddp_philox4x32_10(buf, key, buf);
  ck_assert_uint_eq(buf[0], 0xd16cfe09);
  ck_assert_uint_eq(buf[1], 0x94fdcceb);
  ck_assert_uint_eq(buf[2], 0x5001e420);
  ck_assert_uint_eq(buf[3], 0x24126ea1);
}
END_TEST

START_TEST(test_rng_counter_layout) {
  /* Every half of seed and stream distinct, so a swapped word shows. */
  const uint64_t seed = UINT64_C(0x0123456789ABCDEF), stream = UINT64_C(0xFEDCBA9876543210);
  ddp_rng_t rng;
  ddp_rng_init(&rng, seed, stream);
  ck_assert(rng.seed == seed && rng.stream == stream);
  const uint64_t idx[] = {
      0, 1, 2, 3, 4, 77, (UINT64_C(1) << 34) + 6, UINT64_C(0x123456789ABCD), UINT64_MAX};
  for (size_t i = 0; i < sizeof idx / sizeof idx[0]; ++i) {
    uint32_t w[4];
    ref_block(seed, stream, idx[i] / 4, w);
    ck_assert_msg(ddp_rng_u32(&rng, idx[i]) == w[idx[i] % 4], "index %llu",
                  (unsigned long long)idx[i]);
  }
}
END_TEST

START_TEST(test_rng_same_seed_same_numbers) {
  ddp_rng_t a, b;
  ddp_rng_init(&a, 99, 5);
  ddp_rng_init(&b, 99, 5);
  uint32_t ua[257], ub[257];
  float fa[257], fb[257];
  ddp_rng_fill_u32(&a, 11, ua, 257);
  ddp_rng_fill_u32(&b, 11, ub, 257);
  ck_assert_mem_eq(ua, ub, sizeof ua);
  ddp_rng_fill_uniform(&a, 11, fa, 257);
  ddp_rng_fill_uniform(&b, 11, fb, 257);
  ck_assert_mem_eq(fa, fb, sizeof fa);
  ddp_rng_fill_normal(&a, 11, 0.5f, 3.0f, fa, 257);
  ddp_rng_fill_normal(&b, 11, 0.5f, 3.0f, fb, 257);
  ck_assert_mem_eq(fa, fb, sizeof fa);
  for (uint64_t i = 0; i < 100; ++i)
    ck_assert(ddp_rng_below(&a, i, 1000003) == ddp_rng_below(&b, i, 1000003));
}
END_TEST

START_TEST(test_rng_u32_slices_match_long_fill) {
  ddp_rng_t rng;
  ddp_rng_init(&rng, 7, 3);
  for (size_t bi = 0; bi < N_BASES; ++bi) {
    uint32_t all[1000], part[1000];
    ddp_rng_fill_u32(&rng, k_bases[bi], all, 1000);
    for (size_t s = 0; s < N_SLICES; ++s) {
      const size_t off = k_slices[s][0], n = k_slices[s][1];
      ddp_rng_fill_u32(&rng, k_bases[bi] + off, part, n);
      ck_assert_msg(memcmp(part, all + off, n * sizeof *part) == 0, "base %zu slice %zu+%zu", bi,
                    off, n);
    }
    for (size_t i = 0; i < 1000; i += 37) ck_assert(ddp_rng_u32(&rng, k_bases[bi] + i) == all[i]);
  }
  ddp_rng_fill_u32(&rng, 0, NULL, 0); /* n == 0 touches nothing */
}
END_TEST

START_TEST(test_rng_uniform_slices_match_long_fill) {
  ddp_rng_t rng;
  ddp_rng_init(&rng, 7, 3);
  for (size_t bi = 0; bi < N_BASES; ++bi) {
    float all[1000], part[1000];
    ddp_rng_fill_uniform(&rng, k_bases[bi], all, 1000);
    for (size_t s = 0; s < N_SLICES; ++s) {
      const size_t off = k_slices[s][0], n = k_slices[s][1];
      ddp_rng_fill_uniform(&rng, k_bases[bi] + off, part, n);
      ck_assert_msg(memcmp(part, all + off, n * sizeof *part) == 0, "base %zu slice %zu+%zu", bi,
                    off, n);
    }
  }
}
END_TEST

START_TEST(test_rng_normal_slices_match_long_fill) {
  ddp_rng_t rng;
  ddp_rng_init(&rng, 7, 3);
  for (size_t bi = 0; bi < N_BASES; ++bi) {
    float all[1000], part[1000];
    ddp_rng_fill_normal(&rng, k_bases[bi], -1.0f, 0.25f, all, 1000);
    for (size_t s = 0; s < N_SLICES; ++s) {
      const size_t off = k_slices[s][0], n = k_slices[s][1];
      ddp_rng_fill_normal(&rng, k_bases[bi] + off, -1.0f, 0.25f, part, n);
      ck_assert_msg(memcmp(part, all + off, n * sizeof *part) == 0, "base %zu slice %zu+%zu", bi,
                    off, n);
    }
  }
}
END_TEST

START_TEST(test_rng_fill_wraps_modulo_2_64) {
  ddp_rng_t rng;
  ddp_rng_init(&rng, 5, 6);
  uint32_t w[10];
  ddp_rng_fill_u32(&rng, UINT64_MAX - 4, w, 10);
  for (uint64_t t = 0; t < 10; ++t) ck_assert(w[t] == ddp_rng_u32(&rng, UINT64_MAX - 4 + t));
  ck_assert(w[5] == ddp_rng_u32(&rng, 0));
}
END_TEST

START_TEST(test_rng_uniform_is_top_24_bits_of_u32) {
  ddp_rng_t rng;
  ddp_rng_init(&rng, UINT64_C(0xDEADBEEFCAFEF00D), 17);
  uint32_t u[4099];
  float f[4099];
  ddp_rng_fill_u32(&rng, 13, u, 4099);
  ddp_rng_fill_uniform(&rng, 13, f, 4099);
  size_t wrong = 0;
  for (size_t i = 0; i < 4099; ++i) wrong += f[i] != (float)(u[i] >> 8) * 0x1p-24f;
  ck_assert_uint_eq(wrong, 0);
}
END_TEST

START_TEST(test_rng_normal_index_convention) {
  /* mean and std exercise the documented affine step in double. */
  const uint64_t seed = UINT64_C(0x1122334455667788), stream = UINT64_C(0x99AABBCCDDEEFF00);
  ddp_rng_t rng;
  ddp_rng_init(&rng, seed, stream);
  const uint64_t offs[] = {0, 1, 1001, (UINT64_C(1) << 40) + 3};
  for (size_t o = 0; o < sizeof offs / sizeof offs[0]; ++o) {
    float z[65];
    ddp_rng_fill_normal(&rng, offs[o], 3.0f, 2.0f, z, 65);
    for (uint64_t t = 0; t < 65; ++t) {
      const float want = (float)(3.0 + 2.0 * ref_normal(seed, stream, offs[o] + t));
      ck_assert_msg(z[t] == want, "element %llu: %a != %a", (unsigned long long)(offs[o] + t),
                    (double)z[t], (double)want);
    }
  }
}
END_TEST

START_TEST(test_rng_different_seeds_and_streams_differ) {
  /* Independent 32-bit values agree with probability 2^-32: over 4096 values
   * the expected number of coincidences is 1e-6, so any agreement is a bug
   * (e.g. a half of seed or stream left out of the key or counter). */
  ddp_rng_t base, other;
  ddp_rng_init(&base, 1, 0);
  ddp_rng_init(&other, 2, 0);
  ck_assert_uint_eq(count_equal_u32(&base, &other, 4096), 0);
  ddp_rng_init(&other, 1 + (UINT64_C(1) << 32), 0); /* high half of the seed */
  ck_assert_uint_eq(count_equal_u32(&base, &other, 4096), 0);
  ddp_rng_init(&other, 1, 1);
  ck_assert_uint_eq(count_equal_u32(&base, &other, 4096), 0);
  ddp_rng_init(&other, 1, UINT64_C(1) << 32); /* high half of the stream */
  ck_assert_uint_eq(count_equal_u32(&base, &other, 4096), 0);
}
END_TEST

START_TEST(test_rng_derive_convention) {
  const uint64_t seed = UINT64_C(0x0F1E2D3C4B5A6978), stream = UINT64_C(0x8796A5B4C3D2E1F0);
  const uint64_t tag = UINT64_C(0xA1B2C3D4E5F60718);
  ddp_rng_t parent, child;
  ddp_rng_init(&parent, seed, stream);
  ddp_rng_derive(&parent, tag, &child);
  uint32_t w[4];
  const uint64_t s = seed ^ DDP_RNG_DERIVE_KEY_XOR;
  const uint32_t ctr[4] = {(uint32_t)tag, (uint32_t)(tag >> 32), (uint32_t)stream,
                           (uint32_t)(stream >> 32)};
  const uint32_t key[2] = {(uint32_t)s, (uint32_t)(s >> 32)};
  ddp_philox4x32_10(ctr, key, w);
  ck_assert(child.seed == seed);
  ck_assert(child.stream == ((uint64_t)w[0] | ((uint64_t)w[1] << 32)));
  /* In place gives the same child. */
  ddp_rng_t self = parent;
  ddp_rng_derive(&self, tag, &self);
  ck_assert(self.seed == child.seed && self.stream == child.stream);
}
END_TEST

START_TEST(test_rng_derived_children_differ) {
  ddp_rng_t parent, sibling, c0, c1, c0b, s0, gc;
  ddp_rng_init(&parent, 1234, 0);
  ddp_rng_init(&sibling, 1234, 1);
  ddp_rng_derive(&parent, 0, &c0);
  ddp_rng_derive(&parent, 1, &c1);
  ddp_rng_derive(&parent, 0, &c0b);
  ddp_rng_derive(&sibling, 0, &s0);
  ddp_rng_derive(&c0, 0, &gc);
  ck_assert(c0.stream == c0b.stream); /* deterministic */
  const ddp_rng_t *all[] = {&parent, &sibling, &c0, &c1, &s0, &gc};
  for (size_t i = 0; i < 6; ++i)
    for (size_t j = i + 1; j < 6; ++j) {
      ck_assert_msg(all[i]->stream != all[j]->stream, "streams %zu and %zu collide", i, j);
      ck_assert_msg(count_equal_u32(all[i], all[j], 1024) == 0, "%zu and %zu agree", i, j);
    }
}
END_TEST

START_TEST(test_rng_uniform_statistics) {
  /* U[0,1): mean 1/2, variance 1/12. Over N = 1e6 samples the sample mean has
   * standard deviation sqrt(1/12 / N) = 2.89e-4 and the sample variance
   * sqrt((E(U-1/2)^4 - 1/144) / N) = sqrt((1/80 - 1/144) / N) = sqrt(1/180 / N)
   * = 7.45e-5. Bounds are 6 standard deviations: 1.8e-3 and 4.5e-4. The
   * 24-bit grid shifts the mean by -2^-25 = -3e-8, far inside. */
  float *x = malloc(N_STAT * sizeof *x);
  ck_assert_ptr_nonnull(x);
  ddp_rng_t rng;
  ddp_rng_init(&rng, 20240520, 1);
  ddp_rng_fill_uniform(&rng, 0, x, N_STAT);
  double sum = 0, sq = 0;
  for (size_t i = 0; i < N_STAT; ++i) sum += x[i];
  const double mean = sum / N_STAT;
  for (size_t i = 0; i < N_STAT; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const double var = sq / (N_STAT - 1);
  free(x);
  ck_assert_msg(fabs(mean - 0.5) < 1.8e-3, "mean %.6f", mean);
  ck_assert_msg(fabs(var - 1.0 / 12.0) < 4.5e-4, "variance %.6f", var);
}
END_TEST

START_TEST(test_rng_uniform_range) {
  float *x = malloc(N_STAT * sizeof *x);
  ck_assert_ptr_nonnull(x);
  ddp_rng_t rng;
  ddp_rng_init(&rng, 20240520, 2);
  ddp_rng_fill_uniform(&rng, 0, x, N_STAT);
  /* Failures are collected and asserted once: every passing ck_assert records
   * a checkpoint through Check's pipe, which costs seconds over 1e6 values. */
  size_t outside = 0;
  for (size_t i = 0; i < N_STAT; ++i) outside += !(x[i] >= 0.0f && x[i] < 1.0f);
  free(x);
  ck_assert_uint_eq(outside, 0);
  /* The extremes, at indices found by a search of seed 1234 stream 0: a u32 of
   * 0xffffffd4 must map below 1 (scaling all 32 bits would round it to 1.0f)
   * and one under 256 to exactly 0. */
  ddp_rng_init(&rng, 1234, 0);
  float f;
  ck_assert_uint_eq(ddp_rng_u32(&rng, 7860621), 0xffffffd4u);
  ddp_rng_fill_uniform(&rng, 7860621, &f, 1);
  ck_assert(f == 1.0f - 0x1p-24f);
  ck_assert_uint_eq(ddp_rng_u32(&rng, 3613625), 0x84u);
  ddp_rng_fill_uniform(&rng, 3613625, &f, 1);
  ck_assert(f == 0.0f);
}
END_TEST

START_TEST(test_rng_normal_statistics) {
  /* N(0,1) over N = 1e6: the sample mean has sd 1/sqrt(N) = 1e-3; the sample
   * std has sd ~ 1/sqrt(2N) = 7.1e-4 (delta method on var(s^2) = 2/N); the
   * fraction inside one sigma, p = erf(1/sqrt 2) = 0.682689, has sd
   * sqrt(p(1-p)/N) = 4.65e-4. Bounds are 6 sd: 6e-3, 4.3e-3, 2.8e-3. Drawn as
   * N(3, 2^2) and standardized so the affine step is covered too. */
  float *x = malloc(N_STAT * sizeof *x);
  ck_assert_ptr_nonnull(x);
  ddp_rng_t rng;
  ddp_rng_init(&rng, 20240801, 3);
  ddp_rng_fill_normal(&rng, 0, 3.0f, 2.0f, x, N_STAT);
  double sum = 0, sq = 0;
  size_t inside = 0, not_finite = 0;
  for (size_t i = 0; i < N_STAT; ++i) {
    not_finite += !isfinite(x[i]);
    const double z = (x[i] - 3.0) / 2.0;
    sum += z;
    inside += fabs(z) < 1.0;
  }
  const double mean = sum / N_STAT;
  for (size_t i = 0; i < N_STAT; ++i) {
    const double z = (x[i] - 3.0) / 2.0;
    sq += (z - mean) * (z - mean);
  }
  const double sd = sqrt(sq / (N_STAT - 1));
  const double frac = (double)inside / N_STAT;
  free(x);
  ck_assert_uint_eq(not_finite, 0);
  ck_assert_msg(fabs(mean) < 6e-3, "mean %.6f", mean);
  ck_assert_msg(fabs(sd - 1.0) < 4.3e-3, "std %.6f", sd);
  ck_assert_msg(fabs(frac - 0.6826894921) < 2.8e-3, "within 1 sigma %.6f", frac);
}
END_TEST

START_TEST(test_rng_below_chi_square_small_bound) {
  /* 1e6 draws into 10 cells (expected 1e5 each): the statistic is chi-square
   * with 9 degrees of freedom; P(chi2_9 > 50) = 1.1e-7. */
  enum { BOUND = 10, DRAWS = N_STAT };
  ddp_rng_t rng;
  ddp_rng_init(&rng, 77, 0);
  size_t count[BOUND] = {0}, out_of_range = 0;
  for (uint64_t i = 0; i < DRAWS; ++i) {
    const uint64_t v = ddp_rng_below(&rng, i, BOUND);
    if (v < BOUND)
      ++count[v];
    else
      ++out_of_range;
  }
  ck_assert_uint_eq(out_of_range, 0);
  double chi2 = 0;
  const double expect = (double)DRAWS / BOUND;
  for (int c = 0; c < BOUND; ++c) chi2 += (count[c] - expect) * (count[c] - expect) / expect;
  ck_assert_msg(chi2 < 50.0, "chi-square %.2f with 9 degrees of freedom", chi2);
}
END_TEST

START_TEST(test_rng_below_large_bound_unbiased) {
  /* bound = 3 * 2^62 makes both classic mistakes visible: x % bound puts half
   * of the results in [0, 2^62), and the multiply-shift without rejection makes
   * results divisible by 3 twice as likely (and 1/4 of candidates must be
   * rejected, so the rejection path runs constantly). Each binning into 3
   * cells of 3e5 draws is chi-square with 2 degrees of freedom;
   * P(chi2_2 > 40) = exp(-20) = 2.1e-9, while either bias gives ~1e4. */
  enum { DRAWS = 300000 };
  const uint64_t bound = UINT64_C(3) << 62;
  ddp_rng_t rng;
  ddp_rng_init(&rng, 78, 0);
  size_t by_range[4] = {0}, by_mod[3] = {0};
  for (uint64_t i = 0; i < DRAWS; ++i) {
    const uint64_t v = ddp_rng_below(&rng, i, bound);
    ++by_range[v >> 62];
    ++by_mod[v % 3];
  }
  ck_assert_uint_eq(by_range[3], 0); /* v >= bound */
  double chi_range = 0, chi_mod = 0;
  const double expect = DRAWS / 3.0;
  for (int c = 0; c < 3; ++c) {
    chi_range += (by_range[c] - expect) * (by_range[c] - expect) / expect;
    chi_mod += (by_mod[c] - expect) * (by_mod[c] - expect) / expect;
  }
  ck_assert_msg(chi_range < 40.0, "by range: chi-square %.2f", chi_range);
  ck_assert_msg(chi_mod < 40.0, "by residue: chi-square %.2f", chi_mod);
}
END_TEST

START_TEST(test_rng_below_index_convention) {
  const uint64_t seed = 4242, stream = 9;
  ddp_rng_t rng;
  ddp_rng_init(&rng, seed, stream);
  const uint64_t bounds[] = {2,
                             3,
                             10,
                             1000003,
                             (UINT64_C(1) << 32) + 1,
                             UINT64_C(3) << 62,
                             (UINT64_C(1) << 63) + 1,
                             UINT64_MAX};
  int max_attempts = 0;
  size_t wrong = 0;
  for (size_t bi = 0; bi < sizeof bounds / sizeof bounds[0]; ++bi)
    for (uint64_t i = 0; i < 2000; ++i) {
      int attempts;
      const uint64_t want = ref_below(seed, stream, i, bounds[bi], &attempts);
      if (attempts > max_attempts) max_attempts = attempts;
      wrong += ddp_rng_below(&rng, i, bounds[bi]) != want;
    }
  ck_assert_uint_eq(wrong, 0);
  /* Rejections of up to 1/2 per candidate (bound 2^63 + 1) over 2000 draws:
   * the spill into the next block (third attempt) must have been exercised. */
  ck_assert_int_ge(max_attempts, 3);
}
END_TEST

START_TEST(test_rng_below_bound_one_is_zero) {
  ddp_rng_t rng;
  ddp_rng_init(&rng, 1, 2);
  size_t nonzero = 0;
  for (uint64_t i = 0; i < 1000; ++i)
    nonzero += ddp_rng_below(&rng, i, 1) != 0 || ddp_rng_below(&rng, i, 0) != 0;
  ck_assert_uint_eq(nonzero, 0);
}
END_TEST

START_TEST(test_rng_golden_seed_1234) {
  /* Recorded from this implementation (seed 1234, stream 0, offset 0). A
   * change here changes every resumed run, shuffle and initialization. */
  static const uint32_t golden_u32[8] = {0x2090b348, 0xda7cf0ab, 0x4401906f, 0xcbca470e,
                                         0x9eeede35, 0x1cbe137c, 0xfa277093, 0x147edd50};
  static const float golden_uniform[8] = {0x1.048598p-3f, 0x1.b4f9ep-1f,  0x1.10064p-2f,
                                          0x1.97948ep-1f, 0x1.3dddbcp-1f, 0x1.cbe13p-4f,
                                          0x1.f44eep-1f,  0x1.47eddp-4f};
  static const float golden_normal[8] = {0x1.48fa5ap-3f, -0x1.143cd8p-1f, 0x1.d50e46p+0f,
                                         0x1.021956p+0f, -0x1.6130ap-3f,  -0x1.416846p-5f,
                                         0x1.a9cb7p+0f,  -0x1.153acep+0f};
  static const uint64_t golden_below_1000[6] = {853, 112, 984, 139, 918, 200};
  static const uint64_t golden_below_3x2_62[3] = {
      UINT64_C(11013470746193243219), UINT64_C(1553335728450250407), UINT64_C(7410088578858960989)};
  ddp_rng_t rng, child;
  ddp_rng_init(&rng, 1234, 0);
  uint32_t u[8];
  float f[8];
  ddp_rng_fill_u32(&rng, 0, u, 8);
  for (int i = 0; i < 8; ++i) ck_assert_uint_eq(u[i], golden_u32[i]);
  ddp_rng_fill_uniform(&rng, 0, f, 8);
  for (int i = 0; i < 8; ++i)
    ck_assert_msg(f[i] == golden_uniform[i], "uniform %d: %a", i, (double)f[i]);
  /* Normals go through libm's log/cos/sin, which C does not require to be
   * correctly rounded; rounding the double to float hides their differences
   * except in rare near-tie cases, so one float ulp is allowed. Any change of
   * convention moves values by far more. */
  ddp_rng_fill_normal(&rng, 0, 0.0f, 1.0f, f, 8);
  for (int i = 0; i < 8; ++i)
    ck_assert_msg(ulp_distance(f[i], golden_normal[i]) <= 1, "normal %d: %a", i, (double)f[i]);
  for (uint64_t i = 0; i < 6; ++i) ck_assert(ddp_rng_below(&rng, i, 1000) == golden_below_1000[i]);
  for (uint64_t i = 0; i < 3; ++i)
    ck_assert(ddp_rng_below(&rng, i, UINT64_C(3) << 62) == golden_below_3x2_62[i]);
  ddp_rng_derive(&rng, 0, &child);
  ck_assert(child.stream == UINT64_C(0x4533a34341ed2bea));
  ddp_rng_derive(&rng, 1, &child);
  ck_assert(child.stream == UINT64_C(0x895221f22e2af920));
}
END_TEST

static Suite *rng_suite(void) {
  Suite *s = suite_create("rng");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_rng_philox_known_answers);
  tcase_add_test(tc, test_rng_philox_output_may_alias_counter);
  tcase_add_test(tc, test_rng_counter_layout);
  tcase_add_test(tc, test_rng_same_seed_same_numbers);
  tcase_add_test(tc, test_rng_u32_slices_match_long_fill);
  tcase_add_test(tc, test_rng_uniform_slices_match_long_fill);
  tcase_add_test(tc, test_rng_normal_slices_match_long_fill);
  tcase_add_test(tc, test_rng_fill_wraps_modulo_2_64);
  tcase_add_test(tc, test_rng_uniform_is_top_24_bits_of_u32);
  tcase_add_test(tc, test_rng_normal_index_convention);
  tcase_add_test(tc, test_rng_different_seeds_and_streams_differ);
  tcase_add_test(tc, test_rng_derive_convention);
  tcase_add_test(tc, test_rng_derived_children_differ);
  tcase_add_test(tc, test_rng_uniform_statistics);
  tcase_add_test(tc, test_rng_uniform_range);
  tcase_add_test(tc, test_rng_normal_statistics);
  tcase_add_test(tc, test_rng_below_chi_square_small_bound);
  tcase_add_test(tc, test_rng_below_large_bound_unbiased);
  tcase_add_test(tc, test_rng_below_index_convention);
  tcase_add_test(tc, test_rng_below_bound_one_is_zero);
  tcase_add_test(tc, test_rng_golden_seed_1234);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(rng_suite());
}
