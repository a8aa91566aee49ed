/* The gradient reducer on one rank ("self" communicator): bucket layout,
 * launch order and counts, and the errors that catch a model announcing its
 * gradients wrongly; the fused epilogue of a half reduce dtype (scaled
 * widening and the squared norm from per-bucket partials) against the path
 * it replaced. The multi-rank arithmetic of training (SUM, equivalence with
 * one process) is tests/test_ddp.sh's job.
 *
 * The program also runs under mpirun -np 2 (tests/test_reducer_mpi.sh): the
 * one-rank tests then run on every rank as they are, and the epilogue test
 * reduces over the job's communicator (MPI), so the gradients and the norm
 * are checked against the old path on real sums, with an inf on one rank
 * reaching every rank's norm. No fork after MPI_Init (CK_NOFORK); the exit
 * status is nonzero on every rank when any rank failed. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/rng.h"
#include "check_util.h"
#include "comm/comm.h"
#include "optim/optim.h"
#include "runtime/dist.h"
#include "train/bucket_plan.h"
#include "train/reducer.h"
#include "train/zero_layout.h"

/* What MPI_Init and MPI_Finalize allocate and never free is not this
 * suite's leak (see tests/check_comm.c). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define LSAN_DISABLE() __lsan_disable()
#define LSAN_ENABLE() __lsan_enable()
#else
#define LSAN_DISABLE() ((void)0)
#define LSAN_ENABLE() ((void)0)
#endif

/* 6 tensors, 4-byte floats: 100, 50, 300, 1000, 20, 20 elements. */
static const ddp_param_t k_tensors[] = {
    {.offset = 0, .count = 100},    {.offset = 100, .count = 50},  {.offset = 150, .count = 300},
    {.offset = 450, .count = 1000}, {.offset = 1450, .count = 20}, {.offset = 1470, .count = 20}};
enum { N_TENSORS = 6, N_ELEMS = 1490 };

static ddp_dist_t dist = {.rank = 0, .world = 1, .local_rank = 0, .local_size = 1};
static ddp_dist_t g_job; /* the job's ranks (world 1 outside mpirun) */
static ddp_comm_t *comm;
static float grads[N_ELEMS];

static void setup(void) {
  ck_assert_int_eq(ddp_comm_create(&dist, NULL, &comm), DDP_OK);
}

static void teardown(void) {
  ddp_comm_destroy(comm);
  comm = NULL;
}

static ddp_reducer_t *make(double first_bytes, double bytes) {
  ddp_reducer_config_t cfg = {.grads = grads,
                              .tensors = k_tensors,
                              .n_tensors = N_TENSORS,
                              .bucket_bytes = bytes,
                              .first_bucket_bytes = first_bytes};
  ddp_reducer_t *r = NULL;
  ck_assert_int_eq(ddp_reducer_create(comm, &cfg, &r), DDP_OK);
  return r;
}

static int64_t allreduces(void) {
  ddp_comm_stats_t s;
  ddp_comm_get_stats(comm, &s);
  return s.n_allreduce;
}

START_TEST(test_reducer_buckets_tile_the_buffer_with_a_small_first_one) {
  /* first bucket <= 600 bytes (150 floats): tensors 0+1; then <= 5200 bytes
   * (1300 floats): 300 + 1000 fit exactly, the 20s start a new one */
  ddp_reducer_t *r = make(600, 5200);
  ck_assert_int_eq(ddp_reducer_num_buckets(r), 3);
  const size_t want[3][2] = {{0, 150}, {150, 1300}, {1450, 40}};
  size_t next = 0;
  for (int i = 0; i < 3; ++i) {
    size_t off, cnt;
    ddp_reducer_bucket(r, i, &off, &cnt);
    ck_assert_uint_eq(off, want[i][0]);
    ck_assert_uint_eq(cnt, want[i][1]);
    ck_assert_uint_eq(off, next);
    next = off + cnt;
  }
  ck_assert_uint_eq(next, N_ELEMS);
  ddp_reducer_destroy(r);
}
END_TEST

START_TEST(test_bucket_plan_is_the_reducers_cut_without_a_communicator) {
  ddp_bucket_span_t spans[N_TENSORS];
  int bucket_of[N_TENSORS];
  ck_assert_int_eq(ddp_bucket_plan_cut(k_tensors, N_TENSORS, 5200, 600, spans, bucket_of), 3);
  ddp_reducer_t *r = make(600, 5200);
  for (int i = 0; i < 3; ++i) {
    size_t off, cnt;
    ddp_reducer_bucket(r, i, &off, &cnt);
    ck_assert_uint_eq(spans[i].offset, off);
    ck_assert_uint_eq(spans[i].count, cnt);
  }
  ddp_reducer_destroy(r);
  const int want_of[N_TENSORS] = {0, 0, 1, 1, 2, 2};
  for (int i = 0; i < N_TENSORS; ++i) ck_assert_int_eq(bucket_of[i], want_of[i]);
  ck_assert_int_eq(spans[1].first_tensor, 2);
  ck_assert_int_eq(spans[1].n_tensors, 2);
  /* unusable arguments cut nothing */
  ck_assert_int_eq(ddp_bucket_plan_cut(NULL, N_TENSORS, 5200, 600, spans, NULL), 0);
  ck_assert_int_eq(ddp_bucket_plan_cut(k_tensors, 0, 5200, 600, spans, NULL), 0);
  ck_assert_int_eq(ddp_bucket_plan_cut(k_tensors, N_TENSORS, 0, 600, spans, NULL), 0);
  ck_assert_int_eq(ddp_bucket_plan_cut(k_tensors, N_TENSORS, 5200, NAN, spans, NULL), 0);
}
END_TEST

