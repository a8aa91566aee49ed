/* The collective watchdog: a bound on every collective of a communicator,
 * including those no host thread ever waits for.
 *
 * A device communicator (NCCL) hands a collective to a stream and returns.
 * The host usually never waits for it: a stream does (stream_wait), and the
 * host only blocks at the next log-interval sync. A collective that never
 * completes (a peer that is alive but never joins, a broken link, a hung
 * kernel) would stall the device silently and the host forever. The
 * watchdog is a thread per communicator that looks at the collectives in
 * flight a few times a second and gives its verdict when the oldest has not
 * completed within the communicator's timeout, or when the communicator
 * reports an error: one line naming the rank, the collective and how long it
 * waited, then the communicator's fail hook (abort the communicator and the
 * job).
 *
 * The decision is plain C, without CUDA, so the CPU suites test it: the
 * communicator answers through a probe (is the collective issued last on
 * slot i complete? is the communicator healthy?) and carries out the
 * verdict. The judgement of one look (ddp_comm_watch_judge) and the line
 * (ddp_comm_watch_format) also serve the communicator's own host waits, so a
 * collective times out after the same time and is named the same way
 * whether the host or the watchdog waited for it.
 *
 * Ordering: a communicator's collectives complete in the order they were
 * issued (one stream, or one MPI communicator). A slot's completion marker
 * (an event) is re-recorded when the slot is reused, so it only says whether
 * the slot's *latest* collective is done; by the ordering, that one done
 * means every collective issued before it is done too. The watchdog keeps
 * the sequence number of the latest collective on each slot and the issue
 * time of the recent ones, and times the oldest collective not known to be
 * complete: in issue order, the one everything else waits behind. Its wait
 * counts from its issue, or from when the collective before it was seen
 * complete if that is later (a host that runs ahead of the device issues
 * collectives long before the stream reaches them), and leaves out stalls
 * of the watchdog itself (comm/watchdog_clock.h). */
#ifndef DDPTRAIN_COMM_COMM_WATCHDOG_H
#define DDPTRAIN_COMM_COMM_WATCHDOG_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- one look at one collective (the host waits use this too) ------------ */

typedef enum ddp_comm_watch_state {
  DDP_COMM_WATCH_PENDING = 0, /* not complete yet */
  DDP_COMM_WATCH_DONE = 1,    /* complete */
  DDP_COMM_WATCH_FAILED = 2   /* its completion cannot be known: a device error */
} ddp_comm_watch_state_t;

typedef struct ddp_comm_watch_look {
  ddp_comm_watch_state_t state;
  ddp_status_t failure;      /* FAILED: the status (DDP_ERR_CUDA) */
  const char *failure_cause; /* FAILED: what failed */
  ddp_status_t health;       /* the communicator's asynchronous error; DDP_OK when none */
  const char *health_cause;  /* when health is an error */
  double age_s;              /* how long the collective has waited */
  double timeout_s;          /* how long it may wait */
} ddp_comm_watch_look_t;

/* The verdict on one look: a failure first, then the communicator's error,
 * then completion (*done = 1, DDP_OK), then the age: DDP_ERR_TIMEOUT once
 * age_s exceeds timeout_s, with the cause "no completion after A s (timeout
 * T s)". DDP_OK with *done = 0 while it may still complete. On an error the
 * cause (never empty) is written to cause[len]. */
ddp_status_t ddp_comm_watch_judge(const ddp_comm_watch_look_t *look, int *done, char *cause,
                                  size_t len);

/* The line that names a failed collective, the same for host waits and the
 * watchdog: "LABEL: WHO: WHAT of N bytes failed: CAUSE; THEN", or without a
 * collective (what NULL): "LABEL: WHO: CAUSE; THEN". */
void ddp_comm_watch_format(char *line, size_t len, const char *label, const char *who,
                           const char *what, size_t bytes, const char *cause, const char *then);

/* ---- the watchdog -------------------------------------------------------- */

/* What the watchdog asks the communicator, on the watchdog's thread while
 * the communicator's own thread goes on issuing: both answers must be safe
 * to give from another thread. */
typedef struct ddp_comm_watch_probe {
  void *ctx;
  /* Optional: called once on the watchdog's thread before the first look
   * (the NCCL communicator makes its GPU current there). */
  void (*thread_start)(void *ctx);
  /* The state of the collective issued last on `slot`; FAILED sets *failure
   * and writes the cause. */
  ddp_comm_watch_state_t (*slot_state)(void *ctx, int slot, ddp_status_t *failure, char *cause,
                                       size_t len);
  /* Optional: the communicator's asynchronous error (DDP_OK, or a status and
   * its cause). */
  ddp_status_t (*health)(void *ctx, char *cause, size_t len);
  /* The verdict, with its status and line (not yet logged). In a program it
   * logs the line, aborts the communicator and ends the job, and does not
   * return. If it returns (a test), the watchdog judges no more. */
  void (*fail)(void *ctx, ddp_status_t st, const char *line);
} ddp_comm_watch_probe_t;

typedef struct ddp_comm_watchdog_config {
  const char *label; /* how the line names the communicator: "comm nccl" */
  const char *who;   /* how it names this rank: "rank 1 on HOST" */
  const char *then;  /* what the fail hook does, for the line: "aborting ... and the job" */
  int n_slots;       /* slots of the communicator (>= 1) */
  double timeout_s;  /* > 0: the communicator's host-wait timeout */
  /* 0: a thread looks every ddp_watch_poll_s(timeout_s). 1: no thread; the
   * caller looks (ddp_comm_watchdog_look), as the unit tests do with
   * made-up times. */
  int manual;
  ddp_comm_watch_probe_t probe;
} ddp_comm_watchdog_config_t;

typedef struct ddp_comm_watchdog ddp_comm_watchdog_t;

/* Starts watching (the strings are copied). NULL arguments, n_slots < 1, a
 * timeout that is not a positive finite number, or a probe without
 * slot_state or fail are DDP_ERR_INVALID_ARG. */
ddp_status_t ddp_comm_watchdog_start(const ddp_comm_watchdog_config_t *cfg,
                                     ddp_comm_watchdog_t **out);

/* On the communicator's thread, once the collective `what` of `bytes`
 * ("allreduce_sum") has been issued on `slot` and its completion marker
 * recorded. Returns its sequence number (1, 2, ...), which the line gives as
 * "WHAT #N"; 0 for a NULL watchdog or a slot out of range. `what` must be a
 * string that lives as long as the watchdog (a literal). */
uint64_t ddp_comm_watchdog_issued(ddp_comm_watchdog_t *wd, int slot, const char *what,
                                  size_t bytes);

/* One look at time `now` (seconds on ddp_clock_seconds()'s clock): updates
 * what is complete, judges the oldest collective in flight and, on a
 * failure, calls the fail hook once. Returns the verdict: DDP_OK while
 * everything may still complete, else the status given to fail (again on
 * every later look). The thread calls this; so do the tests of a manual
 * watchdog. */
ddp_status_t ddp_comm_watchdog_look(ddp_comm_watchdog_t *wd, double now);

/* Stops the thread and frees everything. NULL is a no-op. */
void ddp_comm_watchdog_stop(ddp_comm_watchdog_t *wd);

#ifdef __cplusplus
}
#endif
#endif
