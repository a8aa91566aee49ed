/* The sharded optimizer's buffers and collectives (see train/zero.h). */
#include "train/zero.h"

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