/* --zero 1's layout over the test table for 1..5 ranks and several caps:
 * every element of [0, n) is owned by exactly one rank; every bucket but
 * the tail is world whole blocks starting on a multiple of world x
 * DDP_ZERO_ALIGN; each rank's pieces tile its shard with the tensors'
 * decay flags, its padding undecayed; a tensor's bucket range covers
 * exactly the buckets it overlaps. */
START_TEST(test_zero_layout_owns_every_element_once) {
  ddp_param_t t[N_TENSORS];
  memcpy(t, k_tensors, sizeof t);
  for (int i = 0; i < N_TENSORS; ++i) t[i].decay = i % 2;
  const double caps[][2] = {{600, 5200}, {4, 4}, {1e9, 1e9}};
  static int owner[N_ELEMS];
  for (int world = 1; world <= 5; ++world)
    for (int c = 0; c < 3; ++c) {
      for (int e = 0; e < N_ELEMS; ++e) owner[e] = -1;
      for (int rank = 0; rank < world; ++rank) {
        ddp_zero_layout_t l;
        ck_assert_int_eq(
            ddp_zero_layout_create(t, N_TENSORS, N_ELEMS, world, rank, caps[c][1], caps[c][0], &l),
            DDP_OK);
        size_t next = 0, local = 0;
        for (int k = 0; k < l.n_buckets; ++k) {
          const ddp_zero_bucket_t *b = &l.buckets[k];
          ck_assert_uint_eq(b->offset, next);
          ck_assert_uint_eq(b->local, local);
          ck_assert_uint_eq(b->offset % ((size_t)world * DDP_ZERO_ALIGN), 0);
          if (b->padded) {
            ck_assert_int_eq(k, l.n_buckets - 1);
            ck_assert_uint_gt((size_t)world * b->block, b->count);
          } else {
            ck_assert_uint_eq((size_t)world * b->block, b->count);
          }
          size_t lo, hi;
          ddp_zero_layout_owned(&l, k, rank, &lo, &hi);
          for (size_t e = lo; e < hi; ++e) {
            ck_assert_int_eq(owner[e], -1);
            owner[e] = rank;
          }
          next = b->offset + b->count;
          local += b->block;
        }
        ck_assert_uint_eq(next, N_ELEMS);
        ck_assert_uint_eq(l.shard, local);
        /* per bucket, the pieces tile the owned range; decay follows the
         * tensor; the state places the owned ranges one after another */
        size_t state_at = 0;
        int pieces = 0;
        for (int k = 0; k < l.n_buckets; ++k) {
          const ddp_zero_bucket_t *b = &l.buckets[k];
          size_t lo, hi;
          ddp_zero_layout_owned(&l, k, rank, &lo, &hi);
          ck_assert_uint_eq(b->owned, hi - lo);
          ck_assert_uint_eq(b->state_at, state_at);
          ck_assert_int_eq(b->first_piece, pieces);
          state_at += b->owned;
          pieces += b->n_pieces;
          size_t at = 0;
          for (int p = b->first_piece; p < b->first_piece + b->n_pieces; ++p) {
            const ddp_param_t *pc = &l.pieces[p];
            ck_assert_uint_eq(pc->offset, at);
            ck_assert_uint_gt(pc->count, 0);
            int ti = 0;
            while (t[ti].offset + t[ti].count <= lo + at) ++ti;
            ck_assert_int_eq(pc->decay, t[ti].decay);
            ck_assert_uint_le(lo + at + pc->count, t[ti].offset + t[ti].count); /* one tensor */
            ck_assert_int_le(l.first_bucket[ti], k);
            ck_assert_int_ge(l.last_bucket[ti], k);
            at += pc->count;
          }
          ck_assert_uint_eq(at, b->owned);
        }
        ck_assert_uint_eq(l.owned, state_at);
        ck_assert_int_eq(l.n_pieces, pieces);
        ddp_zero_layout_destroy(&l);
      }
      for (int e = 0; e < N_ELEMS; ++e)
        ck_assert_msg(owner[e] >= 0, "world %d caps %d: element %d has no owner", world, c, e);
    }
  /* a bad world, rank or table is refused */
  ddp_zero_layout_t l;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_zero_layout_create(t, N_TENSORS, N_ELEMS, 0, 0, 1e9, 1e9, &l),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_zero_layout_create(t, N_TENSORS, N_ELEMS, 2, 2, 1e9, 1e9, &l),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_zero_layout_create(t, N_TENSORS, N_ELEMS + 1, 2, 0, 1e9, 1e9, &l),
                   DDP_ERR_INVALID_ARG);
  /* 1490 parameters cannot give 24 ranks 64 each */
  ck_assert_int_eq(ddp_zero_layout_create(t, N_TENSORS, N_ELEMS, 24, 0, 1e9, 1e9, &l),
                   DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "fewer than 24 ranks x 64: some rank would own none");
  ddp_assert_contains(log, "zero layout: rank 0 of 0 ranks");
  ddp_assert_contains(log, "zero layout: rank 2 of 2 ranks");
  ddp_assert_contains(log, "the tensors cover 1490 of 1491 parameters");
  free(log);
}
END_TEST

