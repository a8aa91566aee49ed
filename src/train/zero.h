/* The sharded optimizer of --zero 1 (docs/design.md §6.7): this rank's
 * reduced gradients, its optimizer plans and the collectives that keep the
 * model's full buffers whole around them (layout: train/zero_layout.h).
 *
 * A step: the reducer reduce-scatters each bucket into `grads` (this rank's
 * blocks) during backward; ddp_zero_step updates the weights this rank owns
 * where they are, in the model's fp32 parameters (and writes their rounded
 * compute copy in half precision), with the optimizer state of those
 * elements only: one optimizer plan per bucket, since a bucket's owned
 * range is contiguous in the model's buffers and in the shard, but the
 * ranges of two buckets are not; ddp_zero_gather_weights then all-gathers
 * every rank's blocks, in place, into the buffer the model computes with:
 * its fp32 parameters in an fp32 run, its compute copy (bf16/fp16) in a
 * half-precision one. In the latter case only the owned part of the fp32
 * parameters is current; ddp_zero_gather_masters refreshes the rest for
 * whatever reads all of them (checkpoints, exports, replica checks).
 *
 * LAMB's trust ratio needs the norms of whole tensors, which may be cut
 * across ranks and buckets: each plan's per-piece sums go into one row per
 * rank, the rows are all-gathered, and every rank adds each tensor's sums
 * in the same order (optim/optim.h, "LAMB over a shard").
 *
 * All collectives run on the gradient communicator, bucket by bucket, in
 * bucket order on every rank, so they match across ranks. Only the tail
 * bucket goes through a small padded buffer. */
#ifndef DDPTRAIN_TRAIN_ZERO_H
#define DDPTRAIN_TRAIN_ZERO_H

#include "ddptrain/model.h"
#include "comm/comm.h"
#include "optim/optim.h"
#include "train/zero_layout.h"

typedef struct ddp_zero {
  ddp_zero_layout_t layout;
  ddp_backend_t *be;
  ddp_model_t *model; /* borrowed */
  size_t state_per_param;
  int lamb; /* the optimizer is LAMB: steps go through the norm exchange */
  /* per bucket, the plan of this rank's owned range (NULL when it owns none) */
  ddp_optim_plan_t **plans;
  float *grads; /* backend memory: this rank's reduced blocks (layout.shard floats) */
  void *tail;   /* the tail bucket's world blocks (gathers), fp32-sized elements */
  float *chunk; /* the state gather's receive buffer (DDP_ZERO_CHUNK floats) */
  /* LAMB: every rank's per-piece squared norms, one row of 2 x lamb_stride
   * doubles per rank, and this rank's ratios (backend memory) */
  double *lamb_sums;
  float *lamb_ratio;
  int lamb_stride;
} ddp_zero_t;

/* Floats a checkpoint gather moves per collective. */
#define DDP_ZERO_CHUNK ((size_t)1 << 20)

/* Lays out the model's parameters for the job's ranks (the reducer's bucket
 * caps), allocates the shard's gradients and makes the optimizer plans (and
 * LAMB's groups). Errors: the layout's (a model too small to shard), the
 * optimizer's, DDP_ERR_OOM. */
ddp_status_t ddp_zero_create(ddp_zero_t *z, ddp_backend_t *be, ddp_model_t *model, int world,
                             int rank, double bucket_bytes, double first_bucket_bytes,
                             const ddp_optim_config_t *cfg);
void ddp_zero_destroy(ddp_zero_t *z);

/* The plan whose skipped-step count stands for all (every plan decides a
 * skip from the same global norm). */
ddp_optim_plan_t *ddp_zero_first_plan(const ddp_zero_t *z);

/* This rank's optimizer state from full_state (backend memory,
 * state_per_param x n floats in the optimizer's slot layout) into
 * shard_state (state_per_param x layout.owned floats: per bucket, slot
 * after slot over its owned range). Local copies only. */
ddp_status_t ddp_zero_load_state(ddp_zero_t *z, const float *full_state, float *shard_state);

/* The step of this rank's owned weights. step gives what every plan shares
 * (cfg, t, lr, grad_scale, grad_sumsq, compute_dtype, skip_nonfinite); the
 * buffers are the model's, the shard's gradients and shard_state.
 * Collective for LAMB (the norm exchange on comm); local otherwise. */
ddp_status_t ddp_zero_step(ddp_zero_t *z, const ddp_optim_step_args_t *step, float *shard_state,
                           ddp_comm_t *comm);

/* Collective: every rank's updated blocks into the buffer the model
 * computes with (see above). */
ddp_status_t ddp_zero_gather_weights(ddp_zero_t *z, ddp_comm_t *comm);

/* Collective: every rank's fp32 weights into the model's fp32 parameters
 * (a no-op in an fp32 run: ddp_zero_gather_weights already wrote them). */
ddp_status_t ddp_zero_gather_masters(ddp_zero_t *z, ddp_comm_t *comm);

/* Collective: the optimizer state of every rank, whole, into host_state
 * (state_per_param x n floats in the slot layout) on rank 0; other ranks
 * pass NULL. One rank's state at a time, broadcast in chunks of
 * DDP_ZERO_CHUNK floats, so no rank holds more than a chunk beyond its own
 * state (each receives every chunk once: the traffic of an all-gather of
 * the state, paid only when a checkpoint is written). */
ddp_status_t ddp_zero_gather_state(ddp_zero_t *z, ddp_comm_t *comm, const float *shard_state,
                                   float *host_state);

#endif
