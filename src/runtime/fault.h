/* Fault injection for the failure tests: a rank that dies, freezes, or
 * freezes for a while and resumes, at a chosen step; or a rank that freezes
 * during start-up, at a chosen point. Driven by the environment
 * (DDPTRAIN_FAULT_RANK, _KIND, _STEP, _PAUSE_S; DDPTRAIN_FAULT_STARTUP_RANK,
 * _PHASE, _KIND; see --help), so the same binary that trains normally can be
 * made to fail on purpose. */
#ifndef DDPTRAIN_FAULT_H
#define DDPTRAIN_FAULT_H

#include <stdint.h>

#include "ddptrain/status.h"

/* Called at the start of every step (0-based `step`). On the rank and step
 * the environment names it kills or stops this process (KILL and STOP do not
 * return) or stops it for DDPTRAIN_FAULT_PAUSE_S seconds. DDP_ERR_INVALID_ARG
 * for a malformed setting. */
ddp_status_t ddp_fault_maybe_inject(int rank, int64_t step);

/* The start-up points a freeze can be put at: the start-up phases by key
 * (runtime/startup_watchdog.h), and "train", the moment the start-up
 * watchdog has handed over to the heartbeat. */
#define DDP_FAULT_STARTUP_TRAIN "train"

/* Checks DDPTRAIN_FAULT_STARTUP_RANK, _PHASE and _KIND before MPI starts, so a
 * malformed setting stops every rank alike before any of them waits for
 * another: DDP_ERR_INVALID_ARG with a line naming the variable and the
 * points it accepts. */
ddp_status_t ddp_fault_startup_check(void);

/* Called as start-up point `point` begins; rank is this process's MPI rank,
 * or -1 before MPI (the launcher's number is used). On the rank and point
 * the environment names, the process stops itself for good (STOP: SIGSTOP,
 * so its threads, the watchdogs' included, freeze too), or its main thread
 * blocks for good while the other threads run on (HANG). Run
 * ddp_fault_startup_check() first: a setting it rejects does nothing here. */
void ddp_fault_at_startup(const char *point, int rank);

#endif