START_TEST(test_reducer_tensor_larger_than_the_cap_is_its_own_bucket) {
  ddp_reducer_t *r = make(4, 4); /* every tensor alone */
  ck_assert_int_eq(ddp_reducer_num_buckets(r), N_TENSORS);
  ddp_reducer_destroy(r);
  r = make(1e9, 1e9); /* one bucket */
  ck_assert_int_eq(ddp_reducer_num_buckets(r), 1);
  ddp_reducer_destroy(r);
}
END_TEST

/* Where a recorded backward is cut (model/graph_replay.h): at the last
 * tensor of each bucket, in table order, and for an offset that is not a
 * tensor's (mark_ready will refuse it); marking in table order launches a
 * collective exactly at those tensors. */
START_TEST(test_reducer_says_which_tensors_complete_a_bucket) {
  ddp_reducer_t *r = make(600, 5200); /* buckets {0, 1}, {2, 3}, {4, 5} */
  const int want[N_TENSORS] = {0, 1, 0, 1, 0, 1};
  ddp_comm_reset_stats(comm);
  for (int i = 0; i < N_TENSORS; ++i) {
    ck_assert_int_eq(ddp_reducer_completes_bucket(r, k_tensors[i].offset), want[i]);
    const int64_t before = allreduces();
    ck_assert_int_eq(ddp_reducer_mark_ready(r, k_tensors[i].offset, k_tensors[i].count), DDP_OK);
    ck_assert_int_eq(allreduces() - before, want[i]);
  }
  ck_assert_int_eq(ddp_reducer_finish(r, NULL), DDP_OK);
  ck_assert_int_eq(ddp_reducer_completes_bucket(r, 7), 1);
  ck_assert_int_eq(ddp_reducer_completes_bucket(NULL, 0), 1);
  ddp_reducer_destroy(r);
  /* one bucket per tensor: every tensor completes one */
  r = make(1, 1);
  for (int i = 0; i < N_TENSORS; ++i)
    ck_assert_int_eq(ddp_reducer_completes_bucket(r, k_tensors[i].offset), 1);
  ddp_reducer_destroy(r);
}
END_TEST

START_TEST(test_reducer_launches_complete_buckets_in_order_only) {
  ddp_reducer_t *r = make(600, 5200);
  ddp_comm_reset_stats(comm);
  ck_assert_int_eq(ddp_reducer_mark_ready(r, 0, 100), DDP_OK);
  ck_assert_int_eq(allreduces(), 0); /* bucket 0 still misses tensor 1 */
  /* tensors of bucket 2 first: must wait for bucket 1 */
  ck_assert_int_eq(ddp_reducer_mark_ready(r, 1450, 20), DDP_OK);
  ck_assert_int_eq(ddp_reducer_mark_ready(r, 1470, 20), DDP_OK);
  ck_assert_int_eq(allreduces(), 0);
  ck_assert_int_eq(ddp_reducer_mark_ready(r, 100, 50), DDP_OK);
  ck_assert_int_eq(allreduces(), 1);
  ck_assert_int_eq(ddp_reducer_mark_ready(r, 150, 300), DDP_OK);
  ck_assert_int_eq(allreduces(), 1);
  ck_assert_int_eq(ddp_reducer_mark_ready(r, 450, 1000), DDP_OK);
  ck_assert_int_eq(allreduces(), 3); /* bucket 1, then the waiting bucket 2 */
  double exposed = -1;
  ck_assert_int_eq(ddp_reducer_finish(r, &exposed), DDP_OK);
  ck_assert(exposed >= 0.0);
  /* a second step starts from scratch */
  for (int i = 0; i < N_TENSORS; ++i)
    ck_assert_int_eq(ddp_reducer_mark_ready(r, k_tensors[i].offset, k_tensors[i].count), DDP_OK);
  ck_assert_int_eq(allreduces(), 6);
  ck_assert_int_eq(ddp_reducer_finish(r, NULL), DDP_OK);
  ddp_reducer_destroy(r);
}
END_TEST

