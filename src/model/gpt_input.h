/* Token staging for the model's forward (internal): micro-batch tokens go
 * host -> device on a copy stream of their own, into one of two device
 * slots, and the compute stream waits for them with an event instead of the
 * host waiting for the compute stream.
 *
 * Why: a copy on the compute stream from pageable memory makes the host
 * wait until the stream has drained, so the GPU idles while the host
 * enqueues the next micro-step. Here slot k is refilled only after the
 * compute stream has finished with it (an event recorded when the model is
 * done with its tokens, two micro-steps back), so the copy of micro-step
 * i+1 runs while micro-step i computes. The host waits only for the copy
 * itself to have read the host buffer (ddp_token_stager_wait_copied), which
 * with pinned loader buffers finishes long before the host has enqueued the
 * forward that follows it. */
#ifndef DDPTRAIN_GPT_INPUT_H
#define DDPTRAIN_GPT_INPUT_H

#include <stdint.h>

#include "ddptrain/backend.h"

typedef struct ddp_token_stager {
  ddp_backend_t *be;
  ddp_stream_t copy;
  ddp_event_t ready[2], freed[2];
  int32_t *inputs[2], *targets[2];
  /* per-row sequence lengths: pinned host copies (filled by put) and
   * device slots, `capacity` rows each (a row holds at least one token) */
  int32_t *lens_host[2], *lens[2];
  int64_t capacity;
  int slot; /* the slot of the last put */
} ddp_token_stager_t;

/* Device slots for up to `capacity` tokens (inputs and targets each). */
ddp_status_t ddp_token_stager_init(ddp_token_stager_t *s, ddp_backend_t *be, int64_t capacity);
void ddp_token_stager_destroy(ddp_token_stager_t *s);

/* Stages n inputs (and n targets, unless NULL) into the next slot and
 * makes the compute stream wait for them; the device copies are returned
 * (*dev_targets NULL without targets). */
ddp_status_t ddp_token_stager_put(ddp_token_stager_t *s, const int32_t *inputs,
                                  const int32_t *targets, int64_t n, int32_t **dev_inputs,
                                  int32_t **dev_targets);
/* With the same put, n_rows per-row lengths (host array, read before
 * return) staged beside the tokens into the slot's device lens; *dev_lens
 * is NULL when lens is NULL. lens may be ddp_token_stager_lens_host(),
 * which saves a copy. */
ddp_status_t ddp_token_stager_put_rows(ddp_token_stager_t *s, const int32_t *inputs,
                                       const int32_t *targets, int64_t n, const int32_t *lens,
                                       int64_t n_rows, int32_t **dev_inputs, int32_t **dev_targets,
                                       int32_t **dev_lens);
/* The pinned host array (capacity rows) the next put_rows copies row
 * lengths from: callers may fill it in place. */
int32_t *ddp_token_stager_lens_host(ddp_token_stager_t *s);
/* The compute stream's work enqueued so far is the last to read the
 * current slot (call after the last op that reads the tokens; calling again
 * later moves the point). */
ddp_status_t ddp_token_stager_release(ddp_token_stager_t *s);
/* The host waits until the last put's copies have read the host buffers,
 * which may then be reused. */
ddp_status_t ddp_token_stager_wait_copied(ddp_token_stager_t *s);

#endif
