/* Which part of the flat parameter buffer each rank owns under --zero 1
 * (docs/design.md §6.7), as a pure function of the parameter table, the
 * bucket caps, the world size and the rank: every rank computes every
 * rank's layout alike, so nothing is exchanged to agree on it.
 *
 * The buffer is cut into buckets as the reducer cuts it (train/bucket_plan.h),
 * then every boundary is moved down to a multiple of Q = world x
 * DDP_ZERO_ALIGN elements, so that each bucket splits into `world` equal
 * blocks that start on an aligned element: the reduce-scatter of a bucket
 * and the all-gather that follows the step then run on the model's own
 * buffers with no copy. A bucket boundary may now fall inside a tensor;
 * such a tensor belongs to both buckets and both wait for it. What is left
 * after the last multiple of Q (fewer than Q elements) is the tail bucket:
 * it is padded to Q through a small staging buffer.
 *
 * Rank r owns block r of every bucket: the part of it inside [0, n) is the
 * rank's to update. Its reduced gradients arrive in a shard buffer (the
 * blocks one after the other, block k at `local`); its optimizer state holds
 * only the elements it owns, bucket after bucket (bucket k's at `state_at`),
 * and the weights themselves are updated where they are, in the model's
 * buffers. For the optimizer, a bucket's owned range is a table of pieces:
 * the parts of the model's tensors in it, each with its tensor's
 * weight-decay flag, offsets counted from the range's start. Models with
 * fewer than world x DDP_ZERO_ALIGN parameters are refused: some rank
 * would own nothing. */
#ifndef DDPTRAIN_ZERO_LAYOUT_H
#define DDPTRAIN_ZERO_LAYOUT_H

#include <stddef.h>

#include "ddptrain/param.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Elements a block starts on: 64 fp32 (256 bytes), what NCCL's and MPI's
 * fast paths like; a multiple of every dtype's vector width. */
#define DDP_ZERO_ALIGN 64

typedef struct ddp_zero_bucket {
  size_t offset;   /* first element in the flat buffer */
  size_t count;    /* elements of the model in it (offset + count <= n) */
  size_t block;    /* elements per rank: world x block >= count (== except the tail) */
  size_t local;    /* where this rank's block starts in its shard */
  int padded;      /* the tail bucket: world x block > count, staged */
  int last_tensor; /* the last tensor it overlaps (it is ready once that one is) */
  int n_overlap;   /* tensors it overlaps */
  /* this rank: */
  size_t owned;              /* elements it updates, from offset + rank x block (0: none) */
  size_t state_at;           /* where they start in its optimizer state (owned ones only) */
  int first_piece, n_pieces; /* its pieces in the layout's table */
} ddp_zero_bucket_t;

typedef struct ddp_zero_layout {
  int world, rank;
  size_t n;     /* the model's parameters */
  size_t shard; /* this rank's blocks (its reduced gradients, padding included) */
  size_t owned; /* the elements it updates (sum of the buckets' owned) */
  ddp_zero_bucket_t *buckets;
  int n_buckets;
  /* per tensor of the table: the first and last bucket it overlaps */
  int *first_bucket, *last_bucket;
  /* bucket by bucket, the pieces of this rank's owned range; bucket k's
   * cover [0, owned) of that bucket */
  ddp_param_t *pieces;
  int n_pieces;
} ddp_zero_layout_t;

/* Lays out tensors (which must tile [0, n) in order, as the reducer needs)
 * for `world` ranks as seen by `rank`. Errors: DDP_ERR_INVALID_ARG (bad
 * table, world < 1, rank outside it, caps not > 0), DDP_ERR_OOM. */
ddp_status_t ddp_zero_layout_create(const ddp_param_t *tensors, int n_tensors, size_t n, int world,
                                    int rank, double bucket_bytes, double first_bucket_bytes,
                                    ddp_zero_layout_t *out);
void ddp_zero_layout_destroy(ddp_zero_layout_t *l);

/* The elements [begin, end) of the flat buffer that `rank` owns in bucket
 * k (empty when the block lies past n: begin == end). */
void ddp_zero_layout_owned(const ddp_zero_layout_t *l, int k, int rank, size_t *begin, size_t *end);

/* The tensor of table t (which tiles [0, n) in order) that holds element e. */
int ddp_zero_tensor_of(const ddp_param_t *t, int n_tensors, size_t e);

#ifdef __cplusplus
}
#endif
#endif
