/* `ddptrain --self-test`: exercises the runtime core on every rank and
 * checks that the ranks agree, without training (a quick node check). */
#ifndef DDPTRAIN_TOOLS_SMOKE_H
#define DDPTRAIN_TOOLS_SMOKE_H

#include "ddptrain/backend.h"
#include "ddptrain/options.h"
#include "runtime/dist.h"

ddp_status_t ddp_smoke_run(const ddp_options_t *opts, const ddp_dist_t *dist, ddp_backend_t *be);

#endif
