/* The NCCL communicator: collectives on GPU memory, ordered by CUDA streams
 * (see comm/comm.h, kind "nccl", progress mode "stream").
 *
 * Bootstrap: every rank prepares its stream and events, the ranks agree that
 * all of them could (an MPI_Allreduce, so one rank's failure is everyone's
 * error instead of a hang in ncclCommInitRank), rank 0 creates the unique id
 * and broadcasts it over MPI_COMM_WORLD with its own status, every rank joins
 * with ncclCommInitRank on the backend's GPU, and the ranks agree again. Init
 * is the blocking kind: a rank that never arrives is ended by the job itself
 * (ddptrain aborts every rank through MPI when one fails, and the heartbeat
 * ends a job with a silent rank), so the non-blocking config buys nothing.
 *
 * Streams: the collectives run on one stream of ours (non-blocking, highest
 * priority, so they are not queued behind compute kernels). start() records
 * an event on the caller's stream (NULL: the backend's compute stream), the
 * comm stream waits for it, the collective runs in place on the caller's
 * buffer and a per-slot event marks its end. Nothing blocks the host:
 * stream_wait() makes a stream wait for that event; wait() and test() poll
 * it (cudaEventQuery) from the host.
 *
 * Errors: every host poll also asks NCCL for an asynchronous error
 * (ncclCommGetAsyncError), and a host wait gives up once the collective has
 * been in flight for the timeout. Either aborts the NCCL communicator
 * (ncclCommAbort, which also stops its kernels): the call returns
 * DDP_ERR_NCCL / DDP_ERR_TIMEOUT / DDP_ERR_CUDA after one log line naming
 * the rank, the collective, its size and the cause, and every later call
 * fails at once with the same status.
 *
 * Collectives only a stream waits for: a watchdog thread
 * (comm/comm_watchdog.h) looks at every collective in flight a few times a
 * second (its done event, cudaEventQuery) and at NCCL's asynchronous error,
 * and judges them with the host waits' own rule and timeout. Its verdict is
 * the host waits' line ("... and the job"), ncclCommAbort and MPI_Abort: the
 * host may be far from any wait, so the job is ended from the thread. A host
 * thread waiting at that moment gets the verdict instead (watch_fail). The
 * decisions are the watchdog's (plain C, tested on the CPU); this file only
 * answers its two questions and carries out the verdict.
 *
 * Statistics: each slot's collective is bracketed by two timing events on
 * the comm stream; their elapsed time joins comm_ms once the collective is
 * known to be done (harvest, when the statistics are read or the slot is
 * reused). */
#include <config.h>

#include "comm/comm_impl.h"

#if DDP_COMM_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddptrain/check.h"
#include "backend/cuda/cuda_impl.h"
#include "comm/comm_watchdog.h"
#include "core/foreign_check.h"

typedef struct nccl_impl {
  /* NULL before init and once aborted. Set to NULL under comm_lock, which
   * the watchdog's thread takes to read NCCL's error or to abort. */
  ncclComm_t comm;
  pthread_mutex_t comm_lock;
  ddp_comm_watchdog_t *watchdog;
  uint64_t *seq; /* per slot: the watchdog's number of its latest collective */
  char who[96];  /* "rank R on HOST", as the lines name this rank */
  ddp_backend_t *be;
  int device;
  cudaStream_t stream; /* the comm stream */
  cudaEvent_t ready;   /* re-recorded on the caller's stream at every issue */
  /* Per slot, the handle pool's plus the barrier's (max_inflight + 1). */
  cudaEvent_t *begin, *done;
  int64_t *issued_ns;   /* when start() issued the slot's collective */
  unsigned char *timed; /* begin..done not yet added to comm_ns */
  int n_slots;
  int32_t *barrier_buf; /* one device int, summed by the barrier */
  /* Set once by the host thread's abort; read by the watchdog (atomics). */
  int aborted;
  int host_waits;     /* host threads inside wait_slot now (atomics) */
  ddp_status_t cause; /* the abort's status, returned by every later call */
  char why[256];      /* the abort's cause, repeated by every later call */
  struct abort_job *abort_job; /* the background ncclCommAbort, joined at shutdown */
} nccl_impl_t;

