/* DDPTRAIN_* settings: defaults, overrides, validation, and the warning for
 * variables that are not ddptrain settings. */
#include <stdlib.h>

#include "check_util.h"
#include "core/env.h"

START_TEST(test_env_defaults_and_names) {
  unsetenv("DDPTRAIN_LOG_LEVEL");
  ck_assert_str_eq(ddp_env_name(DDP_ENV_LOG_LEVEL), "DDPTRAIN_LOG_LEVEL");
  ck_assert_str_eq(ddp_env_get(DDP_ENV_LOG_LEVEL), "info");
  ck_assert_int_eq(ddp_env_is_set(DDP_ENV_LOG_LEVEL), 0);
  setenv("DDPTRAIN_LOG_LEVEL", "debug", 1);
  ck_assert_str_eq(ddp_env_get(DDP_ENV_LOG_LEVEL), "debug");
  ck_assert_int_eq(ddp_env_is_set(DDP_ENV_LOG_LEVEL), 1);
  unsetenv("DDPTRAIN_LOG_LEVEL");
}
END_TEST

START_TEST(test_env_bad_values_are_errors_naming_the_variable) {
  int b;
  double d;
  setenv("DDPTRAIN_DEBUG_CHECKS", "yes", 1);
  setenv("DDPTRAIN_CPU_PEAK_GFLOPS", "12abc", 1);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_env_get_bool(DDP_ENV_DEBUG_CHECKS, &b), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_env_get_double(DDP_ENV_CPU_PEAK_GFLOPS, &d), DDP_ERR_INVALID_ARG);
  setenv("DDPTRAIN_LOG_LEVEL", "chatty", 1);
  ck_assert_int_eq(ddp_env_apply_logging(), DDP_ERR_INVALID_ARG);
  char *out = ddp_test_log_stop();
  ddp_assert_contains(out, "DDPTRAIN_DEBUG_CHECKS='yes'");
  ddp_assert_contains(out, "DDPTRAIN_CPU_PEAK_GFLOPS='12abc'");
  ddp_assert_contains(out, "DDPTRAIN_LOG_LEVEL='chatty'");
  free(out);
  setenv("DDPTRAIN_DEBUG_CHECKS", "1", 1);
  setenv("DDPTRAIN_CPU_PEAK_GFLOPS", "123.5", 1);
  ck_assert_int_eq(ddp_env_get_bool(DDP_ENV_DEBUG_CHECKS, &b), DDP_OK);
  ck_assert_int_eq(b, 1);
  ck_assert_int_eq(ddp_env_get_double(DDP_ENV_CPU_PEAK_GFLOPS, &d), DDP_OK);
  ck_assert(d == 123.5);
  unsetenv("DDPTRAIN_DEBUG_CHECKS");
  unsetenv("DDPTRAIN_CPU_PEAK_GFLOPS");
  unsetenv("DDPTRAIN_LOG_LEVEL");
}
END_TEST

START_TEST(test_env_apply_logging_sets_level) {
  setenv("DDPTRAIN_LOG_LEVEL", "warn", 1);
  ck_assert_int_eq(ddp_env_apply_logging(), DDP_OK);
  ck_assert_int_eq(ddp_log_level(), DDP_LOG_LEVEL_WARN);
  unsetenv("DDPTRAIN_LOG_LEVEL");
  ck_assert_int_eq(ddp_env_apply_logging(), DDP_OK);
  ck_assert_int_eq(ddp_log_level(), DDP_LOG_LEVEL_INFO);
}
END_TEST

START_TEST(test_env_overrides_logged_and_typos_warned) {
  ddp_log_set_level(DDP_LOG_LEVEL_INFO);
  setenv("DDPTRAIN_DEBUG_CHECKS", "1", 1);
  setenv("DDPTRAIN_DEBUG_CHEKCS", "1", 1);
  ddp_test_log_start();
  int unknown = ddp_env_log_overrides();
  char *out = ddp_test_log_stop();
  ck_assert_int_eq(unknown, 1);
  ddp_assert_contains(out, "environment: DDPTRAIN_DEBUG_CHECKS=1 (default 0)");
  ddp_assert_contains(out, "WARN: environment: DDPTRAIN_DEBUG_CHEKCS is not a ddptrain setting");
  free(out);
  unsetenv("DDPTRAIN_DEBUG_CHECKS");
  unsetenv("DDPTRAIN_DEBUG_CHEKCS");
}
END_TEST

START_TEST(test_env_help_lists_every_variable) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ddp_env_print_help(f);
  fclose(f);
  for (int i = 0; i < DDP_ENV_COUNT_; ++i) ddp_assert_contains(buf, ddp_env_name((ddp_env_id_t)i));
  free(buf);
}
END_TEST

static Suite *env_suite(void) {
  Suite *s = suite_create("env");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_env_defaults_and_names);
  tcase_add_test(tc, test_env_bad_values_are_errors_naming_the_variable);
  tcase_add_test(tc, test_env_apply_logging_sets_level);
  tcase_add_test(tc, test_env_overrides_logged_and_typos_warned);
  tcase_add_test(tc, test_env_help_lists_every_variable);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(env_suite());
}
