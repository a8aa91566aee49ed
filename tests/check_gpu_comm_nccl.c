/* GPU suite for the NCCL communicator (src/comm/comm_nccl.c), one rank.
 *
 * Exit 77 (SKIP) without a usable GPU or in a build without the NCCL
 * communicator. It runs as one process (an MPI singleton through
 * ddp_dist_init, which NCCL's bootstrap needs), so a sum is the rank's own
 * data: these tests prove the path (device buffers, every dtype, the stream
 * ordering, the host waits, the timeout and abort), not the arithmetic
 * across ranks, which tests/test_gpu_nccl.sh checks on two GPUs through the
 * trainer. Stream ordering is made observable with an out-of-place
 * allgather (world 1: a real copy on the comm stream) between fills on the
 * compute stream. NCCL's asynchronous errors cannot be provoked on one rank:
 * that path is untested here. Tests run in process (CK_NOFORK): neither a
 * CUDA context nor MPI survives fork. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ddptrain/backend.h"
#include "ddptrain/dtype.h"
#include "ddptrain/log.h"
#include "backend/cuda/cuda_impl.h"
#include "check_util.h"
#include "comm/comm.h"
#include "runtime/dist.h"

static ddp_dist_t g_dist;
static ddp_backend_t *g_be; /* the CUDA backend */
static ddp_comm_t *g_comm;  /* the test's communicator; teardown frees it after a failure */

static void open_nccl(int max_inflight, double timeout_s) {
  const ddp_comm_config_t cfg = {
      .kind = "nccl", .be = g_be, .max_inflight = max_inflight, .timeout_s = timeout_s};
  ck_assert_ptr_null(g_comm);
  ck_assert_int_eq(ddp_comm_create(&g_dist, &cfg, &g_comm), DDP_OK);
  ck_assert_ptr_nonnull(g_comm);
}

static void close_comm(void) {
  ddp_comm_destroy(g_comm);
  g_comm = NULL;
}

static void teardown(void) {
  if (ddp_test_log_file) free(ddp_test_log_stop());
  close_comm();
  ddp_backend_sync(g_be, NULL);
}

static void *dev_alloc(size_t bytes) {
  void *p = NULL;
  ck_assert_int_eq(ddp_backend_alloc(g_be, bytes ? bytes : 1, &p), DDP_OK);
  return p;
}

static void to_dev(void *dst, const void *src, size_t bytes) {
  ck_assert_int_eq(ddp_backend_copy(g_be, dst, src, bytes, DDP_COPY_KIND_HOST_TO_DEVICE, NULL),
                   DDP_OK);
}

static void to_host(void *dst, const void *src, size_t bytes) {
  ck_assert_int_eq(ddp_backend_copy(g_be, dst, src, bytes, DDP_COPY_KIND_DEVICE_TO_HOST, NULL),
                   DDP_OK);
  ck_assert_int_eq(ddp_backend_sync(g_be, NULL), DDP_OK);
}

/* Element i's bits in `dtype`: varied, never all-equal, finite in every type. */
static void fill_pattern(void *buf, size_t n, ddp_dtype_t dtype, unsigned salt) {
  for (size_t i = 0; i < n; ++i) {
    const float v = (float)((int)((i * 7 + salt) % 29) - 14) * 0.25f;
    switch (dtype) {
      case DDP_DTYPE_F32:
        ((float *)buf)[i] = v;
        break;
      case DDP_DTYPE_I32:
        ((int32_t *)buf)[i] = (int32_t)(i * 2654435761u + salt);
        break;
      case DDP_DTYPE_BF16:
        ((uint16_t *)buf)[i] = ddp_f32_to_bf16(v);
        break;
      case DDP_DTYPE_F16:
        ((uint16_t *)buf)[i] = ddp_f32_to_f16(v);
        break;
      default:
        ck_abort_msg("unexpected dtype");
    }
  }
}

