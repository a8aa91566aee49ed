/* Bucketed overlapped gradient reduction (see train/reducer.h).
 *
 * State per step is a ready flag per tensor and a ready count per bucket,
 * reset in finish(); nothing is allocated after create. Marking looks the
 * tensor up by offset with a binary search (tensors are sorted by offset),
 * so a wrong range is caught rather than silently miscounted. Between
 * launches the communicator gets a progress call, which is what keeps
 * non-blocking MPI collectives moving while backward computes.
 *
 * A half dtype's finish() widens each bucket as soon as its collective is
 * done, with the fused epilogue (scale and sum of squares in the same pass),
 * in bucket order on the reducer's stream; the per-bucket partials live in
 * backend memory so the norm never needs the host. */
#include "train/reducer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddptrain/check.h"
#include "core/clock.h"
#include "optim/optim.h"
#include "trace/timeline.h"
#include "train/bucket_plan.h"
#include "train/zero_layout.h"

typedef struct bucket {
  size_t offset, count;
  size_t block, local; /* --zero 1: elements per rank, this rank's place in the shard */
  int padded;          /* --zero 1's tail: reduce-scattered from a zero-padded copy */
  int first_tensor, n_tensors;
  int ready; /* tensors marked this step */
  ddp_comm_handle_t handle;
  double launched_s, done_s; /* --trace: issued, and seen complete (0: not yet) */
} bucket_t;

struct ddp_reducer {
  ddp_comm_t *comm;
  float *grads;
  ddp_dtype_t dtype;
  ddp_backend_t *be;
  uint16_t *staging; /* half dtype: the buffer's elements in that type */
  size_t base;       /* offset of the first tensor (staging index 0) */
  double *partials;  /* half dtype or zero: per bucket, its sum of squares (backend memory) */
  /* --zero 1 */
  const ddp_zero_layout_t *zero;
  float *shard_grads;   /* this rank's reduced gradients (borrowed) */
  uint16_t *half_recv;  /* half dtype: the shard's sums before widening */
  float *tail;          /* fp32: the tail bucket, padded with zeros */
  double *all_partials; /* every rank's partials, rank after rank */
  int *last_bucket;     /* per tensor: the last bucket it overlaps (first: bucket_of) */
  float scale;          /* the epilogue's factor (ddp_reducer_set_scale) */
  int norm_ready;       /* the partials describe the gradients finish() left */
  void *stream;
  const ddp_param_t *tensors; /* borrowed: the caller's table */
  int n_tensors;
  int *bucket_of;        /* per tensor */
  unsigned char *marked; /* per tensor, this step */
  bucket_t *buckets;
  int n_buckets;
  int next_launch; /* buckets before it are launched this step */
};

void ddp_reducer_destroy(ddp_reducer_t *r) {
  if (!r) return;
  if (r->staging) ddp_backend_free(r->be, r->staging);
  if (r->partials) ddp_backend_free(r->be, r->partials);
  if (r->half_recv) ddp_backend_free(r->be, r->half_recv);
  if (r->tail) ddp_backend_free(r->be, r->tail);
  if (r->all_partials) ddp_backend_free(r->be, r->all_partials);
  free(r->last_bucket);

  free(r->bucket_of);
  free(r->marked);
  free(r->buckets);
  free(r);
}

int ddp_reducer_num_buckets(const ddp_reducer_t *r) {
  return r->n_buckets;
}

void ddp_reducer_bucket(const ddp_reducer_t *r, int i, size_t *offset, size_t *count) {
  *offset = r->buckets[i].offset;
  *count = r->buckets[i].count;
}

/* --zero 1: the layout's buckets, and for each tensor the range of buckets
 * that wait for it (one that straddles a boundary counts in both). */
static void zero_buckets(ddp_reducer_t *r, const ddp_zero_layout_t *l) {
  r->n_buckets = l->n_buckets;
  for (int k = 0; k < l->n_buckets; ++k) {
    const ddp_zero_bucket_t *z = &l->buckets[k];
    r->buckets[k] = (bucket_t){.offset = z->offset,
                               .count = z->count,
                               .block = z->block,
                               .local = z->local,
                               .padded = z->padded,
                               .first_tensor = z->last_tensor - z->n_overlap + 1,
                               .n_tensors = z->n_overlap,
                               .handle = DDP_COMM_HANDLE_NONE};
  }
  for (int t = 0; t < r->n_tensors; ++t) {
    r->bucket_of[t] = l->first_bucket[t];
    r->last_bucket[t] = l->last_bucket[t];
  }
}

