/* The metrics writer (train/metrics.h): the header record of a run, the
 * record kinds with time and elapsed_s, JSON that stays valid for any flag
 * value, the error for a file that cannot be opened; the elapsed/ETA
 * text of the progress lines (train/progress_time.h); and the top-k rank
 * behind the held-out top-1 and top-5 accuracies (train/topk.h). */
#include <config.h>

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddptrain/options.h"
#include "ddptrain/status.h"
#include "check_util.h"
#include "core/clock.h"
#include "train/metrics.h"
#include "train/progress_time.h"
#include "train/topk.h"

static char g_dir[64];
static char g_path[128];

static void dir_setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ddp_metrics_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  snprintf(g_path, sizeof g_path, "%s/m.jsonl", g_dir);
}

static void dir_teardown(void) {
  unlink(g_path);
  rmdir(g_dir);
}

/* Every line of the file, parsed; *n the line count (at most max). */
static void read_records(json_t **recs, int max, int *n) {
  FILE *f = fopen(g_path, "r");
  ck_assert_ptr_nonnull(f);
  char line[1 << 16];
  *n = 0;
  while (fgets(line, sizeof line, f)) {
    ck_assert_int_lt(*n, max);
    json_error_t err;
    recs[*n] = json_loads(line, 0, &err);
    ck_assert_msg(recs[*n] != NULL, "line %d is not JSON: %s", *n + 1, err.text);
    ++*n;
  }
  fclose(f);
}

static ddp_metrics_run_t a_run(const ddp_options_t *o) {
  return (ddp_metrics_run_t){.opts = o,
                             .world_size = 4,
                             .device = "cpu (test)",
                             .precision = "bf16",
                             .start_step = 7,
                             .start_unix = ddp_metrics_unix_now(),
                             .start_mono = ddp_clock_seconds()};
}

START_TEST(test_header_then_records_with_time) {
  ddp_options_t o;
  ck_assert_int_eq(ddp_options_defaults(&o), DDP_OK);
  o.steps = 123;
  /* a value JSON must escape, and bytes that are not UTF-8 */
  snprintf(o.data, sizeof o.data, "a \"quoted\"\\path\n\xff.bin");
  const ddp_metrics_run_t run = a_run(&o);
  ddp_metrics_t m;
  ck_assert_int_eq(ddp_metrics_open(&m, g_path, &run), DDP_OK);
  ck_assert_int_eq(
      ddp_metrics_write(&m, DDP_METRICS_STEP, "step", 2.0, "loss", 2.5, "mfu", NAN, NULL), DDP_OK);
  ck_assert_int_eq(ddp_metrics_write(&m, DDP_METRICS_EVAL, "step", 3.0, "val_loss", 2.25, NULL),
                   DDP_OK);
  ck_assert_int_eq(ddp_metrics_write(&m, DDP_METRICS_FINAL, "train_loss", 2.0, NULL), DDP_OK);
  ddp_metrics_close(&m);

  json_t *r[8];
  int n = 0;
  read_records(r, 8, &n);
  ck_assert_int_eq(n, 4);
  const json_t *h = r[0];
  ck_assert_str_eq(json_string_value(json_object_get(h, "record")), "header");
  ck_assert_str_eq(json_string_value(json_object_get(h, "version")), PACKAGE_VERSION);
  ck_assert_str_eq(json_string_value(json_object_get(h, "commit")), DDP_COMMIT);
  ck_assert_int_eq(json_integer_value(json_object_get(h, "world_size")), 4);
  ck_assert_str_eq(json_string_value(json_object_get(h, "device")), "cpu (test)");
  ck_assert_str_eq(json_string_value(json_object_get(h, "precision")), "bf16");
  ck_assert_int_eq(json_integer_value(json_object_get(h, "start_step")), 7);
  const char *iso = json_string_value(json_object_get(h, "start_time"));
  ck_assert_ptr_nonnull(iso);
  ck_assert_int_eq((int)strlen(iso), 20); /* 2026-01-02T03:04:05Z */
  ck_assert_int_eq(iso[10], 'T');
  ck_assert_int_eq(iso[19], 'Z');
  ck_assert(fabs(json_real_value(json_object_get(h, "start_unix")) - run.start_unix) < 1e-3);
  const json_t *flags = json_object_get(h, "flags");
  ck_assert(json_is_object(flags));
  ck_assert_str_eq(json_string_value(json_object_get(flags, "steps")), "123");
  ck_assert_str_eq(json_string_value(json_object_get(flags, "data")), "a \"quoted\"\\path\n?.bin");
  /* every flag of the run is there, not just those given */
  ck_assert_ptr_nonnull(json_object_get(flags, "lr"));
  ck_assert_ptr_nonnull(json_object_get(flags, "metrics"));

  const char *kinds[] = {"header", "step", "eval", "final"};
  double last_time = 0, last_elapsed = -1;
  for (int i = 0; i < n; ++i) {
    ck_assert_str_eq(json_string_value(json_object_get(r[i], "record")), kinds[i]);
    const double t = json_number_value(json_object_get(r[i], "time"));
    const double e = json_number_value(json_object_get(r[i], "elapsed_s"));
    ck_assert(json_is_real(json_object_get(r[i], "time")));
    ck_assert(t >= run.start_unix - 1e-3 && t >= last_time);
    ck_assert(e >= 0 && e >= last_elapsed && e < 60);
    last_time = t;
    last_elapsed = e;
  }
  ck_assert_int_eq(json_integer_value(json_object_get(r[1], "step")), 2);
  ck_assert(json_is_null(json_object_get(r[1], "mfu")));
  ck_assert(json_real_value(json_object_get(r[2], "val_loss")) == 2.25);
  ck_assert(json_is_true(json_object_get(r[3], "final")));
  ck_assert_ptr_null(json_object_get(r[1], "final"));
  for (int i = 0; i < n; ++i) json_decref(r[i]);
}
END_TEST

