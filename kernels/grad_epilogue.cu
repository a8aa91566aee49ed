/* The gradient epilogue of a half-precision all-reduce and the in-order sum
 * of its per-bucket partials (launchers in kernels/grad_epilogue.h; CPU
 * twins in src/backend/cpu/cpu_grad_epilogue.c).
 *
 * Per element the arithmetic is the CPU twin's: an exact widening, then one
 * fp32 multiply with explicit rounding (__fmul_rn), so dst is bit-identical
 * on both backends. The squares are accumulated in double with explicit
 * rounding too (__dmul_rn / __dadd_rn: no fused multiply-add, each square is
 * rounded before it is added, as on the CPU), in an order fixed by n alone:
 * each block sums a contiguous span with a thread stride and a fixed-order
 * block reduction, writes its partial, and one block adds the partials in
 * block order. No atomics, so two runs give the same bits. inf and NaN pass
 * through every step (squares are >= 0, so an inf can only become NaN, never
 * cancel), which is what makes the norm the loss scaler's overflow flag.
 *
 * Loads are 16-bit and coalesced per warp (a bucket's start inside the
 * staging buffer has no alignment beyond 2 bytes, so no vector loads). */
#include <math.h>

#include "core/foreign_check.h"
#include "grad_epilogue.h"
#include "nn_io.cuh"

namespace {

using namespace ddp_nn;

constexpr int kThreads = 256;       /* block of the element pass (a multiple of 32) */
constexpr int kTotalThreads = 1024; /* the one block that adds the block partials */
constexpr int kMaxBlocks = 1024;    /* block partials of one bucket */
constexpr size_t kMinPerBlock = 4096;

/* Block partials of the bucket being finished (see grad_epilogue.h: one
 * stream at a time). */
__device__ double g_epilogue_blocks[kMaxBlocks];

template <int DT>
static __global__ void epilogue_blocks_kernel(float *dst, const void *src, size_t n, size_t per,
                                              float scale) {
  __shared__ double shm[32];
  const size_t begin = (size_t)blockIdx.x * per;
  const size_t end = begin >= n ? begin : (n - begin < per ? n : begin + per);
  double acc = 0.0;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float y = __fmul_rn(load<DT>(src, i), scale);
    dst[i] = y;
    acc = __dadd_rn(acc, __dmul_rn((double)y, (double)y));
  }
  acc = block_sum(acc, shm); /* every thread reaches it: no early exit above */
  if (threadIdx.x == 0) g_epilogue_blocks[blockIdx.x] = acc;
}

static __global__ void epilogue_total_kernel(double *partial, int blocks) {
  __shared__ double shm[32];
  double acc = 0.0;
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) acc = __dadd_rn(acc, g_epilogue_blocks[b]);
  acc = block_sum(acc, shm);
  if (threadIdx.x == 0) *partial = acc;
}

static __global__ void sum_partials_kernel(float *out, const double *partials, int n) {
  double acc = 0.0;
  for (int b = 0; b < n; ++b) acc = __dadd_rn(acc, partials[b]);
  *out = (float)acc;
}

template <int DT>
ddp_status_t launch(float *dst, const void *src, size_t n, float scale, double *partial,
                    cudaStream_t stream) {
  /* Blocks of at least kMinPerBlock elements, at most kMaxBlocks: the split
   * (and so the order of additions) depends on n only. */
  size_t blocks = (n + kMinPerBlock - 1) / kMinPerBlock;
  if (blocks < 1) blocks = 1;
  if (blocks > (size_t)kMaxBlocks) blocks = kMaxBlocks;
  size_t per = (n + blocks - 1) / blocks;
  if (per < 1) per = 1;
  epilogue_blocks_kernel<DT><<<(unsigned)blocks, kThreads, 0, stream>>>(dst, src, n, per, scale);
  DDP_CUDA_CHECK(cudaGetLastError());
  epilogue_total_kernel<<<1, kTotalThreads, 0, stream>>>(partial, (int)blocks);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

}  // namespace

extern "C" ddp_status_t ddp_cuda_grad_epilogue(float *dst, const void *src, ddp_dtype_t src_dtype,
                                               size_t n, float scale, double *partial,
                                               cudaStream_t stream) {
  if (!dst || !src || !partial) DDP_FAIL(DDP_ERR_INVALID_ARG, "grad_epilogue: NULL pointer");
  if (!isfinite(scale)) DDP_FAIL(DDP_ERR_INVALID_ARG, "grad_epilogue: scale %g", (double)scale);
  switch (src_dtype) {
    case DDP_DTYPE_BF16:
      return launch<DDP_DTYPE_BF16>(dst, src, n, scale, partial, stream);
    case DDP_DTYPE_F16:
      return launch<DDP_DTYPE_F16>(dst, src, n, scale, partial, stream);
    case DDP_DTYPE_F32: /* --zero 1's fp32 shard, in place (dst == src) */
      return launch<DDP_DTYPE_F32>(dst, src, n, scale, partial, stream);
    default:
      DDP_FAIL(DDP_ERR_INVALID_ARG, "grad_epilogue: %s is not a gradient type",
               ddp_dtype_name(src_dtype));
  }
}

extern "C" ddp_status_t ddp_cuda_sum_partials(float *out, const double *partials, int n,
                                              cudaStream_t stream) {
  if (!out || !partials || n < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "sum_partials: NULL pointer or n = %d", n);
  sum_partials_kernel<<<1, 1, 0, stream>>>(out, partials, n);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}
