/* GPT-2 BPE encoding (data/bpe.h): the pre-tokenizer, the merges, and the
 * per-thread cache of pre-token encodings.
 *
 * The pre-tokenizer is GPT-2's regular expression, run by PCRE2 in UTF and
 * UCP mode so that \p{L}, \p{N} and \s follow the Unicode tables PCRE2
 * ships, not tables of ours. PCRE2 matches only well-formed UTF-8, so the
 * text is cut into maximal well-formed runs; a byte outside them is a
 * pre-token of its own (its single-byte token), which keeps every byte.
 *
 * Merging a pre-token is Hugging Face's algorithm: a heap of adjacent pairs
 * ordered by (rank, position), stale entries skipped when popped, so long
 * pre-tokens (a run of thousands of spaces) cost n log n, not n^2. */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#if DDP_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

#include "core/hash.h"
#include "data/bpe_impl.h"
#include "ddptrain/check.h"

#if DDP_HAVE_PCRE2
/* GPT-2's pattern, character for character. */
static const char k_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
#endif

/* Pre-tokens up to CACHE_MAX_KEY bytes are cached (longer ones rarely
 * repeat); the cache is emptied when it holds CACHE_MAX_ENTRIES entries or
 * its key bytes or ids run out, which bounds it to under 3 MiB per thread. */
enum {
  CACHE_MAX_KEY = 64,
  CACHE_MAX_ENTRIES = 1 << 15,
  CACHE_SLOTS = 1 << 16, /* twice the entries: short probe chains */
  CACHE_KEY_BYTES = 1 << 20,
  CACHE_IDS = 1 << 18
};

typedef struct cache_entry {
  uint32_t key_off, ids_off;
  uint16_t key_len, n_ids; /* key_len 0: empty slot */
} cache_entry_t;

typedef struct heap_item {
  int32_t rank, pos;
} heap_item_t;

struct ddp_bpe_cache {
  const ddp_bpe_t *tok;
#if DDP_HAVE_PCRE2
  pcre2_match_data *md;
  pcre2_match_context *mctx;
  pcre2_jit_stack *jit_stack;
#endif
  cache_entry_t *slot; /* CACHE_SLOTS, open addressing */
  uint32_t n_entries;
  char *keys;   /* CACHE_KEY_BYTES: the cached pre-tokens' bytes */
  int32_t *ids; /* CACHE_IDS: their ids */
  uint32_t keys_used, ids_used;
  /* Scratch for merging one pre-token, grown to the longest seen. */
  int32_t *sym, *next, *prev;
  heap_item_t *heap;
  size_t scratch_cap, heap_cap;
};

int ddp_bpe_can_encode(void) {
  return DDP_HAVE_PCRE2;
}

#if DDP_HAVE_PCRE2
ddp_status_t ddp_bpe_regex_compile(ddp_bpe_t *tok) {
  int err;
  PCRE2_SIZE off;
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)k_pattern, PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &off, NULL);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    DDP_FAIL(DDP_ERR_INTERNAL, "tokenizer: PCRE2 refused GPT-2's pattern at offset %zu: %s",
             (size_t)off, (const char *)msg);
  }
  /* Anchored when compiled, not per match: JIT runs only patterns whose
   * match-time options are few, and PCRE2_ANCHORED is not among them. Every
   * position starts a match (the last alternatives cover any character), so
   * anchoring changes no result. JIT is several times faster; where it is
   * unavailable the interpreter gives the same matches. */
  (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
  tok->regex = re;
  return DDP_OK;
}

void ddp_bpe_regex_free(ddp_bpe_t *tok) {
  pcre2_code_free((pcre2_code *)tok->regex);
  tok->regex = NULL;
}
#else
ddp_status_t ddp_bpe_regex_compile(ddp_bpe_t *tok) {
  tok->regex = NULL;
  return DDP_OK;
}

void ddp_bpe_regex_free(ddp_bpe_t *tok) {
  (void)tok;
}
#endif

