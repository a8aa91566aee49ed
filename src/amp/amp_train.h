/* Mixed precision in the training loop (internal): the precision and
 * loss-scaling flags turned into a policy, the loss scaler driven once per
 * step, and the overflow fault injection the tests use.
 *
 * The trainer multiplies its loss gradient by ddp_amp_loss_scale(), has the
 * gradient-norm pass it runs every step unscale by ddp_amp_unscale() (the
 * norm, and so clipping, sees the true gradients; with a half reduce dtype
 * the reducer's widening epilogue unscales and takes the norm instead, see
 * train/reducer.h), and passes the step's
 * flags to the optimizer, which applies the unscale and skips an overflowed
 * step by itself. ddp_amp_after_norm then moves the scaler: the flag comes
 * from the norm of the *reduced* gradients, identical on every rank, so all
 * ranks skip the same steps and keep the same scale. */
#ifndef DDPTRAIN_TRAIN_AMP_TRAIN_H
#define DDPTRAIN_TRAIN_AMP_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"
#include "ddptrain/options.h"
#include "amp/amp.h"

typedef struct ddp_amp_train {
  ddp_precision_t precision;
  ddp_dtype_t reduce_dtype; /* --grad-reduce-dtype */
  ddp_loss_scaler_t scaler;
  int64_t applied; /* optimizer steps applied (skipped ones excluded) */
  int fault_rank;  /* DDPTRAIN_FAULT_OVERFLOW_RANK, -1 = off */
  int64_t fault_step;
} ddp_amp_train_t;

/* Parses the flags and the fault variables; logs the policy on rank 0. */
ddp_status_t ddp_amp_setup(ddp_amp_train_t *a, const ddp_options_t *o, int rank);

/* The factor on the loss gradient, and its inverse (exact: a power of two
 * for power-of-two scales). */
float ddp_amp_loss_scale(const ddp_amp_train_t *a);
float ddp_amp_unscale(const ddp_amp_train_t *a);

/* The optimizer's step count t (1-based): skipped steps do not count, as in
 * PyTorch, so Adam's bias correction sees only applied updates. */
int64_t ddp_amp_optim_t(const ddp_amp_train_t *a);

/* After the optimizer pass of step `step` (0-based): reads the flag from the
 * gradient norm (4 bytes; host memory on the CPU backend) when a scaler
 * runs, updates the scaler and counts the step as applied or skipped. The
 * floor error (DDP_ERR_NUMERIC) stops training. */
ddp_status_t ddp_amp_after_step(ddp_amp_train_t *a, ddp_backend_t *be, const float *grad_sumsq,
                                int64_t step);

/* Called from the gradient hook before a tensor is handed to the reducer:
 * on the faulting rank and step, the first gradient element becomes +inf. */
ddp_status_t ddp_amp_fault_inject(const ddp_amp_train_t *a, ddp_backend_t *be, int rank,
                                  int64_t step, float *grad);

#endif
