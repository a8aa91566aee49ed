/* Token corpus: segments (mapped shards or host arrays), validation and the
 * window index (see ddptrain/data.h for the vocabulary).
 *
 * Documents are found by their leading EOT (docs/design.md §5.1). Tokens before a
 * segment's first EOT (a shard cut in the middle of a document, as llm.c's
 * writers do) are kept as a document of their own rather than dropped:
 * losing data silently is the one thing a reader must not do. One warning
 * for the whole corpus says how many segments and tokens that concerns. A
 * lone EOT has no target and is skipped (counted in n_skipped). A
 * document's targets are its tokens after the leading EOT and then an EOT
 * that closes it (ddp_window_t.ends_doc). Documents longer than seq_len
 * tokens become consecutive windows overlapping by one token, so every
 * target lands in exactly one window.
 *
 * The index is built in one pass per segment that also checks every token
 * against the vocabulary, so a bad token is found at start-up, with its file
 * and byte offset, and never at step 10000. Tokens are read in the host's
 * byte order straight from the mapping; shards are little-endian, so a
 * big-endian host is refused at compile time rather than misreading data.
 *
 * Each segment also gets a content hash that ranks compare, so a shard of
 * the same name and size but other bytes on one rank is refused instead of
 * trained on. It samples the bytes rather than reading them all again: the
 * index pass has just brought the segment into the page cache, and a few
 * KiB per MiB cost next to nothing there (bench/shard_fingerprint.sh),
 * while a full hash would cost a second pass over 100 GB at hash speed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ddptrain/check.h"
#include "ddptrain/data.h"
#include "core/hash.h"
#include "data/corpus_impl.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ddptrain reads little-endian token shards in place and needs a little-endian host"
#endif

void ddp_corpus_destroy(ddp_corpus_t *c) {
  if (!c) return;
  for (int i = 0; c->segs && i < c->n_segs; ++i) {
    ddp_token_seg_t *s = &c->segs[i];
    if (s->map)
      munmap(s->map, s->map_bytes);
    else
      free((void *)s->data);
    free(s->name);
  }
  free(c->segs);
  free(c->windows);
  free(c->answer_at);
  memset(c, 0, sizeof *c);
}

void ddp_corpus_read(const ddp_corpus_t *c, int32_t seg, int64_t start, int64_t n, int32_t *dst) {
  const ddp_token_seg_t *s = &c->segs[seg];
  const int64_t at = start - s->first;
  if (s->width == 2) {
    const uint16_t *p = (const uint16_t *)s->data + at;
    for (int64_t i = 0; i < n; ++i) dst[i] = p[i];
  } else {
    memcpy(dst, (const uint32_t *)s->data + at, (size_t)n * sizeof *dst);
  }
}

void ddp_corpus_read_window(const ddp_corpus_t *c, const ddp_window_t *w, int32_t *dst) {
  const int64_t held = w->len - (int64_t)w->ends_doc;
  ddp_corpus_read(c, w->seg, w->start, held, dst);
  if (w->ends_doc) dst[held] = c->eot;
}

int32_t ddp_corpus_token(const ddp_corpus_t *c, int64_t i) {
  int lo = 0, hi = c->n_segs - 1; /* the last segment with first <= i */
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (c->segs[mid].first <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  int32_t t;
  ddp_corpus_read(c, lo, i, 1, &t);
  return t;
}

/* ---- the index ------------------------------------------------------------- */

typedef struct index_builder {
  ddp_corpus_t *c;
  int64_t cap;
} index_builder_t;

static ddp_status_t push_document(index_builder_t *b, int32_t seg, int64_t start, int64_t len) {
  ddp_corpus_t *c = b->c;
  if (len < 2) {
    ++c->n_skipped;
    return DDP_OK;
  }
  const int64_t T = c->seq_len;
  /* The document's tokens and the EOT that closes it: every token after the
   * leading EOT is a target, and so is the closing EOT, which is where the
   * next document starts (or the end of the segment). Without it no
   * document would ever end in a model's predictions. */
  const int64_t total = len + 1;
  const int64_t nw = (total - 1 + T - 1) / T; /* total - 1 targets, at most T per window */
  if (c->n_windows + nw > b->cap) {
    int64_t cap = b->cap ? b->cap * 2 : 4096;
    while (cap < c->n_windows + nw) cap *= 2;
    ddp_window_t *grown = realloc(c->windows, (size_t)cap * sizeof *grown);
    if (!grown)
      DDP_FAIL(DDP_ERR_OOM, "corpus: out of memory for an index of %lld windows", (long long)cap);
    c->windows = grown;
    b->cap = cap;
  }
  const int64_t end = start + total;
  for (int64_t k = 0; k < nw; ++k) {
    const int64_t ws = start + k * T;
    const int64_t wl = end - ws < T + 1 ? end - ws : T + 1;
    c->windows[c->n_windows++] =
        (ddp_window_t){.start = ws, .len = (int32_t)wl, .seg = seg, .ends_doc = k == nw - 1};
  }
  ++c->n_docs;
  return DDP_OK;
}

