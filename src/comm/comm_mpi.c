/* The MPI communicator for host buffers, with two ways to make progress.
 *
 * MPI moves data only while some thread is inside an MPI call, so an
 * asynchronous collective needs someone to call in while the caller computes:
 *   - "thread": a progress thread takes queued collectives in FIFO order and
 *     runs the *blocking* MPI call for each; wait() sleeps on a condition
 *     variable. The barrier goes through the same queue, so every collective
 *     on our communicator is issued by that one thread, in issue order.
 *     Needs MPI_THREAD_MULTIPLE (the caller may use MPI_COMM_WORLD at the
 *     same time, e.g. ddp_dist_agree_u64).
 *   - "test": MPI_Iallreduce/Ibcast/Iallgather/Ireduce_scatter_block,
 *     advanced by MPI_Testsome from ddp_comm_progress() and test(), and
 *     finished by MPI_Wait. No thread; data moves only when the caller
 *     calls in.
 * Both run on a duplicate of MPI_COMM_WORLD, so these collectives can never
 * match someone else's on the world communicator.
 *
 * bf16 and fp16 are summed by user-defined MPI operations that widen a pair
 * to fp32, add and round back: no scratch buffer and no allocation per call,
 * at the price of rounding every partial sum to 16 bits (gradients are
 * reduced in fp32; the 16-bit path is for small, exact-enough payloads). The
 * operations are commutative, and Open MPI's allreduce algorithms hand every
 * rank the same final bits, so replicas stay identical. */
#include <config.h>

#include <stdio.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h> /* MPIX_Query_cuda_support */
#endif

#include "comm/comm_impl.h"

int ddp_comm_mpi_cuda_aware(void) {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support();
#else
  return 0; /* built without it, or an MPI that cannot say: assume host memory only */
#endif
}

/* The MPI entries' run-time capability: CUDA-awareness is the library's, not
 * this build's, so it is asked each time selection reads the registry. */
unsigned ddp_comm_mpi_reads_at_run_time(void) {
  return ddp_comm_mpi_cuda_aware() ? DDP_COMM_READS(DDP_DEVICE_KIND_CUDA) : 0u;
}

/* The default progress mode is "test", from bench/comm_overlap.sh on the
 * 2-core CI VM (Open MPI 4.1.4; 2 ranks, one sgemm thread each; 20 chunks of
 * 5 ms, each bucket's all-reduce issued once it is ready, progress() between
 * chunks). With 1 MB buckets (20 MB in 20) "thread" exposed several times its
 * own comm time in every run (e.g. 49 ms of combined minus compute for 7 ms
 * of comm alone, where "test" exposed 14 ms for 16 ms), and "test" gave the
 * shorter or an equal step in every run. With 4 MB buckets (24 MB in 6) the
 * two split the runs. Why: the blocking collectives are the faster transfer,
 * but Open MPI busy-polls inside them, and when every core runs a rank's math
 * (the CPU trainer's layout) the polling thread takes its time from the math,
 * while "test" moves data only inside progress() and the final waits. With
 * OMPI_MCA_mpi_yield_when_idle=1 (polling yields the core) "thread" came level;
 * with cores to spare it should win (not measured). Other jobs shared the VM
 * during every run, so single figures varied by up to 2x; the ordering held. */
const char *ddp_comm_default_progress(void) {
  return "test";
}

#if DDP_HAVE_MPI
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>

#include "ddptrain/check.h"
#include "core/foreign_check.h"

typedef struct mpi_impl {
  MPI_Comm comm;
  MPI_Op sum_bf16, sum_f16;
  /* "test": one request per handle slot (MPI_REQUEST_NULL when idle), laid
   * out as one array so a single MPI_Testsome scans them all. */
  MPI_Request *reqs;
  int *ready; /* MPI_Testsome's output indices */
  int n_active;
  /* "thread": the FIFO of slot indices, and who sleeps on what. */
  pthread_mutex_t lock;
  pthread_cond_t work; /* queue not empty, or stop */
  pthread_cond_t done; /* some slot finished */
  int *queue;
  int q_head, q_len, q_cap;
  int stop;
  pthread_t thread;
} mpi_impl_t;