/* ncclCommAbort frees device memory, and so waits until the device is
 * idle: behind a kernel or a host callback that never ends, or that ends
 * minutes later, it blocks as long. A host wait that has timed out must
 * return with its error at once (a GPU showed the wait held for the whole
 * 3 s of other work queued before the collective), so the abort runs on a
 * thread of its own. The job is its own allocation, which a thread that
 * never returns keeps: shutdown waits for it, bounded, and else leaves it. */
typedef struct abort_job {
  ncclComm_t comm;
  int device;
  int finished; /* atomics */
} abort_job_t;

static void *abort_thread(void *arg) {
  abort_job_t *j = arg;
  cudaSetDevice(j->device);
  ncclCommAbort(j->comm);
  __atomic_store_n(&j->finished, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Starts ncclCommAbort(comm) in the background (inline when no thread can
 * be made). */
static void abort_in_background(nccl_impl_t *m, ncclComm_t comm) {
  abort_job_t *j = calloc(1, sizeof *j);
  pthread_t tid;
  if (j) {
    j->comm = comm;
    j->device = m->device;
    if (pthread_create(&tid, NULL, abort_thread, j) == 0) {
      pthread_detach(tid);
      m->abort_job = j;
      return;
    }
    free(j);
  }
  ncclCommAbort(comm);
}

/* Waits up to limit_s for the background abort; 1 when it has returned (or
 * none ran). */
static int abort_finished(nccl_impl_t *m, double limit_s) {
  abort_job_t *j = m->abort_job;
  if (!j) return 1;
  const int64_t end = ddp_clock_ns() + (int64_t)(limit_s * 1e9);
  while (!__atomic_load_n(&j->finished, __ATOMIC_ACQUIRE)) {
    if (ddp_clock_ns() > end) return 0;
    const struct timespec ts = {.tv_sec = 0, .tv_nsec = 1000000};
    nanosleep(&ts, NULL);
  }
  free(j);
  m->abort_job = NULL;
  return 1;
}

static const char *op_name(ddp_comm_op_t op) {
  switch (op) {
    case DDP_COMM_OP_ALLREDUCE:
      return "allreduce_sum";
    case DDP_COMM_OP_BROADCAST:
      return "broadcast";
    case DDP_COMM_OP_ALLGATHER:
      return "allgather";
    case DDP_COMM_OP_BARRIER:
      return "barrier";
    case DDP_COMM_OP_REDUCE_SCATTER:
      return "reduce_scatter";
  }
  return "collective";
}

/* Payload bytes, as the statistics count them. */
static size_t op_bytes(const ddp_comm_t *c, const ddp_comm_slot_t *s) {
  switch (s->op) {
    case DDP_COMM_OP_ALLREDUCE:
      return s->count * ddp_dtype_size(s->dtype);
    case DDP_COMM_OP_BROADCAST:
      return s->count;
    case DDP_COMM_OP_ALLGATHER:
      return s->count * (size_t)c->world;
    case DDP_COMM_OP_BARRIER:
      return sizeof(int32_t);
    case DDP_COMM_OP_REDUCE_SCATTER:
      return s->count * ddp_dtype_size(s->dtype) * (size_t)c->world;
  }
  return 0;
}

static ddp_status_t nccl_type_of(ddp_dtype_t dtype, ncclDataType_t *type) {
  switch (dtype) {
    case DDP_DTYPE_F32:
      *type = ncclFloat32;
      return DDP_OK;
    case DDP_DTYPE_I32:
      *type = ncclInt32;
      return DDP_OK;
    case DDP_DTYPE_BF16:
      *type = ncclBfloat16;
      return DDP_OK;
    case DDP_DTYPE_F16:
      *type = ncclFloat16;
      return DDP_OK;
    case DDP_DTYPE_COUNT_:
      break;
  }
  DDP_FAIL(DDP_ERR_UNSUPPORTED, "comm nccl: no NCCL sum for dtype %s", ddp_dtype_name(dtype));
}

/* The communicator, taken away from every later use (NULL if it is gone). */
static ncclComm_t take_comm(nccl_impl_t *m) {
  pthread_mutex_lock(&m->comm_lock);
  ncclComm_t comm = m->comm;
  m->comm = NULL;
  pthread_mutex_unlock(&m->comm_lock);
  return comm;
}

/* Aborts the NCCL communicator once, remembering why; returns the cause's
 * status. s may be NULL (an error seen between collectives). The line is
 * the watchdog's (ddp_comm_watch_format), so both name a collective alike. */
static ddp_status_t abort_comm(ddp_comm_t *c, const ddp_comm_slot_t *s, ddp_status_t st,
                               const char *cause) {
  nccl_impl_t *m = c->impl;
  if (m->aborted) return m->cause;
  m->cause = st;
  snprintf(m->why, sizeof m->why, "%s", cause);
  __atomic_store_n(&m->aborted, 1, __ATOMIC_RELEASE);
  char what[64] = "", line[768];
  if (s)
    snprintf(what, sizeof what, "%s #%llu", op_name(s->op), (unsigned long long)m->seq[s->index]);
  ddp_comm_watch_format(line, sizeof line, "comm nccl", m->who, s ? what : NULL,
                        s ? op_bytes(c, s) : 0, cause, "aborting the NCCL communicator");
  DDP_LOG_ERROR("%s", line);
  ncclComm_t comm = take_comm(m);
  if (comm) abort_in_background(m, comm);
  return st;
}

/* After an abort: fail at once, saying why. */
static ddp_status_t refuse(const ddp_comm_t *c, const char *what) {
  const nccl_impl_t *m = c->impl;
  DDP_FAIL(m->cause, "comm nccl: rank %d: %s refused: the communicator was aborted earlier (%s)",
           c->rank, what, m->why);
}

/* NCCL's asynchronous error: DDP_OK, or DDP_ERR_NCCL and its cause. Safe
 * on the watchdog's thread; no communicator (not made yet, or aborted,
 * which its aborter reports) has nothing to say. */
static ddp_status_t read_async(nccl_impl_t *m, char *cause, size_t len) {
  pthread_mutex_lock(&m->comm_lock);
  ncclResult_t async = ncclSuccess;
  if (m->comm) {
    const ncclResult_t r = ncclCommGetAsyncError(m->comm, &async);
    if (r != ncclSuccess) async = r;
  }
  if (async != ncclSuccess && async != ncclInProgress) {
    const char *last = ncclGetLastError(m->comm);
    snprintf(cause, len, "NCCL error: %s%s%s%s", ncclGetErrorString(async),
             last && *last ? " (" : "", last && *last ? last : "", last && *last ? ")" : "");
  }
  pthread_mutex_unlock(&m->comm_lock);
  return async == ncclSuccess || async == ncclInProgress ? DDP_OK : DDP_ERR_NCCL;
}

/* NCCL's asynchronous error, if any (aborts). */
static ddp_status_t poll_async(ddp_comm_t *c, const ddp_comm_slot_t *s) {
  nccl_impl_t *m = c->impl;
  if (m->aborted) return m->cause;
  char cause[200];
  if (read_async(m, cause, sizeof cause) == DDP_OK) return DDP_OK;
  return abort_comm(c, s, DDP_ERR_NCCL, cause);
}

/* cudaEventQuery of an event not yet reached. "Not ready" is no error, but
 * the runtime may keep it as the thread's last error, and the kernel
 * launchers read cudaGetLastError() right after each launch: clear it here
 * (as PyTorch does), or the next launch would report "not ready". */
static cudaError_t query_event(cudaEvent_t ev) {
  const cudaError_t e = cudaEventQuery(ev);
  if (e == cudaErrorNotReady) (void)cudaGetLastError();
  return e;
}

/* Whether slot i's latest collective is done, from its event. Safe on the
 * watchdog's thread. */
static ddp_comm_watch_state_t event_state(const nccl_impl_t *m, int i, ddp_status_t *failure,
                                          char *cause, size_t len) {
  const cudaError_t e = query_event(m->done[i]);
  if (e == cudaSuccess) return DDP_COMM_WATCH_DONE;
  if (e == cudaErrorNotReady) return DDP_COMM_WATCH_PENDING;
  *failure = DDP_ERR_CUDA;
  snprintf(cause, len, "CUDA error while waiting: %s", cudaGetErrorString(e));
  return DDP_COMM_WATCH_FAILED;
}

/* Adds slot i's device time to comm_ns when its collective is done. */
static void harvest_slot(ddp_comm_t *c, int i) {
  nccl_impl_t *m = c->impl;
  if (!m->timed[i] || query_event(m->done[i]) != cudaSuccess) return;
  float ms = 0.0f;
  if (cudaEventElapsedTime(&ms, m->begin[i], m->done[i]) == cudaSuccess)
    ddp_comm_add_time(c, (int64_t)((double)ms * 1e6));
  m->timed[i] = 0;
}

static void nccl_harvest(ddp_comm_t *c) {
  nccl_impl_t *m = c->impl;
  if (!m) return;
  for (int i = 0; i < m->n_slots; ++i) harvest_slot(c, i);
}

/* One host look at slot s: *done when its event has fired or it failed.
 * Checks NCCL's asynchronous error and the timeout on the way. */
static ddp_status_t poll_slot(ddp_comm_t *c, ddp_comm_slot_t *s, int *done) {
  nccl_impl_t *m = c->impl;
  *done = 0;
  if (s->done) {
    *done = 1;
    return s->status;
  }
  ddp_status_t st = DDP_OK;
  if (m->aborted) {
    st = refuse(c, op_name(s->op));
  } else {
    /* The watchdog's judgement, on this one collective. */
    char failure[160] = "", health[200] = "", cause[320];
    ddp_comm_watch_look_t look = {
        .failure_cause = failure, .health_cause = health, .timeout_s = c->timeout_s};
    look.state = event_state(m, s->index, &look.failure, failure, sizeof failure);
    if (look.state != DDP_COMM_WATCH_FAILED) look.health = read_async(m, health, sizeof health);
    look.age_s = (double)(ddp_clock_ns() - m->issued_ns[s->index]) / 1e9;
    int complete = 0;
    st = ddp_comm_watch_judge(&look, &complete, cause, sizeof cause);
    if (st == DDP_OK && complete) {
      s->done = 1;
      s->status = DDP_OK;
      *done = 1;
      return DDP_OK;
    }
    if (st != DDP_OK) st = abort_comm(c, s, st, cause);
  }
  if (st != DDP_OK) {
    s->done = 1;
    s->status = st;
    *done = 1;
  }
  return st;
}

static ddp_status_t wait_slot(ddp_comm_t *c, ddp_comm_slot_t *s) {
  nccl_impl_t *m = c->impl;
  /* Yield for the first polls (a short collective ends within microseconds
   * of its event), then sleep 50 us between polls so a long wait does not
   * spin a core that the loader or the MPI progress may need. */
  __atomic_add_fetch(&m->host_waits, 1, __ATOMIC_ACQ_REL);
  for (int polls = 0;; ++polls) {
    int done = 0;
    const ddp_status_t st = poll_slot(c, s, &done);
    if (done) {
      __atomic_sub_fetch(&m->host_waits, 1, __ATOMIC_ACQ_REL);
      return st;
    }
    if (polls < 200) {
      sched_yield();
    } else {
      const struct timespec ts = {.tv_sec = 0, .tv_nsec = 50000};
      nanosleep(&ts, NULL);
    }
  }
}

/* The buffer must be GPU memory on our device: NCCL given a host pointer
 * fails inside a kernel, far from the mistake. */
static ddp_status_t check_device_buffer(const ddp_comm_t *c, const ddp_comm_slot_t *s,
                                        const void *p, const char *which) {
  const nccl_impl_t *m = c->impl;
  struct cudaPointerAttributes a;
  memset(&a, 0, sizeof a);
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError(); /* older runtimes fail on unregistered host memory; not sticky */
    a.type = cudaMemoryTypeUnregistered;
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "comm nccl %s: the %s buffer %p is %s memory; the NCCL communicator reads GPU "
             "memory only (host values go through the host communicator)",
             op_name(s->op), which, p, a.type == cudaMemoryTypeHost ? "pinned host" : "host");
  if (a.device != m->device)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "comm nccl %s: the %s buffer %p is on cuda:%d, the communicator's GPU is cuda:%d",
             op_name(s->op), which, p, a.device, m->device);
  return DDP_OK;
}

