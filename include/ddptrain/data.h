/* The data side of training: token corpora, llm.c-compatible shards, the
 * built-in synthetic data set, and the micro-batch plan.
 *
 * A corpus is a set of token segments (memory-mapped shards, or arrays in
 * host memory) with one window index over all of them; the sampler
 * (data/sampler.h) plans micro-batches of windows and fills ddp_batch_t
 * buffers; the loader (data/loader.h) does that ahead of the step loop.
 *
 * Vocabulary used throughout:
 *   document  the tokens from one EOT up to (not including) the next EOT; the
 *             EOT *starts* each document (docs/design.md §5.1, a contract). A lone EOT
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

struct ddp_backend; /* ddptrain/backend.h */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- batch kinds ------------------------------------------------------------ */
/* What a model trains on (docs/design.md §4, batch kinds):
 *   tokens   rows of token windows of varying length, padded (ddp_batch_t);
 *            a sample's cost grows with its length, and the sampler buckets
 *            by length and balances the ranks by cost;
 *   records  fixed-size samples with a class label (ddp_record_batch_t);
 *            every record costs the same, so each rank gets the same count.
 * Either way the loss of a step is divided by the step's global target
 * count: tokens with a target, or records. */
typedef enum ddp_batch_kind { DDP_BATCH_TOKENS = 0, DDP_BATCH_RECORDS = 1 } ddp_batch_kind_t;

/* "tokens" / "records" ("unknown" otherwise). */
const char *ddp_batch_kind_name(ddp_batch_kind_t kind);

/* ---- corpus ---------------------------------------------------------------- */

/* One run of tokens: a memory-mapped shard or an array in host memory.
 * Tokens are `width` bytes (2 or 4), little-endian (the host's order; see
 * corpus.c), so a mapped shard is read in place, without a copy. */
typedef struct ddp_token_seg {
  const void *data; /* n_tokens tokens */
  int64_t n_tokens;
  int64_t first; /* global index of data[0] in the corpus */
  int width;
  char *name; /* the file, or the corpus's source */
  void *map;  /* mmap'ed region to unmap (NULL for host arrays) */
  size_t map_bytes;
  int64_t file_bytes; /* the shard's size (0 for host arrays) */
  /* A hash of the bytes (a shard's header included) in sampled blocks, set
   * when the corpus is indexed; ranks compare it (see corpus.c). */
  uint64_t content_hash;
} ddp_token_seg_t;

/* The document index: one 16-byte entry per window (a document that fits in
 * one window costs exactly that; longer ones one entry per window). */
typedef struct ddp_window {
  int64_t start;         /* global token index of the window's first token */
  int32_t len;           /* tokens, 2 .. seq_len + 1: len - 1 targets */
  int32_t seg : 31;      /* segment holding it: windows never cross segments */
  uint32_t ends_doc : 1; /* the document's last window: its last token is the
                            EOT that closes the document (a target, so a model
                            learns where documents end), which no segment
                            holds: read windows with ddp_corpus_read_window */
} ddp_window_t;

typedef struct ddp_corpus {
  ddp_token_seg_t *segs;
  int n_segs;
  int64_t n_tokens; /* over all segments */
  int32_t eot;
  int32_t vocab;
  int seq_len; /* windows hold at most seq_len + 1 tokens */

  int64_t n_docs;        /* trainable documents (>= 2 tokens) */
  ddp_window_t *windows; /* in token order; a document's windows are adjacent */
  int64_t n_windows;
  int64_t n_skipped;       /* lone-EOT documents left out */
  int64_t n_headless;      /* segments that did not start with EOT */
  int64_t headless_tokens; /* tokens before the first EOT of those segments */

  /* Optional, for held-out accuracy (the built-in data set fills it; NULL
   * otherwise): per document, the offset from its start of the '=' of its
   * last task line, or -1. The built-in documents never exceed one window,
   * so document i is windows[i]. The prompt is tokens [start, start +
   * answer_at] ('=' included) and the expected answer is the rest of the
   * document, which ends with '\n', and then the closing EOT. */
  int32_t *answer_at;
} ddp_corpus_t;

/* Copies tokens [start, start + n) (global indices, inside one segment as
 * every window is) into dst as int32. */
void ddp_corpus_read(const ddp_corpus_t *corpus, int32_t seg, int64_t start, int64_t n,
                     int32_t *dst);

/* Copies the window's len tokens into dst, the closing EOT of a document's
 * last window included. */
void ddp_corpus_read_window(const ddp_corpus_t *corpus, const ddp_window_t *w, int32_t *dst);

/* Token at global index i (a binary search over segments: for tests and
 * tools, not for the batch path). */