/* One pass over a segment: checks tokens and cuts documents at EOTs. A
 * macro body so that the uint16 and uint32 loops are each tight. */
#define SCAN_SEGMENT(type)                                                      \
  do {                                                                          \
    const type *p = (const type *)s->data;                                      \
    for (int64_t i = 0; i < s->n_tokens; ++i) {                                 \
      const uint32_t v = p[i];                                                  \
      if (v >= (uint32_t)c->vocab) {                                            \
        bad_index = i;                                                          \
        bad_value = v;                                                          \
        break;                                                                  \
      }                                                                         \
      if (v == (uint32_t)c->eot) {                                              \
        if (i > doc) DDP_CHECK(push_document(b, seg, s->first + doc, i - doc)); \
        if (first_eot < 0) first_eot = i;                                       \
        doc = i;                                                                \
      }                                                                         \
    }                                                                           \
  } while (0)

/* ---- the content hash --------------------------------------------------------- */

/* A sample is SAMPLE_BYTES at each multiple of the stride, plus the last
 * SAMPLE_BYTES. The stride is n / MIN_SAMPLES clamped to [SAMPLE_BYTES,
 * MAX_STRIDE]: a small file is hashed whole, every file gets at least
 * MIN_SAMPLES samples, and a large one SAMPLE_BYTES per MAX_STRIDE (0.4%).
 * Offsets depend only on n, so every rank samples the same places. */
#define SAMPLE_BYTES 4096
#define MIN_SAMPLES 64
#define MAX_STRIDE (1 << 20)

uint64_t ddp_corpus_sample_hash(const void *bytes, int64_t n) {
  const unsigned char *p = bytes;
  uint64_t h = ddp_fnv1a64(DDP_FNV1A64_INIT, &n, sizeof n);
  if (n <= 0) return h;
  int64_t stride = n / MIN_SAMPLES;
  if (stride < SAMPLE_BYTES) stride = SAMPLE_BYTES;
  if (stride > MAX_STRIDE) stride = MAX_STRIDE;
  for (int64_t at = 0; at < n; at += stride) {
    const int64_t len = n - at < SAMPLE_BYTES ? n - at : SAMPLE_BYTES;
    h = ddp_fnv1a64(h, p + at, (size_t)len);
  }
  const int64_t tail = n < SAMPLE_BYTES ? n : SAMPLE_BYTES;
  return ddp_fnv1a64(h, p + n - tail, (size_t)tail);
}

/* A mapped shard is hashed whole (header included), a host array as its
 * tokens. */
static uint64_t segment_content_hash(const ddp_token_seg_t *s) {
  if (s->map) return ddp_corpus_sample_hash(s->map, s->file_bytes);
  return ddp_corpus_sample_hash(s->data, s->n_tokens * s->width);
}

static ddp_status_t index_segment(index_builder_t *b, int32_t seg) {
  ddp_corpus_t *c = b->c;
  const ddp_token_seg_t *s = &c->segs[seg];
  int64_t doc = 0, bad_index = -1, first_eot = -1;
  uint32_t bad_value = 0;
  if (s->width == 2)
    SCAN_SEGMENT(uint16_t);
  else
    SCAN_SEGMENT(uint32_t);
  if (bad_index >= 0) {
    if (s->map)
      DDP_FAIL(DDP_ERR_FORMAT,
               "shard '%s': token %lld (byte %lld) has value %lu, not below the vocab size %d",
               s->name, (long long)bad_index,
               (long long)DDP_SHARD_HEADER_BYTES + (long long)bad_index * s->width,
               (unsigned long)bad_value, (int)c->vocab);
    DDP_FAIL(DDP_ERR_FORMAT, "%s: token %lld has value %lu, outside the vocabulary [0, %d)",
             s->name, (long long)(s->first + bad_index), (unsigned long)bad_value, (int)c->vocab);
  }
  if (s->n_tokens > 0 && ((s->width == 2 ? ((const uint16_t *)s->data)[0]
                                         : ((const uint32_t *)s->data)[0]) != (uint32_t)c->eot)) {
    const int64_t head = first_eot >= 0 ? first_eot : s->n_tokens; /* no EOT: all head */
    ++c->n_headless;
    c->headless_tokens += head;
  }
  return push_document(b, seg, s->first + doc, s->n_tokens - doc);
}