/* Issues s on the comm stream, after the work queued on `after` (none when
 * NULL: the barrier waits for collectives only). Checks come first, so a
 * rejected call has issued nothing. */
static ddp_status_t issue_on_stream(ddp_comm_t *c, ddp_comm_slot_t *s, cudaStream_t after) {
  nccl_impl_t *m = c->impl;
  if (m->aborted) return refuse(c, op_name(s->op));
  ncclDataType_t type = ncclUint8;
  size_t count = s->count;
  const int gathers_or_scatters =
      s->op == DDP_COMM_OP_ALLGATHER || s->op == DDP_COMM_OP_REDUCE_SCATTER;
  if (s->op == DDP_COMM_OP_ALLREDUCE || s->op == DDP_COMM_OP_BARRIER ||
      s->op == DDP_COMM_OP_REDUCE_SCATTER)
    DDP_CHECK(nccl_type_of(s->dtype, &type));
  if (count > 0) {
    DDP_CHECK(check_device_buffer(c, s, s->buf, gathers_or_scatters ? "receive" : "data"));
    if (s->send) DDP_CHECK(check_device_buffer(c, s, s->send, "send"));
  }
  const int i = s->index;
  if (m->timed[i]) harvest_slot(c, i); /* the slot's previous collective, if done */
  m->timed[i] = 0;

  char cause[200] = "";
  cudaError_t ce = cudaSuccess;
  if (after) {
    ce = cudaEventRecord(m->ready, after);
    if (ce == cudaSuccess) ce = cudaStreamWaitEvent(m->stream, m->ready, 0);
  }
  if (ce == cudaSuccess) ce = cudaEventRecord(m->begin[i], m->stream);
  if (ce != cudaSuccess) {
    /* Nothing reached NCCL: the collective is not issued here, but the
     * peers' are, so the communicator cannot go on. */
    snprintf(cause, sizeof cause, "CUDA error before the launch: %s", cudaGetErrorString(ce));
    return abort_comm(c, s, DDP_ERR_CUDA, cause);
  }
  ncclResult_t r = ncclSuccess;
  if (count > 0) {
    switch (s->op) {
      case DDP_COMM_OP_ALLREDUCE:
      case DDP_COMM_OP_BARRIER:
        r = ncclAllReduce(s->buf, s->buf, count, type, ncclSum, m->comm, m->stream);
        break;
      case DDP_COMM_OP_BROADCAST:
        r = ncclBroadcast(s->buf, s->buf, count, ncclUint8, s->root, m->comm, m->stream);
        break;
      case DDP_COMM_OP_ALLGATHER: {
        /* In place: our block already sits at its place in the result. */
        const void *send = s->send ? s->send : (const char *)s->buf + (size_t)c->rank * count;
        r = ncclAllGather(send, s->buf, count, ncclUint8, m->comm, m->stream);
        break;
      }
      case DDP_COMM_OP_REDUCE_SCATTER:
        /* comm.c refused aliasing, so send is always a separate buffer. */
        r = ncclReduceScatter(s->send, s->buf, count, type, ncclSum, m->comm, m->stream);
        break;
    }
  }
  if (r != ncclSuccess && r != ncclInProgress) {
    const char *last = ncclGetLastError(m->comm);
    snprintf(cause, sizeof cause, "NCCL launch error: %s%s%s%s", ncclGetErrorString(r),
             last && *last ? " (" : "", last && *last ? last : "", last && *last ? ")" : "");
    return abort_comm(c, s, DDP_ERR_NCCL, cause);
  }
  ce = cudaEventRecord(m->done[i], m->stream);
  if (ce != cudaSuccess) {
    snprintf(cause, sizeof cause, "CUDA error after the launch: %s", cudaGetErrorString(ce));
    return abort_comm(c, s, DDP_ERR_CUDA, cause);
  }
  m->issued_ns[i] = ddp_clock_ns();
  m->timed[i] = 1;
  m->seq[i] = ddp_comm_watchdog_issued(m->watchdog, i, op_name(s->op), op_bytes(c, s));
  return DDP_OK;
}

