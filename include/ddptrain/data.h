/* The data side of training: token corpora, llm.c-compatible shards, the
 * built-in synthetic data set, and the micro-batch plan.
 *
 * This is the first, simple version, enough for an end-to-end CPU run: a
 * corpus is one array of tokens in host memory, a shard is read with fread,
 * and the plan shuffles windows per epoch and packs them in that order under a
 * padded-token budget. Memory-mapped multi-shard globs, a document index, the
 * length-bucketing distributed sampler and a loader thread replace pieces of
 * this later; the types below are kept plain so that can happen without
 * changing what the trainer sees: a ddp_batch_t filled by index.
 *
 * Vocabulary used throughout:
 *   document  the tokens from one EOT up to (not including) the next EOT; the
 *             EOT *starts* each document (DESIGN.md §3, a contract). A lone EOT
 *             (length 1) has nothing to predict and is skipped.
 *   window    a training row cut from one document: at most seq_len + 1
 *             tokens, i.e. seq_len inputs and seq_len targets (the window
 *             shifted by one). A longer document is cut into consecutive
 *             windows that overlap by one token — the last token of window k
 *             is the first token of window k + 1 — because that token is the
 *             *target* of the last position of window k and the *input* of the
 *             first position of window k + 1; without the overlap one target
 *             per cut would be lost. Every target of a document is therefore
 *             in exactly one window. (Window k + 1 does not see the context
 *             before its start: that is the price of a bounded seq_len.)
 *   micro-batch  B windows right-padded to the longest, T = longest - 1.
 *
 * Every function reports bad input with a logged error naming the file, the
 * byte offset or the index involved, and a negative status. */
#ifndef DDPTRAIN_DATA_H
#define DDPTRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- corpus ---------------------------------------------------------------- */

typedef struct ddp_doc {
  int64_t start; /* index of the document's EOT in corpus->tokens (of its first
                    token for tokens before a corpus's first EOT) */
  int64_t len;   /* tokens, EOT included; >= 2 */
} ddp_doc_t;

typedef struct ddp_window {
  int64_t start; /* index of the window's first token in corpus->tokens */
  int64_t doc;   /* index into corpus->docs */
  int32_t len;   /* tokens, 2 .. seq_len + 1: len - 1 targets */
  int32_t part;  /* 0 for the window that starts at the document's EOT */
} ddp_window_t;

typedef struct ddp_corpus {
  int32_t *tokens; /* n_tokens, each in [0, vocab) */
  int64_t n_tokens;
  int32_t eot;
  int32_t vocab;
  int seq_len; /* windows hold at most seq_len + 1 tokens; 0 until indexed */

  ddp_doc_t *docs; /* trainable documents (>= 2 tokens), in token order */
  int64_t n_docs;
  ddp_window_t *windows; /* in token order; the plan shuffles indices into it */
  int64_t n_windows;
  int64_t n_skipped; /* lone-EOT documents left out */

  /* Optional, for held-out accuracy (the built-in data set fills it; NULL
   * otherwise): per document, the offset from docs[i].start of the '=' of its
   * last task line, or -1. The prompt is tokens [start, start + answer_at]
   * ('=' included) and the expected answer is the rest of the document, which
   * ends with '\n'. */
  int32_t *answer_at;
} ddp_corpus_t;

/* Two-phase construction, so a reader can fill the token array in place:
 * alloc() takes the token storage (contents undefined), the caller writes
 * corpus->tokens[0 .. n_tokens), index() validates every token against the
 * vocabulary and builds the document and window tables. `source` names the
 * data in messages (a path, "builtin"). */
ddp_status_t ddp_corpus_alloc(ddp_corpus_t *corpus, int64_t n_tokens, int32_t eot, int32_t vocab);
ddp_status_t ddp_corpus_index(ddp_corpus_t *corpus, int seq_len, const char *source);

/* alloc + copy + index. */
ddp_status_t ddp_corpus_from_tokens(ddp_corpus_t *corpus, const int32_t *tokens, int64_t n_tokens,
                                    int32_t eot, int32_t vocab, int seq_len, const char *source);

