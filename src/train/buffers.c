/* The model's buffers across the ranks (see train/buffers.h). Averaging
 * happens where a buffer is read, not after every step: PyTorch DDP's
 * broadcast_buffers costs a collective per forward, while statistics read
 * only by evaluations, checkpoints and exports need agree only there; the
 * mean of all ranks' statistics is also a better estimate than rank 0's
 * alone. Because a checkpoint's averaging changes the live buffers too, the
 * run that goes on and a run resumed from that checkpoint hold the same
 * values (bit-exact resume). */
#include "train/buffers.h"

#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "core/hash.h"
#include "optim/optim.h"

/* The sum over the ranks, in place, of n floats of backend memory that
 * work on the compute stream wrote; the result is there for work enqueued
 * after the call. */
static ddp_status_t sum_ranks(ddp_train_buffers_t *tb, float *x, size_t n, const char *who) {
  ddp_backend_t *be = tb->model->be;
  ddp_comm_handle_t h;
  ddp_status_t st = DDP_OK;
  /* a host communicator reads x when the call is made: the compute stream
   * must have written it by then */
  if (!tb->stream_ordered && be->ops->kind != DDP_DEVICE_KIND_CPU) st = ddp_backend_sync(be, NULL);
  if (st == DDP_OK) st = ddp_comm_allreduce_sum(tb->comm, x, n, DDP_DTYPE_F32, NULL, &h);
  /* device communicator: the compute stream waits on the device, the host
   * goes on; host communicator: complete now */
  if (st == DDP_OK)
    st = tb->stream_ordered ? ddp_comm_stream_wait(tb->comm, h, NULL) : ddp_comm_wait(tb->comm, h);
  if (st != DDP_OK)
    DDP_FAIL(st,
             "rank %d: the sum over %d ranks of %zu floats for %s (an all-reduce on the %s "
             "communicator) failed: %s",
             tb->dist->rank, tb->dist->world, n, who, ddp_comm_name(tb->comm),
             ddp_status_string(st));
  return DDP_OK;
}

/* The model's allreduce_fn. */
static ddp_status_t model_allreduce(void *ctx, float *x, size_t n) {
  ddp_train_buffers_t *tb = ctx;
  char who[96];
  snprintf(who, sizeof who, "model %s (ddp_model_allreduce)", tb->model->ops->name);
  return sum_ranks(tb, x, n, who);
}

ddp_status_t ddp_train_buffers_init(ddp_train_buffers_t *tb, ddp_model_t *model,
                                    const ddp_dist_t *dist, ddp_comm_t *comm) {
  *tb = (ddp_train_buffers_t){.model = model, .dist = dist, .comm = comm};
  if (dist->world == 1) return DDP_OK; /* the sum over one rank is x itself */
  ddp_comm_caps_t caps;
  DDP_CHECK(ddp_comm_get_caps(comm, &caps));
  tb->stream_ordered = caps.role == DDP_COMM_ROLE_DEVICE;
  model->allreduce_fn = model_allreduce;
  model->allreduce_ctx = tb;
  for (int i = 0; i < model->n_buffer_tensors; ++i) {
    tb->has_mean |= model->buffer_tensors[i].kind == DDP_BUFFER_MEAN;
    tb->has_count |= model->buffer_tensors[i].kind == DDP_BUFFER_COUNT;
  }
  if (model->buffers_in_sync) tb->has_mean = 0;
  const size_t n = model->n_buffer_floats;
  if (tb->has_mean) {
    DDP_CHECK(ddp_backend_alloc(model->be, n * sizeof(float), (void **)&tb->scratch));
    DDP_CHECK(ddp_backend_alloc(model->be, sizeof(double), (void **)&tb->partial));
  }
  if (tb->has_count && !(tb->host = malloc(n * sizeof(float))))
    DDP_FAIL(DDP_ERR_OOM, "rank %d: model buffers: out of host memory (%zu floats)", dist->rank, n);
  return DDP_OK;
}

