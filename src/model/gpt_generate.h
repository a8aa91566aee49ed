/* Text generation from the GPT: sampling the next token from logits
 * (temperature, top-k, top-p) and the generation loop over the decoder
 * (model/gpt_decode.h) that stops at the end-of-text token.
 *
 * Randomness comes from a counter-based Philox stream (ddptrain/rng.h) that
 * the caller derives for sampling alone: draw i of sequence b is element
 * i * B + b of it, so the tokens are a function of the seed, the prompt and
 * the weights, and nothing else's RNG position moves (the trainer's
 * --sample-every leaves training bit-exact). */
#ifndef DDPTRAIN_MODEL_GPT_GENERATE_H
#define DDPTRAIN_MODEL_GPT_GENERATE_H

#include <stdint.h>

#include "ddptrain/rng.h"
#include "model/gpt_decode.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_generate_opts {
  int max_new_tokens; /* >= 1 */
  float temperature;  /* 0: greedy (argmax); > 0: logits / temperature */
  int top_k;          /* 0: all tokens; else only the k most likely */
  float top_p;        /* (0, 1]: the smallest set of most likely tokens whose
                         probability reaches top_p (1: all) */
  int32_t eot;        /* end-of-text: a sequence that draws it stops (the
                         token is not part of its output); -1: none */
} ddp_generate_opts_t;

/* Checks the options, each failure a DDP_ERR_INVALID_ARG naming the flag
 * (--max-new-tokens, --temperature, --top-k, --top-p). */
ddp_status_t ddp_generate_opts_validate(const ddp_generate_opts_t *o);

/* The token logits (V, fp32) give under o (temperature, top_k, top_p) for a
 * uniform draw u in [0, 1). Ties rank the lower token id first, so the
 * result is a function of its arguments. scratch: 2 * V floats. */
int32_t ddp_generate_pick(const float *logits, int V, const ddp_generate_opts_t *o, float u,
                          float *scratch);

/* Continues the prompt (T tokens, the same for every sequence) in each of
 * the decoder's B sequences: out (B, max_new_tokens) receives the new
 * tokens, n_out (B) how many each got (fewer than max_new_tokens when the
 * sequence drew eot or the model's context, max_seq_len, is full). */
ddp_status_t ddp_gpt_generate(ddp_gpt_decoder_t *d, const int32_t *prompt, int T,
                              const ddp_generate_opts_t *o, const ddp_rng_t *rng, int32_t *out,
                              int *n_out);

#ifdef __cplusplus
}
#endif
#endif