int32_t ddp_corpus_token(const ddp_corpus_t *corpus, int64_t i);

/* Validates tokens (each below vocab), copies them into host memory and
 * builds the window index for seq_len. `source` names the data in
 * messages (a path, "builtin"). */
ddp_status_t ddp_corpus_from_tokens(ddp_corpus_t *corpus, const int32_t *tokens, int64_t n_tokens,
                                    int32_t eot, int32_t vocab, int seq_len, const char *source);

/* Opens every shard matching the glob `pattern` (sorted by name; a plain
 * path matches itself), memory-maps them, validates headers and tokens and
 * builds one window index over all of them. Shards must agree on EOT and
 * vocabulary. Documents do not continue across shards: tokens before a
 * shard's first EOT form a document of their own (one warning sums them up).
 * DDP_ERR_IO: no match, cannot open or map; DDP_ERR_FORMAT: see
 * ddp_shard_read. */
ddp_status_t ddp_corpus_open(ddp_corpus_t *corpus, const char *pattern, int seq_len);

/* A 64-bit fingerprint of the data: shard names (without directories),
 * sizes, token counts and sampled content, EOT, vocab and seq_len; ranks
 * compare it. */
uint64_t ddp_corpus_fingerprint(const ddp_corpus_t *corpus);

/* Segment seg's name (without directories), size and token count: what
 * names a shard when fingerprints differ (its content is content_hash). */
uint64_t ddp_corpus_segment_fingerprint(const ddp_corpus_t *corpus, int seg);

/* Frees or unmaps everything; safe on a zeroed or half-built corpus. */
void ddp_corpus_destroy(ddp_corpus_t *corpus);

/* ---- shards (docs/design.md §5.1, a contract) ------------------------------------- */

#define DDP_SHARD_HEADER_INTS 256
#define DDP_SHARD_HEADER_BYTES (DDP_SHARD_HEADER_INTS * 4)
#define DDP_SHARD_MAGIC_U16 20240520 /* version 1: uint16 tokens (llm.c) */
#define DDP_SHARD_VERSION_U16 1
#define DDP_SHARD_MAGIC_U32 20240801 /* version 7: uint32 tokens (llm.c) */
#define DDP_SHARD_VERSION_U32 7
#define DDP_SHARD_GPT2_EOT 50256 /* what a shard without [3]/[4] means */
#define DDP_SHARD_GPT2_VOCAB 50257
/* The largest vocabulary a shard may declare (2^24): beyond any tokenizer
 * in use, and the last size whose ids are exact in fp32. A header beyond it
 * is corrupt, not a model to allocate. */
#define DDP_SHARD_MAX_VOCAB (1 << 24)

/* Opens one .bin shard (memory-mapped, 64-bit offsets) as a corpus indexed
 * with seq_len. DDP_ERR_IO: cannot open, stat or map; DDP_ERR_FORMAT: bad
 * magic or version, truncated header, token count disagreeing with the file
 * size, no tokens, a bad EOT id or vocab size (at most DDP_SHARD_MAX_VOCAB),
 * a token >= vocab; each message names the file and the byte offset. On
 * error `corpus` is left zeroed. */
ddp_status_t ddp_shard_read(ddp_corpus_t *corpus, const char *path, int seq_len);

/* Writes tokens as a shard: uint16 (magic 20240520 v1) when vocab <= 65536,
 * else uint32 (20240801 v7), with EOT and vocab in header slots [3] and [4].
 * Atomic: the data goes to "<path>.tmp", is fsync'ed and renamed over path,
 * so a failed write leaves no file under `path` (an existing file there is
 * untouched). Bad input (no tokens, EOT or a token outside [0, vocab), a
 * vocab above DDP_SHARD_MAX_VOCAB, more tokens than the int32 header count
 * can say) is refused before any file is created. */
ddp_status_t ddp_shard_write(const char *path, const int32_t *tokens, int64_t n_tokens, int32_t eot,
                             int32_t vocab);

/* ---- the built-in data set -------------------------------------------------- */

/* Byte-level: token = byte, EOT = 256 (the ddpprep convention). */
#define DDP_BUILTIN_EOT 256
#define DDP_BUILTIN_VOCAB 257
/* The smallest max_len accepted: EOT plus the longest task line. */
#define DDP_BUILTIN_MIN_LEN 19

enum { DDP_SPLIT_TRAIN = 0, DDP_SPLIT_VAL = 1 };

/* Documents in the built-in set's splits as the trainer uses it. */
enum { DDP_BUILTIN_TRAIN_DOCS = 20000, DDP_BUILTIN_VAL_DOCS = 1000 };

