/* The sharded optimizer of --zero 1 (docs/design.md §6.7): this rank's
 * fp32 master weights, reduced gradients and (through the trainer) optimizer
 * state for its shard of the flat buffer (train/zero_layout.h), and the
 * collectives that keep the model's full buffers whole around them.
 *
 * A step: the reducer reduce-scatters each bucket into `grads` during
 * backward; the optimizer updates `master` (and writes the rounded compute
 * copy of the shard into `compute` in half precision; LAMB through
 * ddp_zero_lamb_step, which exchanges per-piece norms); ddp_zero_gather_weights
 * then all-gathers the updated blocks into the buffer the model computes
 * with: its fp32 parameters in an fp32 run, its compute copy (bf16/fp16) in
 * a half-precision run. In the latter case the model's fp32 parameter buffer
 * is not kept current on every step; ddp_zero_gather_masters refreshes it
 * for whatever reads it (checkpoints, exports, replica checks).
 *
 * All collectives run on the gradient communicator, bucket by bucket, in
 * bucket order on every rank, so they match across ranks; the model's
 * buffers are written in place (the layout's buckets are whole multiples of
 * the world's blocks), and only the tail bucket goes through a small
 * padded buffer. */
#ifndef DDPTRAIN_TRAIN_ZERO_H
#define DDPTRAIN_TRAIN_ZERO_H

#include "ddptrain/model.h"
#include "comm/comm.h"
#include "optim/optim.h"
#include "train/zero_layout.h"

typedef struct ddp_zero {
  ddp_zero_layout_t layout;
  ddp_backend_t *be;
  ddp_model_t *model;     /* borrowed */
  float *master, *grads;  /* backend memory, layout.shard floats each */
  void *compute;          /* half precision: the shard's compute copy; else NULL */
  void *tail;             /* the tail bucket's world blocks (gathers), widest element */
  float *chunk;           /* the state gather's receive buffer (DDP_ZERO_CHUNK floats) */
  size_t state_per_param; /* optimizer state slots */
  /* LAMB (ddp_zero_lamb_init): every rank's per-piece squared norms, one
   * row of 2 x lamb_stride doubles per rank, and this rank's trust ratios
   * (backend memory; NULL in runs with another optimizer) */
  double *lamb_sums;
  float *lamb_ratio;
  int lamb_stride;
} ddp_zero_t;

/* Floats a checkpoint gather moves per collective. */
#define DDP_ZERO_CHUNK ((size_t)1 << 20)

/* Lays out the model's parameters for dist's ranks (the reducer's bucket
 * caps) and allocates the shard buffers (zeroed). */
ddp_status_t ddp_zero_create(ddp_zero_t *z, ddp_backend_t *be, ddp_model_t *model, int world,
                             int rank, double bucket_bytes, double first_bucket_bytes,
                             size_t state_per_param);
void ddp_zero_destroy(ddp_zero_t *z);

/* The shard from full buffers: master from the model's fp32 parameters,
 * compute from its compute copy, and, when full_state is given (backend
 * memory, state_per_param x n floats in the optimizer's slot layout), this
 * rank's part of it into shard_state (state_per_param x shard floats);
 * without, shard_state is left as it is. Local copies only. */
ddp_status_t ddp_zero_load(ddp_zero_t *z, const float *full_state, float *shard_state);

/* Collective: every rank's updated blocks into the buffer the model
 * computes with (see above). */
ddp_status_t ddp_zero_gather_weights(ddp_zero_t *z, ddp_comm_t *comm);

/* Collective: every rank's master blocks into the model's fp32 parameters
 * (a no-op in an fp32 run: ddp_zero_gather_weights already wrote them). */
ddp_status_t ddp_zero_gather_masters(ddp_zero_t *z, ddp_comm_t *comm);

/* Collective: the optimizer state of every rank, whole, into host_state
 * (state_per_param x n floats in the slot layout) on rank 0; other ranks
 * pass NULL. One rank's shard at a time, broadcast in chunks of
 * DDP_ZERO_CHUNK floats, so no rank holds more than a chunk beyond its own
 * shard (each receives every chunk once: traffic is that of an all-gather
 * of the state, paid only when a checkpoint is written). */
ddp_status_t ddp_zero_gather_state(ddp_zero_t *z, ddp_comm_t *comm, const float *shard_state,
                                   float *host_state);

/* LAMB's per-tensor trust ratio across the shards. Every rank's pieces are
 * a pure function of the layout, so each rank works out, with no exchange,
 * which pieces of all ranks belong to the tensor of each of its own pieces
 * (its padding is a group of its own) and gives the plan (made for
 * layout.pieces) those groups; the exchange buffers are made here, once. */
ddp_status_t ddp_zero_lamb_init(ddp_zero_t *z, ddp_optim_plan_t *plan);

/* Collective: the LAMB step of the shard (args as for ddp_optim_step on
 * layout.pieces): per-piece sums, their all-gather on comm (stream-ordered,
 * no host wait on a device communicator), the ratios from whole-tensor
 * norms, identical on every rank, then the update. */
ddp_status_t ddp_zero_lamb_step(ddp_zero_t *z, ddp_optim_plan_t *plan,
                                const ddp_optim_step_args_t *args, ddp_comm_t *comm);

#endif
