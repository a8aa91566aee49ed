/* Token + position embedding, forward and backward (launchers declared in
 * kernels/embed.h; CPU twins ddp_cpu_embed_fwd_f32 / ddp_cpu_embed_bwd_f32
 * in src/backend/cpu/cpu_nn.c).
 *
 * Backward without atomics: the wte gradient of a token is the sum of the
 * dout rows at its positions, which atomicAdd would add in whatever order
 * the hardware runs them (not reproducible). Instead the (token, position)
 * pairs are listed in (t, b) order, stably sorted by token with CUB's radix
 * sort, and one block per run of equal tokens (gridDim.y splits the columns)
 * walks its positions in that order. That is exactly the order of the CPU
 * twin's loop, so fp32 sums agree bit for bit. */
#include <climits>

#include <cub/device/device_radix_sort.cuh>

#include "embed.h"
#include "core/foreign_check.h"
#include "nn_io.cuh"

namespace {

using namespace ddp_nn;

constexpr int kRowThreads = 128;
constexpr int kRunThreads = 128;
constexpr size_t kAlign = 256; /* every scratch region starts on this */

inline size_t align_up(size_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

/* One block per row (grid-stride over rows), threads over columns; VEC:
 * C is a multiple of four and all three buffers are aligned to four
 * elements, so rows are too. */
template <int DT, int VEC>
static __global__ void __launch_bounds__(kRowThreads)
    embed_fwd_kernel(void *__restrict__ out, const int32_t *__restrict__ tokens,
                     const void *__restrict__ wte, const void *__restrict__ wpe, size_t n, int T,
                     int C) {
  const size_t c = (size_t)C;
  for (size_t row = blockIdx.x; row < n; row += gridDim.x) {
    const int32_t tok = tokens[row];
    const size_t t = row % (size_t)T;
    if (tok < 0) {
      /* An invalid token (embed.h): no read of wte, a NaN row instead. */
      for (size_t j = threadIdx.x; j < c; j += blockDim.x)
        store<DT>(out, row * c + j, __int_as_float(0x7FC00000));
      continue;
    }
    const size_t e = (size_t)tok * c, p = t * c, o = row * c;
    if constexpr (VEC == 4) {
      for (size_t g = threadIdx.x; g < c / 4; g += blockDim.x) {
        const F4 a = load4<DT>(wte, e / 4 + g), b = load4<DT>(wpe, p / 4 + g);
        F4 r;
#pragma unroll
        for (int k = 0; k < 4; ++k) r.v[k] = a.v[k] + b.v[k];
        store4<DT>(out, o / 4 + g, r);
      }
    } else {
      for (size_t j = threadIdx.x; j < c; j += blockDim.x)
        store<DT>(out, o + j, load<DT>(wte, e + j) + load<DT>(wpe, p + j));
    }
  }
}

/* keys[j] = tokens[b,t], vals[j] = b*T + t (the dout row) for j = t*B + b:
 * listing in (t, b) order is what makes a stable sort by token keep each
 * token's positions in the CPU twin's summation order. */
static __global__ void embed_pairs_kernel(int32_t *__restrict__ keys, int32_t *__restrict__ vals,
                                          const int32_t *__restrict__ tokens, int B, int T) {
  const size_t n = (size_t)B * (size_t)T;
  for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
       j += (size_t)gridDim.x * blockDim.x) {
    const size_t t = j / (size_t)B, b = j % (size_t)B;
    const size_t row = b * (size_t)T + t;
    keys[j] = tokens[row];
    vals[j] = (int32_t)row;
  }
}

/* Block x starts a run when its sorted key differs from the previous one;
 * the other blocks return at once. The run's block adds the dout rows of
 * its positions, in sorted (= (t, b)) order, to dwte[token] for the
 * columns of block y. */
template <int DT>
static __global__ void __launch_bounds__(kRunThreads)
    embed_dwte_kernel(float *__restrict__ dwte, const void *__restrict__ dout,
                      const int32_t *__restrict__ keys, const int32_t *__restrict__ rows, int n,
                      int C) {
  const int i = blockIdx.x;
  const int32_t tok = keys[i];
  if (tok < 0 || (i > 0 && keys[i - 1] == tok)) return;
  const int col = blockIdx.y * kRunThreads + threadIdx.x;
  if (col >= C) return;
  const size_t c = (size_t)C;
  float *dst = dwte + (size_t)tok * c + (size_t)col;
  float acc = *dst;
  for (int j = i; j < n && keys[j] == tok; ++j) acc += load<DT>(dout, (size_t)rows[j] * c + col);
  *dst = acc;
}

/* dwpe[t, col] = (accumulate ? dwpe : 0) + sum over b ascending, written as
 * the CPU twin does (the first row copied when overwriting), so the fp32
 * additions are the same. A negative token at (b, t) makes the row NaN. */
template <int DT>
static __global__ void embed_dwpe_kernel(float *__restrict__ dwpe, const void *__restrict__ dout,
                                         const int32_t *__restrict__ tokens, int B, int T, int C,
                                         int accumulate) {
  const size_t c = (size_t)C, tc = (size_t)T * c;
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < tc;
       e += (size_t)gridDim.x * blockDim.x) {
    const size_t t = e / c;
    float acc = accumulate ? dwpe[e] : load<DT>(dout, e);
    bool bad = tokens[t] < 0;
    for (int b = accumulate ? 0 : 1; b < B; ++b) {
      acc += load<DT>(dout, (size_t)b * tc + e);
      bad |= tokens[(size_t)b * T + t] < 0;
    }
    dwpe[e] = bad ? __int_as_float(0x7FC00000) : acc;
  }
}

