/* The start-up self-test job that `ddptrain` runs until the trainer lands:
 * it exercises every part of the runtime core on every rank and checks that
 * the ranks agree. */
#ifndef DDPTRAIN_TOOLS_SMOKE_H
#define DDPTRAIN_TOOLS_SMOKE_H

#include "ddptrain/backend.h"
#include "ddptrain/dist.h"
#include "ddptrain/options.h"

ddp_status_t ddp_smoke_run(const ddp_options_t *opts, const ddp_dist_t *dist, ddp_backend_t *be);

#endif
