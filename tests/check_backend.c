/* The backend table through the CPU backend: registry and device selection,
 * copies, fills and conversions in every dtype, allocation accounting,
 * streams/events, and the start-up GEMM rate measurement. */
#include <config.h>

#include <math.h>
#include <stdint.h>

#include "backend/cpu/cpu_dnnl.h"
#include "check_util.h"
#include "ddptrain/backend.h"

START_TEST(test_backend_registry_order_cuda_first_cpu_last) {
  const ddp_backend_ops_t *const *r = ddp_backend_registry();
  int n = 0;
  while (r[n]) ++n;
  ck_assert_str_eq(r[n - 1]->name, "cpu");
#if DDP_HAVE_CUDA
  ck_assert_int_eq(n, 2);
  ck_assert_str_eq(r[0]->name, "cuda");
#else
  ck_assert_int_eq(n, 1);
#endif
}
END_TEST

START_TEST(test_backend_device_parse) {
  const char *name;
  int idx;
  ck_assert_int_eq(ddp_device_parse("cuda:3", &name, &idx), DDP_OK);
  ck_assert_str_eq(name, "cuda");
  ck_assert_int_eq(idx, 3);
  ck_assert_int_eq(ddp_device_parse(NULL, &name, &idx), DDP_OK);
  ck_assert_str_eq(name, "auto");
  ck_assert_int_eq(idx, -1);
  ck_assert_int_eq(ddp_device_parse("tpu", &name, &idx), DDP_ERR_INVALID_ARG);
}
END_TEST

START_TEST(test_backend_auto_picks_an_available_backend) {
  ddp_backend_config_t cfg = {.device = "auto", .threads = 1};
  ddp_backend_t *be = NULL;
  ck_assert_int_eq(ddp_backend_create(&cfg, &be), DDP_OK);
  ck_assert_int_eq(be->ops->available(NULL, 0), 1);
  ck_assert_int_gt((int)strlen(be->description), 0);
  ddp_backend_destroy(be);
}
END_TEST

START_TEST(test_backend_explicit_cuda_without_gpu_is_an_error) {
  const ddp_backend_ops_t *const *r = ddp_backend_registry();
  if (r[0]->kind == DDP_DEVICE_KIND_CUDA && r[0]->available(NULL, 0)) return; /* GPU host: n/a */
  ddp_backend_config_t cfg = {.device = "cuda:0"};
  ddp_backend_t *be = (ddp_backend_t *)1;
  ddp_test_log_start();
  ddp_status_t st = ddp_backend_create(&cfg, &be);
  char *out = ddp_test_log_stop();
  ck_assert(st == DDP_ERR_NO_DEVICE || st == DDP_ERR_UNSUPPORTED);
  ck_assert_ptr_null(be);
  ddp_assert_contains(out, "device 'cuda:0'");
#if DDP_HAVE_CUDA
  ddp_assert_contains(out, "no usable cuda device on this host (");
#endif
  free(out);
  cfg.device = "cpu:1";
  ddp_test_log_start();
  ck_assert_int_eq(ddp_backend_create(&cfg, &be), DDP_ERR_INVALID_ARG);
  free(ddp_test_log_stop());
}
END_TEST

START_TEST(test_backend_auto_skips_backends_without_model_ops) {
  /* Training needs the nn kernels: "auto" must land on a backend that has
   * them, and naming one without them is an error, never a late failure. */
  ddp_backend_config_t cfg = {.device = "auto", .threads = 1, .need_model_ops = 1};
  ddp_backend_t *be = NULL;
  ck_assert_int_eq(ddp_backend_create(&cfg, &be), DDP_OK);
  ck_assert_ptr_nonnull(be->ops->nn);
  ddp_backend_destroy(be);
  for (const ddp_backend_ops_t *const *r = ddp_backend_registry(); *r; ++r) {
    if ((*r)->nn || !(*r)->available(NULL, 0)) continue;
    cfg.device = (*r)->name;
    ddp_test_log_start();
    ck_assert_int_eq(ddp_backend_create(&cfg, &be), DDP_ERR_UNSUPPORTED);
    char *log = ddp_test_log_stop();
    ddp_assert_contains(log, "has no model kernels");
    free(log);
  }
}
END_TEST

START_TEST(test_backend_cpu_threads_default_and_explicit) {
  ddp_backend_config_t cfg = {.device = "cpu", .threads = 0, .local_size = 1};
  ddp_backend_t *be = NULL;
  ck_assert_int_eq(ddp_backend_create(&cfg, &be), DDP_OK);
  ck_assert_int_ge(be->threads, 1);
  ddp_backend_destroy(be);
  cfg.threads = 3;
  ck_assert_int_eq(ddp_backend_create(&cfg, &be), DDP_OK);
  ck_assert_int_eq(be->threads, 3);
  ddp_assert_contains(be->description, "3 threads");
  ddp_backend_destroy(be);
  cfg.threads = 0;
  cfg.local_size = 1 << 20; /* more ranks than cores: still one thread */
  ck_assert_int_eq(ddp_backend_create(&cfg, &be), DDP_OK);
  ck_assert_int_eq(be->threads, 1);
  ddp_backend_destroy(be);
}
END_TEST