ddp_status_t ddp_train_buffers_broadcast(ddp_train_buffers_t *tb) {
  const ddp_model_t *m = tb->model;
  if (tb->dist->world == 1 || !m->n_buffer_floats) return DDP_OK;
  ddp_comm_handle_t h;
  DDP_CHECK(
      ddp_comm_broadcast(tb->comm, m->buffers, m->n_buffer_floats * sizeof(float), 0, NULL, &h));
  return ddp_comm_wait(tb->comm, h);
}

void ddp_train_buffers_stepped(ddp_train_buffers_t *tb) {
  tb->stale = tb->has_mean;
}

/* buffers[run] = sum[run] x (1 / world) for each run of MEAN entries. */
static ddp_status_t average(ddp_train_buffers_t *tb, const char *why) {
  ddp_model_t *m = tb->model;
  char who[96];
  snprintf(who, sizeof who, "averaging model %s's buffers before %s", m->ops->name, why);
  DDP_CHECK(ddp_backend_copy(m->be, tb->scratch, m->buffers, m->n_buffer_floats * sizeof(float),
                             DDP_COPY_KIND_DEVICE_TO_DEVICE, NULL));
  DDP_CHECK(sum_ranks(tb, tb->scratch, m->n_buffer_floats, who));
  const float inv = 1.0f / (float)tb->dist->world;
  for (int i = 0; i < m->n_buffer_tensors;) {
    if (m->buffer_tensors[i].kind != DDP_BUFFER_MEAN) {
      ++i;
      continue;
    }
    const size_t off = m->buffer_tensors[i].t.offset;
    size_t n = 0;
    for (; i < m->n_buffer_tensors && m->buffer_tensors[i].kind == DDP_BUFFER_MEAN; ++i)
      n += m->buffer_tensors[i].t.count;
    /* dst = src x scale on the compute stream, on every backend */
    DDP_CHECK(ddp_optim_grad_epilogue(m->be, m->buffers + off, tb->scratch + off, DDP_DTYPE_F32, n,
                                      inv, tb->partial, NULL));
  }
  tb->stale = 0;
  return DDP_OK;
}

/* Every rank advances its counters alike; a difference means the ranks ran
 * different passes, which the checkpoint must not hide. */
static ddp_status_t counters_agree(ddp_train_buffers_t *tb, const char *why) {
  ddp_model_t *m = tb->model;
  DDP_CHECK(ddp_backend_copy(m->be, tb->host, m->buffers, m->n_buffer_floats * sizeof(float),
                             DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  DDP_CHECK(ddp_backend_sync(m->be, NULL));
  uint64_t h = DDP_FNV1A64_INIT;
  for (int i = 0; i < m->n_buffer_tensors; ++i)
    if (m->buffer_tensors[i].kind == DDP_BUFFER_COUNT)
      h = ddp_fnv1a64(h, tb->host + m->buffer_tensors[i].t.offset,
                      m->buffer_tensors[i].t.count * sizeof(float));
  char what[160];
  snprintf(what, sizeof what, "model %s's counter buffers (kind COUNT) before %s", m->ops->name,
           why);
  if (ddp_dist_agree_u64(tb->dist, what, h) != DDP_OK)
    DDP_FAIL(DDP_ERR_MISMATCH,
             "rank %d: the ranks' counter buffers of model %s differ before %s (see above): "
             "every rank must advance them alike",
             tb->dist->rank, m->ops->name, why);
  return DDP_OK;
}

ddp_status_t ddp_train_buffers_sync(ddp_train_buffers_t *tb, const char *why, int check_counts) {
  if (tb->dist->world == 1 || !tb->model->n_buffer_floats) return DDP_OK;
  if (tb->stale) DDP_CHECK(average(tb, why));
  if (check_counts && tb->has_count) DDP_CHECK(counters_agree(tb, why));
  return DDP_OK;
}

void ddp_train_buffers_destroy(ddp_train_buffers_t *tb) {
  if (!tb->model) return;
  ddp_backend_free(tb->model->be, tb->scratch);
  ddp_backend_free(tb->model->be, tb->partial);
  free(tb->host);
  tb->model->allreduce_fn = NULL;
  tb->model->allreduce_ctx = NULL;
  *tb = (ddp_train_buffers_t){0};
}
