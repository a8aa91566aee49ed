/* Command-line parameters: defaults, both value syntaxes, every kind of
 * bad input (unknown flag with a suggestion, missing value, malformed number,
 * out-of-range value, bad device, stray argument), combinations of flags
 * refused before the ranks start, which flags ranks must agree on, and
 * --config FILE under the command line. */
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

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
  ck_assert_str_eq(o.tf32, "on");          /* TF32 for fp32 GEMMs on GPUs unless told otherwise */
  ck_assert_str_eq(o.deterministic, "on"); /* deterministic GPU convolutions by default */
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

START_TEST(test_options_deterministic_on_off) {
  ddp_options_t o;
  char *log;
  const char *bad[] = {"yes", "0", "", "deterministic", "offf"};
  for (int i = 0; i < 5; ++i) {
    ck_assert_int_eq(parse(&o, &log, "--deterministic", bad[i], NULL), DDP_ERR_INVALID_ARG);
    ddp_assert_contains(log, "option --deterministic:");
    free(log);
  }
  ck_assert_int_eq(parse(&o, NULL, "--deterministic", "off", NULL), DDP_OK);
  ck_assert_str_eq(o.deterministic, "off");
  ck_assert_int_eq(parse(&o, NULL, "--deterministic=ON", NULL), DDP_OK);
}
END_TEST

