/* The CUDA side of the optimizer (internal; called by the backend-neutral
 * entry points in src/optim.c, which validate arguments first). */
#ifndef DDPTRAIN_CUDA_OPTIM_H
#define DDPTRAIN_CUDA_OPTIM_H

#include <stddef.h>

#include "ddptrain/backend.h"
#include "ddptrain/optim.h"

typedef struct ddp_cuda_optim_plan ddp_cuda_optim_plan_t;

/* Uploads the chunk and segment tables and allocates LAMB's scratch (once,
 * before the step loop). */
ddp_status_t ddp_cuda_optim_plan_create(ddp_backend_t *be, const ddp_param_t *tensors,
                                        int n_tensors, size_t n, ddp_cuda_optim_plan_t **out);
void ddp_cuda_optim_plan_destroy(ddp_backend_t *be, ddp_cuda_optim_plan_t *plan);

ddp_status_t ddp_cuda_optim_grad_sumsq(ddp_backend_t *be, float *sumsq, const float *grads,
                                       size_t n, float scale, ddp_stream_t s);
ddp_status_t ddp_cuda_optim_step(ddp_backend_t *be, ddp_cuda_optim_plan_t *plan,
                                 const ddp_optim_step_args_t *args, ddp_stream_t s);

/* Steps the kernels skipped (non-finite norm with skip_nonfinite) since
 * the plan was made; one host sync. */
ddp_status_t ddp_cuda_optim_skipped_steps(ddp_backend_t *be, ddp_cuda_optim_plan_t *plan,
                                          int64_t *count);

#endif