/* Backend buffers: the half staging (zero: with the tail's padding, zeroed
 * once), zero's receive and tail buffers, and the partials. */
static ddp_status_t alloc_buffers(ddp_reducer_t *r, size_t n_elems) {
  const ddp_zero_layout_t *z = r->zero;
  const bucket_t *tail = &r->buckets[r->n_buckets - 1];
  const size_t padded_end =
      z && tail->padded ? tail->offset + (size_t)z->world * tail->block : n_elems;
  if (r->dtype != DDP_DTYPE_F32) {
    DDP_CHECK(ddp_backend_alloc(r->be, (padded_end - r->base) * sizeof *r->staging,
                                (void **)&r->staging));
    if (padded_end > n_elems)
      DDP_CHECK(r->be->ops->fill(r->be, r->staging + (n_elems - r->base), r->dtype, 0.0f,
                                 padded_end - n_elems, NULL));
  }
  if (z && r->dtype != DDP_DTYPE_F32)
    DDP_CHECK(ddp_backend_alloc(r->be, z->shard * sizeof *r->half_recv, (void **)&r->half_recv));
  if (z && r->dtype == DDP_DTYPE_F32 && tail->padded) {
    const size_t q = (size_t)z->world * tail->block;
    DDP_CHECK(ddp_backend_alloc(r->be, q * sizeof *r->tail, (void **)&r->tail));
    DDP_CHECK(r->be->ops->fill(r->be, r->tail, DDP_DTYPE_F32, 0.0f, q, NULL));
  }
  if (r->dtype != DDP_DTYPE_F32 || z)
    DDP_CHECK(ddp_backend_alloc(r->be, (size_t)r->n_buckets * sizeof *r->partials,
                                (void **)&r->partials));
  if (z && z->world > 1)
    DDP_CHECK(ddp_backend_alloc(r->be,
                                (size_t)z->world * (size_t)r->n_buckets * sizeof *r->all_partials,
                                (void **)&r->all_partials));
  return DDP_OK;
}

