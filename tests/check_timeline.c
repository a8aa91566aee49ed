/* The --trace timeline (trace/timeline.h): recording only inside the traced
 * window, nesting, the bounded buffer (overflow counted, never grown), the
 * JSON writer (names, tracks, per-track order, escaped host names) and its
 * failures (nothing written, the file named), and the path check --trace
 * runs before training. */
#include <config.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_util.h"
#include "trace/timeline.h"

static char *read_all(const char *path) {
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  static char buf[1 << 16];
  const size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static char *temp_dir(void) {
  static char dir[64];
  snprintf(dir, sizeof dir, "/tmp/check_timeline.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  return dir;
}

/* Entries of dir other than . and .., so a leftover temporary file shows. */
static int entries(const char *dir) {
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) ++n;
  closedir(d);
  return n;
}

START_TEST(test_records_only_in_the_window_and_nests) {
  ck_assert_int_eq(ddp_timeline_init(16, 0.0, 1, 2), DDP_OK);
  ddp_timeline_step(0); /* before the window: nothing */
  ck_assert_int_eq(ddp_timeline_on, 0);
  DDP_SPAN_BEGIN(DDP_SPAN_STEP, -1, "step %d", 0);
  DDP_SPAN_END();
  ddp_timeline_record(DDP_SPAN_ALLREDUCE, 0, 64, 1.0, 2.0);
  size_t n = 9, dropped = 9;
  ddp_timeline_spans(&n, &dropped);
  ck_assert_uint_eq(n, 0);
  ck_assert_uint_eq(dropped, 0);

  ddp_timeline_step(1);
  ck_assert_int_eq(ddp_timeline_on, 1);
  DDP_SPAN_BEGIN(DDP_SPAN_STEP, -1, "step %d", 1);
  DDP_SPAN_BEGIN(DDP_SPAN_FORWARD, 0, "forward h.%d", 0);
  DDP_SPAN_END();
  DDP_SPAN_BEGIN(DDP_SPAN_BACKWARD, 0, "backward h.%d", 0);
  DDP_SPAN_END();
  DDP_SPAN_END();
  ddp_timeline_record(DDP_SPAN_ALLREDUCE, 2, 4096, 5.0, 7.5);
  ddp_timeline_end();   /* an unmatched end is ignored, not an underflow */
  ddp_timeline_step(3); /* past the window */
  ck_assert_int_eq(ddp_timeline_on, 0);
  DDP_SPAN_BEGIN(DDP_SPAN_OPTIMIZER, -1, "optimizer");
  DDP_SPAN_END();

  const ddp_span_t *s = ddp_timeline_spans(&n, &dropped);
  ck_assert_uint_eq(n, 4);
  ck_assert_uint_eq(dropped, 0);
  ck_assert_int_eq(s[0].kind, DDP_SPAN_STEP);
  ck_assert_int_eq(s[1].kind, DDP_SPAN_FORWARD);
  ck_assert_int_eq(s[2].kind, DDP_SPAN_BACKWARD);
  for (int i = 0; i < 3; ++i) ck_assert_int_eq(s[i].step, 1);
  /* the step encloses its blocks; the blocks follow each other */
  ck_assert(s[0].t0 <= s[1].t0 && s[1].t1 <= s[2].t0 && s[2].t1 <= s[0].t1);
  ck_assert(s[1].t0 <= s[1].t1);
  ck_assert_int_eq(s[3].kind, DDP_SPAN_ALLREDUCE);
  ck_assert_int_eq(s[3].index, 2);
  ck_assert_int_eq(s[3].bytes, 4096);
  ck_assert(s[3].t0 == 5.0 && s[3].t1 == 7.5); /* origin 0: times as given */
  ddp_timeline_destroy();
  ck_assert_int_eq(ddp_timeline_on, 0);
  ck_assert_ptr_null(ddp_timeline_spans(&n, NULL));
}
END_TEST

START_TEST(test_a_full_buffer_counts_what_it_drops) {
  ck_assert_int_eq(ddp_timeline_init(3, 0.0, 0, 0), DDP_OK);
  ddp_timeline_step(0);
  DDP_SPAN_BEGIN(DDP_SPAN_STEP, -1, "step");
  for (int l = 0; l < 4; ++l) {
    DDP_SPAN_BEGIN(DDP_SPAN_FORWARD, l, "forward h.%d", l);
    DDP_SPAN_END();
  }
  DDP_SPAN_END();
  size_t n = 0, dropped = 0;
  const ddp_span_t *s = ddp_timeline_spans(&n, &dropped);
  ck_assert_uint_eq(n, 3);
  ck_assert_uint_eq(dropped, 2);
  ck_assert_int_eq(s[0].kind, DDP_SPAN_STEP);
  ck_assert(s[0].t1 >= s[2].t1); /* the step still closed, after its blocks */
  ddp_test_log_start();
  ck_assert_int_eq(ddp_timeline_init(0, 0.0, 0, 0), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "--trace: empty trace window");
  free(log);
  ddp_timeline_destroy();
}
END_TEST

START_TEST(test_writes_named_tracks_in_order) {
  const char *dir = temp_dir();
  char path[128];
  snprintf(path, sizeof path, "%s/t.json", dir);
  /* out of order on purpose: the writer sorts each track by start */
  const ddp_span_t r0[] = {
      {.t0 = 0.002, .t1 = 0.003, .step = 1, .kind = DDP_SPAN_BACKWARD, .index = 0},
      {.t0 = 0.001, .t1 = 0.002, .step = 1, .kind = DDP_SPAN_FORWARD, .index = 0},
      {.t0 = 0.0025, .t1 = 0.004, .step = 1, .bytes = 512, .kind = DDP_SPAN_ALLREDUCE, .index = 1},
      {.t0 = 0.0, .t1 = 0.0005, .step = 1, .kind = DDP_SPAN_DATA_WAIT, .index = 0},
  };
  const ddp_span_t r1[] = {{.t0 = 0.5, .t1 = 0.25, .step = 1, .kind = DDP_SPAN_OPTIMIZER}};
  const ddp_timeline_rank_t ranks[] = {{.host = "node-a", .spans = r0, .n = 4},
                                       {.host = "odd\"host\\", .spans = r1, .n = 1}};
  ck_assert_int_eq(ddp_timeline_write_json(path, ranks, 2), DDP_OK);
  ck_assert_int_eq(entries(dir), 1); /* no temporary file left */
  const char *j = read_all(path);
  ck_assert(strncmp(j, "{\"traceEvents\":[", 16) == 0);
  ddp_assert_contains(j, "\"displayTimeUnit\":\"ms\"}");
  ddp_assert_contains(j, "\"name\":\"process_name\",\"args\":{\"name\":\"rank 0 on node-a\"}");
  ddp_assert_contains(j, "\"args\":{\"name\":\"rank 1 on odd\\\"host\\\\\"}");
  ddp_assert_contains(j,
                      "\"tid\":11,\"name\":\"thread_name\",\"args\":{\"name\":\"comm: bucket 1\"}");
  ddp_assert_contains(j,
                      "\"name\":\"all-reduce bucket 1\",\"ts\":2500.000,\"dur\":1500.000,"
                      "\"args\":{\"step\":1,\"bucket\":1,\"bytes\":512}");
  ddp_assert_contains(j,
                      "\"tid\":2,\"name\":\"data wait\",\"ts\":0.000,\"dur\":500.000,"
                      "\"args\":{\"step\":1,\"micro_step\":0}");
  /* an end before its start (a clock that cannot go back, but a caller's
   * times can) becomes a zero duration, never a negative one */
  ddp_assert_contains(j,
                      "\"pid\":1,\"tid\":1,\"name\":\"optimizer\",\"ts\":500000.000,\"dur\":0.000");
  const char *fwd = strstr(j, "\"forward h.0\""), *bwd = strstr(j, "\"backward h.0\"");
  ck_assert(fwd && bwd && fwd < bwd);
  ddp_assert_contains(fwd, "\"args\":{\"step\":1,\"block\":0}");
  unlink(path);
  rmdir(dir);
}
END_TEST

START_TEST(test_a_failed_write_leaves_nothing) {
  const char *dir = temp_dir();
  char path[160];
  const ddp_span_t one = {.t0 = 0, .t1 = 1, .kind = DDP_SPAN_STEP};
  const ddp_timeline_rank_t rank = {.host = "h", .spans = &one, .n = 1};
  /* the directory is gone */
  snprintf(path, sizeof path, "%s/gone/t.json", dir);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_timeline_write_json(path, &rank, 1), DDP_ERR_IO);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, path);
  ddp_assert_contains(log, "cannot create the file");
  free(log);
  ck_assert_int_eq(entries(dir), 0);
  /* the target is a directory: the rename fails, the temporary file goes */
  snprintf(path, sizeof path, "%s/sub", dir);
  ck_assert_int_eq(mkdir(path, 0700), 0);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_timeline_write_json(path, &rank, 1), DDP_ERR_IO);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "writing the trace failed");
  ddp_assert_contains(log, path);
  free(log);
  ck_assert_int_eq(entries(dir), 1); /* sub only */
  rmdir(path);
  rmdir(dir);
}
END_TEST

