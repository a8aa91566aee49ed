/* The model's buffers in a data-parallel run (src/train/buffers.c): the
 * runtime's side of docs/design.md §3.9.
 *
 *   - start-up: rank 0's buffers are broadcast with its weights;
 *   - the ranks' sum a model asks for inside a pass (ddp_model_allreduce,
 *     --sync-bn): the model's allreduce_fn, set here for more than one rank;
 *   - consistency: DDP_BUFFER_MEAN buffers are averaged over the ranks (one
 *     sum all-reduce of backend memory, then x (1 / world) in fp32) at the
 *     points that read them: before an evaluation, a checkpoint and the
 *     export, and only when a step has changed them since the last time.
 *     DDP_BUFFER_COUNT buffers are left as they are; at a checkpoint and the
 *     export the ranks compare a hash of them (an error naming the ranks if
 *     they differ). A model with buffers_in_sync is never averaged. */
#ifndef DDPTRAIN_TRAIN_BUFFERS_H
#define DDPTRAIN_TRAIN_BUFFERS_H

#include "ddptrain/model.h"
#include "comm/comm.h"
#include "runtime/dist.h"

typedef struct ddp_train_buffers {
  ddp_model_t *model;
  const ddp_dist_t *dist;
  ddp_comm_t *comm; /* the communicator of backend memory (the gradients') */
  /* 1 when comm orders its collectives after the compute stream's work and
   * the compute stream can wait for them (a device communicator); 0: the
   * host waits for the compute stream before a sum and for the sum after */
  int stream_ordered;
  int has_mean, has_count;
  float *scratch;  /* backend memory, n_buffer_floats: the ranks' sum */
  double *partial; /* backend memory: the scaling pass's sum of squares (unused) */
  float *host;     /* n_buffer_floats: the counters' check at a checkpoint */
  /* a training step has changed the MEAN buffers since they were last
   * averaged (an average of equal values is skipped: nothing to do) */
  int stale;
} ddp_train_buffers_t;

/* Sets up *tb for model over comm (the communicator of backend memory) and,
 * with more than one rank, the model's allreduce_fn. Nothing is allocated
 * for a model without buffers or a run of one rank. */
ddp_status_t ddp_train_buffers_init(ddp_train_buffers_t *tb, ddp_model_t *model,
                                    const ddp_dist_t *dist, ddp_comm_t *comm);
/* Collective: rank 0's buffers to every rank (start-up). */
ddp_status_t ddp_train_buffers_broadcast(ddp_train_buffers_t *tb);
/* After a training step: the MEAN buffers may differ across ranks now. */
void ddp_train_buffers_stepped(ddp_train_buffers_t *tb);
/* Collective: averages the MEAN buffers if a step changed them (`why`, "an
 * evaluation", names the point in errors); with check_counts, compares the
 * COUNT buffers across ranks. No-op for one rank or a model without
 * buffers. */
ddp_status_t ddp_train_buffers_sync(ddp_train_buffers_t *tb, const char *why, int check_counts);
void ddp_train_buffers_destroy(ddp_train_buffers_t *tb);

#endif
