/* The training loop: data, model, optimizer, schedule, logging, evaluation
 * and export, configured by the command-line options.
 *
 * One optimizer step takes `accum` micro-batches. The loss of a step is the
 * sum of token losses over its micro-batches divided by the step's number of
 * target tokens, which the plan knows before the step starts (DESIGN.md, loss
 * normalisation); the first micro-step's backward overwrites the gradients,
 * later ones accumulate. The loss stays on the device and is read once per
 * --log-every steps. */
#ifndef DDPTRAIN_TRAINER_H
#define DDPTRAIN_TRAINER_H

#include "ddptrain/backend.h"
#include "ddptrain/dist.h"
#include "ddptrain/options.h"

#ifdef __cplusplus
extern "C" {
#endif

ddp_status_t ddp_train(const ddp_options_t *opts, const ddp_dist_t *dist, ddp_backend_t *be);

#ifdef __cplusplus
}
#endif
#endif