START_TEST(test_gpu_nccl_reports_kind_and_rank) {
  open_nccl(0, 0);
  ck_assert_str_eq(ddp_comm_name(g_comm), "nccl");
  ck_assert_str_eq(ddp_comm_progress_mode(g_comm), "stream");
  ck_assert_int_eq(ddp_comm_reads_device_memory(g_comm), 1);
  ck_assert_int_eq(ddp_comm_rank(g_comm), 0);
  ck_assert_int_eq(ddp_comm_world(g_comm), 1);
  close_comm();
}
END_TEST

/* Capabilities on a real GPU: NCCL declares itself a device communicator
 * of CUDA memory only, cannot stand in for the host communicator of a
 * selection, and one rank on the CUDA backend gets no device communicator
 * ("self" reads any memory). */
START_TEST(test_gpu_nccl_selected_by_capability) {
  open_nccl(0, 0);
  ddp_comm_caps_t caps;
  ck_assert_int_eq(ddp_comm_get_caps(g_comm, &caps), DDP_OK);
  ck_assert_str_eq(caps.kind, "nccl");
  ck_assert_int_eq(caps.built, 1);
  ck_assert_int_eq(caps.role, DDP_COMM_ROLE_DEVICE);
  ck_assert_uint_eq(caps.reads, DDP_COMM_READS(DDP_DEVICE_KIND_CUDA));
  ddp_comm_t *grad = NULL;
  ddp_test_log_start();
  const ddp_status_t e_dev = ddp_comm_create_for_backend(&g_dist, g_be, g_comm, &grad);
  char *log = ddp_test_log_stop();
  close_comm();
  ck_assert_int_eq(e_dev, DDP_ERR_INVALID_ARG);
  ck_assert_ptr_null(grad);
  ddp_assert_contains(log, "comm select: 'nccl' is not a built host communicator");
  free(log);
  ddp_comm_t *host = NULL;
  ck_assert_int_eq(ddp_comm_create(&g_dist, NULL, &host), DDP_OK);
  grad = host;
  const ddp_status_t e_one = ddp_comm_create_for_backend(&g_dist, g_be, host, &grad);
  ddp_comm_destroy(host);
  ck_assert_int_eq(e_one, DDP_OK);
  ck_assert_ptr_null(grad);
}
END_TEST

/* One rank: the sum is the input, bit for bit, in every dtype and size
 * (odd sizes, 0 with a NULL buffer); both ways of completing. */
START_TEST(test_gpu_nccl_allreduce_every_dtype_in_place) {
  open_nccl(0, 0);
  static const ddp_dtype_t types[] = {DDP_DTYPE_F32, DDP_DTYPE_I32, DDP_DTYPE_BF16, DDP_DTYPE_F16};
  static const size_t counts[] = {1, 3, 1001, 65537, 1048579};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; ++t) {
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; ++k) {
      const size_t n = counts[k], bytes = n * ddp_dtype_size(types[t]);
      void *in = malloc(bytes), *out = malloc(bytes);
      void *d = dev_alloc(bytes);
      fill_pattern(in, n, types[t], (unsigned)(t * 31 + k));
      memset(out, 0xA5, bytes);
      to_dev(d, in, bytes);
      ddp_comm_handle_t h = DDP_COMM_HANDLE_NONE;
      ck_assert_int_eq(ddp_comm_allreduce_sum(g_comm, d, n, types[t], NULL, &h), DDP_OK);
      ck_assert_int_ge(h, 0);
      if (k % 2)
        ck_assert_int_eq(ddp_comm_wait(g_comm, h), DDP_OK);
      else
        ck_assert_int_eq(ddp_comm_stream_wait(g_comm, h, NULL), DDP_OK);
      to_host(out, d, bytes);
      ck_assert_msg(memcmp(in, out, bytes) == 0, "%s x %zu changed", ddp_dtype_name(types[t]), n);
      ddp_backend_free(g_be, d);
      free(in);
      free(out);
    }
  }
  /* count 0: an empty collective, NULL allowed; h NULL completes at once */
  ddp_comm_handle_t h;
  ck_assert_int_eq(ddp_comm_allreduce_sum(g_comm, NULL, 0, DDP_DTYPE_F32, NULL, &h), DDP_OK);
  ck_assert_int_eq(ddp_comm_wait(g_comm, h), DDP_OK);
  float *d = dev_alloc(4 * sizeof(float));
  const float x[4] = {1.5f, -2.0f, 3.25f, 0.0f};
  float y[4] = {0};
  to_dev(d, x, sizeof x);
  ck_assert_int_eq(ddp_comm_allreduce_sum(g_comm, d, 4, DDP_DTYPE_F32, NULL, NULL), DDP_OK);
  to_host(y, d, sizeof y);
  ck_assert_int_eq(memcmp(x, y, sizeof x), 0);
  ddp_backend_free(g_be, d);
  ddp_comm_stats_t s;
  ddp_comm_get_stats(g_comm, &s);
  ck_assert_int_eq(s.n_allreduce, 4 * 5 + 2);
  close_comm();
}
END_TEST

