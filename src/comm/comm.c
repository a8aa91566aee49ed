/* Communicator creation by name, argument checks, the handle pool, the
 * statistics, and selection by capability (see comm/comm.h).
 *
 * Every check that does not depend on the transport happens here, before an
 * implementation sees the call, so "self" rejects exactly what "mpi" rejects
 * and a single-process run finds the reducer's mistakes too. A rejected call
 * issues nothing on any rank, so ranks that all make the same mistake stay in
 * step. The #ifs on DDP_HAVE_MPI and DDP_COMM_HAVE_NCCL live in the registry
 * below and nowhere else outside comm_mpi.c and comm_nccl.c.
 *
 * Selection by capability is here too: the registry's declarations
 * (ddp_comm_kinds), the communicator for a backend's memory
 * (ddp_comm_select_for_memory, ddp_comm_create_for_backend) and the device
 * and gradient communicator of a multi-rank job (ddp_comm_choose). The
 * deciding functions are pure functions of a capability table, so the CPU
 * suite tests every rule of them with tables of builds it is not. */
#include <config.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddptrain/check.h"
#include "comm/comm_impl.h"

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

/* Kinds this build lacks, declared all the same so that selection can say
 * what is missing ("this build has no NCCL communicator") from the entry
 * instead of from a name. Never created: nothing but ddp_comm_kinds() reads
 * this list. */
#if !DDP_HAVE_MPI
static const ddp_comm_ops_t k_mpi_absent = {.name = "mpi", .caps = DDP_COMM_DECL_MPI};
#endif
#if !DDP_COMM_HAVE_NCCL
static const ddp_comm_ops_t k_nccl_absent = {.name = "nccl", .caps = DDP_COMM_DECL_NCCL};
#endif
static const ddp_comm_ops_t *const k_absent[] = {
#if !DDP_HAVE_MPI
    &k_mpi_absent,
#endif
#if !DDP_COMM_HAVE_NCCL
    &k_nccl_absent,
#endif
    NULL,
};

/* At least the number of kinds (each list's NULL counts, so never short). */
enum { MAX_KINDS = sizeof k_registry / sizeof *k_registry + sizeof k_absent / sizeof *k_absent };

enum { DEFAULT_MAX_INFLIGHT = 64 };

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
    case DDP_COMM_OP_REDUCE_SCATTER:
      ++c->stats.n_reduce_scatter;
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

/* The declaration of ops resolved now: a built host communicator's library
 * is asked what it reads; a kind this build lacks is not. */
static void caps_of(const ddp_comm_ops_t *ops, int built, ddp_comm_caps_t *out) {
  const ddp_comm_decl_t *d = &ops->caps;
  out->kind = ops->name;
  out->label = d->label;
  out->built = built;
  out->role = d->role;
  out->multi_rank = d->multi_rank;
  out->device_per_rank = d->device_per_rank;
  out->reads = d->reads | (built && d->reads_at_run_time ? d->reads_at_run_time() : 0u);
}

size_t ddp_comm_kinds(ddp_comm_caps_t *out, size_t cap) {
  size_t n = 0;
  for (const ddp_comm_ops_t *const *r = k_registry; *r; ++r) {
    /* A kind's later entries are its other progress modes, not other kinds. */
    if (find_ops((*r)->name, NULL) != *r) continue;
    if (out && n < cap) caps_of(*r, 1, &out[n]);
    ++n;
  }
  for (const ddp_comm_ops_t *const *r = k_absent; *r; ++r) {
    if (out && n < cap) caps_of(*r, 0, &out[n]);
    ++n;
  }
  return n;
}

ddp_status_t ddp_comm_get_caps(const ddp_comm_t *c, ddp_comm_caps_t *out) {
  if (!c || !out) DDP_FAIL(DDP_ERR_INVALID_ARG, "comm get_caps: NULL argument");
  caps_of(c->ops, 1, out);
  return DDP_OK;
}

int ddp_comm_reads_device_memory(const ddp_comm_t *c) {
  if (!c) return 0;
  ddp_comm_caps_t caps;
  caps_of(c->ops, 1, &caps);
  return (caps.reads & ~DDP_COMM_READS(DDP_DEVICE_KIND_CPU)) != 0;
}

const char *ddp_comm_progress_mode(const ddp_comm_t *c) {
  return c && c->ops->mode ? c->ops->mode : "none";
}

/* The checks every summing collective starts with: a communicator, and a
 * dtype whose element size (*elem) it can add. */