START_TEST(test_options_winograd_on_off) {
  ddp_options_t o;
  char *log;
  ck_assert_int_eq(parse(&o, NULL, NULL), DDP_OK);
  ck_assert_str_eq(o.winograd, "on"); /* the CPU's fast 3x3 kernels by default */
  const char *bad[] = {"yes", "0", "", "direct", "auto"};
  for (int i = 0; i < 5; ++i) {
    ck_assert_int_eq(parse(&o, &log, "--winograd", bad[i], NULL), DDP_ERR_INVALID_ARG);
    ddp_assert_contains(log, "option --winograd:");
    free(log);
  }
  ck_assert_int_eq(parse(&o, NULL, "--winograd", "off", NULL), DDP_OK);
  ck_assert_str_eq(o.winograd, "off");
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

/* Parses the flags, then expects ddp_options_validate to refuse them with
 * one line containing `text` (NULL: to accept them). */
static void expect_combination(const char *text, const char *a, const char *b, const char *c,
                               const char *d) {
  ddp_options_t o;
  ck_assert_int_eq(parse(&o, NULL, a, b, c, d, NULL), DDP_OK);
  ddp_test_log_start();
  const ddp_status_t st = ddp_options_validate(&o);
  char *log = ddp_test_log_stop();
  if (!text) {
    ck_assert_msg(st == DDP_OK, "%s %s %s %s refused: %s", a, b, c ? c : "", d ? d : "", log);
  } else {
    ck_assert_msg(st == DDP_ERR_INVALID_ARG, "%s %s %s %s accepted", a, b, c ? c : "", d ? d : "");
    ddp_assert_contains(log, text);
    const char *nl = strchr(log, '\n');
    ck_assert_msg(nl && nl[1] == '\0', "more than one line: %s", log);
  }
  free(log);
}

START_TEST(test_options_validate_refuses_combinations) {
  expect_combination(NULL, "--seq-len", "64", "--tokens-per-batch", "64");
  expect_combination("option --tokens-per-batch 10 is smaller than --seq-len 48", "--seq-len", "48",
                     "--tokens-per-batch", "10");
  expect_combination("option --n-embd 7 is not a multiple of --n-head 2", "--n-embd", "7",
                     "--n-head", "2");
  expect_combination(NULL, "--n-embd", "8", "--n-head", "2");
  expect_combination("option --min-lr 0.5 exceeds --lr 0.1", "--min-lr", "0.5", "--lr", "0.1");
  expect_combination("option --val-data needs --data", "--val-data", "v.bin", NULL, NULL);
  expect_combination(NULL, "--val-data", "v.bin", "--data", "t.bin");
  expect_combination("option --resume auto needs --save DIR", "--resume", "auto", NULL, NULL);
  expect_combination(NULL, "--resume", "auto", "--save", "ck");
  expect_combination("option --init-from starts a new run from weights, --resume ck continues one",
                     "--init-from", "w.st", "--resume", "ck");
  expect_combination(NULL, "--init-from", "w.st", "--save", "ck"); /* --resume auto: see below */
  /* the loss scale floor matters only where a scaler runs */
  expect_combination("option --loss-scale-min 1e+06 exceeds --loss-scale-init 65536", "--precision",
                     "fp16", "--loss-scale-min", "1e6");
  expect_combination(NULL, "--precision", "bf16", "--loss-scale-min", "1e9");
  /* the scaling model: an action of --plan-only, its cluster checked now */
  expect_combination("option --scale needs --plan-only", "--scale", "--json", NULL, NULL);
  expect_combination("option --cluster needs --scale", "--plan-only", "--cluster", "dgx-h100",
                     NULL);
  expect_combination("option --cluster dgx-b9000: not a preset", "--plan-only", "--scale",
                     "--cluster", "dgx-b9000");
  expect_combination(NULL, "--plan-only", "--scale", "--cluster", "dgx-h100");
}
END_TEST

/* --init-from takes from its file only what the command line left open:
 * ddp_options_given tells a typed flag from a default, for the runtime's
 * rows and a model's alike. */
START_TEST(test_options_given_tells_typed_flags_from_defaults) {
  ddp_options_t o;
  ck_assert_int_eq(parse(&o, NULL, "--seq-len", "128", "--n-head=4", NULL), DDP_OK);
  ck_assert_int_eq(ddp_options_given(&o, "seq-len"), 1); /* typed, though it is the default */
  ck_assert_int_eq(ddp_options_given(&o, "n-head"), 1);
  ck_assert_int_eq(ddp_options_given(&o, "n-embd"), 0);
  ck_assert_int_eq(ddp_options_given(&o, "tokens-per-batch"), 0);
  ck_assert_int_eq(ddp_options_given(&o, "no-such-flag"), 0);
  ck_assert_int_eq(parse(&o, NULL, "-h", NULL), DDP_OK);
  ck_assert_int_eq(ddp_options_given(&o, "help"), 1);
  ck_assert_int_eq(ddp_options_given(&o, "seq-len"), 0);
  /* --resume auto with --init-from is the requeue-safe fine-tuning job */
  ck_assert_int_eq(parse(&o, NULL, "--init-from", "w.st", "--resume", "auto", "--save", "ck", NULL),
                   DDP_OK);
  ck_assert_int_eq(ddp_options_validate(&o), DDP_OK);
}
END_TEST

START_TEST(test_options_rank_rules) {
  ddp_options_t o;
  ck_assert_int_eq(parse(&o, NULL, "--device", "cuda:3", "--save", "ck", "--threads", "3", NULL),
                   DDP_OK);
  char value[1100];
  int device = -1, save = -1, threads = -1, lr = -1, tf32 = -1, deterministic = -1, winograd = -1;
  for (int i = 0; i < ddp_options_count(); ++i) {
    const char *name = ddp_options_name(i);
    if (strcmp(name, "device") == 0) device = i;
    if (strcmp(name, "save") == 0) save = i;
    if (strcmp(name, "threads") == 0) threads = i;
    if (strcmp(name, "lr") == 0) lr = i;
    if (strcmp(name, "tf32") == 0) tf32 = i;
    if (strcmp(name, "deterministic") == 0) deterministic = i;
    if (strcmp(name, "winograd") == 0) winograd = i;
  }
  /* the kind of device must agree, not its number */
  ck_assert_int_eq(ddp_options_rank_value(&o, device, value, sizeof value), 0);
  ck_assert_str_eq(value, "cuda");
  /* rank 0 writes checkpoints: every rank must be given the same --save,
   * though a resume may change it */
  ck_assert_int_eq(ddp_options_rank_value(&o, save, value, sizeof value), 0);
  ck_assert_str_eq(value, "ck");
  ck_assert_int_eq(ddp_options_must_agree(save), 0);
  /* a run's settings: both */
  ck_assert_int_eq(ddp_options_rank_value(&o, lr, value, sizeof value), 0);
  ck_assert_int_eq(ddp_options_must_agree(lr), 1);
  ck_assert_int_eq(ddp_options_must_agree(tf32), 1);
  ck_assert_int_eq(ddp_options_must_agree(deterministic), 1);
  ck_assert_int_eq(ddp_options_must_agree(winograd), 1); /* the ranks' rounding */
  /* a rank's own cores */
  ck_assert_int_eq(ddp_options_rank_value(&o, threads, value, sizeof value), 1);
  ck_assert_int_eq(ddp_options_must_agree(threads), 0);
  ck_assert_int_eq(ddp_options_rank_value(&o, -1, value, sizeof value), -1);
  ck_assert_int_eq(ddp_options_rank_value(&o, save, value, 2), -1); /* "ck" needs 3 */
}
END_TEST

/* --config FILE: a file of flags under the command line, as the parser
 * sees it (the program-level cases are tests/test_config_file.sh). */
static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

START_TEST(test_options_config_file) {
  char path[] = "/tmp/ddp_check_options_XXXXXX";
  const int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  ddp_options_t o;
  char *log;
  write_file(path,
             "{\"seed\": 7, \"lr\": \"0.01\", \"steps\": 12, \"detect-anomaly\": true, "
             "\"json\": false, \"device\": \"cpu\", \"n-layer\": 3}");
  /* the command line wins wherever --config stands */
  ck_assert_int_eq(parse(&o, NULL, "--seed", "9", "--config", path, "--steps=5", NULL), DDP_OK);
  ck_assert_int_eq(o.seed, 9);
  ck_assert_int_eq(o.steps, 5);
  ck_assert(o.lr == 0.01);
  ck_assert_int_eq(o.detect_anomaly, 1);
  ck_assert_int_eq(o.json, 0);
  ck_assert_str_eq(o.device, "cpu");
  ck_assert_str_eq(o.config, path);
  int64_t layers = 0;
  ck_assert_int_eq(ddp_options_get_int(&o, "n-layer", &layers), DDP_OK);
  ck_assert_int_eq(layers, 3);
  /* its path is a job setting: not compared on resume */
  for (int i = 0; i < ddp_options_count(); ++i)
    if (strcmp(ddp_options_name(i), "config") == 0) ck_assert_int_eq(ddp_options_must_agree(i), 0);
  const struct {
    const char *json, *message;
  } bad[] = {
      {"{\"sede\": 1}", "unknown key 'sede'; did you mean 'seed'?"},
      {"{\"seed\": 1,}", "line 1, column"},
      {"{\"seed\": [1]}", "key 'seed' is an array; --seed takes a whole number or a string"},
      {"{\"device\": \"tpu\"}", "option --device: 'tpu' is not valid"},
      {"{\"config\": \"x\"}", "a config file cannot name another"},
      {"[1]", "the top level is an array"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    write_file(path, bad[i].json);
    ck_assert_int_eq(parse(&o, &log, "--config", path, NULL), DDP_ERR_INVALID_ARG);
    ddp_assert_contains(log, "config file ");
    ddp_assert_contains(log, bad[i].message);
    free(log);
  }
  unlink(path);
  ck_assert_int_eq(parse(&o, &log, "--config", path, NULL), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "cannot open it");
  free(log);
  ck_assert_int_eq(parse(&o, NULL, "--config", "", NULL), DDP_OK); /* none */
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
  tcase_add_test(tc, test_options_deterministic_on_off);
  tcase_add_test(tc, test_options_winograd_on_off);
  tcase_add_test(tc, test_options_help_lists_every_flag);
  tcase_add_test(tc, test_options_format_round_trips);
  tcase_add_test(tc, test_options_validate_refuses_combinations);
  tcase_add_test(tc, test_options_rank_rules);
  tcase_add_test(tc, test_options_config_file);
  tcase_add_test(tc, test_options_given_tells_typed_flags_from_defaults);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(options_suite());
}
