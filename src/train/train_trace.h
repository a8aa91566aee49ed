/* The trainer's --trace (src/train/train_trace.c): the timeline's window and
 * buffer before the step loop, and after it the ranks' spans gathered to
 * rank 0, which writes the file (trace/timeline.h). */
#ifndef DDPTRAIN_TRAIN_TRAIN_TRACE_H
#define DDPTRAIN_TRAIN_TRAIN_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"
#include "ddptrain/options.h"
#include "comm/comm.h"
#include "runtime/dist.h"

/* Collective (a barrier that sets the common origin) when --trace is given;
 * nothing otherwise. On a GPU backend the compute spans are timed by device
 * events (trace/timeline.h). The window is --trace-steps steps from the second step
 * of [start_step, end) (the first when the run has one step); the buffer
 * holds spans_per_step spans per traced step. */
ddp_status_t ddp_train_trace_start(const ddp_options_t *o, ddp_comm_t *comm, ddp_backend_t *be,
                                   int64_t start_step, int64_t end, size_t spans_per_step);

/* Collective when --trace is given: stops recording, gathers every rank's
 * spans on the host communicator and rank 0 writes the file. An error names
 * the file; the file is then not written at all. */
ddp_status_t ddp_train_trace_finish(const ddp_options_t *o, const ddp_dist_t *dist,
                                    ddp_comm_t *comm);

#endif