/* Frees everything; safe on a zeroed or half-built corpus. */
void ddp_corpus_destroy(ddp_corpus_t *corpus);

/* ---- shards (DESIGN.md §3, a contract) ------------------------------------- */

#define DDP_SHARD_HEADER_INTS 256
#define DDP_SHARD_HEADER_BYTES (DDP_SHARD_HEADER_INTS * 4)
#define DDP_SHARD_MAGIC_U16 20240520 /* version 1: uint16 tokens (llm.c) */
#define DDP_SHARD_VERSION_U16 1
#define DDP_SHARD_MAGIC_U32 20240801 /* version 7: uint32 tokens (llm.c) */
#define DDP_SHARD_VERSION_U32 7
#define DDP_SHARD_GPT2_EOT 50256 /* what a shard without [3]/[4] means */
#define DDP_SHARD_GPT2_VOCAB 50257

/* Reads one .bin shard fully into `corpus` and indexes it with seq_len.
 * DDP_ERR_IO: cannot open or read; DDP_ERR_FORMAT: bad magic or version,
 * truncated header, token count disagreeing with the file size, no tokens,
 * a bad EOT id or vocab size, a token >= vocab. On error `corpus` is left
 * zeroed. */
ddp_status_t ddp_shard_read(ddp_corpus_t *corpus, const char *path, int seq_len);

/* Writes tokens as a shard: uint16 (magic 20240520 v1) when vocab <= 65536,
 * else uint32 (20240801 v7), with EOT and vocab in header slots [3] and [4].
 * Atomic: the data goes to "<path>.tmp", is fsync'ed and renamed over path,
 * so a failed write leaves no file under `path` (an existing file there is
 * untouched). Bad input (no tokens, EOT or a token outside [0, vocab), more
 * tokens than the int32 header count can say) is refused before any file is
 * created. */
ddp_status_t ddp_shard_write(const char *path, const int32_t *tokens, int64_t n_tokens, int32_t eot,
                             int32_t vocab);

/* ---- the built-in data set -------------------------------------------------- */

/* Byte-level: token = byte, EOT = 256 (the ddpprep convention). */
#define DDP_BUILTIN_EOT 256
#define DDP_BUILTIN_VOCAB 257
/* The smallest max_len accepted: EOT plus the longest task line. */
#define DDP_BUILTIN_MIN_LEN 21

enum { DDP_SPLIT_TRAIN = 0, DDP_SPLIT_VAL = 1 };

/* One document of the built-in set, a pure function of (seed, split, index):
 * EOT followed by one or more task lines (copy "c:abc=abc\n", reverse
 * "r:abc=cba\n", sort "s:cab=abc\n", add "a:12+345=357\n"); the number of
 * lines is log-normal, clipped so the document has at most max_len tokens.
 * out must hold max_len tokens. *len gets the length, *answer_at the offset of
 * the last line's '='. No task line of one split ever occurs in the other
 * (lines are assigned to a split by a hash of their text), so validation
 * documents are held out by construction, not by chance. */
ddp_status_t ddp_builtin_document(uint64_t seed, int split, int64_t index, int max_len,
                                  int32_t *out, int *len, int *answer_at);

/* Documents 0 .. n_docs-1 of a split, indexed with seq_len, with
 * corpus->answer_at filled (docs[i] is document i: none is ever skipped).
 * Document i does not depend on n_docs. */
ddp_status_t ddp_builtin_corpus(ddp_corpus_t *corpus, uint64_t seed, int split, int64_t n_docs,
                                int max_len, int seq_len);

/* ---- micro-batches ------------------------------------------------------------ */

/* inputs/targets are (B,T) row-major with row stride T, in host memory.
 * Row r holds window w = windows[r]: inputs[r,t] = tokens[w.start + t] and
 * targets[r,t] = tokens[w.start + t + 1] for t < w.len - 1; beyond that the
 * row is padding: inputs EOT, targets -1 (the cross-entropy ignore index). */