START_TEST(test_gpu_nccl_broadcast_and_in_place_allgather_keep_the_data) {
  open_nccl(0, 0);
  static const size_t sizes[] = {1, 7, 4096, 1048576 + 3};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
    const size_t n = sizes[k];
    unsigned char *in = malloc(n), *out = malloc(n);
    for (size_t i = 0; i < n; ++i) in[i] = (unsigned char)(i * 13 + k);
    unsigned char *d = dev_alloc(n);
    to_dev(d, in, n);
    ddp_comm_handle_t h;
    ck_assert_int_eq(ddp_comm_broadcast(g_comm, d, n, 0, NULL, &h), DDP_OK);
    ck_assert_int_eq(ddp_comm_wait(g_comm, h), DDP_OK);
    ck_assert_int_eq(ddp_comm_allgather(g_comm, d, d, n, NULL, &h), DDP_OK); /* in place */
    ck_assert_int_eq(ddp_comm_stream_wait(g_comm, h, NULL), DDP_OK);
    memset(out, 0, n);
    to_host(out, d, n);
    ck_assert_int_eq(memcmp(in, out, n), 0);
    ddp_backend_free(g_be, d);
    free(in);
    free(out);
  }
  ddp_comm_handle_t h;
  ck_assert_int_eq(ddp_comm_broadcast(g_comm, NULL, 0, 0, NULL, &h), DDP_OK);
  ck_assert_int_eq(ddp_comm_wait(g_comm, h), DDP_OK);
  ck_assert_int_eq(ddp_comm_barrier(g_comm), DDP_OK);
  ck_assert_int_eq(ddp_comm_barrier(g_comm), DDP_OK);
  ddp_comm_stats_t s;
  ddp_comm_get_stats(g_comm, &s);
  ck_assert_int_eq(s.n_broadcast, 5);
  ck_assert_int_eq(s.n_allgather, 4);
  ck_assert_int_eq(s.n_barrier, 2);
  close_comm();
}
END_TEST

/* One rank: the reduce-scatter is a copy of the send buffer on the comm
 * stream (ncclReduceScatter), for a 4-byte and a 2-byte dtype; a host
 * receive buffer is refused before anything is issued. */
