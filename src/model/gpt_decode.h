/* Incremental decoding of the GPT (text generation) with a KV cache.
 *
 * A decoder holds, per layer, the qkv rows of every position decoded so far
 * ((B, max_seq_len, 3C) in the model's activation dtype: the K and V halves
 * are the cache; keeping the q third as well lets the prompt's prefill write
 * its qkv projection straight into the cache and run the ordinary attention
 * op over it). Prefill runs one forward over the prompt; each step after it
 * runs the blocks on one new row per sequence, attending against the cache
 * (nn.h's attention_decode), so no prefix is recomputed. Logits are those
 * of the last position only, returned on the host as fp32.
 *
 * The decoder reads the model's current weights (the compute copy under
 * bf16/fp16) and owns its buffers, allocated once at creation; it does not
 * touch the model's activation arena, loss or RNG, so it may run between
 * training steps. */
#ifndef DDPTRAIN_MODEL_GPT_DECODE_H
#define DDPTRAIN_MODEL_GPT_DECODE_H

#include <stdint.h>

#include "ddptrain/backend.h"
#include "model/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_gpt_decoder ddp_gpt_decoder_t;

/* A decoder for B sequences of up to the model's max_seq_len positions. `be`
 * is the backend the model was created on. */
ddp_status_t ddp_gpt_decoder_create(ddp_gpt_decoder_t **out, ddp_gpt_t *m, ddp_backend_t *be,
                                    int B);
void ddp_gpt_decoder_destroy(ddp_gpt_decoder_t *d);

/* Starts over with prompts tokens (B,T) (host int32, 1 <= T <= max_seq_len,
 * tokens in [0, V)): fills the cache for positions 0..T-1 and writes the
 * logits of position T-1, (B, V) fp32, to logits (host). */
ddp_status_t ddp_gpt_decoder_prefill(ddp_gpt_decoder_t *d, const int32_t *tokens, int T,
                                     float *logits);
/* Appends one token per sequence (tokens (B) host) at the next position and
 * writes that position's logits (B, V) to the host. Fails once the cache
 * holds max_seq_len positions. */
ddp_status_t ddp_gpt_decoder_step(ddp_gpt_decoder_t *d, const int32_t *tokens, float *logits);
/* Positions in the cache (0 before the first prefill). */
int ddp_gpt_decoder_length(const ddp_gpt_decoder_t *d);
/* Its sequences (B) and its model's configuration. */
int ddp_gpt_decoder_sequences(const ddp_gpt_decoder_t *d);
const ddp_gpt_config_t *ddp_gpt_decoder_config(const ddp_gpt_decoder_t *d);

#ifdef __cplusplus
}
#endif
#endif
