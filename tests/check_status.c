/* Status codes, logging (levels, rank prefix, rank filtering, one write per
 * line) and the error-propagation macros. */
#include <config.h>

#include "ddptrain/check.h"
#include "ddptrain/status.h"
#include "check_util.h"
#include "core/foreign_check.h"

START_TEST(test_status_strings_cover_every_code) {
#define X(name, value, desc)                       \
  ck_assert_str_eq(ddp_status_string(name), desc); \
  ck_assert_str_eq(ddp_status_name(name), #name);  \
  ck_assert_int_eq((int)name, value);
  DDP_STATUS_LIST(X)
#undef X
  ck_assert_str_eq(ddp_status_string((ddp_status_t)-999), "unknown status");
  ck_assert_str_eq(ddp_status_name((ddp_status_t)7), "unknown status");
}
END_TEST

START_TEST(test_status_codes_are_unique_and_errors_negative) {
  const int codes[] = {
#define X(name, value, desc) value,
      DDP_STATUS_LIST(X)
#undef X
  };
  const int n = (int)(sizeof codes / sizeof codes[0]);
  ck_assert_int_eq(codes[0], 0);
  for (int i = 1; i < n; ++i) {
    ck_assert_int_lt(codes[i], 0);
    for (int j = 0; j < i; ++j) ck_assert_int_ne(codes[i], codes[j]);
  }
}
END_TEST

START_TEST(test_log_prefix_names_rank_and_level) {
  ddp_log_set_level(DDP_LOG_LEVEL_INFO);
  ddp_log_set_rank(0, 1);
  ddp_test_log_start();
  DDP_LOG_INFO("hello %d", 42);
  ddp_log_set_rank(3, 8);
  DDP_LOG_ERROR("broken");
  DDP_LOG_WARN("careful");
  char *out = ddp_test_log_stop();
  ddp_log_set_rank(0, 1);
  ddp_assert_contains(out, "[ddptrain] hello 42\n");
  ddp_assert_contains(out, "[rank 3/8] ERROR: broken (");
  ddp_assert_contains(out, "check_status.c:");
  ddp_assert_contains(out, "[rank 3/8] WARN: careful\n");
  free(out);
}
END_TEST

START_TEST(test_log_info_only_from_rank_zero_unless_all_ranks) {
  ddp_log_set_level(DDP_LOG_LEVEL_DEBUG);
  ddp_log_set_rank(2, 4);
  ddp_test_log_start();
  DDP_LOG_INFO("info from two");
  DDP_LOG_DEBUG("debug from two");
  DDP_LOG_WARN("warn from two");
  ddp_log_set_all_ranks(1);
  DDP_LOG_INFO("now everyone");
  ddp_log_set_all_ranks(0);
  char *out = ddp_test_log_stop();
  ddp_log_set_rank(0, 1);
  ddp_log_set_level(DDP_LOG_LEVEL_INFO);
  ck_assert_ptr_null(strstr(out, "info from two"));
  ck_assert_ptr_null(strstr(out, "debug from two"));
  ddp_assert_contains(out, "warn from two");
  ddp_assert_contains(out, "now everyone");
  free(out);
}
END_TEST

START_TEST(test_log_level_filters_and_parses) {
  ddp_log_level_t lv;
  ck_assert_int_eq(ddp_log_level_parse("debug", &lv), DDP_OK);
  ck_assert_int_eq(lv, DDP_LOG_LEVEL_DEBUG);
  ck_assert_int_eq(ddp_log_level_parse("WARNING", &lv), DDP_OK);
  ck_assert_int_eq(lv, DDP_LOG_LEVEL_WARN);
  ck_assert_int_eq(ddp_log_level_parse("loud", &lv), DDP_ERR_INVALID_ARG);
  ddp_log_set_level(DDP_LOG_LEVEL_WARN);
  ddp_test_log_start();
  DDP_LOG_INFO("hidden");
  DDP_LOG_WARN("shown");
  char *out = ddp_test_log_stop();
  ddp_log_set_level(DDP_LOG_LEVEL_INFO);
  ck_assert_ptr_null(strstr(out, "hidden"));
  ddp_assert_contains(out, "shown");
  free(out);
}
END_TEST

START_TEST(test_log_long_message_is_truncated_with_newline) {
  char big[5000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  ddp_test_log_start();
  DDP_LOG_WARN("%s", big);
  char *out = ddp_test_log_stop();
  size_t n = strlen(out);
  ck_assert_uint_gt(n, 1000);
  ck_assert_uint_lt(n, 2100);
  ck_assert_int_eq(out[n - 1], '\n');
  free(out);
}
END_TEST

/* Propagation: DDP_CHECK returns the inner status without logging again. */
static int g_cleaned;
static ddp_status_t fails_with(ddp_status_t st) {
  if (st != DDP_OK) DDP_FAIL(st, "inner failure %d", (int)st);
  return DDP_OK;
}
static ddp_status_t propagates(ddp_status_t st) {
  DDP_CHECK(fails_with(st));
  return DDP_OK;
}
static ddp_status_t cleans_up(ddp_status_t inner) {
  ddp_status_t st = DDP_OK;
  g_cleaned = 0;
  DDP_CHECK_GOTO(fails_with(inner), st, undo);
  return DDP_OK;
undo:
  g_cleaned = 1;
  return st;
}

START_TEST(test_check_macros_propagate_and_log_once) {
  ddp_test_log_start();
  ck_assert_int_eq(propagates(DDP_OK), DDP_OK);
  ck_assert_int_eq(propagates(DDP_ERR_IO), DDP_ERR_IO);
  ck_assert_int_eq(cleans_up(DDP_ERR_OOM), DDP_ERR_OOM);
  ck_assert_int_eq(g_cleaned, 1);
  ck_assert_int_eq(cleans_up(DDP_OK), DDP_OK);
  ck_assert_int_eq(g_cleaned, 0);
  char *out = ddp_test_log_stop();
  /* Two failures, two lines: nothing was logged twice on the way up. */
  int lines = 0;
  for (char *p = out; (p = strstr(p, "inner failure")); ++p) ++lines;
  ck_assert_int_eq(lines, 2);
  free(out);
}
END_TEST

#if DDP_HAVE_MPI
#include <mpi.h>
START_TEST(test_check_mpi_codes_convert) {
  ddp_test_log_start();
  ck_assert_int_eq(DDP_FOREIGN_STATUS(ddp_mpi_status_, MPI_SUCCESS), DDP_OK);
  ck_assert_int_eq(DDP_FOREIGN_STATUS(ddp_mpi_status_, MPI_ERR_COUNT), DDP_ERR_MPI);
  char *out = ddp_test_log_stop();
  ddp_assert_contains(out, "MPI_ERR_COUNT failed:");
  free(out);
}
END_TEST
#endif

#if DDP_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
/* The converters run on the host only, so they are testable without a GPU. */
START_TEST(test_check_cuda_codes_convert) {
  ddp_test_log_start();
  ck_assert_int_eq(DDP_FOREIGN_STATUS(ddp_cuda_status_, cudaSuccess), DDP_OK);
  ck_assert_int_eq(DDP_FOREIGN_STATUS(ddp_cuda_status_, cudaErrorMemoryAllocation), DDP_ERR_OOM);
  ck_assert_int_eq(DDP_FOREIGN_STATUS(ddp_cuda_status_, cudaErrorInvalidValue), DDP_ERR_CUDA);
  ck_assert_int_eq(DDP_FOREIGN_STATUS(ddp_cublas_status_, CUBLAS_STATUS_ALLOC_FAILED), DDP_ERR_OOM);
  ck_assert_int_eq(DDP_FOREIGN_STATUS(ddp_cublas_status_, CUBLAS_STATUS_EXECUTION_FAILED),
                   DDP_ERR_CUBLAS);
  char *out = ddp_test_log_stop();
  ddp_assert_contains(out, "cudaErrorMemoryAllocation failed on cuda:");
  ddp_assert_contains(out, "CUBLAS_STATUS_EXECUTION_FAILED failed on cuda:");
  free(out);
}
END_TEST
#endif

#if DDP_HAVE_CUDNN
#include <cudnn.h>
START_TEST(test_check_cudnn_codes_convert) {
  ddp_test_log_start();
  ck_assert_int_eq(DDP_FOREIGN_STATUS(ddp_cudnn_status_, CUDNN_STATUS_SUCCESS), DDP_OK);
  ck_assert_int_eq(DDP_FOREIGN_STATUS(ddp_cudnn_status_, CUDNN_STATUS_ALLOC_FAILED), DDP_ERR_OOM);
  ck_assert_int_eq(DDP_FOREIGN_STATUS(ddp_cudnn_status_, CUDNN_STATUS_BAD_PARAM), DDP_ERR_CUDNN);
  char *out = ddp_test_log_stop();
  ddp_assert_contains(out, "CUDNN_STATUS_BAD_PARAM failed on cuda:");
  ddp_assert_contains(out, "(cuDNN error");
  free(out);
}
END_TEST
#endif

#if DDP_HAVE_NCCL
#include <nccl.h>
START_TEST(test_check_nccl_codes_convert) {
  ddp_test_log_start();
  ck_assert_int_eq(DDP_FOREIGN_STATUS(ddp_nccl_status_, ncclSuccess), DDP_OK);
  ck_assert_int_eq(DDP_FOREIGN_STATUS(ddp_nccl_status_, ncclInvalidArgument), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(DDP_FOREIGN_STATUS(ddp_nccl_status_, ncclSystemError), DDP_ERR_NCCL);
  char *out = ddp_test_log_stop();
  ddp_assert_contains(out, "ncclSystemError failed on cuda:");
  ddp_assert_contains(out, "(NCCL error");
  free(out);
}
END_TEST
#endif

static Suite *status_suite(void) {
  Suite *s = suite_create("status");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_status_strings_cover_every_code);
  tcase_add_test(tc, test_status_codes_are_unique_and_errors_negative);
  tcase_add_test(tc, test_log_prefix_names_rank_and_level);
  tcase_add_test(tc, test_log_info_only_from_rank_zero_unless_all_ranks);
  tcase_add_test(tc, test_log_level_filters_and_parses);
  tcase_add_test(tc, test_log_long_message_is_truncated_with_newline);
  tcase_add_test(tc, test_check_macros_propagate_and_log_once);
#if DDP_HAVE_MPI
  tcase_add_test(tc, test_check_mpi_codes_convert);
#endif
#if DDP_HAVE_CUDA
  tcase_add_test(tc, test_check_cuda_codes_convert);
#endif
#if DDP_HAVE_CUDNN
  tcase_add_test(tc, test_check_cudnn_codes_convert);
#endif
#if DDP_HAVE_NCCL
  tcase_add_test(tc, test_check_nccl_codes_convert);
#endif
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(status_suite());
}
