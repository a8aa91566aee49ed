/* Check suite for the collective watchdog (src/comm/comm_watchdog.c): the
 * judgement of one look, the line, and the watchdog's decisions over a
 * made-up communicator whose collectives complete, fail or never complete.
 *
 * Most tests drive a manual watchdog (no thread) with made-up times, so every
 * decision is exact and nothing sleeps; two run the real thread with short
 * timeouts. tests/check_comm.c runs the watchdog on a real MPI communicator
 * whose collective does not complete. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_util.h"
#include "comm/comm_watchdog.h"
#include "core/clock.h"

enum { N_SLOTS = 4 };

/* The made-up communicator: each slot's latest collective is pending, done
 * or failed; its health is an error or not; fail() counts and keeps the
 * line. The thread tests change states while the watchdog's thread reads
 * them, hence the atomics and the lock. */
typedef struct fake {
  _Atomic int state[N_SLOTS];
  _Atomic int health; /* a ddp_status_t */
  pthread_mutex_t lock;
  int fails;
  ddp_status_t failed_with;
  char line[1024];
} fake_t;

static fake_t g_fake;

static ddp_comm_watch_state_t fake_slot_state(void *ctx, int slot, ddp_status_t *failure,
                                              char *cause, size_t len) {
  fake_t *f = ctx;
  const int s = atomic_load(&f->state[slot]);
  if (s == DDP_COMM_WATCH_FAILED) {
    *failure = DDP_ERR_CUDA;
    snprintf(cause, len, "CUDA error while waiting: an illegal memory access was encountered");
  }
  return (ddp_comm_watch_state_t)s;
}

static ddp_status_t fake_health(void *ctx, char *cause, size_t len) {
  fake_t *f = ctx;
  const ddp_status_t h = (ddp_status_t)atomic_load(&f->health);
  if (h != DDP_OK) snprintf(cause, len, "NCCL error: unhandled system error");
  return h;
}

static void fake_fail(void *ctx, ddp_status_t st, const char *line) {
  fake_t *f = ctx;
  pthread_mutex_lock(&f->lock);
  f->fails++;
  f->failed_with = st;
  snprintf(f->line, sizeof f->line, "%s", line);
  pthread_mutex_unlock(&f->lock);
}

static int fake_fails(void) {
  pthread_mutex_lock(&g_fake.lock);
  const int n = g_fake.fails;
  pthread_mutex_unlock(&g_fake.lock);
  return n;
}

static ddp_comm_watchdog_t *g_wd;

static void setup(void) {
  for (int i = 0; i < N_SLOTS; ++i) atomic_init(&g_fake.state[i], DDP_COMM_WATCH_PENDING);
  atomic_init(&g_fake.health, DDP_OK);
  pthread_mutex_init(&g_fake.lock, NULL);
  g_fake.fails = 0;
  g_fake.failed_with = DDP_OK;
  g_fake.line[0] = '\0';
  g_wd = NULL;
}

static void teardown(void) {
  ddp_comm_watchdog_stop(g_wd);
  g_wd = NULL;
  pthread_mutex_destroy(&g_fake.lock);
}

static ddp_comm_watchdog_config_t config(double timeout_s, int manual) {
  return (ddp_comm_watchdog_config_t){
      .label = "comm test",
      .who = "rank 3 on node7",
      .then = "aborting the job",
      .n_slots = N_SLOTS,
      .timeout_s = timeout_s,
      .manual = manual,
      .probe = {
          .ctx = &g_fake, .slot_state = fake_slot_state, .health = fake_health, .fail = fake_fail}};
}

static ddp_comm_watchdog_t *start_manual(double timeout_s) {
  const ddp_comm_watchdog_config_t cfg = config(timeout_s, 1);
  ck_assert_int_eq(ddp_comm_watchdog_start(&cfg, &g_wd), DDP_OK);
  return g_wd;
}