START_TEST(test_reducer_finish_names_a_tensor_never_marked) {
  ddp_reducer_t *r = make(600, 5200);
  for (int i = 0; i < N_TENSORS; ++i)
    if (i != 3)
      ck_assert_int_eq(ddp_reducer_mark_ready(r, k_tensors[i].offset, k_tensors[i].count), DDP_OK);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_reducer_finish(r, NULL), DDP_ERR_INTERNAL);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "tensor 3 at offset 450 never marked ready");
  free(log);
  ddp_reducer_destroy(r);
}
END_TEST

START_TEST(test_reducer_rejects_wrong_or_repeated_marks) {
  ddp_reducer_t *r = make(600, 5200);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_reducer_mark_ready(r, 10, 90), DDP_ERR_INTERNAL);  /* not a tensor */
  ck_assert_int_eq(ddp_reducer_mark_ready(r, 100, 49), DDP_ERR_INTERNAL); /* wrong count */
  ck_assert_int_eq(ddp_reducer_mark_ready(r, 0, 100), DDP_OK);
  ck_assert_int_eq(ddp_reducer_mark_ready(r, 0, 100), DDP_ERR_INTERNAL); /* twice */
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "is not a gradient tensor");
  ddp_assert_contains(log, "marked ready twice");
  free(log);
  ddp_reducer_destroy(r);
}
END_TEST

START_TEST(test_reducer_rejects_tensors_that_do_not_tile) {
  const ddp_param_t gap[] = {{.offset = 0, .count = 10}, {.offset = 12, .count = 10}};
  ddp_reducer_config_t cfg = {.grads = grads,
                              .tensors = gap,
                              .n_tensors = 2,
                              .bucket_bytes = 100,
                              .first_bucket_bytes = 100};
  ddp_reducer_t *r = NULL;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_reducer_create(comm, &cfg, &r), DDP_ERR_INVALID_ARG);
  cfg.tensors = k_tensors;
  cfg.n_tensors = N_TENSORS;
  cfg.bucket_bytes = 0;
  ck_assert_int_eq(ddp_reducer_create(comm, &cfg, &r), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ck_assert_ptr_null(r);
  ddp_assert_contains(log, "must tile the buffer");
  ddp_assert_contains(log, "must be positive");
  free(log);
}
END_TEST

/* --grad-reduce-dtype: on one rank the half sum is the gradient itself, so
 * every gradient comes back as its rounding to the type (the staging round
 * trip happened, in every bucket) and the fp32 buffer is otherwise intact;
 * a half reduction without a backend, or an integer one, is refused. */
START_TEST(test_reducer_half_dtype_rounds_through_staging) {
  ddp_backend_t *be = ddp_test_cpu_backend();
  const ddp_dtype_t dts[] = {DDP_DTYPE_BF16, DDP_DTYPE_F16};
  static float want[N_ELEMS];
  for (int d = 0; d < 2; ++d) {
    for (int i = 0; i < N_ELEMS; ++i) grads[i] = 1.0f / (float)(i + 3) + (float)i;
    ck_assert_int_eq(ddp_round_host(want, grads, dts[d], N_ELEMS), DDP_OK);
    ck_assert(memcmp(want, grads, sizeof grads) != 0);
    ddp_reducer_config_t cfg = {.grads = grads,
                                .tensors = k_tensors,
                                .n_tensors = N_TENSORS,
                                .bucket_bytes = 2000,
                                .first_bucket_bytes = 600,
                                .dtype = dts[d],
                                .be = be};
    ddp_reducer_t *r = NULL;
    ck_assert_int_eq(ddp_reducer_create(comm, &cfg, &r), DDP_OK);
    ck_assert_int_gt(ddp_reducer_num_buckets(r), 2);
    for (int t = 0; t < N_TENSORS; ++t)
      ck_assert_int_eq(ddp_reducer_mark_ready(r, k_tensors[t].offset, k_tensors[t].count), DDP_OK);
    ck_assert_int_eq(ddp_reducer_finish(r, NULL), DDP_OK);
    ck_assert_mem_eq(grads, want, sizeof grads);
    ddp_reducer_destroy(r);
  }
  ddp_reducer_config_t cfg = {.grads = grads,
                              .tensors = k_tensors,
                              .n_tensors = N_TENSORS,
                              .bucket_bytes = 2000,
                              .first_bucket_bytes = 600,
                              .dtype = DDP_DTYPE_BF16};
  ddp_reducer_t *r = NULL;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_reducer_create(comm, &cfg, &r), DDP_ERR_INVALID_ARG);
  cfg.dtype = DDP_DTYPE_I32;
  cfg.be = be;
  ck_assert_int_eq(ddp_reducer_create(comm, &cfg, &r), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "a bf16 reduction needs the backend");
  ddp_assert_contains(log, "cannot reduce gradients in int32");
  free(log);
  ck_assert_ptr_null(r);
  ddp_backend_destroy(be);
}
END_TEST

