/* The background batch loader (see data/loader.h).
 *
 * State is three sequence numbers, absolute like the seqs themselves:
 *
 *   released <= acquired <= produced <= min(released + depth, end)
 *
 * [released, acquired) are held by the consumer, [acquired, produced) are
 * filled and waiting, and the producer may fill `produced` once
 * produced - released < depth, i.e. once its slot is free. Item seq lives in
 * slot (seq - base) % depth, base being the first_seq of this run; the
 * inequalities above make the depth consecutive seqs from `released` map to
 * distinct slots, so the producer never writes a slot the consumer holds.
 * Counters rather than per-slot states make out-of-order requests easy to
 * name in an error and keep every check O(1).
 *
 * Memory ordering. Every counter, flag and statistic is read and written only
 * with `mu` held; only the item contents are touched outside it: by fill() on
 * the producer, by the consumer between acquire() and release(). POSIX makes
 * mutex unlock/lock a release/acquire pair (XBD 4.12), so:
 *   - fill(seq) writes the item, then the producer locks and advances
 *     `produced`; the consumer reads `produced` > seq under the same mutex, so
 *     everything fill() wrote happens-before the consumer's first read;
 *   - the consumer's last access to a slot precedes release(), which advances
 *     `released` under the mutex; the producer sees that value under the
 *     mutex before it calls fill() on the slot, so its writes come after.
 * The producer thread is created after the counters are set (pthread_create
 * orders them) and joined before they are reset (pthread_join orders that).
 * The loader cannot see a device reading a pinned slot: on CUDA the consumer
 * releases only after its copy event completed, which is the same argument
 * with the event in place of the consumer's last read.
 *
 * A hand-written ring on pthreads rather than a queue library: the work is a
 * few counters, the slots must be caller-owned (pinned buffers), and the
 * release-later contract for asynchronous copies is not what general-purpose
 * queues offer. */
#include "data/loader.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddptrain/check.h"
#include "core/clock.h"

struct ddp_loader {
  ddp_loader_config_t cfg;
  void **items; /* depth slot pointers from slot_init */
  int n_init;   /* slots initialised (create may fail part way) */

  pthread_mutex_t mu;
  pthread_cond_t ready; /* producer -> consumer: produced advanced, or fill failed */
  pthread_cond_t space; /* consumer -> producer: released advanced, or stop */
  int locks_init;       /* mu/ready/space initialised */

  /* Touched only by the consumer thread (start/stop/destroy). */
  pthread_t thread;
  int has_thread; /* the producer thread exists and must be joined */

  /* Everything below is guarded by mu. */
  int running;  /* between start() and stop() */
  int stop;     /* stop() asks the producer to leave */
  int exited;   /* the producer has left its loop */
  int64_t base; /* first_seq of this run: seq base is in slot 0 */
  int64_t end;  /* first seq not produced; INT64_MAX when unbounded */
  int64_t produced, acquired, released;
  ddp_status_t fail_status; /* fill()'s error at seq `produced`, or DDP_OK */
  ddp_loader_stats_t stats;
};

static int slot_of(const ddp_loader_t *l, int64_t seq) {
  return (int)((seq - l->base) % l->cfg.depth);
}

/* Fills item seq into its slot with mu dropped (entered and left with mu
 * held): the consumer can acquire and release meanwhile. On success
 * `produced` moves past seq; on failure the status is kept for the acquire()
 * of this seq and `produced` stays at seq, so the items before it are still
 * handed out first. Returns the fill's time in *ms. */
static ddp_status_t fill_one(ddp_loader_t *l, int64_t seq, double *ms) {
  void *item = l->items[slot_of(l, seq)];
  pthread_mutex_unlock(&l->mu);
  double t0 = (1e3 * ddp_clock_seconds());
  ddp_status_t st = l->cfg.fill(l->cfg.ctx, seq, item);
  *ms = (1e3 * ddp_clock_seconds()) - t0;
  pthread_mutex_lock(&l->mu);
  l->stats.fill_ms += *ms;
  if (st != DDP_OK)
    l->fail_status = st;
  else
    l->produced = seq + 1;
  return st;
}

