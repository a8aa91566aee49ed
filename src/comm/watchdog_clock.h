/* The clock rule every watchdog of the runtime shares: the heartbeat, the
 * start-up watchdog and the collective watchdog of a communicator.
 *
 * A watcher looks a few times a second and measures how long something has
 * been silent (a neighbour's beats, a start-up phase, a collective). When the
 * watcher itself was not running (the whole process was stopped with
 * SIGSTOP, suspended by the scheduler, or starved of CPU), the silence it
 * would measure is its own: every watched thing must be given a fresh start
 * from the moment the watcher runs again, or resuming a suspended job would
 * end it. A gap between two looks of more than two polls and a second is
 * such a stall. */
#ifndef DDPTRAIN_COMM_WATCHDOG_CLOCK_H
#define DDPTRAIN_COMM_WATCHDOG_CLOCK_H

/* Seconds between looks for a timeout: forty looks per timeout, so a
 * timeout is noticed within 2.5% of it, and at most four a second, so a
 * long timeout costs nothing. */
static inline double ddp_watch_poll_s(double timeout_s) {
  return timeout_s / 40 < 0.25 ? timeout_s / 40 : 0.25;
}

typedef struct ddp_watch_clock {
  double poll_s; /* the interval the watcher means to look at */
  double last;   /* the previous look */
  double fresh;  /* no silence counts from before this: the watch's start or its last stall */
} ddp_watch_clock_t;

/* Seconds on ddp_clock_seconds()'s clock. */
static inline void ddp_watch_clock_init(ddp_watch_clock_t *w, double poll_s, double now) {
  w->poll_s = poll_s;
  w->last = now;
  w->fresh = now;
}

/* One look at `now`: notes a stall of the watcher since the previous look. */
static inline void ddp_watch_clock_look(ddp_watch_clock_t *w, double now) {
  if (now - w->last > 2 * w->poll_s + 1.0) w->fresh = now;
  w->last = now;
}

/* How long something silent since `since` has been silent at `now`, leaving
 * out the time before the watcher's last stall. */
static inline double ddp_watch_clock_age(const ddp_watch_clock_t *w, double since, double now) {
  return now - (since > w->fresh ? since : w->fresh);
}

#endif
