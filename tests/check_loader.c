/* The background batch loader: order and content for several depths and
 * speeds, the producer running ahead, wait statistics, holding slots and
 * release order, fill errors surfacing at their seq, stop/restart/destroy in
 * every state, bounded runs, synchronous mode as the reference, bad config.
 *
 * Timing-based checks use generous margins or wait for an observable state
 * (the fill counter) instead of sleeping and hoping, so they hold on a loaded
 * machine and under sanitizers. Callbacks never assert: they run on the loader
 * thread, so they record what they saw and the test thread checks it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "check_util.h"
#include "data/loader.h"

enum { ITEM_LEN = 257, MAX_FILLS = 1024 };

typedef struct test_item {
  int64_t seq;
  int64_t data[ITEM_LEN];
} test_item_t;

typedef struct test_ctx {
  /* set up by the test before start() (pthread_create orders them) */
  long fill_sleep_us;
  int64_t fail_at; /* fill fails at this seq; -1: never */
  int init_fail_at;
  int init_null_at;
  int init_dup_at;
  /* written by callbacks */
  int inited, destroyed;
  test_item_t *slots[16];
  int64_t fill_log[MAX_FILLS];
  atomic_int fills;
  atomic_int off_thread_fills; /* fills not on the thread that created the ctx */
  pthread_t main_thread;
} test_ctx_t;

