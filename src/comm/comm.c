/* Communicator creation by name, argument checks, the handle pool and the
 * statistics (see ddptrain/comm.h).
 *
 * Every check that does not depend on the transport happens here, before an
 * implementation sees the call, so "self" rejects exactly what "mpi" rejects
 * and a single-process run finds the reducer's mistakes too. A rejected call
 * issues nothing on any rank, so ranks that all make the same mistake stay in
 * step. The #ifs on DDP_HAVE_MPI and DDP_COMM_HAVE_NCCL live in the registry
 * below and nowhere else outside comm_mpi.c and comm_nccl.c.
 *
 * ddp_comm_choose() (the device and gradient communicator of a multi-rank
 * job) is here too: it is pure, so the CPU suite tests every rule of it. */
#include <config.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_impl.h"
#include "ddptrain/check.h"

/* Preference order within a kind does not matter: the progress mode picks. */
static const ddp_comm_ops_t *const k_registry[] = {
    &ddp_comm_self_ops,
#if DDP_HAVE_MPI
    &ddp_comm_mpi_thread_ops,
    &ddp_comm_mpi_test_ops,
#endif
#if DDP_COMM_HAVE_NCCL
    &ddp_comm_nccl_ops,
#endif
    NULL,
};

enum { DEFAULT_MAX_INFLIGHT = 64 };

int64_t ddp_comm_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Handle = generation << 16 | slot index: a slot reused after a release gets
 * a new generation, so a stale handle cannot wait on someone else's work.
 * The generation keeps 15 bits, so handles stay non-negative. */
static ddp_comm_handle_t handle_of(const ddp_comm_slot_t *s) {
  return (ddp_comm_handle_t)(((int32_t)s->gen << 16) | s->index);
}

static ddp_status_t slot_acquire(ddp_comm_t *c, const char *what, ddp_comm_slot_t **out) {
  if (c->n_free == 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "comm %s: all %d handles are in flight (max_inflight); wait for some before "
             "issuing more",
             what, c->max_inflight);
  ddp_comm_slot_t *s = &c->slots[c->free_slots[--c->n_free]];
  s->gen = (uint16_t)((s->gen + 1) & 0x7fff);
  s->in_use = 1;
  s->done = 0;
  s->status = DDP_OK;
  s->buf = NULL;
  s->send = NULL;
  s->count = 0;
  s->dtype = DDP_DTYPE_F32;
  s->root = 0;
  *out = s;
  return DDP_OK;
}

static void slot_release(ddp_comm_t *c, ddp_comm_slot_t *s) {
  s->in_use = 0;
  c->free_slots[c->n_free++] = s->index;
}

static ddp_status_t slot_of(ddp_comm_t *c, ddp_comm_handle_t h, const char *what,
                            ddp_comm_slot_t **out) {
  if (!c) DDP_FAIL(DDP_ERR_INVALID_ARG, "comm %s: NULL communicator", what);
  const int index = h & 0xffff, gen = h >> 16;
  if (h < 0 || index >= c->max_inflight || !c->slots[index].in_use || c->slots[index].gen != gen)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "comm %s: handle %d is not an outstanding collective (never issued, or already "
             "released by wait)",
             what, (int)h);
  *out = &c->slots[index];
  return DDP_OK;
}

/* Starts a described slot; on success counts it and hands out its handle,
 * or completes it at once when the caller passed no handle pointer. */
static ddp_status_t issue(ddp_comm_t *c, ddp_comm_slot_t *s, size_t bytes, void *stream,
                          ddp_comm_handle_t *h) {
  ddp_status_t st = c->ops->start(c, s, stream);
  if (st != DDP_OK) {
    slot_release(c, s);
    return st;
  }
  switch (s->op) {
    case DDP_COMM_OP_ALLREDUCE:
      ++c->stats.n_allreduce;
      break;
    case DDP_COMM_OP_BROADCAST:
      ++c->stats.n_broadcast;
      break;
    case DDP_COMM_OP_ALLGATHER:
      ++c->stats.n_allgather;
      break;
    case DDP_COMM_OP_BARRIER:
      ++c->stats.n_barrier;
      break;
  }
  c->stats.bytes += (int64_t)bytes;
  if (h) {
    *h = handle_of(s);
    return DDP_OK;
  }
  return ddp_comm_wait(c, handle_of(s));
}