static ddp_status_t reduction_elem(const ddp_comm_t *c, ddp_dtype_t dtype, const char *what,
                                   size_t *elem) {
  if (!c) DDP_FAIL(DDP_ERR_INVALID_ARG, "comm %s: NULL communicator", what);
  *elem = ddp_dtype_size(dtype);
  if (*elem == 0) DDP_FAIL(DDP_ERR_INVALID_ARG, "comm %s: invalid dtype %d", what, (int)dtype);
  return DDP_OK;
}

ddp_status_t ddp_comm_allreduce_sum(ddp_comm_t *c, void *buf, size_t count, ddp_dtype_t dtype,
                                    void *stream, ddp_comm_handle_t *h) {
  if (h) *h = DDP_COMM_HANDLE_NONE;
  size_t elem;
  DDP_CHECK(reduction_elem(c, dtype, "allreduce_sum", &elem));
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

ddp_status_t ddp_comm_reduce_scatter(ddp_comm_t *c, const void *send, void *recv,
                                     size_t count_per_rank, ddp_dtype_t dtype, void *stream,
                                     ddp_comm_handle_t *h) {
  if (h) *h = DDP_COMM_HANDLE_NONE;
  size_t elem;
  DDP_CHECK(reduction_elem(c, dtype, "reduce_scatter", &elem));
  if ((!send || !recv) && count_per_rank > 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "comm reduce_scatter: NULL %s buffer with count %zu per rank",
             send ? "receive" : "send", count_per_rank);
  if (count_per_rank > SIZE_MAX / elem / (size_t)c->world)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "comm reduce_scatter: count %zu per rank x %d ranks overflows a byte size",
             count_per_rank, c->world);
  const size_t block = count_per_rank * elem, total = block * (size_t)c->world;
  /* MPI's in-place form leaves the result at the start of the buffer and
   * NCCL's at the rank's own block: no one convention maps onto both, so
   * aliasing is refused rather than half supported. */
  const uintptr_t s0 = (uintptr_t)send, r0 = (uintptr_t)recv;
  if (count_per_rank > 0 && s0 < r0 + block && r0 < s0 + total)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "comm reduce_scatter: recv overlaps send (no in-place form: pass a separate "
             "receive buffer of count_per_rank elements)");
  ddp_comm_slot_t *s = NULL;
  DDP_CHECK(slot_acquire(c, "reduce_scatter", &s));
  s->op = DDP_COMM_OP_REDUCE_SCATTER;
  s->buf = recv;
  s->send = send;
  s->count = count_per_rank;
  s->dtype = dtype;
  return issue(c, s, total, stream, h);
}

ddp_status_t ddp_comm_barrier(ddp_comm_t *c) {
  if (!c) DDP_FAIL(DDP_ERR_INVALID_ARG, "comm barrier: NULL communicator");
  const int64_t t0 = ddp_clock_ns();
  ddp_status_t st = c->ops->barrier(c);
  c->stats.wait_ms += (double)(ddp_clock_ns() - t0) / 1e6;
  if (st == DDP_OK) ++c->stats.n_barrier;
  return st;
}