bool valid_dt(ddp_dtype_t dt) {
  return dt == DDP_DTYPE_F32 || dt == DDP_DTYPE_BF16 || dt == DDP_DTYPE_F16;
}

ddp_status_t sort_temp_bytes(int n, size_t *bytes) {
  *bytes = 0;
  /* With a NULL temporary pointer CUB only computes the size. */
  DDP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, *bytes, (const int32_t *)nullptr,
                                                 (int32_t *)nullptr, (const int32_t *)nullptr,
                                                 (int32_t *)nullptr, n));
  return DDP_OK;
}

template <int DT>
ddp_status_t launch_fwd(void *out, const int32_t *tokens, const void *wte, const void *wpe,
                        size_t n, int T, int C, cudaStream_t stream) {
  constexpr size_t vec_bytes = 4 * sizeof(typename Elem<DT>::T);
  const unsigned grid = (unsigned)(n < 65536 ? n : 65536);
  if (C % 4 == 0 && aligned(out, vec_bytes) && aligned(wte, vec_bytes) && aligned(wpe, vec_bytes))
    embed_fwd_kernel<DT, 4><<<grid, kRowThreads, 0, stream>>>(out, tokens, wte, wpe, n, T, C);
  else
    embed_fwd_kernel<DT, 1><<<grid, kRowThreads, 0, stream>>>(out, tokens, wte, wpe, n, T, C);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

template <int DT>
ddp_status_t launch_bwd(float *dwte, float *dwpe, const void *dout, const int32_t *tokens, int B,
                        int T, int C, int accumulate, char *scratch, size_t temp_bytes,
                        cudaStream_t stream) {
  const int n = B * T;
  const size_t pair = align_up((size_t)n * sizeof(int32_t));
  int32_t *keys = (int32_t *)scratch, *vals = (int32_t *)(scratch + pair);
  int32_t *keys_sorted = (int32_t *)(scratch + 2 * pair);
  int32_t *vals_sorted = (int32_t *)(scratch + 3 * pair);
  void *temp = scratch + 4 * pair;

  embed_dwpe_kernel<DT><<<grid_for((size_t)T * (size_t)C), kEwThreads, 0, stream>>>(
      dwpe, dout, tokens, B, T, C, accumulate);
  DDP_CUDA_CHECK(cudaGetLastError());
  embed_pairs_kernel<<<grid_for((size_t)n), kEwThreads, 0, stream>>>(keys, vals, tokens, B, T);
  DDP_CUDA_CHECK(cudaGetLastError());
  /* Radix sort is stable: equal tokens keep their (t, b) order. */
  DDP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, keys_sorted, vals,
                                                 vals_sorted, n, 0, 32, stream));
  const dim3 grid((unsigned)n, (unsigned)((C + kRunThreads - 1) / kRunThreads));
  embed_dwte_kernel<DT>
      <<<grid, kRunThreads, 0, stream>>>(dwte, dout, keys_sorted, vals_sorted, n, C);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

}  // namespace

