/* --nvtx: ranges switch on in a CUDA build (and push/pop run without a
 * profiler attached), are refused with a message naming the flag in a build
 * without CUDA, and switch off in both. */
#include <config.h>

#include "check_util.h"
#include "trace/nvtx.h"

START_TEST(test_nvtx_enable_follows_the_build) {
  ck_assert_int_eq(ddp_nvtx_enable(0), DDP_OK);
  ck_assert_int_eq(ddp_nvtx_enabled(), 0);
#if DDP_HAVE_CUDA
  ck_assert_int_eq(ddp_nvtx_enable(1), DDP_OK);
  ck_assert_int_eq(ddp_nvtx_enabled(), 1);
  for (int i = 0; i < 3; ++i) {
    DDP_NVTX_PUSH("step %d", i);
    DDP_NVTX_PUSH("nested %s", "range");
    DDP_NVTX_POP();
    DDP_NVTX_POP();
  }
#else
  ddp_test_log_start();
  ck_assert_int_eq(ddp_nvtx_enable(1), DDP_ERR_UNSUPPORTED);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "--nvtx on: this build has no CUDA");
  free(log);
  ck_assert_int_eq(ddp_nvtx_enabled(), 0);
#endif
  ck_assert_int_eq(ddp_nvtx_enable(0), DDP_OK);
  ck_assert_int_eq(ddp_nvtx_enabled(), 0);
}
END_TEST

static Suite *nvtx_suite(void) {
  Suite *s = suite_create("nvtx");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_nvtx_enable_follows_the_build);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(nvtx_suite());
}