static int64_t value_of(int64_t seq, int i) {
  return seq * 1000003 + i * 7 + 1;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static ddp_status_t t_slot_init(void *vctx, int slot, void **item) {
  test_ctx_t *c = vctx;
  if (slot == c->init_fail_at) {
    DDP_LOG_ERROR("test slot_init: slot %d failed", slot);
    return DDP_ERR_OOM;
  }
  if (slot == c->init_null_at) {
    c->slots[slot] = NULL;
    *item = NULL;
    return DDP_OK;
  }
  if (slot == c->init_dup_at) {
    c->slots[slot] = NULL;
    *item = c->slots[0];
    return DDP_OK;
  }
  test_item_t *it = malloc(sizeof *it);
  if (!it) return DDP_ERR_OOM;
  it->seq = -1;
  c->slots[slot] = it;
  c->inited++;
  *item = it;
  return DDP_OK;
}

static void t_slot_destroy(void *vctx, int slot, void *item) {
  test_ctx_t *c = vctx;
  /* The NULL and duplicate slots own nothing. */
  if (item && item == c->slots[slot]) {
    free(item);
    c->destroyed++;
  }
}

static ddp_status_t t_fill(void *vctx, int64_t seq, void *item) {
  test_ctx_t *c = vctx;
  int n = atomic_load(&c->fills);
  if (n < MAX_FILLS) c->fill_log[n] = seq;
  if (!pthread_equal(pthread_self(), c->main_thread)) atomic_fetch_add(&c->off_thread_fills, 1);
  if (c->fill_sleep_us > 0) sleep_us(c->fill_sleep_us);
  ddp_status_t st = DDP_OK;
  if (seq == c->fail_at) {
    DDP_LOG_ERROR("test fill: reading item %lld failed", (long long)seq);
    st = DDP_ERR_IO;
  } else {
    test_item_t *it = item;
    it->seq = seq;
    for (int i = 0; i < ITEM_LEN; ++i) it->data[i] = value_of(seq, i);
  }
  /* After the log write: a reader that sees the count sees the entry. */
  atomic_fetch_add(&c->fills, 1);
  return st;
}

static void ctx_init(test_ctx_t *c) {
  memset(c, 0, sizeof *c);
  c->fail_at = -1;
  c->init_fail_at = c->init_null_at = c->init_dup_at = -1;
  atomic_init(&c->fills, 0);
  atomic_init(&c->off_thread_fills, 0);
  c->main_thread = pthread_self();
}

static ddp_loader_t *make_loader(test_ctx_t *c, int depth, int synchronous) {
  ddp_loader_config_t cfg = {.depth = depth,
                             .synchronous = synchronous,
                             .ctx = c,
                             .slot_init = t_slot_init,
                             .slot_destroy = t_slot_destroy,
                             .fill = t_fill};
  ddp_loader_t *l = NULL;
  ck_assert_int_eq(ddp_loader_create(&cfg, &l), DDP_OK);
  ck_assert_ptr_nonnull(l);
  ck_assert_int_eq(c->inited, depth);
  return l;
}

/* Every element, so a torn or overwritten item cannot pass. One assertion
 * per item, not per element: each ck_assert is a write() to Check's parent
 * process, and hundreds per item would make the consumer slow enough to
 * distort the timing tests. */
static void check_item(const void *item, int64_t seq) {
  const test_item_t *it = item;
  ck_assert_ptr_nonnull(it);
  int bad = -1;
  for (int i = 0; i < ITEM_LEN && bad < 0; ++i)
    if (it->data[i] != value_of(seq, i)) bad = i;
  ck_assert_msg(it->seq == seq && bad < 0, "item for seq %lld: seq %lld, first bad element %d",
                (long long)seq, (long long)it->seq, bad);
}

/* Polls the fill counter; the loader has no "how far are you" query because
 * the step loop never needs one. */
static int wait_for_fills(test_ctx_t *c, int n) {
  double deadline = now_ms() + 2000;
  while (atomic_load(&c->fills) < n) {
    if (now_ms() > deadline) return 0;
    sleep_us(200);
  }
  return 1;
}

static void acquire_ok(ddp_loader_t *l, int64_t seq, void **item) {
  ddp_status_t st = ddp_loader_acquire(l, seq, item);
  ck_assert_msg(st == DDP_OK, "acquire(%lld): %s", (long long)seq, ddp_status_name(st));
  check_item(*item, seq);
}

START_TEST(test_loader_items_arrive_in_order_with_content) {
  const int depths[] = {2, 3, 8};
  for (int d = 0; d < 3; ++d) {
    for (int slow_consumer = 0; slow_consumer <= 1; ++slow_consumer) {
      test_ctx_t c;
      ctx_init(&c);
      c.fill_sleep_us = slow_consumer ? 0 : 400;
      ddp_loader_t *l = make_loader(&c, depths[d], 0);
      const int n = 16;
      ck_assert_int_eq(ddp_loader_start(l, 0, n), DDP_OK);
      for (int64_t s = 0; s < n; ++s) {
        void *item;
        acquire_ok(l, s, &item);
        if (slow_consumer) sleep_us(400);
        /* Still intact after the producer had time to run ahead: it never
         * writes a slot the consumer holds. */
        check_item(item, s);
        ck_assert_int_eq(ddp_loader_release(l, item), DDP_OK);
      }
      ck_assert_int_eq(ddp_loader_stop(l), DDP_OK);
      ck_assert_int_eq(atomic_load(&c.fills), n);
      for (int i = 0; i < n; ++i) ck_assert_int_eq(c.fill_log[i], i);
      ck_assert_int_eq(atomic_load(&c.off_thread_fills), n);
      ddp_loader_destroy(l);
      ck_assert_int_eq(c.destroyed, depths[d]);
    }
  }
}
END_TEST

START_TEST(test_loader_producer_runs_ahead_of_a_slow_consumer) {
  test_ctx_t c;
  ctx_init(&c);
  const int depth = 4;
  ddp_loader_t *l = make_loader(&c, depth, 0);
  ck_assert_int_eq(ddp_loader_start(l, 0, -1), DDP_OK);
  void *item;
  acquire_ok(l, 0, &item);
  ck_assert_int_eq(ddp_loader_release(l, item), DDP_OK);
  /* With seq 0 released the producer fills 1 .. depth on its own ... */
  ck_assert_msg(wait_for_fills(&c, 1 + depth), "only %d fills", atomic_load(&c.fills));
  /* ... and no further: the ring is full. */
  sleep_us(20000);
  ck_assert_int_eq(atomic_load(&c.fills), 1 + depth);
  ddp_loader_reset_stats(l);
  for (int64_t s = 1; s <= depth; ++s) {
    acquire_ok(l, s, &item);
    sleep_us(1000); /* the slow step */
    ck_assert_int_eq(ddp_loader_release(l, item), DDP_OK);
  }
  ddp_loader_stats_t st;
  ddp_loader_get_stats(l, &st);
  ck_assert_int_eq(st.waits, 0);
  ck_assert(st.wait_ms == 0.0);
  ck_assert_int_eq(st.acquired, depth);
  ddp_loader_destroy(l);
}
END_TEST

START_TEST(test_loader_slow_producer_counts_waits) {
  test_ctx_t c;
  ctx_init(&c);
  const long fill_us = 5000;
  c.fill_sleep_us = fill_us;
  ddp_loader_t *l = make_loader(&c, 3, 0);
  const int n = 8;
  double t0 = now_ms();
  ck_assert_int_eq(ddp_loader_start(l, 0, n), DDP_OK);
  for (int64_t s = 0; s < n; ++s) {
    void *item;
    acquire_ok(l, s, &item);
    ck_assert_int_eq(ddp_loader_release(l, item), DDP_OK);
  }
  double elapsed = now_ms() - t0;
  ddp_loader_stats_t st;
  ddp_loader_get_stats(l, &st);
  /* A consumer with nothing to do waits for every 5 ms fill. Whether one
   * acquire blocks depends on the scheduler, so the lower bounds are a
   * quarter of that: a consumer descheduled for whole fills on a loaded
   * machine (seen with ASan and two busy cores at 2 ms fills) still passes,
   * a loader that does not count or time its waits does not. */
  const double fill_ms = fill_us / 1000.0;
  ck_assert_int_eq(st.acquired, n);
  ck_assert_msg(st.waits >= n / 4 && st.waits <= n, "waits %lld", (long long)st.waits);
  ck_assert_msg(st.wait_ms >= 0.25 * n * fill_ms && st.wait_ms <= elapsed,
                "wait_ms %.3f of %.3f ms", st.wait_ms, elapsed);
  ck_assert_msg(st.fill_ms >= n * fill_ms, "fill_ms %.3f", st.fill_ms);
  ddp_loader_reset_stats(l);
  ddp_loader_get_stats(l, &st);
  ck_assert_int_eq(st.waits, 0);
  ck_assert_int_eq(st.acquired, 0);
  ck_assert(st.wait_ms == 0.0 && st.fill_ms == 0.0);
  ddp_loader_destroy(l);
}
END_TEST

START_TEST(test_loader_holds_depth_minus_one_and_requires_release_order) {
  for (int sync = 0; sync <= 1; ++sync) {
    test_ctx_t c;
    ctx_init(&c);
    ddp_loader_t *l = make_loader(&c, 3, sync);
    ck_assert_int_eq(ddp_loader_start(l, 0, -1), DDP_OK);
    void *it[4];
    acquire_ok(l, 0, &it[0]);
    acquire_ok(l, 1, &it[1]);
    acquire_ok(l, 2, &it[2]); /* while holding depth - 1 */
    ck_assert(it[0] != it[1] && it[1] != it[2] && it[0] != it[2]);

    ddp_test_log_start();
    void *none = &c;
    ck_assert_int_eq(ddp_loader_acquire(l, 3, &none), DDP_ERR_INVALID_ARG);
    ck_assert_ptr_null(none);
    ck_assert_int_eq(ddp_loader_release(l, it[1]), DDP_ERR_INVALID_ARG);
    ck_assert_int_eq(ddp_loader_release(l, &c), DDP_ERR_INVALID_ARG);
    char *out = ddp_test_log_stop();
    ddp_assert_contains(out, "all 3 slots are held (seqs 0 .. 2); release one");
    ddp_assert_contains(out, "seq 1 released before seq 0; slots go back in the order");
    ddp_assert_contains(out, "is not an item this loader has handed out");
    free(out);

    ck_assert_int_eq(ddp_loader_release(l, it[0]), DDP_OK);
    acquire_ok(l, 3, &it[3]);
    ck_assert_ptr_eq(it[3], it[0]); /* the ring reuses the freed slot */
    check_item(it[1], 1);           /* the held ones were left alone */
    check_item(it[2], 2);
    for (int i = 1; i <= 3; ++i) ck_assert_int_eq(ddp_loader_release(l, it[i]), DDP_OK);

    ddp_test_log_start();
    ck_assert_int_eq(ddp_loader_release(l, it[3]), DDP_ERR_INVALID_ARG);
    out = ddp_test_log_stop();
    ddp_assert_contains(out, "no item is held");
    free(out);
    ddp_loader_destroy(l);
  }
}
END_TEST

START_TEST(test_loader_fill_error_surfaces_at_its_seq) {
  for (int sync = 0; sync <= 1; ++sync) {
    test_ctx_t c;
    ctx_init(&c);
    c.fail_at = 5;
    ddp_loader_t *l = make_loader(&c, 8, sync);
    ddp_test_log_start();
    ck_assert_int_eq(ddp_loader_start(l, 0, -1), DDP_OK);
    /* Let the failure happen before anything is consumed: the good items
     * before it must still come out. */
    if (!sync) ck_assert(wait_for_fills(&c, 6));
    for (int64_t s = 0; s < 5; ++s) {
      void *item;
      acquire_ok(l, s, &item);
      ck_assert_int_eq(ddp_loader_release(l, item), DDP_OK);
    }
    void *item = &c;
    ck_assert_int_eq(ddp_loader_acquire(l, 5, &item), DDP_ERR_IO);
    ck_assert_ptr_null(item);
    ck_assert_int_eq(ddp_loader_acquire(l, 5, &item), DDP_ERR_IO); /* sticky */
    /* The producer stopped at the failure although 8 slots were free. */
    sleep_us(20000);
    ck_assert_int_eq(atomic_load(&c.fills), 6);
    ck_assert_int_eq(ddp_loader_stop(l), DDP_OK);
    char *out = ddp_test_log_stop();
    /* Logged once, by fill(), and not again by the loader: one line. */
    ddp_assert_contains(out, "reading item 5 failed");
    ck_assert_msg(strchr(out, '\n') == out + strlen(out) - 1, "more than one line: %s", out);
    free(out);

    /* A fresh run (say, after the caller skipped the bad item) works. */
    c.fail_at = -1;
    ck_assert_int_eq(ddp_loader_start(l, 5, 8), DDP_OK);
    for (int64_t s = 5; s < 8; ++s) {
      acquire_ok(l, s, &item);
      ck_assert_int_eq(ddp_loader_release(l, item), DDP_OK);
    }
    ddp_loader_destroy(l);
  }
}
END_TEST

START_TEST(test_loader_stop_blocked_producer_with_held_slots_then_restart) {
  test_ctx_t c;
  ctx_init(&c);
  ddp_loader_t *l = make_loader(&c, 3, 0);
  ck_assert_int_eq(ddp_loader_start(l, 0, -1), DDP_OK);
  void *a, *b;
  acquire_ok(l, 0, &a);
  acquire_ok(l, 1, &b);
  ck_assert(wait_for_fills(&c, 3)); /* ring full, two slots held: producer waits */
  double t0 = now_ms();
  ck_assert_int_eq(ddp_loader_stop(l), DDP_OK);
  ck_assert_msg(now_ms() - t0 < 1000, "stop took %.1f ms", now_ms() - t0);
  ck_assert_int_eq(ddp_loader_stop(l), DDP_OK); /* idempotent */

  ddp_test_log_start();
  ck_assert_int_eq(ddp_loader_release(l, a), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_loader_acquire(l, 2, &a), DDP_ERR_INVALID_ARG);
  char *out = ddp_test_log_stop();
  ddp_assert_contains(out, "not running (stop() took held items back)");
  ddp_assert_contains(out, "loader_acquire: not started");
  free(out);

  /* Restart elsewhere, as an eval pass or a resume does. */
  int before = atomic_load(&c.fills);
  ck_assert_int_eq(ddp_loader_start(l, 100, 110), DDP_OK);
  for (int64_t s = 100; s < 110; ++s) {
    void *item;
    acquire_ok(l, s, &item);
    ck_assert_int_eq(ddp_loader_release(l, item), DDP_OK);
  }
  ck_assert_int_eq(atomic_load(&c.fills), before + 10);
  ck_assert_int_eq(c.fill_log[before], 100);

  /* Stop while a (slow) fill is in progress: it returns once that fill ends. */
  c.fill_sleep_us = 30000;
  ck_assert_int_eq(ddp_loader_stop(l), DDP_OK);
  ck_assert_int_eq(ddp_loader_start(l, 0, -1), DDP_OK);
  sleep_us(5000);
  t0 = now_ms();
  ck_assert_int_eq(ddp_loader_stop(l), DDP_OK);
  ck_assert_msg(now_ms() - t0 < 1000, "stop took %.1f ms", now_ms() - t0);
  ddp_loader_destroy(l);
  ck_assert_int_eq(c.destroyed, 3);
}
END_TEST

START_TEST(test_loader_destroy_in_every_state) {
  ddp_loader_destroy(NULL);

  test_ctx_t c;
  ctx_init(&c);
  ddp_loader_t *l = make_loader(&c, 4, 0);
  ddp_loader_destroy(l); /* never started */
  ck_assert_int_eq(c.destroyed, 4);
  ck_assert_int_eq(atomic_load(&c.fills), 0);

  /* Mid-stream: producer blocked on a full ring, consumer holding a slot. */
  ctx_init(&c);
  l = make_loader(&c, 4, 0);
  ck_assert_int_eq(ddp_loader_start(l, 0, -1), DDP_OK);
  void *item;
  acquire_ok(l, 0, &item);
  ck_assert(wait_for_fills(&c, 4));
  ddp_loader_destroy(l);
  ck_assert_int_eq(c.destroyed, 4);

  /* Mid-stream with the producer inside a fill. */
  ctx_init(&c);
  c.fill_sleep_us = 20000;
  l = make_loader(&c, 2, 0);
  ck_assert_int_eq(ddp_loader_start(l, 0, -1), DDP_OK);
  sleep_us(5000);
  ddp_loader_destroy(l);
  ck_assert_int_eq(c.destroyed, 2);
}
END_TEST

START_TEST(test_loader_bounded_run_ends_with_an_error) {
  for (int sync = 0; sync <= 1; ++sync) {
    test_ctx_t c;
    ctx_init(&c);
    ddp_loader_t *l = make_loader(&c, 4, sync);
    ck_assert_int_eq(ddp_loader_start(l, 10, 13), DDP_OK);
    void *item;
    ddp_test_log_start();
    ck_assert_int_eq(ddp_loader_acquire(l, 11, &item), DDP_ERR_INVALID_ARG);
    char *out = ddp_test_log_stop();
    ddp_assert_contains(out, "seq 11 out of order; the next item is seq 10");
    free(out);
    for (int64_t s = 10; s < 13; ++s) {
      acquire_ok(l, s, &item);
      ck_assert_int_eq(ddp_loader_release(l, item), DDP_OK);
    }
    ddp_test_log_start();
    ck_assert_int_eq(ddp_loader_acquire(l, 13, &item), DDP_ERR_INVALID_ARG);
    out = ddp_test_log_stop();
    ddp_assert_contains(out, "seq 13 is past the end of this run (items 10 .. 12)");
    free(out);
    ck_assert_int_eq(atomic_load(&c.fills), 3); /* nothing past the end was filled */
    ck_assert_int_eq(ddp_loader_stop(l), DDP_OK);

    /* An empty run is legal and ends at once. */
    ck_assert_int_eq(ddp_loader_start(l, 7, 7), DDP_OK);
    ddp_test_log_start();
    ck_assert_int_eq(ddp_loader_acquire(l, 7, &item), DDP_ERR_INVALID_ARG);
    free(ddp_test_log_stop());
    ddp_loader_destroy(l);
  }
}
END_TEST

START_TEST(test_loader_synchronous_mode_gives_identical_items) {
  enum { N = 30 };
  static test_item_t got[2][N];
  ddp_loader_stats_t st[2];
  for (int sync = 0; sync <= 1; ++sync) {
    test_ctx_t c;
    ctx_init(&c);
    ddp_loader_t *l = make_loader(&c, 3, sync);
    ck_assert_int_eq(ddp_loader_start(l, 0, N), DDP_OK);
    for (int64_t s = 0; s < N; ++s) {
      void *item;
      acquire_ok(l, s, &item);
      memcpy(&got[sync][s], item, sizeof got[sync][s]);
      ck_assert_int_eq(ddp_loader_release(l, item), DDP_OK);
    }
    ddp_loader_get_stats(l, &st[sync]);
    ddp_loader_destroy(l);
    /* Threaded fills run off the consumer's thread; synchronous ones on it. */
    ck_assert_int_eq(atomic_load(&c.off_thread_fills), sync ? 0 : N);
    ck_assert_int_eq(atomic_load(&c.fills), N);
  }
  ck_assert_int_eq(memcmp(got[0], got[1], sizeof got[0]), 0);
  ck_assert_int_eq(st[0].acquired, N);
  ck_assert_int_eq(st[1].acquired, N);
  ck_assert_int_eq(st[1].waits, N); /* every inline fill is time the step loop waited */
}
END_TEST

START_TEST(test_loader_rejects_bad_config) {
  test_ctx_t c;
  ctx_init(&c);
  ddp_loader_config_t good = {.depth = 2,
                              .ctx = &c,
                              .slot_init = t_slot_init,
                              .slot_destroy = t_slot_destroy,
                              .fill = t_fill};
  ddp_loader_t *l = (ddp_loader_t *)&c;

  ddp_test_log_start();
  ddp_loader_config_t cfg = good;
  cfg.depth = 1;
  ck_assert_int_eq(ddp_loader_create(&cfg, &l), DDP_ERR_INVALID_ARG);
  ck_assert_ptr_null(l);
  cfg.depth = 0;
  ck_assert_int_eq(ddp_loader_create(&cfg, &l), DDP_ERR_INVALID_ARG);
  cfg = good;
  cfg.slot_init = NULL;
  ck_assert_int_eq(ddp_loader_create(&cfg, &l), DDP_ERR_INVALID_ARG);
  cfg = good;
  cfg.fill = NULL;
  ck_assert_int_eq(ddp_loader_create(&cfg, &l), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_loader_create(NULL, &l), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_loader_create(&good, NULL), DDP_ERR_INVALID_ARG);
  char *out = ddp_test_log_stop();
  ddp_assert_contains(out, "depth 1 is too small; it needs >= 2 slots");
  ddp_assert_contains(out, "depth 0 is too small");
  ddp_assert_contains(out, "loader: the slot_init callback is required");
  ddp_assert_contains(out, "loader: the fill callback is required");
  ddp_assert_contains(out, "loader_create: NULL config");
  free(out);
  ck_assert_int_eq(c.inited, 0); /* nothing allocated for a bad config */

  /* slot_init failing part way: its status, and the slots made so far freed. */
  cfg = good;
  cfg.depth = 4;
  c.init_fail_at = 2;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_loader_create(&cfg, &l), DDP_ERR_OOM);
  ck_assert_ptr_null(l);
  ck_assert_int_eq(c.inited, 2);
  ck_assert_int_eq(c.destroyed, 2);
  c.init_fail_at = -1;
  c.init_null_at = 1;
  ck_assert_int_eq(ddp_loader_create(&cfg, &l), DDP_ERR_INVALID_ARG);
  c.init_null_at = -1;
  c.init_dup_at = 3;
  ck_assert_int_eq(ddp_loader_create(&cfg, &l), DDP_ERR_INVALID_ARG);
  out = ddp_test_log_stop();
  ddp_assert_contains(out, "slot_init: slot 2 failed");
  ddp_assert_contains(out, "slot_init gave slot 1 a NULL item");
  ddp_assert_contains(out, "slot_init gave slots 0 and 3 the same item");
  free(out);
  ck_assert_int_eq(c.destroyed, c.inited); /* every slot freed on every failure */

  /* Bad start arguments, and starting twice. */
  ctx_init(&c);
  l = make_loader(&c, 2, 0);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_loader_start(l, -1, 5), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_loader_start(l, 5, 4), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_loader_start(l, 0, -1), DDP_OK);
  ck_assert_int_eq(ddp_loader_start(l, 0, -1), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_loader_acquire(NULL, 0, NULL), DDP_ERR_INVALID_ARG);
  out = ddp_test_log_stop();
  ddp_assert_contains(out, "first seq -1 is negative");
  ddp_assert_contains(out, "end seq 4 is before first seq 5");
  ddp_assert_contains(out, "already running; stop() it first");
  free(out);
  ddp_loader_destroy(l);
}
END_TEST

static Suite *loader_suite(void) {
  Suite *s = suite_create("loader");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 20); /* a hang fails the test instead of the run */
  tcase_add_test(tc, test_loader_items_arrive_in_order_with_content);
  tcase_add_test(tc, test_loader_producer_runs_ahead_of_a_slow_consumer);
  tcase_add_test(tc, test_loader_slow_producer_counts_waits);
  tcase_add_test(tc, test_loader_holds_depth_minus_one_and_requires_release_order);
  tcase_add_test(tc, test_loader_fill_error_surfaces_at_its_seq);
  tcase_add_test(tc, test_loader_stop_blocked_producer_with_held_slots_then_restart);
  tcase_add_test(tc, test_loader_destroy_in_every_state);
  tcase_add_test(tc, test_loader_bounded_run_ends_with_an_error);
  tcase_add_test(tc, test_loader_synchronous_mode_gives_identical_items);
  tcase_add_test(tc, test_loader_rejects_bad_config);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(loader_suite());
}