/* ---- the ops table ------------------------------------------------------------ */

static int nccl_available(const ddp_dist_t *dist, char *why, size_t why_len) {
  (void)dist;
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) return 1;
  if (why)
    snprintf(why, why_len,
             "MPI is not initialised (call ddp_dist_init first: it hands out NCCL's unique id)");
  return 0;
}

static void free_impl(nccl_impl_t *m) {
  ddp_comm_watchdog_stop(m->watchdog); /* first: its thread reads the events */
  m->watchdog = NULL;
  if (m->begin)
    for (int i = 0; i < m->n_slots; ++i)
      if (m->begin[i]) cudaEventDestroy(m->begin[i]);
  if (m->done)
    for (int i = 0; i < m->n_slots; ++i)
      if (m->done[i]) cudaEventDestroy(m->done[i]);
  if (m->ready) cudaEventDestroy(m->ready);
  if (m->stream) cudaStreamDestroy(m->stream);
  if (m->barrier_buf) cudaFree(m->barrier_buf);
  free(m->begin);
  free(m->done);
  free(m->issued_ns);
  free(m->timed);
  free(m->seq);
  pthread_mutex_destroy(&m->comm_lock);
  free(m);
}

/* ---- the watchdog's probe (on its thread) ------------------------------------ */

static void watch_thread_start(void *ctx) {
  const nccl_impl_t *m = ctx;
  cudaSetDevice(m->device); /* the events' device; a failure shows in their queries */
}