/* ---- the fused epilogue of a half reduce dtype ---------------------------- */

/* Random N(0, 1) gradients times 2^10 (a loss-scaled step), different per
 * rank and seed. */
static void fill_grads(float *g, size_t n, uint64_t seed, int rank) {
  ddp_rng_t rng;
  ddp_rng_init(&rng, seed, (uint64_t)rank + 11);
  ddp_rng_fill_normal(&rng, 0, 0.0f, 1024.0f, g, n);
}

static ddp_reducer_t *make_half(ddp_comm_t *c, ddp_backend_t *be, float *g, ddp_dtype_t dt) {
  ddp_reducer_config_t cfg = {.grads = g,
                              .tensors = k_tensors,
                              .n_tensors = N_TENSORS,
                              .bucket_bytes = 2000,
                              .first_bucket_bytes = 600,
                              .dtype = dt,
                              .be = be};
  ddp_reducer_t *r = NULL;
  ck_assert_int_eq(ddp_reducer_create(c, &cfg, &r), DDP_OK);
  ck_assert_int_gt(ddp_reducer_num_buckets(r), 2);
  return r;
}

static ddp_status_t run_step(ddp_reducer_t *r) {
  for (int t = 0; t < N_TENSORS; ++t) {
    const ddp_status_t st = ddp_reducer_mark_ready(r, k_tensors[t].offset, k_tensors[t].count);
    if (st != DDP_OK) return st;
  }
  return ddp_reducer_finish(r, NULL);
}

/* One step of the old path and one of the fused path on the same inputs,
 * over communicator c: the old path is the reducer with scale 1 (a plain
 * widening, bit for bit the former convert) followed by
 * ddp_optim_grad_sumsq_cpu with the unscale factor; the fused path is the
 * reducer with the unscale factor and its own norm. Required: the fused
 * gradients are the old ones times the factor bit for bit (the same
 * collective on the same inputs gives the same sums; the factor is a power
 * of two); the norm equals the bucket partials recomputed with
 * ddp_optim_grad_epilogue_cpu and added in bucket order, bit for bit, and
 * the old norm within 1e-6 relative (double sums in another order, rounded
 * once to fp32); every rank holds the same norm bit for bit. With
 * `inf_rank` >= 0 that rank's element 700 is +inf: every rank's norm is
 * then non-finite. Assertions come after the last collective. */
static void check_fused_against_old(ddp_comm_t *c, const ddp_dist_t *d, ddp_dtype_t dt,
                                    int inf_rank) {
  ddp_backend_t *be = ddp_test_cpu_backend();
  static float g_old[N_ELEMS], g_new[N_ELEMS], in[N_ELEMS], recomputed[N_ELEMS];
  static uint16_t bits[N_ELEMS];
  const float unscale = 1.0f / 1024.0f;
  fill_grads(in, N_ELEMS, 5, d->rank);
  if (d->rank == inf_rank) in[700] = INFINITY;
  memcpy(g_old, in, sizeof in);
  memcpy(g_new, in, sizeof in);
  ddp_reducer_t *old = make_half(c, be, g_old, dt), *fused = make_half(c, be, g_new, dt);
  ck_assert(ddp_reducer_fused_epilogue(fused));
  ck_assert_int_eq(ddp_reducer_set_scale(fused, unscale), DDP_OK);
  const ddp_status_t st_old = run_step(old), st_new = run_step(fused);
  float norm_old = -1.0f, norm_new = -1.0f;
  const ddp_status_t st_sq = ddp_optim_grad_sumsq_cpu(be, &norm_old, g_old, N_ELEMS, unscale, NULL);
  const ddp_status_t st_norm = ddp_reducer_grad_sumsq(fused, &norm_new);
  double agree = isfinite(norm_new) ? (double)norm_new : -1.0;
  const ddp_status_t st_sum = ddp_dist_sum_double(d, &agree);
  ck_assert_int_eq(st_old, DDP_OK);
  ck_assert_int_eq(st_new, DDP_OK);
  ck_assert_int_eq(st_sq, DDP_OK);
  ck_assert_int_eq(st_norm, DDP_OK);
  ck_assert_int_eq(st_sum, DDP_OK);
  if (inf_rank >= 0) {
    ck_assert_msg(!isfinite(norm_new), "rank %d: an inf on rank %d gave the norm %g", d->rank,
                  inf_rank, (double)norm_new);
    ck_assert(!isfinite(norm_old));
    ck_assert(agree == -1.0 * d->world); /* every rank non-finite */
  } else {
    for (int i = 0; i < N_ELEMS; ++i)
      ck_assert_msg(memcmp(&g_new[i], &(float){g_old[i] * unscale}, sizeof(float)) == 0,
                    "%s element %d: fused %.9g, old %.9g x %g", ddp_dtype_name(dt), i,
                    (double)g_new[i], (double)g_old[i], (double)unscale);
    /* the old widened sums are half values: recompute each bucket's partial */
    ck_assert_int_eq(ddp_convert_host(bits, dt, g_old, DDP_DTYPE_F32, N_ELEMS), DDP_OK);
    double total = 0.0;
    for (int b = 0; b < ddp_reducer_num_buckets(fused); ++b) {
      size_t off, cnt;
      ddp_reducer_bucket(fused, b, &off, &cnt);
      double partial = 0.0;
      ck_assert_int_eq(ddp_optim_grad_epilogue_cpu(be, recomputed + off, bits + off, dt, cnt,
                                                   unscale, &partial, NULL),
                       DDP_OK);
      total += partial;
    }
    ck_assert_msg(memcmp(&(float){(float)total}, &norm_new, sizeof norm_new) == 0,
                  "norm %.9g, partials in bucket order %.9g", (double)norm_new, total);
    ck_assert_msg(fabs((double)norm_new - (double)norm_old) <= 1e-6 * (double)norm_old,
                  "%s: fused norm %.9g, old %.9g", ddp_dtype_name(dt), (double)norm_new,
                  (double)norm_old);
    ck_assert_msg(agree == (double)norm_new * d->world, "rank %d: norms differ across ranks",
                  d->rank);
  }
  ddp_reducer_destroy(old);
  ddp_reducer_destroy(fused);
  ddp_backend_destroy(be);
}

