/* Philox4x32-10 and the addressable streams built on it (see ddptrain/rng.h
 * for the index conventions, which are a contract).
 *
 * Written by hand rather than taken from a library: Random123 is a C++-first
 * header collection that Debian does not package for C, cuRAND exists only with
 * CUDA, and the CPU side must produce bit-identical values with or without a
 * GPU. The function is thirty lines and pinned by the published known-answer
 * vectors in tests/check_rng.c. */
#include "ddptrain/rng.h"

#include <math.h>

#define PHILOX_M0 UINT32_C(0xD2511F53)
#define PHILOX_M1 UINT32_C(0xCD9E8D57)
#define PHILOX_W0 UINT32_C(0x9E3779B9)
#define PHILOX_W1 UINT32_C(0xBB67AE85)

static const double k_two_pi = 6.283185307179586476925286766559005768;

void ddp_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
    uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

static void block(const ddp_rng_t *rng, uint64_t b, uint32_t out[4]) {
  const uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)rng->stream,
                           (uint32_t)(rng->stream >> 32)};
  const uint32_t key[2] = {(uint32_t)rng->seed, (uint32_t)(rng->seed >> 32)};
  ddp_philox4x32_10(ctr, key, out);
}

void ddp_rng_init(ddp_rng_t *rng, uint64_t seed, uint64_t stream) {
  rng->seed = seed;
  rng->stream = stream;
}

void ddp_rng_derive(const ddp_rng_t *parent, uint64_t tag, ddp_rng_t *child) {
  const uint64_t s = parent->seed ^ DDP_RNG_DERIVE_KEY_XOR;
  const uint32_t ctr[4] = {(uint32_t)tag, (uint32_t)(tag >> 32), (uint32_t)parent->stream,
                           (uint32_t)(parent->stream >> 32)};
  const uint32_t key[2] = {(uint32_t)s, (uint32_t)(s >> 32)};
  uint32_t w[4];
  ddp_philox4x32_10(ctr, key, w);
  const uint64_t seed = parent->seed; /* child may alias parent */
  child->seed = seed;
  child->stream = (uint64_t)w[0] | ((uint64_t)w[1] << 32);
}

uint32_t ddp_rng_u32(const ddp_rng_t *rng, uint64_t index) {
  uint32_t w[4];
  block(rng, index >> 2, w);
  return w[index & 3];
}

void ddp_rng_fill_u32(const ddp_rng_t *rng, uint64_t offset, uint32_t *out, size_t n) {
  uint64_t b = offset >> 2;
  unsigned word = (unsigned)(offset & 3);
  size_t t = 0;
  while (t < n) {
    uint32_t w[4];
    block(rng, b, w);
    /* u32 indices wrap modulo 2^64, so blocks wrap modulo 2^62. */
    b = (b + 1) & (UINT64_MAX >> 2);
    for (; word < 4 && t < n; ++word) out[t++] = w[word];
    word = 0;
  }
}

void ddp_rng_fill_uniform(const ddp_rng_t *rng, uint64_t offset, float *out, size_t n) {
  /* Top 24 bits times 2^-24 is exact in float and tops out at 1 - 2^-24;
   * scaling all 32 bits would round the largest values up to 1.0f. */
  uint32_t chunk[256];
  while (n > 0) {
    size_t len = n < 256 ? n : 256;
    ddp_rng_fill_u32(rng, offset, chunk, len);
    for (size_t t = 0; t < len; ++t) out[t] = (float)(chunk[t] >> 8) * 0x1p-24f;
    out += len;
    offset += len;
    n -= len;
  }
}

/* Both normals of pair p, in double. 53-bit uniforms keep the tail honest to
 * about 8.5 sigma, where 32-bit ones would cut it at 6.7. */
static void normal_pair(const ddp_rng_t *rng, uint64_t p, double z[2]) {
  uint32_t w[4];
  block(rng, p, w);
  const uint64_t a = (uint64_t)w[0] | ((uint64_t)w[1] << 32);
  const uint64_t b = (uint64_t)w[2] | ((uint64_t)w[3] << 32);
  const double u1 = (double)((a >> 11) + 1) * 0x1p-53;
  const double u2 = (double)(b >> 11) * 0x1p-53;
  const double r = sqrt(-2.0 * log(u1));
  const double t = k_two_pi * u2;
  z[0] = r * cos(t);
  z[1] = r * sin(t);
}

void ddp_rng_fill_normal(const ddp_rng_t *rng, uint64_t offset, float mean, float std, float *out,
                         size_t n) {
  uint64_t j = offset;
  size_t t = 0;
  while (t < n) {
    double z[2];
    normal_pair(rng, j >> 1, z);
    for (unsigned h = (unsigned)(j & 1); h < 2 && t < n; ++h, ++j)
      out[t++] = (float)((double)mean + (double)std * z[h]);
  }
}

/* Full 64x64 -> 128-bit product from 32-bit halves: unsigned __int128 is a
 * compiler extension and this must mean the same on every toolchain. */
static uint64_t mul_64x64(uint64_t a, uint64_t b, uint64_t *lo) {
  const uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
  const uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  const uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
  *lo = (mid << 32) | (uint32_t)p00;
  return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

uint64_t ddp_rng_below(const ddp_rng_t *rng, uint64_t index, uint64_t bound) {
  if (bound <= 1) return 0;
  /* Lemire, "Fast random integer generation in an interval" (2019): the high
   * half of X * bound is uniform once the low halves below 2^64 mod bound are
   * rejected. The division is computed only when a rejection is possible. */
  uint64_t threshold = 0;
  int have_threshold = 0;
  for (uint64_t b = index;; ++b) {
    uint32_t w[4];
    block(rng, b, w);
    for (int h = 0; h < 2; ++h) {
      const uint64_t x = (uint64_t)w[2 * h] | ((uint64_t)w[2 * h + 1] << 32);
      uint64_t lo;
      const uint64_t hi = mul_64x64(x, bound, &lo);
      if (lo < bound) {
        if (!have_threshold) {
          threshold = (0 - bound) % bound;
          have_threshold = 1;
        }
        if (lo < threshold) continue;
      }
      return hi;
    }
  }
}
