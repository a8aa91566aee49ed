/* Bucket tuning's pure parts (train/bucket_tune.h): the candidates a model
 * gets for --bucket-mb / --first-bucket-mb auto (cut from its size, the
 * baseline first, identical cuts and single-bucket cuts dropped, values
 * that print back exactly), the decision from per-candidate timings (the
 * fastest within the tolerance, then the least exposed, then the lower
 * index; unusable timings never win), and "auto" as a value of the two
 * flags (parsed, written back, refused elsewhere). The schedule on real
 * ranks is tests/test_bucket_auto.sh's job. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check_util.h"
#include "runtime/options_config.h"
#include "train/bucket_plan.h"
#include "train/bucket_tune.h"

#define MiB_FLOATS (1048576 / 4)
#define AUTO DDP_OPTIONS_AUTO

/* n tensors of `floats` elements each, tiling the buffer. */
static ddp_param_t *tensors_of(int n, size_t floats) {
  ddp_param_t *t = calloc((size_t)n, sizeof *t);
  ck_assert_ptr_nonnull(t);
  for (int i = 0; i < n; ++i) t[i] = (ddp_param_t){.offset = (size_t)i * floats, .count = floats};
  return t;
}

static int cut_count(const ddp_param_t *t, int n, double first_mb, double bucket_mb) {
  ddp_bucket_span_t spans[64];
  ck_assert_int_le(n, 64);
  return ddp_bucket_plan_cut(t, n, bucket_mb * 1048576.0, first_mb * 1048576.0, spans, NULL);
}

START_TEST(test_fixed_sizes_are_the_only_candidate) {
  ddp_param_t *t = tensors_of(16, MiB_FLOATS);
  ddp_bucket_candidate_t c[DDP_BUCKET_TUNE_MAX_CANDIDATES];
  int n = -1;
  ck_assert_int_eq(ddp_bucket_tune_candidates(t, 16, 2, 5, c, &n), DDP_OK);
  ck_assert_int_eq(n, 1);
  ck_assert(c[0].first_mb == 2 && c[0].bucket_mb == 5);
  ck_assert_int_eq(c[0].n_buckets, cut_count(t, 16, 2, 5));
  free(t);
}
END_TEST

START_TEST(test_bucket_auto_tries_fractions_of_the_model) {
  /* 16 tensors of 1 MiB: 16 MiB in all. Buckets: the default 25 (2
   * buckets: the 1 MiB first and the rest), 8, 4 and 2 MiB; first 1 MiB. */
  ddp_param_t *t = tensors_of(16, MiB_FLOATS);
  ddp_bucket_candidate_t c[DDP_BUCKET_TUNE_MAX_CANDIDATES];
  int n = 0;
  ck_assert_int_eq(ddp_bucket_tune_candidates(t, 16, 1, AUTO, c, &n), DDP_OK);
  ck_assert_int_eq(n, 4);
  const double want[] = {25, 8, 4, 2};
  for (int i = 0; i < n; ++i) {
    ck_assert(c[i].first_mb == 1);
    ck_assert_msg(c[i].bucket_mb == want[i], "candidate %d: bucket %g", i, c[i].bucket_mb);
    ck_assert_int_eq(c[i].n_buckets, cut_count(t, 16, 1, want[i]));
  }
  ck_assert_int_eq(c[0].n_buckets, 2);
  ck_assert_int_eq(c[3].n_buckets, 9); /* the first, 7 of two tensors, the last one */
  free(t);
}
END_TEST

