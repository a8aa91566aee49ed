/* Byte-level and GPT-2 BPE text for generation (model/sample_text.h). */
#include "model/sample_text.h"

#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"

static ddp_status_t open_bpe(ddp_text_codec_t *c, int vocab, const char *dir) {
  DDP_CHECK(ddp_bpe_load(dir, &c->bpe));
  const int32_t v = ddp_bpe_vocab_size(c->bpe);
  if (v != vocab) {
    ddp_text_codec_close(c);
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "--tokenizer %s has %d tokens but the model's vocabulary is %d: it is not the "
             "tokenizer the model was trained with",
             dir, (int)v, vocab);
  }
  c->vocab = v;
  c->eot = ddp_bpe_eot(c->bpe);
  if (ddp_bpe_can_encode()) {
    const ddp_status_t st = ddp_bpe_cache_create(c->bpe, &c->enc);
    if (st != DDP_OK) {
      ddp_text_codec_close(c);
      return st;
    }
  }
  return DDP_OK;
}

ddp_status_t ddp_text_codec_open(ddp_text_codec_t *c, int vocab, const char *tokenizer_dir) {
  memset(c, 0, sizeof *c);
  if (tokenizer_dir) return open_bpe(c, vocab, tokenizer_dir);
  if (vocab != DDP_BYTE_VOCAB)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "the model has a vocabulary of %d tokens, not the byte-level 257: its tokenizer "
             "is needed (--tokenizer DIR)",
             vocab);
  c->vocab = DDP_BYTE_VOCAB;
  c->eot = DDP_BYTE_EOT;
  return DDP_OK;
}

void ddp_text_codec_close(ddp_text_codec_t *c) {
  if (!c) return;
  ddp_bpe_cache_free(c->enc);
  ddp_bpe_free(c->bpe);
  c->enc = NULL;
  c->bpe = NULL;
}

static ddp_status_t encode_bpe(const ddp_text_codec_t *c, const char *text, size_t len,
                               int32_t *tokens, int cap, int *n_tokens, const char *what) {
  *n_tokens = 0;
  if (len == 0) return DDP_OK;
  if (!c->enc)
    DDP_FAIL(DDP_ERR_UNSUPPORTED,
             "%s: encoding text with the BPE tokenizer needs PCRE2, which this build lacks "
             "(an empty prompt starts a new document without it)",
             what);
  ddp_bpe_ids_t ids = {0};
  const ddp_status_t st = ddp_bpe_encode(c->bpe, c->enc, text, len, &ids);
  if (st != DDP_OK) {
    free(ids.v);
    return st;
  }
  if (ids.n > (size_t)cap) {
    free(ids.v);
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: %zu tokens, more than the model's context of %d", what,
             ids.n, cap);
  }
  memcpy(tokens, ids.v, ids.n * sizeof *tokens);
  *n_tokens = (int)ids.n;
  free(ids.v);
  return DDP_OK;
}

ddp_status_t ddp_text_encode(const ddp_text_codec_t *c, const char *text, size_t len,
                             int32_t *tokens, int cap, int *n_tokens, const char *what) {
  if (c->bpe) return encode_bpe(c, text, len, tokens, cap, n_tokens, what);
  if (len > (size_t)cap)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: %zu tokens, more than the model's context of %d", what, len,
             cap);
  for (size_t i = 0; i < len; ++i) tokens[i] = (unsigned char)text[i];
  *n_tokens = (int)len;
  return DDP_OK;
}

ddp_status_t ddp_text_write(const ddp_text_codec_t *c, const int32_t *tokens, int n, FILE *out) {
  if (c->bpe) {
    /* token by token: the EOT is left out, and the bytes of a multi-byte
     * character split across tokens still come out whole */
    for (int i = 0; i < n; ++i) {
      if (tokens[i] == c->eot) continue;
      size_t len = 0;
      const char *bytes = ddp_bpe_token_bytes(c->bpe, tokens[i], &len);
      if (!bytes)
        DDP_FAIL(DDP_ERR_INVALID_ARG, "generated token %d is outside the tokenizer's %d tokens",
                 (int)tokens[i], c->vocab);
      fwrite(bytes, 1, len, out);
    }
  } else {
    for (int i = 0; i < n; ++i)
      if (tokens[i] >= 0 && tokens[i] < 256 && tokens[i] != c->eot) fputc(tokens[i], out);
  }
  if (ferror(out)) DDP_FAIL(DDP_ERR_IO, "writing the generated text failed");
  return DDP_OK;
}
