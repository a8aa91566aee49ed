/* The start-up watchdog: every start-up phase of a job is bounded, from
 * before MPI_Init until the heartbeat takes over.
 *
 * Start-up is a chain of collectives (MPI_Init's own exchange, the flag
 * agreement, the device decision's allgather, the binding map, the
 * heartbeat's set-up). A rank that
 * stops during it (SIGSTOP, a hung node, a driver call that never returns)
 * leaves every other rank blocked in the next one, before the heartbeat
 * exists to notice. The watchdog is a thread started before MPI_Init; the
 * program tells it each phase as it begins, and a phase ends where the next
 * begins. When one phase has run for longer than --startup-timeout, the
 * thread prints one line, e.g.
 *
 *   rank 0 on HOST: start-up phase 'binding' has not ended after 30.0 s
 *   (--startup-timeout 30); ranks not heard from: 2; ending the job
 *
 * and ends the job: MPI_Abort once MPI is up, otherwise exit status 1 (the
 * launcher then ends the other ranks, stopped ones included).
 *
 * Naming the missing ranks. Once MPI is up, with MPI_THREAD_MULTIPLE, every
 * rank's watchdog thread answers one question sent point-to-point on
 * MPI_COMM_WORLD under tags of its own (a point-to-point message never
 * matches a collective): "which phase are you in?". The rank that times out
 * asks every other rank and waits up to two seconds. A rank that does not
 * answer is "not heard from" (stopped, or gone); a rank that answers from
 * another phase is named with it, since it is the one the others wait for.
 * While start-up goes well nothing is sent: each thread only keeps one
 * receive posted. Rank 0 times out first; the other ranks wait three seconds
 * longer, so one line normally speaks for the job, and when rank 0 is the
 * one missing they name it. Before MPI is up nothing can be asked, and the
 * line says so.
 *
 * The watchdog stops once the heartbeat has started: from then on a stopped
 * rank is the heartbeat's to find (within --heartbeat-timeout), and set-up
 * that is merely long (reading and checking a large data set) is not bounded
 * by the start-up timeout.
 *
 * One watchdog per process: the functions act on it and are no-ops when it
 * is not running (a library caller or a test that never started one). */
#ifndef DDPTRAIN_RUNTIME_STARTUP_WATCHDOG_H
#define DDPTRAIN_RUNTIME_STARTUP_WATCHDOG_H

#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(ID, "key", "label"): the phases in order. The key names the phase in
 * DDPTRAIN_FAULT_STARTUP_PHASE, the label in the line. */
#define DDP_STARTUP_PHASES(X)                              \
  X(MPI_INIT, "mpi-init", "MPI init")                      \
  X(FLAGS, "flags", "flag agreement")                      \
  X(DEVICE_PROBE, "device-probe", "device probe")          \
  X(DEVICE_DECISION, "device-decision", "device decision") \
  X(BACKEND, "backend", "backend creation")                \
  X(BINDING, "binding", "binding")                         \
  X(HEARTBEAT, "heartbeat", "heartbeat start")

typedef enum ddp_startup_phase {
#define DDP_STARTUP_ENUM_(id, key, label) DDP_STARTUP_##id,
  DDP_STARTUP_PHASES(DDP_STARTUP_ENUM_)
#undef DDP_STARTUP_ENUM_
      DDP_STARTUP_PHASE_COUNT_
} ddp_startup_phase_t;

/* "device-decision"; "device decision". NULL outside the enum. */
const char *ddp_startup_phase_key(ddp_startup_phase_t phase);
const char *ddp_startup_phase_label(ddp_startup_phase_t phase);

/* Starts the watchdog before MPI_Init, in phase MPI_INIT. timeout_s <= 0
 * starts nothing. DDP_ERR_INTERNAL when the thread cannot start; a second
 * start while one runs is DDP_ERR_INVALID_ARG. */
ddp_status_t ddp_startup_watchdog_start(double timeout_s);

/* Phase `phase` begins now (and the one before has ended). */
void ddp_startup_watchdog_phase(ddp_startup_phase_t phase);

/* MPI is up (called by ddp_dist_init right after MPI_Init; at once in a
 * build without MPI, a world of one): the watchdog may now answer and ask
 * the other ranks, and ends the job with MPI_Abort. thread_level is MPI's;
 * below MPI_THREAD_MULTIPLE the thread makes no MPI call except the final
 * MPI_Abort, and the line says the ranks could not be asked. */
void ddp_startup_watchdog_mpi_up(int rank, int world, int thread_level, const char *host);

/* Start-up is over (the heartbeat has taken over, or the run needs no more
 * collectives): stops the thread. Must come before MPI_Finalize. */
void ddp_startup_watchdog_stop(void);

#ifdef __cplusplus
}
#endif
#endif