static void sum_bf16(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; ++i)
    b[i] = ddp_f32_to_bf16(ddp_bf16_to_f32(a[i]) + ddp_bf16_to_f32(b[i]));
}

static void sum_f16(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; ++i) b[i] = ddp_f32_to_f16(ddp_f16_to_f32(a[i]) + ddp_f16_to_f32(b[i]));
}

/* The MPI type and sum operation of a dtype. */
static ddp_status_t mpi_type_of(const mpi_impl_t *m, ddp_dtype_t dtype, MPI_Datatype *type,
                                MPI_Op *op) {
  switch (dtype) {
    case DDP_DTYPE_F32:
      *type = MPI_FLOAT;
      *op = MPI_SUM;
      return DDP_OK;
    case DDP_DTYPE_I32:
      *type = MPI_INT32_T;
      *op = MPI_SUM;
      return DDP_OK;
    case DDP_DTYPE_BF16:
      *type = MPI_UINT16_T;
      *op = m->sum_bf16;
      return DDP_OK;
    case DDP_DTYPE_F16:
      *type = MPI_UINT16_T;
      *op = m->sum_f16;
      return DDP_OK;
    case DDP_DTYPE_COUNT_:
      break;
  }
  DDP_FAIL(DDP_ERR_UNSUPPORTED, "comm mpi: no MPI sum for dtype %s", ddp_dtype_name(dtype));
}

/* Collectives that add elements of s->dtype (the others move bytes). */
static int summed(const ddp_comm_slot_t *s) {
  return s->op == DDP_COMM_OP_ALLREDUCE || s->op == DDP_COMM_OP_REDUCE_SCATTER;
}

/* MPI counts are int; comm.c has checked everything else already. */
static ddp_status_t check_count(const ddp_comm_slot_t *s) {
  if (s->count > INT_MAX)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "comm mpi: %zu %s in one collective exceeds MPI's int count",
             s->count, summed(s) ? "elements" : "bytes");
  return DDP_OK;
}

static int mpi_available(const ddp_dist_t *dist, char *why, size_t why_len) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) return 1;
  if (why) snprintf(why, why_len, "MPI is not initialised (call ddp_dist_init first)");
  (void)dist;
  return 0;
}

static int thread_available(const ddp_dist_t *dist, char *why, size_t why_len) {
  if (!mpi_available(dist, why, why_len)) return 0;
  if (dist->thread_level >= MPI_THREAD_MULTIPLE) return 1;
  if (why)
    snprintf(why, why_len,
             "a progress thread needs MPI_THREAD_MULTIPLE, MPI provides thread level %d",
             dist->thread_level);
  return 0;
}

/* The parts both modes share: a private communicator and the 16-bit sums. */
static ddp_status_t common_init(ddp_comm_t *c, const ddp_dist_t *dist, mpi_impl_t **out) {
  ddp_status_t st = DDP_OK;
  mpi_impl_t *m = calloc(1, sizeof *m);
  if (!m) DDP_FAIL(DDP_ERR_OOM, "comm mpi: out of host memory");
  m->comm = MPI_COMM_NULL;
  m->sum_bf16 = m->sum_f16 = MPI_OP_NULL;
  DDP_MPI_CHECK_GOTO(MPI_Comm_dup(MPI_COMM_WORLD, &m->comm), st, free_impl);
  DDP_MPI_CHECK_GOTO(MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN), st, free_comm);
  int rank = 0, world = 0;
  DDP_MPI_CHECK_GOTO(MPI_Comm_rank(m->comm, &rank), st, free_comm);
  DDP_MPI_CHECK_GOTO(MPI_Comm_size(m->comm, &world), st, free_comm);
  if (rank != dist->rank || world != dist->world)
    DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, free_comm,
                  "comm mpi: MPI_COMM_WORLD is rank %d of %d, dist says %d of %d", rank, world,
                  dist->rank, dist->world);
  DDP_MPI_CHECK_GOTO(MPI_Op_create(sum_bf16, 1, &m->sum_bf16), st, free_comm);
  DDP_MPI_CHECK_GOTO(MPI_Op_create(sum_f16, 1, &m->sum_f16), st, free_ops);
  c->impl = m;
  *out = m;
  return DDP_OK;

