/* Device error messages, formatted from plain numbers (no GPU needed): the
 * operation name taken from a checked expression, the rank/device/operation
 * in every library error, and the out-of-memory message with the bytes asked
 * for, the bytes free and what to change. On CUDA builds the converters are
 * also driven with real codes and a rank set, so the logged line is checked
 * end to end. */
#include <config.h>

#include "ddptrain/log.h"
#include "backend/device_error.h"
#include "check_util.h"
#include "core/foreign_check.h"

START_TEST(test_device_error_op_name_is_the_called_function) {
  char op[32];
  ddp_device_op_name(op, sizeof op, "cudaMalloc(ptr, bytes)");
  ck_assert_str_eq(op, "cudaMalloc");
  ddp_device_op_name(op, sizeof op, "cublasGemmStridedBatchedEx (st->blas, opb)");
  ck_assert_str_eq(op, "cublasGemmStridedBatchedEx");
  ddp_device_op_name(op, sizeof op, "err"); /* a variable: the whole text */
  ck_assert_str_eq(op, "err");
  ddp_device_op_name(op, sizeof op, "(x)"); /* nothing before '(': the whole text */
  ck_assert_str_eq(op, "(x)");
  ddp_device_op_name(op, sizeof op, NULL);
  ck_assert_str_eq(op, "?");
  char tiny[6];
  ddp_device_op_name(tiny, sizeof tiny, "cudaMemcpyAsync(a, b)");
  ck_assert_str_eq(tiny, "cudaM"); /* truncated, terminated */
}
END_TEST

START_TEST(test_device_error_names_rank_device_and_operation) {
  char msg[256];
  ddp_device_error_message(msg, sizeof msg, 3, 1, "cublasGemmStridedBatchedEx(h, a, b)", "cuBLAS",
                           "the GPU program failed to execute", 13);
  ck_assert_str_eq(msg,
                   "rank 3: cublasGemmStridedBatchedEx failed on cuda:1: the GPU program "
                   "failed to execute (cuBLAS error 13)");
  ddp_device_error_message(msg, sizeof msg, 0, -1, "cudaSetDevice(9)", "CUDA", NULL, 101);
  ck_assert_str_eq(msg, "rank 0: cudaSetDevice failed on cuda:-1: unknown error (CUDA error 101)");
}
END_TEST

START_TEST(test_device_error_oom_says_asked_free_held_and_what_to_change) {
  const ddp_oom_report_t r = {.rank = 5,
                              .device = 2,
                              .what = "cudaMalloc",
                              .requested = 3221225472u, /* 3 GiB */
                              .free_bytes = 1073741824u,
                              .total_bytes = (size_t)80 << 30,
                              .in_use = (size_t)70 << 30,
                              .reserved = (size_t)75 << 30};
  char msg[512];
  ddp_device_oom_message(msg, sizeof msg, &r);
  ddp_assert_contains(msg, "rank 5: cudaMalloc of 3221225472 bytes (3072.0 MiB) failed on cuda:2");
  ddp_assert_contains(msg, "out of memory with 1024.0 MiB free (1073741824 bytes) of 81920.0 MiB");
  ddp_assert_contains(msg, "ddptrain holds 76800.0 MiB (71680.0 MiB in use)");
  ddp_assert_contains(msg, "lower --tokens-per-batch");
  /* A short buffer truncates; it never overflows. */
  char small[24];
  memset(small, 'x', sizeof small);
  ddp_device_oom_message(small, 16, &r);
  ck_assert_uint_eq(strlen(small), 15);
  ck_assert_int_eq(small[16], 'x');
}
END_TEST

#if DDP_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
/* The converters name the rank set for the log (no GPU needed: the device
 * reads as -1 when there is none). */
START_TEST(test_device_error_converters_name_the_rank) {
  ddp_log_set_rank(6, 8);
  ddp_log_set_all_ranks(1);
  ddp_test_log_start();
  ck_assert_int_eq(DDP_FOREIGN_STATUS(ddp_cuda_status_, cudaErrorInvalidValue), DDP_ERR_CUDA);
  ck_assert_int_eq(DDP_FOREIGN_STATUS(ddp_cublas_status_, CUBLAS_STATUS_EXECUTION_FAILED),
                   DDP_ERR_CUBLAS);
  char *out = ddp_test_log_stop();
  ddp_log_set_rank(0, 1);
  ddp_log_set_all_ranks(0);
  ddp_assert_contains(out, "rank 6: cudaErrorInvalidValue failed on cuda:");
  ddp_assert_contains(out, "rank 6: CUBLAS_STATUS_EXECUTION_FAILED failed on cuda:");
  ddp_assert_contains(out, "(cuBLAS error 13)");
  free(out);
}
END_TEST
#endif

static Suite *device_error_suite(void) {
  Suite *s = suite_create("device_error");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_device_error_op_name_is_the_called_function);
  tcase_add_test(tc, test_device_error_names_rank_device_and_operation);
  tcase_add_test(tc, test_device_error_oom_says_asked_free_held_and_what_to_change);
#if DDP_HAVE_CUDA
  tcase_add_test(tc, test_device_error_converters_name_the_rank);
#endif
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(device_error_suite());
}
