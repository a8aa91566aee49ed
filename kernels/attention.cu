/* Attention kernels (launchers declared in kernels/attention.h): head
 * layout changes with dtype conversion, the causal softmax forward and
 * backward, and the masked copy of saved probabilities.
 *
 * Layout kernels are grid-stride loops with 64-bit indices, one output
 * element per thread iteration. The row kernels give each row of scores to
 * one warp: the lanes stride over the row and combine their partial max or
 * sum with a butterfly of shuffles, so every reduction runs in the same
 * order on every run (no atomics), and the whole row is one warp's, which
 * keeps it in L1 across the passes. Half values are widened exactly and
 * each stored half output is rounded once to nearest even. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "attention.h"
#include "foreign_check.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
/* Grid caps: enough blocks to fill any current GPU many times over; the
 * grid-stride loops cover the rest. */
constexpr int64_t kMaxBlocks = 8192;

template <int DT>
__device__ __forceinline__ float load_as_f32(const void *__restrict__ p, int64_t i) {
  if constexpr (DT == DDP_DTYPE_F32)
    return static_cast<const float *>(p)[i];
  else if constexpr (DT == DDP_DTYPE_BF16)
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
  else
    return __half2float(static_cast<const __half *>(p)[i]);
}

template <int DT>
__device__ __forceinline__ void store_from_f32(void *__restrict__ p, int64_t i, float x) {
  if constexpr (DT == DDP_DTYPE_F32)
    static_cast<float *>(p)[i] = x;
  else if constexpr (DT == DDP_DTYPE_BF16)
    static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(x);
  else
    static_cast<__half *>(p)[i] = __float2half_rn(x);
}

/* Where column `col` of row `row` of a (B*T, nparts*C) activation lives in
 * the nparts consecutive (B,NH,T,hs) tensors: part index and offset inside
 * the part. */
struct HeadPos {
  int part;
  int64_t off;
};

__device__ __forceinline__ HeadPos head_pos(int64_t row, int64_t col, int T, int C, int hs,
                                            int NH) {
  const int part = (int)(col / C);
  const int c = (int)(col - (int64_t)part * C);
  const int h = c / hs, d = c - h * hs;
  const int64_t b = row / T, t = row - b * T;
  return {part, ((b * NH + h) * T + t) * hs + d};
}

/* Up to three part pointers, passed to kernels by value. */
template <typename P>
struct Parts {
  P *p[3];
};

template <int DT>
static __global__ void to_heads_kernel(Parts<float> parts, const void *__restrict__ src, int nparts,
                                       int64_t n, int T, int C, int NH) {
  const int64_t width = (int64_t)nparts * C;
  const int hs = C / NH;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = i / width;
    const HeadPos hp = head_pos(row, i - row * width, T, C, hs, NH);
    parts.p[hp.part][hp.off] = load_as_f32<DT>(src, i);
  }
}

template <int DT>
static __global__ void from_heads_kernel(void *__restrict__ dst, Parts<const float> parts,
                                         int nparts, int64_t n, int T, int C, int NH) {
  const int64_t width = (int64_t)nparts * C;
  const int hs = C / NH;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = i / width;
    const HeadPos hp = head_pos(row, i - row * width, T, C, hs, NH);
    store_from_f32<DT>(dst, i, parts.p[hp.part][hp.off]);
  }
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xFFFFFFFFu, x, o);
  return x;
}

/* One warp per row; the loop bound is the same for all lanes of a warp, so
 * the shuffles always see the full warp. */
static __global__ void softmax_fwd_kernel(float *__restrict__ p, int64_t nrows, int rows, int r0,
                                          int ncols, int64_t ldp, int64_t stride) {
  const int lane = threadIdx.x & 31;
  const int64_t nwarps = (int64_t)gridDim.x * kWarpsPerBlock;
  for (int64_t r = (int64_t)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5); r < nrows;
       r += nwarps) {
    const int64_t g = r / rows;
    const int i = (int)(r - g * rows);
    float *x = p + g * stride + (int64_t)i * ldp;
    const int len = r0 + i + 1; /* columns 0..t */
    float mx = -INFINITY;
    for (int j = lane; j < len; j += 32) mx = fmaxf(mx, x[j]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int j = lane; j < len; j += 32) sum += expf(x[j] - mx);
    /* The maximum contributes exp(0) = 1, so the sum is at least 1. */
    const float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < ncols; j += 32) x[j] = j < len ? expf(x[j] - mx) * inv : 0.0f;
  }
}

static __global__ void softmax_bwd_kernel(float *__restrict__ d, const float *__restrict__ att,
                                          int64_t nrows, int T) {
  const int lane = threadIdx.x & 31;
  const int64_t nwarps = (int64_t)gridDim.x * kWarpsPerBlock;
  for (int64_t r = (int64_t)blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5); r < nrows;
       r += nwarps) {
    /* Rows of consecutive (T,T) matrices are consecutive rows of pitch T. */
    float *dr = d + r * T;
    const float *a = att + r * T;
    const int len = (int)(r % T) + 1;
    float dot = 0.0f;
    for (int j = lane; j < len; j += 32) dot += a[j] * dr[j];
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += 32) dr[j] = j < len ? a[j] * (dr[j] - dot) : 0.0f;
  }
}

static __global__ void mask_copy_kernel(float *__restrict__ dst, const float *__restrict__ att,
                                        int64_t n, int T) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = i / T;
    const int64_t j = i - row * T, t = row % T;
    dst[i] = j <= t ? att[i] : 0.0f;
  }
}

