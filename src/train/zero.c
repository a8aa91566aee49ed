/* The sharded optimizer's plans and collectives (see train/zero.h). */
#include "train/zero.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"

static ddp_status_t alloc_zeroed(ddp_backend_t *be, size_t n, ddp_dtype_t dt, void **out) {
  DDP_CHECK(ddp_backend_alloc(be, n * ddp_dtype_size(dt), out));
  return be->ops->fill(be, *out, dt, 0.0f, n, NULL);
}

void ddp_zero_destroy(ddp_zero_t *z) {
  if (!z || !z->be) return;
  ddp_backend_t *be = z->be;
  if (z->plans)
    for (int k = 0; k < z->layout.n_buckets; ++k) ddp_optim_plan_destroy(z->plans[k]);
  free(z->plans);
  if (z->grads) ddp_backend_free(be, z->grads);
  if (z->tail) ddp_backend_free(be, z->tail);
  if (z->chunk) ddp_backend_free(be, z->chunk);
  if (z->lamb_sums) ddp_backend_free(be, z->lamb_sums);
  if (z->lamb_ratio) ddp_backend_free(be, z->lamb_ratio);
  ddp_zero_layout_destroy(&z->layout);
  memset(z, 0, sizeof *z);
}

/* ---- LAMB across the shards --------------------------------------------- */

/* Rank r's pieces in the layout's order (train/zero_layout.c: bucket by
 * bucket, the tensor parts of r's owned range): the tensor of each into
 * out[j] when out is given; returns how many. */