free_ops:
  if (m->sum_bf16 != MPI_OP_NULL) MPI_Op_free(&m->sum_bf16);
free_comm:
  MPI_Comm_free(&m->comm);
free_impl:
  free(m);
  return st;
}

static void common_shutdown(ddp_comm_t *c) {
  mpi_impl_t *m = c->impl;
  MPI_Op_free(&m->sum_f16);
  MPI_Op_free(&m->sum_bf16);
  MPI_Comm_free(&m->comm);
  free(m->reqs);
  free(m->ready);
  free(m->queue);
  free(m);
  c->impl = NULL;
}

/* ---- "thread" ------------------------------------------------------------ */

/* Runs one collective to completion with the blocking call. */
static ddp_status_t run_blocking(const mpi_impl_t *m, const ddp_comm_slot_t *s) {
  const int n = (int)s->count;
  switch (s->op) {
    case DDP_COMM_OP_ALLREDUCE: {
      MPI_Datatype type;
      MPI_Op op;
      DDP_CHECK(mpi_type_of(m, s->dtype, &type, &op));
      DDP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, s->buf, n, type, op, m->comm));
      return DDP_OK;
    }
    case DDP_COMM_OP_BROADCAST:
      DDP_MPI_CHECK(MPI_Bcast(s->buf, n, MPI_BYTE, s->root, m->comm));
      return DDP_OK;
    case DDP_COMM_OP_ALLGATHER:
      if (s->send)
        DDP_MPI_CHECK(MPI_Allgather(s->send, n, MPI_BYTE, s->buf, n, MPI_BYTE, m->comm));
      else
        DDP_MPI_CHECK(
            MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, s->buf, n, MPI_BYTE, m->comm));
      return DDP_OK;
    case DDP_COMM_OP_BARRIER:
      DDP_MPI_CHECK(MPI_Barrier(m->comm));
      return DDP_OK;
    case DDP_COMM_OP_REDUCE_SCATTER: {
      MPI_Datatype type;
      MPI_Op op;
      DDP_CHECK(mpi_type_of(m, s->dtype, &type, &op));
      DDP_MPI_CHECK(MPI_Reduce_scatter_block(s->send, s->buf, n, type, op, m->comm));
      return DDP_OK;
    }
  }
  return DDP_ERR_INTERNAL;
}

static void *progress_main(void *arg) {
  ddp_comm_t *c = arg;
  mpi_impl_t *m = c->impl;
  pthread_mutex_lock(&m->lock);
  for (;;) {
    while (m->q_len == 0 && !m->stop) pthread_cond_wait(&m->work, &m->lock);
    /* Stop only once the queue is drained: other ranks are (or will be)
     * inside these collectives and cannot be left waiting. */
    if (m->q_len == 0) break;
    ddp_comm_slot_t *s = &c->slots[m->queue[m->q_head]];
    m->q_head = (m->q_head + 1) % m->q_cap;
    --m->q_len;
    pthread_mutex_unlock(&m->lock);
    const int64_t t0 = ddp_clock_ns();
    const ddp_status_t st = run_blocking(m, s);
    ddp_comm_add_time(c, ddp_clock_ns() - t0);
    pthread_mutex_lock(&m->lock);
    s->status = st;
    s->done = 1;
    pthread_cond_broadcast(&m->done);
  }
  pthread_mutex_unlock(&m->lock);
  return NULL;
}