START_TEST(test_path_check_before_training) {
  const char *dir = temp_dir();
  char path[160];
  snprintf(path, sizeof path, "%s/t.json", dir);
  ck_assert_int_eq(ddp_timeline_check_path(path), DDP_OK);
  ck_assert_int_eq(ddp_timeline_check_path("t.json"), DDP_OK); /* the working directory */
  ddp_test_log_start();
  ck_assert_int_eq(ddp_timeline_check_path(dir), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "is a directory");
  free(log);
  snprintf(path, sizeof path, "%s/no/t.json", dir);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_timeline_check_path(path), DDP_ERR_INVALID_ARG);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "does not exist");
  ddp_assert_contains(log, path);
  free(log);
  rmdir(dir);
}
END_TEST

/* A backend with timing events whose device clock is a counter: each
 * record is 1 ms after the previous one, so resolved times are exact. */
static double fake_ms[64], fake_clock;
static int fake_made, fake_fail_at;
static ddp_backend_ops_t fake_ops;

static ddp_status_t fake_create(ddp_backend_t *be, ddp_event_t *e) {
  (void)be;
  ck_assert_int_lt(fake_made, 64);
  *e = (ddp_event_t)(void *)&fake_ms[fake_made++];
  return DDP_OK;
}
static ddp_status_t fake_record(ddp_backend_t *be, ddp_event_t e, ddp_stream_t s) {
  (void)be;
  ck_assert_ptr_null(s); /* the compute stream */
  fake_clock += 1.0;
  if (fake_fail_at && fake_clock >= fake_fail_at) return DDP_ERR_CUDA;
  *(double *)(void *)e = fake_clock;
  return DDP_OK;
}
static ddp_status_t fake_elapsed(ddp_backend_t *be, ddp_event_t a, ddp_event_t b, float *ms) {
  (void)be;
  *ms = (float)(*(double *)(void *)b - *(double *)(void *)a);
  return DDP_OK;
}

