/* The sharded optimizer's buffers and collectives (see train/zero.h). */
#include "train/zero.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"

void ddp_zero_destroy(ddp_zero_t *z) {
  if (!z || !z->be) return;
  ddp_backend_t *be = z->be;
  if (z->master) ddp_backend_free(be, z->master);
  if (z->grads) ddp_backend_free(be, z->grads);
  if (z->compute) ddp_backend_free(be, z->compute);
  if (z->tail) ddp_backend_free(be, z->tail);
  if (z->chunk) ddp_backend_free(be, z->chunk);
  if (z->lamb_sums) ddp_backend_free(be, z->lamb_sums);
  if (z->lamb_ratio) ddp_backend_free(be, z->lamb_ratio);
  ddp_zero_layout_destroy(&z->layout);
  memset(z, 0, sizeof *z);
}

static int half_run(const ddp_zero_t *z) {
  return z->model->compute_params != NULL && z->model->precision != DDP_DTYPE_F32;
}

static ddp_status_t alloc_zeroed(ddp_backend_t *be, size_t n, ddp_dtype_t dt, void **out) {
  DDP_CHECK(ddp_backend_alloc(be, n * ddp_dtype_size(dt), out));
  return be->ops->fill(be, *out, dt, 0.0f, n, NULL);
}

ddp_status_t ddp_zero_create(ddp_zero_t *z, ddp_backend_t *be, ddp_model_t *model, int world,
                             int rank, double bucket_bytes, double first_bucket_bytes,
                             size_t state_per_param) {
  memset(z, 0, sizeof *z);
  DDP_CHECK(ddp_zero_layout_create(model->tensors, model->n_tensors, model->n_params, world, rank,
                                   bucket_bytes, first_bucket_bytes, &z->layout));
  z->be = be;
  z->model = model;
  z->state_per_param = state_per_param;
  const size_t s = z->layout.shard;
  const ddp_zero_bucket_t *tail = &z->layout.buckets[z->layout.n_buckets - 1];
  ddp_status_t st = alloc_zeroed(be, s, DDP_DTYPE_F32, (void **)&z->master);
  if (st == DDP_OK) st = alloc_zeroed(be, s, DDP_DTYPE_F32, (void **)&z->grads);
  if (st == DDP_OK && half_run(z)) st = alloc_zeroed(be, s, model->precision, &z->compute);
  if (st == DDP_OK && tail->padded)
    st = alloc_zeroed(be, (size_t)world * tail->block, DDP_DTYPE_F32, &z->tail);
  if (st == DDP_OK && state_per_param > 0)
    st = alloc_zeroed(be, DDP_ZERO_CHUNK, DDP_DTYPE_F32, (void **)&z->chunk);
  if (st != DDP_OK) ddp_zero_destroy(z);
  return st;
}

/* Copies this rank's owned elements of every bucket between a full buffer
 * (element `offset` of the flat layout) and the shard (element `local`),
 * esz bytes an element. */
static ddp_status_t copy_owned(ddp_zero_t *z, void *shard, const void *full, size_t esz) {
  const ddp_zero_layout_t *l = &z->layout;
  for (int k = 0; k < l->n_buckets; ++k) {
    size_t lo, hi;
    ddp_zero_layout_owned(l, k, l->rank, &lo, &hi);
    if (hi > lo)
      DDP_CHECK(ddp_backend_copy(z->be, (char *)shard + l->buckets[k].local * esz,
                                 (const char *)full + lo * esz, (hi - lo) * esz,
                                 DDP_COPY_KIND_DEVICE_TO_DEVICE, NULL));
  }
  return DDP_OK;
}

ddp_status_t ddp_zero_load(ddp_zero_t *z, const float *full_state, float *shard_state) {
  const ddp_zero_layout_t *l = &z->layout;
  DDP_CHECK(copy_owned(z, z->master, z->model->params, sizeof(float)));
  if (z->compute)
    DDP_CHECK(
        copy_owned(z, z->compute, z->model->compute_params, ddp_dtype_size(z->model->precision)));
  if (full_state)
    for (size_t s = 0; s < z->state_per_param; ++s)
      DDP_CHECK(copy_owned(z, shard_state + s * l->shard, full_state + s * l->n, sizeof(float)));
  return ddp_backend_sync(z->be, NULL);
}

/* Every rank's block of every bucket, from the shards (src) into the full
 * buffer dst, esz bytes an element. */
static ddp_status_t gather(ddp_zero_t *z, ddp_comm_t *comm, const void *src, void *dst,
                           size_t esz) {
  const ddp_zero_layout_t *l = &z->layout;
  for (int k = 0; k < l->n_buckets; ++k) {
    const ddp_zero_bucket_t *b = &l->buckets[k];
    const void *send = (const char *)src + b->local * esz;
    void *recv = b->padded ? z->tail : (char *)dst + b->offset * esz;
    ddp_comm_handle_t h;
    DDP_CHECK(ddp_comm_allgather(comm, send, recv, b->block * esz, NULL, &h));
    DDP_CHECK(ddp_comm_stream_wait(comm, h, NULL));
    if (b->padded) /* the tail's model elements; its padding stays behind */
      DDP_CHECK(ddp_backend_copy(z->be, (char *)dst + b->offset * esz, z->tail, b->count * esz,
                                 DDP_COPY_KIND_DEVICE_TO_DEVICE, NULL));
  }
  return DDP_OK;
}