START_TEST(test_gpu_nccl_reduce_scatter_every_width_and_host_refused) {
  open_nccl(0, 0);
  static const size_t counts[] = {1, 7, 262144 + 5};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; ++k) {
    const size_t n = counts[k];
    float *in = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    uint16_t *in16 = malloc(n * sizeof(uint16_t)), *out16 = malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; ++i) {
      in[i] = (float)(i % 1000) - 500.0f;
      in16[i] = ddp_f32_to_bf16((float)(i % 200));
    }
    float *send = dev_alloc(n * sizeof(float)), *recv = dev_alloc(n * sizeof(float));
    uint16_t *send16 = dev_alloc(n * sizeof(uint16_t)), *recv16 = dev_alloc(n * sizeof(uint16_t));
    to_dev(send, in, n * sizeof(float));
    to_dev(send16, in16, n * sizeof(uint16_t));
    ddp_comm_handle_t h, h16;
    ck_assert_int_eq(ddp_comm_reduce_scatter(g_comm, send, recv, n, DDP_DTYPE_F32, NULL, &h),
                     DDP_OK);
    ck_assert_int_eq(ddp_comm_reduce_scatter(g_comm, send16, recv16, n, DDP_DTYPE_BF16, NULL, &h16),
                     DDP_OK);
    ck_assert_int_eq(ddp_comm_wait(g_comm, h16), DDP_OK);
    ck_assert_int_eq(ddp_comm_wait(g_comm, h), DDP_OK);
    to_host(out, recv, n * sizeof(float));
    to_host(out16, recv16, n * sizeof(uint16_t));
    ck_assert_int_eq(memcmp(in, out, n * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(in16, out16, n * sizeof(uint16_t)), 0);
    ddp_backend_free(g_be, send);
    ddp_backend_free(g_be, recv);
    ddp_backend_free(g_be, send16);
    ddp_backend_free(g_be, recv16);
    free(in);
    free(out);
    free(in16);
    free(out16);
  }
  float host[8] = {0};
  float *d = dev_alloc(sizeof host);
  ddp_test_log_start();
  const ddp_status_t e_host =
      ddp_comm_reduce_scatter(g_comm, d, host, 8, DDP_DTYPE_F32, NULL, NULL);
  char *log = ddp_test_log_stop();
  ddp_comm_stats_t s;
  ddp_comm_get_stats(g_comm, &s);
  ddp_backend_free(g_be, d);
  close_comm();
  ck_assert_int_eq(e_host, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(s.n_reduce_scatter, 6);
  ddp_assert_contains(log, "comm nccl reduce_scatter: the receive buffer");
  ddp_assert_contains(log, "is host memory; the NCCL communicator reads GPU memory only");
  free(log);
}
END_TEST

/* The collective runs after the work queued on the compute stream before
 * it, and what stream_wait() orders after it cannot overtake it: fills on
 * the compute stream around an out-of-place allgather (a 64 MiB copy on the
 * comm stream). A comm stream that did not wait would copy the poison or an
 * earlier fill; a stream_wait that did not order would let the last fill
 * into the copy. Repeated so a lucky schedule cannot hide either. */
START_TEST(test_gpu_nccl_stream_order_fill_gather_wait) {
  open_nccl(0, 0);
  enum { N = 16 * 1024 * 1024, ROUNDS = 5 };
  float *send = dev_alloc(N * sizeof(float)), *recv = dev_alloc(N * sizeof(float));
  float *host = malloc(N * sizeof(float));
  for (int round = 0; round < ROUNDS; ++round) {
    ck_assert_int_eq(g_be->ops->fill(g_be, recv, DDP_DTYPE_F32, -1.0f, N, NULL), DDP_OK);
    ck_assert_int_eq(ddp_backend_sync(g_be, NULL), DDP_OK);
    for (int v = 1; v <= 8; ++v) /* queue enough work that the gather would overtake it */
      ck_assert_int_eq(g_be->ops->fill(g_be, send, DDP_DTYPE_F32, (float)(v + round), N, NULL),
                       DDP_OK);
    ddp_comm_handle_t h;
    ck_assert_int_eq(ddp_comm_allgather(g_comm, send, recv, N * sizeof(float), NULL, &h), DDP_OK);
    ck_assert_int_eq(ddp_comm_stream_wait(g_comm, h, NULL), DDP_OK);
    /* after the wait, on the compute stream: must not reach the copy */
    ck_assert_int_eq(g_be->ops->fill(g_be, send, DDP_DTYPE_F32, 99.0f, N, NULL), DDP_OK);
    ck_assert_int_eq(
        ddp_backend_copy(g_be, host, recv, N * sizeof(float), DDP_COPY_KIND_DEVICE_TO_HOST, NULL),
        DDP_OK);
    ck_assert_int_eq(ddp_backend_sync(g_be, NULL), DDP_OK);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < N; ++i)
      if (host[i] != (float)(8 + round) && bad++ == 0) first = i;
    ck_assert_msg(bad == 0, "round %d: %zu of %d elements wrong, first [%zu] = %g (want %d)", round,
                  bad, N, first, bad ? (double)host[first] : 0.0, 8 + round);
  }
  /* stats: the copies were timed on the device */
  ddp_comm_stats_t s;
  ddp_comm_get_stats(g_comm, &s);
  ck_assert_int_eq(s.n_allgather, ROUNDS);
  ck_assert_int_eq(s.bytes, (int64_t)ROUNDS * N * (int64_t)sizeof(float));
  ck_assert_msg(s.comm_ms > 0.0, "comm_ms %g: the device time was not measured", s.comm_ms);
  free(host);
  ddp_backend_free(g_be, send);
  ddp_backend_free(g_be, recv);
  close_comm();
}
END_TEST

