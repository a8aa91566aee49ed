/* The loss scaler's state machine and the precision names (src/amp/amp.c):
 * GradScaler's defaults, backoff and skip on inf/NaN, growth after exactly
 * growth_interval clean steps (and the count restarting after an overflow),
 * the floor error, the disabled scaler, configuration and state validation,
 * and the state's text form for checkpoints. */
#include <math.h>
#include <string.h>

#include "amp/amp.h"
#include "check_util.h"

static ddp_loss_scaler_t make(float init, int64_t window, float min_scale) {
  ddp_loss_scaler_config_t c = ddp_loss_scaler_defaults();
  c.init_scale = init;
  c.growth_interval = window;
  c.min_scale = min_scale;
  ddp_loss_scaler_t s;
  ck_assert_int_eq(ddp_loss_scaler_init(&s, &c, 1), DDP_OK);
  return s;
}

static int step(ddp_loss_scaler_t *s, int found_inf) {
  int skip = -1;
  ck_assert_int_eq(ddp_loss_scaler_update(s, found_inf, &skip), DDP_OK);
  return skip;
}

START_TEST(test_amp_precision_names) {
  ddp_precision_t p;
  ck_assert_int_eq(ddp_precision_parse("BF16", &p), DDP_OK);
  ck_assert_int_eq(p, DDP_PRECISION_BF16);
  ck_assert_int_eq(ddp_precision_dtype(p), DDP_DTYPE_BF16);
  ck_assert_int_eq(ddp_precision_parse("fp16", &p), DDP_OK);
  ck_assert_int_eq(ddp_precision_dtype(p), DDP_DTYPE_F16);
  ck_assert_str_eq(ddp_precision_name(DDP_PRECISION_FP32), "fp32");
  ck_assert_int_eq(ddp_precision_dtype(DDP_PRECISION_FP32), DDP_DTYPE_F32);
  ck_assert_int_eq(ddp_precision_parse("fp8", &p), DDP_ERR_INVALID_ARG);
  ck_assert_str_eq(ddp_precision_name((ddp_precision_t)7), "invalid");
}
END_TEST

START_TEST(test_amp_defaults_are_gradscaler) {
  ddp_loss_scaler_config_t c = ddp_loss_scaler_defaults();
  ck_assert(c.init_scale == 65536.0f && c.growth_factor == 2.0f && c.backoff_factor == 0.5f);
  ck_assert_int_eq(c.growth_interval, 2000);
  ddp_loss_scaler_t s;
  ck_assert_int_eq(ddp_loss_scaler_init(&s, &c, 1), DDP_OK);
  ck_assert(ddp_loss_scaler_scale(&s) == 65536.0f);
  /* 1999 clean steps keep the scale, the 2000th doubles it. */
  for (int i = 0; i < 1999; ++i) ck_assert_int_eq(step(&s, 0), 0);
  ck_assert(ddp_loss_scaler_scale(&s) == 65536.0f);
  ck_assert_int_eq(step(&s, 0), 0);
  ck_assert(ddp_loss_scaler_scale(&s) == 131072.0f);
  ck_assert_int_eq(s.state.growth_tracker, 0);
}
END_TEST

START_TEST(test_amp_overflow_skips_and_halves) {
  ddp_loss_scaler_t s = make(1024.0f, 3, 1.0f);
  ck_assert_int_eq(step(&s, 0), 0);
  ck_assert_int_eq(step(&s, 0), 0);
  ck_assert_int_eq(s.state.growth_tracker, 2);
  ck_assert_int_eq(step(&s, 1), 1); /* skip, halve, restart the window */
  ck_assert(ddp_loss_scaler_scale(&s) == 512.0f);
  ck_assert_int_eq(s.state.growth_tracker, 0);
  ck_assert_int_eq(s.state.skipped_steps, 1);
  /* The window counts from the overflow: growth after exactly 3 more. */
  ck_assert_int_eq(step(&s, 0), 0);
  ck_assert_int_eq(step(&s, 0), 0);
  ck_assert(ddp_loss_scaler_scale(&s) == 512.0f);
  ck_assert_int_eq(step(&s, 0), 0);
  ck_assert(ddp_loss_scaler_scale(&s) == 1024.0f);
  /* Two overflows in a row: two halvings, two skips. */
  ck_assert_int_eq(step(&s, 1), 1);
  ck_assert_int_eq(step(&s, 1), 1);
  ck_assert(ddp_loss_scaler_scale(&s) == 256.0f);
  ck_assert_int_eq(s.state.skipped_steps, 3);
}
END_TEST

START_TEST(test_amp_floor_is_an_error) {
  ddp_loss_scaler_t s = make(4.0f, 10, 1.0f);
  ck_assert_int_eq(step(&s, 1), 1);
  ck_assert_int_eq(step(&s, 1), 1);
  ck_assert(ddp_loss_scaler_scale(&s) == 1.0f); /* at the floor: still allowed */
  int skip = 0;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_loss_scaler_update(&s, 1, &skip), DDP_ERR_NUMERIC);
  char *log = ddp_test_log_stop();
  ck_assert_ptr_nonnull(strstr(log, "below --loss-scale-min 1"));
  free(log);
  ck_assert_int_eq(skip, 1);
  /* min_scale 0: the scale may shrink without an error. */
  ddp_loss_scaler_t z = make(2.0f, 10, 0.0f);
  for (int i = 0; i < 20; ++i) ck_assert_int_eq(step(&z, 1), 1);
  ck_assert(ddp_loss_scaler_scale(&z) > 0.0f);
}
END_TEST