START_TEST(test_each_open_appends_a_header) {
  ddp_options_t o;
  ck_assert_int_eq(ddp_options_defaults(&o), DDP_OK);
  const ddp_metrics_run_t run = a_run(&o);
  for (int seg = 0; seg < 2; ++seg) {
    ddp_metrics_t m;
    ck_assert_int_eq(ddp_metrics_open(&m, g_path, &run), DDP_OK);
    ck_assert_int_eq(ddp_metrics_write(&m, DDP_METRICS_STEP, "step", 1.0, NULL), DDP_OK);
    ddp_metrics_close(&m);
  }
  json_t *r[8];
  int n = 0;
  read_records(r, 8, &n);
  ck_assert_int_eq(n, 4);
  ck_assert_str_eq(json_string_value(json_object_get(r[0], "record")), "header");
  ck_assert_str_eq(json_string_value(json_object_get(r[2], "record")), "header");
  for (int i = 0; i < n; ++i) json_decref(r[i]);
}
END_TEST

START_TEST(test_no_path_writes_nothing_and_a_bad_path_is_an_error) {
  ddp_options_t o;
  ck_assert_int_eq(ddp_options_defaults(&o), DDP_OK);
  const ddp_metrics_run_t run = a_run(&o);
  ddp_metrics_t m;
  ck_assert_int_eq(ddp_metrics_open(&m, "", &run), DDP_OK);
  ck_assert_int_eq(ddp_metrics_write(&m, DDP_METRICS_STEP, "step", 1.0, NULL), DDP_OK);
  ddp_metrics_close(&m);
  ck_assert_int_ne(access(g_path, F_OK), 0);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_metrics_open(&m, g_dir, &run), DDP_ERR_IO); /* a directory */
  char *log = ddp_test_log_stop();
  ck_assert_msg(strstr(log, "--metrics") && strstr(log, g_dir), "log: %s", log);
  free(log);
  ddp_metrics_close(&m);
}
END_TEST

