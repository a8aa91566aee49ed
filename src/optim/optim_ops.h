/* The optimizer's backend interface (internal): the table a backend fills
 * so that the entry points of optim/optim.h run on it, and the argument
 * checks those entry points share with the backends' public CPU twins.
 *
 * src/optim/optim.c validates every call first, with the checks below, and only
 * then calls the backend's table, so every backend rejects the same input
 * with the same message and an implementation may take its arguments as
 * valid: pointers non-NULL, the tensor table sorted, disjoint and covering
 * [0, n), a step's layout equal to its plan's. A backend whose
 * ddp_backend_ops_t.optim is NULL has no optimizer; the entry points then
 * refuse it (DDP_ERR_UNSUPPORTED, naming the backend).
 *
 * Work is only enqueued on the stream (the CPU backend runs it at once),
 * and a step allocates nothing: whatever a backend needs per parameter
 * layout it makes in plan_create, once, before the step loop. */
#ifndef DDPTRAIN_BACKEND_OPTIM_OPS_H
#define DDPTRAIN_BACKEND_OPTIM_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"
#include "ddptrain/param.h"
#include "optim/optim.h"

typedef struct ddp_optim_ops {
  /* The backend's part of a plan for n parameters laid out as tensors
   * (on CUDA the chunk and tensor tables in device memory and LAMB's
   * scratch; on the CPU the skipped-step count), into *impl. */
  ddp_status_t (*plan_create)(ddp_backend_t *be, const ddp_param_t *tensors, int n_tensors,
                              size_t n, void **impl);
  void (*plan_destroy)(ddp_backend_t *be, void *impl);
  /* ddp_optim_step_cpu's contract; args describe impl's layout. */
  ddp_status_t (*step)(ddp_backend_t *be, void *impl, const ddp_optim_step_args_t *args,
                       ddp_stream_t s);
  /* Steps of this plan that skip_nonfinite skipped since it was made (may
   * wait for the device). */
  ddp_status_t (*skipped_steps)(ddp_backend_t *be, void *impl, int64_t *count);
  /* ddp_optim_grad_sumsq_cpu's, ddp_optim_grad_epilogue_cpu's and
   * ddp_optim_sum_partials_cpu's contracts. */
  ddp_status_t (*grad_sumsq)(ddp_backend_t *be, float *sumsq, const float *grads, size_t n,
                             float scale, ddp_stream_t s);
  ddp_status_t (*grad_epilogue)(ddp_backend_t *be, float *dst, const void *src,
                                ddp_dtype_t src_dtype, size_t n, float scale, double *partial,
                                ddp_stream_t s);
  ddp_status_t (*sum_partials)(ddp_backend_t *be, float *sumsq, const double *partials, int n,
                               ddp_stream_t s);
  /* LAMB over a shard (optim/optim.h): the groups, checked, into impl
   * (plan time); then the three parts of a step. NULL: not supported. */
  ddp_status_t (*lamb_groups)(ddp_backend_t *be, void *impl, const ddp_optim_lamb_groups_t *g);
  ddp_status_t (*lamb_sums)(ddp_backend_t *be, void *impl, const ddp_optim_step_args_t *args,
                            double *sums, ddp_stream_t s);
  ddp_status_t (*lamb_ratios)(ddp_backend_t *be, void *impl, float lr, const double *all_sums,
                              float *ratio, ddp_stream_t s);
  ddp_status_t (*lamb_apply)(ddp_backend_t *be, void *impl, const ddp_optim_step_args_t *args,
                             const float *ratio, ddp_stream_t s);
} ddp_optim_ops_t;

/* The shared checks (src/optim/optim.c). Each logs what is wrong and returns
 * DDP_ERR_INVALID_ARG, or DDP_OK; none looks at the backend, so a twin
 * checks its backend itself. */
ddp_status_t ddp_optim_check_step(const ddp_optim_step_args_t *args);
ddp_status_t ddp_optim_check_grad_sumsq(const float *sumsq, const float *grads, float scale);
ddp_status_t ddp_optim_check_grad_epilogue(const float *dst, const void *src, ddp_dtype_t src_dtype,
                                           size_t n, float scale, const double *partial);
ddp_status_t ddp_optim_check_sum_partials(const float *sumsq, const double *partials, int n);

#endif
