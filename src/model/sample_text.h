/* Text <-> tokens for generation (ddpsample, --sample-every).
 *
 * The tokenizer this build knows is byte-level: token = byte, EOT = 256,
 * vocabulary 257 (the built-in data set and ddpprep's shards). GPT-2's BPE
 * plugs in here: a build with it defines DDPTRAIN_HAVE_BPE and its
 * decoder (data/bpe.h, ddp_bpe_decode) is what a --tokenizer DIR selects;
 * without it --tokenizer is refused, naming the flag. */
#ifndef DDPTRAIN_MODEL_SAMPLE_TEXT_H
#define DDPTRAIN_MODEL_SAMPLE_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DDP_BYTE_VOCAB 257
#define DDP_BYTE_EOT 256

typedef struct ddp_text_codec {
  int vocab;   /* tokens it can produce */
  int32_t eot; /* end-of-text */
} ddp_text_codec_t;

/* The codec for a model of `vocab` tokens: tokenizer_dir NULL for
 * byte-level, which needs vocab == 257 (another vocabulary is an error
 * telling to give --tokenizer); a directory needs BPE in this build. */
ddp_status_t ddp_text_codec_open(ddp_text_codec_t *c, int vocab, const char *tokenizer_dir);

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