START_TEST(test_both_auto_pairs_and_drops_identical_cuts) {
  ddp_param_t *t = tensors_of(16, MiB_FLOATS);
  ddp_bucket_candidate_t c[DDP_BUCKET_TUNE_MAX_CANDIDATES];
  int n = 0;
  ck_assert_int_eq(ddp_bucket_tune_candidates(t, 16, AUTO, AUTO, c, &n), DDP_OK);
  ck_assert_int_ge(n, 5);
  ck_assert_int_le(n, DDP_BUCKET_TUNE_MAX_CANDIDATES);
  ck_assert(c[0].first_mb == 1 && c[0].bucket_mb == 25); /* the baseline: the defaults */
  /* no two candidates cut alike, and every one but the baseline has 2+ buckets */
  for (int i = 0; i < n; ++i) {
    ck_assert_int_eq(c[i].n_buckets, cut_count(t, 16, c[i].first_mb, c[i].bucket_mb));
    if (i) ck_assert_int_ge(c[i].n_buckets, 2);
    for (int j = 0; j < i; ++j) {
      ddp_bucket_span_t a[16] = {{0}}, b[16] = {{0}};
      const int na = ddp_bucket_plan_cut(t, 16, c[i].bucket_mb * 1048576.0,
                                         c[i].first_mb * 1048576.0, a, NULL);
      const int nb = ddp_bucket_plan_cut(t, 16, c[j].bucket_mb * 1048576.0,
                                         c[j].first_mb * 1048576.0, b, NULL);
      ck_assert_msg(na != nb || memcmp(a, b, sizeof a) != 0, "candidates %d and %d cut alike", i,
                    j);
    }
  }
  int found = 0;
  for (int i = 0; i < n; ++i) found += c[i].first_mb == 2 && c[i].bucket_mb == 8;
  ck_assert_int_eq(found, 1); /* a quarter of the 8 MiB bucket as the first */
  free(t);
}
END_TEST

START_TEST(test_a_small_model_gets_small_buckets_a_flag_can_repeat) {
  /* 10 tensors of 1000 floats (40 kB in all): 25 MiB and a 1 MiB first
   * bucket hold everything, so only the model's fractions give overlap. */
  ddp_param_t *t = tensors_of(10, 1000);
  ddp_bucket_candidate_t c[DDP_BUCKET_TUNE_MAX_CANDIDATES];
  int n = 0;
  ck_assert_int_eq(ddp_bucket_tune_candidates(t, 10, 1, AUTO, c, &n), DDP_OK);
  ck_assert_int_eq(n, 1); /* the 1 MiB first bucket swallows every cut */
  ck_assert_int_eq(ddp_bucket_tune_candidates(t, 10, AUTO, AUTO, c, &n), DDP_OK);
  ck_assert_int_ge(n, 2);
  ck_assert_int_eq(c[0].n_buckets, 1); /* the baseline stays, single bucket or not */
  for (int i = 1; i < n; ++i) {
    ck_assert_int_ge(c[i].n_buckets, 2);
    /* the value as a log line prints it (%g) parses back to the same number */
    char text[32];
    snprintf(text, sizeof text, "%g", c[i].bucket_mb);
    ck_assert(strtod(text, NULL) == c[i].bucket_mb);
    snprintf(text, sizeof text, "%g", c[i].first_mb);
    ck_assert(strtod(text, NULL) == c[i].first_mb);
    ck_assert(c[i].first_mb >= 0.001 && c[i].bucket_mb >= 0.001);
  }
  free(t);
}
END_TEST

START_TEST(test_candidates_refuse_bad_arguments) {
  ddp_param_t *t = tensors_of(4, 100);
  ddp_bucket_candidate_t c[DDP_BUCKET_TUNE_MAX_CANDIDATES];
  int n = 0;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_bucket_tune_candidates(t, 0, 1, 25, c, &n), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_bucket_tune_candidates(NULL, 4, 1, 25, c, &n), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_bucket_tune_candidates(t, 4, 0, 25, c, &n), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_bucket_tune_candidates(t, 4, 1, -2, c, &n), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_bucket_tune_candidates(t, 4, 1, NAN, c, &n), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "bucket tuning:");
  free(log);
  free(t);
}
END_TEST

START_TEST(test_decide_fastest_then_least_exposed_then_lowest_index) {
  /* clearly fastest wins, whatever its exposed time */
  const ddp_bucket_timing_t a[] = {{100, 5}, {80, 9}, {90, 1}};
  ck_assert_int_eq(ddp_bucket_tune_decide(a, 3), 1);
  /* within 3% of the fastest: the least exposed wins */
  const ddp_bucket_timing_t b[] = {{100, 5}, {101, 2}, {102.9, 1}, {103.5, 0}};
  ck_assert_int_eq(ddp_bucket_tune_decide(b, 4), 2);
  /* a full tie goes to the lower index: the baseline */
  const ddp_bucket_timing_t c[] = {{50, 3}, {50, 3}, {50, 3}};
  ck_assert_int_eq(ddp_bucket_tune_decide(c, 3), 0);
  const ddp_bucket_timing_t d[] = {{60, 3}, {50, 3}, {50, 3}};
  ck_assert_int_eq(ddp_bucket_tune_decide(d, 3), 1);
  /* the order of the candidates does not change which one wins */
  const ddp_bucket_timing_t e[] = {{102.9, 1}, {103.5, 0}, {101, 2}, {100, 5}};
  ck_assert_int_eq(ddp_bucket_tune_decide(e, 4), 0);
}
END_TEST

