/* The collective watchdog (see comm/comm_watchdog.h). Plain C and pthreads:
 * everything device-specific is behind the probe, so the CPU suites test
 * every decision with a made-up communicator and made-up times. */
#define _GNU_SOURCE /* pthread_setname_np */
#include <config.h>

#include "comm/comm_watchdog.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddptrain/check.h"
#include "comm/watchdog_clock.h"
#include "core/clock.h"

/* Issue times and names of the latest RING collectives. More in flight than
 * that (a host far ahead of a stuck device) only makes the oldest one known
 * stand in for older ones, which are then timed a little short. */
enum { RING = 1024 };

typedef struct issued_rec {
  uint64_t seq;
  double since; /* issue time, ddp_clock_seconds() */
  const char *what;
  size_t bytes;
} issued_rec_t;

struct ddp_comm_watchdog {
  char label[32], who[96], then[96];
  int n_slots, manual;
  double timeout_s;
  ddp_comm_watch_probe_t probe;
  pthread_mutex_t lock; /* guards everything below */
  pthread_cond_t wake;  /* stop */
  uint64_t *latest;     /* per slot: the sequence number of its latest collective; 0 = none */
  uint64_t issued;      /* the latest sequence number handed out */
  uint64_t completed;   /* every collective up to this one is known to be complete */
  double progressed;    /* the look that last moved `completed` */
  issued_rec_t ring[RING];
  ddp_watch_clock_t clock;
  ddp_status_t verdict; /* DDP_OK until the one verdict */
  int stop, has_thread;
  pthread_t thread;
};

ddp_status_t ddp_comm_watch_judge(const ddp_comm_watch_look_t *look, int *done, char *cause,
                                  size_t len) {
  *done = 0;
  if (look->state == DDP_COMM_WATCH_FAILED) {
    snprintf(cause, len, "%s",
             look->failure_cause && *look->failure_cause ? look->failure_cause
                                                         : "its completion could not be read");
    return look->failure != DDP_OK ? look->failure : DDP_ERR_INTERNAL;
  }
  /* An error of the communicator fails every collective in flight, even one
   * whose marker fired: its result may be garbage. */
  if (look->health != DDP_OK) {
    snprintf(cause, len, "%s",
             look->health_cause && *look->health_cause ? look->health_cause
                                                       : ddp_status_string(look->health));
    return look->health;
  }
  if (look->state == DDP_COMM_WATCH_DONE) {
    *done = 1;
    return DDP_OK;
  }
  if (look->age_s > look->timeout_s) {
    snprintf(cause, len, "no completion after %.1f s (timeout %g s)", look->age_s, look->timeout_s);
    return DDP_ERR_TIMEOUT;
  }
  return DDP_OK;
}

void ddp_comm_watch_format(char *line, size_t len, const char *label, const char *who,
                           const char *what, size_t bytes, const char *cause, const char *then) {
  const int has_then = then && *then;
  if (what)
    snprintf(line, len, "%s: %s: %s of %zu bytes failed: %s%s%s", label, who, what, bytes, cause,
             has_then ? "; " : "", has_then ? then : "");
  else
    snprintf(line, len, "%s: %s: %s%s%s", label, who, cause, has_then ? "; " : "",
             has_then ? then : "");
}