START_TEST(test_durations_for_people) {
  char b[32];
  const struct {
    double s;
    const char *want;
  } cases[] = {{0, "0s"},       {42.4, "42s"},   {59.6, "1m00s"}, {83, "1m23s"}, {3599, "59m59s"},
               {3600, "1h00m"}, {7530, "2h05m"}, {-1, "?"},       {NAN, "?"},    {INFINITY, "?"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    ddp_format_duration(cases[i].s, b, sizeof b);
    ck_assert_msg(strcmp(b, cases[i].want) == 0, "%g s: '%s', want '%s'", cases[i].s, b,
                  cases[i].want);
  }
}
END_TEST

START_TEST(test_eta_is_window_step_time_times_steps_left) {
  char b[64];
  ddp_progress_time_note(83.0, 0.5, 490, b, sizeof b);
  ck_assert_str_eq(b, "elapsed 1m23s | ETA 4m05s");
  ddp_progress_time_note(5.0, 0.5, 0, b, sizeof b);
  ck_assert_str_eq(b, "elapsed 5s | ETA 0s");
  ddp_progress_time_note(5.0, 0.5, -3, b, sizeof b); /* never a negative ETA */
  ck_assert_str_eq(b, "elapsed 5s | ETA 0s");
}
END_TEST

/* Known scores: the rank is the number of classes strictly better, a tie
 * going to the lower class index, whatever the order of the classes. */
START_TEST(test_topk_rank_on_known_scores) {
  /*                     0     1     2     3     4     5     6     7     8     9    10    11 */
  const float s[12] = {0.1f, 2.0f, 0.5f, 2.0f, -1.f, 3.0f, 0.5f, 0.0f, 1.0f, 0.5f, 2.5f, 0.2f};
  /* descending, ties to the lower index: 5, 10, 1, 3, 8, 2, 6, 9, 11, 0, 7, 4 */
  const int order[12] = {5, 10, 1, 3, 8, 2, 6, 9, 11, 0, 7, 4};
  for (int r = 0; r < 12; ++r) {
    ck_assert_int_eq(ddp_topk_rank(s, 12, order[r]), r);
    for (int k = 1; k <= 12; ++k)
      ck_assert_msg(ddp_topk_hit(s, 12, order[r], k) == (r < k), "class %d (rank %d) top-%d",
                    order[r], r, k);
  }
  /* top-5 is {5, 10, 1, 3, 8}: class 2 (0.5) is out, though tied with 6 and 9 */
  ck_assert_int_eq(ddp_topk_hit(s, 12, 8, 5), 1);
  ck_assert_int_eq(ddp_topk_hit(s, 12, 2, 5), 0);
  /* all equal: the rank is the class index */
  const float flat[6] = {1, 1, 1, 1, 1, 1};
  for (int c = 0; c < 6; ++c) ck_assert_int_eq(ddp_topk_rank(flat, 6, c), c);
  ck_assert_int_eq(ddp_topk_hit(flat, 6, 0, 1), 1);
  ck_assert_int_eq(ddp_topk_hit(flat, 6, 1, 1), 0);
}
END_TEST

/* NaN: a NaN score never ranks above a number, and a NaN true score is
 * never a hit, not even for k = n. */
START_TEST(test_topk_nan_scores) {
  const float s[4] = {NAN, 1.0f, NAN, 0.5f};
  ck_assert_int_eq(ddp_topk_rank(s, 4, 1), 0);
  ck_assert_int_eq(ddp_topk_rank(s, 4, 3), 1);
  ck_assert_int_eq(ddp_topk_hit(s, 4, 0, 4), 0);
  ck_assert_int_eq(ddp_topk_hit(s, 4, 2, 5), 0);
  ck_assert_int_eq(ddp_topk_hit(s, 4, 3, 2), 1);
  ck_assert_int_eq(DDP_TOP5_MIN_CLASSES, 11); /* "more than 10 classes" (docs) */
}
END_TEST

static Suite *metrics_suite(void) {
  Suite *s = suite_create("metrics");
  TCase *tc = tcase_create("writer");
  tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
  tcase_add_test(tc, test_header_then_records_with_time);
  tcase_add_test(tc, test_each_open_appends_a_header);
  tcase_add_test(tc, test_no_path_writes_nothing_and_a_bad_path_is_an_error);
  suite_add_tcase(s, tc);
  tc = tcase_create("progress_time");
  tcase_add_test(tc, test_durations_for_people);
  tcase_add_test(tc, test_eta_is_window_step_time_times_steps_left);
  suite_add_tcase(s, tc);
  tc = tcase_create("topk");
  tcase_add_test(tc, test_topk_rank_on_known_scores);
  tcase_add_test(tc, test_topk_nan_scores);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(metrics_suite());
}