/* Over the "self" communicator (one rank, fixture), both half types, clean
 * and with an inf. */
START_TEST(test_reducer_fused_epilogue_matches_the_old_path) {
  check_fused_against_old(comm, &dist, DDP_DTYPE_BF16, -1);
  check_fused_against_old(comm, &dist, DDP_DTYPE_F16, -1);
  check_fused_against_old(comm, &dist, DDP_DTYPE_BF16, 0);
  check_fused_against_old(comm, &dist, DDP_DTYPE_F16, 0);
}
END_TEST

/* Over the job's communicator: MPI under mpirun (the inf on the last rank),
 * "mpi" on a singleton, or "self" in a build without MPI. */
START_TEST(test_reducer_fused_epilogue_over_the_job) {
  ddp_comm_config_t cfg = {.kind = strcmp(ddp_dist_library(), "none") ? "mpi" : "self"};
  ddp_comm_t *c = NULL;
  ck_assert_int_eq(ddp_comm_create(&g_job, &cfg, &c), DDP_OK);
  check_fused_against_old(c, &g_job, DDP_DTYPE_BF16, -1);
  check_fused_against_old(c, &g_job, DDP_DTYPE_F16, -1);
  check_fused_against_old(c, &g_job, DDP_DTYPE_F16, g_job.world - 1);
  check_fused_against_old(c, &g_job, DDP_DTYPE_BF16, g_job.world - 1);
  ddp_comm_destroy(c);
}
END_TEST

/* --zero 1 over the job's communicator (2 ranks under test_reducer_mpi.sh,
 * else one): rank r's gradient i is (i % 7) + r + 1, so every sum is an
 * exact integer in fp32 and bf16. Each rank's shard gets the sum of its
 * owned elements, times the scale, and zeros in the tail's padding; the
 * norm is that of the whole reduced gradient, the same bits on every rank;
 * the model's gradient buffer is left as backward wrote it. */