static ddp_comm_watch_state_t watch_slot_state(void *ctx, int slot, ddp_status_t *failure,
                                               char *cause, size_t len) {
  return event_state(ctx, slot, failure, cause, len);
}

static ddp_status_t watch_health(void *ctx, char *cause, size_t len) {
  return read_async(ctx, cause, len);
}

/* The verdict: the host may be anywhere (computing, or far ahead of a stuck
 * stream), so the job ends from here. The abort stops NCCL's kernels first,
 * so the GPU is released even if the job's end is slow. */
static void watch_fail(void *ctx, ddp_status_t st, const char *line) {
  (void)st;
  nccl_impl_t *m = ctx;
  /* A host wait judges its collective by the same rule and timeout, and its
   * verdict is the gentler one: the caller gets the error and ends the job
   * in order. While a host thread is waiting, let it come to its verdict
   * (it polls every 50 us at most, so this is brief; 2 s bounds it). Once
   * the host has aborted the communicator, every later call is refused with
   * the cause: there is nothing left to end from here. Without this, on an
   * H200 the watchdog won the race against a host wait's timeout and ended
   * the job with MPI_Abort. */
  for (int i = 0; i < 400 && __atomic_load_n(&m->host_waits, __ATOMIC_ACQUIRE) > 0 &&
                  !__atomic_load_n(&m->aborted, __ATOMIC_ACQUIRE);
       ++i) {
    const struct timespec ts = {.tv_sec = 0, .tv_nsec = 5000000};
    nanosleep(&ts, NULL);
  }
  if (__atomic_load_n(&m->aborted, __ATOMIC_ACQUIRE)) return;
  DDP_LOG_ERROR("%s", line);
  ncclComm_t comm = take_comm(ctx);
  if (comm) ncclCommAbort(comm);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* This rank's part before NCCL: the stream, the events, the barrier's int. */
static ddp_status_t prepare(ddp_comm_t *c, nccl_impl_t *m) {
  if (!c->be || c->be->ops->kind != DDP_DEVICE_KIND_CUDA || !c->be->impl)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "comm kind 'nccl' needs the CUDA backend in its config (ddp_comm_config_t.be), got "
             "%s",
             c->be ? c->be->ops->name : "none");
  m->be = c->be;
  m->device = c->be->device;
  m->n_slots = c->max_inflight + 1;
  DDP_CUDA_CHECK(cudaSetDevice(m->device));
  int least = 0, greatest = 0;
  DDP_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  DDP_CUDA_CHECK(cudaStreamCreateWithPriority(&m->stream, cudaStreamNonBlocking, greatest));
  DDP_CUDA_CHECK(cudaEventCreateWithFlags(&m->ready, cudaEventDisableTiming));
  m->begin = calloc((size_t)m->n_slots, sizeof *m->begin);
  m->done = calloc((size_t)m->n_slots, sizeof *m->done);
  m->issued_ns = calloc((size_t)m->n_slots, sizeof *m->issued_ns);
  m->timed = calloc((size_t)m->n_slots, 1);
  m->seq = calloc((size_t)m->n_slots, sizeof *m->seq);
  if (!m->begin || !m->done || !m->issued_ns || !m->timed || !m->seq)
    DDP_FAIL(DDP_ERR_OOM, "comm nccl: out of host memory");
  for (int i = 0; i < m->n_slots; ++i) {
    DDP_CUDA_CHECK(cudaEventCreate(&m->begin[i]));
    DDP_CUDA_CHECK(cudaEventCreate(&m->done[i]));
  }
  /* Outside the backend's allocator: it lives exactly as long as we do,
   * whatever the backend does with its cache. */
  DDP_CUDA_CHECK(cudaMalloc((void **)&m->barrier_buf, sizeof *m->barrier_buf));
  /* On our own stream: it is non-blocking, so it would not wait for a memset
   * on the legacy default stream, and the barrier all-reduce could read the
   * buffer before it was cleared. */
  DDP_CUDA_CHECK(cudaMemsetAsync(m->barrier_buf, 0, sizeof *m->barrier_buf, m->stream));
  /* Started before NCCL exists (it has nothing to look at until the first
   * collective), so a rank that cannot watch fails the ranks' agreement. */
  const ddp_comm_watchdog_config_t watch = {.label = "comm nccl",
                                            .who = m->who,
                                            .then = "aborting the NCCL communicator and the job",
                                            .n_slots = m->n_slots,
                                            .timeout_s = c->timeout_s,
                                            .probe = {.ctx = m,
                                                      .thread_start = watch_thread_start,
                                                      .slot_state = watch_slot_state,
                                                      .health = watch_health,
                                                      .fail = watch_fail}};
  return ddp_comm_watchdog_start(&watch, &m->watchdog);
}

