/* Batch staging for a model's forward (internal): the arrays of a
 * micro-batch (tokens and targets, or pixels and labels) go host -> device
 * on a copy stream of their own, into one of two device slots, and the
 * compute stream waits for them with an event instead of the host waiting
 * for the compute stream.
 *
 * Why: a copy on the compute stream runs after everything enqueued before
 * it, so the GPU computes nothing while it runs (a ResNet-50 step's 77 MB
 * of fp32 pixels: about 1.4 ms of a 27 ms step on an H100), and a copy from
 * pageable memory makes the host wait until the stream has drained. Here
 * slot k is refilled only after the compute stream has finished with it
 * (an event the model records when it is done with the batch, two puts
 * back), so the copy of micro-step i+1 runs while micro-step i computes.
 * The host waits only for the copy itself to have read the host buffers
 * (ddp_slot_stager_wait_copied), which with pinned loader buffers finishes
 * long before the host has enqueued the work that follows it. */
#ifndef DDPTRAIN_SLOT_STAGER_H
#define DDPTRAIN_SLOT_STAGER_H

#include <stddef.h>

#include "ddptrain/backend.h"

#define DDP_SLOT_STAGER_ARRAYS 4

typedef struct ddp_slot_stager {
  ddp_backend_t *be;
  ddp_stream_t copy;
  ddp_event_t ready[2], freed[2];
  int n_arrays;
  size_t capacity[DDP_SLOT_STAGER_ARRAYS];   /* bytes of each array */
  void *dev[2][DDP_SLOT_STAGER_ARRAYS];      /* [slot][array], device memory */
  int slot; /* the slot of the last put */
} ddp_slot_stager_t;

/* Two device slots of n_arrays arrays of capacity[a] bytes each, a copy
 * stream and the events; on failure everything made is freed. */
ddp_status_t ddp_slot_stager_init(ddp_slot_stager_t *s, ddp_backend_t *be, int n_arrays,
                                  const size_t capacity[]);
void ddp_slot_stager_destroy(ddp_slot_stager_t *s);

/* Copies src[a] (bytes[a] of it; 0 or a NULL src: array a is not staged)
 * into the next slot on the copy stream, after the compute stream has
 * released that slot, and makes the compute stream wait for the copies.
 * dev (may be NULL) receives the slot's arrays. A size over an array's
 * capacity is refused, naming `what` and both sizes, and takes no slot. */
ddp_status_t ddp_slot_stager_put(ddp_slot_stager_t *s, const char *what, const void *const src[],
                                 const size_t bytes[], void *dev[]);
/* The compute stream's work enqueued so far is the last to read the
 * current slot (call after the last op that reads it; calling again later
 * moves the point). */
ddp_status_t ddp_slot_stager_release(ddp_slot_stager_t *s);
/* The host waits until the last put's copies have read the host buffers,
 * which may then be reused. */
ddp_status_t ddp_slot_stager_wait_copied(ddp_slot_stager_t *s);

#endif
