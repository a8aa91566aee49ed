/* Command-line parameters: defaults, both value syntaxes, and every kind of
 * bad input (unknown flag with a suggestion, missing value, malformed number,
 * out-of-range value, bad device, stray argument). */
#include <stdarg.h>

#include "ddptrain/options.h"
#include "check_util.h"

#define parse ddp_test_parse

START_TEST(test_options_defaults) {
  ddp_options_t o;
  ck_assert_int_eq(ddp_options_defaults(&o), DDP_OK);
  ck_assert_str_eq(o.device, "auto");
  ck_assert_int_eq(o.threads, 0);
  ck_assert_int_eq(o.seed, 1337);
  ck_assert(o.peak_gflops == 0.0);
  ck_assert_str_eq(o.tf32, "on"); /* TF32 for fp32 GEMMs on GPUs unless told otherwise */
  ck_assert_int_eq(o.help + o.version + o.build_info, 0);
}
END_TEST

START_TEST(test_options_tf32_on_off) {
  ddp_options_t o;
  char *log;
  const char *bad[] = {"yes", "1", "", "tf32", "onn"};
  for (int i = 0; i < 5; ++i) {
    ck_assert_int_eq(parse(&o, &log, "--tf32", bad[i], NULL), DDP_ERR_INVALID_ARG);
    ddp_assert_contains(log, "option --tf32:");
    free(log);
  }
  ck_assert_int_eq(parse(&o, NULL, "--tf32", "off", NULL), DDP_OK);
  ck_assert_str_eq(o.tf32, "off");
  ck_assert_int_eq(parse(&o, NULL, "--tf32", "ON", NULL), DDP_OK);
}
END_TEST

START_TEST(test_options_both_value_syntaxes) {
  ddp_options_t o;
  ck_assert_int_eq(parse(&o, NULL, "--seed", "7", "--threads=3", "--device=cuda:1", "--peak-gflops",
                         "12.5", NULL),
                   DDP_OK);
  ck_assert_int_eq(o.seed, 7);
  ck_assert_int_eq(o.threads, 3);
  ck_assert_str_eq(o.device, "cuda:1");
  ck_assert(o.peak_gflops == 12.5);
  ck_assert_int_eq(parse(&o, NULL, "-h", "--version", "--build-info", NULL), DDP_OK);
  ck_assert_int_eq(o.help + o.version + o.build_info, 3);
}
END_TEST

START_TEST(test_options_unknown_flag_suggests_closest) {
  ddp_options_t o;
  char *log;
  ck_assert_int_eq(parse(&o, &log, "--seeed", "1", NULL), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "unknown option '--seeed'; did you mean '--seed'?");
  free(log);
  ck_assert_int_eq(parse(&o, &log, "--frobnicate", NULL), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "unknown option '--frobnicate' (see --help)");
  free(log);
  ck_assert_int_eq(parse(&o, &log, "-x", NULL), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "unknown option '-x'");
  free(log);
}
END_TEST

START_TEST(test_options_invalid_numbers) {
  ddp_options_t o;
  char *log;
  const char *bad_ints[] = {"abc", "12x", "", "1.5", " "};
  for (int i = 0; i < 5; ++i) {
    ck_assert_int_eq(parse(&o, &log, "--threads", bad_ints[i], NULL), DDP_ERR_INVALID_ARG);
    ddp_assert_contains(log, "option --threads:");
    ddp_assert_contains(log, "is not an integer");
    free(log);
  }
  const char *bad_floats[] = {"fast", "1e400x", "nan", "inf", "3,5"};
  for (int i = 0; i < 5; ++i) {
    ck_assert_int_eq(parse(&o, &log, "--peak-gflops", bad_floats[i], NULL), DDP_ERR_INVALID_ARG);
    ddp_assert_contains(log, "is not a finite number");
    free(log);
  }
}
END_TEST

START_TEST(test_options_out_of_range) {
  ddp_options_t o;
  char *log;
  ck_assert_int_eq(parse(&o, &log, "--threads", "-1", NULL), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "option --threads: -1 is out of range [0, 4096]");
  free(log);
  ck_assert_int_eq(parse(&o, &log, "--threads", "99999999999999999999", NULL), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "out of range");
  free(log);
  ck_assert_int_eq(parse(&o, &log, "--peak-gflops", "-3", NULL), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "option --peak-gflops: -3 is out of range");
  free(log);
  ck_assert_int_eq(parse(&o, &log, "--peak-gflops", "1e400", NULL), DDP_ERR_INVALID_ARG);
  free(log);
  ck_assert_int_eq(parse(&o, NULL, "--threads", "4096", NULL), DDP_OK);
}
END_TEST

