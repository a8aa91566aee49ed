/* Launchers for the linear layer's element-wise kernels (kernels/linear.cu);
 * the matrix products themselves go through the backend's GEMM.
 *
 * A C header like kernels/kernels.h: compiled by nvcc, called from C
 * (src/backend/cuda/cuda_nn_linear.c and the GPU suites). Launchers take
 * device pointers and a stream, validate dtype, sizes and pointers
 * (DDP_ERR_INVALID_ARG, logged once) and only enqueue work. The CPU twins
 * are in src/backend/cpu/cpu_nn.c (the bias seed of ddp_cpu_linear_fwd_f32
 * and its column_sums). */
#ifndef DDPTRAIN_KERNELS_LINEAR_H
#define DDPTRAIN_KERNELS_LINEAR_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "ddptrain/dtype.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows summed in fp32 per partial, as the CPU twin's COLSUM_ROWS: the same
 * fp32 additions in the same order, then the partials in double. */
#define DDP_CUDA_COLSUM_ROWS 32

/* Floats of scratch ddp_cuda_column_sums needs for `rows` x `cols`. */
size_t ddp_cuda_column_sums_scratch_floats(int64_t rows, int64_t cols);

/* out (rows, cols) of dt: every row = bias (cols, dt). The GEMM then adds
 * the product with beta 1, so the bias costs no extra pass over out. */
ddp_status_t ddp_cuda_bias_seed(ddp_dtype_t dt, void *out, const void *bias, int rows, int cols,
                                cudaStream_t stream);

/* dst (cols, fp32) = / += per `accumulate` the column sums of src (rows,
 * cols, dt): each column's rows in blocks of DDP_CUDA_COLSUM_ROWS summed in
 * fp32 in row order, the block sums (and the old dst when accumulating)
 * added in double in block order, rounded once. `scratch` holds
 * ddp_cuda_column_sums_scratch_floats(rows, cols) floats. Deterministic: no
 * atomics, a fixed order that depends on the sizes only. */
ddp_status_t ddp_cuda_column_sums(ddp_dtype_t dt, float *dst, float *scratch, const void *src,
                                  int rows, int cols, int accumulate, cudaStream_t stream);

/* dst (n, fp32) = src (accumulate 0) or dst + src (accumulate 1, one fp32
 * addition per element): a bias gradient that cuBLASLt's DGELU_BGRAD
 * epilogue wrote to scratch, into the parameter gradient. dst and src must
 * not overlap. (CPU twin: the store / `+=` of the CPU column sums.) */
ddp_status_t ddp_cuda_bias_grad_update(float *dst, const float *src, int n, int accumulate,
                                       cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