ddp_status_t ddp_comm_wait(ddp_comm_t *c, ddp_comm_handle_t h) {
  ddp_comm_slot_t *s = NULL;
  DDP_CHECK(slot_of(c, h, "wait", &s));
  const int64_t t0 = ddp_clock_ns();
  ddp_status_t st = c->ops->wait(c, s);
  c->stats.wait_ms += (double)(ddp_clock_ns() - t0) / 1e6;
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
  const int64_t t0 = ddp_clock_ns();
  ddp_status_t st = c->ops->stream_wait(c, s, stream);
  c->stats.wait_ms += (double)(ddp_clock_ns() - t0) / 1e6;
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

/* ---- selection by capability ------------------------------------------------ */

/* How messages name a memory kind (and its backend). */
static const char *memory_label(ddp_device_kind_t mem) {
  switch (mem) {
    case DDP_DEVICE_KIND_CPU:
      return "host";
    case DDP_DEVICE_KIND_CUDA:
      return "CUDA";
  }
  return "device";
}

/* How messages name a table entry: its label; a test's table may leave it
 * out. */
static const char *label_of(const ddp_comm_caps_t *k) {
  return k->label ? k->label : k->kind ? k->kind : "(unnamed)";
}

/* The first entry of kinds with the role, built or not as asked, serving
 * several ranks and reading every bit of `reads` (0: any); NULL if none.
 * Table order is preference order. */
static const ddp_comm_caps_t *find_caps(const ddp_comm_caps_t *kinds, size_t n,
                                        ddp_comm_role_t role, unsigned reads, int built) {
  for (size_t i = 0; i < n; ++i)
    if (kinds[i].role == role && !kinds[i].built == !built && kinds[i].multi_rank &&
        (kinds[i].reads & reads) == reads)
      return &kinds[i];
  return NULL;
}

/* Formats an error into why (when there is room) and returns status. */
static ddp_status_t select_error(ddp_status_t status, char *why, size_t why_len, const char *fmt,
                                 ...) __attribute__((format(printf, 4, 5)));
static ddp_status_t select_error(ddp_status_t status, char *why, size_t why_len, const char *fmt,
                                 ...) {
  if (why && why_len > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
  }
  return status;
}

ddp_status_t ddp_comm_select_for_memory(const ddp_comm_caps_t *kinds, size_t n_kinds,
                                        const ddp_comm_caps_t *host, ddp_device_kind_t mem,
                                        int rank, int world, const ddp_comm_caps_t **grad,
                                        char *why, size_t why_len) {
  if (why && why_len > 0) why[0] = '\0';
  if (grad) *grad = NULL;
  if (!grad || !host || (!kinds && n_kinds > 0))
    return select_error(DDP_ERR_INVALID_ARG, why, why_len, "comm select: NULL %s",
                        !grad   ? "result"
                        : !host ? "host communicator"
                                : "capability table");
  if (world < 1 || rank < 0 || rank >= world)
    return select_error(DDP_ERR_INVALID_ARG, why, why_len,
                        "comm select: rank %d outside a world of %d", rank, world);
  if ((int)mem < 0 || (int)mem >= DDP_COMM_MEMORY_KINDS)
    return select_error(DDP_ERR_INVALID_ARG, why, why_len,
                        "comm select: memory kind %d outside [0, %d)", (int)mem,
                        DDP_COMM_MEMORY_KINDS);
  if (!host->built || host->role != DDP_COMM_ROLE_HOST)
    return select_error(DDP_ERR_INVALID_ARG, why, why_len,
                        "comm select: '%s' is not a built host communicator",
                        host->kind ? host->kind : "(unnamed)");
  const unsigned bit = DDP_COMM_READS(mem);
  /* Device memory on several ranks: a dedicated communicator first (its own
   * stream overlaps the compute, and ddp_comm_choose promised it). One rank
   * moves nothing, so it never gets one. */
  if (world > 1 && mem != DDP_DEVICE_KIND_CPU) {
    const ddp_comm_caps_t *dev = find_caps(kinds, n_kinds, DDP_COMM_ROLE_DEVICE, bit, 1);
    if (dev) {
      *grad = dev;
      return DDP_OK;
    }
  }
  if (host->reads & bit) return DDP_OK;
  /* Neither: handing device buffers to a communicator that reads host
   * memory only would crash or corrupt them, so refuse before any step. */
  const char *label = memory_label(mem);
  char lacking[160];
  const ddp_comm_caps_t *absent = find_caps(kinds, n_kinds, DDP_COMM_ROLE_DEVICE, bit, 0);
  if (world == 1)
    snprintf(lacking, sizeof lacking, "a dedicated device communicator serves several ranks only");
  else if (absent)
    snprintf(lacking, sizeof lacking, "this build has no %s communicator", label_of(absent));
  else
    snprintf(lacking, sizeof lacking, "this build has no communicator for %s memory", label);
  return select_error(DDP_ERR_UNSUPPORTED, why, why_len,
                      "rank %d: %d ranks on the %s backend need a communicator that reads %s "
                      "memory: %s and the '%s' communicator is not %s-aware. Run a single rank "
                      "per GPU job, or --device cpu",
                      rank, world, label, label, lacking, host->kind ? host->kind : "(unnamed)",
                      label);
}

ddp_status_t ddp_comm_create_for_backend(const ddp_dist_t *dist, ddp_backend_t *be,
                                         const ddp_comm_t *host_comm, ddp_comm_t **out) {
  if (out) *out = NULL;
  if (!dist || !be || !be->ops || !host_comm || !out)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "comm create_for_backend: NULL argument");
  /* Checked before anything collective: a rank that passes the wrong
   * communicator stops here instead of meeting the others in a create. */
  if (host_comm->world != dist->world || host_comm->rank != dist->rank)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "comm create_for_backend: the host communicator is rank %d of %d, the job rank %d "
             "of %d",
             host_comm->rank, host_comm->world, dist->rank, dist->world);
  ddp_comm_caps_t kinds[MAX_KINDS], host;
  const size_t n = ddp_comm_kinds(kinds, MAX_KINDS);
  caps_of(host_comm->ops, 1, &host);
  const ddp_comm_caps_t *grad = NULL;
  char why[512];
  const ddp_status_t st = ddp_comm_select_for_memory(kinds, n, &host, be->ops->kind, dist->rank,
                                                     dist->world, &grad, why, sizeof why);
  if (st != DDP_OK) DDP_FAIL(st, "%s", why);
  if (!grad) return DDP_OK;
  const ddp_comm_config_t gc = {.kind = grad->kind, .be = be};
  return ddp_comm_create(dist, &gc, out);
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
                     ddp_comm_choice_t *out) {
  ddp_comm_caps_t kinds[MAX_KINDS];
  const size_t n = ddp_comm_kinds(kinds, MAX_KINDS);
  ddp_comm_choose_from(kinds, n, device, world, probes, out);
}

