/* The gradient epilogue on the CUDA backend (entries of its optimizer
 * table): the backend's stream handed to the launchers of
 * kernels/grad_epilogue.cu. Nothing is decided on the host, so finishing a
 * bucket enqueues two kernels and returns. */
#include <config.h>

#include "backend/cuda/cuda_grad_epilogue.h"

#include "backend/cuda/cuda_impl.h"
#include "grad_epilogue.h"

ddp_status_t ddp_cuda_optim_grad_epilogue(ddp_backend_t *be, float *dst, const void *src,
                                          ddp_dtype_t src_dtype, size_t n, float scale,
                                          double *partial, ddp_stream_t s) {
  return ddp_cuda_grad_epilogue(dst, src, src_dtype, n, scale, partial, ddp_cuda_stream(be, s));
}

ddp_status_t ddp_cuda_optim_sum_partials(ddp_backend_t *be, float *sumsq, const double *partials,
                                         int n, ddp_stream_t s) {
  return ddp_cuda_sum_partials(sumsq, partials, n, ddp_cuda_stream(be, s));
}