/* The built-in set's tasks, in the order of a mix's weights. */
enum {
  DDP_BUILTIN_COPY,
  DDP_BUILTIN_REVERSE,
  DDP_BUILTIN_SORT,
  DDP_BUILTIN_ADD,
  DDP_BUILTIN_TASKS
};
#define DDP_BUILTIN_MAX_WEIGHT 1000
/* The trainer's default mix (--tasks): copy-heavy, so that the default job
 * shows a model learning within a couple of minutes on two CPU cores. */
#define DDP_BUILTIN_DEFAULT_MIX "copy=4,reverse,sort,add"

/* How often each task's line is drawn: weight[k] / sum of weights. */
typedef struct ddp_builtin_mix {
  uint32_t weight[DDP_BUILTIN_TASKS];
} ddp_builtin_mix_t;

/* "copy", "reverse", "sort" or "add". */
const char *ddp_builtin_task_name(int task);

/* The task whose lines start with `letter` ('c', 'r', 's', 'a'), or -1. */
int ddp_builtin_task_of_letter(int32_t letter);

/* A mix from text such as "copy=4,reverse,sort,add" (NAME[=WEIGHT], comma-
 * separated; a named task without a weight has 1, a task not named has 0).
 * An unknown or repeated name, a weight that is not a whole number from 0 to
 * DDP_BUILTIN_MAX_WEIGHT, or all weights 0 is DDP_ERR_INVALID_ARG, with the
 * reason written to why (why_len bytes; may be NULL) and nothing logged. */
ddp_status_t ddp_builtin_mix_parse(const char *text, ddp_builtin_mix_t *mix, char *why,
                                   size_t why_len);

/* One document of the built-in set, a pure function of (seed, mix, split, index):
 * EOT followed by one or more task lines (copy "c:abc=abc\n", reverse
 * "r:abc=cba\n", sort "s:cab=abc\n", add "a:12+345=357\n"), each line's task
 * drawn by the weights of `mix` (NULL: equal weights); the number of lines
 * is log-normal, clipped so the document has at most max_len tokens.
 * out must hold max_len tokens. *len gets the length, *answer_at the offset of
 * the last line's '='. No task line of one split ever occurs in the other
 * (lines are assigned to a split by a hash of their text), so validation
 * documents are held out by construction, not by chance. */
ddp_status_t ddp_builtin_document(uint64_t seed, const ddp_builtin_mix_t *mix, int split,
                                  int64_t index, int max_len, int32_t *out, int *len,
                                  int *answer_at);

/* Documents 0 .. n_docs-1 of a split, indexed with seq_len, with
 * corpus->answer_at filled when max_len <= seq_len + 1 (then windows[i] is
 * document i: none is skipped or cut); longer documents leave it NULL.
 * Document i does not depend on n_docs. */
ddp_status_t ddp_builtin_corpus(ddp_corpus_t *corpus, uint64_t seed, const ddp_builtin_mix_t *mix,
                                int split, int64_t n_docs, int max_len, int seq_len);

/* ---- micro-batches ------------------------------------------------------------ */

/* What every rank knows about one optimizer step (the sampler computes the
 * whole plan on every rank, so none of this needs communication). */
typedef struct ddp_step_info {
  int64_t step;          /* global optimizer step */
  int64_t epoch;         /* of the step's micro-batches */
  int64_t step_in_epoch; /* 0 .. steps in the epoch - 1 */
  int64_t n_targets;     /* target tokens over all ranks and micro-batches:
                            the loss normaliser (docs/design.md §5.3) */
  int64_t n_padded;      /* B * T summed over all ranks and micro-batches */
  double cost_max;       /* per-rank cost (a * B*T + b * B*T^2) of the step: */
  double cost_mean;      /* the imbalance is cost_max / cost_mean */
  int32_t slowest_rank;  /* the rank with cost_max */
  int32_t wrapped;       /* micro-batches of the step that repeat ones from
                            the epoch's start (the epoch tail, see sampler.h) */
} ddp_step_info_t;

/* inputs/targets are (B,T) row-major with row stride T, in host memory.
 * Row r holds window w = windows[r]: inputs[r,t] = token[w.start + t] and
 * targets[r,t] = token[w.start + t + 1] for t < w.len - 1; beyond that the
 * row is padding: inputs EOT, targets -1 (the cross-entropy ignore index). */