START_TEST(test_amp_growth_stops_at_float_max) {
  ddp_loss_scaler_t s = make(0x1p127f, 1, 1.0f);
  ck_assert_int_eq(step(&s, 0), 0);
  ck_assert(ddp_loss_scaler_scale(&s) == 0x1p127f); /* 2^128 would be inf: kept */
  ck_assert(isfinite(ddp_loss_scaler_scale(&s)));
}
END_TEST

START_TEST(test_amp_disabled_never_skips) {
  ddp_loss_scaler_config_t c = {0}; /* ignored when disabled */
  ddp_loss_scaler_t s;
  ck_assert_int_eq(ddp_loss_scaler_init(&s, &c, 0), DDP_OK);
  ck_assert(ddp_loss_scaler_scale(&s) == 1.0f);
  ck_assert_int_eq(step(&s, 1), 0);
  ck_assert_int_eq(step(&s, 0), 0);
  ck_assert(ddp_loss_scaler_scale(&s) == 1.0f);
  ck_assert_int_eq(s.state.skipped_steps, 0);
}
END_TEST

START_TEST(test_amp_rejects_bad_config) {
  const ddp_loss_scaler_config_t d = ddp_loss_scaler_defaults();
  ddp_loss_scaler_config_t bad[7];
  for (int i = 0; i < 7; ++i) bad[i] = d;
  bad[0].init_scale = 0.0f;
  bad[1].init_scale = INFINITY;
  bad[2].growth_factor = 1.0f;
  bad[3].backoff_factor = 1.0f;
  bad[4].backoff_factor = 0.0f;
  bad[5].growth_interval = 0;
  bad[6].min_scale = 2 * d.init_scale;
  ddp_test_log_start();
  for (int i = 0; i < 7; ++i) {
    ddp_loss_scaler_t s;
    ck_assert_int_eq(ddp_loss_scaler_init(&s, &bad[i], 1), DDP_ERR_INVALID_ARG);
  }
  free(ddp_test_log_stop());
}
END_TEST

START_TEST(test_amp_state_round_trip) {
  ddp_loss_scaler_t s = make(65536.0f, 5, 1.0f);
  step(&s, 0);
  step(&s, 1);
  step(&s, 0);
  step(&s, 0);
  ddp_loss_scaler_state_t st;
  ddp_loss_scaler_get_state(&s, &st);
  ck_assert(st.scale == 32768.0f);
  ck_assert_int_eq(st.growth_tracker, 2);
  ck_assert_int_eq(st.skipped_steps, 1);
  char buf[64];
  ck_assert_int_eq(ddp_loss_scaler_state_format(&st, buf, sizeof buf), DDP_OK);
  ck_assert_str_eq(buf, "scale=32768 growth_tracker=2 skipped_steps=1");
  ddp_loss_scaler_state_t back;
  ck_assert_int_eq(ddp_loss_scaler_state_parse(buf, &back), DDP_OK);
  ddp_loss_scaler_t r = make(65536.0f, 5, 1.0f);
  ck_assert_int_eq(ddp_loss_scaler_set_state(&r, &back), DDP_OK);
  /* The restored scaler continues exactly like the original. */
  for (int i = 0; i < 4; ++i) ck_assert_int_eq(step(&r, 0), step(&s, 0));
  ck_assert(r.state.scale == s.state.scale && r.state.scale == 65536.0f);
  ck_assert_int_eq(r.state.growth_tracker, s.state.growth_tracker);
  /* A scale that is not a power of two survives the text form bit for bit. */
  st.scale = 0.1f;
  ck_assert_int_eq(ddp_loss_scaler_state_format(&st, buf, sizeof buf), DDP_OK);
  ck_assert_int_eq(ddp_loss_scaler_state_parse(buf, &back), DDP_OK);
  ck_assert(back.scale == 0.1f);
  ck_assert_int_eq(ddp_loss_scaler_state_format(&st, buf, 10), DDP_ERR_INVALID_ARG);
}
END_TEST

START_TEST(test_amp_rejects_bad_state) {
  ddp_loss_scaler_t s = make(8.0f, 4, 1.0f);
  ddp_loss_scaler_state_t st;
  const char *bad_text[] = {"", "scale=1", "scale=x growth_tracker=0 skipped_steps=0",
                            "scale=2 growth_tracker=0 skipped_steps=0 extra",
                            "growth_tracker=0 scale=2 skipped_steps=0"};
  for (size_t i = 0; i < sizeof bad_text / sizeof bad_text[0]; ++i)
    ck_assert_int_eq(ddp_loss_scaler_state_parse(bad_text[i], &st), DDP_ERR_INVALID_ARG);
  const ddp_loss_scaler_state_t bad[] = {{.scale = 0.0f},
                                         {.scale = NAN},
                                         {.scale = 2.0f, .growth_tracker = 4},
                                         {.scale = 2.0f, .growth_tracker = -1},
                                         {.scale = 2.0f, .skipped_steps = -1}};
  ddp_test_log_start();
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i)
    ck_assert_int_eq(ddp_loss_scaler_set_state(&s, &bad[i]), DDP_ERR_INVALID_ARG);
  free(ddp_test_log_stop());
  ck_assert(s.state.scale == 8.0f); /* unchanged */
}
END_TEST

static Suite *amp_suite(void) {
  Suite *s = suite_create("amp");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_amp_precision_names);
  tcase_add_test(tc, test_amp_defaults_are_gradscaler);
  tcase_add_test(tc, test_amp_overflow_skips_and_halves);
  tcase_add_test(tc, test_amp_floor_is_an_error);
  tcase_add_test(tc, test_amp_growth_stops_at_float_max);
  tcase_add_test(tc, test_amp_disabled_never_skips);
  tcase_add_test(tc, test_amp_rejects_bad_config);
  tcase_add_test(tc, test_amp_state_round_trip);
  tcase_add_test(tc, test_amp_rejects_bad_state);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(amp_suite());
}