ddp_status_t ddp_reducer_create(ddp_comm_t *comm, const ddp_reducer_config_t *cfg,
                                ddp_reducer_t **out) {
  if (!comm || !cfg || !out || !cfg->grads || !cfg->tensors || cfg->n_tensors < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "reducer_create: NULL argument or no tensors");
  if (!(cfg->bucket_bytes > 0) || !(cfg->first_bucket_bytes > 0))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "reducer: bucket sizes %g / %g bytes must be positive",
             cfg->bucket_bytes, cfg->first_bucket_bytes);
  *out = NULL;
  if (cfg->dtype != DDP_DTYPE_F32 && cfg->dtype != DDP_DTYPE_BF16 && cfg->dtype != DDP_DTYPE_F16)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "reducer: cannot reduce gradients in %s",
             ddp_dtype_name(cfg->dtype));
  if (cfg->dtype != DDP_DTYPE_F32 && !cfg->be)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "reducer: a %s reduction needs the backend",
             ddp_dtype_name(cfg->dtype));
  if (cfg->zero && (!cfg->be || !cfg->shard_grads))
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "reducer: --zero 1 needs the backend and a shard gradient buffer");
  const int n = cfg->n_tensors;
  size_t expect = cfg->tensors[0].offset;
  for (int i = 0; i < n; ++i) {
    if (cfg->tensors[i].offset != expect || cfg->tensors[i].count == 0)
      DDP_FAIL(DDP_ERR_INVALID_ARG,
               "reducer: tensor %d at offset %zu (%zu elements) does not follow the previous "
               "one at %zu: gradients must tile the buffer in backward order",
               i, cfg->tensors[i].offset, cfg->tensors[i].count, expect);
    expect += cfg->tensors[i].count;
  }
  if (cfg->zero && (cfg->tensors[0].offset != 0 || cfg->zero->n != expect))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "reducer: the --zero layout is of %zu parameters, not these %zu",
             cfg->zero->n, expect);
  ddp_reducer_t *r = calloc(1, sizeof *r);
  if (!r) DDP_FAIL(DDP_ERR_OOM, "reducer: out of memory");
  r->comm = comm;
  r->grads = cfg->grads;
  r->stream = cfg->stream;
  r->n_tensors = n;
  r->tensors = cfg->tensors;
  r->zero = cfg->zero;
  r->shard_grads = cfg->shard_grads;
  r->bucket_of = malloc((size_t)n * sizeof *r->bucket_of);
  r->marked = calloc((size_t)n, 1);
  /* at most one per tensor, and zero's tail */
  r->buckets = calloc((size_t)n + 1, sizeof *r->buckets);
  if (r->zero) r->last_bucket = malloc((size_t)n * sizeof *r->last_bucket);
  if (!r->bucket_of || !r->marked || !r->buckets || (r->zero && !r->last_bucket)) {
    ddp_reducer_destroy(r);
    DDP_FAIL(DDP_ERR_OOM, "reducer: out of memory for %d tensors", n);
  }
  r->dtype = cfg->dtype;
  r->be = cfg->be;
  r->base = cfg->tensors[0].offset;
  r->scale = 1.0f;
  if (r->zero) {
    zero_buckets(r, r->zero);
  } else {
    /* Cut buckets (train/bucket_plan.h), at most one per tensor. */
    ddp_bucket_span_t *spans = malloc((size_t)n * sizeof *spans);
    if (!spans) {
      ddp_reducer_destroy(r);
      DDP_FAIL(DDP_ERR_OOM, "reducer: out of memory for %d tensors", n);
    }
    r->n_buckets = ddp_bucket_plan_cut(r->tensors, n, cfg->bucket_bytes, cfg->first_bucket_bytes,
                                       spans, r->bucket_of);
    for (int i = 0; i < r->n_buckets; ++i)
      r->buckets[i] = (bucket_t){.offset = spans[i].offset,
                                 .count = spans[i].count,
                                 .first_tensor = spans[i].first_tensor,
                                 .n_tensors = spans[i].n_tensors,
                                 .handle = DDP_COMM_HANDLE_NONE};
    free(spans);
  }
  const ddp_status_t st = alloc_buffers(r, expect);
  if (st != DDP_OK) {
    ddp_reducer_destroy(r);
    return st;
  }
  *out = r;
  return DDP_OK;
}