typedef struct ddp_batch {
  int32_t *inputs;  /* (B,T) */
  int32_t *targets; /* (B,T) */
  int64_t *windows; /* (B) corpus window index of each row */
  int B, T;
  int64_t n_targets;           /* targets != -1 */
  int64_t n_padded;            /* B * T: the tokens the model computes on */
  int micro;                   /* 0 .. accum - 1 within the step */
  ddp_step_info_t info;        /* the step this micro-batch belongs to */
  int64_t capacity;            /* tokens each of inputs/targets can hold */
  int max_rows;                /* rows `windows` can hold */
  struct ddp_backend *host_of; /* inputs/targets from its alloc_host, or NULL */
} ddp_batch_t;

/* Buffers for micro-batches of up to `tokens` padded tokens and `max_rows`
 * rows, allocated once. */
ddp_status_t ddp_batch_init(ddp_batch_t *batch, int64_t tokens, int max_rows);
/* The same with inputs and targets in the backend's host memory for
 * asynchronous copies (pinned on CUDA: the copy to the device runs without
 * the host, and without a staging copy of its own). */
ddp_status_t ddp_batch_init_host(ddp_batch_t *batch, struct ddp_backend *be, int64_t tokens,
                                 int max_rows);
void ddp_batch_destroy(ddp_batch_t *batch);

/* ---- records: fixed-size samples with a label ---------------------------------- */

#define DDP_RECORD_MAX_DIMS 4

/* A data set of n records in host memory: features (n, shape...) fp32 and
 * one int32 label each in 0 .. n_classes - 1. The sampler sees each record
 * as an item of one target (items[i] = {start i, len 2}), so the token
 * sampler's plan (shuffle, micro-batches, deal, wrap-around) is the same
 * code for both kinds: with every cost equal it gives each rank the same
 * number of records. */
typedef struct ddp_records {
  int64_t n;
  int ndim;                           /* of one record */
  int64_t shape[DDP_RECORD_MAX_DIMS]; /* unused dimensions are 1 */
  int64_t floats;                     /* per record: the shape's product */
  int32_t n_classes;
  float *x;            /* (n, floats) */
  int32_t *y;          /* (n) */
  ddp_window_t *items; /* the sampler's index: n items of one target */
  char source[256];    /* a path, or what made the records, for messages */
} ddp_records_t;

/* The most classes a record set may have (2^24), as for a shard's
 * vocabulary: a label or an "n_classes" beyond it is a corrupt file, not a
 * classifier to allocate. */
#define DDP_RECORDS_MAX_CLASSES (1 << 24)

/* Copies n records (x: n * product(shape) floats, y: n labels) and builds
 * the index. Rejects (DDP_ERR_FORMAT/INVALID_ARG, naming `source` and the
 * record): n < 1, a bad shape, n_classes < 2 or above
 * DDP_RECORDS_MAX_CLASSES, a label outside [0, n_classes), a non-finite
 * feature. */
ddp_status_t ddp_records_from_arrays(ddp_records_t *r, const float *x, const int32_t *y, int64_t n,
                                     int ndim, const int64_t *shape, int32_t n_classes,
                                     const char *source);
/* Reads a record file: safetensors with "inputs" (F32, shape (n, ...), at
 * most DDP_RECORD_MAX_DIMS dimensions after n) and "labels" (I32, shape
 * (n)); the class count is the metadata "n_classes" when present, else the
 * largest label + 1. Errors name the file and what is wrong; nothing is
 * kept on failure. */
ddp_status_t ddp_records_open(ddp_records_t *r, const char *path);
/* A 64-bit fingerprint of the records (shape, classes, the bytes of x and
 * y): ranks compare it. */
uint64_t ddp_records_fingerprint(const ddp_records_t *r);
void ddp_records_destroy(ddp_records_t *r);

/* A micro-batch of records: B rows of the data set, in host memory. */
typedef struct ddp_record_batch {
  float *inputs;   /* (B, floats) */
  int32_t *labels; /* (B) */
  int64_t *items;  /* (B) record index of each row */
  int B;
  int64_t floats;              /* per record */
  int64_t n_targets;           /* B: every record is one target */
  int micro;                   /* 0 .. accum - 1 within the step */
  ddp_step_info_t info;        /* the step this micro-batch belongs to */
  int capacity;                /* rows the buffers hold */
  struct ddp_backend *host_of; /* inputs/labels from its alloc_host, or NULL */
} ddp_record_batch_t;

/* Buffers for up to `rows` records of `floats` features, allocated once;
 * with `be`, inputs and labels come from its host allocator (pinned on
 * CUDA) for asynchronous copies. */
ddp_status_t ddp_record_batch_init(ddp_record_batch_t *b, struct ddp_backend *be, int rows,
                                   int64_t floats);
void ddp_record_batch_destroy(ddp_record_batch_t *b);

#ifdef __cplusplus
}
#endif
#endif
