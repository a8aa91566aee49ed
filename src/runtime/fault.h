/* Fault injection for the failure tests: a rank that dies, freezes, or
 * freezes for a while and resumes, at a chosen step. Driven by the
 * environment (DDPTRAIN_FAULT_RANK, _KIND, _STEP, _PAUSE_S; see --help), so
 * the same binary that trains normally can be made to fail on purpose. */
#ifndef DDPTRAIN_FAULT_H
#define DDPTRAIN_FAULT_H

#include <stdint.h>

#include "ddptrain/status.h"

/* Called at the start of every step (0-based `step`). On the rank and step
 * the environment names it kills or stops this process (KILL and STOP do not
 * return) or stops it for DDPTRAIN_FAULT_PAUSE_S seconds. DDP_ERR_INVALID_ARG
 * for a malformed setting. */
ddp_status_t ddp_fault_maybe_inject(int rank, int64_t step);

#endif
