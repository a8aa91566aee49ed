/* Launchers for the LayerNorm kernels (kernels/layernorm.cu).
 *
 * A C header like kernels/kernels.h: the kernels are compiled by nvcc, the
 * callers (src/backend/cuda/cuda_nn_layernorm.c and the GPU suites) are C.
 * Launchers take device pointers and a stream, validate what they can
 * cheaply (dtype, sizes, NULL pointers: DDP_ERR_INVALID_ARG, logged once),
 * and only enqueue work. The contracts are those of ddptrain/nn.h's
 * layernorm_fwd, residual_layernorm_fwd and layernorm_bwd; the CPU twins
 * are the CPU backend's ops of the same names (src/backend/cpu/). */
#ifndef DDPTRAIN_KERNELS_LAYERNORM_H
#define DDPTRAIN_KERNELS_LAYERNORM_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "ddptrain/dtype.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The backward splits the N rows into this many fixed, contiguous groups
 * (N groups of one row when N is smaller). Each group leaves one fp32
 * partial sum of dw and of db in the scratch; a second kernel adds the
 * partials in group order. The split depends on N only, so the sums are
 * bit-reproducible run to run. 1024 groups keep a few warps per SM busy on
 * an H100 while the partials (2*C floats per group) stay in L2. */
#define DDP_CUDA_LN_BWD_GROUPS 1024

/* fp32 scratch floats the backward needs for N rows of C channels. */
static inline size_t ddp_cuda_layernorm_bwd_scratch_floats(int64_t N, int C) {
  const int64_t groups = N < DDP_CUDA_LN_BWD_GROUPS ? N : DDP_CUDA_LN_BWD_GROUPS;
  return groups > 0 && C > 0 ? (size_t)groups * 2u * (size_t)C : 0;
}

/* out (N,C) = (inp - mean) * rstd * w + b in dt, statistics in fp32 (eps
 * 1e-5, biased variance, two passes over the row: mean, then the variance
 * about it). mean, rstd (N, fp32) or NULL (eval). One warp per row. CPU
 * twin: ddp_nn_cpu_ops.layernorm_fwd. */
ddp_status_t ddp_cuda_layernorm_fwd(ddp_dtype_t dt, void *out, float *mean, float *rstd,
                                    const void *inp, const void *w, const void *b, int N, int C,
                                    cudaStream_t stream);

/* resid (N,C) = a + b rounded once to dt (resid may alias a), then out =
 * layernorm(resid) from the stored values, as ddp_cuda_layernorm_fwd would
 * compute it. out must not overlap resid, a or b. CPU twin:
 * ddp_nn_cpu_ops.residual_layernorm_fwd. */
ddp_status_t ddp_cuda_residual_layernorm_fwd(ddp_dtype_t dt, void *resid, void *out, float *mean,
                                             float *rstd, const void *a, const void *b,
                                             const void *w, const void *bias, int N, int C,
                                             cudaStream_t stream);

/* dinp (N,C) += gradient (one rounding to dt per element); dw, db (C,
 * fp32) = / += per accumulate. scratch: ddp_cuda_layernorm_bwd_scratch_floats
 * (N, C) fp32 floats of device memory, overwritten. Deterministic: no
 * atomics. CPU twin: ddp_nn_cpu_ops.layernorm_bwd. */
ddp_status_t ddp_cuda_layernorm_bwd(ddp_dtype_t dt, void *dinp, float *dw, float *db,
                                    float *scratch, const void *dout, const void *inp,
                                    const void *w, const float *mean, const float *rstd, int N,
                                    int C, int accumulate, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
