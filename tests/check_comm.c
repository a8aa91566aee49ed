/* Check suite for the communicators (src/comm/).
 *
 * The same program runs as one process (world 1: "auto" is "self", and the
 * MPI communicator runs on an MPI singleton) and under mpirun -np 2 and 4
 * (tests/test_comm_mpi.sh). Loop tests run once per configuration: "auto",
 * then "mpi" with each progress mode. Every rank runs every test; results are
 * asserted only after a test's last collective where possible, so a failure
 * on one rank does not leave the others inside a collective it skipped. The
 * exit status is nonzero on every rank when any rank failed.
 *
 * Check runs without fork (CK_NOFORK): a process must not fork after
 * MPI_Init. Values are small integers and halves, exactly representable in
 * every type used, so sums compare exactly. */
#include <check.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddptrain/dtype.h"
#include "ddptrain/log.h"
#include "check_util.h"
#include "comm/comm.h"
#include "comm/comm_watchdog.h"
#include "runtime/dist.h"

/* Under LeakSanitizer, what MPI_Init and MPI_Finalize allocate and never
 * free is not this suite's leak. tests/lsan.supp matches such memory by
 * library name, which needs the whole allocation stack, but Open MPI's
 * libraries have no frame pointers, so the fast unwinder stops at "<unknown
 * module>"; the slow one makes this suite minutes long. Both run with leak
 * tracking off instead; everything in between is still checked. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define LSAN_DISABLE() __lsan_disable()
#define LSAN_ENABLE() __lsan_enable()
#else
#define LSAN_DISABLE() ((void)0)
#define LSAN_ENABLE() ((void)0)
#endif

static ddp_dist_t g_dist;
static ddp_comm_t *g_comm; /* the test's communicator; teardown frees it after a failure */

#define N_CONFIGS 3
static const ddp_comm_config_t k_configs[N_CONFIGS] = {
    {.kind = "auto"},
    {.kind = "mpi", .progress = "thread"},
    {.kind = "mpi", .progress = "test"},
};

static int have_mpi(void) {
  return strcmp(ddp_dist_library(), "none") != 0;
}

/* Opens configuration i (with a pool of max_inflight, 0 = default) into
 * g_comm; NULL when this build has no MPI and i needs it. */
static ddp_comm_t *open_comm(int i, int max_inflight) {
  ddp_comm_config_t cfg = k_configs[i];
  cfg.max_inflight = max_inflight;
  if (cfg.progress && !have_mpi()) return NULL;
  ck_assert_ptr_null(g_comm);
  ck_assert_int_eq(ddp_comm_create(&g_dist, &cfg, &g_comm), DDP_OK);
  ck_assert_ptr_nonnull(g_comm);
  return g_comm;
}

static void close_comm(void) {
  ddp_comm_destroy(g_comm);
  g_comm = NULL;
}