START_TEST(test_options_missing_value_and_stray_arguments) {
  ddp_options_t o;
  char *log;
  ck_assert_int_eq(parse(&o, &log, "--seed", NULL), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "option --seed needs a value");
  free(log);
  ck_assert_int_eq(parse(&o, &log, "train.bin", NULL), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "unexpected argument 'train.bin'");
  free(log);
  ck_assert_int_eq(parse(&o, &log, "--help=yes", NULL), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "option --help takes no value");
  free(log);
}
END_TEST

START_TEST(test_options_bad_device) {
  ddp_options_t o;
  char *log;
  const char *bad[] = {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "cuda:99999"};
  for (int i = 0; i < 6; ++i) {
    ck_assert_int_eq(parse(&o, &log, "--device", bad[i], NULL), DDP_ERR_INVALID_ARG);
    ddp_assert_contains(log, "option --device:");
    free(log);
  }
  ck_assert_str_eq(o.device, "auto"); /* a rejected value is not stored */
  const char *good[] = {"auto", "cpu", "cuda", "cuda:0", "cuda:7"};
  for (int i = 0; i < 5; ++i) ck_assert_int_eq(parse(&o, NULL, "--device", good[i], NULL), DDP_OK);
}
END_TEST

START_TEST(test_options_help_lists_every_flag) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ddp_options_print_help(f);
  fclose(f);
  ck_assert_int_gt(ddp_options_count(), 0);
  for (int i = 0; i < ddp_options_count(); ++i) {
    char flag[64];
    snprintf(flag, sizeof flag, "--%s", ddp_options_name(i));
    ddp_assert_contains(buf, flag);
  }
  ddp_assert_contains(buf, "DDPTRAIN_LOG_LEVEL");
  ddp_assert_contains(buf, "Exit status");
  free(buf);
}
END_TEST

/* ddp_options_format is what checkpoints record: every value must parse
 * back to itself (a resumed run compares the two as text). Actions take no
 * value, so one that is on is given by name. */
START_TEST(test_options_format_round_trips) {
  ddp_options_t o, back;
  char *log = NULL;
  ck_assert_int_eq(parse(&o, &log, "--lr", "0.001", "--save", "ck dir", "--detect-anomaly", NULL),
                   DDP_OK);
  free(log);
  ck_assert_int_eq(ddp_options_defaults(&back), DDP_OK);
  char value[1100], arg[1200];
  char *argv[] = {"ddptrain", arg};
  for (int i = 0; i < ddp_options_count(); ++i) {
    const char *name = ddp_options_name(i);
    ck_assert_int_eq(ddp_options_format(&o, i, value, sizeof value), 0);
    if (strcmp(name, "lr") == 0) ck_assert_str_eq(value, "0.001");
    if (strcmp(name, "save") == 0) ck_assert_str_eq(value, "ck dir");
    if (strcmp(name, "detect-anomaly") == 0) ck_assert_str_eq(value, "1");
    snprintf(arg, sizeof arg, "--%s=%s", name, value);
    ddp_test_log_start();
    ddp_status_t st = ddp_options_parse(&back, 2, argv);
    free(ddp_test_log_stop());
    if (st != DDP_OK && strcmp(value, "1") == 0) { /* an action that is on */
      snprintf(arg, sizeof arg, "--%s", name);
      ck_assert_int_eq(ddp_options_parse(&back, 2, argv), DDP_OK);
    }
    ck_assert_msg(ddp_options_value_hash(&o, i) == ddp_options_value_hash(&back, i),
                  "--%s=%s does not parse back to itself", name, value);
  }
  ck_assert_int_eq(ddp_options_format(&o, -1, value, sizeof value), -1);
  int seed = 0;
  while (strcmp(ddp_options_name(seed), "seed") != 0) ++seed;
  ck_assert_int_eq(ddp_options_format(&o, seed, value, 4), -1); /* "1337" needs 5 */
}
END_TEST

static Suite *options_suite(void) {
  Suite *s = suite_create("options");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_options_defaults);
  tcase_add_test(tc, test_options_both_value_syntaxes);
  tcase_add_test(tc, test_options_unknown_flag_suggests_closest);
  tcase_add_test(tc, test_options_invalid_numbers);
  tcase_add_test(tc, test_options_out_of_range);
  tcase_add_test(tc, test_options_missing_value_and_stray_arguments);
  tcase_add_test(tc, test_options_bad_device);
  tcase_add_test(tc, test_options_tf32_on_off);
  tcase_add_test(tc, test_options_help_lists_every_flag);
  tcase_add_test(tc, test_options_format_round_trips);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(options_suite());
}