ddp_status_t ddp_comm_watchdog_look(ddp_comm_watchdog_t *wd, double now) {
  pthread_mutex_lock(&wd->lock);
  if (wd->verdict != DDP_OK) {
    const ddp_status_t given = wd->verdict;
    pthread_mutex_unlock(&wd->lock);
    return given;
  }
  ddp_watch_clock_look(&wd->clock, now);
  /* What is complete: a slot's latest collective done means every earlier
   * one is done (the header's ordering). Only slots that may move the mark
   * are asked. */
  char failure_cause[256] = "", health_cause[256] = "";
  ddp_status_t failure = DDP_OK;
  for (int i = 0; i < wd->n_slots && failure == DDP_OK; ++i) {
    const uint64_t seq = wd->latest[i];
    if (seq <= wd->completed) continue;
    ddp_status_t f = DDP_OK;
    const ddp_comm_watch_state_t s =
        wd->probe.slot_state(wd->probe.ctx, i, &f, failure_cause, sizeof failure_cause);
    if (s == DDP_COMM_WATCH_DONE) {
      wd->completed = seq;
      wd->progressed = now;
    } else if (s == DDP_COMM_WATCH_FAILED)
      failure = f != DDP_OK ? f : DDP_ERR_INTERNAL;
  }
  ddp_status_t health = DDP_OK;
  if (failure == DDP_OK && wd->probe.health)
    health = wd->probe.health(wd->probe.ctx, health_cause, sizeof health_cause);
  const int in_flight = wd->issued > wd->completed;
  ddp_comm_watch_look_t look = {
      .state = failure != DDP_OK ? DDP_COMM_WATCH_FAILED : DDP_COMM_WATCH_PENDING,
      .failure = failure,
      .failure_cause = failure_cause,
      .health = health,
      .health_cause = health_cause,
      .age_s = 0,
      .timeout_s = wd->timeout_s};
  issued_rec_t oldest = {0};
  if (in_flight) {
    /* The oldest collective not known to be complete; if the ring has moved
     * past it, the oldest one the ring still holds. */
    uint64_t seq = wd->completed + 1;
    if (wd->issued - seq >= RING) seq = wd->issued - RING + 1;
    oldest = wd->ring[seq % RING];
    /* Timed from its issue, or from when the collective before it was seen
     * complete if that is later: a host that runs ahead of the device
     * issues collectives long before the stream reaches them, and that
     * queueing is not this collective's wait. */
    const double since = oldest.since > wd->progressed ? oldest.since : wd->progressed;
    look.age_s = ddp_watch_clock_age(&wd->clock, since, now);
  }
  char cause[320];
  int done = 0;
  const ddp_status_t st = ddp_comm_watch_judge(&look, &done, cause, sizeof cause);
  if (st != DDP_OK) wd->verdict = st;
  pthread_mutex_unlock(&wd->lock);
  if (st == DDP_OK) return DDP_OK;
  char what[96], line[768];
  if (in_flight)
    snprintf(what, sizeof what, "%s #%llu", oldest.what, (unsigned long long)oldest.seq);
  ddp_comm_watch_format(line, sizeof line, wd->label, wd->who, in_flight ? what : NULL,
                        oldest.bytes, cause, wd->then);
  wd->probe.fail(wd->probe.ctx, st, line);
  return st;
}

uint64_t ddp_comm_watchdog_issued(ddp_comm_watchdog_t *wd, int slot, const char *what,
                                  size_t bytes) {
  if (!wd || slot < 0 || slot >= wd->n_slots) return 0;
  const double now = ddp_clock_seconds();
  pthread_mutex_lock(&wd->lock);
  const uint64_t seq = ++wd->issued;
  wd->ring[seq % RING] = (issued_rec_t){.seq = seq, .since = now, .what = what, .bytes = bytes};
  wd->latest[slot] = seq;
  pthread_mutex_unlock(&wd->lock);
  return seq;
}

static void *watch_main(void *arg) {
  ddp_comm_watchdog_t *wd = arg;
  /* Named so `top -H` finds it (15 characters at most). */
  pthread_setname_np(pthread_self(), "ddp-commwatch");
  if (wd->probe.thread_start) wd->probe.thread_start(wd->probe.ctx);
  const double poll = ddp_watch_poll_s(wd->timeout_s);
  pthread_mutex_lock(&wd->lock);
  while (!wd->stop) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    const double t = (double)until.tv_nsec * 1e-9 + poll;
    until.tv_sec += (time_t)t;
    until.tv_nsec = (long)((t - (double)(time_t)t) * 1e9);
    pthread_cond_timedwait(&wd->wake, &wd->lock, &until);
    if (wd->stop) break;
    pthread_mutex_unlock(&wd->lock);
    const ddp_status_t st = ddp_comm_watchdog_look(wd, ddp_clock_seconds());
    pthread_mutex_lock(&wd->lock);
    if (st != DDP_OK) break; /* one verdict; a fail hook that returned (a test) ends the watch */
  }
  pthread_mutex_unlock(&wd->lock);
  return NULL;
}