void ddp_bpe_cache_free(ddp_bpe_cache_t *c) {
  if (!c) return;
#if DDP_HAVE_PCRE2
  pcre2_match_data_free(c->md);
  pcre2_match_context_free(c->mctx);
  pcre2_jit_stack_free(c->jit_stack);
#endif
  free(c->slot);
  free(c->keys);
  free(c->ids);
  free(c->sym);
  free(c->next);
  free(c->prev);
  free(c->heap);
  free(c);
}

ddp_status_t ddp_bpe_cache_create(const ddp_bpe_t *tok, ddp_bpe_cache_t **out) {
  *out = NULL;
  if (!tok->regex)
    DDP_FAIL(DDP_ERR_UNSUPPORTED,
             "tokenizer: this build has no PCRE2 (libpcre2-dev), which BPE encoding needs");
  ddp_bpe_cache_t *c = calloc(1, sizeof *c);
  if (!c) DDP_FAIL(DDP_ERR_OOM, "tokenizer: out of memory for an encoder cache");
  c->tok = tok;
  c->slot = calloc(CACHE_SLOTS, sizeof *c->slot);
  c->keys = malloc(CACHE_KEY_BYTES);
  c->ids = malloc(CACHE_IDS * sizeof *c->ids);
#if DDP_HAVE_PCRE2
  c->md = pcre2_match_data_create_from_pattern((const pcre2_code *)tok->regex, NULL);
  c->mctx = pcre2_match_context_create(NULL);
  /* The lookahead in \s+(?!\S) backtracks; a larger JIT stack than the
   * 32 KiB default keeps a long whitespace run from failing the match. */
  c->jit_stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
  if (c->mctx && c->jit_stack) pcre2_jit_stack_assign(c->mctx, NULL, c->jit_stack);
  int ok = c->md && c->mctx && c->jit_stack;
#else
  int ok = 1;
#endif
  if (!ok || !c->slot || !c->keys || !c->ids) {
    ddp_bpe_cache_free(c);
    DDP_FAIL(DDP_ERR_OOM, "tokenizer: out of memory for an encoder cache");
  }
  *out = c;
  return DDP_OK;
}

static ddp_status_t ids_reserve(ddp_bpe_ids_t *out, size_t more) {
  if (out->n + more <= out->cap) return DDP_OK;
  size_t cap = out->cap ? out->cap : 1024;
  while (cap < out->n + more) cap *= 2;
  int32_t *v = realloc(out->v, cap * sizeof *v);
  if (!v) DDP_FAIL(DDP_ERR_OOM, "tokenizer: out of memory for %zu token ids", cap);
  out->v = v;
  out->cap = cap;
  return DDP_OK;
}

/* ---- merging one pre-token ------------------------------------------------ */

static ddp_status_t scratch_reserve(ddp_bpe_cache_t *c, size_t n) {
  if (n <= c->scratch_cap) return DDP_OK;
  size_t cap = c->scratch_cap ? c->scratch_cap : 256;
  while (cap < n) cap *= 2;
  int32_t *sym = realloc(c->sym, cap * sizeof *sym);
  if (sym) c->sym = sym;
  int32_t *next = realloc(c->next, cap * sizeof *next);
  if (next) c->next = next;
  int32_t *prev = realloc(c->prev, cap * sizeof *prev);
  if (prev) c->prev = prev;
  if (!sym || !next || !prev)
    DDP_FAIL(DDP_ERR_OOM, "tokenizer: out of memory for a %zu-byte pre-token", n);
  c->scratch_cap = cap;
  return DDP_OK;
}

