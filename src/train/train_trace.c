/* --trace in the trainer: see train/train_trace.h.
 *
 * Every rank's buffer has the same capacity (the same options and model), so
 * the gather is one all-gather of fixed-size blocks: a header (span count,
 * dropped count, host name) and the span array. It runs once, after the
 * step loop, outside anything timed. */
#include <config.h>

#include "train/train_trace.h"

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "ddptrain/check.h"
#include "ddptrain/log.h"
#include "trace/timeline.h"

typedef struct block_header {
  int64_t n, dropped;
  char host[64];
} block_header_t;

ddp_status_t ddp_train_trace_start(const ddp_options_t *o, ddp_comm_t *comm, ddp_backend_t *be,
                                   int64_t start_step, int64_t end, size_t spans_per_step) {
  if (!o->trace[0]) return DDP_OK;
  /* the first step pays for first-touch allocations and warm-up: skip it */
  const int64_t first = end - start_step > 1 ? start_step + 1 : start_step;
  const int64_t last = first + o->trace_steps - 1;
  /* every rank leaves the barrier at about the same moment: a common origin */
  DDP_CHECK(ddp_comm_barrier(comm));
  DDP_CHECK(
      ddp_timeline_init((size_t)o->trace_steps * spans_per_step, ddp_clock_seconds(), first, last));
  DDP_CHECK(ddp_timeline_use_device(be));
  DDP_LOG_INFO("--trace %s: recording steps %lld..%lld (up to %zu spans per rank)", o->trace,
               (long long)first + 1, (long long)(last < end ? last : end - 1) + 1,
               ddp_timeline_capacity());
  return DDP_OK;
}

ddp_status_t ddp_train_trace_finish(const ddp_options_t *o, const ddp_dist_t *dist,
                                    ddp_comm_t *comm) {
  if (!o->trace[0]) return DDP_OK;
  ddp_timeline_stop();
  /* a failed resolve still takes part in the gather (the other ranks are
   * in it), and fails the run after it */
  const ddp_status_t resolved = ddp_timeline_resolve();
  size_t n = 0, dropped = 0;
  const ddp_span_t *spans = ddp_timeline_spans(&n, &dropped);
  const size_t cap = ddp_timeline_capacity();
  const size_t block = sizeof(block_header_t) + cap * sizeof(ddp_span_t);
  const int W = dist->world;
  unsigned char *all = calloc((size_t)W, block);
  ddp_timeline_rank_t *ranks = calloc((size_t)W, sizeof *ranks);
  if (!all || !ranks) {
    free(all);
    free(ranks);
    DDP_FAIL(DDP_ERR_OOM, "rank %d: --trace %s: out of host memory to gather %d ranks' spans",
             dist->rank, o->trace, W);
  }
  unsigned char *mine = all + (size_t)dist->rank * block;
  block_header_t h = {.n = (int64_t)n, .dropped = (int64_t)dropped};
  snprintf(h.host, sizeof h.host, "%s", dist->host);
  memcpy(mine, &h, sizeof h);
  if (n) memcpy(mine + sizeof h, spans, n * sizeof *spans);
  ddp_comm_handle_t handle;
  ddp_status_t st = ddp_comm_allgather(comm, mine, all, block, NULL, &handle);
  if (st == DDP_OK) st = ddp_comm_wait(comm, handle);
  if (st == DDP_OK && dist->rank == 0) {
    /* the blocks' headers are copied out: the byte array need not be aligned for them */
    block_header_t *heads = calloc((size_t)W, sizeof *heads);
    if (!heads) {
      DDP_LOG_ERROR("rank 0: --trace %s: out of host memory for %d ranks' headers", o->trace, W);
      st = DDP_ERR_OOM;
    }
    int64_t total = 0, lost = 0;
    for (int r = 0; st == DDP_OK && r < W; ++r) {
      unsigned char *b = all + (size_t)r * block;
      memcpy(&heads[r], b, sizeof heads[r]);
      heads[r].host[sizeof heads[r].host - 1] = '\0';
      memmove(b, b + sizeof heads[r], (size_t)heads[r].n * sizeof(ddp_span_t));
      ranks[r] = (ddp_timeline_rank_t){
          .host = heads[r].host, .spans = (const ddp_span_t *)(void *)b, .n = (size_t)heads[r].n};
      total += heads[r].n;
      lost += heads[r].dropped;
    }
    if (st == DDP_OK) st = ddp_timeline_write_json(o->trace, ranks, W);
    if (st == DDP_OK) {
      DDP_LOG_INFO("--trace: wrote %lld spans of %d ranks to %s", (long long)total, W, o->trace);
      if (lost)
        DDP_LOG_WARN("--trace: %lld spans did not fit the buffer and are missing from %s",
                     (long long)lost, o->trace);
    }
    free(heads);
  }
  free(all);
  free(ranks);
  ddp_timeline_destroy();
  return resolved != DDP_OK ? resolved : st;
}