static int known_progress(const char *p) {
  return strcmp(p, "thread") == 0 || strcmp(p, "test") == 0;
}

/* The registry entry of `kind` for progress mode `want` (NULL: any). */
static const ddp_comm_ops_t *find_ops(const char *kind, const char *want) {
  for (const ddp_comm_ops_t *const *r = k_registry; *r; ++r)
    if (strcmp((*r)->name, kind) == 0 && (!want || !(*r)->mode || !strcmp((*r)->mode, want)))
      return *r;
  return NULL;
}

/* Registry entries of `kind`: the progress mode matters only where it is more than one. */
static int count_ops(const char *kind) {
  int n = 0;
  for (const ddp_comm_ops_t *const *r = k_registry; *r; ++r) n += strcmp((*r)->name, kind) == 0;
  return n;
}

int ddp_comm_kind_built(const char *kind) {
  return kind && find_ops(kind, NULL) != NULL;
}

static ddp_status_t select_ops(const ddp_dist_t *dist, const char *kind, const char *progress,
                               const ddp_comm_ops_t **out) {
  if (!find_ops(kind, NULL)) {
    if (strcmp(kind, "mpi") == 0)
      DDP_FAIL(DDP_ERR_UNSUPPORTED,
               "comm kind 'mpi': this build has no MPI (configure found none)");
    if (strcmp(kind, "nccl") == 0)
      DDP_FAIL(DDP_ERR_UNSUPPORTED,
               "comm kind 'nccl': this build has no NCCL communicator (it needs NCCL, CUDA and "
               "MPI at configure time)");
    DDP_FAIL(DDP_ERR_INVALID_ARG, "comm kind '%s' is not one of auto, self, mpi, nccl", kind);
  }
  const char *want = progress ? progress : ddp_comm_default_progress();
  const ddp_comm_ops_t *ops = find_ops(kind, want);
  /* A kind with a single way to progress ("nccl": its stream) ignores the
   * MPI progress setting. */
  if (!ops) ops = find_ops(kind, NULL);
  char why[200] = "";
  if (ops->available(dist, why, sizeof why)) {
    *out = ops;
    return DDP_OK;
  }
  /* Only a mode the user did not ask for may be swapped for another. */
  if (!progress && ops->mode) {
    for (const ddp_comm_ops_t *const *r = k_registry; *r; ++r) {
      if (*r != ops && strcmp((*r)->name, kind) == 0 && (*r)->available(dist, NULL, 0)) {
        DDP_LOG_INFO("comm %s: default progress '%s' unavailable (%s); using '%s'", kind, want, why,
                     (*r)->mode);
        *out = *r;
        return DDP_OK;
      }
    }
  }
  if (ops->mode && count_ops(kind) > 1)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "comm kind '%s' with progress '%s': %s", kind, ops->mode, why);
  DDP_FAIL(DDP_ERR_INVALID_ARG, "comm kind '%s': %s", kind, why);
}

ddp_status_t ddp_comm_create(const ddp_dist_t *dist, const ddp_comm_config_t *cfg,
                             ddp_comm_t **out) {
  if (!dist || !out) DDP_FAIL(DDP_ERR_INVALID_ARG, "comm_create: NULL argument");
  *out = NULL;
  const ddp_comm_config_t none = {0};
  if (!cfg) cfg = &none;
  const char *kind = cfg->kind && *cfg->kind ? cfg->kind : "auto";
  if (cfg->progress && !known_progress(cfg->progress))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "comm progress mode '%s' is not one of thread, test",
             cfg->progress);
  const int max_inflight = cfg->max_inflight ? cfg->max_inflight : DEFAULT_MAX_INFLIGHT;
  if (max_inflight < 1 || max_inflight > DDP_COMM_MAX_INFLIGHT)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "comm max_inflight %d outside [1, %d]", cfg->max_inflight,
             DDP_COMM_MAX_INFLIGHT);
  if (!(cfg->timeout_s >= 0) || isinf(cfg->timeout_s))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "comm timeout %g s must be finite and >= 0 (0 = default)",
             cfg->timeout_s);
  if (strcmp(kind, "auto") == 0) kind = dist->world == 1 ? "self" : "mpi";

  const ddp_comm_ops_t *ops = NULL;
  DDP_CHECK(select_ops(dist, kind, cfg->progress, &ops));

  ddp_status_t st = DDP_OK;
  ddp_comm_t *c = calloc(1, sizeof *c);
  if (!c) DDP_FAIL(DDP_ERR_OOM, "comm_create: out of host memory");
  c->ops = ops;
  c->rank = dist->rank;
  c->world = dist->world;
  c->max_inflight = max_inflight;
  c->be = cfg->be;
  c->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : DDP_COMM_DEFAULT_TIMEOUT_S;
  atomic_init(&c->comm_ns, 0);
  c->slots = calloc((size_t)max_inflight + 1, sizeof *c->slots);
  c->free_slots = calloc((size_t)max_inflight, sizeof *c->free_slots);
  if (!c->slots || !c->free_slots)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, free_comm, "comm_create: out of host memory");
  for (int i = 0; i <= max_inflight; ++i) c->slots[i].index = i;
  /* A stack popped from the end: slot 0 is handed out first. */
  for (int i = 0; i < max_inflight; ++i) c->free_slots[i] = max_inflight - 1 - i;
  c->n_free = max_inflight;
  DDP_CHECK_GOTO(ops->init(c, dist), st, free_comm);
  DDP_LOG_DEBUG("comm: %s%s%s, %d rank(s), %d handles", ops->name, ops->mode ? " progress " : "",
                ops->mode ? ops->mode : "", c->world, max_inflight);
  *out = c;
  return DDP_OK;