static ddp_status_t thread_init(ddp_comm_t *c, const ddp_dist_t *dist) {
  mpi_impl_t *m = NULL;
  DDP_CHECK(common_init(c, dist, &m));
  ddp_status_t st = DDP_OK;
  /* Every handle slot plus the barrier slot can be queued at once. */
  m->q_cap = c->max_inflight + 1;
  m->queue = calloc((size_t)m->q_cap, sizeof *m->queue);
  if (!m->queue) DDP_FAIL_GOTO(st, DDP_ERR_OOM, free_common, "comm mpi: out of host memory");
  if (pthread_mutex_init(&m->lock, NULL) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, free_common, "comm mpi: pthread_mutex_init failed");
  if (pthread_cond_init(&m->work, NULL) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, free_lock, "comm mpi: pthread_cond_init failed");
  if (pthread_cond_init(&m->done, NULL) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, free_work, "comm mpi: pthread_cond_init failed");
  if (pthread_create(&m->thread, NULL, progress_main, c) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, free_done, "comm mpi: cannot start the progress thread");
  return DDP_OK;

free_done:
  pthread_cond_destroy(&m->done);
free_work:
  pthread_cond_destroy(&m->work);
free_lock:
  pthread_mutex_destroy(&m->lock);
free_common:
  common_shutdown(c);
  return st;
}

static void thread_shutdown(ddp_comm_t *c) {
  mpi_impl_t *m = c->impl;
  pthread_mutex_lock(&m->lock);
  m->stop = 1;
  pthread_cond_signal(&m->work);
  pthread_mutex_unlock(&m->lock);
  pthread_join(m->thread, NULL);
  pthread_cond_destroy(&m->done);
  pthread_cond_destroy(&m->work);
  pthread_mutex_destroy(&m->lock);
  common_shutdown(c);
}

static ddp_status_t thread_start(ddp_comm_t *c, ddp_comm_slot_t *s, void *stream) {
  (void)stream;
  mpi_impl_t *m = c->impl;
  DDP_CHECK(check_count(s));
  if (summed(s)) {
    MPI_Datatype type;
    MPI_Op op;
    DDP_CHECK(mpi_type_of(m, s->dtype, &type, &op));
  }
  pthread_mutex_lock(&m->lock);
  m->queue[(m->q_head + m->q_len) % m->q_cap] = s->index;
  ++m->q_len;
  pthread_cond_signal(&m->work);
  pthread_mutex_unlock(&m->lock);
  return DDP_OK;
}

static ddp_status_t thread_wait(ddp_comm_t *c, ddp_comm_slot_t *s) {
  mpi_impl_t *m = c->impl;
  pthread_mutex_lock(&m->lock);
  while (!s->done) pthread_cond_wait(&m->done, &m->lock);
  const ddp_status_t st = s->status;
  pthread_mutex_unlock(&m->lock);
  return st;
}

static ddp_status_t thread_test(ddp_comm_t *c, ddp_comm_slot_t *s, int *done) {
  mpi_impl_t *m = c->impl;
  pthread_mutex_lock(&m->lock);
  *done = s->done;
  const ddp_status_t st = s->done ? s->status : DDP_OK;
  pthread_mutex_unlock(&m->lock);
  return st;
}

static ddp_status_t thread_stream_wait(ddp_comm_t *c, ddp_comm_slot_t *s, void *stream) {
  (void)stream;
  return thread_wait(c, s);
}

static void thread_progress(ddp_comm_t *c) {
  (void)c; /* the thread needs no help */
}

