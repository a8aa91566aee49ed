/* How much gradient all-reduce hides behind compute, per MPI progress mode.
 *
 * Each rank imitates a backward pass: `chunks` slices of sgemm work (about
 * chunk_ms each, like layers), and after a chunk the buckets that became
 * ready are all-reduced asynchronously, with ddp_comm_progress() between
 * chunks as the reducer calls it; then it waits for every bucket. Per mode:
 *   compute   the chunks alone, then a barrier (a step ends in step);
 *   comm      the bucket all-reduces alone (all issued, then all waited);
 *   combined  both, overlapped as above;
 *   exposed   combined - compute: the communication nobody hid;
 *   overlap   1 - exposed / comm: the fraction of comm hidden (1 = all,
 *             0 = none, below 0 = overlapping made the step slower than
 *             compute + comm back to back).
 * Each figure is the median over passes on a rank, then the mean over ranks.
 * Other load on a shared machine comes in bursts, so the passes of both
 * modes interleave, a combined pass runs right after its compute pass, and
 * exposed is the median of those pairs' differences, not a difference of
 * medians. Usage (under mpirun; see bench/comm_overlap.sh):
 *   comm_overlap [grad_mb [buckets [chunks [chunk_ms [passes]]]]] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddptrain/backend.h"
#include "comm/comm.h"
#include "runtime/dist.h"

#include "bench_timing.h"

enum { MAX_ITERS = 64 };
enum { COMPUTE = 0, COMM = 1, COMBINED = 2 }; /* the kinds of pass */

/* Median of n values; v is left as it was. */
static double median(const double *v, int n) {
  double s[MAX_ITERS];
  memcpy(s, v, (size_t)n * sizeof *s);
  return bench_median(s, n);
}

typedef struct bench {
  ddp_dist_t dist;
  ddp_backend_t *be;
  ddp_gemm_t gemm; /* one product; a chunk is `reps` of them */
  int reps;
  float *grad;
  size_t grad_n;
  int buckets, chunks, iters;
} bench_t;

static void die(const bench_t *b, const char *what) {
  fprintf(stderr, "comm_overlap: %s failed\n", what);
  ddp_dist_abort(&b->dist, 1);
}

static void compute_chunk(bench_t *b) {
  for (int r = 0; r < b->reps; ++r)
    if (ddp_backend_gemm(b->be, &b->gemm, NULL) != DDP_OK) die(b, "gemm");
}

/* Bucket j covers [j*n/B, (j+1)*n/B) and becomes ready after chunk
 * ready_after(j), spreading the buckets evenly over the pass. */
static int ready_after(const bench_t *b, int j) {
  return (int)((long)(j + 1) * b->chunks / b->buckets) - 1;
}

static void issue_bucket(bench_t *b, ddp_comm_t *c, int j, ddp_comm_handle_t *h) {
  const size_t lo = b->grad_n * (size_t)j / (size_t)b->buckets;
  const size_t hi = b->grad_n * (size_t)(j + 1) / (size_t)b->buckets;
  if (ddp_comm_allreduce_sum(c, b->grad + lo, hi - lo, DDP_DTYPE_F32, NULL, &h[j]) != DDP_OK)
    die(b, "allreduce");
}

static void wait_all(bench_t *b, ddp_comm_t *c, ddp_comm_handle_t *h) {
  for (int j = 0; j < b->buckets; ++j)
    if (ddp_comm_wait(c, h[j]) != DDP_OK) die(b, "wait");
}

/* One pass of a kind (COMPUTE, COMM, COMBINED), in ms. */
static double pass(bench_t *b, ddp_comm_t *c, int what, ddp_comm_handle_t *h) {
  if (ddp_comm_barrier(c) != DDP_OK) die(b, "barrier");
  const double t0 = bench_now_ms();
  if (what == COMM) {
    for (int j = 0; j < b->buckets; ++j) issue_bucket(b, c, j, h);
    wait_all(b, c, h);
    return bench_now_ms() - t0;
  }
  int next = 0;
  for (int k = 0; k < b->chunks; ++k) {
    compute_chunk(b);
    if (what == COMBINED) {
      while (next < b->buckets && ready_after(b, next) <= k) issue_bucket(b, c, next++, h);
      ddp_comm_progress(c);
    }
  }
  if (what == COMBINED) wait_all(b, c, h);
  /* A training step ends with every rank in step, so compute-only passes
   * also end at a barrier: waiting for a slower rank is not exposed comm. */
  if (what == COMPUTE && ddp_comm_barrier(c) != DDP_OK) die(b, "barrier");
  return bench_now_ms() - t0;
}

/* The mean over ranks of this rank's median. */
static double rank_mean_median(bench_t *b, const double *t) {
  double m = median(t, b->iters);
  if (ddp_dist_sum_double(&b->dist, &m) != DDP_OK) die(b, "sum");
  return m / b->dist.world;
}