/* Collective: the worst status of all ranks (statuses are negative). */
static ddp_status_t agree(ddp_status_t mine, ddp_status_t *worst) {
  int in = (int)mine, out = 0;
  DDP_MPI_CHECK(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  *worst = (ddp_status_t)out;
  return DDP_OK;
}

static ddp_status_t nccl_init(ddp_comm_t *c, const ddp_dist_t *dist) {
  nccl_impl_t *m = calloc(1, sizeof *m);
  if (!m) DDP_FAIL(DDP_ERR_OOM, "comm nccl: out of host memory");
  if (pthread_mutex_init(&m->comm_lock, NULL) != 0) {
    free(m);
    DDP_FAIL(DDP_ERR_INTERNAL, "comm nccl: pthread_mutex_init failed");
  }
  c->impl = m;
  snprintf(m->who, sizeof m->who, "rank %d on %s", dist->rank, dist->host);
  ncclComm_t comm = NULL;
  ddp_status_t st = prepare(c, m), all = DDP_OK, mpi = DDP_OK;
  DDP_CHECK_GOTO(agree(st, &all), mpi, agree_failed);
  if (all != DDP_OK) {
    if (st == DDP_OK)
      DDP_LOG_ERROR(
          "comm nccl: rank %d: another rank could not prepare its NCCL communicator "
          "(see its log)",
          c->rank);
    st = all;
    goto free_m;
  }
  /* Rank 0's id and status in one message, so a failed id is every rank's
   * error rather than a hang in ncclCommInitRank. */
  struct {
    int32_t status;
    ncclUniqueId id;
  } msg;
  memset(&msg, 0, sizeof msg);
  if (dist->rank == 0) msg.status = DDP_FOREIGN_STATUS(ddp_nccl_status_, ncclGetUniqueId(&msg.id));
  DDP_MPI_CHECK_GOTO(MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, MPI_COMM_WORLD), st, free_m);
  if (msg.status != DDP_OK) {
    if (dist->rank != 0)
      DDP_LOG_ERROR("comm nccl: rank %d: rank 0 could not create NCCL's unique id (see its log)",
                    c->rank);
    st = (ddp_status_t)msg.status;
    goto free_m;
  }
  st = DDP_FOREIGN_STATUS(ddp_nccl_status_,
                          ncclCommInitRank(&comm, dist->world, msg.id, dist->rank));
  if (st == DDP_OK) { /* published under the lock: the watchdog's thread reads it */
    pthread_mutex_lock(&m->comm_lock);
    m->comm = comm;
    pthread_mutex_unlock(&m->comm_lock);
  }
  DDP_CHECK_GOTO(agree(st, &all), mpi, agree_failed);
  if (all != DDP_OK) {
    if (st == DDP_OK)
      DDP_LOG_ERROR("comm nccl: rank %d: another rank's ncclCommInitRank failed (see its log)",
                    c->rank);
    st = all;
    goto abort_m;
  }
  DDP_LOG_DEBUG("comm nccl: rank %d of %d on cuda:%d, timeout %g s (host waits and watchdog)",
                c->rank, c->world, m->device, c->timeout_s);
  return DDP_OK;

agree_failed:
  st = mpi;
abort_m:
  comm = take_comm(m);
  if (comm) ncclCommAbort(comm);
free_m:
  free_impl(m);
  c->impl = NULL;
  return st;
}