extern "C" ddp_status_t ddp_cuda_embed_fwd(ddp_dtype_t dt, void *out, const int32_t *tokens,
                                           const void *wte, const void *wpe, int B, int T, int C,
                                           cudaStream_t stream) {
  if (!valid_dt(dt))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "embed_fwd: activation dtype %s (%d) is not fp32, bf16 or fp16",
             ddp_dtype_name(dt), (int)dt);
  if (!(B > 0 && T > 0 && C > 0))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "embed_fwd: sizes B=%d T=%d C=%d must be positive", B, T, C);
  if (!out || !tokens || !wte || !wpe) DDP_FAIL(DDP_ERR_INVALID_ARG, "embed_fwd: NULL pointer");
  const size_t esz = ddp_dtype_size(dt);
  if (!aligned(out, esz) || !aligned(wte, esz) || !aligned(wpe, esz) || !aligned(tokens, 4))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "embed_fwd: a buffer is not aligned to its element size");
  const size_t n = (size_t)B * (size_t)T;
  switch (dt) {
    case DDP_DTYPE_F32:
      return launch_fwd<DDP_DTYPE_F32>(out, tokens, wte, wpe, n, T, C, stream);
    case DDP_DTYPE_BF16:
      return launch_fwd<DDP_DTYPE_BF16>(out, tokens, wte, wpe, n, T, C, stream);
    default:
      return launch_fwd<DDP_DTYPE_F16>(out, tokens, wte, wpe, n, T, C, stream);
  }
}

extern "C" ddp_status_t ddp_cuda_embed_bwd_scratch_bytes(int64_t n, size_t *bytes) {
  *bytes = 0;
  if (n < 1 || n > INT_MAX)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "embed_bwd: %lld tokens is outside [1, %d]", (long long)n,
             INT_MAX);
  size_t temp = 0;
  DDP_CHECK(sort_temp_bytes((int)n, &temp));
  /* kAlign of slack: the scratch base may be less aligned than kAlign. */
  *bytes = kAlign + 4 * align_up((size_t)n * sizeof(int32_t)) + temp;
  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_embed_bwd(ddp_dtype_t dt, float *dwte, float *dwpe,
                                           const void *dout, const int32_t *tokens, int B, int T,
                                           int C, int accumulate, void *scratch,
                                           size_t scratch_bytes, cudaStream_t stream) {
  if (!valid_dt(dt))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "embed_bwd: activation dtype %s (%d) is not fp32, bf16 or fp16",
             ddp_dtype_name(dt), (int)dt);
  if (!(B > 0 && T > 0 && C > 0))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "embed_bwd: sizes B=%d T=%d C=%d must be positive", B, T, C);
  if ((int64_t)B * T > INT_MAX)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "embed_bwd: B*T = %lld tokens exceeds %d", (long long)B * T,
             INT_MAX);
  if (!dwte || !dwpe || !dout || !tokens || !scratch)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "embed_bwd: NULL pointer");
  if (!aligned(dout, ddp_dtype_size(dt)) || !aligned(dwte, 4) || !aligned(dwpe, 4) ||
      !aligned(tokens, 4))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "embed_bwd: a buffer is not aligned to its element size");
  size_t need = 0;
  DDP_CHECK(ddp_cuda_embed_bwd_scratch_bytes((int64_t)B * T, &need));
  if (scratch_bytes < need)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "embed_bwd: %zu bytes of scratch, %zu needed for B*T = %d",
             scratch_bytes, need, B * T);
  const size_t pad = (kAlign - (uintptr_t)scratch % kAlign) % kAlign;
  char *base = (char *)scratch + pad;
  const size_t temp_bytes = need - kAlign - 4 * align_up((size_t)B * T * sizeof(int32_t));
  switch (dt) {
    case DDP_DTYPE_F32:
      return launch_bwd<DDP_DTYPE_F32>(dwte, dwpe, dout, tokens, B, T, C, accumulate, base,
                                       temp_bytes, stream);
    case DDP_DTYPE_BF16:
      return launch_bwd<DDP_DTYPE_BF16>(dwte, dwpe, dout, tokens, B, T, C, accumulate, base,
                                        temp_bytes, stream);
    default:
      return launch_bwd<DDP_DTYPE_F16>(dwte, dwpe, dout, tokens, B, T, C, accumulate, base,
                                       temp_bytes, stream);
  }
}
