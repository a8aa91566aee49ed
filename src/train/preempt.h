/* Preemption (src/train/preempt.c): SIGTERM, SIGUSR1 (what SLURM sends
 * with --signal) and SIGINT ask the run to stop after the current step with
 * a checkpoint; a second SIGINT ends the process at once with status 130.
 * The handlers only record the signal (async-signal-safe); the step loop
 * polls, and the ranks vote so that all stop after the same step. */
#ifndef DDPTRAIN_TRAIN_PREEMPT_H
#define DDPTRAIN_TRAIN_PREEMPT_H

#include "comm/comm.h"

/* Exit status of a second SIGINT (128 + SIGINT, as shells report it). */
#define DDP_PREEMPT_EXIT_SECOND_SIGINT 130

/* Installs the handlers (saving the previous ones) and clears the flag. */
ddp_status_t ddp_preempt_install(void);
/* Puts the previous handlers back. */
void ddp_preempt_restore(void);

/* Collective when world > 1 (one int all-reduce): *stop = nonzero on every
 * rank when any rank has received a stop signal; *signo = this rank's own
 * signal, or 0. */
ddp_status_t ddp_preempt_vote(ddp_comm_t *comm, int world, int *stop, int *signo);

/* DDPTRAIN_FAULT_STEP_SLEEP_MS: a pause after each step, so tests can land
 * a signal mid-run; a signal restarts the pause. */
ddp_status_t ddp_preempt_fault_sleep(void);

#endif