static void check_zero_over(ddp_comm_t *c, const ddp_dist_t *d, ddp_dtype_t dt) {
  ddp_backend_t *be = ddp_test_cpu_backend();
  const int W = d->world;
  ddp_zero_layout_t l;
  ck_assert_int_eq(ddp_zero_layout_create(k_tensors, N_TENSORS, N_ELEMS, W, d->rank, 2000, 600, &l),
                   DDP_OK);
  float *shard = malloc(l.shard * sizeof *shard);
  ck_assert_ptr_nonnull(shard);
  for (size_t i = 0; i < l.shard; ++i) shard[i] = NAN;
  for (int i = 0; i < N_ELEMS; ++i) grads[i] = (float)(i % 7 + d->rank + 1);
  ddp_reducer_config_t cfg = {.grads = grads,
                              .tensors = k_tensors,
                              .n_tensors = N_TENSORS,
                              .bucket_bytes = 2000,
                              .first_bucket_bytes = 600,
                              .dtype = dt,
                              .be = be,
                              .zero = &l,
                              .shard_grads = shard};
  ddp_reducer_t *r = NULL;
  ck_assert_int_eq(ddp_reducer_create(c, &cfg, &r), DDP_OK);
  ck_assert(ddp_reducer_fused_epilogue(r));
  ck_assert_int_eq(ddp_reducer_num_buckets(r), l.n_buckets);
  ck_assert_int_eq(ddp_reducer_set_scale(r, 0.5f), DDP_OK);
  /* backward order, but the last tensor first: a straddling bucket must
   * still wait for every tensor it overlaps */
  ck_assert_int_eq(
      ddp_reducer_mark_ready(r, k_tensors[N_TENSORS - 1].offset, k_tensors[N_TENSORS - 1].count),
      DDP_OK);
  for (int t = 0; t < N_TENSORS - 1; ++t)
    ck_assert_int_eq(ddp_reducer_mark_ready(r, k_tensors[t].offset, k_tensors[t].count), DDP_OK);
  ck_assert_int_eq(ddp_reducer_finish(r, NULL), DDP_OK);
  float norm = NAN;
  ck_assert_int_eq(ddp_reducer_grad_sumsq(r, &norm), DDP_OK);
  double want_norm = 0.0;
  for (int i = 0; i < N_ELEMS; ++i) {
    const double v = 0.5 * (W * (i % 7 + 1) + W * (W - 1) / 2);
    want_norm += v * v;
  }
  for (int k = 0; k < l.n_buckets; ++k) {
    size_t lo, hi;
    ddp_zero_layout_owned(&l, k, d->rank, &lo, &hi);
    for (size_t e = lo; e < hi; ++e) {
      const float want = 0.5f * (float)(W * ((int)e % 7 + 1) + W * (W - 1) / 2);
      ck_assert_msg(shard[l.buckets[k].local + (e - lo)] == want, "%s rank %d element %zu: %g",
                    ddp_dtype_name(dt), d->rank, e, (double)shard[l.buckets[k].local + (e - lo)]);
    }
    for (size_t p = l.buckets[k].local + (hi - lo); p < l.buckets[k].local + l.buckets[k].block;
         ++p)
      ck_assert_msg(shard[p] == 0.0f, "padding at shard %zu: %g", p, (double)shard[p]);
  }
  ck_assert_msg(fabs((double)norm - want_norm) <= 1e-6 * want_norm, "norm %.9g, want %.9g",
                (double)norm, want_norm);
  for (int i = 0; i < N_ELEMS; ++i) ck_assert_float_eq(grads[i], (float)(i % 7 + d->rank + 1));
  /* the same bits on every rank */
  float agree = norm;
  ck_assert_int_eq(ddp_comm_allreduce_sum(c, &agree, 1, DDP_DTYPE_F32, NULL, NULL), DDP_OK);
  ck_assert_msg(agree == norm * (float)W, "rank %d: norms differ across ranks", d->rank);
  ddp_reducer_destroy(r);
  ddp_zero_layout_destroy(&l);
  free(shard);
  ddp_backend_destroy(be);
}

START_TEST(test_reducer_zero_reduce_scatters_into_the_shard) {
  check_zero_over(comm, &dist, DDP_DTYPE_F32);
  check_zero_over(comm, &dist, DDP_DTYPE_BF16);
  ddp_comm_config_t cfg = {.kind = strcmp(ddp_dist_library(), "none") ? "mpi" : "self"};
  ddp_comm_t *c = NULL;
  ck_assert_int_eq(ddp_comm_create(&g_job, &cfg, &c), DDP_OK);
  check_zero_over(c, &g_job, DDP_DTYPE_F32);
  check_zero_over(c, &g_job, DDP_DTYPE_BF16);
  check_zero_over(c, &g_job, DDP_DTYPE_F16);
  ddp_comm_destroy(c);
}
END_TEST

/* The epilogue's contract at the edges: fp32 has none (the sums untouched
 * bit for bit whatever the scale, and no norm to ask for); the norm is
 * refused before a finish, after a new step's first mark and after a failed
 * finish; the scale persists until set again; bad scales are refused and
 * change nothing. */