unsigned grid_for(int64_t work, int per_block) {
  int64_t blocks = (work + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  return (unsigned)(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

ddp_status_t check_heads(const char *op, ddp_dtype_t dt, int nparts, int B, int T, int C, int NH) {
  if (dt != DDP_DTYPE_F32 && dt != DDP_DTYPE_BF16 && dt != DDP_DTYPE_F16)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: dtype %s (%d) is not fp32, bf16 or fp16", op,
             ddp_dtype_name(dt), (int)dt);
  if (nparts < 1 || nparts > 3)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: nparts %d is not 1, 2 or 3", op, nparts);
  if (B < 1 || T < 1 || C < 1 || NH < 1 || C % NH != 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "%s: sizes B=%d T=%d C=%d NH=%d must be positive with C a multiple of NH", op, B, T, C,
             NH);
  return DDP_OK;
}

}  // namespace

/* ---- launchers ------------------------------------------------------------ */

extern "C" ddp_status_t ddp_cuda_attention_to_heads(float *const *parts, const void *src,
                                                    ddp_dtype_t dt, int nparts, int B, int T, int C,
                                                    int NH, cudaStream_t stream) {
  DDP_CHECK(check_heads("ddp_cuda_attention_to_heads", dt, nparts, B, T, C, NH));
  if (!parts || !src) DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_attention_to_heads: NULL pointer");
  Parts<float> ps = {{nullptr, nullptr, nullptr}};
  for (int i = 0; i < nparts; ++i) {
    if (!parts[i]) DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_attention_to_heads: part %d is NULL", i);
    ps.p[i] = parts[i];
  }
  const int64_t n = (int64_t)B * T * C * nparts;
  const unsigned grid = grid_for(n, kThreads);
  switch (dt) {
    case DDP_DTYPE_F32:
      to_heads_kernel<DDP_DTYPE_F32><<<grid, kThreads, 0, stream>>>(ps, src, nparts, n, T, C, NH);
      break;
    case DDP_DTYPE_BF16:
      to_heads_kernel<DDP_DTYPE_BF16><<<grid, kThreads, 0, stream>>>(ps, src, nparts, n, T, C, NH);
      break;
    default:
      to_heads_kernel<DDP_DTYPE_F16><<<grid, kThreads, 0, stream>>>(ps, src, nparts, n, T, C, NH);
      break;
  }
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_attention_from_heads(void *dst, ddp_dtype_t dt,
                                                      const float *const *parts, int nparts, int B,
                                                      int T, int C, int NH, cudaStream_t stream) {
  DDP_CHECK(check_heads("ddp_cuda_attention_from_heads", dt, nparts, B, T, C, NH));
  if (!dst || !parts) DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_attention_from_heads: NULL pointer");
  Parts<const float> ps = {{nullptr, nullptr, nullptr}};
  for (int i = 0; i < nparts; ++i) {
    if (!parts[i])
      DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_attention_from_heads: part %d is NULL", i);
    ps.p[i] = parts[i];
  }
  const int64_t n = (int64_t)B * T * C * nparts;
  const unsigned grid = grid_for(n, kThreads);
  switch (dt) {
    case DDP_DTYPE_F32:
      from_heads_kernel<DDP_DTYPE_F32><<<grid, kThreads, 0, stream>>>(dst, ps, nparts, n, T, C, NH);
      break;
    case DDP_DTYPE_BF16:
      from_heads_kernel<DDP_DTYPE_BF16>
          <<<grid, kThreads, 0, stream>>>(dst, ps, nparts, n, T, C, NH);
      break;
    default:
      from_heads_kernel<DDP_DTYPE_F16><<<grid, kThreads, 0, stream>>>(dst, ps, nparts, n, T, C, NH);
      break;
  }
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_attention_softmax_fwd(float *p, int64_t nmat, int rows, int r0,
                                                       int ncols, int64_t ldp, int64_t stride,
                                                       cudaStream_t stream) {
  if (!p) DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_attention_softmax_fwd: NULL pointer");
  if (nmat < 1 || rows < 1 || r0 < 0 || ncols < r0 + rows || ldp < ncols ||
      (nmat > 1 && stride < (int64_t)(rows - 1) * ldp + ncols))
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "ddp_cuda_attention_softmax_fwd: bad shape nmat=%lld rows=%d r0=%d ncols=%d "
             "ldp=%lld stride=%lld",
             (long long)nmat, rows, r0, ncols, (long long)ldp, (long long)stride);
  const int64_t nrows = nmat * rows;
  softmax_fwd_kernel<<<grid_for(nrows, kWarpsPerBlock), kThreads, 0, stream>>>(p, nrows, rows, r0,
                                                                               ncols, ldp, stride);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_attention_softmax_bwd(float *d, const float *att, int64_t nmat,
                                                       int T, cudaStream_t stream) {
  if (!d || !att) DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_attention_softmax_bwd: NULL pointer");
  if (nmat < 1 || T < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_attention_softmax_bwd: bad shape nmat=%lld T=%d",
             (long long)nmat, T);
  const int64_t nrows = nmat * T;
  softmax_bwd_kernel<<<grid_for(nrows, kWarpsPerBlock), kThreads, 0, stream>>>(d, att, nrows, T);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_attention_mask_copy(float *dst, const float *att, int64_t nmat,
                                                     int T, cudaStream_t stream) {
  if (!dst || !att) DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_attention_mask_copy: NULL pointer");
  if (nmat < 1 || T < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_attention_mask_copy: bad shape nmat=%lld T=%d",
             (long long)nmat, T);
  const int64_t n = nmat * T * T;
  mask_copy_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, att, n, T);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}
