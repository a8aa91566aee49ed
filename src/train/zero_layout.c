/* The --zero 1 shard layout (see train/zero_layout.h). */
#include "train/zero_layout.h"

#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "train/bucket_plan.h"

void ddp_zero_layout_destroy(ddp_zero_layout_t *l) {
  if (!l) return;
  free(l->buckets);
  free(l->first_bucket);
  free(l->last_bucket);
  free(l->pieces);
  memset(l, 0, sizeof *l);
}

void ddp_zero_layout_owned(const ddp_zero_layout_t *l, int k, int rank, size_t *begin,
                           size_t *end) {
  const ddp_zero_bucket_t *b = &l->buckets[k];
  size_t lo = b->offset + (size_t)rank * b->block, hi = lo + b->block;
  const size_t stop = b->offset + b->count;
  if (lo > stop) lo = stop;
  if (hi > stop) hi = stop;
  *begin = lo;
  *end = hi;
}

/* The bucket ends, each moved down to a multiple of q; the tail last. */
static int cut(const ddp_param_t *tensors, int n_tensors, size_t n, size_t q, double bucket_bytes,
               double first_bucket_bytes, ddp_zero_bucket_t *out) {
  ddp_bucket_span_t *spans = malloc((size_t)n_tensors * sizeof *spans);
  if (!spans) return -1;
  const int ns =
      ddp_bucket_plan_cut(tensors, n_tensors, bucket_bytes, first_bucket_bytes, spans, NULL);
  int nb = 0;
  size_t start = 0;
  for (int i = 0; i < ns; ++i) {
    const size_t end = (spans[i].offset + spans[i].count) / q * q;
    if (end <= start) continue; /* shorter than q after rounding: joins the next */
    out[nb++] = (ddp_zero_bucket_t){.offset = start, .count = end - start};
    start = end;
  }
  free(spans);
  if (start < n) out[nb++] = (ddp_zero_bucket_t){.offset = start, .count = n - start, .padded = 1};
  return nb;
}

int ddp_zero_tensor_of(const ddp_param_t *t, int n_tensors, size_t e) {
  int lo = 0, hi = n_tensors - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (t[mid].offset <= e)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

ddp_status_t ddp_zero_layout_create(const ddp_param_t *tensors, int n_tensors, size_t n, int world,
                                    int rank, double bucket_bytes, double first_bucket_bytes,
                                    ddp_zero_layout_t *out) {
  if (!out) DDP_FAIL(DDP_ERR_INVALID_ARG, "zero layout: NULL output");
  memset(out, 0, sizeof *out);
  if (!tensors || n_tensors < 1 || n == 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "zero layout: no parameters to shard");
  if (world < 1 || rank < 0 || rank >= world)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "zero layout: rank %d of %d ranks", rank, world);
  if (!(bucket_bytes > 0) || !(first_bucket_bytes > 0))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "zero layout: bucket sizes %g / %g bytes must be positive",
             bucket_bytes, first_bucket_bytes);
  size_t expect = 0;
  for (int i = 0; i < n_tensors; ++i) {
    if (tensors[i].offset != expect || tensors[i].count == 0)
      DDP_FAIL(DDP_ERR_INVALID_ARG,
               "zero layout: tensor %d at offset %zu (%zu elements) does not follow the previous "
               "one at %zu: parameters must tile the buffer from 0",
               i, tensors[i].offset, tensors[i].count, expect);
    expect += tensors[i].count;
  }
  if (expect != n)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "zero layout: the tensors cover %zu of %zu parameters", expect,
             n);
  if (n < (size_t)world * DDP_ZERO_ALIGN)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "--zero 1: the model's %zu parameters are fewer than %d ranks x %d: some rank would "
             "own none; use --zero 0",
             n, world, DDP_ZERO_ALIGN);
  ddp_zero_layout_t *l = out;
  l->world = world;
  l->rank = rank;
  l->n = n;
  const size_t q = (size_t)world * DDP_ZERO_ALIGN;
  /* at most one bucket per tensor, plus the tail */
  l->buckets = calloc((size_t)n_tensors + 1, sizeof *l->buckets);
  l->first_bucket = malloc((size_t)n_tensors * sizeof *l->first_bucket);
  l->last_bucket = malloc((size_t)n_tensors * sizeof *l->last_bucket);
  if (!l->buckets || !l->first_bucket || !l->last_bucket) goto oom;
  l->n_buckets = cut(tensors, n_tensors, n, q, bucket_bytes, first_bucket_bytes, l->buckets);
  if (l->n_buckets < 0) goto oom;
  /* blocks, this rank's offsets, and which tensors each bucket waits for */
  size_t local = 0;
  int max_pieces = 0;
  for (int t = 0; t < n_tensors; ++t) l->first_bucket[t] = -1;
  for (int k = 0; k < l->n_buckets; ++k) {
    ddp_zero_bucket_t *b = &l->buckets[k];
    b->block = b->padded ? DDP_ZERO_ALIGN * ((b->count + q - 1) / q) : b->count / (size_t)world;
    b->local = local;
    local += b->block;
    const int t0 = ddp_zero_tensor_of(tensors, n_tensors, b->offset);
    b->last_tensor = ddp_zero_tensor_of(tensors, n_tensors, b->offset + b->count - 1);
    b->n_overlap = b->last_tensor - t0 + 1;
    max_pieces += b->n_overlap;
    for (int t = t0; t <= b->last_tensor; ++t) {
      if (l->first_bucket[t] < 0) l->first_bucket[t] = k;
      l->last_bucket[t] = k;
    }
  }
  l->shard = local;
  /* this rank's pieces: the tensor parts of its owned range, bucket by bucket */
  l->pieces = calloc((size_t)max_pieces, sizeof *l->pieces);
  if (!l->pieces) goto oom;
  size_t state_at = 0;
  for (int k = 0; k < l->n_buckets; ++k) {
    ddp_zero_bucket_t *b = &l->buckets[k];
    size_t lo, hi;
    ddp_zero_layout_owned(l, k, rank, &lo, &hi);
    b->owned = hi - lo;
    b->state_at = state_at;
    state_at += b->owned;
    b->first_piece = l->n_pieces;
    for (size_t e = lo; e < hi;) {
      const int t = ddp_zero_tensor_of(tensors, n_tensors, e);
      const size_t t_end = tensors[t].offset + tensors[t].count;
      const size_t stop = t_end < hi ? t_end : hi;
      l->pieces[l->n_pieces++] =
          (ddp_param_t){.offset = e - lo, .count = stop - e, .decay = tensors[t].decay};
      e = stop;
    }
    b->n_pieces = l->n_pieces - b->first_piece;
  }
  l->owned = state_at;
  return DDP_OK;
oom:
  ddp_zero_layout_destroy(l);
  DDP_FAIL(DDP_ERR_OOM, "zero layout: out of memory for %d tensors", n_tensors);
}