/* The producer: fill in order while there is a free slot, until stopped, at
 * the end, or at the first failing fill. The mutex is dropped around fill()
 * so that the consumer can acquire and release meanwhile. */
static void *producer_main(void *arg) {
  ddp_loader_t *l = arg;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->stop && l->produced < l->end && l->produced - l->released >= l->cfg.depth)
      pthread_cond_wait(&l->space, &l->mu);
    if (l->stop || l->produced >= l->end) break;
    double ms;
    if (fill_one(l, l->produced, &ms) != DDP_OK) break;
    pthread_cond_signal(&l->ready);
  }
  l->exited = 1;
  /* The consumer may be waiting for an item that will now never come (fill
   * failed): wake it so it sees why. */
  pthread_cond_signal(&l->ready);
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

void ddp_loader_destroy(ddp_loader_t *l) {
  if (!l) return;
  if (l->locks_init) {
    ddp_loader_stop(l);
    pthread_cond_destroy(&l->space);
    pthread_cond_destroy(&l->ready);
    pthread_mutex_destroy(&l->mu);
  }
  if (l->cfg.slot_destroy) {
    for (int i = 0; i < l->n_init; ++i) l->cfg.slot_destroy(l->cfg.ctx, i, l->items[i]);
  }
  free(l->items);
  free(l);
}

ddp_status_t ddp_loader_create(const ddp_loader_config_t *cfg, ddp_loader_t **out) {
  if (!out) DDP_FAIL(DDP_ERR_INVALID_ARG, "loader_create: NULL out");
  *out = NULL;
  if (!cfg) DDP_FAIL(DDP_ERR_INVALID_ARG, "loader_create: NULL config");
  if (cfg->depth < 2)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "loader: depth %d is too small; it needs >= 2 slots (one consumed while the next "
             "is filled)",
             cfg->depth);
  if (!cfg->slot_init) DDP_FAIL(DDP_ERR_INVALID_ARG, "loader: the slot_init callback is required");
  if (!cfg->fill) DDP_FAIL(DDP_ERR_INVALID_ARG, "loader: the fill callback is required");

  ddp_status_t st = DDP_OK;
  ddp_loader_t *l = calloc(1, sizeof *l);
  if (!l) DDP_FAIL(DDP_ERR_OOM, "loader: out of memory");
  l->cfg = *cfg;
  l->items = calloc((size_t)cfg->depth, sizeof *l->items);
  if (!l->items) DDP_FAIL_GOTO(st, DDP_ERR_OOM, destroy_loader, "loader: out of memory");
  if (pthread_mutex_init(&l->mu, NULL) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, destroy_loader, "loader: pthread_mutex_init failed");
  if (pthread_cond_init(&l->ready, NULL) != 0) {
    pthread_mutex_destroy(&l->mu);
    DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, destroy_loader, "loader: pthread_cond_init failed");
  }
  if (pthread_cond_init(&l->space, NULL) != 0) {
    pthread_cond_destroy(&l->ready);
    pthread_mutex_destroy(&l->mu);
    DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, destroy_loader, "loader: pthread_cond_init failed");
  }
  l->locks_init = 1;

  for (int i = 0; i < cfg->depth; ++i) {
    void *item = NULL;
    DDP_CHECK_GOTO(cfg->slot_init(cfg->ctx, i, &item), st, destroy_loader);
    /* Counted before the checks below so that destroy frees this slot too. */
    l->items[i] = item;
    l->n_init = i + 1;
    if (!item)
      DDP_FAIL_GOTO(st, DDP_ERR_INVALID_ARG, destroy_loader,
                    "loader: slot_init gave slot %d a NULL item", i);
    /* release() recognises a slot by its pointer. */
    for (int j = 0; j < i; ++j) {
      if (l->items[j] == item)
        DDP_FAIL_GOTO(st, DDP_ERR_INVALID_ARG, destroy_loader,
                      "loader: slot_init gave slots %d and %d the same item", j, i);
    }
  }
  *out = l;
  return DDP_OK;