START_TEST(test_backend_alloc_accounting) {
  ddp_backend_t *be = ddp_test_cpu_backend();
  void *a, *b;
  ck_assert_int_eq(ddp_backend_alloc(be, 1000, &a), DDP_OK);
  ck_assert_int_eq(ddp_backend_alloc(be, 24, &b), DDP_OK);
  ck_assert_uint_eq((uintptr_t)a % 256, 0);
  ck_assert_uint_eq(be->bytes_in_use, 1024);
  ddp_backend_free(be, a);
  ck_assert_uint_eq(be->bytes_in_use, 24);
  ck_assert_uint_eq(be->peak_bytes, 1024);
  ddp_backend_free(be, b);
  ddp_backend_free(be, NULL);
  ck_assert_uint_eq(be->alloc_calls, 2);
  ck_assert_uint_eq(be->free_calls, 2);
  ck_assert_uint_eq(be->bytes_in_use, 0);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_backend_alloc(be, SIZE_MAX - 8, &a), DDP_ERR_OOM);
  char *out = ddp_test_log_stop();
  ddp_assert_contains(out, "cannot allocate");
  free(out);
  ddp_backend_destroy(be);
}
END_TEST

/* Without a caching allocator (the CPU) every alloc is a raw allocation and
 * nothing is held beyond what is in use; trim has nothing to release. The
 * peak_mem_mb metric reads the same peak. */
START_TEST(test_backend_mem_stats_without_cache) {
  ddp_backend_t *be = ddp_test_cpu_backend();
  void *a, *b;
  ck_assert_int_eq(ddp_backend_alloc(be, 3 << 20, &a), DDP_OK);
  ck_assert_int_eq(ddp_backend_alloc(be, 1 << 20, &b), DDP_OK);
  ddp_backend_free(be, a);
  ddp_caching_alloc_stats_t s;
  ddp_backend_mem_stats(be, &s);
  ck_assert_uint_eq(s.raw_alloc_calls, 2);
  ck_assert_uint_eq(s.raw_free_calls, 1);
  ck_assert_uint_eq(s.live_blocks, 1);
  ck_assert_uint_eq(s.bytes_in_use, 1 << 20);
  ck_assert_uint_eq(s.bytes_reserved, 1 << 20);
  ck_assert_uint_eq(s.peak_bytes_in_use, 4 << 20);
  ck_assert_uint_eq(s.peak_bytes_reserved, 4 << 20);
  ck_assert_double_eq(ddp_backend_peak_mem_mb(be), 4.0);
  ck_assert_uint_eq(ddp_backend_trim(be), 0);
  ddp_backend_free(be, b);
  ddp_backend_destroy(be);
}
END_TEST

START_TEST(test_backend_fill_copy_convert_every_dtype) {
  ddp_backend_t *be = ddp_test_cpu_backend();
  enum { N = 37 };
  void *d16, *d32;
  ck_assert_int_eq(ddp_backend_alloc(be, N * 4, &d32), DDP_OK);
  ck_assert_int_eq(ddp_backend_alloc(be, N * 2, &d16), DDP_OK);
  const ddp_dtype_t halves[] = {DDP_DTYPE_BF16, DDP_DTYPE_F16};
  for (int h = 0; h < 2; ++h) {
    ck_assert_int_eq(be->ops->fill(be, d16, halves[h], 1.0f / 3.0f, N, NULL), DDP_OK);
    ck_assert_int_eq(be->ops->convert(be, d32, DDP_DTYPE_F32, d16, halves[h], N, NULL), DDP_OK);
    float host[N];
    ck_assert_int_eq(
        ddp_backend_copy(be, host, d32, sizeof host, DDP_COPY_KIND_DEVICE_TO_HOST, NULL), DDP_OK);
    ck_assert_int_eq(ddp_backend_sync(be, NULL), DDP_OK);
    float expect = halves[h] == DDP_DTYPE_BF16 ? ddp_bf16_to_f32(ddp_f32_to_bf16(1.0f / 3.0f))
                                               : ddp_f16_to_f32(ddp_f32_to_f16(1.0f / 3.0f));
    for (int i = 0; i < N; ++i) ck_assert(host[i] == expect);
  }
  int32_t ints[N];
  ck_assert_int_eq(be->ops->fill(be, d32, DDP_DTYPE_I32, -7.0f, N, NULL), DDP_OK);
  ck_assert_int_eq(ddp_backend_copy(be, ints, d32, sizeof ints, DDP_COPY_KIND_DEVICE_TO_HOST, NULL),
                   DDP_OK);
  for (int i = 0; i < N; ++i) ck_assert_int_eq(ints[i], -7);
  ddp_test_log_start();
  ck_assert_int_eq(be->ops->fill(be, d32, (ddp_dtype_t)99, 0.0f, N, NULL), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_backend_copy(be, NULL, d32, 4, DDP_COPY_KIND_DEVICE_TO_HOST, NULL),
                   DDP_ERR_INVALID_ARG);
  free(ddp_test_log_stop());
  ddp_backend_free(be, d16);
  ddp_backend_free(be, d32);
  ddp_backend_destroy(be);
}
END_TEST

