/* --sample-every N: at every N-th step rank 0 logs a short sample of the
 * model being trained (llm.c's habit): SAMPLE_TOKENS new tokens after an
 * end-of-text token (the start of a new document), decoded with the KV
 * cache (model/gpt_decode.h) from the current weights.
 *
 * It changes nothing of the training: the decoder has buffers of its own
 * (allocated once, at set-up), reads the weights without writing them, and
 * draws from a Philox stream derived for sampling alone (--seed, then the
 * step), so a run with --sample-every trains the same bits as one without,
 * and a resumed run samples what the uninterrupted one did.
 *
 * The sample is text (model/sample_text.h): byte-level for the byte-level
 * vocabulary, GPT-2 BPE with --tokenizer DIR (checked before the ranks
 * start: train/sample_tokenizer.h). Another vocabulary without a tokenizer
 * is logged as token ids, and set-up says once how to see text instead. */
#ifndef DDPTRAIN_TRAIN_SAMPLE_EVERY_H
#define DDPTRAIN_TRAIN_SAMPLE_EVERY_H

#include <stdint.h>

#include "ddptrain/backend.h"
#include "ddptrain/model.h"
#include "ddptrain/options.h"
#include "model/gpt_decode.h"
#include "model/sample_text.h"

#define SAMPLE_TOKENS 64

typedef struct ddp_sample_every {
  ddp_gpt_decoder_t *dec; /* NULL: off (the flag is 0, or not rank 0) */
  uint64_t seed;
  int32_t eot;            /* the data's end-of-text: a sample starts after it */
  ddp_text_codec_t codec; /* the text of the tokens, when `text` */
  int text;               /* 0: the model's vocabulary has no codec; ids are logged */
} ddp_sample_every_t;

/* Set-up, on every rank (only rank 0 holds a decoder and a codec). `eot`
 * is the data's end-of-text token, which every sample starts after.
 * --sample-every with a model other than the GPT is DDP_ERR_INVALID_ARG
 * naming it, as is a --tokenizer whose vocabulary is not the model's. */
ddp_status_t ddp_sample_every_init(ddp_sample_every_t *s, const ddp_options_t *o, int rank,
                                   ddp_model_t *m, ddp_backend_t *be, int32_t eot);
/* Logs the sample of `step` (steps done); a no-op without a decoder. */
ddp_status_t ddp_sample_every_run(ddp_sample_every_t *s, int64_t step);
void ddp_sample_every_destroy(ddp_sample_every_t *s);

/* Text bytes on one log line: printable ASCII and printable UTF-8 as they
 * are; newline, tab and backslash as \n, \t, \\; every other byte (control
 * characters, DEL, C1 controls, bytes that are not well-formed UTF-8) as
 * \xHH. Writes at most cap - 1 characters and a NUL, never cutting an
 * escape or a character; returns the bytes of `text` written out. */
size_t ddp_sample_escape(const char *text, size_t len, char *out, size_t cap);

#endif
