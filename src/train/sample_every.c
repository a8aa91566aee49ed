/* --sample-every (train/sample_every.h). */
#include "train/sample_every.h"

#include <stdio.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/log.h"
#include "ddptrain/rng.h"
#include "model/gpt_generate.h"
#include "model/sample_text.h"

/* The sampling stream's tag under --seed; the training streams are derived
 * with other tags, and a derivation consumes nothing of its parent. */
#define SAMPLE_EVERY_STREAM UINT64_C(0x73616d706c6531)

ddp_status_t ddp_sample_every_init(ddp_sample_every_t *s, const ddp_options_t *o, int rank,
                                   ddp_model_t *m, ddp_backend_t *be) {
  memset(s, 0, sizeof *s);
  if (o->sample_every <= 0) return DDP_OK;
  if (strcmp(m->ops->name, "gpt") != 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "--sample-every: --model %s is not a GPT (nothing to sample)",
             m->ops->name);
  if (rank != 0) return DDP_OK;
  s->seed = (uint64_t)o->seed;
  return ddp_gpt_decoder_create(&s->dec, (ddp_gpt_t *)m->impl, be, 1);
}

/* Text on one log line: printable ASCII as is, the rest escaped. */
static void escape(const int32_t *tok, int n, int bytes, char *out, size_t cap) {
  size_t k = 0;
  out[0] = '\0';
  for (int i = 0; i < n && k + 12 < cap; ++i) {
    const int t = tok[i];
    if (!bytes)
      k += (size_t)snprintf(out + k, cap - k, "%s%d", i ? " " : "", t);
    else if (t == '\n')
      k += (size_t)snprintf(out + k, cap - k, "\\n");
    else if (t == '\\')
      k += (size_t)snprintf(out + k, cap - k, "\\\\");
    else if (t >= 32 && t < 127)
      out[k++] = (char)t, out[k] = '\0';
    else
      k += (size_t)snprintf(out + k, cap - k, "\\x%02x", t & 0xff);
  }
}

ddp_status_t ddp_sample_every_run(ddp_sample_every_t *s, int64_t step) {
  if (!s->dec) return DDP_OK;
  const ddp_gpt_config_t *cfg = ddp_gpt_decoder_config(s->dec);
  /* end-of-text is the last token of both vocabularies in use: byte-level
   * (256 of 257) and GPT-2's (50256 of 50257) */
  const int32_t eot = cfg->vocab - 1;
  const ddp_generate_opts_t g = {
      .max_new_tokens = SAMPLE_TOKENS, .temperature = 1.0f, .top_p = 1.0f, .eot = eot};
  ddp_rng_t root, stream, rng;
  ddp_rng_init(&root, s->seed, 0);
  ddp_rng_derive(&root, SAMPLE_EVERY_STREAM, &stream);
  ddp_rng_derive(&stream, (uint64_t)step, &rng);
  int32_t out[SAMPLE_TOKENS];
  int n = 0;
  DDP_CHECK(ddp_gpt_generate(s->dec, &eot, 1, &g, &rng, out, &n));
  char text[SAMPLE_TOKENS * 12 + 1];
  escape(out, n, cfg->vocab == DDP_BYTE_VOCAB, text, sizeof text);
  DDP_LOG_INFO("step %5lld | sample: %s", (long long)step, text);
  return DDP_OK;
}

void ddp_sample_every_destroy(ddp_sample_every_t *s) {
  ddp_gpt_decoder_destroy(s->dec);
  s->dec = NULL;
}
