/* The CUDA side of the half all-reduce's gradient epilogue (internal):
 * entries of the CUDA optimizer table (cuda_optim.c), called by the
 * backend-neutral entry points in src/optim/optim.c, which validate arguments
 * first. */
#ifndef DDPTRAIN_CUDA_GRAD_EPILOGUE_H
#define DDPTRAIN_CUDA_GRAD_EPILOGUE_H

#include <stddef.h>

#include "ddptrain/backend.h"

ddp_status_t ddp_cuda_optim_grad_epilogue(ddp_backend_t *be, float *dst, const void *src,
                                          ddp_dtype_t src_dtype, size_t n, float scale,
                                          double *partial, ddp_stream_t s);
ddp_status_t ddp_cuda_optim_sum_partials(ddp_backend_t *be, float *sumsq, const double *partials,
                                         int n, ddp_stream_t s);

#endif