static ddp_status_t thread_barrier(ddp_comm_t *c) {
  /* Queued like the rest, so it is ordered after every collective issued
   * before it; the slot past the handle pool is reserved for it. */
  ddp_comm_slot_t *s = &c->slots[c->max_inflight];
  s->op = DDP_COMM_OP_BARRIER;
  s->done = 0;
  s->status = DDP_OK;
  DDP_CHECK(thread_start(c, s, NULL));
  return thread_wait(c, s);
}

/* ---- "test" -------------------------------------------------------------- */

static ddp_status_t test_init(ddp_comm_t *c, const ddp_dist_t *dist) {
  mpi_impl_t *m = NULL;
  DDP_CHECK(common_init(c, dist, &m));
  m->reqs = malloc((size_t)c->max_inflight * sizeof *m->reqs);
  m->ready = malloc((size_t)c->max_inflight * sizeof *m->ready);
  if (!m->reqs || !m->ready) {
    common_shutdown(c);
    DDP_FAIL(DDP_ERR_OOM, "comm mpi: out of host memory");
  }
  for (int i = 0; i < c->max_inflight; ++i) m->reqs[i] = MPI_REQUEST_NULL;
  return DDP_OK;
}

static void test_shutdown(ddp_comm_t *c) {
  mpi_impl_t *m = c->impl;
  /* Collective requests cannot be cancelled: finish them. */
  for (int i = 0; i < c->max_inflight; ++i)
    if (m->reqs[i] != MPI_REQUEST_NULL) MPI_Wait(&m->reqs[i], MPI_STATUS_IGNORE);
  common_shutdown(c);
}

static ddp_status_t test_start(ddp_comm_t *c, ddp_comm_slot_t *s, void *stream) {
  (void)stream;
  mpi_impl_t *m = c->impl;
  DDP_CHECK(check_count(s));
  const int n = (int)s->count;
  MPI_Request *req = &m->reqs[s->index];
  const int64_t t0 = ddp_clock_ns();
  ddp_status_t st = DDP_OK;
  switch (s->op) {
    case DDP_COMM_OP_ALLREDUCE: {
      MPI_Datatype type;
      MPI_Op op;
      DDP_CHECK(mpi_type_of(m, s->dtype, &type, &op));
      st = DDP_FOREIGN_STATUS(ddp_mpi_status_,
                              MPI_Iallreduce(MPI_IN_PLACE, s->buf, n, type, op, m->comm, req));
      break;
    }
    case DDP_COMM_OP_BROADCAST:
      st = DDP_FOREIGN_STATUS(ddp_mpi_status_,
                              MPI_Ibcast(s->buf, n, MPI_BYTE, s->root, m->comm, req));
      break;
    case DDP_COMM_OP_ALLGATHER:
      if (s->send)
        st = DDP_FOREIGN_STATUS(ddp_mpi_status_, MPI_Iallgather(s->send, n, MPI_BYTE, s->buf, n,
                                                                MPI_BYTE, m->comm, req));
      else
        st = DDP_FOREIGN_STATUS(ddp_mpi_status_, MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL,
                                                                s->buf, n, MPI_BYTE, m->comm, req));
      break;
    case DDP_COMM_OP_REDUCE_SCATTER: {
      MPI_Datatype type;
      MPI_Op op;
      DDP_CHECK(mpi_type_of(m, s->dtype, &type, &op));
      st = DDP_FOREIGN_STATUS(
          ddp_mpi_status_, MPI_Ireduce_scatter_block(s->send, s->buf, n, type, op, m->comm, req));
      break;
    }
    case DDP_COMM_OP_BARRIER:
      st = DDP_ERR_INTERNAL;
      break; /* blocking only */
  }
  ddp_comm_add_time(c, ddp_clock_ns() - t0);
  if (st == DDP_OK) ++m->n_active;
  return st;
}

/* Marks slot i complete with the outcome of its request. */
static void test_complete(ddp_comm_t *c, int i, ddp_status_t st) {
  mpi_impl_t *m = c->impl;
  c->slots[i].done = 1;
  c->slots[i].status = st;
  m->reqs[i] = MPI_REQUEST_NULL;
  --m->n_active;
}