static void nccl_shutdown(ddp_comm_t *c) {
  nccl_impl_t *m = c->impl;
  if (!m) return;
  /* The host waits for the rest, under the same timeout. */
  ddp_comm_watchdog_stop(m->watchdog);
  m->watchdog = NULL;
  if (!m->aborted) {
    /* Peers are inside the collectives still queued: finish them (within
     * the timeout) before NCCL's resources go. The barrier's slot is free
     * now, so its event marks the end of the queue. */
    ddp_comm_slot_t *s = &c->slots[c->max_inflight];
    s->op = DDP_COMM_OP_BARRIER;
    s->done = 0;
    s->status = DDP_OK;
    s->count = 0;
    s->buf = NULL;
    s->send = NULL;
    if (cudaEventRecord(m->done[s->index], m->stream) == cudaSuccess) {
      m->issued_ns[s->index] = ddp_clock_ns();
      m->timed[s->index] = 0;
      wait_slot(c, s); /* aborts on an error or the timeout */
    } else {
      abort_comm(c, s, DDP_ERR_CUDA, "CUDA error at destroy");
    }
  }
  ncclComm_t comm = take_comm(m);
  if (comm) {
    const ncclResult_t r = ncclCommDestroy(comm);
    if (r != ncclSuccess)
      DDP_LOG_WARN("comm nccl: rank %d: ncclCommDestroy: %s", c->rank, ncclGetErrorString(r));
  }
  /* The abort's kernels and the device work it waits for end first; one
   * that never returns is left (the device is wedged), and so is the comm
   * stream, which would wait as long. */
  const double limit = c->timeout_s + 30.0;
  if (abort_finished(m, limit)) {
    cudaStreamSynchronize(m->stream); /* an aborted NCCL's kernels have exited */
  } else {
    DDP_LOG_WARN("comm nccl: %s: NCCL's abort has not returned after %g s; leaving it", m->who,
                 limit);
    m->barrier_buf = NULL; /* cudaFree would wait for the device as well */
  }
  free_impl(m);
  c->impl = NULL;
}

