/* Where the gradient buckets fall (docs/design.md §6.2), as a pure function
 * of the parameter table and the two caps: the reducer cuts its buckets with
 * it, and anything that must predict them without a communicator (the
 * --plan-only reports, bucket tuning) gets the same answer.
 *
 * Tensors are taken in buffer (backward) order. A bucket is closed when
 * adding the next tensor would pass its cap: the first bucket's cap is
 * first_bucket_bytes, every later one's bucket_bytes. A tensor is never
 * split, so one larger than the cap forms a bucket of its own. Sizes count
 * fp32 gradients (4 bytes an element). */
#ifndef DDPTRAIN_BUCKET_PLAN_H
#define DDPTRAIN_BUCKET_PLAN_H

#include <stddef.h>

#include "ddptrain/param.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_bucket_span {
  size_t offset, count;        /* the bucket's slice of the gradient buffer */
  int first_tensor, n_tensors; /* the tensors it holds, in table order */
} ddp_bucket_span_t;

/* Cuts tensors[0..n_tensors) into buckets. spans must have room for
 * n_tensors entries (at most one bucket per tensor); bucket_of (optional,
 * n_tensors entries) gets each tensor's bucket. Returns the number of
 * buckets; 0 when an argument is unusable (NULL table or spans, no
 * tensors, a cap that is not > 0). Offsets are copied from the table, so a
 * caller that needs the tensors to tile the buffer checks that itself. */
int ddp_bucket_plan_cut(const ddp_param_t *tensors, int n_tensors, double bucket_bytes,
                        double first_bucket_bytes, ddp_bucket_span_t *spans, int *bucket_of);

#ifdef __cplusplus
}
#endif
#endif