static int heap_less(heap_item_t a, heap_item_t b) {
  return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static ddp_status_t heap_push(ddp_bpe_cache_t *c, size_t *n, heap_item_t it) {
  if (*n == c->heap_cap) {
    size_t cap = c->heap_cap ? 2 * c->heap_cap : 256;
    heap_item_t *h = realloc(c->heap, cap * sizeof *h);
    if (!h) DDP_FAIL(DDP_ERR_OOM, "tokenizer: out of memory for the merge heap");
    c->heap = h;
    c->heap_cap = cap;
  }
  size_t i = (*n)++;
  while (i > 0 && heap_less(it, c->heap[(i - 1) / 2])) {
    c->heap[i] = c->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  c->heap[i] = it;
  return DDP_OK;
}

static heap_item_t heap_pop(ddp_bpe_cache_t *c, size_t *n) {
  heap_item_t top = c->heap[0], last = c->heap[--*n];
  size_t i = 0;
  for (;;) {
    size_t k = 2 * i + 1;
    if (k >= *n) break;
    if (k + 1 < *n && heap_less(c->heap[k + 1], c->heap[k])) ++k;
    if (!heap_less(c->heap[k], last)) break;
    c->heap[i] = c->heap[k];
    i = k;
  }
  if (*n > 0) c->heap[i] = last;
  return top;
}

/* Pushes the pair starting at symbol pos, if it merges. */
static ddp_status_t push_pair(ddp_bpe_cache_t *c, size_t *n_heap, int32_t pos) {
  if (pos < 0 || c->next[pos] < 0) return DDP_OK;
  const bpe_merge_t *m = bpe_merge_find(c->tok, c->sym[pos], c->sym[c->next[pos]]);
  if (!m) return DDP_OK;
  return heap_push(c, n_heap, (heap_item_t){m->rank, pos});
}

/* Appends the ids of one pre-token b[0..n) to out. */
static ddp_status_t merge_pretoken(ddp_bpe_cache_t *c, const unsigned char *b, size_t n,
                                   ddp_bpe_ids_t *out) {
  const ddp_bpe_t *t = c->tok;
  DDP_CHECK(scratch_reserve(c, n));
  for (size_t i = 0; i < n; ++i) {
    c->sym[i] = t->byte_id[b[i]];
    c->prev[i] = (int32_t)i - 1;
    c->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
  }
  size_t n_heap = 0;
  for (size_t i = 0; i + 1 < n; ++i) DDP_CHECK(push_pair(c, &n_heap, (int32_t)i));
  while (n_heap > 0) {
    heap_item_t it = heap_pop(c, &n_heap);
    int32_t left = it.pos;
    /* Stale when the left symbol was absorbed (sym -1), or either side has
     * changed since the pair was pushed: the pair then has another rank. */
    if (c->sym[left] < 0 || c->next[left] < 0) continue;
    int32_t right = c->next[left];
    const bpe_merge_t *m = bpe_merge_find(t, c->sym[left], c->sym[right]);
    if (!m || m->rank != it.rank) continue;
    c->sym[left] = m->merged;
    c->sym[right] = -1;
    c->next[left] = c->next[right];
    if (c->next[right] >= 0) c->prev[c->next[right]] = left;
    DDP_CHECK(push_pair(c, &n_heap, c->prev[left]));
    DDP_CHECK(push_pair(c, &n_heap, left));
  }
  DDP_CHECK(ids_reserve(out, n));
  for (int32_t i = 0; i >= 0; i = c->next[i]) out->v[out->n++] = c->sym[i];
  return DDP_OK;
}

/* Through the cache for short pre-tokens: most words recur. */
static ddp_status_t encode_pretoken(ddp_bpe_cache_t *c, const unsigned char *b, size_t n,
                                    ddp_bpe_ids_t *out) {
  if (n > CACHE_MAX_KEY) return merge_pretoken(c, b, n, out);
  const uint32_t home = (uint32_t)ddp_fnv1a64(DDP_FNV1A64_INIT, b, n) & (CACHE_SLOTS - 1);
  uint32_t i = home;
  for (; c->slot[i].key_len; i = (i + 1) & (CACHE_SLOTS - 1)) {
    const cache_entry_t *e = &c->slot[i];
    if (e->key_len == n && memcmp(c->keys + e->key_off, b, n) == 0) {
      DDP_CHECK(ids_reserve(out, e->n_ids));
      memcpy(out->v + out->n, c->ids + e->ids_off, e->n_ids * sizeof *out->v);
      out->n += e->n_ids;
      return DDP_OK;
    }
  }
  size_t first = out->n;
  DDP_CHECK(merge_pretoken(c, b, n, out));
  size_t n_ids = out->n - first;
  /* Full: start again (the slot found is then stale). A pre-token has at
   * most CACHE_MAX_KEY bytes and ids, so an empty cache always has room. */
  if (c->n_entries == CACHE_MAX_ENTRIES || c->keys_used + n > CACHE_KEY_BYTES ||
      c->ids_used + n_ids > CACHE_IDS) {
    memset(c->slot, 0, CACHE_SLOTS * sizeof *c->slot);
    c->n_entries = c->keys_used = c->ids_used = 0;
    i = home;
  }
  c->slot[i] = (cache_entry_t){c->keys_used, c->ids_used, (uint16_t)n, (uint16_t)n_ids};
  memcpy(c->keys + c->keys_used, b, n);
  memcpy(c->ids + c->ids_used, out->v + first, n_ids * sizeof *out->v);
  c->keys_used += (uint32_t)n;
  c->ids_used += (uint32_t)n_ids;
  c->n_entries++;
  return DDP_OK;
}

/* ---- pre-tokenizing --------------------------------------------------------- */

/* Length of the well-formed UTF-8 prefix of s[0..n). */
static size_t utf8_run(const unsigned char *s, size_t n) {
  size_t i = 0;
  uint32_t cp;
  while (i < n) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    int len = bpe_utf8_next(s + i, n - i, &cp);
    if (len == 0) break;
    i += (size_t)len;
  }
  return i;
}

#if DDP_HAVE_PCRE2
/* The end of the pre-token that starts at s[at] in the well-formed run
 * s[0..run). Matching within the run alone: (?!\S) sees its end as the end. */
static ddp_status_t pretoken_end(ddp_bpe_cache_t *c, const unsigned char *s, size_t run, size_t at,
                                 size_t *end) {
  int rc = pcre2_match((const pcre2_code *)c->tok->regex, s, run, at, PCRE2_NO_UTF_CHECK, c->md,
                       c->mctx);
  PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
  /* The pattern's last alternatives cover every character, so an anchored
   * match always succeeds and is never empty; anything else is PCRE2's own
   * failure (a resource limit). */
  if (rc < 0 || ov[1] <= at) {
    PCRE2_UCHAR msg[256];
    if (rc < 0)
      pcre2_get_error_message(rc, msg, sizeof msg);
    else
      strcpy((char *)msg, "empty match");
    DDP_FAIL(DDP_ERR_INTERNAL, "bpe encode: the pre-tokenizer failed at byte %zu: %s", at,
             (const char *)msg);
  }
  *end = ov[1];
  return DDP_OK;
}
#else
static ddp_status_t pretoken_end(ddp_bpe_cache_t *c, const unsigned char *s, size_t run, size_t at,
                                 size_t *end) {
  (void)c, (void)s, (void)run, (void)at, (void)end;
  DDP_FAIL(DDP_ERR_UNSUPPORTED, "bpe encode: this build has no PCRE2 (libpcre2-dev)");
}
#endif

ddp_status_t ddp_bpe_encode(const ddp_bpe_t *tok, ddp_bpe_cache_t *cache, const char *text,
                            size_t len, ddp_bpe_ids_t *out) {
  if (!cache || cache->tok != tok)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "bpe encode: the cache was not made for this tokenizer");
  const unsigned char *s = (const unsigned char *)text;
  size_t pos = 0;
  while (pos < len) {
    size_t run = utf8_run(s + pos, len - pos);
    if (run == 0) { /* a byte that is not UTF-8: its own pre-token */
      DDP_CHECK(encode_pretoken(cache, s + pos, 1, out));
      ++pos;
      continue;
    }
    for (size_t at = 0, end; at < run; at = end) {
      DDP_CHECK(pretoken_end(cache, s + pos, run, at, &end));
      DDP_CHECK(encode_pretoken(cache, s + pos + at, end - at, out));
    }
    pos += run;
  }
  return DDP_OK;
}