typedef struct ddp_batch {
  int32_t *inputs;  /* (B,T) */
  int32_t *targets; /* (B,T) */
  int64_t *windows; /* (B) corpus window index of each row */
  int B, T;
  int64_t n_targets; /* targets != -1 */
  int64_t n_padded;  /* B * T: the tokens the model computes on */
  int64_t epoch;
  int64_t index;          /* global micro-batch index */
  int64_t index_in_epoch; /* 0 .. micro-batches in this epoch - 1 */
  int64_t capacity;       /* tokens each of inputs/targets can hold */
  int max_rows;           /* rows windows can hold */
} ddp_batch_t;

typedef struct ddp_batch_info {
  int64_t epoch, index_in_epoch;
  int B, T;
  int64_t n_targets;
} ddp_batch_info_t;

/* The plan: per epoch e, the corpus windows are shuffled with the RNG keyed by
 * (seed, e) and packed in that order into micro-batches while
 * B * T <= tokens_per_batch and B <= max_rows. Micro-batches are numbered
 * globally across epochs (epoch e + 1 follows epoch e), so a step with
 * gradient accumulation takes micro-batches step*accum .. step*accum+accum-1
 * and may span an epoch boundary. Filling is a pure function of the global
 * index: a resumed run or another rank computes any micro-batch directly.
 * The plan caches the packing of one epoch and the first index of every
 * epoch seen so far, so it is not safe to share between threads. */
typedef struct ddp_plan {
  const ddp_corpus_t *corpus; /* borrowed; must outlive the plan */
  uint64_t seed;
  int64_t tokens_per_batch;
  int max_rows;
  int seq_len;

  /* cache of one epoch's packing */
  int64_t cached_epoch; /* -1: none */
  int64_t *perm;        /* (n_windows) window order of cached_epoch */
  int64_t *batch_first; /* (n_windows + 1) first perm slot of each micro-batch */
  int32_t *batch_T;     /* (n_windows) */
  int64_t *batch_targets;
  int64_t n_batches;

  /* epoch_first[e] = global index of epoch e's first micro-batch, known for
   * e <= n_epochs_known (so the count of epoch e is known for e < that). */
  int64_t *epoch_first;
  int64_t n_epochs_known;
  int64_t epoch_first_cap;
} ddp_plan_t;

/* max_rows <= 0: no row cap beyond the budget. Every window must fit alone:
 * one whose length exceeds tokens_per_batch or seq_len + 1 is an error here,
 * not at step 10000. */
ddp_status_t ddp_plan_create(ddp_plan_t *plan, const ddp_corpus_t *corpus, uint64_t seed,
                             int64_t tokens_per_batch, int max_rows, int seq_len);
void ddp_plan_destroy(ddp_plan_t *plan);

ddp_status_t ddp_plan_micro_batches_per_epoch(ddp_plan_t *plan, int64_t epoch, int64_t *count);

/* Shape and target count of micro-batch `index` without filling anything. */
ddp_status_t ddp_plan_peek(ddp_plan_t *plan, int64_t index, ddp_batch_info_t *info);

/* Sum of n_targets over micro-batches first .. first + count - 1: the
 * normaliser of a step's loss (DESIGN.md, loss normalisation), which every
 * rank can compute alone. */
ddp_status_t ddp_plan_count_targets(ddp_plan_t *plan, int64_t first, int64_t count,
                                    int64_t *n_targets);

/* Buffers sized from the plan's budget, allocated once. */
ddp_status_t ddp_batch_init(ddp_batch_t *batch, const ddp_plan_t *plan);
void ddp_batch_destroy(ddp_batch_t *batch);

/* Fills `batch` with micro-batch `index` (no allocation). */
ddp_status_t ddp_plan_fill(ddp_plan_t *plan, int64_t index, ddp_batch_t *batch);

#ifdef __cplusplus
}
#endif
#endif