ddp_status_t ddp_zero_gather_weights(ddp_zero_t *z, ddp_comm_t *comm) {
  if (z->compute)
    return gather(z, comm, z->compute, z->model->compute_params,
                  ddp_dtype_size(z->model->precision));
  return gather(z, comm, z->master, z->model->params, sizeof(float));
}

ddp_status_t ddp_zero_gather_masters(ddp_zero_t *z, ddp_comm_t *comm) {
  if (!z->compute) return DDP_OK;
  return gather(z, comm, z->master, z->model->params, sizeof(float));
}

/* Rank 0: the part of rank r's shard chunk [c0, c0 + len) (in buf, backend
 * memory) that holds model elements, to their places in host (n floats). */
static ddp_status_t place_chunk(ddp_zero_t *z, int r, size_t c0, size_t len, const float *buf,
                                float *host) {
  const ddp_zero_layout_t *l = &z->layout;
  for (int k = 0; k < l->n_buckets; ++k) {
    const ddp_zero_bucket_t *b = &l->buckets[k];
    size_t lo, hi;
    ddp_zero_layout_owned(l, k, r, &lo, &hi);
    /* owned [lo, hi) sits at shard [local, local + hi - lo) */
    const size_t a = b->local > c0 ? b->local : c0;
    const size_t e = b->local + (hi - lo) < c0 + len ? b->local + (hi - lo) : c0 + len;
    if (a >= e) continue;
    DDP_CHECK(ddp_backend_copy(z->be, host + lo + (a - b->local), buf + (a - c0),
                               (e - a) * sizeof(float), DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  }
  return DDP_OK;
}

ddp_status_t ddp_zero_gather_state(ddp_zero_t *z, ddp_comm_t *comm, const float *shard_state,
                                   float *host_state) {
  const ddp_zero_layout_t *l = &z->layout;
  for (size_t s = 0; s < z->state_per_param; ++s)
    for (int r = 0; r < l->world; ++r)
      for (size_t c0 = 0; c0 < l->shard; c0 += DDP_ZERO_CHUNK) {
        const size_t len = l->shard - c0 < DDP_ZERO_CHUNK ? l->shard - c0 : DDP_ZERO_CHUNK;
        /* the root sends from its state; the others receive into the chunk */
        float *buf = r == l->rank ? (float *)shard_state + s * l->shard + c0 : z->chunk;
        ddp_comm_handle_t h;
        DDP_CHECK(ddp_comm_broadcast(comm, buf, len * sizeof(float), r, NULL, &h));
        DDP_CHECK(ddp_comm_wait(comm, h));
        if (host_state) DDP_CHECK(place_chunk(z, r, c0, len, buf, host_state + s * l->n));
      }
  return ddp_backend_sync(z->be, NULL);
}

/* ---- LAMB across the shards --------------------------------------------- */

/* The tensor holding element e (tensors tile [0, n) in order). */
static int tensor_of(const ddp_param_t *t, int n_tensors, size_t e) {
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

/* Rank r's pieces in the layout's order (train/zero_layout.c: per bucket the
 * tensor parts of r's block, then its padding): the tensor of each into
 * out[j] (-1: padding) when out is given; returns how many. */
static int rank_pieces(const ddp_zero_layout_t *l, const ddp_model_t *m, int r, int *out) {
  int np = 0;
  for (int k = 0; k < l->n_buckets; ++k) {
    size_t lo, hi;
    ddp_zero_layout_owned(l, k, r, &lo, &hi);
    for (size_t e = lo; e < hi;) {
      const int t = tensor_of(m->tensors, m->n_tensors, e);
      const size_t t_end = m->tensors[t].offset + m->tensors[t].count;
      if (out) out[np] = t;
      np++;
      e = t_end < hi ? t_end : hi;
    }
    if (hi - lo < l->buckets[k].block) {
      if (out) out[np] = -1;
      np++;
    }
  }
  return np;
}

/* The groups of this rank's pieces (optim/optim.h) into g (begin and index
 * allocated here). A tensor's group lists its pieces on all ranks in
 * ascending global index q x stride + j: rank-major, then the rank's
 * order, the same list on every rank that holds a piece of it. */
static ddp_status_t build_groups(const ddp_zero_t *z, ddp_optim_lamb_groups_t *g) {
  const ddp_zero_layout_t *l = &z->layout;
  const ddp_model_t *m = z->model;
  const int W = l->world;
  int stride = 0;
  for (int r = 0; r < W; ++r) {
    const int np = rank_pieces(l, m, r, NULL);
    if (np > stride) stride = np;
  }
  if (rank_pieces(l, m, l->rank, NULL) != l->n_pieces)
    DDP_FAIL(DDP_ERR_INTERNAL, "zero lamb: rank %d counts %d pieces, its layout has %d", l->rank,
             rank_pieces(l, m, l->rank, NULL), l->n_pieces);
  if ((int64_t)stride * W > INT32_MAX / 2)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "zero lamb: %d ranks x %d pieces is too many", W, stride);
  const size_t total = (size_t)stride * (size_t)W;
  int *tid = malloc(total * sizeof *tid);
  int32_t *t_begin = calloc((size_t)m->n_tensors + 1, sizeof *t_begin);
  int32_t *t_list = malloc(total * sizeof *t_list);
  int32_t *begin = malloc(((size_t)l->n_pieces + 1) * sizeof *begin);
  int32_t *index = NULL;
  ddp_status_t st = DDP_OK;
  if (!tid || !t_begin || !t_list || !begin)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "zero lamb: out of host memory for %d x %d pieces", W,
                  stride);
  for (size_t x = 0; x < total; ++x) tid[x] = -2; /* a row's unused end */
  for (int r = 0; r < W; ++r) (void)rank_pieces(l, m, r, tid + (size_t)r * stride);
  /* per tensor, the global indices of its pieces, ascending (CSR) */
  for (size_t x = 0; x < total; ++x)
    if (tid[x] >= 0) t_begin[tid[x] + 1]++;
  for (int t = 0; t < m->n_tensors; ++t) t_begin[t + 1] += t_begin[t];
  {
    int32_t *fill = malloc((size_t)m->n_tensors * sizeof *fill);
    if (!fill) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "zero lamb: out of host memory");
    memcpy(fill, t_begin, (size_t)m->n_tensors * sizeof *fill);
    for (size_t x = 0; x < total; ++x)
      if (tid[x] >= 0) t_list[fill[tid[x]]++] = (int32_t)x;
    free(fill);
  }
  /* this rank's rows: its tensor's list, or the padding piece alone */
  const int *mine = tid + (size_t)l->rank * stride;
  begin[0] = 0;
  for (int j = 0; j < l->n_pieces; ++j)
    begin[j + 1] = begin[j] + (mine[j] >= 0 ? t_begin[mine[j] + 1] - t_begin[mine[j]] : 1);
  index = malloc(((size_t)begin[l->n_pieces] + 1) * sizeof *index);
  if (!index) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "zero lamb: out of host memory");
  for (int j = 0; j < l->n_pieces; ++j) {
    if (mine[j] < 0) {
      index[begin[j]] = (int32_t)((size_t)l->rank * stride + (size_t)j);
      continue;
    }
    memcpy(index + begin[j], t_list + t_begin[mine[j]],
           (size_t)(begin[j + 1] - begin[j]) * sizeof *index);
  }
  *g = (ddp_optim_lamb_groups_t){
      .n_ranks = W, .rank = l->rank, .stride = stride, .begin = begin, .index = index};
  begin = index = NULL;
