/* The gradient reducer on one rank ("self" communicator): bucket layout,
 * launch order and counts, and the errors that catch a model announcing its
 * gradients wrongly. The multi-rank arithmetic (SUM, equivalence with one
 * process) is tests/test_ddp.sh's job. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "ddptrain/comm.h"
#include "ddptrain/reducer.h"

/* 6 tensors, 4-byte floats: 100, 50, 300, 1000, 20, 20 elements. */
static const ddp_reducer_tensor_t k_tensors[] = {{0, 100},    {100, 50},  {150, 300},
                                                 {450, 1000}, {1450, 20}, {1470, 20}};
enum { N_TENSORS = 6, N_ELEMS = 1490 };

static ddp_dist_t dist = {.rank = 0, .world = 1, .local_rank = 0, .local_size = 1};
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

START_TEST(test_reducer_tensor_larger_than_the_cap_is_its_own_bucket) {
  ddp_reducer_t *r = make(4, 4); /* every tensor alone */
  ck_assert_int_eq(ddp_reducer_num_buckets(r), N_TENSORS);
  ddp_reducer_destroy(r);
  r = make(1e9, 1e9); /* one bucket */
  ck_assert_int_eq(ddp_reducer_num_buckets(r), 1);
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
  const ddp_reducer_tensor_t gap[] = {{0, 10}, {12, 10}};
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

int main(void) {
  Suite *s = suite_create("reducer");
  TCase *tc = tcase_create("reducer");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_reducer_buckets_tile_the_buffer_with_a_small_first_one);
  tcase_add_test(tc, test_reducer_tensor_larger_than_the_cap_is_its_own_bucket);
  tcase_add_test(tc, test_reducer_launches_complete_buckets_in_order_only);
  tcase_add_test(tc, test_reducer_finish_names_a_tensor_never_marked);
  tcase_add_test(tc, test_reducer_rejects_wrong_or_repeated_marks);
  tcase_add_test(tc, test_reducer_rejects_tensors_that_do_not_tile);
  tcase_add_test(tc, test_reducer_half_dtype_rounds_through_staging);
  suite_add_tcase(s, tc);
  return ddp_test_run_suite(s);
}
