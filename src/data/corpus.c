/* In-memory token corpus: validation, the document table and the window table
 * (see ddptrain/data.h for the vocabulary).
 *
 * Documents are found by their leading EOT (DESIGN.md §3). Tokens before the
 * first EOT — a shard cut in the middle of a document — are kept as a
 * document of their own with a warning rather than dropped: losing data
 * silently is the one thing a reader must not do. A lone EOT has no target
 * and is skipped (counted in n_skipped). Documents longer than seq_len + 1
 * tokens become consecutive windows overlapping by one token, so every target
 * lands in exactly one window. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/data.h"

static const char *name_of(const char *source) {
  return source ? source : "corpus";
}

static void free_tables(ddp_corpus_t *c) {
  free(c->docs);
  free(c->windows);
  c->docs = NULL;
  c->windows = NULL;
  c->n_docs = c->n_windows = c->n_skipped = 0;
  c->seq_len = 0;
}

void ddp_corpus_destroy(ddp_corpus_t *c) {
  if (!c) return;
  free_tables(c);
  free(c->tokens);
  free(c->answer_at);
  memset(c, 0, sizeof *c);
}

ddp_status_t ddp_corpus_alloc(ddp_corpus_t *c, int64_t n_tokens, int32_t eot, int32_t vocab) {
  if (!c) DDP_FAIL(DDP_ERR_INVALID_ARG, "corpus_alloc: NULL corpus");
  memset(c, 0, sizeof *c);
  if (n_tokens <= 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "corpus: %lld tokens; a corpus needs at least one",
             (long long)n_tokens);
  if (vocab < 1 || eot < 0 || eot >= vocab)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "corpus: EOT id %d is outside the vocabulary [0, %d)", (int)eot,
             (int)vocab);
  if ((uint64_t)n_tokens > SIZE_MAX / sizeof(int32_t))
    DDP_FAIL(DDP_ERR_OOM, "corpus: %lld tokens do not fit in memory", (long long)n_tokens);
  c->tokens = malloc((size_t)n_tokens * sizeof(int32_t));
  if (!c->tokens)
    DDP_FAIL(DDP_ERR_OOM, "corpus: cannot allocate %.1f MiB for %lld tokens",
             (double)n_tokens * 4 / 1048576.0, (long long)n_tokens);
  c->n_tokens = n_tokens;
  c->eot = eot;
  c->vocab = vocab;
  return DDP_OK;
}

/* Walks the documents twice: the first pass counts, the second fills, so the
 * tables are allocated once at their final size. */
typedef struct scan {
  int64_t n_docs, n_windows, n_skipped, head_len;
} scan_t;

static int64_t windows_of(int64_t len, int seq_len) {
  /* len - 1 targets, at most seq_len per window */
  return (len - 1 + seq_len - 1) / seq_len;
}

static void scan_docs(ddp_corpus_t *c, int seq_len, scan_t *s, int fill) {
  memset(s, 0, sizeof *s);
  const int32_t *tok = c->tokens;
  const int64_t n = c->n_tokens;
  int64_t start = 0;
  while (start < n) {
    int64_t end = start + 1;
    while (end < n && tok[end] != c->eot) ++end;
    const int64_t len = end - start;
    if (start == 0 && tok[0] != c->eot) s->head_len = len;
    if (len < 2) {
      ++s->n_skipped;
    } else {
      const int64_t nw = windows_of(len, seq_len);
      if (fill) {
        c->docs[s->n_docs] = (ddp_doc_t){.start = start, .len = len};
        for (int64_t k = 0; k < nw; ++k) {
          const int64_t w_start = start + k * seq_len;
          const int64_t w_len = end - w_start < seq_len + 1 ? end - w_start : seq_len + 1;
          c->windows[s->n_windows + k] = (ddp_window_t){
              .start = w_start, .doc = s->n_docs, .len = (int32_t)w_len, .part = (int32_t)k};
        }
      }
      ++s->n_docs;
      s->n_windows += nw;
    }
    start = end;
  }
}

ddp_status_t ddp_corpus_index(ddp_corpus_t *c, int seq_len, const char *source) {
  if (!c || !c->tokens) DDP_FAIL(DDP_ERR_INVALID_ARG, "corpus_index: corpus not allocated");
  const char *name = name_of(source);
  if (seq_len < 1 || seq_len > INT32_MAX - 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: seq_len %d must be at least 1", name, seq_len);
  for (int64_t i = 0; i < c->n_tokens; ++i) {
    const int32_t t = c->tokens[i];
    if (t < 0 || t >= c->vocab)
      DDP_FAIL(DDP_ERR_FORMAT, "%s: token %lld has value %d, outside the vocabulary [0, %d)", name,
               (long long)i, (int)t, (int)c->vocab);
  }
  free_tables(c);

  scan_t s;
  scan_docs(c, seq_len, &s, 0);
  if (s.n_docs == 0)
    DDP_FAIL(DDP_ERR_FORMAT,
             "%s: no document has a token to predict (%lld tokens, %lld lone EOTs); "
             "is EOT id %d right?",
             name, (long long)c->n_tokens, (long long)s.n_skipped, (int)c->eot);
  c->docs = malloc((size_t)s.n_docs * sizeof *c->docs);
  c->windows = malloc((size_t)s.n_windows * sizeof *c->windows);
  if (!c->docs || !c->windows) {
    free_tables(c);
    DDP_FAIL(DDP_ERR_OOM, "%s: cannot allocate the tables of %lld documents and %lld windows", name,
             (long long)s.n_docs, (long long)s.n_windows);
  }
  scan_docs(c, seq_len, &s, 1);
  c->n_docs = s.n_docs;
  c->n_windows = s.n_windows;
  c->n_skipped = s.n_skipped;
  c->seq_len = seq_len;
  if (s.head_len > 1)
    DDP_LOG_WARN(
        "%s: does not start with EOT (id %d); the %lld tokens before the first EOT are "
        "kept as a document of their own",
        name, (int)c->eot, (long long)s.head_len);
  else if (s.head_len == 1)
    DDP_LOG_WARN(
        "%s: does not start with EOT (id %d); the one token before the first EOT has "
        "no target and is skipped",
        name, (int)c->eot);
  return DDP_OK;
}

ddp_status_t ddp_corpus_from_tokens(ddp_corpus_t *c, const int32_t *tokens, int64_t n_tokens,
                                    int32_t eot, int32_t vocab, int seq_len, const char *source) {
  if (!c || (!tokens && n_tokens > 0))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "corpus_from_tokens: NULL argument");
  DDP_CHECK(ddp_corpus_alloc(c, n_tokens, eot, vocab));
  memcpy(c->tokens, tokens, (size_t)n_tokens * sizeof(int32_t));
  ddp_status_t st = ddp_corpus_index(c, seq_len, source);
  if (st != DDP_OK) ddp_corpus_destroy(c);
  return st;
}
