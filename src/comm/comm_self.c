/* The communicator of a single rank: every collective is complete when issued.
 *
 * A sum over one rank is the rank's own data, a broadcast from rank 0 to
 * itself moves nothing, and an allgather or a reduce-scatter is one copy
 * (a host memcpy, or a device copy when the communicator was created for a
 * device backend).
 * Handles still come from the pool and must still be waited for (comm.c does
 * that bookkeeping), so a one-process run enforces the same rules as a
 * multi-rank one. */
#include <config.h>

#include <stdio.h>
#include <string.h>

#include "comm/comm_impl.h"

static int self_available(const ddp_dist_t *dist, char *why, size_t why_len) {
  if (dist->world == 1) return 1;
  if (why) snprintf(why, why_len, "needs a world of 1 rank, this job has %d", dist->world);
  return 0;
}

static ddp_status_t self_init(ddp_comm_t *c, const ddp_dist_t *dist) {
  (void)c;
  (void)dist;
  return DDP_OK;
}

static void self_shutdown(ddp_comm_t *c) {
  (void)c;
}

static ddp_status_t self_start(ddp_comm_t *c, ddp_comm_slot_t *s, void *stream) {
  /* comm.c rejected overlapping buffers. */
  const size_t bytes = s->op == DDP_COMM_OP_ALLGATHER        ? s->count
                       : s->op == DDP_COMM_OP_REDUCE_SCATTER ? s->count * ddp_dtype_size(s->dtype)
                                                             : 0;
  if (s->send && bytes > 0) {
    const int64_t t0 = ddp_clock_ns();
    /* created for a device backend (the gradient communicator of a
     * one-GPU run): the buffers are device memory, copied on the stream */
    if (c->be && c->be->ops->kind != DDP_DEVICE_KIND_CPU)
      s->status = ddp_backend_copy(c->be, s->buf, s->send, bytes, DDP_COPY_KIND_DEVICE_TO_DEVICE,
                                   (ddp_stream_t)stream);
    else
      memcpy(s->buf, s->send, bytes);
    ddp_comm_add_time(c, ddp_clock_ns() - t0);
  }
  s->done = 1;
  return DDP_OK;
}

static ddp_status_t self_wait(ddp_comm_t *c, ddp_comm_slot_t *s) {
  (void)c;
  return s->status;
}

static ddp_status_t self_test(ddp_comm_t *c, ddp_comm_slot_t *s, int *done) {
  (void)c;
  *done = s->done;
  return DDP_OK;
}

static ddp_status_t self_stream_wait(ddp_comm_t *c, ddp_comm_slot_t *s, void *stream) {
  (void)stream;
  return self_wait(c, s);
}

static void self_progress(ddp_comm_t *c) {
  (void)c;
}

static ddp_status_t self_barrier(ddp_comm_t *c) {
  (void)c;
  return DDP_OK;
}

const ddp_comm_ops_t ddp_comm_self_ops = {
    .name = "self",
    .mode = NULL,
    /* One rank moves nothing between ranks, so any memory will do. */
    .caps = {.label = "self",
             .role = DDP_COMM_ROLE_HOST,
             .multi_rank = 0,
             .device_per_rank = 0,
             .reads = DDP_COMM_READS_ANY,
             .reads_at_run_time = NULL},
    .available = self_available,
    .init = self_init,
    .shutdown = self_shutdown,
    .start = self_start,
    .wait = self_wait,
    .test = self_test,
    .stream_wait = self_stream_wait,
    .progress = self_progress,
    .barrier = self_barrier,
};
