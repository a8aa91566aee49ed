/* The training loop: data, model, optimizer, schedule, logging, evaluation
 * and export, configured by the command-line options.
 *
 * One optimizer step takes `accum` micro-batches. The loss of a step is the
 * sum of token losses over its micro-batches divided by the step's number of
 * target tokens, which the plan knows before the step starts (docs/design.md §5.3, loss
 * normalisation); the first micro-step's backward overwrites the gradients,
 * later ones accumulate. The loss stays on the device and is read once per
 * --log-every steps. */
#ifndef DDPTRAIN_TRAINER_H
#define DDPTRAIN_TRAINER_H

#include <stdio.h>

#include "ddptrain/backend.h"
#include "ddptrain/options.h"
#include "runtime/dist.h"

#ifdef __cplusplus
extern "C" {
#endif

ddp_status_t ddp_train(const ddp_options_t *opts, const ddp_dist_t *dist, ddp_backend_t *be);

/* --plan-only: builds epoch 0's plan for --world-size ranks (0: this job's)
 * and prints its figures to `out` on rank 0, as text or (--json) as one JSON
 * object with docs, micro_batches, steps, pad_frac, imbalance_mean,
 * imbalance_max and plan_seconds among others. */
ddp_status_t ddp_plan_report(const ddp_options_t *opts, const ddp_dist_t *dist, FILE *out);

#ifdef __cplusplus
}
#endif
#endif
