/* Device-side element access for the nn kernels (embed.cu, pointwise.cu,
 * xent.cu): loading an activation of storage type DT (ddptrain/dtype.h:
 * fp32, bf16, fp16) as fp32, storing an fp32 result rounded once to nearest
 * even, four-element vector groups, a grid size for grid-stride loops and
 * fixed-order warp/block reductions. CUDA C++ only; not part of the C
 * launcher headers.
 *
 * Widening is exact (bf16 is the top half of an fp32; fp16 converts exactly),
 * so a kernel computes on the same fp32 numbers as its CPU twin, which widens
 * with ddp_convert_host. */
#ifndef DDPTRAIN_KERNELS_NN_IO_CUH
#define DDPTRAIN_KERNELS_NN_IO_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>

#include "ddptrain/dtype.h"

namespace ddp_nn {

constexpr int kEwThreads = 256;
/* Enough blocks to fill every current GPU several times over; grid-stride
 * loops cover any n beyond that. */
constexpr size_t kEwMaxBlocks = 4096;

inline unsigned grid_for(size_t work) {
  size_t blocks = (work + kEwThreads - 1) / kEwThreads;
  if (blocks == 0) blocks = 1;
  return (unsigned)(blocks < kEwMaxBlocks ? blocks : kEwMaxBlocks);
}

inline bool aligned(const void *p, size_t bytes) {
  return ((uintptr_t)p % bytes) == 0;
}

template <int DT>
struct Elem;
template <>
struct Elem<DDP_DTYPE_F32> {
  using T = float;
};
template <>
struct Elem<DDP_DTYPE_BF16> {
  using T = uint16_t;
};
template <>
struct Elem<DDP_DTYPE_F16> {
  using T = uint16_t;
};

template <int DT>
__device__ __forceinline__ float to_f32(typename Elem<DT>::T v) {
  if constexpr (DT == DDP_DTYPE_F32)
    return v;
  else if constexpr (DT == DDP_DTYPE_BF16)
    return __uint_as_float((uint32_t)v << 16);
  else
    return __half2float(__ushort_as_half(v));
}

template <int DT>
__device__ __forceinline__ typename Elem<DT>::T from_f32(float x) {
  if constexpr (DT == DDP_DTYPE_F32)
    return x;
  else if constexpr (DT == DDP_DTYPE_BF16)
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  else
    return __half_as_ushort(__float2half_rn(x));
}

/* Element i of a DT buffer, as fp32. No __restrict__ and no read-only cache
 * path: several ops allow their output to alias an input. */
template <int DT>
__device__ __forceinline__ float load(const void *p, size_t i) {
  return to_f32<DT>(static_cast<const typename Elem<DT>::T *>(p)[i]);
}

template <int DT>
__device__ __forceinline__ void store(void *p, size_t i, float x) {
  static_cast<typename Elem<DT>::T *>(p)[i] = from_f32<DT>(x);
}

/* Group g = elements 4g .. 4g+3 in one access: 16 bytes for fp32, 8 bytes
 * for the 16-bit types (little-endian: element 4g is the low half). The
 * buffer must be aligned to four elements. */
struct F4 {
  float v[4];
};

template <int DT>
__device__ __forceinline__ F4 load4(const void *p, size_t g) {
  F4 f;
  if constexpr (DT == DDP_DTYPE_F32) {
    const float4 q = static_cast<const float4 *>(p)[g];
    f.v[0] = q.x, f.v[1] = q.y, f.v[2] = q.z, f.v[3] = q.w;
  } else {
    const uint2 q = static_cast<const uint2 *>(p)[g];
    f.v[0] = to_f32<DT>((uint16_t)(q.x & 0xFFFFu));
    f.v[1] = to_f32<DT>((uint16_t)(q.x >> 16));
    f.v[2] = to_f32<DT>((uint16_t)(q.y & 0xFFFFu));
    f.v[3] = to_f32<DT>((uint16_t)(q.y >> 16));
  }
  return f;
}

template <int DT>
__device__ __forceinline__ void store4(void *p, size_t g, const F4 &f) {
  if constexpr (DT == DDP_DTYPE_F32) {
    static_cast<float4 *>(p)[g] = make_float4(f.v[0], f.v[1], f.v[2], f.v[3]);
  } else {
    const uint32_t a = from_f32<DT>(f.v[0]), b = from_f32<DT>(f.v[1]);
    const uint32_t c = from_f32<DT>(f.v[2]), d = from_f32<DT>(f.v[3]);
    static_cast<uint2 *>(p)[g] = make_uint2(a | (b << 16), c | (d << 16));
  }
}

/* Butterfly reductions: every lane ends with the same value, and the order
 * of the operations depends only on the lane numbers, so results are
 * reproducible run to run. */
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

/* Block-wide reductions of one value per thread (blockDim.x a multiple of
 * 32, at most 1024); every thread gets the result, combined from the warp
 * results in warp order. `shm` holds 32 values and may be reused once the
 * call returns (the trailing barrier). */
__device__ __forceinline__ float block_max(float v, float *shm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) shm[warp] = v;
  __syncthreads();
  float r = shm[0];
  for (int w = 1; w < warps; ++w) r = fmaxf(r, shm[w]);
  __syncthreads();
  return r;
}

template <typename V>
__device__ __forceinline__ V block_sum(V v, V *shm) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) shm[warp] = v;
  __syncthreads();
  V r = shm[0];
  for (int w = 1; w < warps; ++w) r += shm[w];
  __syncthreads();
  return r;
}

}  // namespace ddp_nn

#endif