static ddp_backend_t *fake_backend(void) {
  ddp_backend_t *be = ddp_test_cpu_backend();
  fake_ops = *be->ops;
  fake_ops.timing_event_create = fake_create;
  fake_ops.event_record = fake_record;
  fake_ops.event_elapsed_ms = fake_elapsed;
  be->ops = &fake_ops;
  fake_made = 0, fake_clock = 0.0, fake_fail_at = 0;
  return be;
}

START_TEST(test_device_spans_take_their_events_times) {
  /* the CPU backend has no timing events: host clock, nothing made */
  ddp_backend_t *cpu = ddp_test_cpu_backend();
  ck_assert_ptr_null(cpu->ops->timing_event_create);
  ck_assert_int_eq(ddp_timeline_init(8, 0.0, 0, 0), DDP_OK);
  ck_assert_int_eq(ddp_timeline_use_device(cpu), DDP_OK);
  ck_assert_int_eq(ddp_timeline_resolve(), DDP_OK);
  ddp_timeline_destroy();
  ddp_backend_destroy(cpu);

  ddp_backend_t *be = fake_backend();
  ck_assert_int_eq(ddp_timeline_init(8, 0.0, 0, 0), DDP_OK);
  ck_assert_int_eq(ddp_timeline_use_device(be), DDP_OK);
  ck_assert_int_eq(fake_made, 17); /* the reference and a pair per slot */
  ddp_timeline_step(0);
  DDP_SPAN_BEGIN(DDP_SPAN_STEP, -1, "step");              /* device 2 ms (reference: 1 ms) */
  DDP_SPAN_BEGIN(DDP_SPAN_FORWARD, 0, "forward h.%d", 0); /* 3 ms */
  DDP_SPAN_END();                                         /* 4 ms */
  DDP_SPAN_END();                                         /* 5 ms */
  ddp_timeline_begin(DDP_SPAN_CHECKPOINT, -1);            /* the host's */
  ddp_timeline_end();
  ddp_timeline_record(DDP_SPAN_ALLREDUCE, 0, 8, 1000.0, 1001.0); /* the caller's times */
  ddp_timeline_stop();
  ck_assert_int_eq(ddp_timeline_resolve(), DDP_OK);
  size_t n = 0;
  const ddp_span_t *s = ddp_timeline_spans(&n, NULL);
  ck_assert_uint_eq(n, 4);
  ck_assert_double_eq_tol(s[0].t0 - s[1].t0, -0.001, 1e-9);
  ck_assert_double_eq_tol(s[1].t1 - s[1].t0, 0.001, 1e-9);
  ck_assert_double_eq_tol(s[0].t1 - s[0].t0, 0.003, 1e-9);
  ck_assert(s[2].t1 - s[2].t0 < 0.5); /* host clock, not 1 ms steps of events */
  ck_assert(s[3].t0 == 1000.0 && s[3].t1 == 1001.0);
  ddp_timeline_destroy();

  /* a failed record leaves a host span and fails resolve, which says so */
  ck_assert_int_eq(ddp_timeline_init(4, 0.0, 0, 0), DDP_OK);
  fake_made = 0, fake_clock = 0.0, fake_fail_at = 3;
  ck_assert_int_eq(ddp_timeline_use_device(be), DDP_OK);
  ddp_timeline_step(0);
  DDP_SPAN_BEGIN(DDP_SPAN_STEP, -1, "step"); /* 2 ms: fine */
  DDP_SPAN_END();                            /* 3 ms: fails */
  ck_assert_int_eq(ddp_timeline_resolve(), DDP_ERR_CUDA);
  ddp_timeline_destroy();
  ddp_backend_destroy(be);
}
END_TEST

static Suite *timeline_suite(void) {
  Suite *s = suite_create("timeline");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_records_only_in_the_window_and_nests);
  tcase_add_test(tc, test_a_full_buffer_counts_what_it_drops);
  tcase_add_test(tc, test_writes_named_tracks_in_order);
  tcase_add_test(tc, test_a_failed_write_leaves_nothing);
  tcase_add_test(tc, test_path_check_before_training);
  tcase_add_test(tc, test_device_spans_take_their_events_times);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(timeline_suite());
}