ddp_status_t ddp_corpus_build_index(ddp_corpus_t *c, int seq_len, const char *source) {
  if (seq_len < 1 || seq_len > INT32_MAX - 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: seq_len %d must be at least 1", source, seq_len);
  c->seq_len = seq_len;
  c->n_tokens = 0;
  for (int i = 0; i < c->n_segs; ++i) {
    c->segs[i].first = c->n_tokens;
    c->n_tokens += c->segs[i].n_tokens;
  }
  index_builder_t b = {.c = c};
  for (int32_t i = 0; i < c->n_segs; ++i) {
    DDP_CHECK(index_segment(&b, i));
    /* now, while the pass above has the segment in the page cache */
    c->segs[i].content_hash = segment_content_hash(&c->segs[i]);
  }
  if (c->n_docs == 0)
    DDP_FAIL(DDP_ERR_FORMAT,
             "%s: no document has a token to predict (%lld tokens, %lld lone EOTs); "
             "is EOT id %d right?",
             source, (long long)c->n_tokens, (long long)c->n_skipped, (int)c->eot);
  if (b.cap > c->n_windows) { /* give back the doubling slack */
    ddp_window_t *fit = realloc(c->windows, (size_t)c->n_windows * sizeof *fit);
    if (fit) c->windows = fit;
  }
  if (c->n_headless > 0)
    DDP_LOG_WARN(
        "%s: %lld segment%s did not start with EOT (id %d); the %lld tokens before "
        "their first EOT are kept as documents of their own",
        source, (long long)c->n_headless, c->n_headless == 1 ? "" : "s", (int)c->eot,
        (long long)c->headless_tokens);
  return DDP_OK;
}

ddp_status_t ddp_corpus_from_tokens(ddp_corpus_t *c, const int32_t *tokens, int64_t n_tokens,
                                    int32_t eot, int32_t vocab, int seq_len, const char *source) {
  if (!c) DDP_FAIL(DDP_ERR_INVALID_ARG, "corpus_from_tokens: NULL corpus");
  memset(c, 0, sizeof *c);
  const char *name = source ? source : "corpus";
  if (!tokens || n_tokens <= 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: %lld tokens; a corpus needs at least one", name,
             (long long)n_tokens);
  if (vocab < 1 || eot < 0 || eot >= vocab)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: EOT id %d is outside the vocabulary [0, %d)", name, (int)eot,
             (int)vocab);
  if (vocab > DDP_SHARD_MAX_VOCAB)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: vocabulary size %d exceeds the largest supported, %d (2^24)",
             name, (int)vocab, DDP_SHARD_MAX_VOCAB);
  if ((uint64_t)n_tokens > SIZE_MAX / sizeof(int32_t))
    DDP_FAIL(DDP_ERR_OOM, "%s: %lld tokens do not fit in memory", name, (long long)n_tokens);
  /* Negative values would turn into huge ones when read as uint32; refuse
   * them here with their true value. */
  for (int64_t i = 0; i < n_tokens; ++i)
    if (tokens[i] < 0)
      DDP_FAIL(DDP_ERR_FORMAT, "%s: token %lld has value %d, outside the vocabulary [0, %d)", name,
               (long long)i, (int)tokens[i], (int)vocab);
  ddp_status_t st = DDP_OK;
  c->eot = eot;
  c->vocab = vocab;
  c->segs = calloc(1, sizeof *c->segs);
  void *copy = malloc((size_t)n_tokens * sizeof(int32_t));
  char *dup = strdup(name);
  if (!c->segs || !copy || !dup) {
    free(copy);
    free(dup);
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, fail, "%s: cannot allocate %.1f MiB for %lld tokens", name,
                  (double)n_tokens * 4 / 1048576.0, (long long)n_tokens);
  }
  memcpy(copy, tokens, (size_t)n_tokens * sizeof(int32_t));
  c->segs[0] = (ddp_token_seg_t){.data = copy, .n_tokens = n_tokens, .width = 4, .name = dup};
  c->n_segs = 1;
  DDP_CHECK_GOTO(ddp_corpus_build_index(c, seq_len, name), st, fail);
  return DDP_OK;
fail:
  ddp_corpus_destroy(c);
  return st;
}

uint64_t ddp_corpus_segment_fingerprint(const ddp_corpus_t *c, int seg) {
  const ddp_token_seg_t *s = &c->segs[seg];
  const char *slash = strrchr(s->name, '/');
  const char *base = slash ? slash + 1 : s->name;
  uint64_t h = ddp_fnv1a64(DDP_FNV1A64_INIT, base, strlen(base) + 1);
  h = ddp_fnv1a64(h, &s->file_bytes, sizeof s->file_bytes);
  return ddp_fnv1a64(h, &s->n_tokens, sizeof s->n_tokens);
}

uint64_t ddp_corpus_fingerprint(const ddp_corpus_t *c) {
  uint64_t h = DDP_FNV1A64_INIT;
  for (int i = 0; i < c->n_segs; ++i) {
    const uint64_t seg[2] = {ddp_corpus_segment_fingerprint(c, i), c->segs[i].content_hash};
    h = ddp_fnv1a64(h, seg, sizeof seg);
  }
  const int64_t tail[4] = {c->eot, c->vocab, c->seq_len, c->n_windows};
  return ddp_fnv1a64(h, tail, sizeof tail);
}