static void teardown(void) {
  if (ddp_test_log_file) free(ddp_test_log_stop());
  close_comm();
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* 1 + 2 + ... + world: the sum of (rank + 1) over ranks. */
static int tri(void) {
  return g_dist.world * (g_dist.world + 1) / 2;
}

/* Element i of rank r's f32 input: a half-integer in [-3, 3] times (r + 1). */
static float f32_value(size_t i, int r) {
  return (float)((int)(i % 13) - 6) * 0.5f * (float)(r + 1);
}

START_TEST(test_comm_create_reports_kind_rank_world) {
  ddp_comm_t *c = open_comm(_i, 0);
  if (!c) return;
  ck_assert_int_eq(ddp_comm_rank(c), g_dist.rank);
  ck_assert_int_eq(ddp_comm_world(c), g_dist.world);
  const int self = _i == 0 && g_dist.world == 1;
  ck_assert_str_eq(ddp_comm_name(c), self ? "self" : "mpi");
  const char *mode = self ? "none" : _i == 0 ? ddp_comm_default_progress() : k_configs[_i].progress;
  ck_assert_str_eq(ddp_comm_progress_mode(c), mode);
  /* self moves nothing between ranks, so GPU memory is fine; mpi only when
   * the library says it is CUDA-aware (Debian's Open MPI is not) */
  ck_assert_int_eq(ddp_comm_reads_device_memory(c), self ? 1 : ddp_comm_mpi_cuda_aware());
  ck_assert_int_eq(ddp_comm_reads_device_memory(NULL), 0);
  close_comm();
}
END_TEST

START_TEST(test_comm_allreduce_f32_exact_sums_odd_and_zero_counts) {
  ddp_comm_t *c = open_comm(_i, 0);
  if (!c) return;
  static const size_t counts[] = {0, 1, 2, 3, 17, 1001, 65537, 262147};
  enum { N = sizeof counts / sizeof counts[0] };
  float *bufs[N];
  ddp_comm_handle_t h[N];
  for (int k = 0; k < N; ++k) {
    bufs[k] = counts[k] ? malloc(counts[k] * sizeof(float)) : NULL;
    for (size_t i = 0; i < counts[k]; ++i) bufs[k][i] = f32_value(i + (size_t)k, g_dist.rank);
  }
  /* All in flight at once, the count-0 one with a NULL buffer. */
  ddp_status_t st[N];
  for (int k = 0; k < N; ++k)
    st[k] = ddp_comm_allreduce_sum(c, bufs[k], counts[k], DDP_DTYPE_F32, NULL, &h[k]);
  ddp_status_t wst[N];
  for (int k = 0; k < N; ++k) wst[k] = st[k] == DDP_OK ? ddp_comm_wait(c, h[k]) : st[k];
  /* And one without a handle: it completes before returning. */
  float one = (float)(g_dist.rank + 1);
  const ddp_status_t blocking = ddp_comm_allreduce_sum(c, &one, 1, DDP_DTYPE_F32, NULL, NULL);
  close_comm();

  for (int k = 0; k < N; ++k) {
    ck_assert_int_eq(st[k], DDP_OK);
    ck_assert_int_eq(wst[k], DDP_OK);
    size_t bad = 0;
    for (size_t i = 0; i < counts[k]; ++i)
      if (bufs[k][i] != f32_value(i + (size_t)k, 0) * (float)tri()) ++bad;
    ck_assert_msg(bad == 0, "count %zu: %zu wrong sums (first: %g, want %g)", counts[k], bad,
                  counts[k] ? (double)bufs[k][0] : 0.0,
                  (double)(f32_value((size_t)k, 0) * (float)tri()));
    free(bufs[k]);
  }
  ck_assert_int_eq(blocking, DDP_OK);
  ck_assert_float_eq(one, (float)tri());
}
END_TEST

/* The other dtypes: int32 (exact by nature) and the two 16-bit formats
 * through their custom sums, with values whose partial sums stay exact. */
START_TEST(test_comm_allreduce_i32_bf16_f16) {
  ddp_comm_t *c = open_comm(_i, 0);
  if (!c) return;
  enum { N = 999 };
  int32_t *a = malloc(N * sizeof *a);
  uint16_t *b = malloc(N * sizeof *b), *f = malloc(N * sizeof *f);
  const int r = g_dist.rank;
  for (int i = 0; i < N; ++i) {
    a[i] = (r + 1) * (i - 500) * 1000003;
    b[i] = ddp_f32_to_bf16((float)((r + 1) * (i % 5 - 2)));       /* |sum| <= 20 */
    f[i] = ddp_f32_to_f16(0.5f * (float)((r + 1) * (i % 9 - 4))); /* |sum| <= 20 */
  }
  ddp_comm_handle_t h[3];
  ddp_status_t st[3];
  st[0] = ddp_comm_allreduce_sum(c, a, N, DDP_DTYPE_I32, NULL, &h[0]);
  st[1] = ddp_comm_allreduce_sum(c, b, N, DDP_DTYPE_BF16, NULL, &h[1]);
  st[2] = ddp_comm_allreduce_sum(c, f, N, DDP_DTYPE_F16, NULL, &h[2]);
  ddp_status_t wst[3];
  for (int k = 0; k < 3; ++k) wst[k] = st[k] == DDP_OK ? ddp_comm_wait(c, h[k]) : st[k];
  close_comm();
  for (int k = 0; k < 3; ++k) {
    ck_assert_int_eq(st[k], DDP_OK);
    ck_assert_int_eq(wst[k], DDP_OK);
  }
  for (int i = 0; i < N; ++i) {
    ck_assert_int_eq(a[i], tri() * (i - 500) * 1000003);
    ck_assert_float_eq(ddp_bf16_to_f32(b[i]), (float)(tri() * (i % 5 - 2)));
    ck_assert_float_eq(ddp_f16_to_f32(f[i]), 0.5f * (float)(tri() * (i % 9 - 4)));
  }
  free(a);
  free(b);
  free(f);
}
END_TEST

START_TEST(test_comm_many_in_flight_waited_out_of_order) {
  enum { N = 16 };
  ddp_comm_t *c = open_comm(_i, N);
  if (!c) return;
  float *bufs[N];
  ddp_comm_handle_t h[N];
  ddp_status_t st[N], wst[N];
  for (int round = 0; round < 2; ++round) { /* the second round reuses every slot */
    for (int k = 0; k < N; ++k) {
      const size_t n = (size_t)k * 37 + 1;
      bufs[k] = malloc(n * sizeof(float));
      for (size_t i = 0; i < n; ++i) bufs[k][i] = (float)((k + round + 1) * (g_dist.rank + 1));
      st[k] = ddp_comm_allreduce_sum(c, bufs[k], n, DDP_DTYPE_F32, NULL, &h[k]);
    }
    /* 7 is coprime with 16: (7k) mod 16 visits every handle, out of order. */
    for (int k = 0; k < N; ++k) {
      const int j = (7 * k) % N;
      wst[j] = st[j] == DDP_OK ? ddp_comm_wait(c, h[j]) : st[j];
    }
    for (int k = 0; k < N; ++k) {
      ck_assert_int_eq(st[k], DDP_OK);
      ck_assert_int_eq(wst[k], DDP_OK);
      for (int j = 0; j < k; ++j) ck_assert_int_ne(h[j], h[k]);
      const size_t n = (size_t)k * 37 + 1;
      for (size_t i = 0; i < n; ++i)
        ck_assert_float_eq(bufs[k][i], (float)((k + round + 1) * tri()));
      free(bufs[k]);
    }
  }
  close_comm();
}
END_TEST

START_TEST(test_comm_test_polls_to_completion) {
  ddp_comm_t *c = open_comm(_i, 0);
  if (!c) return;
  const size_t n = (size_t)1 << 20;
  float *buf = malloc(n * sizeof *buf);
  for (size_t i = 0; i < n; ++i) buf[i] = f32_value(i, g_dist.rank);
  ddp_comm_handle_t h = DDP_COMM_HANDLE_NONE;
  const ddp_status_t st = ddp_comm_allreduce_sum(c, buf, n, DDP_DTYPE_F32, NULL, &h);
  int done = 0, polls = 0;
  ddp_status_t tst = DDP_OK;
  const double t0 = now_ms();
  while (st == DDP_OK && tst == DDP_OK && !done && now_ms() - t0 < 60e3) {
    ddp_comm_progress(c);
    tst = ddp_comm_test(c, h, &done);
    ++polls;
  }
  /* A handle that tested done stays valid until wait() releases it. */
  int again = 0;
  const ddp_status_t tst2 = st == DDP_OK ? ddp_comm_test(c, h, &again) : st;
  const ddp_status_t wst = st == DDP_OK ? ddp_comm_wait(c, h) : st;
  ddp_test_log_start();
  int after = 1;
  const ddp_status_t released = ddp_comm_test(c, h, &after);
  char *log = ddp_test_log_stop();
  close_comm();

  ck_assert_int_eq(st, DDP_OK);
  ck_assert_int_eq(tst, DDP_OK);
  ck_assert_msg(done, "not done after %d polls", polls);
  ck_assert_int_eq(tst2, DDP_OK);
  ck_assert_int_eq(again, 1);
  ck_assert_int_eq(wst, DDP_OK);
  ck_assert_int_eq(released, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(after, 0);
  ddp_assert_contains(log, "already released");
  free(log);
  for (size_t i = 0; i < n; ++i) ck_assert_float_eq(buf[i], f32_value(i, 0) * (float)tri());
  free(buf);
}
END_TEST

START_TEST(test_comm_broadcast_from_last_rank) {
  ddp_comm_t *c = open_comm(_i, 0);
  if (!c) return;
  const int root = g_dist.world - 1; /* non-zero whenever there are two ranks */
  enum { N = 1001 };
  unsigned char buf[N], tiny = (unsigned char)(g_dist.rank + 1);
  for (int i = 0; i < N; ++i) buf[i] = g_dist.rank == root ? (unsigned char)(i * 31 + 7) : 0xEE;
  ddp_comm_handle_t h[3];
  ddp_status_t st[3], wst[3];
  st[0] = ddp_comm_broadcast(c, buf, N, root, NULL, &h[0]);
  st[1] = ddp_comm_broadcast(c, &tiny, 1, 0, NULL, &h[1]);
  st[2] = ddp_comm_broadcast(c, NULL, 0, root, NULL, &h[2]);
  for (int k = 2; k >= 0; --k) wst[k] = st[k] == DDP_OK ? ddp_comm_wait(c, h[k]) : st[k];
  close_comm();
  for (int k = 0; k < 3; ++k) {
    ck_assert_int_eq(st[k], DDP_OK);
    ck_assert_int_eq(wst[k], DDP_OK);
  }
  for (int i = 0; i < N; ++i) ck_assert_uint_eq(buf[i], (unsigned char)(i * 31 + 7));
  ck_assert_uint_eq(tiny, 1);
}
END_TEST

START_TEST(test_comm_allgather_orders_blocks_by_rank) {
  ddp_comm_t *c = open_comm(_i, 0);
  if (!c) return;
  enum { B = 333 };
  const int w = g_dist.world, r = g_dist.rank;
  unsigned char send[B];
  unsigned char *recv = malloc((size_t)B * (size_t)w), *inplace = malloc((size_t)B * (size_t)w);
  memset(recv, 0xEE, (size_t)B * (size_t)w);
  memset(inplace, 0xEE, (size_t)B * (size_t)w);
  for (int j = 0; j < B; ++j)
    send[j] = inplace[(size_t)r * B + (size_t)j] = (unsigned char)(r * 7 + j);
  ddp_comm_handle_t h[2];
  ddp_status_t st[2], wst[2];
  st[0] = ddp_comm_allgather(c, send, recv, B, NULL, &h[0]);
  st[1] = ddp_comm_allgather(c, inplace + (size_t)r * B, inplace, B, NULL, &h[1]);
  for (int k = 0; k < 2; ++k) wst[k] = st[k] == DDP_OK ? ddp_comm_wait(c, h[k]) : st[k];
  close_comm();
  for (int k = 0; k < 2; ++k) {
    ck_assert_int_eq(st[k], DDP_OK);
    ck_assert_int_eq(wst[k], DDP_OK);
  }
  for (int q = 0; q < w; ++q)
    for (int j = 0; j < B; ++j) {
      ck_assert_uint_eq(recv[(size_t)q * B + (size_t)j], (unsigned char)(q * 7 + j));
      ck_assert_uint_eq(inplace[(size_t)q * B + (size_t)j], (unsigned char)(q * 7 + j));
    }
  free(recv);
  free(inplace);
}
END_TEST

/* Integer-valued inputs keep every sum exact. Each send element names its
 * rank and its block, so a rank that received another block, or a sum that
 * missed a rank, shows up as a wrong value. */
START_TEST(test_comm_reduce_scatter_sums_each_rank_block) {
  ddp_comm_t *c = open_comm(_i, 0);
  if (!c) return;
  enum { C = 257, CH = 5 };
  const int w = g_dist.world, r = g_dist.rank;
  float *send = malloc(sizeof(float) * C * (size_t)w), recv[C];
  uint16_t *send_bf = malloc(sizeof(uint16_t) * CH * (size_t)w), recv_bf[CH];
  for (int q = 0; q < w; ++q) {
    for (int j = 0; j < C; ++j)
      send[(size_t)q * C + (size_t)j] = (float)((r + 1) * 1000 + q * C + j);
    for (int j = 0; j < CH; ++j)
      send_bf[(size_t)q * CH + (size_t)j] = ddp_f32_to_bf16((float)(r + q + j));
  }
  for (int j = 0; j < C; ++j) recv[j] = -1.0f;
  ddp_comm_handle_t h[2];
  ddp_status_t st[3], wst[2];
  st[0] = ddp_comm_reduce_scatter(c, send, recv, C, DDP_DTYPE_F32, NULL, &h[0]);
  st[1] = ddp_comm_reduce_scatter(c, send_bf, recv_bf, CH, DDP_DTYPE_BF16, NULL, &h[1]);
  /* Waited in reverse order; an empty collective may name no buffers. */
  for (int k = 1; k >= 0; --k) wst[k] = st[k] == DDP_OK ? ddp_comm_wait(c, h[k]) : st[k];
  st[2] = ddp_comm_reduce_scatter(c, NULL, NULL, 0, DDP_DTYPE_F32, NULL, NULL);
  close_comm();
  for (int k = 0; k < 2; ++k) {
    ck_assert_int_eq(st[k], DDP_OK);
    ck_assert_int_eq(wst[k], DDP_OK);
  }
  ck_assert_int_eq(st[2], DDP_OK);
  for (int j = 0; j < C; ++j)
    ck_assert_float_eq(recv[j], (float)(1000 * w * (w + 1) / 2 + w * (r * C + j)));
  for (int j = 0; j < CH; ++j)
    ck_assert_float_eq(ddp_bf16_to_f32(recv_bf[j]), (float)(w * (w - 1) / 2 + w * (r + j)));
  free(send);
  free(send_bf);
}
END_TEST

/* Rank 0 arrives late; nobody may leave the barrier before it came. On one
 * node CLOCK_MONOTONIC is one clock for all processes, so that is checked
 * exactly: rank 0 broadcasts when it entered, every rank compares with when
 * it left (a load-independent test, unlike a minimum duration). Across nodes
 * only a minimum wait can be asked for. The allreduce issued before the
 * barrier is ordered before it and still completes. */
START_TEST(test_comm_barrier_waits_for_every_rank) {
  ddp_comm_t *c = open_comm(_i, 0);
  if (!c) return;
  float x = 1.0f;
  ddp_comm_handle_t h = DDP_COMM_HANDLE_NONE;
  const ddp_status_t st = ddp_comm_barrier(c); /* line up */
  const ddp_status_t ast = ddp_comm_allreduce_sum(c, &x, 1, DDP_DTYPE_F32, NULL, &h);
  double entered = 0.0;
  if (g_dist.rank == 0) {
    nanosleep(&(struct timespec){.tv_nsec = 300 * 1000 * 1000}, NULL);
    entered = now_ms();
  }
  const double t0 = now_ms();
  const ddp_status_t bst = ddp_comm_barrier(c);
  const double left = now_ms();
  const ddp_status_t wst = ast == DDP_OK ? ddp_comm_wait(c, h) : ast;
  const ddp_status_t cst = ddp_comm_broadcast(c, &entered, sizeof entered, 0, NULL, NULL);
  ddp_comm_stats_t s;
  ddp_comm_get_stats(c, &s);
  close_comm();
  ck_assert_int_eq(st, DDP_OK);
  ck_assert_int_eq(bst, DDP_OK);
  ck_assert_int_eq(ast, DDP_OK);
  ck_assert_int_eq(wst, DDP_OK);
  ck_assert_int_eq(cst, DDP_OK);
  ck_assert_float_eq(x, (float)g_dist.world);
  ck_assert_int_eq(s.n_barrier, 2);
  if (g_dist.local_size == g_dist.world)
    ck_assert_msg(left >= entered, "rank %d left the barrier %.1f ms before rank 0 entered it",
                  g_dist.rank, entered - left);
  else if (g_dist.rank != 0)
    ck_assert_msg(left - t0 > 150.0, "rank %d left the barrier after %.1f ms, before rank 0 came",
                  g_dist.rank, left - t0);
}
END_TEST

START_TEST(test_comm_stats_count_calls_and_bytes) {
  ddp_comm_t *c = open_comm(_i, 0);
  if (!c) return;
  const int w = g_dist.world;
  float f[100] = {0};
  uint16_t b[10] = {0};
  unsigned char bc[50] = {0}, send[8] = {0}, *recv = calloc((size_t)w, 8);
  float big[1 << 16] = {0};
  ddp_comm_stats_t s0, s1, s2;
  /* Create is not counted; a rejected call is not counted either. */
  ddp_test_log_start();
  const ddp_status_t bad = ddp_comm_allreduce_sum(c, NULL, 5, DDP_DTYPE_F32, NULL, NULL);
  free(ddp_test_log_stop());
  ddp_comm_get_stats(c, &s0);
  ddp_status_t st = DDP_OK;
  for (int k = 0; k < 3 && st == DDP_OK; ++k)
    st = ddp_comm_allreduce_sum(c, f, 100, DDP_DTYPE_F32, NULL, NULL);
  if (st == DDP_OK) st = ddp_comm_allreduce_sum(c, b, 10, DDP_DTYPE_BF16, NULL, NULL);
  if (st == DDP_OK) st = ddp_comm_broadcast(c, bc, 50, 0, NULL, NULL);
  if (st == DDP_OK) st = ddp_comm_allgather(c, send, recv, 8, NULL, NULL);
  float *rs_send = calloc((size_t)w, 4 * sizeof(float)), rs_recv[4];
  if (st == DDP_OK) st = ddp_comm_reduce_scatter(c, rs_send, rs_recv, 4, DDP_DTYPE_F32, NULL, NULL);
  free(rs_send);
  if (st == DDP_OK) st = ddp_comm_barrier(c);
  if (st == DDP_OK) st = ddp_comm_allreduce_sum(c, big, 1 << 16, DDP_DTYPE_F32, NULL, NULL);
  ddp_comm_get_stats(c, &s1);
  ddp_comm_reset_stats(c);
  ddp_comm_get_stats(c, &s2);
  close_comm();
  free(recv);

  ck_assert_int_eq(bad, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(s0.n_allreduce, 0);
  ck_assert_int_eq(s0.bytes, 0);
  ck_assert_int_eq(st, DDP_OK);
  ck_assert_int_eq(s1.n_allreduce, 5);
  ck_assert_int_eq(s1.n_broadcast, 1);
  ck_assert_int_eq(s1.n_allgather, 1);
  ck_assert_int_eq(s1.n_barrier, 1);
  ck_assert_int_eq(s1.n_reduce_scatter, 1);
  ck_assert_int_eq(s1.bytes, 3 * 400 + 20 + 50 + 8 * w + 16 * w + 4 * (1 << 16));
  ck_assert(s1.wait_ms >= 0.0);
  ck_assert(s1.comm_ms >= 0.0);
  /* Moving 256 KiB between processes takes measurable time. */
  if (w > 1) ck_assert(s1.comm_ms > 0.0);
  ck_assert_int_eq(s2.n_allreduce + s2.n_broadcast + s2.n_allgather + s2.n_barrier, 0);
  ck_assert_int_eq(s2.n_reduce_scatter, 0);
  ck_assert_int_eq(s2.bytes, 0);
  ck_assert(s2.comm_ms == 0.0 && s2.wait_ms == 0.0);
}
END_TEST

START_TEST(test_comm_pool_exhaustion_is_an_error_not_a_hang) {
  enum { N = 4 };
  ddp_comm_t *c = open_comm(_i, N);
  if (!c) return;
  float x[N + 1];
  ddp_comm_handle_t h[N + 1];
  ddp_status_t st[N + 1];
  for (int k = 0; k <= N; ++k) x[k] = 1.0f;
  for (int k = 0; k < N; ++k)
    st[k] = ddp_comm_allreduce_sum(c, &x[k], 1, DDP_DTYPE_F32, NULL, &h[k]);
  ddp_test_log_start();
  const double t0 = now_ms();
  st[N] = ddp_comm_allreduce_sum(c, &x[N], 1, DDP_DTYPE_F32, NULL, &h[N]);
  const double took = now_ms() - t0;
  char *log = ddp_test_log_stop();
  ddp_status_t wst = DDP_OK;
  for (int k = 0; k < N; ++k)
    if (st[k] == DDP_OK && ddp_comm_wait(c, h[k]) != DDP_OK) wst = DDP_ERR_INTERNAL;
  /* A freed slot is usable again. */
  const ddp_status_t later = ddp_comm_allreduce_sum(c, &x[N], 1, DDP_DTYPE_F32, NULL, NULL);
  close_comm();

  for (int k = 0; k < N; ++k) ck_assert_int_eq(st[k], DDP_OK);
  ck_assert_int_eq(st[N], DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(h[N], DDP_COMM_HANDLE_NONE);
  ck_assert_msg(took < 1000.0, "the rejected call took %.0f ms", took);
  ddp_assert_contains(log, "all 4 handles are in flight (max_inflight)");
  free(log);
  ck_assert_int_eq(wst, DDP_OK);
  ck_assert_int_eq(later, DDP_OK);
  for (int k = 0; k <= N; ++k) ck_assert_float_eq(x[k], (float)g_dist.world);
}
END_TEST

START_TEST(test_comm_bad_handles_are_errors) {
  ddp_comm_t *c = open_comm(_i, 0);
  if (!c) return;
  float x = 1.0f;
  ddp_comm_handle_t h = DDP_COMM_HANDLE_NONE;
  const ddp_status_t st = ddp_comm_allreduce_sum(c, &x, 1, DDP_DTYPE_F32, NULL, &h);
  const ddp_status_t wst = st == DDP_OK ? ddp_comm_stream_wait(c, h, NULL) : st;
  /* The next collective reuses h's slot: h is stale and must not reach it. */
  float y = 1.0f;
  ddp_comm_handle_t h2 = DDP_COMM_HANDLE_NONE;
  const ddp_status_t st2 = ddp_comm_allreduce_sum(c, &y, 1, DDP_DTYPE_F32, NULL, &h2);
  ddp_test_log_start();
  const ddp_status_t stale = ddp_comm_wait(c, h);
  char *stale_log = ddp_test_log_stop();
  const ddp_status_t wst2 = st2 == DDP_OK ? ddp_comm_wait(c, h2) : st2;
  ddp_test_log_start();
  int done = 0;
  const ddp_status_t e[] = {
      ddp_comm_wait(c, DDP_COMM_HANDLE_NONE),
      ddp_comm_wait(c, 12345),
      ddp_comm_wait(c, h), /* released by stream_wait */
      ddp_comm_stream_wait(c, h, NULL),
      ddp_comm_test(c, h, &done),
      ddp_comm_test(c, h, NULL),
      ddp_comm_wait(NULL, h),
  };
  char *log = ddp_test_log_stop();
  close_comm();
  ck_assert_int_eq(st, DDP_OK);
  ck_assert_int_eq(wst, DDP_OK);
  ck_assert_float_eq(x, (float)g_dist.world);
  ck_assert_int_eq(st2, DDP_OK);
  ck_assert_int_eq(h2 & 0xffff, h & 0xffff); /* same slot... */
  ck_assert_int_ne(h2, h);                   /* ...another generation */
  ck_assert_int_eq(stale, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(stale_log, "already released");
  free(stale_log);
  ck_assert_int_eq(wst2, DDP_OK);
  ck_assert_float_eq(y, (float)g_dist.world);
  for (size_t k = 0; k < sizeof e / sizeof e[0]; ++k) ck_assert_int_eq(e[k], DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "comm wait: handle -1 is not an outstanding collective");
  ddp_assert_contains(log, "comm stream_wait: handle");
  ddp_assert_contains(log, "comm test: NULL done");
  free(log);
}
END_TEST

START_TEST(test_comm_bad_arguments_are_clear_errors) {
  ddp_comm_t *c = open_comm(_i, 0);
  if (!c) return;
  const int w = g_dist.world;
  unsigned char *buf = malloc((size_t)w * 16 + 16);
  ddp_comm_handle_t h = 7;
  ddp_test_log_start();
  const ddp_status_t e[] = {
      ddp_comm_allreduce_sum(c, NULL, 3, DDP_DTYPE_F32, NULL, &h),
      ddp_comm_allreduce_sum(c, buf, 3, (ddp_dtype_t)99, NULL, NULL),
      ddp_comm_allreduce_sum(NULL, buf, 3, DDP_DTYPE_F32, NULL, NULL),
      ddp_comm_broadcast(c, buf, 4, -1, NULL, NULL),
      ddp_comm_broadcast(c, buf, 4, w, NULL, NULL),
      ddp_comm_broadcast(c, NULL, 4, 0, NULL, NULL),
      ddp_comm_allgather(c, NULL, buf, 4, NULL, NULL),
      ddp_comm_allgather(c, buf + 1, buf, 16, NULL, NULL), /* overlaps, not in place */
      ddp_comm_reduce_scatter(c, NULL, buf, 4, DDP_DTYPE_F32, NULL, &h),
      ddp_comm_reduce_scatter(c, buf, buf + 4, 1, (ddp_dtype_t)99, NULL, NULL),
      ddp_comm_reduce_scatter(NULL, buf, buf + 4, 1, DDP_DTYPE_F32, NULL, NULL),
      /* No in-place form: recv inside send, even at the rank's own block. */
      ddp_comm_reduce_scatter(c, buf, buf + (size_t)g_dist.rank * 4, 1, DDP_DTYPE_F32, NULL, NULL),
      ddp_comm_barrier(NULL),
  };
  char *log = ddp_test_log_stop();
  ddp_comm_stats_t s;
  ddp_comm_get_stats(c, &s);
  close_comm();
  free(buf);
  for (size_t k = 0; k < sizeof e / sizeof e[0]; ++k)
    ck_assert_msg(e[k] == DDP_ERR_INVALID_ARG, "call %zu returned %s", k, ddp_status_name(e[k]));
  ck_assert_int_eq(h, DDP_COMM_HANDLE_NONE);
  ck_assert_int_eq(s.n_allreduce + s.n_broadcast + s.n_allgather + s.n_barrier, 0);
  ck_assert_int_eq(s.n_reduce_scatter, 0);
  ddp_assert_contains(log, "comm allreduce_sum: NULL buffer with count 3");
  ddp_assert_contains(log, "comm allreduce_sum: invalid dtype 99");
  ddp_assert_contains(log, "comm broadcast: root -1 outside [0, ");
  ddp_assert_contains(log, "comm allgather: NULL send buffer");
  ddp_assert_contains(log, "comm allgather: send overlaps recv");
  ddp_assert_contains(log, "comm reduce_scatter: NULL send buffer with count 4 per rank");
  ddp_assert_contains(log, "comm reduce_scatter: invalid dtype 99");
  ddp_assert_contains(log, "comm reduce_scatter: NULL communicator");
  ddp_assert_contains(log, "comm reduce_scatter: recv overlaps send");
  free(log);
}
END_TEST

/* Not a loop test: it builds its own configurations. */
START_TEST(test_comm_create_rejects_bad_config) {
  ddp_comm_t *c = NULL;
  ddp_test_log_start();
  const ddp_comm_config_t tcp = {.kind = "tcp"}, poll = {.kind = "mpi", .progress = "poll"};
  const ddp_comm_config_t neg = {.max_inflight = -1}, huge = {.max_inflight = 5000};
  const ddp_comm_config_t self = {.kind = "self"}, mpi = {.kind = "mpi"};
  const ddp_status_t e_tcp = ddp_comm_create(&g_dist, &tcp, &c);
  const ddp_status_t e_poll = ddp_comm_create(&g_dist, &poll, &c);
  const ddp_status_t e_neg = ddp_comm_create(&g_dist, &neg, &c);
  const ddp_status_t e_huge = ddp_comm_create(&g_dist, &huge, &c);
  const ddp_status_t e_null = ddp_comm_create(NULL, &tcp, &c);
  ddp_comm_t *s = NULL;
  const ddp_status_t e_self = ddp_comm_create(&g_dist, &self, &s);
  ddp_comm_destroy(s);
  ddp_status_t e_mpi = DDP_OK;
  if (!have_mpi()) e_mpi = ddp_comm_create(&g_dist, &mpi, &c);
  char *log = ddp_test_log_stop();
  ck_assert_ptr_null(c);
  ck_assert_int_eq(e_tcp, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(e_poll, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(e_neg, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(e_huge, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(e_null, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "comm kind 'tcp' is not one of auto, self, mpi, nccl");
  ddp_assert_contains(log, "comm progress mode 'poll' is not one of thread, test");
  ddp_assert_contains(log, "comm max_inflight -1 outside [1, 4096]");
  ddp_assert_contains(log, "comm max_inflight 5000 outside [1, 4096]");
  if (g_dist.world == 1) {
    ck_assert_int_eq(e_self, DDP_OK);
  } else {
    ck_assert_int_eq(e_self, DDP_ERR_INVALID_ARG);
    ddp_assert_contains(log, "comm kind 'self': needs a world of 1 rank, this job has");
  }
  if (!have_mpi()) {
    ck_assert_int_eq(e_mpi, DDP_ERR_UNSUPPORTED);
    ddp_assert_contains(log, "this build has no MPI");
  }
  free(log);
}
END_TEST

/* A progress thread needs MPI_THREAD_MULTIPLE: asking for one without it is
 * an error; the default mode falls back to "test". */
START_TEST(test_comm_thread_progress_needs_thread_multiple) {
  if (!have_mpi()) return;
  ddp_dist_t low = g_dist;
  low.thread_level = 0; /* MPI_THREAD_SINGLE */
  const ddp_comm_config_t thread = {.kind = "mpi", .progress = "thread"}, dflt = {.kind = "mpi"};
  ddp_comm_t *c = NULL;
  ddp_test_log_start();
  const ddp_status_t e = ddp_comm_create(&low, &thread, &c);
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(e, DDP_ERR_UNSUPPORTED);
  ck_assert_ptr_null(c);
  ddp_assert_contains(log, "a progress thread needs MPI_THREAD_MULTIPLE");
  free(log);
  ddp_test_log_start();
  const ddp_status_t ok = ddp_comm_create(&low, &dflt, &g_comm);
  log = ddp_test_log_stop();
  ck_assert_int_eq(ok, DDP_OK);
  ck_assert_str_eq(ddp_comm_progress_mode(g_comm), "test");
  if (strcmp(ddp_comm_default_progress(), "thread") == 0 && ddp_log_enabled(DDP_LOG_LEVEL_INFO))
    ddp_assert_contains(log, "default progress 'thread' unavailable");
  free(log);
  float x = 2.0f;
  ck_assert_int_eq(ddp_comm_allreduce_sum(g_comm, &x, 1, DDP_DTYPE_F32, NULL, NULL), DDP_OK);
  ck_assert_float_eq(x, 2.0f * (float)g_dist.world);
  close_comm();
}
END_TEST

/* Destroy cannot abandon collectives other ranks are inside: it completes
 * them (and says that handles were never waited for). */
START_TEST(test_comm_destroy_completes_outstanding_work) {
  ddp_comm_t *c = open_comm(_i, 0);
  if (!c) return;
  enum { N = 3, COUNT = 100000 };
  float *bufs[N];
  ddp_status_t st[N];
  for (int k = 0; k < N; ++k) {
    bufs[k] = malloc(COUNT * sizeof(float));
    for (int i = 0; i < COUNT; ++i) bufs[k][i] = (float)(k + g_dist.rank);
    ddp_comm_handle_t h;
    st[k] = ddp_comm_allreduce_sum(c, bufs[k], COUNT, DDP_DTYPE_F32, NULL, &h);
  }
  ddp_test_log_start();
  close_comm();
  char *log = ddp_test_log_stop();
  for (int k = 0; k < N; ++k) ck_assert_int_eq(st[k], DDP_OK);
  ddp_assert_contains(log, "destroyed with 3 handle(s) never waited for");
  free(log);
  for (int k = 0; k < N; ++k) {
    for (int i = 0; i < COUNT; ++i)
      ck_assert_float_eq(bufs[k][i], (float)(k * g_dist.world + tri() - g_dist.world));
    free(bufs[k]);
  }
}
END_TEST

/* ---- the collective watchdog on a collective that does not complete ------ */

/* The watchdog's probe over one collective of a real communicator. The
 * watchdog's thread is the only one that touches the communicator until the
 * test has stopped it (one thread per communicator). */
typedef struct watched {
  ddp_comm_t *c;
  ddp_comm_handle_t h;
  _Atomic int done, fails;
  char line[512];
} watched_t;

static ddp_comm_watch_state_t watched_state(void *ctx, int slot, ddp_status_t *failure, char *cause,
                                            size_t len) {
  watched_t *w = ctx;
  (void)slot;
  int done = 0;
  const ddp_status_t st = ddp_comm_test(w->c, w->h, &done);
  if (st != DDP_OK) {
    *failure = st;
    snprintf(cause, len, "the collective failed: %s", ddp_status_string(st));
    return DDP_COMM_WATCH_FAILED;
  }
  if (done) atomic_store(&w->done, 1);
  return done ? DDP_COMM_WATCH_DONE : DDP_COMM_WATCH_PENDING;
}

static void watched_fail(void *ctx, ddp_status_t st, const char *line) {
  watched_t *w = ctx;
  (void)st;
  snprintf(w->line, sizeof w->line, "%s", line);
  atomic_fetch_add(&w->fails, 1);
}

/* With several ranks, the last one joins an all-reduce only after three
 * timeouts: on every other rank the collective does not complete in time,
 * and their watchdogs must say so, naming the rank, the collective, its size
 * and the wait; the last rank's own collective completes at once and its
 * watchdog stays quiet. Then everyone completes the collective, whose sum
 * must be right. On one rank the collective completes at once. */
START_TEST(test_comm_watchdog_names_a_collective_that_does_not_complete) {
  ddp_comm_t *c = open_comm(_i, 0);
  if (!c) return;
  const double timeout = 0.3;
  const int late = g_dist.world > 1 && g_dist.rank == g_dist.world - 1;
  watched_t w = {.c = c, .h = DDP_COMM_HANDLE_NONE};
  atomic_init(&w.done, 0);
  atomic_init(&w.fails, 0);
  char who[96];
  snprintf(who, sizeof who, "rank %d on %s", g_dist.rank, g_dist.host);
  const ddp_comm_watchdog_config_t cfg = {
      .label = "comm test",
      .who = who,
      .then = "ending the test's wait",
      .n_slots = 1,
      .timeout_s = timeout,
      .probe = {.ctx = &w, .slot_state = watched_state, .fail = watched_fail}};
  ddp_comm_watchdog_t *wd = NULL;
  ck_assert_int_eq(ddp_comm_watchdog_start(&cfg, &wd), DDP_OK);
  if (late) {
    const struct timespec pause = {.tv_sec = 1, .tv_nsec = 0};
    nanosleep(&pause, NULL);
  }
  float x = (float)(g_dist.rank + 1);
  const double t0 = now_ms();
  const ddp_status_t issued = ddp_comm_allreduce_sum(c, &x, 1, DDP_DTYPE_F32, NULL, &w.h);
  ddp_comm_watchdog_issued(wd, 0, "allreduce_sum", sizeof x);
  while (issued == DDP_OK && !atomic_load(&w.done) && atomic_load(&w.fails) == 0 &&
         now_ms() - t0 < 20000) {
    const struct timespec tick = {.tv_sec = 0, .tv_nsec = 5 * 1000 * 1000};
    nanosleep(&tick, NULL);
  }
  const double waited_ms = now_ms() - t0;
  ddp_comm_watchdog_stop(wd);
  const ddp_status_t completed = issued == DDP_OK ? ddp_comm_wait(c, w.h) : issued;
  close_comm();
  ck_assert_int_eq(issued, DDP_OK);
  ck_assert_int_eq(completed, DDP_OK);
  ck_assert_float_eq(x, (float)tri());
  if (g_dist.world > 1 && !late) {
    ck_assert_int_eq(atomic_load(&w.fails), 1);
    ck_assert_msg(waited_ms >= timeout * 1000, "verdict after %.0f ms", waited_ms);
    char expect_start[200];
    snprintf(expect_start, sizeof expect_start,
             "comm test: %s: allreduce_sum #1 of 4 bytes failed: no completion after 0.", who);
    ck_assert_msg(strstr(w.line, expect_start) == w.line, "line: %s", w.line);
    ddp_assert_contains(w.line, "(timeout 0.3 s); ending the test's wait");
  } else {
    ck_assert_msg(atomic_load(&w.fails) == 0, "rank %d: unexpected verdict: %s", g_dist.rank,
                  w.line);
  }
}
END_TEST

/* ---- the NCCL kind, as far as a machine without a GPU can see it ---------- */

START_TEST(test_comm_kind_built_names_this_build) {
  ck_assert_int_eq(ddp_comm_kind_built("self"), 1);
  ck_assert_int_eq(ddp_comm_kind_built("mpi"), have_mpi());
  ck_assert_int_eq(ddp_comm_kind_built("tcp"), 0);
  ck_assert_int_eq(ddp_comm_kind_built("auto"), 0); /* a choice, not a kind */
  ck_assert_int_eq(ddp_comm_kind_built(NULL), 0);
}
END_TEST

/* "nccl" without the CUDA backend is refused on every rank alike (the ranks
 * agree before NCCL starts, so none waits in ncclCommInitRank for a rank
 * that gave up); in a build without NCCL the kind itself is refused. A
 * negative timeout is refused before anything starts. */
START_TEST(test_comm_nccl_needs_the_cuda_backend) {
  ddp_backend_t *cpu = ddp_test_cpu_backend();
  const ddp_comm_config_t none = {.kind = "nccl"}, on_cpu = {.kind = "nccl", .be = cpu};
  const ddp_comm_config_t neg = {.kind = "nccl", .timeout_s = -1.0};
  ddp_comm_t *c = NULL;
  ddp_test_log_start();
  const ddp_status_t e_none = ddp_comm_create(&g_dist, &none, &c);
  const ddp_status_t e_cpu = ddp_comm_create(&g_dist, &on_cpu, &c);
  const ddp_status_t e_neg = ddp_comm_create(&g_dist, &neg, &c);
  char *log = ddp_test_log_stop();
  ddp_backend_destroy(cpu);
  ck_assert_ptr_null(c);
  ck_assert_int_eq(e_neg, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "comm timeout -1 s must be finite and >= 0");
  if (ddp_comm_kind_built("nccl")) {
    ck_assert_int_eq(e_none, DDP_ERR_INVALID_ARG);
    ck_assert_int_eq(e_cpu, DDP_ERR_INVALID_ARG);
    ddp_assert_contains(log, "comm kind 'nccl' needs the CUDA backend in its config");
    ddp_assert_contains(log, "got none");
    ddp_assert_contains(log, "got cpu");
  } else {
    ck_assert_int_eq(e_none, DDP_ERR_UNSUPPORTED);
    ck_assert_int_eq(e_cpu, DDP_ERR_UNSUPPORTED);
    ddp_assert_contains(log, "comm kind 'nccl': this build has no NCCL communicator");
  }
  free(log);
}
END_TEST

/* ---- ddp_comm_choose: pure, so every rank runs it alone ------------------ */

/* The capability table of a build this machine need not be: self, MPI
 * (CUDA-aware or not) and NCCL (built or not), as their registry entries
 * declare them. */
static void fake_kinds(ddp_comm_caps_t k[3], int nccl_built, int mpi_cuda_aware) {
  k[0] = (ddp_comm_caps_t){.kind = "self",
                           .label = "self",
                           .built = 1,
                           .role = DDP_COMM_ROLE_HOST,
                           .reads = DDP_COMM_READS_ANY};
  k[1] = (ddp_comm_caps_t){.kind = "mpi",
                           .label = "MPI",
                           .built = 1,
                           .role = DDP_COMM_ROLE_HOST,
                           .multi_rank = 1,
                           .reads = DDP_COMM_READS(DDP_DEVICE_KIND_CPU) |
                                    (mpi_cuda_aware ? DDP_COMM_READS(DDP_DEVICE_KIND_CUDA) : 0u)};
  k[2] = (ddp_comm_caps_t){.kind = "nccl",
                           .label = "NCCL",
                           .built = nccl_built,
                           .role = DDP_COMM_ROLE_DEVICE,
                           .multi_rank = 1,
                           .device_per_rank = 1,
                           .reads = DDP_COMM_READS(DDP_DEVICE_KIND_CUDA)};
}

/* ddp_comm_choose_from() over fake_kinds(), so every rule of every build is
 * tested on this one. */
static void choose(const char *device, int world, const ddp_comm_gpu_probe_t *probes,
                   int nccl_built, int mpi_cuda_aware, ddp_comm_choice_t *out) {
  ddp_comm_caps_t k[3];
  fake_kinds(k, nccl_built, mpi_cuda_aware);
  ddp_comm_choose_from(k, 3, device, world, probes, out);
}

static ddp_comm_gpu_probe_t gpu(int device, const char *host) {
  ddp_comm_gpu_probe_t p = {.usable = 1, .device = device};
  snprintf(p.host, sizeof p.host, "%s", host);
  return p;
}

static ddp_comm_gpu_probe_t no_gpu(const char *host, const char *why) {
  ddp_comm_gpu_probe_t p = {.usable = 0, .device = -1};
  snprintf(p.host, sizeof p.host, "%s", host);
  snprintf(p.why, sizeof p.why, "%s", why);
  return p;
}

START_TEST(test_comm_choose_world_one_and_cpu_keep_the_request) {
  ddp_comm_choice_t ch;
  const ddp_comm_gpu_probe_t one[1] = {gpu(0, "n0")};
  choose("cuda", 1, one, 1, 0, &ch);
  ck_assert_str_eq(ch.device, "cuda");
  ck_assert_ptr_null(ch.grad_comm);
  ck_assert_int_eq(ch.status, DDP_OK);
  ck_assert_str_eq(ch.message, "");
  const ddp_comm_gpu_probe_t two[2] = {gpu(0, "n0"), no_gpu("n1", "x")};
  choose("cpu", 2, two, 1, 1, &ch);
  ck_assert_str_eq(ch.device, "cpu");
  ck_assert_ptr_null(ch.grad_comm);
  ck_assert_int_eq(ch.status, DDP_OK);
  ck_assert_str_eq(ch.message, "");
  choose(NULL, 1, NULL, 1, 0, &ch); /* NULL device is auto */
  ck_assert_str_eq(ch.device, "auto");
  ck_assert_int_eq(ch.status, DDP_OK);
}
END_TEST

START_TEST(test_comm_choose_every_rank_on_its_gpu_gets_nccl) {
  ddp_comm_choice_t ch;
  /* two hosts reuse ordinals 0 and 1: nothing is shared */
  const ddp_comm_gpu_probe_t p[4] = {gpu(0, "n0"), gpu(1, "n0"), gpu(0, "n1"), gpu(1, "n1")};
  for (int k = 0; k < 3; ++k) {
    const char *dev = k == 0 ? "auto" : k == 1 ? "cuda" : NULL;
    choose(dev, 4, p, 1, 0, &ch);
    ck_assert_str_eq(ch.device, dev ? dev : "auto");
    ck_assert_ptr_nonnull(ch.grad_comm);
    ck_assert_str_eq(ch.grad_comm, "nccl");
    ck_assert_int_eq(ch.status, DDP_OK);
    ck_assert_str_eq(ch.message, "");
  }
  /* without NCCL a CUDA-aware MPI reduces GPU memory itself */
  choose("cuda", 4, p, 0, 1, &ch);
  ck_assert_str_eq(ch.device, "cuda");
  ck_assert_ptr_null(ch.grad_comm);
  ck_assert_int_eq(ch.status, DDP_OK);
}
END_TEST

START_TEST(test_comm_choose_a_rank_without_gpu_moves_everyone_to_the_cpu) {
  ddp_comm_choice_t ch;
  const ddp_comm_gpu_probe_t p[3] = {
      gpu(0, "n0"), no_gpu("n1", "no CUDA-capable device is detected"), gpu(1, "n0")};
  choose("auto", 3, p, 1, 1, &ch);
  ck_assert_str_eq(ch.device, "cpu");
  ck_assert_ptr_null(ch.grad_comm);
  ck_assert_int_eq(ch.status, DDP_OK);
  ddp_assert_contains(ch.message, "device auto: 1 of 3 ranks have no usable GPU");
  ddp_assert_contains(ch.message, "rank 1 on n1: no CUDA-capable device is detected");
  ddp_assert_contains(ch.message, "every rank trains on the CPU with the MPI communicator");
  ck_assert_ptr_null(strstr(ch.message, "rank 0 on"));
  /* an explicit cuda is an error, the same on every rank */
  choose("cuda:0", 3, p, 1, 1, &ch);
  ck_assert_int_eq(ch.status, DDP_ERR_NO_DEVICE);
  ddp_assert_contains(ch.message, "--device cuda:0: 1 of 3 ranks have no usable GPU");
  ddp_assert_contains(ch.message, "rank 1 on n1: no CUDA-capable device is detected");
  ddp_assert_contains(ch.message, "every rank needs one");
  /* no GPU anywhere under auto: the plain CPU job, nothing to say */
  const ddp_comm_gpu_probe_t none[2] = {no_gpu("n0", "a"), no_gpu("n1", "b")};
  choose("auto", 2, none, 1, 0, &ch);
  ck_assert_str_eq(ch.device, "cpu");
  ck_assert_int_eq(ch.status, DDP_OK);
  ck_assert_str_eq(ch.message, "");
  choose("cuda", 2, none, 1, 0, &ch);
  ck_assert_int_eq(ch.status, DDP_ERR_NO_DEVICE);
  ddp_assert_contains(ch.message,
                      "2 of 2 ranks have no usable GPU (rank 0 on n0: a; rank 1 on n1: b)");
}
END_TEST

START_TEST(test_comm_choose_long_lists_are_cut_with_the_count) {
  enum { W = 40 };
  ddp_comm_gpu_probe_t p[W];
  p[0] = gpu(0, "n0");
  for (int r = 1; r < W; ++r) p[r] = no_gpu("host-with-a-long-name", "0 GPUs visible");
  ddp_comm_choice_t ch;
  choose("auto", W, p, 1, 0, &ch);
  ck_assert_str_eq(ch.device, "cpu");
  ddp_assert_contains(ch.message, "39 of 40 ranks have no usable GPU");
  ddp_assert_contains(ch.message, "rank 1 on host-with-a-long-name: 0 GPUs visible");
  ddp_assert_contains(ch.message, "trains on the CPU"); /* the list never eats the conclusion */
  /* the ranks named plus "and N more" account for every rank without a GPU */
  int named = 0, more = 0;
  for (const char *q = ch.message; (q = strstr(q, "rank ")) != NULL; ++q)
    named += q[5] >= '0' && q[5] <= '9';
  const char *tail = strstr(ch.message, "; and ");
  ck_assert_ptr_nonnull(tail);
  ck_assert_int_eq(sscanf(tail, "; and %d more", &more), 1);
  ck_assert_int_le(named, 8);
  ck_assert_int_eq(named + more, W - 1);
}
END_TEST

START_TEST(test_comm_choose_shared_gpu_or_no_reducer) {
  ddp_comm_choice_t ch;
  const ddp_comm_gpu_probe_t shared[3] = {gpu(0, "n0"), gpu(0, "n1"), gpu(0, "n0")};
  choose("auto", 3, shared, 1, 0, &ch);
  ck_assert_str_eq(ch.device, "cpu");
  ck_assert_int_eq(ch.status, DDP_OK);
  ddp_assert_contains(ch.message, "ranks 0 and 2 on n0 would share cuda:0");
  ddp_assert_contains(ch.message, "NCCL needs a GPU per rank");
  choose("cuda", 3, shared, 1, 1, &ch); /* NCCL is built, so it is the one to use */
  ck_assert_int_eq(ch.status, DDP_ERR_UNSUPPORTED);
  ddp_assert_contains(ch.message, "--device cuda on 3 ranks: ranks 0 and 2 on n0 would share");
  ddp_assert_contains(ch.message, "Start one rank per GPU");
  /* no NCCL, an MPI that reads host memory only */
  const ddp_comm_gpu_probe_t own[2] = {gpu(0, "n0"), gpu(1, "n0")};
  choose("auto", 2, own, 0, 0, &ch);
  ck_assert_str_eq(ch.device, "cpu");
  ck_assert_ptr_null(ch.grad_comm);
  ddp_assert_contains(ch.message, "no NCCL communicator and the MPI library is not CUDA-aware");
  choose("cuda:1", 2, own, 0, 0, &ch);
  ck_assert_int_eq(ch.status, DDP_ERR_UNSUPPORTED);
  ddp_assert_contains(ch.message, "--device cuda:1 on 2 ranks: this build has no NCCL");
  /* no NCCL, a shared GPU, a CUDA-aware MPI: MPI does not mind sharing */
  choose("cuda", 3, shared, 0, 1, &ch);
  ck_assert_int_eq(ch.status, DDP_OK);
  ck_assert_str_eq(ch.device, "cuda");
  ck_assert_ptr_null(ch.grad_comm);
}
END_TEST

/* ---- selection by capability ------------------------------------------ */

START_TEST(test_comm_kinds_declare_this_build) {
  ddp_comm_caps_t k[8];
  const size_t n = ddp_comm_kinds(k, 8);
  ck_assert_uint_eq(ddp_comm_kinds(NULL, 0), n);
  ck_assert_uint_eq(ddp_comm_kinds(NULL, 5), n); /* no buffer: the count alone */
  ck_assert_uint_eq(n, 3);                       /* each kind once, built or not */
  const unsigned host_mem = DDP_COMM_READS(DDP_DEVICE_KIND_CPU);
  const unsigned gpu_mem = DDP_COMM_READS(DDP_DEVICE_KIND_CUDA);
  int seen = 0;
  for (size_t i = 0; i < n; ++i) {
    ck_assert_ptr_nonnull(k[i].kind);
    ck_assert_ptr_nonnull(k[i].label);
    ck_assert_int_eq(k[i].built, ddp_comm_kind_built(k[i].kind));
    if (i > 0) ck_assert_int_ge(k[i - 1].built, k[i].built); /* built kinds first */
    if (strcmp(k[i].kind, "self") == 0) {
      seen |= 1;
      ck_assert_int_eq(k[i].role, DDP_COMM_ROLE_HOST);
      ck_assert_int_eq(k[i].multi_rank, 0);
      ck_assert_uint_eq(k[i].reads, DDP_COMM_READS_ANY);
    } else if (strcmp(k[i].kind, "mpi") == 0) {
      seen |= 2;
      ck_assert_int_eq(k[i].role, DDP_COMM_ROLE_HOST);
      ck_assert_int_eq(k[i].multi_rank, 1);
      ck_assert_int_eq(k[i].device_per_rank, 0);
      ck_assert_uint_eq(k[i].reads & host_mem, host_mem);
      /* decided at run time, by the library */
      ck_assert_int_eq((k[i].reads & gpu_mem) != 0, k[i].built && ddp_comm_mpi_cuda_aware());
    } else if (strcmp(k[i].kind, "nccl") == 0) {
      seen |= 4;
      ck_assert_int_eq(k[i].role, DDP_COMM_ROLE_DEVICE);
      ck_assert_int_eq(k[i].multi_rank, 1);
      ck_assert_int_eq(k[i].device_per_rank, 1);
      ck_assert_uint_eq(k[i].reads, gpu_mem); /* GPU memory only */
    } else {
      ck_abort_msg("unexpected kind '%s'", k[i].kind);
    }
  }
  ck_assert_int_eq(seen, 7);
  /* a short buffer gets the first entries and nothing is written past them */
  ddp_comm_caps_t two[3];
  memset(two, 0xA5, sizeof two);
  ck_assert_uint_eq(ddp_comm_kinds(two, 2), n);
  ck_assert_str_eq(two[0].kind, k[0].kind);
  ck_assert_str_eq(two[1].kind, k[1].kind);
  const unsigned char *tail = (const unsigned char *)&two[2];
  for (size_t b = 0; b < sizeof two[2]; ++b) ck_assert_uint_eq(tail[b], 0xA5);
}
END_TEST

START_TEST(test_comm_get_caps_of_a_host_communicator) {
  ddp_comm_t *c = open_comm(_i, 0);
  if (!c) return;
  ddp_comm_caps_t caps;
  ck_assert_int_eq(ddp_comm_get_caps(c, &caps), DDP_OK);
  ck_assert_str_eq(caps.kind, ddp_comm_name(c));
  ck_assert_int_eq(caps.built, 1);
  ck_assert_int_eq(caps.role, DDP_COMM_ROLE_HOST);
  ck_assert_uint_ne(caps.reads & DDP_COMM_READS(DDP_DEVICE_KIND_CPU), 0);
  ck_assert_int_eq((caps.reads & DDP_COMM_READS(DDP_DEVICE_KIND_CUDA)) != 0,
                   ddp_comm_reads_device_memory(c));
  ddp_test_log_start();
  const ddp_status_t e_comm = ddp_comm_get_caps(NULL, &caps);
  const ddp_status_t e_out = ddp_comm_get_caps(c, NULL);
  char *log = ddp_test_log_stop();
  close_comm();
  ck_assert_int_eq(e_comm, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(e_out, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "comm get_caps: NULL argument");
  free(log);
}
END_TEST

/* ddp_comm_select_for_memory over a table, as ddp_comm_create_for_backend
 * calls it with this build's registry. */
static ddp_status_t select_on(const ddp_comm_caps_t *kinds, size_t n, const ddp_comm_caps_t *host,
                              ddp_device_kind_t mem, int rank, int world,
                              const ddp_comm_caps_t **grad, char *why) {
  return ddp_comm_select_for_memory(kinds, n, host, mem, rank, world, grad, why, 512);
}

START_TEST(test_comm_select_for_memory_by_capability) {
  ddp_comm_caps_t k[3];
  const ddp_comm_caps_t *g = NULL;
  char why[512];
  const ddp_device_kind_t CPU = DDP_DEVICE_KIND_CPU, CUDA = DDP_DEVICE_KIND_CUDA;
  /* host memory (the CPU backend), one rank or several: the host
   * communicator, whatever else this build has */
  fake_kinds(k, 1, 1);
  for (int w = 1; w <= 4; w += 3) {
    g = &k[0];
    ck_assert_int_eq(select_on(k, 3, &k[w == 1 ? 0 : 1], CPU, 0, w, &g, why), DDP_OK);
    ck_assert_ptr_null(g);
    ck_assert_str_eq(why, "");
  }
  /* one rank on a GPU: "self" reads any memory, and one rank gets no
   * device communicator */
  g = &k[0];
  ck_assert_int_eq(select_on(k, 3, &k[0], CUDA, 0, 1, &g, why), DDP_OK);
  ck_assert_ptr_null(g);
  /* several GPU ranks: the dedicated one, even beside a CUDA-aware MPI */
  for (int aware = 0; aware <= 1; ++aware) {
    fake_kinds(k, 1, aware);
    ck_assert_int_eq(select_on(k, 3, &k[1], CUDA, 3, 4, &g, why), DDP_OK);
    ck_assert_ptr_eq(g, &k[2]);
    ck_assert_str_eq(g->kind, "nccl");
    ck_assert_str_eq(why, "");
  }
  /* none built, a CUDA-aware MPI: the host communicator serves */
  fake_kinds(k, 0, 1);
  g = &k[0];
  ck_assert_int_eq(select_on(k, 3, &k[1], CUDA, 0, 2, &g, why), DDP_OK);
  ck_assert_ptr_null(g);
  /* neither: the error names the rank, the world, the host communicator
   * and what this build lacks, and says what to do */
  fake_kinds(k, 0, 0);
  g = &k[0];
  ck_assert_int_eq(select_on(k, 3, &k[1], CUDA, 2, 4, &g, why), DDP_ERR_UNSUPPORTED);
  ck_assert_ptr_null(g);
  ck_assert_str_eq(why,
                   "rank 2: 4 ranks on the CUDA backend need a communicator that reads CUDA "
                   "memory: this build has no NCCL communicator and the 'mpi' communicator is not "
                   "CUDA-aware. Run a single rank per GPU job, or --device cpu");
  /* a table without any device communicator (an empty one is valid) */
  ck_assert_int_eq(select_on(k, 2, &k[1], CUDA, 0, 2, &g, why), DDP_ERR_UNSUPPORTED);
  ddp_assert_contains(why,
                      "this build has no communicator for CUDA memory and the 'mpi' "
                      "communicator is not CUDA-aware");
  ck_assert_int_eq(select_on(NULL, 0, &k[1], CUDA, 1, 2, &g, why), DDP_ERR_UNSUPPORTED);
  ddp_assert_contains(why, "rank 1: 2 ranks on the CUDA backend");
  ddp_assert_contains(why, "this build has no communicator for CUDA memory");
  /* a device communicator for one rank only is none for several */
  fake_kinds(k, 1, 0);
  k[2].multi_rank = 0;
  ck_assert_int_eq(select_on(k, 3, &k[1], CUDA, 0, 2, &g, why), DDP_ERR_UNSUPPORTED);
  /* one rank whose host communicator reads host memory only */
  fake_kinds(k, 1, 0);
  ck_assert_int_eq(select_on(k, 3, &k[1], CUDA, 0, 1, &g, why), DDP_ERR_UNSUPPORTED);
  ddp_assert_contains(why, "rank 0: 1 ranks on the CUDA backend need a communicator");
  ddp_assert_contains(why, "a dedicated device communicator serves several ranks only");
  ddp_assert_contains(why, "Run a single rank per GPU job, or --device cpu");
  /* no room for the message: the status alone, and a zero-length why is
   * never written */
  fake_kinds(k, 0, 0);
  ck_assert_int_eq(ddp_comm_select_for_memory(k, 3, &k[1], CUDA, 0, 2, &g, NULL, 0),
                   DDP_ERR_UNSUPPORTED);
  why[0] = 'x';
  ck_assert_int_eq(ddp_comm_select_for_memory(k, 3, &k[1], CUDA, 0, 2, &g, why, 0),
                   DDP_ERR_UNSUPPORTED);
  ck_assert_int_eq(why[0], 'x');
}
END_TEST

START_TEST(test_comm_select_for_memory_rejects_bad_input) {
  ddp_comm_caps_t k[3];
  fake_kinds(k, 1, 0);
  const ddp_comm_caps_t *g = &k[0];
  char why[512];
  const ddp_device_kind_t CUDA = DDP_DEVICE_KIND_CUDA;
  ck_assert_int_eq(select_on(k, 3, &k[1], CUDA, 0, 2, NULL, why), DDP_ERR_INVALID_ARG);
  ck_assert_str_eq(why, "comm select: NULL result");
  ck_assert_int_eq(select_on(k, 3, NULL, CUDA, 0, 2, &g, why), DDP_ERR_INVALID_ARG);
  ck_assert_str_eq(why, "comm select: NULL host communicator");
  ck_assert_ptr_null(g); /* cleared on every error */
  g = &k[0];
  ck_assert_int_eq(select_on(NULL, 3, &k[1], CUDA, 0, 2, &g, why), DDP_ERR_INVALID_ARG);
  ck_assert_str_eq(why, "comm select: NULL capability table");
  ck_assert_ptr_null(g);
  ck_assert_int_eq(select_on(k, 3, &k[1], CUDA, 0, 0, &g, why), DDP_ERR_INVALID_ARG);
  ck_assert_str_eq(why, "comm select: rank 0 outside a world of 0");
  ck_assert_int_eq(select_on(k, 3, &k[1], CUDA, -1, 2, &g, why), DDP_ERR_INVALID_ARG);
  ck_assert_str_eq(why, "comm select: rank -1 outside a world of 2");
  ck_assert_int_eq(select_on(k, 3, &k[1], CUDA, 2, 2, &g, why), DDP_ERR_INVALID_ARG);
  ck_assert_str_eq(why, "comm select: rank 2 outside a world of 2");
  ck_assert_int_eq(select_on(k, 3, &k[1], (ddp_device_kind_t)-1, 0, 2, &g, why),
                   DDP_ERR_INVALID_ARG);
  ck_assert_str_eq(why, "comm select: memory kind -1 outside [0, 32)");
  ck_assert_int_eq(select_on(k, 3, &k[1], (ddp_device_kind_t)DDP_COMM_MEMORY_KINDS, 0, 2, &g, why),
                   DDP_ERR_INVALID_ARG);
  ck_assert_str_eq(why, "comm select: memory kind 32 outside [0, 32)");
  /* the host entry must be a host communicator this build has */
  ddp_comm_caps_t host = k[1];
  host.built = 0;
  ck_assert_int_eq(select_on(k, 3, &host, CUDA, 0, 2, &g, why), DDP_ERR_INVALID_ARG);
  ck_assert_str_eq(why, "comm select: 'mpi' is not a built host communicator");
  ck_assert_int_eq(select_on(k, 3, &k[2], CUDA, 0, 2, &g, why), DDP_ERR_INVALID_ARG);
  ck_assert_str_eq(why, "comm select: 'nccl' is not a built host communicator");
  host = k[2];
  host.kind = NULL;
  ck_assert_int_eq(select_on(k, 3, &host, CUDA, 0, 2, &g, why), DDP_ERR_INVALID_ARG);
  ck_assert_str_eq(why, "comm select: '(unnamed)' is not a built host communicator");
  /* bad input with no room for the message: the status alone */
  ck_assert_int_eq(ddp_comm_select_for_memory(k, 3, NULL, CUDA, 0, 2, &g, NULL, 0),
                   DDP_ERR_INVALID_ARG);
}
END_TEST

/* The backend of ddp_comm_create_for_backend without a GPU behind it: a
 * CUDA-kind backend with no state, which only selection ever looks at (a
 * device communicator given it refuses it on every rank alike). */
static const ddp_backend_ops_t k_fake_cuda_ops = {.name = "fake-cuda",
                                                  .kind = DDP_DEVICE_KIND_CUDA};

START_TEST(test_comm_create_for_backend_by_what_reads_the_memory) {
  ddp_comm_t *c = open_comm(_i, 0);
  if (!c) return;
  /* The CPU backend, one rank or several: the host communicator serves. */
  ddp_backend_t *cpu = ddp_test_cpu_backend();
  ddp_comm_t *grad = c;
  const ddp_status_t e_cpu = ddp_comm_create_for_backend(&g_dist, cpu, c, &grad);
  ddp_backend_destroy(cpu);
  ck_assert_int_eq(e_cpu, DDP_OK);
  ck_assert_ptr_null(grad);
  /* CUDA memory: whatever the pure selection over this build's registry
   * says, and the one-line error when it says nothing can. */
  ddp_backend_t fake = {.ops = &k_fake_cuda_ops, .device = 0};
  ddp_comm_caps_t kinds[8], host;
  const size_t n = ddp_comm_kinds(kinds, 8);
  ck_assert_int_eq(ddp_comm_get_caps(c, &host), DDP_OK);
  const ddp_comm_caps_t *want = NULL;
  const ddp_status_t expect = ddp_comm_select_for_memory(kinds, n, &host, DDP_DEVICE_KIND_CUDA,
                                                         g_dist.rank, g_dist.world, &want, NULL, 0);
  ddp_test_log_start();
  grad = c;
  const ddp_status_t e_gpu = ddp_comm_create_for_backend(&g_dist, &fake, c, &grad);
  char *log = ddp_test_log_stop();
  close_comm();
  ck_assert_ptr_null(grad);
  if (g_dist.world == 1 && strcmp(host.kind, "self") == 0) {
    ck_assert_int_eq(expect, DDP_OK); /* one rank: "self" reads any memory */
    ck_assert_ptr_null(want);
  }
  if (expect != DDP_OK) {
    ck_assert_int_eq(e_gpu, expect);
    ddp_assert_contains(log,
                        "ranks on the CUDA backend need a communicator that reads CUDA memory");
    ddp_assert_contains(log, "Run a single rank per GPU job, or --device cpu");
  } else if (want) {
    /* it did create the device communicator, which refused the stateless
     * backend on every rank */
    ck_assert_int_ne(e_gpu, DDP_OK);
    ddp_assert_contains(log, "needs the CUDA backend in its config");
    ddp_assert_contains(log, "got fake-cuda");
  } else {
    ck_assert_int_eq(e_gpu, DDP_OK);
  }
  free(log);
}
END_TEST

START_TEST(test_comm_create_for_backend_rejects_bad_input) {
  ddp_comm_t *c = open_comm(0, 0);
  ddp_backend_t *cpu = ddp_test_cpu_backend();
  ddp_backend_t bare = {.ops = NULL};
  ddp_dist_t other_world = g_dist, other_rank = g_dist;
  other_world.world += 1;
  other_rank.rank += 1;
  ddp_comm_t *g[7] = {c, c, c, c, c, c, c};
  ddp_status_t e[7];
  ddp_test_log_start();
  e[0] = ddp_comm_create_for_backend(NULL, cpu, c, &g[0]);
  e[1] = ddp_comm_create_for_backend(&g_dist, NULL, c, &g[1]);
  e[2] = ddp_comm_create_for_backend(&g_dist, cpu, NULL, &g[2]);
  e[3] = ddp_comm_create_for_backend(&g_dist, cpu, c, NULL);
  e[4] = ddp_comm_create_for_backend(&g_dist, &bare, c, &g[4]);
  e[5] = ddp_comm_create_for_backend(&other_world, cpu, c, &g[5]);
  e[6] = ddp_comm_create_for_backend(&other_rank, cpu, c, &g[6]);
  char *log = ddp_test_log_stop();
  ddp_backend_destroy(cpu);
  close_comm();
  for (int i = 0; i < 7; ++i) {
    ck_assert_int_eq(e[i], DDP_ERR_INVALID_ARG);
    if (i != 3) ck_assert_ptr_null(g[i]);
  }
  ddp_assert_contains(log, "comm create_for_backend: NULL argument");
  char want[160];
  snprintf(want, sizeof want,
           "comm create_for_backend: the host communicator is rank %d of %d, the job rank %d of %d",
           g_dist.rank, g_dist.world, g_dist.rank, g_dist.world + 1);
  ddp_assert_contains(log, want);
  snprintf(want, sizeof want,
           "comm create_for_backend: the host communicator is rank %d of %d, the job rank %d of %d",
           g_dist.rank, g_dist.world, g_dist.rank + 1, g_dist.world);
  ddp_assert_contains(log, want);
  free(log);
}
END_TEST

/* ddp_comm_choose decides from this build's registry exactly what the
 * table of the same build (MPI and NCCL built or not, the library's
 * CUDA-awareness) decides. */
START_TEST(test_comm_choose_reads_the_registry) {
  const int nccl = ddp_comm_kind_built("nccl"), aware = ddp_comm_mpi_cuda_aware();
  ddp_comm_caps_t k[3];
  fake_kinds(k, nccl, aware);
  k[1].built = have_mpi();
  const ddp_comm_gpu_probe_t own[4] = {gpu(0, "n0"), gpu(1, "n0"), gpu(0, "n1"), gpu(1, "n1")};
  const ddp_comm_gpu_probe_t shared[3] = {gpu(0, "n0"), gpu(0, "n1"), gpu(0, "n0")};
  const ddp_comm_gpu_probe_t missing[3] = {gpu(0, "n0"), no_gpu("n1", "none"), gpu(1, "n0")};
  const ddp_comm_gpu_probe_t *sets[3] = {own, shared, missing};
  const int worlds[3] = {4, 3, 3};
  const char *devices[3] = {"auto", "cuda", "cpu"};
  for (int s = 0; s < 3; ++s) {
    for (int d = 0; d < 3; ++d) {
      ddp_comm_choice_t a, b;
      ddp_comm_choose(devices[d], worlds[s], sets[s], &a);
      ddp_comm_choose_from(k, 3, devices[d], worlds[s], sets[s], &b);
      ck_assert_int_eq(a.status, b.status);
      ck_assert_str_eq(a.device, b.device);
      ck_assert_str_eq(a.message, b.message);
      ck_assert_int_eq(a.grad_comm == NULL, b.grad_comm == NULL);
      if (a.grad_comm) ck_assert_str_eq(a.grad_comm, b.grad_comm);
    }
  }
  ddp_comm_choice_t ch;
  ddp_comm_choose("cuda", 4, own, &ch);
  if (nccl) {
    ck_assert_ptr_nonnull(ch.grad_comm);
    ck_assert_str_eq(ch.grad_comm, "nccl");
  } else {
    ck_assert_ptr_null(ch.grad_comm);
  }
}
END_TEST

START_TEST(test_comm_choose_from_other_tables_and_bad_input) {
  ddp_comm_choice_t ch;
  ddp_comm_caps_t k[3];
  const ddp_comm_gpu_probe_t own[2] = {gpu(0, "n0"), gpu(1, "n0")};
  const ddp_comm_gpu_probe_t shared[3] = {gpu(0, "n0"), gpu(0, "n1"), gpu(0, "n0")};
  /* a NULL table with kinds in it */
  ddp_comm_choose_from(NULL, 2, "cuda", 2, own, &ch);
  ck_assert_int_eq(ch.status, DDP_ERR_INVALID_ARG);
  ck_assert_ptr_null(ch.grad_comm);
  ddp_assert_contains(ch.message, "comm choose: NULL capability table of 2 kinds");
  /* nowhere to write: nothing happens */
  fake_kinds(k, 1, 0);
  ddp_comm_choose_from(k, 3, "cuda", 2, own, NULL);
  /* an empty table: nothing for CUDA memory and nothing for several ranks */
  ddp_comm_choose_from(NULL, 0, "cuda", 2, own, &ch);
  ck_assert_int_eq(ch.status, DDP_ERR_UNSUPPORTED);
  ddp_assert_contains(ch.message,
                      "this build has no communicator for CUDA memory and no communicator for "
                      "several ranks");
  ddp_comm_choose_from(NULL, 0, "auto", 2, own, &ch);
  ck_assert_int_eq(ch.status, DDP_OK);
  ck_assert_str_eq(ch.device, "cpu");
  ddp_assert_contains(ch.message, "every rank trains on the CPU with the host communicator");
  /* a device communicator that needs no GPU per rank takes a shared one */
  fake_kinds(k, 1, 0);
  k[2].device_per_rank = 0;
  ddp_comm_choose_from(k, 3, "cuda", 3, shared, &ch);
  ck_assert_int_eq(ch.status, DDP_OK);
  ck_assert_ptr_eq(ch.grad_comm, k[2].kind);
  /* one for a single rank is none for the job: the CUDA-aware MPI serves */
  fake_kinds(k, 1, 1);
  k[2].multi_rank = 0;
  ddp_comm_choose_from(k, 3, "cuda", 2, own, &ch);
  ck_assert_int_eq(ch.status, DDP_OK);
  ck_assert_str_eq(ch.device, "cuda");
  ck_assert_ptr_null(ch.grad_comm);
  /* messages name the kinds as the table labels them */
  fake_kinds(k, 0, 0);
  k[1].label = "XMPI";
  k[2].label = "XCCL";
  ddp_comm_choose_from(k, 3, "auto", 2, own, &ch);
  ck_assert_str_eq(ch.device, "cpu");
  ddp_assert_contains(ch.message,
                      "this build has no XCCL communicator and the XMPI library is not CUDA-aware");
  ddp_assert_contains(ch.message, "every rank trains on the CPU with the XMPI communicator");
  fake_kinds(k, 1, 0);
  k[2].label = "XCCL";
  ddp_comm_choose_from(k, 3, "auto", 3, shared, &ch);
  ddp_assert_contains(ch.message, "would share cuda:0, and XCCL needs a GPU per rank");
  /* an entry without a label is named by its kind */
  fake_kinds(k, 0, 0);
  k[2].label = NULL;
  ddp_comm_choose_from(k, 3, "cuda", 2, own, &ch);
  ck_assert_int_eq(ch.status, DDP_ERR_UNSUPPORTED);
  ddp_assert_contains(ch.message, "this build has no nccl communicator");
}
END_TEST

static Suite *comm_suite(void) {
  Suite *s = suite_create("comm");
  TCase *tc = tcase_create("collectives");
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_comm_create_reports_kind_rank_world, 0, N_CONFIGS);
  tcase_add_loop_test(tc, test_comm_allreduce_f32_exact_sums_odd_and_zero_counts, 0, N_CONFIGS);
  tcase_add_loop_test(tc, test_comm_allreduce_i32_bf16_f16, 0, N_CONFIGS);
  tcase_add_loop_test(tc, test_comm_many_in_flight_waited_out_of_order, 0, N_CONFIGS);
  tcase_add_loop_test(tc, test_comm_test_polls_to_completion, 0, N_CONFIGS);
  tcase_add_loop_test(tc, test_comm_broadcast_from_last_rank, 0, N_CONFIGS);
  tcase_add_loop_test(tc, test_comm_allgather_orders_blocks_by_rank, 0, N_CONFIGS);
  tcase_add_loop_test(tc, test_comm_reduce_scatter_sums_each_rank_block, 0, N_CONFIGS);
  tcase_add_loop_test(tc, test_comm_barrier_waits_for_every_rank, 0, N_CONFIGS);
  tcase_add_loop_test(tc, test_comm_stats_count_calls_and_bytes, 0, N_CONFIGS);
  tcase_add_loop_test(tc, test_comm_destroy_completes_outstanding_work, 0, N_CONFIGS);
  tcase_add_loop_test(tc, test_comm_watchdog_names_a_collective_that_does_not_complete, 0,
                      N_CONFIGS);
  suite_add_tcase(s, tc);

  tc = tcase_create("errors");
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_add_loop_test(tc, test_comm_pool_exhaustion_is_an_error_not_a_hang, 0, N_CONFIGS);
  tcase_add_loop_test(tc, test_comm_bad_handles_are_errors, 0, N_CONFIGS);
  tcase_add_loop_test(tc, test_comm_bad_arguments_are_clear_errors, 0, N_CONFIGS);
  tcase_add_test(tc, test_comm_create_rejects_bad_config);
  tcase_add_test(tc, test_comm_thread_progress_needs_thread_multiple);
  tcase_add_test(tc, test_comm_kind_built_names_this_build);
  tcase_add_test(tc, test_comm_nccl_needs_the_cuda_backend);
  suite_add_tcase(s, tc);

  tc = tcase_create("choose");
  tcase_add_test(tc, test_comm_choose_world_one_and_cpu_keep_the_request);
  tcase_add_test(tc, test_comm_choose_every_rank_on_its_gpu_gets_nccl);
  tcase_add_test(tc, test_comm_choose_a_rank_without_gpu_moves_everyone_to_the_cpu);
  tcase_add_test(tc, test_comm_choose_long_lists_are_cut_with_the_count);
  tcase_add_test(tc, test_comm_choose_shared_gpu_or_no_reducer);
  tcase_add_test(tc, test_comm_choose_reads_the_registry);
  tcase_add_test(tc, test_comm_choose_from_other_tables_and_bad_input);
  suite_add_tcase(s, tc);

  tc = tcase_create("capabilities");
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_add_test(tc, test_comm_kinds_declare_this_build);
  tcase_add_loop_test(tc, test_comm_get_caps_of_a_host_communicator, 0, N_CONFIGS);
  tcase_add_test(tc, test_comm_select_for_memory_by_capability);
  tcase_add_test(tc, test_comm_select_for_memory_rejects_bad_input);
  tcase_add_loop_test(tc, test_comm_create_for_backend_by_what_reads_the_memory, 0, N_CONFIGS);
  tcase_add_test(tc, test_comm_create_for_backend_rejects_bad_input);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv) {
  LSAN_DISABLE();
  const ddp_status_t init = ddp_dist_init(&argc, &argv, &g_dist);
  LSAN_ENABLE();
  if (init != DDP_OK) {
    fprintf(stderr, "check_comm: ddp_dist_init failed\n");
    return 99;
  }
  SRunner *sr = srunner_create(comm_suite());
  srunner_set_fork_status(sr, CK_NOFORK); /* no fork after MPI_Init */
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  /* Ranks agree: one rank's failure fails them all. */
  double failures = failed;
  const ddp_status_t st = ddp_dist_sum_double(&g_dist, &failures);
  if (st == DDP_OK && failures > 0 && failed == 0)
    printf("check_comm: rank %d passed, but %.0f test(s) failed on other ranks\n", g_dist.rank,
           failures);
  LSAN_DISABLE();
  ddp_dist_finalize(&g_dist);
  LSAN_ENABLE();
  return st == DDP_OK && failures == 0 ? 0 : 1;
}
