/* The linear layer's element-wise kernels: bias seeding for the forward,
 * the bias gradient's column sums, and the store / add of a bias gradient
 * that cuBLASLt's epilogue computed (launchers in kernels/linear.h; CPU
 * twins in src/backend/cpu/cpu_nn.c).
 *
 * Column sums run in two passes so the order of additions is fixed by the
 * sizes alone (no atomics): pass one gives each thread one column of one
 * block of DDP_CUDA_COLSUM_ROWS rows, summed in fp32 in row order (threads
 * of a warp read adjacent columns, so the loads coalesce); pass two adds a
 * column's block sums in double in block order. That is the CPU twin's
 * arithmetic, so the results agree to the last bit whenever the fp32 block
 * sums do (they are the same additions). */
#include "core/foreign_check.h"
#include "linear.h"
#include "nn_io.cuh"

namespace {

using namespace ddp_nn;

constexpr int kThreads = 256;

template <int DT>
static __global__ void bias_seed_kernel(void *out, const void *bias, int rows, int cols) {
  const size_t n = (size_t)rows * (size_t)cols;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    store<DT>(out, i, load<DT>(bias, i % (size_t)cols));
}

template <int DT>
static __global__ void colsum_blocks_kernel(float *partial, const void *src, int rows, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int r0 = blockIdx.y * DDP_CUDA_COLSUM_ROWS;
  const int r1 = min(rows, r0 + DDP_CUDA_COLSUM_ROWS);
  float s = load<DT>(src, (size_t)r0 * cols + c);
  for (int r = r0 + 1; r < r1; ++r) s += load<DT>(src, (size_t)r * cols + c);
  partial[(size_t)blockIdx.y * cols + c] = s;
}

static __global__ void colsum_total_kernel(float *dst, const float *partial, int blocks, int cols,
                                           int accumulate) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  double t = accumulate ? (double)dst[c] : 0.0;
  for (int b = 0; b < blocks; ++b) t += (double)partial[(size_t)b * cols + c];
  dst[c] = (float)t;
}

static __global__ void bias_grad_update_kernel(float *dst, const float *src, int n,
                                               int accumulate) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  dst[i] = accumulate ? dst[i] + src[i] : src[i];
}

ddp_status_t check_dt(ddp_dtype_t dt, const char *op) {
  if (dt != DDP_DTYPE_F32 && dt != DDP_DTYPE_BF16 && dt != DDP_DTYPE_F16)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: activation dtype %s (%d) is not fp32, bf16 or fp16", op,
             ddp_dtype_name(dt), (int)dt);
  return DDP_OK;
}

}  // namespace

extern "C" size_t ddp_cuda_column_sums_scratch_floats(int64_t rows, int64_t cols) {
  if (rows < 1 || cols < 1) return 0;
  return (size_t)((rows + DDP_CUDA_COLSUM_ROWS - 1) / DDP_CUDA_COLSUM_ROWS) * (size_t)cols;
}

extern "C" ddp_status_t ddp_cuda_bias_seed(ddp_dtype_t dt, void *out, const void *bias, int rows,
                                           int cols, cudaStream_t stream) {
  DDP_CHECK(check_dt(dt, "linear bias"));
  if (rows < 1 || cols < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "linear bias: sizes %d x %d must be positive", rows, cols);
  if (!out || !bias) DDP_FAIL(DDP_ERR_INVALID_ARG, "linear bias: NULL pointer");
  const unsigned grid = grid_for((size_t)rows * (size_t)cols);
  switch (dt) {
    case DDP_DTYPE_F32:
      bias_seed_kernel<DDP_DTYPE_F32><<<grid, kThreads, 0, stream>>>(out, bias, rows, cols);
      break;
    case DDP_DTYPE_BF16:
      bias_seed_kernel<DDP_DTYPE_BF16><<<grid, kThreads, 0, stream>>>(out, bias, rows, cols);
      break;
    default:
      bias_seed_kernel<DDP_DTYPE_F16><<<grid, kThreads, 0, stream>>>(out, bias, rows, cols);
      break;
  }
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_bias_grad_update(float *dst, const float *src, int n,
                                                  int accumulate, cudaStream_t stream) {
  if (n < 1) DDP_FAIL(DDP_ERR_INVALID_ARG, "linear dbias update: size %d must be positive", n);
  if (!dst || !src) DDP_FAIL(DDP_ERR_INVALID_ARG, "linear dbias update: NULL pointer");
  const uintptr_t d = (uintptr_t)dst, r = (uintptr_t)src, bytes = (uintptr_t)n * sizeof(float);
  if (d < r + bytes && r < d + bytes)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "linear dbias update: dst and src overlap");
  bias_grad_update_kernel<<<(unsigned)((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      dst, src, n, accumulate);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_column_sums(ddp_dtype_t dt, float *dst, float *scratch,
                                             const void *src, int rows, int cols, int accumulate,
                                             cudaStream_t stream) {
  DDP_CHECK(check_dt(dt, "linear dbias"));
  if (rows < 1 || cols < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "linear dbias: sizes %d x %d must be positive", rows, cols);
  if (!dst || !scratch || !src) DDP_FAIL(DDP_ERR_INVALID_ARG, "linear dbias: NULL pointer");
  const int blocks = (rows + DDP_CUDA_COLSUM_ROWS - 1) / DDP_CUDA_COLSUM_ROWS;
  if (blocks > 65535)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "linear dbias: %d rows exceed %d", rows,
             65535 * DDP_CUDA_COLSUM_ROWS);
  const dim3 grid((unsigned)((cols + kThreads - 1) / kThreads), (unsigned)blocks);
  switch (dt) {
    case DDP_DTYPE_F32:
      colsum_blocks_kernel<DDP_DTYPE_F32><<<grid, kThreads, 0, stream>>>(scratch, src, rows, cols);
      break;
    case DDP_DTYPE_BF16:
      colsum_blocks_kernel<DDP_DTYPE_BF16><<<grid, kThreads, 0, stream>>>(scratch, src, rows, cols);
      break;
    default:
      colsum_blocks_kernel<DDP_DTYPE_F16><<<grid, kThreads, 0, stream>>>(scratch, src, rows, cols);
      break;
  }
  DDP_CUDA_CHECK(cudaGetLastError());
  colsum_total_kernel<<<(unsigned)((cols + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      dst, scratch, blocks, cols, accumulate);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}
