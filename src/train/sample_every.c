/* --sample-every (train/sample_every.h). */
#include "train/sample_every.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/log.h"
#include "ddptrain/rng.h"
#include "model/gpt_generate.h"

/* The sampling stream's tag under --seed; the training streams are derived
 * with other tags, and a derivation consumes nothing of its parent. */
#define SAMPLE_EVERY_STREAM UINT64_C(0x73616d706c6531)

/* The text of a sample on its log line: well below the logger's 2 KiB
 * line, so that the line is never cut inside a character. */
#define SAMPLE_LINE_BYTES 1536

ddp_status_t ddp_sample_every_init(ddp_sample_every_t *s, const ddp_options_t *o, int rank,
                                   ddp_model_t *m, ddp_backend_t *be, int32_t eot) {
  memset(s, 0, sizeof *s);
  if (o->sample_every <= 0) return DDP_OK;
  if (strcmp(m->ops->name, "gpt") != 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "--sample-every: --model %s is not a GPT (nothing to sample)",
             m->ops->name);
  if (rank != 0) return DDP_OK;
  s->seed = (uint64_t)o->seed;
  s->eot = eot;
  const int vocab = ddp_gpt_config((ddp_gpt_t *)m->impl)->vocab;
  /* a --tokenizer was checked against this vocabulary before the ranks
   * started; opening it again here is what rank 0 decodes with */
  if (o->tokenizer[0] || vocab == DDP_BYTE_VOCAB) {
    DDP_CHECK(ddp_text_codec_open(&s->codec, vocab, o->tokenizer[0] ? o->tokenizer : NULL));
    s->text = 1;
  } else {
    DDP_LOG_INFO(
        "--sample-every: the model's vocabulary is %d tokens, not the byte-level %d: "
        "samples are logged as token ids (give --tokenizer DIR to see text)",
        vocab, DDP_BYTE_VOCAB);
  }
  return ddp_gpt_decoder_create(&s->dec, (ddp_gpt_t *)m->impl, be, 1);
}

/* The length of the well-formed UTF-8 character of a printable code point
 * (U+00A0 and up: not a C1 control, not a surrogate, not overlong) that
 * starts at p, given n >= 1 bytes; 0 when there is none. */
static size_t printable_utf8(const unsigned char *p, size_t n) {
  size_t len;
  uint32_t cp;
  if (p[0] >= 0xc2 && p[0] <= 0xdf)
    len = 2, cp = p[0] & 0x1fu;
  else if (p[0] >= 0xe0 && p[0] <= 0xef)
    len = 3, cp = p[0] & 0x0fu;
  else if (p[0] >= 0xf0 && p[0] <= 0xf4)
    len = 4, cp = p[0] & 0x07u;
  else
    return 0;
  if (n < len) return 0;
  for (size_t i = 1; i < len; ++i) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[i] & 0x3fu);
  }
  const uint32_t least[5] = {0, 0, 0xa0, 0x800, 0x10000}; /* shorter would be overlong */
  if (cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

size_t ddp_sample_escape(const char *text, size_t len, char *out, size_t cap) {
  const unsigned char *p = (const unsigned char *)text;
  size_t i = 0, k = 0;
  if (cap == 0) return 0;
  while (i < len) {
    char esc[8];
    const char *piece = esc;
    size_t n = 0, used = 1;
    if (p[i] == '\n' || p[i] == '\t' || p[i] == '\\') {
      esc[0] = '\\', esc[1] = p[i] == '\n' ? 'n' : p[i] == '\t' ? 't' : '\\', n = 2;
    } else if (p[i] >= 32 && p[i] < 127) {
      piece = (const char *)p + i, n = 1;
    } else if ((used = printable_utf8(p + i, len - i)) > 0) {
      piece = (const char *)p + i, n = used;
    } else {
      n = (size_t)snprintf(esc, sizeof esc, "\\x%02x", p[i]), used = 1;
    }
    if (k + n >= cap) break; /* whole pieces only, and room for the NUL */
    memcpy(out + k, piece, n);
    k += n;
    i += used;
  }
  out[k] = '\0';
  return i;
}

/* The sample's text as the codec writes it, escaped onto one line. */
static ddp_status_t sample_text(const ddp_text_codec_t *c, const int32_t *tok, int n, char *line,
                                size_t cap) {
  char *bytes = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&bytes, &len);
  if (!mem) DDP_FAIL(DDP_ERR_OOM, "--sample-every: no memory for the sample's text");
  const ddp_status_t st = ddp_text_write(c, tok, n, mem);
  if (fclose(mem) != 0 && st == DDP_OK) {
    free(bytes);
    DDP_FAIL(DDP_ERR_OOM, "--sample-every: no memory for the sample's text");
  }
  /* room kept for "...", which says the text was cut (at a whole piece) */
  if (st == DDP_OK && ddp_sample_escape(bytes, len, line, cap - 3) < len) strcat(line, "...");
  free(bytes);
  return st;
}

/* Token ids, for a vocabulary without a codec. */
static void sample_ids(const int32_t *tok, int n, char *line, size_t cap) {
  size_t k = 0;
  line[0] = '\0';
  for (int i = 0; i < n && k + 12 < cap; ++i)
    k += (size_t)snprintf(line + k, cap - k, "%s%d", i ? " " : "", (int)tok[i]);
}

ddp_status_t ddp_sample_every_run(ddp_sample_every_t *s, int64_t step) {
  if (!s->dec) return DDP_OK;
  const ddp_generate_opts_t g = {
      .max_new_tokens = SAMPLE_TOKENS, .temperature = 1.0f, .top_p = 1.0f, .eot = s->eot};
  ddp_rng_t root, stream, rng;
  ddp_rng_init(&root, s->seed, 0);
  ddp_rng_derive(&root, SAMPLE_EVERY_STREAM, &stream);
  ddp_rng_derive(&stream, (uint64_t)step, &rng);
  int32_t out[SAMPLE_TOKENS];
  int n = 0;
  DDP_CHECK(ddp_gpt_generate(s->dec, &s->eot, 1, &g, &rng, out, &n));
  char line[SAMPLE_LINE_BYTES];
  if (s->text)
    DDP_CHECK(sample_text(&s->codec, out, n, line, sizeof line));
  else
    sample_ids(out, n, line, sizeof line);
  DDP_LOG_INFO("step %5lld | sample: %s", (long long)step, line);
  return DDP_OK;
}

void ddp_sample_every_destroy(ddp_sample_every_t *s) {
  ddp_gpt_decoder_destroy(s->dec);
  s->dec = NULL;
  ddp_text_codec_close(&s->codec);
  s->text = 0;
}
