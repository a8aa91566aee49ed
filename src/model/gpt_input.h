/* Token staging for the model's forward (internal): micro-batch tokens,
 * targets and per-row lengths go to the device through a slot stager
 * (model/slot_stager.h: two device slots filled on a copy stream, the
 * compute stream waiting on an event, the host only for the copy to have
 * read its buffers). The row lengths go through pinned host copies of
 * their own, so that callers may pass a pageable array. */
#ifndef DDPTRAIN_GPT_INPUT_H
#define DDPTRAIN_GPT_INPUT_H

#include <stdint.h>

#include "ddptrain/backend.h"
#include "model/slot_stager.h"

typedef struct ddp_token_stager {
  ddp_slot_stager_t st; /* arrays: 0 inputs, 1 targets, 2 row lengths (int32) */
  /* per-row sequence lengths: pinned host copies (filled by put), one per
   * slot, `capacity` rows each (a row holds at least one token) */
  int32_t *lens_host[2];
  int64_t capacity;
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