START_TEST(test_decide_ignores_unusable_timings) {
  const ddp_bucket_timing_t a[] = {{NAN, 0}, {-1, 0}, {70, INFINITY}, {90, 4}, {95, 1}};
  ck_assert_int_eq(ddp_bucket_tune_decide(a, 5), 3);
  const ddp_bucket_timing_t b[] = {{NAN, 1}, {INFINITY, 0}};
  ck_assert_int_eq(ddp_bucket_tune_decide(b, 2), 0); /* nothing usable: the baseline */
  ck_assert_int_eq(ddp_bucket_tune_decide(b, 0), 0);
  const ddp_bucket_timing_t one[] = {{10, 1}};
  ck_assert_int_eq(ddp_bucket_tune_decide(one, 1), 0);
}
END_TEST

START_TEST(test_auto_is_a_value_of_the_two_flags_only) {
  ddp_options_t o;
  char *log;
  ck_assert_int_eq(ddp_test_parse(&o, NULL, "--bucket-mb", "auto", NULL), DDP_OK);
  ck_assert(o.bucket_mb == AUTO && o.first_bucket_mb == 1);
  ck_assert_int_eq(ddp_test_parse(&o, NULL, "--first-bucket-mb=AUTO", "--bucket-mb", "8", NULL),
                   DDP_OK);
  ck_assert(o.bucket_mb == 8 && o.first_bucket_mb == AUTO);
  /* written back as "auto" (headers, checkpoints), a number as before */
  char text[64];
  const int i_bucket = ddp_options_find("bucket-mb"), i_first = ddp_options_find("first-bucket-mb");
  ck_assert_int_eq(ddp_options_format(&o, i_first, text, sizeof text), 0);
  ck_assert_str_eq(text, "auto");
  ck_assert_int_eq(ddp_options_format(&o, i_bucket, text, sizeof text), 0);
  ck_assert_str_eq(text, "8");
  /* bad values: one line naming the flag, and the default stays */
  const char *bad[] = {"automatic", "", "-1", "0", "nan", "auto1", "1e7"};
  for (int k = 0; k < 7; ++k) {
    ck_assert_int_eq(ddp_test_parse(&o, &log, "--bucket-mb", bad[k], NULL), DDP_ERR_INVALID_ARG);
    ddp_assert_contains(log, "option --bucket-mb:");
    ck_assert_ptr_eq(strchr(log, '\n'), log + strlen(log) - 1); /* one line */
    free(log);
    ck_assert(o.bucket_mb == 25);
  }
  /* another float flag does not take auto */
  ck_assert_int_eq(ddp_test_parse(&o, &log, "--lr", "auto", NULL), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "option --lr: 'auto' is not a finite number");
  free(log);
}
END_TEST

static Suite *bucket_tune_suite(void) {
  Suite *s = suite_create("bucket_tune");
  TCase *tc = tcase_create("candidates");
  tcase_add_test(tc, test_fixed_sizes_are_the_only_candidate);
  tcase_add_test(tc, test_bucket_auto_tries_fractions_of_the_model);
  tcase_add_test(tc, test_both_auto_pairs_and_drops_identical_cuts);
  tcase_add_test(tc, test_a_small_model_gets_small_buckets_a_flag_can_repeat);
  tcase_add_test(tc, test_candidates_refuse_bad_arguments);
  suite_add_tcase(s, tc);
  tc = tcase_create("decide");
  tcase_add_test(tc, test_decide_fastest_then_least_exposed_then_lowest_index);
  tcase_add_test(tc, test_decide_ignores_unusable_timings);
  suite_add_tcase(s, tc);
  tc = tcase_create("flags");
  tcase_add_test(tc, test_auto_is_a_value_of_the_two_flags_only);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(bucket_tune_suite());
}
