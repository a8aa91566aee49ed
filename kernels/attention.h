/* Launchers for the attention kernels (kernels/attention.cu).
 *
 * Causal multi-head self-attention on the GPU is batched GEMMs (the
 * backend's own, fp32 operands) around the kernels declared here: layout
 * changes between the model's (B,T,C)-shaped activations in their storage
 * type and fp32 per-head slabs (B,NH,T,hs) that one strided-batched GEMM
 * covers with a uniform stride, and the causal softmax, forward and
 * backward, on rows of scores. src/backend/cuda/cuda_nn_attention.c strings
 * them together; ddptrain/nn.h gives the op's contract.
 *
 * A C header (the callers are C): extern "C" launchers returning
 * ddp_status_t, outputs first, the stream last. They validate their
 * arguments and only enqueue work. Nothing here uses atomics: every output
 * element is written by one thread and every reduction runs in a fixed
 * order, so results are bit-reproducible. The CPU twin of the whole family
 * is src/backend/cpu/cpu_attention.c (with cpu_nn_dtype.c for the widening
 * and rounding of half types). */
#ifndef DDPTRAIN_KERNELS_ATTENTION_H
#define DDPTRAIN_KERNELS_ATTENTION_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "ddptrain/dtype.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* parts[0..nparts): fp32 tensors (B,NH,T,hs), hs = C/NH; src
 * (B,T,nparts*C) of dtype dt, row pitch nparts*C: column p*C + h*hs + d of
 * row (b,t) goes to parts[p], slab (b,h), row t, column d. nparts is 1 to
 * 3 (1: dout, 3: qkv -> q, k, v); parts is a host array of device pointers.
 * Widening is exact. */
ddp_status_t ddp_cuda_attention_to_heads(float *const *parts, const void *src, ddp_dtype_t dt,
                                         int nparts, int B, int T, int C, int NH,
                                         cudaStream_t stream);

/* The reverse: dst (B,T,nparts*C) of dtype dt (overwritten, every element)
 * from the nparts fp32 (B,NH,T,hs) tensors parts[0..nparts), each rounded
 * once to nearest even. parts is a host array of device pointers. */
ddp_status_t ddp_cuda_attention_from_heads(void *dst, ddp_dtype_t dt, const float *const *parts,
                                           int nparts, int B, int T, int C, int NH,
                                           cudaStream_t stream);

/* Causal softmax in place on row blocks of score matrices (the scores
 * arrive already scaled). There are nmat matrices, matrix g at
 * p + g*stride; each holds `rows` rows of pitch ldp, row i being sequence
 * position t = r0 + i, and ncols >= r0 + rows columns. Row i becomes
 * softmax(x[0..t]) in columns 0..t (fp32 max and sum) and exactly 0 in
 * columns t+1..ncols-1, so a GEMM may read whole rows of ncols. The whole
 * (T,T) matrices of training are rows = ncols = ldp = T, r0 = 0,
 * stride = T*T. CPU twin: softmax_causal_row in cpu_attention.c. */
ddp_status_t ddp_cuda_attention_softmax_fwd(float *p, int64_t nmat, int rows, int r0, int ncols,
                                            int64_t ldp, int64_t stride, cudaStream_t stream);

/* Softmax backward in place on nmat (T,T) matrices: for row t,
 * d[j] = att[j] * (d[j] - sum_{i<=t} att[i]*d[i]) for j <= t and exactly 0
 * for j > t. d arrives holding dL/d(probabilities) and leaves holding
 * dL/d(scaled scores). att's columns past t are never read. CPU twin:
 * softmax_causal_row_bwd in cpu_attention.c (which also folds the scale in;
 * here the caller's GEMMs apply it). */
ddp_status_t ddp_cuda_attention_softmax_bwd(float *d, const float *att, int64_t nmat, int T,
                                            cudaStream_t stream);

/* dst = att with the masked part zeroed, nmat (T,T) matrices: row t keeps
 * columns 0..t, columns past t become exactly 0 (att's are never read, the
 * contract lets them hold anything), so a GEMM may read whole rows. */
ddp_status_t ddp_cuda_attention_mask_copy(float *dst, const float *att, int64_t nmat, int T,
                                          cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