destroy_loader:
  ddp_loader_destroy(l);
  return st;
}

ddp_status_t ddp_loader_start(ddp_loader_t *l, int64_t first_seq, int64_t end_seq) {
  if (!l) DDP_FAIL(DDP_ERR_INVALID_ARG, "loader_start: NULL loader");
  if (first_seq < 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "loader_start: first seq %lld is negative", (long long)first_seq);
  if (end_seq >= 0 && end_seq < first_seq)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "loader_start: end seq %lld is before first seq %lld",
             (long long)end_seq, (long long)first_seq);

  /* No other thread exists while stopped, but the stats readers may. */
  pthread_mutex_lock(&l->mu);
  int running = l->running;
  if (!running) {
    l->running = 1;
    l->stop = 0;
    l->exited = 0;
    l->base = l->produced = l->acquired = l->released = first_seq;
    l->end = end_seq < 0 ? INT64_MAX : end_seq;
    l->fail_status = DDP_OK;
  }
  pthread_mutex_unlock(&l->mu);
  if (running) DDP_FAIL(DDP_ERR_INVALID_ARG, "loader_start: already running; stop() it first");
  if (l->cfg.synchronous) return DDP_OK;

  /* The producer blocks asynchronous signals so that handlers (SIGINT ->
   * checkpoint and exit) run on the step loop's thread, which owns the
   * decision. Faults stay unblocked: a blocked SIGSEGV kills the process
   * without the sanitizer's or debugger's report. */
  sigset_t async, old;
  sigfillset(&async);
  static const int k_faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
  for (size_t i = 0; i < sizeof k_faults / sizeof k_faults[0]; ++i) sigdelset(&async, k_faults[i]);
  pthread_sigmask(SIG_BLOCK, &async, &old);
  int rc = pthread_create(&l->thread, NULL, producer_main, l);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    pthread_mutex_lock(&l->mu);
    l->running = 0;
    pthread_mutex_unlock(&l->mu);
    DDP_FAIL(rc == EAGAIN ? DDP_ERR_OOM : DDP_ERR_INTERNAL, "loader: pthread_create failed: %s",
             strerror(rc));
  }
  l->has_thread = 1;
  return DDP_OK;
}

ddp_status_t ddp_loader_stop(ddp_loader_t *l) {
  if (!l) DDP_FAIL(DDP_ERR_INVALID_ARG, "loader_stop: NULL loader");
  if (l->has_thread) {
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_signal(&l->space);
    pthread_mutex_unlock(&l->mu);
    int rc = pthread_join(l->thread, NULL);
    l->has_thread = 0;
    if (rc != 0) DDP_FAIL(DDP_ERR_INTERNAL, "loader: pthread_join failed: %s", strerror(rc));
  }
  /* Filled and held items are dropped by forgetting them: acquire/release
   * refuse a loader that is not running, and start() resets the counters. */
  pthread_mutex_lock(&l->mu);
  l->running = 0;
  pthread_mutex_unlock(&l->mu);
  return DDP_OK;
}

/* The synchronous mode's acquire, entered and left with mu held: fill into
 * the slot inline. The slot is free because acquire() checked that fewer than
 * depth slots are held. */
static ddp_status_t fill_inline(ddp_loader_t *l, int64_t seq) {
  if (l->fail_status != DDP_OK) return l->fail_status;
  double ms;
  ddp_status_t st = fill_one(l, seq, &ms);
  /* The step loop waited for this fill exactly as it would for a slow
   * producer; counting it keeps the stats comparable between the modes. */
  l->stats.wait_ms += ms;
  l->stats.waits++;
  return st;
}

