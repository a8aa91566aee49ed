/* GPT-2 byte-level BPE: the tokenizer ddpprep encodes corpora with and
 * sampling decodes with (docs/design.md §5.1).
 *
 * A tokenizer is a directory holding Hugging Face's two files: vocab.json
 * (token string -> id, the strings in GPT-2's byte-to-unicode alphabet) and
 * merges.txt (one "A B" merge per line, by rank, an optional "#version"
 * first line). Encoding is GPT-2's: the text is cut into pre-tokens by
 * GPT-2's regular expression, and each pre-token's bytes are merged pairwise
 * by lowest rank. "<|endoftext|>" must be in the vocabulary; its id is the
 * EOT. Encoding is "ordinary" (as llm.c's tiktoken encode_ordinary): the
 * text "<|endoftext|>" inside a document is encoded as plain text, never as
 * the EOT.
 *
 * A loaded tokenizer is read-only and may be shared by threads; each thread
 * encodes with its own ddp_bpe_cache_t (the regex match state and the
 * pre-token cache). Decoding needs no cache and no PCRE2; encoding needs a
 * build with PCRE2 and fails with DDP_ERR_UNSUPPORTED without it. */
#ifndef DDPTRAIN_DATA_BPE_H
#define DDPTRAIN_DATA_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/status.h"

typedef struct ddp_bpe ddp_bpe_t;
typedef struct ddp_bpe_cache ddp_bpe_cache_t;

/* A growable id list that ddp_bpe_encode appends to; zero-initialise it and
 * free v when done. */
typedef struct ddp_bpe_ids {
  int32_t *v;
  size_t n, cap;
} ddp_bpe_ids_t;

/* Loads DIR/vocab.json and DIR/merges.txt. Every problem (a missing file,
 * malformed JSON, ids that are not exactly 0..N-1, a byte with no token, a
 * merge line that is not two tokens, a merge naming an unknown token or
 * producing one that is not in the vocabulary, no "<|endoftext|>") is
 * logged with the file, line where there is one, and the cause. */
ddp_status_t ddp_bpe_load(const char *dir, ddp_bpe_t **out);
void ddp_bpe_free(ddp_bpe_t *tok);

int32_t ddp_bpe_vocab_size(const ddp_bpe_t *tok);
int32_t ddp_bpe_eot(const ddp_bpe_t *tok);
/* Whether this build can encode (it has PCRE2). */
int ddp_bpe_can_encode(void);

ddp_status_t ddp_bpe_cache_create(const ddp_bpe_t *tok, ddp_bpe_cache_t **out);
void ddp_bpe_cache_free(ddp_bpe_cache_t *cache);

/* Appends the ids of text[0..len) to out. Any bytes are accepted: a byte
 * that is not part of valid UTF-8 is a pre-token of its own, so decoding
 * always gives the input back. */
ddp_status_t ddp_bpe_encode(const ddp_bpe_t *tok, ddp_bpe_cache_t *cache, const char *text,
                            size_t len, ddp_bpe_ids_t *out);

/* The bytes of one token (not NUL-terminated), NULL for an id outside the
 * vocabulary: what a sampler prints token by token. */
const char *ddp_bpe_token_bytes(const ddp_bpe_t *tok, int32_t id, size_t *len);

/* The exact bytes of ids[0..n): *out is malloc'd (NUL-terminated for
 * convenience; *out_len excludes the NUL); an id outside the vocabulary is an
 * error naming its position. */
ddp_status_t ddp_bpe_decode(const ddp_bpe_t *tok, const int32_t *ids, size_t n, char **out,
                            size_t *out_len);

#endif
