/* Text <-> tokens for generation (ddpsample, --sample-every).
 *
 * Two tokenizers: byte-level (token = byte, EOT = 256, vocabulary 257: the
 * built-in data set and ddpprep's default shards), and GPT-2's BPE from a
 * --tokenizer DIR (data/bpe.h: the vocab.json + merges.txt that ddpprep
 * --tokenizer encoded the shards with). Decoding BPE works in every build;
 * encoding a prompt with it needs PCRE2 (an empty prompt does not). */
#ifndef DDPTRAIN_MODEL_SAMPLE_TEXT_H
#define DDPTRAIN_MODEL_SAMPLE_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ddptrain/status.h"
#include "data/bpe.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DDP_BYTE_VOCAB 257
#define DDP_BYTE_EOT 256

typedef struct ddp_text_codec {
  int vocab;            /* tokens it can produce */
  int32_t eot;          /* end-of-text */
  ddp_bpe_t *bpe;       /* GPT-2 BPE; NULL: byte-level */
  ddp_bpe_cache_t *enc; /* BPE's encoding state (with PCRE2), else NULL */
} ddp_text_codec_t;

/* The codec for a model of `vocab` tokens: tokenizer_dir NULL for
 * byte-level, which needs vocab == 257 (another vocabulary is an error
 * telling to give --tokenizer); a directory is loaded as GPT-2 BPE, whose
 * vocabulary must be the model's. Close it with ddp_text_codec_close. */
ddp_status_t ddp_text_codec_open(ddp_text_codec_t *c, int vocab, const char *tokenizer_dir);
void ddp_text_codec_close(ddp_text_codec_t *c);

/* text (len bytes) -> tokens; *n_tokens on return. tokens has room for
 * `cap`; more is an error naming the limit (`what`: the flag). */
ddp_status_t ddp_text_encode(const ddp_text_codec_t *c, const char *text, size_t len,
                             int32_t *tokens, int cap, int *n_tokens, const char *what);

/* Writes tokens (not EOT) to out as text. */
ddp_status_t ddp_text_write(const ddp_text_codec_t *c, const int32_t *tokens, int n, FILE *out);

#ifdef __cplusplus
}
#endif
#endif
