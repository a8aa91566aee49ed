/* The decode-step attention kernel (kernels/attention_decode.h).
 *
 * One block per (sequence, head), kThreads threads. A decode step has a
 * single query row, so there is no GEMM to batch; the work is reading the
 * cached keys and values once each, which this does in the CPU twin's
 * order of operations: a first pass over the keys for the maximum score,
 * then chunks of kChunk keys whose softmax weights go to shared memory and
 * are summed against the values by one thread per output channel. The
 * scores are fp32 dot products of exactly widened operands; the sum of the
 * weights and the output are fp32, the output rounded once to dt.
 * Deterministic: fixed-order reductions, no atomics. */
#include <math.h>

#include "attention_decode.h"
#include "core/foreign_check.h"
#include "nn_io.cuh"

using namespace ddp_nn;

namespace {

constexpr int kThreads = 128;
constexpr int kChunk = 1024;
constexpr int kPerThread = DDP_CUDA_DECODE_MAX_HS / kThreads;

template <int DT>
__device__ float dot(const float *q, const void *qkv, size_t k, int hs) {
  float acc = 0.0f;
  for (int i = 0; i < hs; ++i) acc += q[i] * load<DT>(qkv, k + (size_t)i);
  return acc;
}

template <int DT>
__global__ void __launch_bounds__(kThreads)
    decode_kernel(void *out, const void *qkv, int Tc, int t, int C, int NH, float scale) {
  __shared__ float q[DDP_CUDA_DECODE_MAX_HS];
  __shared__ float p[kChunk];
  __shared__ float red[32];
  const int b = blockIdx.x / NH, h = blockIdx.x % NH, hs = C / NH;
  const size_t row = 3 * (size_t)C, base = (size_t)b * (size_t)Tc * row;
  const size_t ko = (size_t)C + (size_t)h * hs;
  for (int d = threadIdx.x; d < hs; d += kThreads)
    q[d] = load<DT>(qkv, base + (size_t)t * row + (size_t)h * hs + d);
  __syncthreads();
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += kThreads)
    mx = fmaxf(mx, dot<DT>(q, qkv, base + (size_t)j * row + ko, hs) * scale);
  mx = block_max(mx, red);
  float acc[kPerThread] = {};
  float part = 0.0f;
  for (int c0 = 0; c0 <= t; c0 += kChunk) {
    const int n = t + 1 - c0 < kChunk ? t + 1 - c0 : kChunk;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const float w = expf(dot<DT>(q, qkv, base + (size_t)(c0 + i) * row + ko, hs) * scale - mx);
      p[i] = w;
      part += w;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int d = threadIdx.x + k * kThreads;
      if (d >= hs) break;
      const size_t v = base + (size_t)c0 * row + ko + (size_t)C + d;
      for (int i = 0; i < n; ++i) acc[k] += p[i] * load<DT>(qkv, v + (size_t)i * row);
    }
    __syncthreads(); /* p is rewritten by the next chunk */
  }
  /* the maximum contributes exp(0) = 1: the sum is >= 1 */
  const float inv = 1.0f / block_sum(part, red);
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int d = threadIdx.x + k * kThreads;
    if (d < hs) store<DT>(out, (size_t)b * C + (size_t)h * hs + d, acc[k] * inv);
  }
}

}  // namespace

extern "C" ddp_status_t ddp_cuda_attention_decode(ddp_dtype_t dt, void *out, const void *qkv,
                                                  int B, int Tc, int t, int C, int NH,
                                                  cudaStream_t stream) {
  if (dt != DDP_DTYPE_F32 && dt != DDP_DTYPE_BF16 && dt != DDP_DTYPE_F16)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "attention_decode: activation dtype %s (%d) is not fp32, bf16 or fp16",
             ddp_dtype_name(dt), (int)dt);
  if (!out || !qkv) DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: attention_decode: NULL pointer");
  if (B <= 0 || Tc <= 0 || C <= 0 || NH <= 0 || C % NH != 0 || t < 0 || t >= Tc)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "nn: attention_decode: sizes B=%d Tc=%d t=%d C=%d NH=%d (need t < Tc, NH | C)", B, Tc,
             t, C, NH);
  if (C / NH > DDP_CUDA_DECODE_MAX_HS)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "nn: attention_decode: head size %d > %d on CUDA", C / NH,
             DDP_CUDA_DECODE_MAX_HS);
  const float scale = 1.0f / sqrtf((float)(C / NH));
  const unsigned grid = (unsigned)B * (unsigned)NH;
  switch (dt) {
    case DDP_DTYPE_F32:
      decode_kernel<DDP_DTYPE_F32><<<grid, kThreads, 0, stream>>>(out, qkv, Tc, t, C, NH, scale);
      break;
    case DDP_DTYPE_BF16:
      decode_kernel<DDP_DTYPE_BF16><<<grid, kThreads, 0, stream>>>(out, qkv, Tc, t, C, NH, scale);
      break;
    default:
      decode_kernel<DDP_DTYPE_F16><<<grid, kThreads, 0, stream>>>(out, qkv, Tc, t, C, NH, scale);
      break;
  }
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}