free_comm:
  free(c->free_slots);
  free(c->slots);
  free(c);
  return st;
}

void ddp_comm_destroy(ddp_comm_t *c) {
  if (!c) return;
  const int outstanding = c->max_inflight - c->n_free;
  if (outstanding > 0)
    DDP_LOG_WARN("comm %s destroyed with %d handle(s) never waited for; completing them first",
                 c->ops->name, outstanding);
  c->ops->shutdown(c);
  free(c->free_slots);
  free(c->slots);
  free(c);
}

int ddp_comm_rank(const ddp_comm_t *c) {
  return c ? c->rank : 0;
}

int ddp_comm_world(const ddp_comm_t *c) {
  return c ? c->world : 1;
}

const char *ddp_comm_name(const ddp_comm_t *c) {
  return c ? c->ops->name : "none";
}

int ddp_comm_reads_device_memory(const ddp_comm_t *c) {
  if (!c) return 0;
  return strcmp(c->ops->name, "self") == 0 || strcmp(c->ops->name, "nccl") == 0 ||
         ddp_comm_mpi_cuda_aware();
}

const char *ddp_comm_progress_mode(const ddp_comm_t *c) {
  return c && c->ops->mode ? c->ops->mode : "none";
}

ddp_status_t ddp_comm_allreduce_sum(ddp_comm_t *c, void *buf, size_t count, ddp_dtype_t dtype,
                                    void *stream, ddp_comm_handle_t *h) {
  if (h) *h = DDP_COMM_HANDLE_NONE;
  if (!c) DDP_FAIL(DDP_ERR_INVALID_ARG, "comm allreduce_sum: NULL communicator");
  const size_t elem = ddp_dtype_size(dtype);
  if (elem == 0) DDP_FAIL(DDP_ERR_INVALID_ARG, "comm allreduce_sum: invalid dtype %d", (int)dtype);
  if (!buf && count > 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "comm allreduce_sum: NULL buffer with count %zu", count);
  if (count > SIZE_MAX / elem)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "comm allreduce_sum: count %zu overflows a byte size", count);
  ddp_comm_slot_t *s = NULL;
  DDP_CHECK(slot_acquire(c, "allreduce_sum", &s));
  s->op = DDP_COMM_OP_ALLREDUCE;
  s->buf = buf;
  s->count = count;
  s->dtype = dtype;
  return issue(c, s, count * elem, stream, h);
}

ddp_status_t ddp_comm_broadcast(ddp_comm_t *c, void *buf, size_t bytes, int root, void *stream,
                                ddp_comm_handle_t *h) {
  if (h) *h = DDP_COMM_HANDLE_NONE;
  if (!c) DDP_FAIL(DDP_ERR_INVALID_ARG, "comm broadcast: NULL communicator");
  if (!buf && bytes > 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "comm broadcast: NULL buffer with %zu bytes", bytes);
  if (root < 0 || root >= c->world)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "comm broadcast: root %d outside [0, %d)", root, c->world);
  ddp_comm_slot_t *s = NULL;
  DDP_CHECK(slot_acquire(c, "broadcast", &s));
  s->op = DDP_COMM_OP_BROADCAST;
  s->buf = buf;
  s->count = bytes;
  s->root = root;
  return issue(c, s, bytes, stream, h);
}