/* test() polls to completion without releasing; wait() then returns at once. */
START_TEST(test_gpu_nccl_test_polls_to_completion) {
  open_nccl(0, 0);
  enum { N = 4 * 1024 * 1024 };
  float *send = dev_alloc(N * sizeof(float)), *recv = dev_alloc(N * sizeof(float));
  ck_assert_int_eq(g_be->ops->fill(g_be, send, DDP_DTYPE_F32, 3.0f, N, NULL), DDP_OK);
  ddp_comm_handle_t h;
  ck_assert_int_eq(ddp_comm_allgather(g_comm, send, recv, N * sizeof(float), NULL, &h), DDP_OK);
  int done = 0, polls = 0;
  while (!done) {
    ck_assert_int_eq(ddp_comm_test(g_comm, h, &done), DDP_OK);
    ck_assert_int_lt(++polls, 100000000);
  }
  /* "not ready" polls leave no error behind for the next kernel launch */
  ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  ck_assert_int_eq(g_be->ops->fill(g_be, send, DDP_DTYPE_F32, 4.0f, N, NULL), DDP_OK);
  ck_assert_int_eq(ddp_comm_test(g_comm, h, &done), DDP_OK); /* still valid: not released */
  ck_assert_int_eq(done, 1);
  ck_assert_int_eq(ddp_comm_wait(g_comm, h), DDP_OK);
  float v = 0.0f;
  to_host(&v, recv + N - 1, sizeof v);
  ck_assert_float_eq(v, 3.0f);
  ddp_backend_free(g_be, send);
  ddp_backend_free(g_be, recv);
  close_comm();
}
END_TEST

/* Misuse is rejected as for every kind (comm.c), plus what only a device
 * communicator can get wrong: host buffers. A rejected call issues nothing. */
