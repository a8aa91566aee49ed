/* The gradient reducer: bucketed, asynchronous SUM all-reduce of the flat
 * gradient buffer, overlapped with backward (docs/design.md §6.2).
 *
 * Gradients live in one buffer laid out in the order backward finishes them
 * (the model's contract), so buckets are contiguous slices of it and the
 * collective runs on the slice in place, with no copies. The first bucket is
 * small (--first-bucket-mb) so communication starts early; the rest hold
 * about --bucket-mb each. A tensor is never split: one larger than the cap
 * forms its own bucket.
 *
 * The model reports each tensor's gradient as final (ddp_reducer_mark_ready,
 * wired to the model's grad hook) on the last micro-step of a step only; on
 * earlier micro-steps gradients accumulate locally and nothing is
 * communicated. A bucket whose tensors are all ready starts its all-reduce at
 * once; buckets start strictly in bucket order, which is the same on every
 * rank, so collectives match across ranks. ddp_reducer_finish waits for
 * what is still outstanding and reports the time it waited: that is the
 * communication backward did not hide ("exposed").
 *
 * The reduction is a SUM: the loss is already scaled by 1 / (global target
 * tokens of the step), so the sum is the gradient of the global mean.
 *
 * With a half-precision reduce dtype (--grad-reduce-dtype bf16|fp16) each
 * bucket is rounded into a staging buffer of that type as it launches, the
 * collective moves half the bytes and sums in that type (each partial sum
 * rounds), and finish() widens the result back into the fp32 gradients: the
 * trade of accuracy for traffic that bench/amp_curves.sh measures.
 *
 * That widening is the step's epilogue, fused (ddp_optim_grad_epilogue): in
 * the same pass it multiplies by a factor set per step (the loss scaler's
 * 1 / scale, so the gradients come out unscaled) and takes each bucket's sum
 * of squares into a partial (backend memory, one double per bucket,
 * allocated at create). ddp_reducer_grad_sumsq adds the partials in bucket
 * order into the squared global norm, so the trainer needs no separate pass
 * over the gradients for the norm, clipping or the inf/NaN check: an inf or
 * NaN anywhere makes that norm non-finite. The fp32 reduction has no
 * epilogue; its gradients are the sums exactly as reduced. */
#ifndef DDPTRAIN_REDUCER_H
#define DDPTRAIN_REDUCER_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"
#include "ddptrain/param.h"
#include "ddptrain/status.h"
#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_reducer ddp_reducer_t;

typedef struct ddp_reducer_config {
  float *grads; /* the flat gradient buffer (backend memory) */
  /* the model's parameter table (ddptrain/param.h), borrowed for the
   * reducer's life; only offset and count are read. Tensors tile the
   * buffer: offsets ascending, no gaps, in buffer (backward) order. */
  const ddp_param_t *tensors;
  int n_tensors;
  double bucket_bytes, first_bucket_bytes;
  void *stream;      /* the compute stream gradients are produced on (NULL on CPU) */
  ddp_dtype_t dtype; /* type on the wire: fp32 (0, the default), bf16 or fp16 */
  ddp_backend_t *be; /* owns grads; needed for a half dtype (staging buffer, conversion) */
  /* --zero 1 (train/zero_layout.h), or NULL: the buckets are the layout's,
   * each is reduce-scattered instead of all-reduced, and this rank's block
   * of the sum lands in shard_grads (backend memory, layout->shard floats)
   * at the block's place in the shard; grads itself is left as backward
   * wrote it. Every bucket then has the epilogue (fp32 in place), so
   * ddp_reducer_grad_sumsq gives the norm of the whole reduced gradient:
   * its partials are all-gathered across the ranks and added in rank, then
   * bucket order, the same bits on every rank. Needs be. Both pointers
   * are borrowed for the reducer's life. */
  const struct ddp_zero_layout *zero;
  float *shard_grads;
} ddp_reducer_config_t;

ddp_status_t ddp_reducer_create(ddp_comm_t *comm, const ddp_reducer_config_t *cfg,
                                ddp_reducer_t **out);
void ddp_reducer_destroy(ddp_reducer_t *r);

int ddp_reducer_num_buckets(const ddp_reducer_t *r);
/* Bucket i's slice [offset, offset + count) of the buffer. */
void ddp_reducer_bucket(const ddp_reducer_t *r, int i, size_t *offset, size_t *count);

/* Whether the tensor at `offset` is the last of a bucket, so that marking
 * it ready (in table order) may start that bucket's collective; 1 for an
 * offset that is not a tensor's. A recorded backward is cut there
 * (model/graph_replay.h), and nowhere else. */
int ddp_reducer_completes_bucket(const ddp_reducer_t *r, size_t offset);

/* The gradient of elements [offset, offset + count) is final for this step:
 * exactly one tensor's range. Starts every bucket that became complete.
 * Errors (a range that is not a tensor, a tensor marked twice) stop the step. */
ddp_status_t ddp_reducer_mark_ready(ddp_reducer_t *r, size_t offset, size_t count);

/* After the last micro-step's backward: every tensor must have been marked;
 * waits for all buckets. *exposed_ms (optional) gets the time spent waiting.
 * Resets for the next step. */
ddp_status_t ddp_reducer_finish(ddp_reducer_t *r, double *exposed_ms);

/* 1 when finish() runs the fused epilogue (a bf16 or fp16 reduce dtype, or
 * --zero 1), 0 for an fp32 all-reduce. */
int ddp_reducer_fused_epilogue(const ddp_reducer_t *r);

/* The factor the fused epilogue multiplies the widened sums by, from the
 * next finish() on (1 after create: the gradients as reduced). Kept until
 * set again. Rejects (DDP_ERR_INVALID_ARG, nothing changed) a NULL reducer
 * and a scale that is not finite and > 0. Accepted but unused for fp32. */
ddp_status_t ddp_reducer_set_scale(ddp_reducer_t *r, float scale);

/* Enqueues, on the reducer's stream, *sumsq (backend memory, 1 float) = the
 * sum of squares of the gradients the last finish() wrote (the scale
 * applied), i.e. ddp_optim_sum_partials over the buckets' partials in bucket
 * order: of every element in [first tensor's offset, last tensor's end),
 * reproducible bit for bit and the same on every rank. No host sync.
 * Errors: DDP_ERR_INVALID_ARG for an fp32 reducer (no epilogue, no
 * partials) or a NULL argument; DDP_ERR_INTERNAL when no successful finish()
 * followed the step's marks (the partials would be stale). */
ddp_status_t ddp_reducer_grad_sumsq(ddp_reducer_t *r, float *sumsq);

#ifdef __cplusplus
}
#endif
#endif