static void test_progress(ddp_comm_t *c) {
  mpi_impl_t *m = c->impl;
  if (m->n_active == 0) return;
  const int64_t t0 = ddp_clock_ns();
  int n_ready = 0;
  const ddp_status_t st = DDP_FOREIGN_STATUS(
      ddp_mpi_status_,
      MPI_Testsome(c->max_inflight, m->reqs, &n_ready, m->ready, MPI_STATUSES_IGNORE));
  if (st == DDP_OK) {
    for (int k = 0; n_ready != MPI_UNDEFINED && k < n_ready; ++k)
      test_complete(c, m->ready[k], DDP_OK);
  } else {
    /* Without statuses MPI cannot say which request failed; requests it
     * freed all the same fail, the others are reported by their own
     * test()/wait(). */
    for (int i = 0; i < c->max_inflight; ++i)
      if (c->slots[i].in_use && !c->slots[i].done && m->reqs[i] == MPI_REQUEST_NULL)
        test_complete(c, i, st);
  }
  ddp_comm_add_time(c, ddp_clock_ns() - t0);
}

static ddp_status_t test_test(ddp_comm_t *c, ddp_comm_slot_t *s, int *done) {
  mpi_impl_t *m = c->impl;
  if (!s->done) {
    const int64_t t0 = ddp_clock_ns();
    int flag = 0;
    const ddp_status_t st =
        DDP_FOREIGN_STATUS(ddp_mpi_status_, MPI_Test(&m->reqs[s->index], &flag, MPI_STATUS_IGNORE));
    ddp_comm_add_time(c, ddp_clock_ns() - t0);
    if (st != DDP_OK || flag) test_complete(c, s->index, st);
  }
  *done = s->done;
  return s->done ? s->status : DDP_OK;
}

static ddp_status_t test_wait(ddp_comm_t *c, ddp_comm_slot_t *s) {
  mpi_impl_t *m = c->impl;
  if (!s->done) {
    const int64_t t0 = ddp_clock_ns();
    const ddp_status_t st =
        DDP_FOREIGN_STATUS(ddp_mpi_status_, MPI_Wait(&m->reqs[s->index], MPI_STATUS_IGNORE));
    ddp_comm_add_time(c, ddp_clock_ns() - t0);
    test_complete(c, s->index, st);
  }
  return s->status;
}

static ddp_status_t test_stream_wait(ddp_comm_t *c, ddp_comm_slot_t *s, void *stream) {
  (void)stream;
  return test_wait(c, s);
}

static ddp_status_t test_barrier(ddp_comm_t *c) {
  mpi_impl_t *m = c->impl;
  const int64_t t0 = ddp_clock_ns();
  const ddp_status_t st = DDP_FOREIGN_STATUS(ddp_mpi_status_, MPI_Barrier(m->comm));
  ddp_comm_add_time(c, ddp_clock_ns() - t0);
  return st;
}

const ddp_comm_ops_t ddp_comm_mpi_thread_ops = {
    .name = "mpi",
    .mode = "thread",
    .caps = DDP_COMM_DECL_MPI,
    .available = thread_available,
    .init = thread_init,
    .shutdown = thread_shutdown,
    .start = thread_start,
    .wait = thread_wait,
    .test = thread_test,
    .stream_wait = thread_stream_wait,
    .progress = thread_progress,
    .barrier = thread_barrier,
};

const ddp_comm_ops_t ddp_comm_mpi_test_ops = {
    .name = "mpi",
    .mode = "test",
    .caps = DDP_COMM_DECL_MPI,
    .available = mpi_available,
    .init = test_init,
    .shutdown = test_shutdown,
    .start = test_start,
    .wait = test_wait,
    .test = test_test,
    .stream_wait = test_stream_wait,
    .progress = test_progress,
    .barrier = test_barrier,
};
#endif