void ddp_comm_choose_from(const ddp_comm_caps_t *kinds, size_t n_kinds, const char *device,
                          int world, const ddp_comm_gpu_probe_t *probes, ddp_comm_choice_t *out) {
  if (!out) return;
  if (!device || !*device) device = "auto";
  out->device = device;
  out->grad_comm = NULL;
  out->status = DDP_OK;
  out->message[0] = '\0';
  const size_t cap = sizeof out->message;
  if (!kinds && n_kinds > 0) {
    out->status = DDP_ERR_INVALID_ARG;
    snprintf(out->message, cap, "comm choose: NULL capability table of %zu kinds", n_kinds);
    return;
  }
  if (world <= 1 || !probes || strcmp(device, "cpu") == 0) return;
  const int is_auto = strcmp(device, "auto") == 0;
  /* The probes are of CUDA GPUs: what matters is who reads CUDA memory. */
  const unsigned gpu_bit = DDP_COMM_READS(DDP_DEVICE_KIND_CUDA);
  const ddp_comm_caps_t *dev = find_caps(kinds, n_kinds, DDP_COMM_ROLE_DEVICE, gpu_bit, 1);
  const ddp_comm_caps_t *host = find_caps(kinds, n_kinds, DDP_COMM_ROLE_HOST, 0, 1);
  const char *host_label = host ? label_of(host) : "host";

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
               "CPU with the %s communicator",
               missing, world, list, host_label);
    } else {
      out->status = DDP_ERR_NO_DEVICE;
      snprintf(out->message, cap,
               "--device %s: %d of %d ranks have no usable GPU (%s); every rank needs one. Use "
               "--device auto (every rank then trains on the CPU) or --device cpu",
               device, missing, world, list);
    }
    return;
  }

  /* Two ranks of one host on the same ordinal share a GPU: a device
   * communicator that needs a GPU per rank (NCCL) refuses that. */
  int shared_a = -1, shared_b = -1;
  for (int a = 0; a < world && shared_a < 0; ++a)
    for (int b = a + 1; b < world; ++b)
      if (probes[a].device == probes[b].device &&
          strncmp(probes[a].host, probes[b].host, sizeof probes[a].host) == 0) {
        shared_a = a;
        shared_b = b;
        break;
      }
  /* A built device communicator is the one every rank will create
   * (ddp_comm_create_for_backend prefers it), so its needs decide. */
  if (dev && (!dev->device_per_rank || shared_a < 0)) {
    out->grad_comm = dev->kind;
    return;
  }
  if (!dev && host && (host->reads & gpu_bit)) return; /* the host communicator reads GPU memory */

  char reason[300];
  if (dev) {
    snprintf(reason, sizeof reason,
             "ranks %d and %d on %s would share cuda:%d, and %s needs a GPU per rank", shared_a,
             shared_b, probes[shared_a].host, probes[shared_a].device, label_of(dev));
  } else {
    const ddp_comm_caps_t *absent = find_caps(kinds, n_kinds, DDP_COMM_ROLE_DEVICE, gpu_bit, 0);
    char lacking[96], host_part[96];
    if (absent)
      snprintf(lacking, sizeof lacking, "this build has no %s communicator", label_of(absent));
    else
      snprintf(lacking, sizeof lacking, "this build has no communicator for CUDA memory");
    if (host)
      snprintf(host_part, sizeof host_part, "the %s library is not CUDA-aware", label_of(host));
    else
      snprintf(host_part, sizeof host_part, "no communicator for several ranks");
    snprintf(reason, sizeof reason, "%s and %s, so nothing can reduce GPU gradients", lacking,
             host_part);
  }
  if (is_auto) {
    out->device = "cpu";
    snprintf(out->message, cap,
             "device auto: %d ranks on GPUs: %s; every rank trains on the CPU with the %s "
             "communicator",
             world, reason, host_label);
  } else {
    out->status = DDP_ERR_UNSUPPORTED;
    snprintf(out->message, cap,
             "--device %s on %d ranks: %s. Start one rank per GPU, or use --device cpu", device,
             world, reason);
  }
}