ddp_status_t ddp_comm_watchdog_start(const ddp_comm_watchdog_config_t *cfg,
                                     ddp_comm_watchdog_t **out) {
  if (!out) DDP_FAIL(DDP_ERR_INVALID_ARG, "comm watchdog: NULL output");
  *out = NULL;
  if (!cfg || !cfg->label || !cfg->who || !cfg->probe.slot_state || !cfg->probe.fail)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "comm watchdog: a label, who, slot_state and fail are needed");
  if (cfg->n_slots < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "comm watchdog: %d slots (at least 1)", cfg->n_slots);
  if (!(cfg->timeout_s > 0) || !isfinite(cfg->timeout_s))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "comm watchdog: timeout %g s is not a positive number",
             cfg->timeout_s);
  ddp_comm_watchdog_t *wd = calloc(1, sizeof *wd);
  if (!wd) DDP_FAIL(DDP_ERR_OOM, "comm watchdog: out of host memory");
  ddp_status_t st = DDP_OK;
  wd->latest = calloc((size_t)cfg->n_slots, sizeof *wd->latest);
  if (!wd->latest) DDP_FAIL_GOTO(st, DDP_ERR_OOM, free_wd, "comm watchdog: out of host memory");
  snprintf(wd->label, sizeof wd->label, "%s", cfg->label);
  snprintf(wd->who, sizeof wd->who, "%s", cfg->who);
  snprintf(wd->then, sizeof wd->then, "%s", cfg->then ? cfg->then : "");
  wd->n_slots = cfg->n_slots;
  wd->manual = cfg->manual;
  wd->timeout_s = cfg->timeout_s;
  wd->probe = cfg->probe;
  wd->verdict = DDP_OK;
  ddp_watch_clock_init(&wd->clock, ddp_watch_poll_s(cfg->timeout_s), ddp_clock_seconds());
  pthread_condattr_t ca;
  if (pthread_mutex_init(&wd->lock, NULL) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, free_wd, "comm watchdog: pthread_mutex_init failed");
  if (pthread_condattr_init(&ca) != 0 || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
      pthread_cond_init(&wd->wake, &ca) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, free_lock, "comm watchdog: pthread_cond_init failed");
  pthread_condattr_destroy(&ca);
  if (!wd->manual) {
    /* Signals stay with the main thread (preemption handlers, Ctrl-C). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    const int rc = pthread_create(&wd->thread, NULL, watch_main, wd);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
      DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, free_cond, "comm watchdog: cannot start its thread");
    wd->has_thread = 1;
  }
  *out = wd;
  return DDP_OK;
free_cond:
  pthread_cond_destroy(&wd->wake);
free_lock:
  pthread_mutex_destroy(&wd->lock);
free_wd:
  free(wd->latest);
  free(wd);
  return st;
}

void ddp_comm_watchdog_stop(ddp_comm_watchdog_t *wd) {
  if (!wd) return;
  if (wd->has_thread) {
    pthread_mutex_lock(&wd->lock);
    wd->stop = 1;
    pthread_cond_signal(&wd->wake);
    pthread_mutex_unlock(&wd->lock);
    pthread_join(wd->thread, NULL);
  }
  pthread_cond_destroy(&wd->wake);
  pthread_mutex_destroy(&wd->lock);
  free(wd->latest);
  free(wd);
}