static ddp_status_t nccl_start(ddp_comm_t *c, ddp_comm_slot_t *s, void *stream) {
  nccl_impl_t *m = c->impl;
  return issue_on_stream(c, s, ddp_cuda_stream(m->be, (ddp_stream_t)stream));
}

static ddp_status_t nccl_wait(ddp_comm_t *c, ddp_comm_slot_t *s) {
  return wait_slot(c, s);
}

static ddp_status_t nccl_test(ddp_comm_t *c, ddp_comm_slot_t *s, int *done) {
  return poll_slot(c, s, done);
}

static ddp_status_t nccl_stream_wait(ddp_comm_t *c, ddp_comm_slot_t *s, void *stream) {
  nccl_impl_t *m = c->impl;
  if (s->done && s->status != DDP_OK) return s->status; /* test() saw it fail */
  if (m->aborted) return refuse(c, op_name(s->op));
  DDP_CHECK(poll_async(c, s));
  const cudaError_t e =
      cudaStreamWaitEvent(ddp_cuda_stream(m->be, (ddp_stream_t)stream), m->done[s->index], 0);
  if (e != cudaSuccess) {
    char cause[160];
    snprintf(cause, sizeof cause, "CUDA error in stream_wait: %s", cudaGetErrorString(e));
    return abort_comm(c, s, DDP_ERR_CUDA, cause);
  }
  return DDP_OK;
}

/* Between layers: an asynchronous error is found here, so the next call
 * fails at once instead of the step going on behind a broken collective. */
static void nccl_progress(ddp_comm_t *c) {
  nccl_impl_t *m = c->impl;
  if (!m->aborted) poll_async(c, NULL);
}

static ddp_status_t nccl_barrier(ddp_comm_t *c) {
  nccl_impl_t *m = c->impl;
  ddp_comm_slot_t *s = &c->slots[c->max_inflight];
  s->op = DDP_COMM_OP_BARRIER;
  s->buf = m->barrier_buf;
  s->send = NULL;
  s->count = 1;
  s->dtype = DDP_DTYPE_I32;
  s->root = 0;
  s->done = 0;
  s->status = DDP_OK;
  DDP_CHECK(issue_on_stream(c, s, NULL));
  return wait_slot(c, s);
}

const ddp_comm_ops_t ddp_comm_nccl_ops = {
    .name = "nccl",
    .mode = "stream",
    .caps = DDP_COMM_DECL_NCCL,
    .available = nccl_available,
    .init = nccl_init,
    .shutdown = nccl_shutdown,
    .start = nccl_start,
    .wait = nccl_wait,
    .test = nccl_test,
    .stream_wait = nccl_stream_wait,
    .progress = nccl_progress,
    .barrier = nccl_barrier,
    .harvest = nccl_harvest,
};
#endif
