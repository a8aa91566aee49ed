/* Launchers for the optimizer kernels (kernels/optim.cu): the global
 * gradient norm and the multi-tensor AdamW / SGD / LAMB step.
 *
 * A C header like kernels/kernels.h (compiled by nvcc, called from
 * src/backend/cuda/cuda_optim.c and the GPU suites). The semantics are
 * optim/optim.h's; the CPU twins are ddp_optim_grad_sumsq_cpu and
 * ddp_optim_step_cpu (src/backend/cpu/cpu_optim.c). Launchers only enqueue
 * work. */
#ifndef DDPTRAIN_KERNELS_OPTIM_H
#define DDPTRAIN_KERNELS_OPTIM_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "ddptrain/dtype.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Elements per chunk: the step's unit of work (one thread block), never
 * crossing a parameter tensor, so a block knows its tensor's decay flag and
 * LAMB's per-tensor norms are sums of whole chunks. */
#define DDP_CUDA_OPTIM_CHUNK 16384

typedef struct ddp_cuda_optim_chunk {
  int64_t start; /* first element */
  int32_t len;   /* <= DDP_CUDA_OPTIM_CHUNK */
  int32_t seg;   /* index of its tensor (segment) */
} ddp_cuda_optim_chunk_t;

/* Everything the step needs besides the buffers; host values computed once
 * per step, exactly as the CPU twin computes them (src/backend/cpu/cpu_optim.c). */
typedef struct ddp_cuda_optim_coef {
  int kind;        /* ddp_optim_kind_t */
  float lr, b1, omb1, b2, omb2, eps, bc1, bc2, step_size, bc2_sqrt;
  float wd;        /* weight decay of decaying segments */
  float decay_mul; /* AdamW: (float)(1 - lr * wd) for decaying segments */
  float momentum;
  int first, nesterov, has_buf; /* SGD */
  float grad_scale;
  float max_grad_norm;  /* <= 0: no clipping */
  int use_sumsq;        /* grad_sumsq given: clip from it / skip on it */
  int skip_nonfinite;   /* a non-finite *sumsq: change nothing */
} ddp_cuda_optim_coef_t;

/* *out = sum over i < n of ((float)(scale * g[i]))^2, accumulated in double
 * in a fixed order (per-block partials in a device array of this module,
 * then one block), rounded to fp32 and written. Calls must not run
 * concurrently on two streams (they share the partials array). */
ddp_status_t ddp_cuda_grad_sumsq(float *out, const float *g, size_t n, float scale,
                                 cudaStream_t stream);

/* One optimizer step over n parameters described by `chunks` (device
 * array, n_chunks entries, covering [0, n) in order) and `seg_decay` /
 * `seg_chunk_begin` (device arrays: per segment its decay flag, and the
 * index of its first chunk, n_segs + 1 entries). state: AdamW/LAMB m at
 * [0, n), v at [n, 2n); SGD momentum buffer at [0, n) when has_buf.
 * compute (n elements of cdt, or NULL): the updated weight rounded there.
 * sumsq: device float (the squared global norm of the scaled gradients) or
 * NULL. lamb_partials (2 * n_chunks doubles) and lamb_ratio (n_segs floats)
 * are device scratch for LAMB (NULL otherwise). skipped (device int64 or
 * NULL): incremented by one thread when the loss scaler's skip applies, so
 * the host can learn at its next sync that steps were skipped. */
ddp_status_t ddp_cuda_optim_update(const ddp_cuda_optim_coef_t *c, float *params,
                                   const float *grads, float *state, size_t n, void *compute,
                                   ddp_dtype_t cdt, const float *sumsq,
                                   const ddp_cuda_optim_chunk_t *chunks, int n_chunks,
                                   const int32_t *seg_decay, const int32_t *seg_chunk_begin,
                                   int n_segs, double *lamb_partials, float *lamb_ratio,
                                   int64_t *skipped, cudaStream_t stream);

/* LAMB over a shard (optim/optim.h, ddp_optim_lamb_*), on the layout of
 * ddp_cuda_optim_update. lamb_sums: moments, and per segment j
 * sums[2j] = ||p_j||^2, sums[2j + 1] = ||r_j||^2 (its chunks' partials in
 * order; partials is the plan's 2 x n_chunks scratch). lamb_ratios: per
 * segment, the sums of all_sums at the group's indices (begin: n_segs + 1,
 * index: device arrays), added in order, to lr x trust in ratio. lamb_apply:
 * p -= ratio[seg] r, the compute copy and the skipped count as in
 * ddp_cuda_optim_update. Enqueued on stream; no host sync. */
ddp_status_t ddp_cuda_optim_lamb_sums(const ddp_cuda_optim_coef_t *c, const float *params,
                                      const float *grads, float *state, size_t n,
                                      const float *sumsq, const ddp_cuda_optim_chunk_t *chunks,
                                      int n_chunks, const int32_t *seg_decay,
                                      const int32_t *seg_chunk_begin, int n_segs, double *partials,
                                      double *sums, cudaStream_t stream);
ddp_status_t ddp_cuda_optim_lamb_ratios(float lr, const double *all_sums, const int32_t *begin,
                                        const int32_t *index, int n_segs, float *ratio,
                                        cudaStream_t stream);
ddp_status_t ddp_cuda_optim_lamb_apply(const ddp_cuda_optim_coef_t *c, float *params,
                                       const float *state, size_t n, void *compute, ddp_dtype_t cdt,
                                       const float *sumsq, const ddp_cuda_optim_chunk_t *chunks,
                                       int n_chunks, const int32_t *seg_decay, const float *ratio,
                                       int64_t *skipped, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
