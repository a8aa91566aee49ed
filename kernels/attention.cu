/* Attention kernels (launchers declared in kernels/attention.h): head
 * layout changes with dtype conversion, the causal softmax forward and
 * backward, and the masked copy of saved probabilities.
 *
 * Layout kernels are grid-stride loops with 64-bit indices, one element
 * per thread iteration. The row kernels give each row of scores to
 * one warp: the lanes stride over the row and combine their partial max or
 * sum with a butterfly of shuffles, so every reduction runs in the same
 * order on every run (no atomics), and the whole row is one warp's, which
 * keeps it in L1 across the passes. Half values are widened exactly and
 * each stored half output is rounded once to nearest even (nn_io.cuh). */
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "attention.h"
#include "core/foreign_check.h"
#include "nn_io.cuh"

namespace {

using ddp_nn::grid_for;
using ddp_nn::warp_max;
using ddp_nn::warp_sum;

constexpr int kThreads = ddp_nn::kEwThreads;
constexpr int kWarpsPerBlock = kThreads / 32;

/* Blocks for one warp per row (grid_for counts threads). */
unsigned grid_for_rows(int64_t nrows) {
  return grid_for((size_t)nrows * 32);
}

/* Where column `col` of row `row` of a (B*T, nparts*C) activation lives
 * among the nparts (B,NH,T,hs) tensors: which part, and the offset inside
 * it. */
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

/* Up to three part pointers, passed to kernels by value. The fp32 side is
 * read-only when going back to the activation layout. */
struct Parts {
  float *p[3];
};

/* Between the activation layout and the head layout, one element per
 * iteration, indexed in the activation's order (its accesses coalesce; the
 * head side moves in runs of hs). */
template <int DT, bool kToHeads>
static __global__ void layout_kernel(void *__restrict__ act, Parts parts, int nparts, int64_t n,
                                     int T, int C, int NH) {
  const int64_t width = (int64_t)nparts * C;
  const int hs = C / NH;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = i / width;
    const HeadPos hp = head_pos(row, i - row * width, T, C, hs, NH);
    if constexpr (kToHeads)
      parts.p[hp.part][hp.off] = ddp_nn::load<DT>(act, (size_t)i);
    else
      ddp_nn::store<DT>(act, (size_t)i, parts.p[hp.part][hp.off]);
  }
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

/* Calls f with the dtype as a compile-time constant (dt already checked). */
template <typename F>
void with_dtype(ddp_dtype_t dt, F &&f) {
  switch (dt) {
    case DDP_DTYPE_F32:
      f(std::integral_constant<int, DDP_DTYPE_F32>{});
      break;
    case DDP_DTYPE_BF16:
      f(std::integral_constant<int, DDP_DTYPE_BF16>{});
      break;
    default:
      f(std::integral_constant<int, DDP_DTYPE_F16>{});
      break;
  }
}

/* Both layout launchers: checks, then the kernel for dt and direction.
 * act is the (B,T,nparts*C) activation, parts the fp32 head tensors. */
template <bool kToHeads>
ddp_status_t launch_layout(const char *op, void *act, const float *const *parts, ddp_dtype_t dt,
                           int nparts, int B, int T, int C, int NH, cudaStream_t stream) {
  DDP_CHECK(check_heads(op, dt, nparts, B, T, C, NH));
  if (!act || !parts) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: NULL pointer", op);
  Parts ps = {{nullptr, nullptr, nullptr}};
  for (int i = 0; i < nparts; ++i) {
    if (!parts[i]) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: part %d is NULL", op, i);
    ps.p[i] = const_cast<float *>(parts[i]); /* written only when kToHeads */
  }
  const int64_t n = (int64_t)B * T * C * nparts;
  with_dtype(dt, [&](auto tag) {
    layout_kernel<decltype(tag)::value, kToHeads>
        <<<grid_for((size_t)n), kThreads, 0, stream>>>(act, ps, nparts, n, T, C, NH);
  });
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

/* The checks of the kernels over nmat (T,T) matrices. */
ddp_status_t check_square(const char *op, const void *a, const void *b, int64_t nmat, int T) {
  if (!a || !b) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: NULL pointer", op);
  if (nmat < 1 || T < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: bad shape nmat=%lld T=%d", op, (long long)nmat, T);
  return DDP_OK;
}

}  // namespace

/* ---- launchers ------------------------------------------------------------ */

extern "C" ddp_status_t ddp_cuda_attention_to_heads(float *const *parts, const void *src,
                                                    ddp_dtype_t dt, int nparts, int B, int T, int C,
                                                    int NH, cudaStream_t stream) {
  /* src is only read in this direction */
  return launch_layout<true>("ddp_cuda_attention_to_heads", const_cast<void *>(src), parts, dt,
                             nparts, B, T, C, NH, stream);
}

extern "C" ddp_status_t ddp_cuda_attention_from_heads(void *dst, ddp_dtype_t dt,
                                                      const float *const *parts, int nparts, int B,
                                                      int T, int C, int NH, cudaStream_t stream) {
  return launch_layout<false>("ddp_cuda_attention_from_heads", dst, parts, dt, nparts, B, T, C, NH,
                              stream);
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
  softmax_fwd_kernel<<<grid_for_rows(nrows), kThreads, 0, stream>>>(p, nrows, rows, r0, ncols, ldp,
                                                                    stride);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_attention_softmax_bwd(float *d, const float *att, int64_t nmat,
                                                       int T, cudaStream_t stream) {
  DDP_CHECK(check_square("ddp_cuda_attention_softmax_bwd", d, att, nmat, T));
  const int64_t nrows = nmat * T;
  softmax_bwd_kernel<<<grid_for_rows(nrows), kThreads, 0, stream>>>(d, att, nrows, T);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_attention_mask_copy(float *dst, const float *att, int64_t nmat,
                                                     int T, cudaStream_t stream) {
  DDP_CHECK(check_square("ddp_cuda_attention_mask_copy", dst, att, nmat, T));
  const int64_t n = nmat * T * T;
  mask_copy_kernel<<<grid_for((size_t)n), kThreads, 0, stream>>>(dst, att, n, T);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}