START_TEST(test_gpu_nccl_misuse_is_rejected) {
  open_nccl(2, 0);
  float *d = dev_alloc(64 * sizeof(float));
  ddp_comm_handle_t h, h2, h3 = 5;
  ck_assert_int_eq(ddp_comm_allreduce_sum(g_comm, d, 64, DDP_DTYPE_F32, NULL, &h), DDP_OK);
  ck_assert_int_eq(ddp_comm_wait(g_comm, h), DDP_OK);
  ck_assert_int_eq(ddp_comm_allreduce_sum(g_comm, d, 64, DDP_DTYPE_F32, NULL, &h2), DDP_OK);
  ck_assert_int_eq(ddp_comm_stream_wait(g_comm, h2, NULL), DDP_OK);
  float host[64] = {0};
  void *pinned = NULL;
  ck_assert_int_eq(g_be->ops->alloc_host(g_be, 256, &pinned), DDP_OK);
  ddp_comm_stats_t before, after;
  ddp_comm_get_stats(g_comm, &before);
  ddp_test_log_start();
  const ddp_status_t e_double = ddp_comm_wait(g_comm, h);          /* waited already */
  const ddp_status_t e_released = ddp_comm_wait(g_comm, h2);       /* stream_wait released it */
  const ddp_status_t e_sw = ddp_comm_stream_wait(g_comm, h, NULL); /* same */
  const ddp_status_t e_never = ddp_comm_wait(g_comm, 12345);       /* never issued */
  const ddp_status_t e_host = ddp_comm_allreduce_sum(g_comm, host, 64, DDP_DTYPE_F32, NULL, &h3);
  const ddp_status_t e_pinned = ddp_comm_broadcast(g_comm, pinned, 256, 0, NULL, NULL);
  const ddp_status_t e_send = ddp_comm_allgather(g_comm, host, d, 16, NULL, NULL);
  char *log = ddp_test_log_stop();
  ddp_comm_get_stats(g_comm, &after);
  /* the pool is whole again: two collectives in flight at once still work */
  ddp_comm_handle_t a, b, c;
  ck_assert_int_eq(ddp_comm_allreduce_sum(g_comm, d, 64, DDP_DTYPE_F32, NULL, &a), DDP_OK);
  ck_assert_int_eq(ddp_comm_allreduce_sum(g_comm, d, 64, DDP_DTYPE_F32, NULL, &b), DDP_OK);
  ddp_test_log_start();
  const ddp_status_t e_full = ddp_comm_allreduce_sum(g_comm, d, 64, DDP_DTYPE_F32, NULL, &c);
  char *log2 = ddp_test_log_stop();
  ck_assert_int_eq(ddp_comm_wait(g_comm, b), DDP_OK);
  ck_assert_int_eq(ddp_comm_wait(g_comm, a), DDP_OK);
  g_be->ops->free_host(g_be, pinned);
  ddp_backend_free(g_be, d);
  close_comm();
  ck_assert_int_eq(e_double, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(e_released, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(e_sw, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(e_never, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(e_host, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(e_pinned, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(e_send, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(e_full, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(h3, DDP_COMM_HANDLE_NONE);
  ck_assert_int_eq(after.n_allreduce + after.n_broadcast + after.n_allgather,
                   before.n_allreduce + before.n_broadcast + before.n_allgather);
  ddp_assert_contains(log, "is not an outstanding collective");
  ddp_assert_contains(log, "comm nccl allreduce_sum: the data buffer");
  ddp_assert_contains(log, "is host memory; the NCCL communicator reads GPU memory only");
  ddp_assert_contains(log, "comm nccl broadcast: the data buffer");
  ddp_assert_contains(log, "is pinned host memory");
  ddp_assert_contains(log, "comm nccl allgather: the send buffer");
  ddp_assert_contains(log2, "all 2 handles are in flight");
  free(log);
  free(log2);
}
END_TEST

static void CUDART_CB sleep_on_stream(void *arg) {
  const double s = *(const double *)arg;
  const struct timespec ts = {.tv_sec = (time_t)s,
                              .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A collective that cannot finish in time (the compute stream it waits for
 * is held by a 3 s host callback): wait() gives up after the 0.3 s timeout,
 * aborts NCCL and says who, what, how big and why; every later call fails at
 * once with the same cause; destroy does not hang. */
START_TEST(test_gpu_nccl_timeout_aborts_and_later_calls_fail_fast) {
  open_nccl(0, 0.3);
  float *d = dev_alloc(1024 * sizeof(float));
  static const double hold = 3.0;
  ck_assert_int_eq(cudaLaunchHostFunc(ddp_cuda_stream(g_be, NULL), sleep_on_stream, (void *)&hold),
                   cudaSuccess);
  ddp_comm_handle_t h, h2 = 3;
  ck_assert_int_eq(ddp_comm_allreduce_sum(g_comm, d, 1024, DDP_DTYPE_F32, NULL, &h), DDP_OK);
  ddp_test_log_start();
  const double t0 = now_s();
  const ddp_status_t e_wait = ddp_comm_wait(g_comm, h);
  const double waited = now_s() - t0;
  const double t1 = now_s();
  const ddp_status_t e_next = ddp_comm_allreduce_sum(g_comm, d, 1024, DDP_DTYPE_F32, NULL, &h2);
  const ddp_status_t e_barrier = ddp_comm_barrier(g_comm);
  const double refused = now_s() - t1;
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(cudaStreamSynchronize(ddp_cuda_stream(g_be, NULL)), cudaSuccess);
  const double t2 = now_s();
  close_comm();
  const double destroyed = now_s() - t2;
  ddp_backend_free(g_be, d);
  ck_assert_int_eq(e_wait, DDP_ERR_TIMEOUT);
  ck_assert_int_eq(e_next, DDP_ERR_TIMEOUT);
  ck_assert_int_eq(e_barrier, DDP_ERR_TIMEOUT);
  ck_assert_int_eq(h2, DDP_COMM_HANDLE_NONE);
  /* well before the callback ends: neither the wait nor NCCL's abort (on a
   * thread of its own, as it waits for the device) held the caller */
  ck_assert_msg(waited >= 0.3 && waited < 2.0, "wait gave up after %.2f s", waited);
  ck_assert_msg(refused < 0.1, "calls after the abort took %.2f s", refused);
  ck_assert_msg(destroyed < 5.0, "destroy took %.2f s", destroyed);
  /* the watchdog's format: "rank R on HOST", the collective's number */
  ddp_assert_contains(log, "comm nccl: rank 0 on ");
  ddp_assert_contains(log, ": allreduce_sum #1 of 4096 bytes failed: no completion after ");
  ddp_assert_contains(log, " s (timeout 0.3 s); aborting the NCCL communicator");
  ddp_assert_contains(log,
                      "allreduce_sum refused: the communicator was aborted earlier (no "
                      "completion after");
  ddp_assert_contains(log, "barrier refused");
  free(log);
}
END_TEST

static Suite *nccl_suite(void) {
  Suite *s = suite_create("gpu_comm_nccl");
  TCase *tc = tcase_create("collectives");
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_gpu_nccl_reports_kind_and_rank);
  tcase_add_test(tc, test_gpu_nccl_selected_by_capability);
  tcase_add_test(tc, test_gpu_nccl_allreduce_every_dtype_in_place);
  tcase_add_test(tc, test_gpu_nccl_broadcast_and_in_place_allgather_keep_the_data);
  tcase_add_test(tc, test_gpu_nccl_reduce_scatter_every_width_and_host_refused);
  tcase_add_test(tc, test_gpu_nccl_stream_order_fill_gather_wait);
  tcase_add_test(tc, test_gpu_nccl_test_polls_to_completion);
  suite_add_tcase(s, tc);
  tc = tcase_create("errors");
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_gpu_nccl_misuse_is_rejected);
  tcase_add_test(tc, test_gpu_nccl_timeout_aborts_and_later_calls_fail_fast);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv) {
  if (!ddp_comm_kind_built("nccl")) {
    fprintf(stderr, "SKIP: this build has no NCCL communicator\n");
    return 77;
  }
  ddp_backend_config_t cfg = {.device = "cuda"};
  if (ddp_backend_create(&cfg, &g_be) != DDP_OK || !g_be ||
      g_be->ops->kind != DDP_DEVICE_KIND_CUDA) {
    fprintf(stderr, "SKIP: no usable CUDA device\n");
    return 77;
  }
  if (ddp_dist_init(&argc, &argv, &g_dist) != DDP_OK) {
    fprintf(stderr, "check_gpu_comm_nccl: ddp_dist_init failed\n");
    ddp_backend_destroy(g_be);
    return 99;
  }
  SRunner *sr = srunner_create(nccl_suite());
  srunner_set_fork_status(sr, CK_NOFORK); /* no fork after MPI_Init or with a CUDA context */
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  ddp_backend_destroy(g_be);
  ddp_dist_finalize(&g_dist);
  return failed == 0 ? 0 : 1;
}
