/* Deterministic, counter-based random numbers (Philox4x32-10).
 *
 * A counter-based generator has no state to carry: every value is a pure
 * function of (seed, stream, index). That is what the runtime needs — every
 * rank computes the same sampler shuffle without talking to the others, a
 * resumed run reproduces the numbers of the interrupted one from a step
 * number alone, and a GPU kernel can compute element i without the i-1 before
 * it. Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
 * 1, 2, 3", SC 2011) is the generator of Random123, cuRAND and PyTorch, passes
 * BigCrush, and is small enough to have a device twin.
 *
 * Index conventions (**contract**: checkpoints and resumes depend on them;
 * tests/check_rng.c pins them with known-answer values):
 *
 *   Philox block b of (seed, stream) is
 *     ddp_philox4x32_10(ctr = {lo32(b), hi32(b), lo32(stream), hi32(stream)},
 *                       key = {lo32(seed), hi32(seed)}).
 *
 *   u32 value i       = word i % 4 of block i / 4.
 *   uniform value i   = (u32 value i >> 8) * 2^-24, in [0, 1 - 2^-24].
 *   normal element j  = Box-Muller on block j / 2 (one block per pair):
 *                         A = w0 | w1 << 32,  B = w2 | w3 << 32   (w = words of the block)
 *                         u1 = ((A >> 11) + 1) * 2^-53   in (0, 1]  (log never sees 0)
 *                         u2 = (B >> 11) * 2^-53         in [0, 1)
 *                         r = sqrt(-2 ln u1), t = 2 pi u2
 *                         even j: r cos t,  odd j: r sin t
 *                       computed in double; the stored float is
 *                       (float)((double)mean + (double)std * z).
 *                       Element j depends on j only, never on the offset or
 *                       length of the fill that produced it.
 *   below(index, bound): Lemire's multiply-and-reject on 64-bit candidates.
 *                       Attempt a (a = 0, 1, ...) takes X = words 2h | 2h+1 << 32
 *                       (h = a % 2) of block index + a / 2; it returns the high
 *                       64 bits of X * bound unless the low 64 bits are below
 *                       2^64 mod bound, in which case it tries the next attempt.
 *                       So draw `index` owns block `index` (u32 values
 *                       4*index .. 4*index+3) and only spills into the next
 *                       block after two rejections (probability below
 *                       (bound / 2^64)^2, i.e. < 2^-64 for bound <= 2^32), so
 *                       consecutive draws can use consecutive indices.
 *   derive(parent, tag): child.seed = parent.seed and child.stream =
 *                       w0 | w1 << 32 of
 *                         ddp_philox4x32_10(ctr = {lo32(tag), hi32(tag),
 *                                                  lo32(parent.stream), hi32(parent.stream)},
 *                                           key = {lo32(s), hi32(s)})
 *                       with s = parent.seed ^ DDP_RNG_DERIVE_KEY_XOR. The key
 *                       is altered so a child's stream id is not simply a value
 *                       the parent's own stream also produces.
 *
 * Index arithmetic wraps modulo 2^64. The u32 and uniform sequences share
 * values (uniform i is made from u32 i), and normal/below read the same blocks
 * too: give each purpose its own stream (or a derived child) rather than
 * drawing two kinds of numbers from one stream. All functions are pure and
 * thread-safe; pointers must not be NULL (out may be NULL when n == 0). */
#ifndef DDPTRAIN_RNG_H
#define DDPTRAIN_RNG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The key alteration used by ddp_rng_derive (64-bit golden ratio). */
#define DDP_RNG_DERIVE_KEY_XOR UINT64_C(0x9E3779B97F4A7C15)

typedef struct ddp_rng {
  uint64_t seed;   /* the Philox key */
  uint64_t stream; /* upper half of the Philox counter */
} ddp_rng_t;

/* The raw bijection: out = Philox4x32-10(ctr, key). out may alias ctr. */
void ddp_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

void ddp_rng_init(ddp_rng_t *rng, uint64_t seed, uint64_t stream);

/* A child stream for an independent purpose (per layer, per epoch, ...);
 * child may be the same object as parent. */
void ddp_rng_derive(const ddp_rng_t *parent, uint64_t tag, ddp_rng_t *child);

/* u32 value `index`. */
uint32_t ddp_rng_u32(const ddp_rng_t *rng, uint64_t index);

/* out[t] = u32 value offset + t, for t < n. */
void ddp_rng_fill_u32(const ddp_rng_t *rng, uint64_t offset, uint32_t *out, size_t n);

/* out[t] = uniform value offset + t: floats in [0, 1) carrying 24 random bits
 * (every value is a multiple of 2^-24, so 1.0f is impossible). */
void ddp_rng_fill_uniform(const ddp_rng_t *rng, uint64_t offset, float *out, size_t n);

/* out[t] = normal element offset + t, scaled to N(mean, std^2). */
void ddp_rng_fill_normal(const ddp_rng_t *rng, uint64_t offset, float mean, float std, float *out,
                         size_t n);

/* An unbiased integer in [0, bound) from draw `index`; 0 when bound <= 1. */
uint64_t ddp_rng_below(const ddp_rng_t *rng, uint64_t index, uint64_t bound);

#ifdef __cplusplus
}
#endif
#endif
