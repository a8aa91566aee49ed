/* Non-finite values in fp32 training (src/train/anomaly.c).
 *
 * Every step, after the gradients are reduced and before the optimizer
 * touches the weights, the global gradient norm (already computed for
 * clipping; one float read back) must be finite. If it is not, the run stops
 * naming the step and the first parameter, in backward order, whose gradient
 * is non-finite; the weights of that step are never updated or saved.
 * --detect-anomaly also checks every activation in forward and every
 * gradient in backward as it is produced (a host copy of each: slow), so
 * the message names the layer where the values first went bad.
 * DDPTRAIN_FAULT_NAN_STEP / _TENSOR inject a NaN for the tests. */
#ifndef DDPTRAIN_TRAIN_ANOMALY_H
#define DDPTRAIN_TRAIN_ANOMALY_H

#include "ddptrain/model.h"
#include "ddptrain/options.h"

typedef struct ddp_anomaly {
  ddp_backend_t *be;
  ddp_model_t *model;
  int detect;
  int64_t step;       /* the step running now (0-based) */
  int64_t fault_step; /* 0-based; -1: no fault */
  int fault_grad;     /* 1: the gradient, 0: the weight */
  char fault_name[64];
  const ddp_param_t *fault_tensor;
  float *host; /* scratch for checks */
  size_t host_n;
} ddp_anomaly_t;

/* Reads --detect-anomaly and the fault variables (an unknown tensor name
 * is an error) and installs the model's watcher when either is on. */
ddp_status_t ddp_anomaly_init(ddp_anomaly_t *a, const ddp_options_t *o, ddp_backend_t *be,
                              ddp_model_t *model);
void ddp_anomaly_destroy(ddp_anomaly_t *a);

/* Before step `step`'s forward (weight fault injection). */
ddp_status_t ddp_anomaly_begin_step(ddp_anomaly_t *a, int64_t step);

/* After the reduction: DDP_ERR_NUMERIC, with the message above, when the
 * squared gradient norm at grad_sumsq (backend memory) is not finite. */
ddp_status_t ddp_anomaly_check_grads(ddp_anomaly_t *a, const float *grad_sumsq);

#endif