static int rank_pieces(const ddp_zero_layout_t *l, const ddp_model_t *m, int r, int *out) {
  int np = 0;
  for (int k = 0; k < l->n_buckets; ++k) {
    size_t lo, hi;
    ddp_zero_layout_owned(l, k, r, &lo, &hi);
    for (size_t e = lo; e < hi;) {
      const int t = ddp_zero_tensor_of(m->tensors, m->n_tensors, e);
      const size_t t_end = m->tensors[t].offset + m->tensors[t].count;
      if (out) out[np] = t;
      np++;
      e = t_end < hi ? t_end : hi;
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
  /* this rank's rows: its tensor's list */
  const int *mine = tid + (size_t)l->rank * stride;
  begin[0] = 0;
  for (int j = 0; j < l->n_pieces; ++j)
    begin[j + 1] = begin[j] + (t_begin[mine[j] + 1] - t_begin[mine[j]]);
  index = malloc(((size_t)begin[l->n_pieces] + 1) * sizeof *index);
  if (!index) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "zero lamb: out of host memory");
  for (int j = 0; j < l->n_pieces; ++j)
    memcpy(index + begin[j], t_list + t_begin[mine[j]],
           (size_t)(begin[j + 1] - begin[j]) * sizeof *index);
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

/* LAMB: the groups of every plan (its slice of the rank's pieces, from
 * `first`) and the exchange buffers, once. */
static ddp_status_t lamb_init(ddp_zero_t *z) {
  ddp_optim_lamb_groups_t g;
  DDP_CHECK(build_groups(z, &g));
  ddp_status_t st = DDP_OK;
  for (int k = 0; k < z->layout.n_buckets && st == DDP_OK; ++k) {
    const ddp_zero_bucket_t *b = &z->layout.buckets[k];
    if (!z->plans[k]) continue;
    int32_t *begin = malloc(((size_t)b->n_pieces + 1) * sizeof *begin);
    if (!begin) {
      st = DDP_ERR_OOM;
      break;
    }
    for (int j = 0; j <= b->n_pieces; ++j)
      begin[j] = g.begin[b->first_piece + j] - g.begin[b->first_piece];
    ddp_optim_lamb_groups_t gk = g;
    gk.first = b->first_piece;
    gk.begin = begin;
    gk.index = g.index + g.begin[b->first_piece];
    st = ddp_optim_plan_set_lamb_groups(z->plans[k], &gk);
    free(begin);
  }
  z->lamb_stride = g.stride;
  free((void *)g.begin);
  free((void *)g.index);
  if (st == DDP_ERR_OOM) DDP_FAIL(DDP_ERR_OOM, "zero lamb: out of host memory");
  DDP_CHECK(st);
  /* zeroed (all-zero bits are 0.0 as a double too): a row's unused end goes
   * into the all-gather as it is */
  const size_t doubles = 2 * (size_t)g.stride * (size_t)z->layout.world;
  DDP_CHECK(alloc_zeroed(z->be, doubles * (sizeof(double) / sizeof(float)), DDP_DTYPE_F32,
                         (void **)&z->lamb_sums));
  DDP_CHECK(alloc_zeroed(z->be, (size_t)z->layout.n_pieces > 0 ? (size_t)z->layout.n_pieces : 1,
                         DDP_DTYPE_F32, (void **)&z->lamb_ratio));
  return DDP_OK;
}

ddp_status_t ddp_zero_create(ddp_zero_t *z, ddp_backend_t *be, ddp_model_t *model, int world,
                             int rank, double bucket_bytes, double first_bucket_bytes,
                             const ddp_optim_config_t *cfg) {
  memset(z, 0, sizeof *z);
  DDP_CHECK(ddp_zero_layout_create(model->tensors, model->n_tensors, model->n_params, world, rank,
                                   bucket_bytes, first_bucket_bytes, &z->layout));
  z->be = be;
  z->model = model;
  z->state_per_param = ddp_optim_state_per_param(cfg);
  z->lamb = cfg->kind == DDP_OPTIM_KIND_LAMB;
  const ddp_zero_layout_t *l = &z->layout;
  const ddp_zero_bucket_t *tail = &l->buckets[l->n_buckets - 1];
  ddp_status_t st = DDP_OK;
  z->plans = calloc((size_t)l->n_buckets, sizeof *z->plans);
  if (!z->plans) DDP_FAIL_GOTO(st, DDP_ERR_OOM, fail, "--zero 1: out of host memory");
  st = alloc_zeroed(be, l->shard, DDP_DTYPE_F32, (void **)&z->grads);
  if (st == DDP_OK && tail->padded)
    st = alloc_zeroed(be, (size_t)world * tail->block, DDP_DTYPE_F32, &z->tail);
  if (st == DDP_OK && z->state_per_param > 0)
    st = alloc_zeroed(be, DDP_ZERO_CHUNK, DDP_DTYPE_F32, (void **)&z->chunk);
  for (int k = 0; k < l->n_buckets && st == DDP_OK; ++k) {
    const ddp_zero_bucket_t *b = &l->buckets[k];
    if (b->owned)
      st = ddp_optim_plan_create(be, cfg, l->pieces + b->first_piece, b->n_pieces, b->owned,
                                 &z->plans[k]);
  }
  if (st == DDP_OK && z->lamb) st = lamb_init(z);
  if (st == DDP_OK) st = ddp_backend_sync(be, NULL);
fail:
  if (st != DDP_OK) ddp_zero_destroy(z);
  return st;
}

ddp_optim_plan_t *ddp_zero_first_plan(const ddp_zero_t *z) {
  for (int k = 0; k < z->layout.n_buckets; ++k)
    if (z->plans[k]) return z->plans[k];
  return NULL;
}

ddp_status_t ddp_zero_load_state(ddp_zero_t *z, const float *full_state, float *shard_state) {
  const ddp_zero_layout_t *l = &z->layout;
  for (int k = 0; k < l->n_buckets; ++k) {
    const ddp_zero_bucket_t *b = &l->buckets[k];
    size_t lo, hi;
    ddp_zero_layout_owned(l, k, l->rank, &lo, &hi);
    for (size_t s = 0; s < z->state_per_param && b->owned; ++s)
      DDP_CHECK(ddp_backend_copy(z->be,
                                 shard_state + z->state_per_param * b->state_at + s * b->owned,
                                 full_state + s * l->n + lo, b->owned * sizeof(float),
                                 DDP_COPY_KIND_DEVICE_TO_DEVICE, NULL));
  }
  return ddp_backend_sync(z->be, NULL);
}

/* Bucket k's arguments: the step's shared values on this rank's owned range. */
static ddp_optim_step_args_t bucket_args(const ddp_zero_t *z, int k,
                                         const ddp_optim_step_args_t *step, float *shard_state) {
  const ddp_zero_layout_t *l = &z->layout;
  const ddp_zero_bucket_t *b = &l->buckets[k];
  const size_t lo = b->offset + (size_t)l->rank * b->block;
  ddp_optim_step_args_t a = *step;
  a.params = z->model->params + lo;
  a.grads = z->grads + b->local;
  a.state = z->state_per_param ? shard_state + z->state_per_param * b->state_at : NULL;
  a.tensors = l->pieces + b->first_piece;
  a.n_tensors = b->n_pieces;
  a.n = b->owned;
  a.compute_params = step->compute_params
                         ? (char *)step->compute_params + lo * ddp_dtype_size(step->compute_dtype)
                         : NULL;
  return a;
}

ddp_status_t ddp_zero_step(ddp_zero_t *z, const ddp_optim_step_args_t *step, float *shard_state,
                           ddp_comm_t *comm) {
  const ddp_zero_layout_t *l = &z->layout;
  if (!z->lamb) {
    for (int k = 0; k < l->n_buckets; ++k) {
      if (!z->plans[k]) continue;
      const ddp_optim_step_args_t a = bucket_args(z, k, step, shard_state);
      DDP_CHECK(ddp_optim_step(z->be, z->plans[k], &a, NULL));
    }
    return DDP_OK;
  }
  /* LAMB: every plan's per-piece sums into this rank's row, the rows of all
   * ranks all-gathered (in place), then each plan's ratios and update */
  const size_t row = 2 * (size_t)z->lamb_stride;
  double *mine = z->lamb_sums + (size_t)l->rank * row;
  for (int k = 0; k < l->n_buckets; ++k) {
    if (!z->plans[k]) continue;
    const ddp_optim_step_args_t a = bucket_args(z, k, step, shard_state);
    DDP_CHECK(ddp_optim_lamb_sums(z->be, z->plans[k], &a,
                                  mine + 2 * (size_t)l->buckets[k].first_piece, NULL));
  }
  ddp_comm_handle_t h;
  DDP_CHECK(ddp_comm_allgather(comm, mine, z->lamb_sums, row * sizeof(double), NULL, &h));
  DDP_CHECK(ddp_comm_stream_wait(comm, h, NULL));
  for (int k = 0; k < l->n_buckets; ++k) {
    if (!z->plans[k]) continue;
    const ddp_optim_step_args_t a = bucket_args(z, k, step, shard_state);
    float *ratio = z->lamb_ratio + l->buckets[k].first_piece;
    DDP_CHECK(ddp_optim_lamb_ratios(z->be, z->plans[k], a.lr, z->lamb_sums, ratio, NULL));
    DDP_CHECK(ddp_optim_lamb_apply(z->be, z->plans[k], &a, ratio, NULL));
  }
  return DDP_OK;
}

/* Every rank's block of every bucket of the full buffer buf, in place, esz
 * bytes an element: each rank's own block is already where it belongs. */
static ddp_status_t gather(ddp_zero_t *z, ddp_comm_t *comm, void *buf, size_t esz) {
  const ddp_zero_layout_t *l = &z->layout;
  char *base = buf;
  for (int k = 0; k < l->n_buckets; ++k) {
    const ddp_zero_bucket_t *b = &l->buckets[k];
    const size_t mine = (size_t)l->rank * b->block * esz;
    char *all = b->padded ? (char *)z->tail : base + b->offset * esz;
    if (b->padded && b->owned) /* the tail: this rank's part into the padded buffer */
      DDP_CHECK(ddp_backend_copy(z->be, all + mine, base + b->offset * esz + mine, b->owned * esz,
                                 DDP_COPY_KIND_DEVICE_TO_DEVICE, NULL));
    ddp_comm_handle_t h;
    DDP_CHECK(ddp_comm_allgather(comm, all + mine, all, b->block * esz, NULL, &h));
    DDP_CHECK(ddp_comm_stream_wait(comm, h, NULL));
    if (b->padded) /* the tail's model elements; its padding stays behind */
      DDP_CHECK(ddp_backend_copy(z->be, base + b->offset * esz, all, b->count * esz,
                                 DDP_COPY_KIND_DEVICE_TO_DEVICE, NULL));
  }
  return DDP_OK;
}

static int half_run(const ddp_zero_t *z) {
  return z->model->compute_params != NULL && z->model->precision != DDP_DTYPE_F32;
}

ddp_status_t ddp_zero_gather_weights(ddp_zero_t *z, ddp_comm_t *comm) {
  if (half_run(z))
    return gather(z, comm, z->model->compute_params, ddp_dtype_size(z->model->precision));
  return gather(z, comm, z->model->params, sizeof(float));
}

ddp_status_t ddp_zero_gather_masters(ddp_zero_t *z, ddp_comm_t *comm) {
  if (!half_run(z)) return DDP_OK;
  return gather(z, comm, z->model->params, sizeof(float));
}

/* Rank 0: the part [c0, c0 + len) of rank r's state (in buf, backend
 * memory) to its places in host (state_per_param x n floats). Rank r's
 * state is, bucket after bucket, slot after slot, its owned range. */
static ddp_status_t place_chunk(ddp_zero_t *z, int r, size_t c0, size_t len, const float *buf,
                                float *host) {
  const ddp_zero_layout_t *l = &z->layout;
  const size_t spp = z->state_per_param;
  size_t at = 0; /* where bucket k's state starts in rank r's */
  for (int k = 0; k < l->n_buckets && at < c0 + len; ++k) {
    size_t lo, hi;
    ddp_zero_layout_owned(l, k, r, &lo, &hi);
    const size_t owned = hi - lo;
    for (size_t s = 0; s < spp; ++s, at += owned) {
      const size_t a = at > c0 ? at : c0;
      const size_t e = at + owned < c0 + len ? at + owned : c0 + len;
      if (a < e)
        DDP_CHECK(ddp_backend_copy(z->be, host + s * l->n + lo + (a - at), buf + (a - c0),
                                   (e - a) * sizeof(float), DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
    }
  }
  return DDP_OK;
}

/* Elements rank r owns (its state is state_per_param times that). */
static size_t owned_by(const ddp_zero_layout_t *l, int r) {
  size_t total = 0;
  for (int k = 0; k < l->n_buckets; ++k) {
    size_t lo, hi;
    ddp_zero_layout_owned(l, k, r, &lo, &hi);
    total += hi - lo;
  }
  return total;
}

ddp_status_t ddp_zero_gather_state(ddp_zero_t *z, ddp_comm_t *comm, const float *shard_state,
                                   float *host_state) {
  const ddp_zero_layout_t *l = &z->layout;
  for (int r = 0; r < l->world; ++r) {
    const size_t total = z->state_per_param * owned_by(l, r);
    for (size_t c0 = 0; c0 < total; c0 += DDP_ZERO_CHUNK) {
      const size_t len = total - c0 < DDP_ZERO_CHUNK ? total - c0 : DDP_ZERO_CHUNK;
      /* the root sends from its state; the others receive into the chunk */
      float *buf = r == l->rank ? (float *)shard_state + c0 : z->chunk;
      ddp_comm_handle_t h;
      DDP_CHECK(ddp_comm_broadcast(comm, buf, len * sizeof(float), r, NULL, &h));
      DDP_CHECK(ddp_comm_wait(comm, h));
      if (host_state) DDP_CHECK(place_chunk(z, r, c0, len, buf, host_state));
    }
  }
  return ddp_backend_sync(z->be, NULL);
}
