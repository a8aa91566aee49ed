/* ddpprep's train/validation split (docs/design.md §5.1, §5.6): a record
 * goes to validation when a hash of --seed and its bytes falls below
 * --val-frac. The choice depends only on the record's bytes, never on its
 * position, so adding inputs moves nothing between splits, and duplicates
 * land on the same side. Shared by the text and the image conversions. */
#ifndef DDPTRAIN_TOOLS_DDPPREP_SPLIT_H
#define DDPTRAIN_TOOLS_DDPPREP_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#include "core/hash.h"

/* FNV-1a over the seed then the bytes, then a splitmix64 finaliser so the
 * top bits used for the fraction are well mixed even for short records. */
static inline int ddpprep_is_val(uint64_t seed, double val_frac, const void *b, size_t n) {
  if (val_frac <= 0) return 0;
  unsigned char s[8]; /* little-endian, whatever the host's byte order */
  for (int i = 0; i < 8; ++i) s[i] = (unsigned char)(seed >> (8 * i));
  uint64_t h = ddp_fnv1a64(ddp_fnv1a64(DDP_FNV1A64_INIT, s, 8), b, n);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return (double)(h >> 11) * (1.0 / 9007199254740992.0) < val_frac;
}

#endif