ddp_status_t ddp_loader_acquire(ddp_loader_t *l, int64_t seq, void **item) {
  if (!l || !item) DDP_FAIL(DDP_ERR_INVALID_ARG, "loader_acquire: NULL argument");
  *item = NULL;
  ddp_status_t st = DDP_OK;
  pthread_mutex_lock(&l->mu);
  if (!l->running) DDP_FAIL_GOTO(st, DDP_ERR_INVALID_ARG, unlock, "loader_acquire: not started");
  if (seq != l->acquired)
    DDP_FAIL_GOTO(st, DDP_ERR_INVALID_ARG, unlock,
                  "loader_acquire: seq %lld out of order; the next item is seq %lld",
                  (long long)seq, (long long)l->acquired);
  if (seq >= l->end)
    DDP_FAIL_GOTO(st, DDP_ERR_INVALID_ARG, unlock,
                  "loader_acquire: seq %lld is past the end of this run (items %lld .. %lld)",
                  (long long)seq, (long long)l->base, (long long)l->end - 1);
  if (seq - l->released >= l->cfg.depth)
    DDP_FAIL_GOTO(st, DDP_ERR_INVALID_ARG, unlock,
                  "loader_acquire: all %d slots are held (seqs %lld .. %lld); release one "
                  "before acquiring seq %lld",
                  l->cfg.depth, (long long)l->released, (long long)seq - 1, (long long)seq);

  if (l->cfg.synchronous) {
    st = fill_inline(l, seq);
  } else if (l->produced <= seq && l->fail_status == DDP_OK && !l->exited) {
    double t0 = (1e3 * ddp_clock_seconds());
    while (l->produced <= seq && l->fail_status == DDP_OK && !l->exited)
      pthread_cond_wait(&l->ready, &l->mu);
    l->stats.wait_ms += (1e3 * ddp_clock_seconds()) - t0;
    l->stats.waits++;
  }
  if (st == DDP_OK && l->produced <= seq) {
    /* acquired <= produced, so a producer that stopped short failed at
     * exactly this seq; its fill() logged why. */
    st = l->fail_status;
    if (st == DDP_OK)
      DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, unlock,
                    "loader: the producer left before seq %lld without an error", (long long)seq);
  }
  if (st != DDP_OK) goto unlock;
  *item = l->items[slot_of(l, seq)];
  l->acquired = seq + 1;
  l->stats.acquired++;

unlock:
  pthread_mutex_unlock(&l->mu);
  return st;
}

ddp_status_t ddp_loader_release(ddp_loader_t *l, void *item) {
  if (!l) DDP_FAIL(DDP_ERR_INVALID_ARG, "loader_release: NULL loader");
  ddp_status_t st = DDP_OK;
  pthread_mutex_lock(&l->mu);
  if (!l->running)
    DDP_FAIL_GOTO(st, DDP_ERR_INVALID_ARG, unlock,
                  "loader_release: not running (stop() took held items back)");
  if (l->acquired == l->released)
    DDP_FAIL_GOTO(st, DDP_ERR_INVALID_ARG, unlock, "loader_release: no item is held");
  if (item != l->items[slot_of(l, l->released)]) {
    for (int64_t s = l->released + 1; s < l->acquired; ++s) {
      if (item == l->items[slot_of(l, s)])
        DDP_FAIL_GOTO(st, DDP_ERR_INVALID_ARG, unlock,
                      "loader_release: seq %lld released before seq %lld; slots go back in "
                      "the order they were acquired",
                      (long long)s, (long long)l->released);
    }
    DDP_FAIL_GOTO(st, DDP_ERR_INVALID_ARG, unlock,
                  "loader_release: %p is not an item this loader has handed out", item);
  }
  l->released++;
  pthread_cond_signal(&l->space);

unlock:
  pthread_mutex_unlock(&l->mu);
  return st;
}

void ddp_loader_get_stats(const ddp_loader_t *l, ddp_loader_stats_t *s) {
  if (!s) return;
  memset(s, 0, sizeof *s);
  if (!l) return;
  /* The mutex is not part of the loader's observable state. */
  pthread_mutex_t *mu = (pthread_mutex_t *)&l->mu;
  pthread_mutex_lock(mu);
  *s = l->stats;
  pthread_mutex_unlock(mu);
}

void ddp_loader_reset_stats(ddp_loader_t *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  memset(&l->stats, 0, sizeof l->stats);
  pthread_mutex_unlock(&l->mu);
}
