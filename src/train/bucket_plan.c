/* The bucket cut of train/bucket_plan.h. */
#include "train/bucket_plan.h"

int ddp_bucket_plan_cut(const ddp_param_t *tensors, int n_tensors, double bucket_bytes,
                        double first_bucket_bytes, ddp_bucket_span_t *spans, int *bucket_of) {
  if (!tensors || !spans || n_tensors < 1 || !(bucket_bytes > 0) || !(first_bucket_bytes > 0))
    return 0;
  double cap = first_bucket_bytes;
  int n_buckets = 0;
  ddp_bucket_span_t *b = NULL;
  for (int i = 0; i < n_tensors; ++i) {
    const double bytes = (double)tensors[i].count * sizeof(float);
    if (!b || (double)b->count * sizeof(float) + bytes > cap) {
      if (b) cap = bucket_bytes; /* the first bucket is closed: later ones get the full cap */
      b = &spans[n_buckets++];
      *b = (ddp_bucket_span_t){.offset = tensors[i].offset, .first_tensor = i};
    }
    b->count += tensors[i].count;
    b->n_tensors++;
    if (bucket_of) bucket_of[i] = n_buckets - 1;
  }
  return n_buckets;
}