int main(int argc, char **argv) {
  bench_t b = {0};
  if (ddp_dist_init(&argc, &argv, &b.dist) != DDP_OK) return 1;
  const double grad_mb = argc > 1 ? atof(argv[1]) : 20.0;
  b.buckets = argc > 2 ? atoi(argv[2]) : 20;
  b.chunks = argc > 3 ? atoi(argv[3]) : 20;
  const double chunk_ms = argc > 4 ? atof(argv[4]) : 5.0;
  b.iters = argc > 5 ? atoi(argv[5]) : 10;
  if (grad_mb <= 0 || b.buckets < 1 || b.chunks < 1 || chunk_ms <= 0 || b.iters < 1 ||
      b.iters > MAX_ITERS) {
    fprintf(stderr, "usage: comm_overlap [grad_mb [buckets [chunks [chunk_ms [passes<=64]]]]]\n");
    return 2;
  }

  const ddp_backend_config_t bcfg = {.device = "cpu", .threads = 1};
  if (ddp_backend_create(&bcfg, &b.be) != DDP_OK) die(&b, "backend_create");
  enum { N = 256 }; /* ~0.3 ms a product: chunks can be sized finely */
  float *m = calloc(3 * N * N, sizeof *m);
  for (int i = 0; i < 2 * N * N; ++i) m[i] = (float)(i % 17) * 0.01f;
  b.gemm = ddp_gemm_packed_f32(N, N, N, m, m + N * N, m + 2 * N * N);
  /* Products per chunk, the same on every rank, from the fastest of 10
   * windows (other load on the machine only ever slows a window). */
  for (int i = 0; i < 10; ++i) ddp_backend_gemm(b.be, &b.gemm, NULL);
  double per = 1e30;
  for (int w = 0; w < 10; ++w) {
    const double t0 = bench_now_ms();
    for (int i = 0; i < 20; ++i) ddp_backend_gemm(b.be, &b.gemm, NULL);
    const double dt = (bench_now_ms() - t0) / 20;
    if (dt < per) per = dt;
  }
  if (ddp_dist_sum_double(&b.dist, &per) != DDP_OK) die(&b, "sum");
  per /= b.dist.world;
  b.reps = (int)(chunk_ms / per + 0.5);
  if (b.reps < 1) b.reps = 1;

  b.grad_n = (size_t)(grad_mb * 1024 * 1024 / sizeof(float));
  b.grad = calloc(b.grad_n, sizeof *b.grad);
  ddp_comm_handle_t *h = calloc((size_t)b.buckets, sizeof *h);
  if (!m || !b.grad || !h) die(&b, "calloc");

  if (b.dist.rank == 0) {
    printf(
        "ranks %d, %.1f MB of fp32 gradients in %d buckets of %.2f MB, %d chunks x %d "
        "sgemm %dx%dx%d (%.2f ms each, %.1f ms a chunk), medians of %d passes\n",
        b.dist.world, grad_mb, b.buckets, grad_mb / b.buckets, b.chunks, b.reps, N, N, N, per,
        per * b.reps, b.iters);
    printf("| progress | compute ms | comm ms | combined ms | exposed comm ms | overlap |\n");
    printf("|---|---|---|---|---|---|\n");
  }
  /* Both communicators exist for the whole run and the passes interleave
   * (mode order alternating between iterations), so a change in machine
   * load hits both modes alike instead of whichever ran second. An idle
   * progress thread sleeps on a condition variable and costs nothing. */
  enum { MODES = 2 };
  static const char *const modes[MODES] = {"thread", "test"};
  ddp_comm_t *comms[MODES] = {NULL};
  for (int k = 0; k < MODES; ++k) {
    const ddp_comm_config_t cfg = {.kind = "mpi", .progress = modes[k], .max_inflight = b.buckets};
    if (ddp_comm_create(&b.dist, &cfg, &comms[k]) != DDP_OK) die(&b, "comm_create");
    for (int what = 0; what < 3; ++what) pass(&b, comms[k], what, h); /* warm-up */
  }
  static const int order[3] = {COMPUTE, COMBINED, COMM}; /* pairs back to back */
  static double t[MODES][3][MAX_ITERS], exposed[MODES][MAX_ITERS];
  for (int i = 0; i < b.iters; ++i)
    for (int kk = 0; kk < MODES; ++kk) {
      const int k = i % 2 ? MODES - 1 - kk : kk;
      for (int w = 0; w < 3; ++w) t[k][order[w]][i] = pass(&b, comms[k], order[w], h);
      exposed[k][i] = t[k][COMBINED][i] - t[k][COMPUTE][i];
    }
  for (int k = 0; k < MODES; ++k) {
    const double compute = rank_mean_median(&b, t[k][COMPUTE]);
    const double comm = rank_mean_median(&b, t[k][COMM]);
    const double combined = rank_mean_median(&b, t[k][COMBINED]);
    const double exp_ms = rank_mean_median(&b, exposed[k]);
    if (b.dist.rank == 0)
      printf("| %s | %.1f | %.1f | %.1f | %.1f | %.2f |\n", modes[k], compute, comm, combined,
             exp_ms, comm > 0 ? 1.0 - exp_ms / comm : 0.0);
  }
  for (int k = 0; k < MODES; ++k) ddp_comm_destroy(comms[k]);
  free(h);
  free(b.grad);
  free(m);
  ddp_backend_destroy(b.be);
  ddp_dist_finalize(&b.dist);
  return 0;
}