static int find_tensor(const ddp_reducer_t *r, size_t offset) {
  int lo = 0, hi = r->n_tensors - 1;
  while (lo <= hi) {
    const int mid = lo + (hi - lo) / 2;
    if (r->tensors[mid].offset == offset) return mid;
    if (r->tensors[mid].offset < offset)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

/* --zero 1: the bucket's world blocks summed, this rank's block into its
 * shard. The send side is the gradients themselves, their half copy, or
 * for the tail a zero-padded copy (so the blocks are whole). */
static ddp_status_t launch_reduce_scatter(ddp_reducer_t *r, bucket_t *b) {
  const ddp_stream_t s = (ddp_stream_t)r->stream;
  const void *send = r->grads + b->offset;
  void *recv = r->shard_grads + b->local;
  if (r->staging) {
    uint16_t *h = r->staging + (b->offset - r->base);
    DDP_CHECK(
        r->be->ops->convert(r->be, h, r->dtype, r->grads + b->offset, DDP_DTYPE_F32, b->count, s));
    send = h;
    recv = r->half_recv + b->local;
  } else if (b->padded) {
    DDP_CHECK(ddp_backend_copy(r->be, r->tail, r->grads + b->offset, b->count * sizeof(float),
                               DDP_COPY_KIND_DEVICE_TO_DEVICE, s));
    send = r->tail;
  }
  return ddp_comm_reduce_scatter(r->comm, send, recv, b->block, r->dtype, r->stream, &b->handle);
}

/* Starts complete buckets in order. */
static ddp_status_t launch_ready(ddp_reducer_t *r) {
  while (r->next_launch < r->n_buckets) {
    bucket_t *b = &r->buckets[r->next_launch];
    if (b->ready < b->n_tensors) break;
    if (ddp_timeline_on) b->launched_s = ddp_clock_seconds(), b->done_s = 0.0;
    if (r->zero) {
      DDP_CHECK(launch_reduce_scatter(r, b));
    } else if (r->staging) {
      uint16_t *h = r->staging + (b->offset - r->base);
      DDP_CHECK(r->be->ops->convert(r->be, h, r->dtype, r->grads + b->offset, DDP_DTYPE_F32,
                                    b->count, (ddp_stream_t)r->stream));
      DDP_CHECK(ddp_comm_allreduce_sum(r->comm, h, b->count, r->dtype, r->stream, &b->handle));
    } else {
      DDP_CHECK(ddp_comm_allreduce_sum(r->comm, r->grads + b->offset, b->count, DDP_DTYPE_F32,
                                       r->stream, &b->handle));
    }
    r->next_launch++;
  }
  return DDP_OK;
}

/* --trace: the buckets in flight that have completed since the last look,
 * so a span ends near its collective's end rather than at finish(). Only
 * while tracing: the test itself advances MPI's progress a little. A failed
 * test is left to finish()'s wait, which returns the collective's status. */
static void note_completions(ddp_reducer_t *r) {
  for (int i = 0; i < r->next_launch; ++i) {
    bucket_t *b = &r->buckets[i];
    if (b->handle == DDP_COMM_HANDLE_NONE || b->done_s > 0.0) continue;
    int done = 0;
    if (ddp_comm_test(r->comm, b->handle, &done) == DDP_OK && done) b->done_s = ddp_clock_seconds();
  }
}

int ddp_reducer_completes_bucket(const ddp_reducer_t *r, size_t offset) {
  const int t = r ? find_tensor(r, offset) : -1;
  if (t < 0) return 1; /* not a gradient tensor: mark_ready will say so */
  if (t == r->n_tensors - 1) return 1;
  const int last = r->last_bucket ? r->last_bucket[t] : r->bucket_of[t];
  return r->bucket_of[t + 1] > last;
}

ddp_status_t ddp_reducer_mark_ready(ddp_reducer_t *r, size_t offset, size_t count) {
  if (!r) DDP_FAIL(DDP_ERR_INVALID_ARG, "reducer_mark_ready: NULL reducer");
  r->norm_ready = 0; /* a new step: the partials no longer describe the gradients */
  const int t = find_tensor(r, offset);
  if (t < 0 || r->tensors[t].count != count)
    DDP_FAIL(DDP_ERR_INTERNAL, "reducer: [%zu, +%zu) marked ready is not a gradient tensor", offset,
             count);
  if (r->marked[t])
    DDP_FAIL(DDP_ERR_INTERNAL, "reducer: tensor %d (offset %zu) marked ready twice in a step", t,
             offset);
  r->marked[t] = 1;
  const int last = r->last_bucket ? r->last_bucket[t] : r->bucket_of[t];
  for (int k = r->bucket_of[t]; k <= last; ++k) r->buckets[k].ready++;
  DDP_CHECK(launch_ready(r));
  ddp_comm_progress(r->comm);
  if (ddp_timeline_on) note_completions(r);
  return DDP_OK;
}

ddp_status_t ddp_reducer_finish(ddp_reducer_t *r, double *exposed_ms) {
  if (!r) DDP_FAIL(DDP_ERR_INVALID_ARG, "reducer_finish: NULL reducer");
  /* Launched buckets are completed even when the step failed, so the
   * communicator holds no orphaned handle (and peers are not left in a
   * collective this rank abandoned). */
  const double t0 = (1e3 * ddp_clock_seconds());
  ddp_status_t st = DDP_OK;
  r->norm_ready = 0;
  for (int i = 0; i < r->n_buckets; ++i) {
    bucket_t *b = &r->buckets[i];
    if (b->handle == DDP_COMM_HANDLE_NONE) continue;
    const ddp_status_t w = ddp_comm_stream_wait(r->comm, b->handle, r->stream);
    if (st == DDP_OK) st = w;
    /* --trace: from the launch to the moment the host saw it done (a
     * host communicator's wait returns then; it may have finished earlier) */
    if (ddp_timeline_on)
      ddp_timeline_record(
          DDP_SPAN_ALLREDUCE, i,
          (int64_t)(b->count * ddp_dtype_size(r->staging ? r->dtype : DDP_DTYPE_F32)),
          b->launched_s, b->done_s > 0.0 ? b->done_s : ddp_clock_seconds());
    b->handle = DDP_COMM_HANDLE_NONE;
    /* Widen the half sums back into the fp32 gradients, scaled, with the
     * bucket's sum of squares (the fused epilogue). */
    if (st == DDP_OK && r->zero) {
      /* the shard's block: widened (half) or scaled in place (fp32) */
      float *dst = r->shard_grads + b->local;
      const void *src = r->staging ? (const void *)(r->half_recv + b->local) : dst;
      st = ddp_optim_grad_epilogue(r->be, dst, src, r->staging ? r->dtype : DDP_DTYPE_F32, b->block,
                                   r->scale, r->partials + i, (ddp_stream_t)r->stream);
    } else if (st == DDP_OK && r->staging) {
      st = ddp_optim_grad_epilogue(r->be, r->grads + b->offset, r->staging + (b->offset - r->base),
                                   r->dtype, b->count, r->scale, r->partials + i,
                                   (ddp_stream_t)r->stream);
    }
  }
  if (exposed_ms) *exposed_ms = (1e3 * ddp_clock_seconds()) - t0;
  const int incomplete = r->next_launch;
  for (int i = 0; i < r->n_buckets; ++i) r->buckets[i].ready = 0;
  r->next_launch = 0;
  if (st == DDP_OK && incomplete < r->n_buckets) {
    const bucket_t *b = &r->buckets[incomplete];
    int missing = b->first_tensor;
    while (missing < b->first_tensor + b->n_tensors && r->marked[missing]) ++missing;
    memset(r->marked, 0, (size_t)r->n_tensors);
    DDP_FAIL(DDP_ERR_INTERNAL,
             "reducer: backward ended with bucket %d of %d incomplete (tensor %d at offset %zu "
             "never marked ready)",
             incomplete, r->n_buckets, missing, r->tensors[missing].offset);
  }
  memset(r->marked, 0, (size_t)r->n_tensors);
  /* every bucket launched, waited for and widened: all partials are fresh */
  r->norm_ready = st == DDP_OK && r->partials;
  return st;
}

int ddp_reducer_fused_epilogue(const ddp_reducer_t *r) {
  return r && r->partials != NULL;
}

ddp_status_t ddp_reducer_set_scale(ddp_reducer_t *r, float scale) {
  if (!r) DDP_FAIL(DDP_ERR_INVALID_ARG, "reducer_set_scale: NULL reducer");
  if (!(scale > 0.0f) || !isfinite(scale))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "reducer: gradient scale %g must be finite and > 0",
             (double)scale);
  r->scale = scale;
  return DDP_OK;
}

ddp_status_t ddp_reducer_grad_sumsq(ddp_reducer_t *r, float *sumsq) {
  if (!r || !sumsq)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "reducer_grad_sumsq: NULL %s", !r ? "reducer" : "sumsq");
  if (!r->partials)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "reducer: an fp32 all-reduce has no fused epilogue; take the gradient norm with "
             "ddp_optim_grad_sumsq");
  if (!r->norm_ready)
    DDP_FAIL(DDP_ERR_INTERNAL,
             "reducer: no finished step to take the gradient norm of (finish() failed or has not "
             "run since the step's first mark_ready)");
  if (!r->all_partials)
    return ddp_optim_sum_partials(r->be, sumsq, r->partials, r->n_buckets, (ddp_stream_t)r->stream);
  /* --zero 1 on several ranks: each holds the partials of its blocks only;
   * every rank adds all of them in the same order, so all get the same bits
   * (and so the same clipping factor and the same overflow decision) */
  ddp_comm_handle_t h;
  DDP_CHECK(ddp_comm_allgather(r->comm, r->partials, r->all_partials,
                               (size_t)r->n_buckets * sizeof *r->partials, r->stream, &h));
  DDP_CHECK(ddp_comm_stream_wait(r->comm, h, r->stream));
  return ddp_optim_sum_partials(r->be, sumsq, r->all_partials, r->zero->world * r->n_buckets,
                                (ddp_stream_t)r->stream);
}