START_TEST(test_backend_streams_and_events) {
  ddp_backend_t *be = ddp_test_cpu_backend();
  ddp_stream_t s = NULL;
  ddp_event_t e = NULL;
  ck_assert_int_eq(be->ops->stream_create(be, &s), DDP_OK);
  ck_assert_ptr_nonnull(s);
  ck_assert_int_eq(be->ops->event_create(be, &e), DDP_OK);
  ck_assert_ptr_nonnull(e);
  ck_assert_int_eq(be->ops->event_record(be, e, s), DDP_OK);
  ck_assert_int_eq(be->ops->stream_wait_event(be, NULL, e), DDP_OK);
  ck_assert_int_eq(be->ops->synchronize(be, s), DDP_OK);
  be->ops->event_destroy(be, e);
  be->ops->stream_destroy(be, s);
  size_t free_b = 0, total_b = 0;
  ck_assert_int_eq(be->ops->mem_info(be, &free_b, &total_b), DDP_OK);
  ck_assert_uint_gt(total_b, 0);
  ck_assert_uint_le(free_b, total_b);
  ddp_backend_destroy(be);
}
END_TEST

START_TEST(test_backend_measure_gemm_gflops) {
  ddp_backend_t *be = ddp_test_cpu_backend();
  double gf = 0.0;
  ck_assert_int_eq(ddp_backend_measure_gemm_gflops(be, 64, 0.01, &gf), DDP_OK);
  ck_assert(gf > 0.01 && gf < 1e6);
  ck_assert_uint_eq(be->bytes_in_use, 0); /* it frees what it took */
  ddp_test_log_start();
  ck_assert_int_eq(ddp_backend_measure_gemm_gflops(be, 0, 0.01, &gf), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_backend_measure_gemm_gflops_dtype(be, DDP_DTYPE_I32, 64, 0.01, &gf),
                   DDP_ERR_INVALID_ARG);
  /* The CPU GEMM is fp32 only: a half-precision measurement fails with
   * the GEMM's error, and frees what it took (the trainer measures fp32 on
   * the CPU whatever the precision). */
  ck_assert_int_ne(ddp_backend_measure_gemm_gflops_dtype(be, DDP_DTYPE_BF16, 64, 0.01, &gf),
                   DDP_OK);
  free(ddp_test_log_stop());
  ck_assert_uint_eq(be->bytes_in_use, 0);
  ddp_backend_destroy(be);
}
END_TEST

/* oneDNN's GEMM rate, which the CPU's peak also counts: measured where the
 * build has oneDNN, refused clearly without (no speed is asserted: timings
 * belong to the benchmarks). */
START_TEST(test_cpu_peak_counts_onednn_gemm) {
  double gf = -1.0;
  ddp_test_log_start();
  const ddp_status_t st = ddp_cpu_dnnl_sgemm_gflops(128, 0.02, 1, &gf);
  const ddp_status_t bad = ddp_cpu_dnnl_sgemm_gflops(0, 0.02, 1, &gf);
  char *log = ddp_test_log_stop();
  if (!ddp_cpu_dnnl_available()) {
    ck_assert_int_eq(st, DDP_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(log, "this build has no oneDNN"));
  } else {
    ck_assert_int_eq(st, DDP_OK);
    ck_assert(gf > 0.01 && gf < 1e6);
    ck_assert_int_eq(bad, DDP_ERR_INVALID_ARG);
  }
  free(log);
}
END_TEST

static Suite *backend_suite(void) {
  Suite *s = suite_create("backend");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_backend_registry_order_cuda_first_cpu_last);
  tcase_add_test(tc, test_backend_device_parse);
  tcase_add_test(tc, test_backend_auto_picks_an_available_backend);
  tcase_add_test(tc, test_backend_explicit_cuda_without_gpu_is_an_error);
  tcase_add_test(tc, test_backend_auto_skips_backends_without_model_ops);
  tcase_add_test(tc, test_backend_cpu_threads_default_and_explicit);
  tcase_add_test(tc, test_backend_alloc_accounting);
  tcase_add_test(tc, test_backend_mem_stats_without_cache);
  tcase_add_test(tc, test_backend_fill_copy_convert_every_dtype);
  tcase_add_test(tc, test_backend_streams_and_events);
  tcase_add_test(tc, test_backend_measure_gemm_gflops);
  tcase_add_test(tc, test_cpu_peak_counts_onednn_gemm);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(backend_suite());
}