ddp_status_t ddp_comm_allgather(ddp_comm_t *c, const void *send, void *recv, size_t bytes_per_rank,
                                void *stream, ddp_comm_handle_t *h) {
  if (h) *h = DDP_COMM_HANDLE_NONE;
  if (!c) DDP_FAIL(DDP_ERR_INVALID_ARG, "comm allgather: NULL communicator");
  if ((!send || !recv) && bytes_per_rank > 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "comm allgather: NULL %s buffer with %zu bytes per rank",
             send ? "receive" : "send", bytes_per_rank);
  if (bytes_per_rank > SIZE_MAX / (size_t)c->world)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "comm allgather: %zu bytes x %d ranks overflows a size",
             bytes_per_rank, c->world);
  const size_t total = bytes_per_rank * (size_t)c->world;
  const char *own = (const char *)recv + (size_t)c->rank * bytes_per_rank;
  const int in_place = send == own;
  /* Compare addresses as integers: the buffers may be unrelated objects. */
  const uintptr_t s0 = (uintptr_t)send, r0 = (uintptr_t)recv;
  if (bytes_per_rank > 0 && !in_place && s0 < r0 + total && r0 < s0 + bytes_per_rank)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "comm allgather: send overlaps recv other than at recv + rank x bytes_per_rank");
  ddp_comm_slot_t *s = NULL;
  DDP_CHECK(slot_acquire(c, "allgather", &s));
  s->op = DDP_COMM_OP_ALLGATHER;
  s->buf = recv;
  s->send = in_place ? NULL : send;
  s->count = bytes_per_rank;
  return issue(c, s, total, stream, h);
}

ddp_status_t ddp_comm_barrier(ddp_comm_t *c) {
  if (!c) DDP_FAIL(DDP_ERR_INVALID_ARG, "comm barrier: NULL communicator");
  const int64_t t0 = ddp_comm_now_ns();
  ddp_status_t st = c->ops->barrier(c);
  c->stats.wait_ms += (double)(ddp_comm_now_ns() - t0) / 1e6;
  if (st == DDP_OK) ++c->stats.n_barrier;
  return st;
}

ddp_status_t ddp_comm_wait(ddp_comm_t *c, ddp_comm_handle_t h) {
  ddp_comm_slot_t *s = NULL;
  DDP_CHECK(slot_of(c, h, "wait", &s));
  const int64_t t0 = ddp_comm_now_ns();
  ddp_status_t st = c->ops->wait(c, s);
  c->stats.wait_ms += (double)(ddp_comm_now_ns() - t0) / 1e6;
  slot_release(c, s);
  return st;
}

ddp_status_t ddp_comm_test(ddp_comm_t *c, ddp_comm_handle_t h, int *done) {
  if (!done) DDP_FAIL(DDP_ERR_INVALID_ARG, "comm test: NULL done");
  *done = 0;
  ddp_comm_slot_t *s = NULL;
  DDP_CHECK(slot_of(c, h, "test", &s));
  return c->ops->test(c, s, done);
}

ddp_status_t ddp_comm_stream_wait(ddp_comm_t *c, ddp_comm_handle_t h, void *stream) {
  ddp_comm_slot_t *s = NULL;
  DDP_CHECK(slot_of(c, h, "stream_wait", &s));
  const int64_t t0 = ddp_comm_now_ns();
  ddp_status_t st = c->ops->stream_wait(c, s, stream);
  c->stats.wait_ms += (double)(ddp_comm_now_ns() - t0) / 1e6;
  slot_release(c, s);
  return st;
}

void ddp_comm_progress(ddp_comm_t *c) {
  if (c) c->ops->progress(c);
}

void ddp_comm_get_stats(const ddp_comm_t *c, ddp_comm_stats_t *s) {
  if (!s) return;
  memset(s, 0, sizeof *s);
  if (!c) return;
  /* Reading device timings updates a counter, not what the caller sees as
   * the communicator's state: hence the cast. */
  if (c->ops->harvest) c->ops->harvest((ddp_comm_t *)c);
  *s = c->stats;
  /* atomic_load takes a non-const pointer in older C libraries' macros. */
  s->comm_ms =
      (double)atomic_load_explicit((_Atomic int64_t *)&c->comm_ns, memory_order_relaxed) / 1e6;
}

