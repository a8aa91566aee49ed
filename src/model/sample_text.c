/* Byte-level text for generation (model/sample_text.h). */
#include "model/sample_text.h"

#include "ddptrain/check.h"

ddp_status_t ddp_text_codec_open(ddp_text_codec_t *c, int vocab, const char *tokenizer_dir) {
  if (tokenizer_dir) {
#ifdef DDPTRAIN_HAVE_BPE
#error "wire ddp_bpe_decode (data/bpe.h) into ddp_text_codec_open / ddp_text_write here"
#else
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "--tokenizer %s: this build has no BPE tokenizer; only byte-level text "
             "(vocabulary 257) is available",
             tokenizer_dir);
#endif
  }
  if (vocab != DDP_BYTE_VOCAB)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "the model has a vocabulary of %d tokens, not the byte-level 257: its tokenizer "
             "is needed (--tokenizer DIR)",
             vocab);
  c->vocab = DDP_BYTE_VOCAB;
  c->eot = DDP_BYTE_EOT;
  return DDP_OK;
}

ddp_status_t ddp_text_encode(const ddp_text_codec_t *c, const char *text, size_t len,
                             int32_t *tokens, int cap, int *n_tokens, const char *what) {
  (void)c;
  if (len > (size_t)cap)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: %zu tokens, more than the model's context of %d", what, len,
             cap);
  for (size_t i = 0; i < len; ++i) tokens[i] = (unsigned char)text[i];
  *n_tokens = (int)len;
  return DDP_OK;
}

ddp_status_t ddp_text_write(const ddp_text_codec_t *c, const int32_t *tokens, int n, FILE *out) {
  for (int i = 0; i < n; ++i)
    if (tokens[i] >= 0 && tokens[i] < 256 && tokens[i] != c->eot) fputc(tokens[i], out);
  if (ferror(out)) DDP_FAIL(DDP_ERR_IO, "writing the generated text failed");
  return DDP_OK;
}