START_TEST(test_reducer_epilogue_state_and_errors) {
  ddp_backend_t *be = ddp_test_cpu_backend();
  static float want[N_ELEMS];
  fill_grads(grads, N_ELEMS, 9, 0);
  memcpy(want, grads, sizeof grads);
  ddp_reducer_t *r = make(600, 2000);
  ck_assert(!ddp_reducer_fused_epilogue(r));
  ck_assert_int_eq(ddp_reducer_set_scale(r, 0.5f), DDP_OK);
  ck_assert_int_eq(run_step(r), DDP_OK);
  ck_assert_mem_eq(grads, want, sizeof grads);
  float norm = 3.0f;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_reducer_grad_sumsq(r, &norm), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "an fp32 all-reduce has no fused epilogue");
  free(log);
  ddp_reducer_destroy(r);

  r = make_half(comm, be, grads, DDP_DTYPE_BF16);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_reducer_grad_sumsq(r, &norm), DDP_ERR_INTERNAL); /* no finish yet */
  ck_assert_int_eq(ddp_reducer_set_scale(r, 0.0f), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_reducer_set_scale(r, -0.25f), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_reducer_set_scale(r, NAN), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_reducer_set_scale(r, INFINITY), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_reducer_set_scale(NULL, 1.0f), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_reducer_grad_sumsq(r, NULL), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_reducer_grad_sumsq(NULL, &norm), DDP_ERR_INVALID_ARG);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "no finished step to take the gradient norm of");
  ddp_assert_contains(log, "gradient scale 0 must be finite and > 0");
  ddp_assert_contains(log, "gradient scale -0.25 must be finite and > 0");
  ddp_assert_contains(log, "gradient scale nan");
  ddp_assert_contains(log, "gradient scale inf");
  ddp_assert_contains(log, "reducer_grad_sumsq: NULL sumsq");
  ddp_assert_contains(log, "reducer_grad_sumsq: NULL reducer");
  free(log);
  ck_assert_float_eq(norm, 3.0f);
  /* the refused scales left 1: a plain widening, as before the epilogue */
  static float rounded[N_ELEMS];
  ck_assert_int_eq(ddp_round_host(rounded, want, DDP_DTYPE_BF16, N_ELEMS), DDP_OK);
  ck_assert_int_eq(run_step(r), DDP_OK);
  ck_assert_mem_eq(grads, rounded, sizeof grads);
  ck_assert_int_eq(ddp_reducer_grad_sumsq(r, &norm), DDP_OK);
  float plain = 0.0f;
  ck_assert_int_eq(ddp_optim_grad_sumsq_cpu(be, &plain, rounded, N_ELEMS, 1.0f, NULL), DDP_OK);
  ck_assert(fabs((double)norm - (double)plain) <= 1e-6 * (double)plain);
  /* a scale stays until set again: two steps at 1/4 */
  ck_assert_int_eq(ddp_reducer_set_scale(r, 0.25f), DDP_OK);
  for (int step = 0; step < 2; ++step) {
    memcpy(grads, want, sizeof grads);
    ck_assert_int_eq(run_step(r), DDP_OK);
    for (int i = 0; i < N_ELEMS; ++i) ck_assert_float_eq(grads[i], rounded[i] * 0.25f);
    ck_assert_int_eq(ddp_reducer_grad_sumsq(r, &norm), DDP_OK);
    ck_assert(fabs((double)norm - (double)plain / 16.0) <= 1e-6 * (double)plain / 16.0);
  }
  /* a new step's first mark makes the partials stale; so does a failed finish */
  ck_assert_int_eq(ddp_reducer_mark_ready(r, 0, 100), DDP_OK);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_reducer_grad_sumsq(r, &norm), DDP_ERR_INTERNAL);
  ck_assert_int_eq(ddp_reducer_finish(r, NULL), DDP_ERR_INTERNAL); /* tensors missing */
  ck_assert_int_eq(ddp_reducer_grad_sumsq(r, &norm), DDP_ERR_INTERNAL);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "never marked ready");
  free(log);
  ddp_reducer_destroy(r);
  ddp_backend_destroy(be);
}
END_TEST

int main(int argc, char **argv) {
  Suite *s = suite_create("reducer");
  TCase *tc = tcase_create("reducer");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_reducer_buckets_tile_the_buffer_with_a_small_first_one);
  tcase_add_test(tc, test_bucket_plan_is_the_reducers_cut_without_a_communicator);
  tcase_add_test(tc, test_zero_layout_owns_every_element_once);
  tcase_add_test(tc, test_reducer_tensor_larger_than_the_cap_is_its_own_bucket);
  tcase_add_test(tc, test_reducer_launches_complete_buckets_in_order_only);
  tcase_add_test(tc, test_reducer_says_which_tensors_complete_a_bucket);
  tcase_add_test(tc, test_reducer_finish_names_a_tensor_never_marked);
  tcase_add_test(tc, test_reducer_rejects_wrong_or_repeated_marks);
  tcase_add_test(tc, test_reducer_rejects_tensors_that_do_not_tile);
  tcase_add_test(tc, test_reducer_half_dtype_rounds_through_staging);
  tcase_add_test(tc, test_reducer_fused_epilogue_matches_the_old_path);
  tcase_add_test(tc, test_reducer_fused_epilogue_over_the_job);
  tcase_add_test(tc, test_reducer_epilogue_state_and_errors);
  tcase_add_test(tc, test_reducer_zero_reduce_scatters_into_the_shard);
  suite_add_tcase(s, tc);
  LSAN_DISABLE();
  const ddp_status_t init = ddp_dist_init(&argc, &argv, &g_job);
  LSAN_ENABLE();
  if (init != DDP_OK) {
    fprintf(stderr, "check_reducer: ddp_dist_init failed\n");
    return 99;
  }
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK); /* no fork after MPI_Init */
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  /* Ranks agree: one rank's failure fails them all. */
  double failures = failed;
  const ddp_status_t st = ddp_dist_sum_double(&g_job, &failures);
  if (st == DDP_OK && failures > 0 && failed == 0)
    printf("check_reducer: rank %d passed, but %.0f test(s) failed on other ranks\n", g_job.rank,
           failures);
  LSAN_DISABLE();
  ddp_dist_finalize(&g_job);
  LSAN_ENABLE();
  return st == DDP_OK && failures == 0 ? 0 : 1;
}
