/* FNV-1a (64-bit) for the runtime's non-cryptographic hashing: RNG
 * sub-stream tags, data-split decisions, cross-rank fingerprints. Three lines
 * of arithmetic with a published definition; a hashing library would add a
 * dependency for nothing. Values are part of contracts (the data split, the
 * initial weights), so the constants never change. */
#ifndef DDPTRAIN_HASH_H
#define DDPTRAIN_HASH_H

#include <stddef.h>
#include <stdint.h>

#define DDP_FNV1A64_INIT UINT64_C(0xcbf29ce484222325) /* offset basis 14695981039346656037 */

/* Continues hash h over n bytes (start with DDP_FNV1A64_INIT). */
static inline uint64_t ddp_fnv1a64(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * UINT64_C(0x100000001b3);
  return h;
}

#endif
