/* The inside of a loaded BPE tokenizer, shared by its loader (bpe.c) and
 * its encoder (bpe_encode.c). Nothing outside those two files includes it. */
#ifndef DDPTRAIN_DATA_BPE_IMPL_H
#define DDPTRAIN_DATA_BPE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "data/bpe.h"

/* One merge: the pair (left, right) becomes `merged`; lower rank merges
 * first. Kept in an open-addressing table keyed by the pair. */
typedef struct bpe_merge {
  int32_t left, right; /* -1 marks an empty slot */
  int32_t rank, merged;
} bpe_merge_t;

struct ddp_bpe {
  int32_t n_vocab, eot;
  char *blob;           /* every token's bytes, back to back */
  uint32_t *tok_off;    /* token id -> offset in blob; tok_off[n_vocab] = blob size */
  int32_t byte_id[256]; /* the single-byte tokens every encoding starts from */
  bpe_merge_t *merges;
  uint32_t merge_mask; /* table size - 1 (a power of two) */
  int32_t n_merges;
  void *regex; /* the compiled pre-tokenizer (pcre2_code_8 *); NULL without PCRE2 */
};

static inline uint32_t bpe_pair_hash(int32_t a, int32_t b) {
  uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
  k *= UINT64_C(0x9e3779b97f4a7c15);
  return (uint32_t)(k >> 32);
}

/* The merge for (a, b), or NULL when the pair never merges. */
static inline const bpe_merge_t *bpe_merge_find(const ddp_bpe_t *t, int32_t a, int32_t b) {
  for (uint32_t i = bpe_pair_hash(a, b) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
    const bpe_merge_t *m = &t->merges[i];
    if (m->left < 0) return NULL;
    if (m->left == a && m->right == b) return m;
  }
}

/* Length (1..4) of the well-formed UTF-8 sequence at s[0..n) and its code
 * point, or 0 when it is not one: overlong forms, surrogates and code points
 * above U+10FFFF are refused, exactly as PCRE2 refuses them. */
static inline int bpe_utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
  unsigned char c = s[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
  if (len == 0 || c > 0xf4 || (size_t)len > n) return 0;
  uint32_t v = c & (0x7f >> len);
  for (int i = 1; i < len; ++i) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    v = (v << 6) | (s[i] & 0x3f);
  }
  static const uint32_t k_min[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < k_min[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  *cp = v;
  return len;
}

/* Compiles GPT-2's pre-tokenizer into tok->regex (bpe_encode.c); without
 * PCRE2 it leaves it NULL and succeeds, so decoding still works. */
ddp_status_t ddp_bpe_regex_compile(ddp_bpe_t *tok);
void ddp_bpe_regex_free(ddp_bpe_t *tok);

#endif