out:
  free(tid);
  free(t_begin);
  free(t_list);
  free(begin);
  free(index);
  return st;
}

ddp_status_t ddp_zero_lamb_init(ddp_zero_t *z, ddp_optim_plan_t *plan) {
  ddp_optim_lamb_groups_t g;
  DDP_CHECK(build_groups(z, &g));
  ddp_status_t st = ddp_optim_plan_set_lamb_groups(plan, &g);
  z->lamb_stride = g.stride;
  free((void *)g.begin);
  free((void *)g.index);
  DDP_CHECK(st);
  /* zeroed (all-zero bits are 0.0 as a double too): a row's padding goes
   * into the all-gather as it is */
  const size_t doubles = 2 * (size_t)g.stride * (size_t)z->layout.world;
  DDP_CHECK(alloc_zeroed(z->be, doubles * (sizeof(double) / sizeof(float)), DDP_DTYPE_F32,
                         (void **)&z->lamb_sums));
  DDP_CHECK(
      alloc_zeroed(z->be, (size_t)z->layout.n_pieces, DDP_DTYPE_F32, (void **)&z->lamb_ratio));
  return ddp_backend_sync(z->be, NULL);
}

ddp_status_t ddp_zero_lamb_step(ddp_zero_t *z, ddp_optim_plan_t *plan,
                                const ddp_optim_step_args_t *args, ddp_comm_t *comm) {
  if (!z->lamb_sums)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "zero lamb: rank %d has no groups (ddp_zero_lamb_init)",
             z->layout.rank);
  const size_t row = 2 * (size_t)z->lamb_stride;
  double *mine = z->lamb_sums + (size_t)z->layout.rank * row;
  DDP_CHECK(ddp_optim_lamb_sums(z->be, plan, args, mine, NULL));
  ddp_comm_handle_t h; /* in place: this rank's row is its send block */
  DDP_CHECK(ddp_comm_allgather(comm, mine, z->lamb_sums, row * sizeof(double), NULL, &h));
  DDP_CHECK(ddp_comm_stream_wait(comm, h, NULL));
  DDP_CHECK(ddp_optim_lamb_ratios(z->be, plan, args->lr, z->lamb_sums, z->lamb_ratio, NULL));
  return ddp_optim_lamb_apply(z->be, plan, args, z->lamb_ratio, NULL);
}
