/* Launchers for the gradient epilogue of a half-precision all-reduce
 * (kernels/grad_epilogue.cu): widen one bucket's reduced bf16/fp16 sums
 * into the fp32 gradients, multiplied by the loss scaler's unscale factor,
 * and take the bucket's sum of squares in the same pass; then add the
 * buckets' sums in bucket order into the squared global norm.
 *
 * A C header like kernels/optim.h (compiled by nvcc, called from
 * src/backend/cuda/cuda_grad_epilogue.c and the GPU suite). The semantics
 * are optim/optim.h's; the CPU twins are ddp_optim_grad_epilogue_cpu and
 * ddp_optim_sum_partials_cpu (src/backend/cpu/cpu_grad_epilogue.c).
 * Launchers only enqueue work. */
#ifndef DDPTRAIN_KERNELS_GRAD_EPILOGUE_H
#define DDPTRAIN_KERNELS_GRAD_EPILOGUE_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "ddptrain/dtype.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = __fmul_rn(widen(src[i]), scale) for i < n (src: uint16 bit
 * patterns of src_dtype, bf16 or fp16), and *partial (device double) = the
 * sum of dst[i]^2 in double: per-block partials over a split that depends on
 * n only, then the blocks in order. dst and src must not overlap. Calls share
 * a device array of block partials: they must not run concurrently on two
 * streams. */
ddp_status_t ddp_cuda_grad_epilogue(float *dst, const void *src, ddp_dtype_t src_dtype, size_t n,
                                    float scale, double *partial, cudaStream_t stream);

/* *out (device float) = (float)(partials[0] + ... + partials[n - 1]), added
 * in double in index order by one thread (the CPU twin's order exactly). */
ddp_status_t ddp_cuda_sum_partials(float *out, const double *partials, int n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