static void sleep_s(double s) {
  const struct timespec ts = {.tv_sec = (time_t)s,
                              .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

START_TEST(test_comm_watch_judge_failure_then_error_then_done_then_age) {
  char cause[200];
  int done = 1;
  ddp_comm_watch_look_t look = {.state = DDP_COMM_WATCH_PENDING, .age_s = 10, .timeout_s = 10};
  /* At the timeout exactly it may still complete; a moment later not. */
  ck_assert_int_eq(ddp_comm_watch_judge(&look, &done, cause, sizeof cause), DDP_OK);
  ck_assert_int_eq(done, 0);
  look.age_s = 10.05;
  ck_assert_int_eq(ddp_comm_watch_judge(&look, &done, cause, sizeof cause), DDP_ERR_TIMEOUT);
  ck_assert_str_eq(cause, "no completion after 10.1 s (timeout 10 s)");
  /* Completion beats age: a collective seen done is done, however late. */
  look.state = DDP_COMM_WATCH_DONE;
  ck_assert_int_eq(ddp_comm_watch_judge(&look, &done, cause, sizeof cause), DDP_OK);
  ck_assert_int_eq(done, 1);
  /* The communicator's error beats completion: the result may be garbage. */
  look.health = DDP_ERR_NCCL;
  look.health_cause = "NCCL error: remote process exited";
  ck_assert_int_eq(ddp_comm_watch_judge(&look, &done, cause, sizeof cause), DDP_ERR_NCCL);
  ck_assert_int_eq(done, 0);
  ck_assert_str_eq(cause, "NCCL error: remote process exited");
  /* A failed marker beats everything, and an empty cause still says something. */
  look.state = DDP_COMM_WATCH_FAILED;
  look.failure = DDP_ERR_CUDA;
  look.failure_cause = "";
  ck_assert_int_eq(ddp_comm_watch_judge(&look, &done, cause, sizeof cause), DDP_ERR_CUDA);
  ck_assert_str_eq(cause, "its completion could not be read");
}
END_TEST

START_TEST(test_comm_watch_format_names_rank_collective_size_and_cause) {
  char line[300];
  ddp_comm_watch_format(line, sizeof line, "comm nccl", "rank 1 on gpu4", "allreduce_sum #57",
                        4194304, "no completion after 300.2 s (timeout 300 s)",
                        "aborting the NCCL communicator");
  ck_assert_str_eq(line,
                   "comm nccl: rank 1 on gpu4: allreduce_sum #57 of 4194304 bytes failed: no "
                   "completion after 300.2 s (timeout 300 s); aborting the NCCL communicator");
  ddp_comm_watch_format(line, sizeof line, "comm nccl", "rank 1 on gpu4", NULL, 0,
                        "NCCL error: unhandled system error", NULL);
  ck_assert_str_eq(line, "comm nccl: rank 1 on gpu4: NCCL error: unhandled system error");
}
END_TEST

START_TEST(test_comm_watchdog_times_the_oldest_collective_in_flight) {
  ddp_comm_watchdog_t *wd = start_manual(10);
  const double t0 = ddp_clock_seconds();
  ck_assert_uint_eq(ddp_comm_watchdog_issued(wd, 0, "allreduce_sum", 100), 1);
  ck_assert_uint_eq(ddp_comm_watchdog_issued(wd, 1, "broadcast", 200), 2);
  ck_assert_uint_eq(ddp_comm_watchdog_issued(wd, 2, "allgather", 300), 3);
  atomic_store(&g_fake.state[0], DDP_COMM_WATCH_DONE);
  /* A look a second, as a thread would (a longer gap is a stall of the
   * watcher itself, which restarts the clock). */
  for (double t = 0.5; t < 10; t += 1) ck_assert_int_eq(ddp_comm_watchdog_look(wd, t0 + t), DDP_OK);
  ck_assert_int_eq(fake_fails(), 0);
  /* #1 was seen done at the first look (t0 + 0.5): #2 has waited 10.4 s. */
  ck_assert_int_eq(ddp_comm_watchdog_look(wd, t0 + 10.9), DDP_ERR_TIMEOUT);
  ck_assert_int_eq(fake_fails(), 1);
  ck_assert_int_eq(g_fake.failed_with, DDP_ERR_TIMEOUT);
  /* #1 is done, so #2 is the one everything waits behind. */
  ck_assert_msg(strstr(g_fake.line,
                       "comm test: rank 3 on node7: broadcast #2 of 200 bytes failed: no "
                       "completion after 10.4 s") == g_fake.line,
                "line: %s", g_fake.line);
  ck_assert_msg(strstr(g_fake.line, "(timeout 10 s); aborting the job"), "line: %s", g_fake.line);
  /* One verdict: later looks repeat it without failing again. */
  ck_assert_int_eq(ddp_comm_watchdog_look(wd, t0 + 11.5), DDP_ERR_TIMEOUT);
  ck_assert_int_eq(fake_fails(), 1);
}
END_TEST

START_TEST(test_comm_watchdog_a_reused_slot_done_means_every_earlier_done) {
  ddp_comm_watchdog_t *wd = start_manual(10);
  const double t0 = ddp_clock_seconds();
  ddp_comm_watchdog_issued(wd, 0, "allreduce_sum", 100); /* #1 */
  ddp_comm_watchdog_issued(wd, 1, "allreduce_sum", 100); /* #2 */
  ddp_comm_watchdog_issued(wd, 0, "allreduce_sum", 100); /* #3: slot 0 again */
  /* Slot 1's event never fires here, but slot 0's latest (#3) did: by the
   * issue order #2 is done too, and nothing is left in flight. */
  atomic_store(&g_fake.state[0], DDP_COMM_WATCH_DONE);
  for (double t = 0.5; t < 30; t += 1) ck_assert_int_eq(ddp_comm_watchdog_look(wd, t0 + t), DDP_OK);
  ck_assert_int_eq(fake_fails(), 0);
}
END_TEST

START_TEST(test_comm_watchdog_queued_behind_another_counts_from_its_completion) {
  ddp_comm_watchdog_t *wd = start_manual(10);
  const double t0 = ddp_clock_seconds();
  /* A host ahead of the device: #2 is issued at once but the stream only
   * reaches it when #1 completes, 8 s later. */
  ddp_comm_watchdog_issued(wd, 0, "allreduce_sum", 100);
  ddp_comm_watchdog_issued(wd, 1, "allreduce_sum", 200);
  for (double t = 0.5; t < 8; t += 1) ck_assert_int_eq(ddp_comm_watchdog_look(wd, t0 + t), DDP_OK);
  atomic_store(&g_fake.state[0], DDP_COMM_WATCH_DONE);
  for (double t = 8; t < 18; t += 0.5) ck_assert_int_eq(ddp_comm_watchdog_look(wd, t0 + t), DDP_OK);
  ck_assert_int_eq(fake_fails(), 0);
  ck_assert_int_eq(ddp_comm_watchdog_look(wd, t0 + 18.5), DDP_ERR_TIMEOUT);
  ck_assert_msg(strstr(g_fake.line,
                       "allreduce_sum #2 of 200 bytes failed: no completion after "
                       "10.5 s"),
                "line: %s", g_fake.line);
}
END_TEST

START_TEST(test_comm_watchdog_the_watchers_own_stall_does_not_count) {
  ddp_comm_watchdog_t *wd = start_manual(10);
  const double t0 = ddp_clock_seconds();
  ddp_comm_watchdog_issued(wd, 0, "allreduce_sum", 100);
  ck_assert_int_eq(ddp_comm_watchdog_look(wd, t0 + 1), DDP_OK);
  /* The next look comes 60 s later: the process was stopped (a suspended
   * job), so the collective gets a fresh start from there. */
  for (double t = 61; t < 71; t += 0.5)
    ck_assert_int_eq(ddp_comm_watchdog_look(wd, t0 + t), DDP_OK);
  ck_assert_int_eq(fake_fails(), 0);
  ck_assert_int_eq(ddp_comm_watchdog_look(wd, t0 + 71.2), DDP_ERR_TIMEOUT);
  ck_assert_msg(strstr(g_fake.line, "no completion after 10.2 s"), "line: %s", g_fake.line);
}
END_TEST

START_TEST(test_comm_watchdog_a_communicator_error_fails_at_once) {
  ddp_comm_watchdog_t *wd = start_manual(300);
  const double t0 = ddp_clock_seconds();
  ck_assert_int_eq(ddp_comm_watchdog_look(wd, t0 + 0.1), DDP_OK);
  ddp_comm_watchdog_issued(wd, 2, "allreduce_sum", 1024);
  atomic_store(&g_fake.health, DDP_ERR_NCCL);
  ck_assert_int_eq(ddp_comm_watchdog_look(wd, t0 + 0.2), DDP_ERR_NCCL);
  ck_assert_str_eq(g_fake.line,
                   "comm test: rank 3 on node7: allreduce_sum #1 of 1024 bytes failed: NCCL "
                   "error: unhandled system error; aborting the job");
}
END_TEST

START_TEST(test_comm_watchdog_an_error_between_collectives_names_none) {
  ddp_comm_watchdog_t *wd = start_manual(300);
  const double t0 = ddp_clock_seconds();
  ddp_comm_watchdog_issued(wd, 1, "allreduce_sum", 8);
  atomic_store(&g_fake.state[1], DDP_COMM_WATCH_DONE);
  ck_assert_int_eq(ddp_comm_watchdog_look(wd, t0 + 0.1), DDP_OK);
  atomic_store(&g_fake.health, DDP_ERR_NCCL);
  ck_assert_int_eq(ddp_comm_watchdog_look(wd, t0 + 0.2), DDP_ERR_NCCL);
  ck_assert_str_eq(g_fake.line,
                   "comm test: rank 3 on node7: NCCL error: unhandled system error; aborting the "
                   "job");
}
END_TEST

START_TEST(test_comm_watchdog_a_failed_marker_fails_with_its_cause) {
  ddp_comm_watchdog_t *wd = start_manual(300);
  const double t0 = ddp_clock_seconds();
  ddp_comm_watchdog_issued(wd, 0, "broadcast", 4096);
  ddp_comm_watchdog_issued(wd, 3, "allreduce_sum", 16);
  atomic_store(&g_fake.state[3], DDP_COMM_WATCH_FAILED);
  ck_assert_int_eq(ddp_comm_watchdog_look(wd, t0 + 0.1), DDP_ERR_CUDA);
  ck_assert_int_eq(g_fake.failed_with, DDP_ERR_CUDA);
  /* Named by the oldest in flight, the one the stream was at. */
  ck_assert_str_eq(g_fake.line,
                   "comm test: rank 3 on node7: broadcast #1 of 4096 bytes failed: CUDA error "
                   "while waiting: an illegal memory access was encountered; aborting the job");
}
END_TEST

START_TEST(test_comm_watchdog_thread_ends_a_collective_that_never_completes) {
  const ddp_comm_watchdog_config_t cfg = config(0.2, 0);
  ck_assert_int_eq(ddp_comm_watchdog_start(&cfg, &g_wd), DDP_OK);
  const double t0 = ddp_clock_seconds();
  ddp_comm_watchdog_issued(g_wd, 1, "allreduce_sum", 4);
  while (fake_fails() == 0 && ddp_clock_seconds() - t0 < 10) sleep_s(0.01);
  const double waited = ddp_clock_seconds() - t0;
  ck_assert_int_eq(fake_fails(), 1);
  ck_assert_msg(waited >= 0.2, "verdict after %.3f s, before the 0.2 s timeout", waited);
  ck_assert_msg(strstr(g_fake.line, "allreduce_sum #1 of 4 bytes failed: no completion after 0.2"),
                "line: %s", g_fake.line);
  sleep_s(0.1);
  ck_assert_int_eq(fake_fails(), 1); /* once */
}
END_TEST

START_TEST(test_comm_watchdog_thread_leaves_collectives_that_complete_alone) {
  const ddp_comm_watchdog_config_t cfg = config(0.3, 0);
  ck_assert_int_eq(ddp_comm_watchdog_start(&cfg, &g_wd), DDP_OK);
  /* Ten collectives on two slots, each done after 0.05 s: a second in all,
   * three timeouts, and never one late. */
  for (int k = 0; k < 10; ++k) {
    const int slot = k % 2;
    atomic_store(&g_fake.state[slot], DDP_COMM_WATCH_PENDING);
    ddp_comm_watchdog_issued(g_wd, slot, "allreduce_sum", 4);
    sleep_s(0.05);
    atomic_store(&g_fake.state[slot], DDP_COMM_WATCH_DONE);
    sleep_s(0.05);
  }
  sleep_s(0.4);
  ck_assert_int_eq(fake_fails(), 0);
}
END_TEST

START_TEST(test_comm_watchdog_rejects_bad_config) {
  ddp_comm_watchdog_config_t cfg = config(10, 1);
  ddp_comm_watchdog_t *wd = (ddp_comm_watchdog_t *)&cfg; /* must be reset to NULL */
  ck_assert_int_eq(ddp_comm_watchdog_start(NULL, &wd), DDP_ERR_INVALID_ARG);
  ck_assert_ptr_null(wd);
  cfg.n_slots = 0;
  ck_assert_int_eq(ddp_comm_watchdog_start(&cfg, &wd), DDP_ERR_INVALID_ARG);
  cfg = config(0, 1);
  ck_assert_int_eq(ddp_comm_watchdog_start(&cfg, &wd), DDP_ERR_INVALID_ARG);
  cfg = config(INFINITY, 1);
  ck_assert_int_eq(ddp_comm_watchdog_start(&cfg, &wd), DDP_ERR_INVALID_ARG);
  cfg = config(10, 1);
  cfg.probe.fail = NULL;
  ck_assert_int_eq(ddp_comm_watchdog_start(&cfg, &wd), DDP_ERR_INVALID_ARG);
  ck_assert_ptr_null(wd);
  /* Out-of-range slots are not counted; NULL is a no-op. */
  ck_assert_uint_eq(ddp_comm_watchdog_issued(NULL, 0, "allreduce_sum", 4), 0);
  ddp_comm_watchdog_t *ok = start_manual(10);
  ck_assert_uint_eq(ddp_comm_watchdog_issued(ok, N_SLOTS, "allreduce_sum", 4), 0);
  ck_assert_uint_eq(ddp_comm_watchdog_issued(ok, -1, "allreduce_sum", 4), 0);
  ddp_comm_watchdog_stop(NULL);
}
END_TEST

static Suite *watchdog_suite(void) {
  Suite *s = suite_create("comm_watchdog");
  TCase *tc = tcase_create("decisions");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_comm_watch_judge_failure_then_error_then_done_then_age);
  tcase_add_test(tc, test_comm_watch_format_names_rank_collective_size_and_cause);
  tcase_add_test(tc, test_comm_watchdog_times_the_oldest_collective_in_flight);
  tcase_add_test(tc, test_comm_watchdog_a_reused_slot_done_means_every_earlier_done);
  tcase_add_test(tc, test_comm_watchdog_queued_behind_another_counts_from_its_completion);
  tcase_add_test(tc, test_comm_watchdog_the_watchers_own_stall_does_not_count);
  tcase_add_test(tc, test_comm_watchdog_a_communicator_error_fails_at_once);
  tcase_add_test(tc, test_comm_watchdog_an_error_between_collectives_names_none);
  tcase_add_test(tc, test_comm_watchdog_a_failed_marker_fails_with_its_cause);
  tcase_add_test(tc, test_comm_watchdog_rejects_bad_config);
  suite_add_tcase(s, tc);
  tc = tcase_create("thread");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_comm_watchdog_thread_ends_a_collective_that_never_completes);
  tcase_add_test(tc, test_comm_watchdog_thread_leaves_collectives_that_complete_alone);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(watchdog_suite());
}