void ddp_comm_reset_stats(ddp_comm_t *c) {
  if (!c) return;
  memset(&c->stats, 0, sizeof c->stats);
  atomic_store_explicit(&c->comm_ns, 0, memory_order_relaxed);
}

/* ---- ddp_comm_choose -------------------------------------------------------- */

/* Appends to a fixed buffer, truncating silently (the message is for a log
 * line; a list of hundreds of ranks is cut with the count still right). */
static void append(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...) {
  const size_t n = strlen(buf);
  if (n + 1 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, cap - n, fmt, ap);
  va_end(ap);
}

enum { LIST_MAX = 8 }; /* ranks named in a message; the rest are counted */

void ddp_comm_choose(const char *device, int world, const ddp_comm_gpu_probe_t *probes,
                     int nccl_built, int mpi_cuda_aware, ddp_comm_choice_t *out) {
  if (!device || !*device) device = "auto";
  out->device = device;
  out->grad_comm = NULL;
  out->status = DDP_OK;
  out->message[0] = '\0';
  if (world <= 1 || !probes || strcmp(device, "cpu") == 0) return;
  const int is_auto = strcmp(device, "auto") == 0;
  const size_t cap = sizeof out->message;

  int missing = 0;
  for (int r = 0; r < world; ++r) missing += !probes[r].usable;
  if (missing == world && is_auto) { /* no GPU anywhere: the CPU job it always was */
    out->device = "cpu";
    return;
  }
  if (missing > 0) {
    /* Sized so the whole message fits: the list is cut, the conclusion never. */
    char list[300] = "";
    int named = 0;
    for (int r = 0; r < world; ++r) {
      if (probes[r].usable) continue;
      char entry[200];
      snprintf(entry, sizeof entry, "%srank %d on %.63s: %.95s", named ? "; " : "", r,
               probes[r].host, probes[r].why[0] ? probes[r].why : "no usable GPU");
      if (named == LIST_MAX || strlen(list) + strlen(entry) + 24 > sizeof list) {
        append(list, sizeof list, "; and %d more", missing - named);
        break;
      }
      append(list, sizeof list, "%s", entry);
      ++named;
    }
    if (is_auto) {
      out->device = "cpu";
      snprintf(out->message, cap,
               "device auto: %d of %d ranks have no usable GPU (%s), so every rank trains on the "
               "CPU with the MPI communicator",
               missing, world, list);
    } else {
      out->status = DDP_ERR_NO_DEVICE;
      snprintf(out->message, cap,
               "--device %s: %d of %d ranks have no usable GPU (%s); every rank needs one. Use "
               "--device auto (every rank then trains on the CPU) or --device cpu",
               device, missing, world, list);
    }
    return;
  }

  /* Two ranks of one host on the same ordinal share a GPU: NCCL refuses that. */
  int shared_a = -1, shared_b = -1;
  for (int a = 0; a < world && shared_a < 0; ++a)
    for (int b = a + 1; b < world; ++b)
      if (probes[a].device == probes[b].device &&
          strncmp(probes[a].host, probes[b].host, sizeof probes[a].host) == 0) {
        shared_a = a;
        shared_b = b;
        break;
      }
  if (nccl_built && shared_a < 0) {
    out->grad_comm = "nccl";
    return;
  }
  if (!nccl_built && mpi_cuda_aware) return; /* the host communicator reads GPU memory */

  char reason[300];
  if (nccl_built)
    snprintf(reason, sizeof reason,
             "ranks %d and %d on %s would share cuda:%d, and NCCL needs a GPU per rank", shared_a,
             shared_b, probes[shared_a].host, probes[shared_a].device);
  else
    snprintf(reason, sizeof reason,
             "this build has no NCCL communicator and the MPI library is not CUDA-aware, so "
             "nothing can reduce GPU gradients");
  if (is_auto) {
    out->device = "cpu";
    snprintf(out->message, cap,
             "device auto: %d ranks on GPUs: %s; every rank trains on the CPU with the MPI "
             "communicator",
             world, reason);
  } else {
    out->status = DDP_ERR_UNSUPPORTED;
    snprintf(out->message, cap,
             "--device %s on %d ranks: %s. Start one rank per GPU, or use --device cpu", device,
             world, reason);
  }
}
