/* Element-type conversion and fill kernels (launchers declared in kernels/kernels.h).
 *
 * The CPU twins are ddp_convert_host and the scalar conversions in src/core/dtype.c;
 * results here must be bit-identical to them, which the hardware conversions
 * give for every non-NaN input (round-to-nearest-even, subnormals, overflow
 * to inf). NaNs are the exception: PTX cvt may canonicalise a NaN its own way
 * (sm_90's cvt.f32.bf16 and cvt.f32.f16 included), so every conversion that
 * can see a NaN takes an explicit branch that produces dtype.h's policy:
 * narrowing gives sign|0x7FC0 (bf16) or sign|0x7E00 (fp16), widening keeps
 * the payload.
 *
 * Kernels use grid-stride loops with 64-bit indices; when both buffers are
 * aligned to four elements each thread moves four elements per iteration
 * with one vector load and one vector store. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include "core/foreign_check.h"
#include "kernels.h"

namespace {

constexpr int kThreads = 256;
/* Enough blocks to fill every current GPU several times over; the
 * grid-stride loops cover any n beyond that. */
constexpr size_t kMaxBlocks = 4096;

/* ---- per-element conversions on bit patterns --------------------------- */

__device__ __forceinline__ float widen_bf16(uint32_t h) {
  if ((h & 0x7FFFu) > 0x7F80u) return __uint_as_float(h << 16);
  return __bfloat162float(__ushort_as_bfloat16((unsigned short)h));
}

__device__ __forceinline__ float widen_f16(uint32_t h) {
  if ((h & 0x7FFFu) > 0x7C00u)
    return __uint_as_float(((h & 0x8000u) << 16) | 0x7F800000u | ((h & 0x3FFu) << 13));
  return __half2float(__ushort_as_half((unsigned short)h));
}

__device__ __forceinline__ uint32_t narrow_bf16(float x) {
  if (isnan(x)) return ((__float_as_uint(x) >> 16) & 0x8000u) | 0x7FC0u;
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

__device__ __forceinline__ uint32_t narrow_f16(float x) {
  if (isnan(x)) return ((__float_as_uint(x) >> 16) & 0x8000u) | 0x7E00u;
  return __half_as_ushort(__float2half_rn(x));
}

template <int S>
__device__ __forceinline__ float widen(uint32_t v) {
  if constexpr (S == DDP_DTYPE_F32)
    return __uint_as_float(v);
  else if constexpr (S == DDP_DTYPE_BF16)
    return widen_bf16(v);
  else
    return widen_f16(v);
}

template <int D>
__device__ __forceinline__ uint32_t narrow(float x) {
  if constexpr (D == DDP_DTYPE_F32)
    return __float_as_uint(x);
  else if constexpr (D == DDP_DTYPE_BF16)
    return narrow_bf16(x);
  else
    return narrow_f16(x);
}

template <int D, int S>
__device__ __forceinline__ uint32_t convert_one(uint32_t v) {
  return narrow<D>(widen<S>(v));
}

/* ---- loads and stores, scalar and four-wide ----------------------------- */

struct Four {
  uint32_t v[4];
};

template <int T>
__device__ __forceinline__ uint32_t load1(const void *__restrict__ p, size_t i) {
  if constexpr (T == DDP_DTYPE_F32)
    return static_cast<const uint32_t *>(p)[i];
  else
    return static_cast<const uint16_t *>(p)[i];
}

template <int T>
__device__ __forceinline__ void store1(void *__restrict__ p, size_t i, uint32_t v) {
  if constexpr (T == DDP_DTYPE_F32)
    static_cast<uint32_t *>(p)[i] = v;
  else
    static_cast<uint16_t *>(p)[i] = (uint16_t)v;
}

/* Group g is elements 4g .. 4g+3: one 16-byte access for fp32, one 8-byte
 * access for the 16-bit types (little-endian: element 4g is the low half). */
template <int T>
__device__ __forceinline__ Four load4(const void *__restrict__ p, size_t g) {
  Four f;
  if constexpr (T == DDP_DTYPE_F32) {
    uint4 q = static_cast<const uint4 *>(p)[g];
    f.v[0] = q.x, f.v[1] = q.y, f.v[2] = q.z, f.v[3] = q.w;
  } else {
    uint2 q = static_cast<const uint2 *>(p)[g];
    f.v[0] = q.x & 0xFFFFu, f.v[1] = q.x >> 16, f.v[2] = q.y & 0xFFFFu, f.v[3] = q.y >> 16;
  }
  return f;
}

template <int T>
__device__ __forceinline__ void store4(void *__restrict__ p, size_t g, Four f) {
  if constexpr (T == DDP_DTYPE_F32) {
    static_cast<uint4 *>(p)[g] = make_uint4(f.v[0], f.v[1], f.v[2], f.v[3]);
  } else {
    static_cast<uint2 *>(p)[g] = make_uint2(f.v[0] | (f.v[1] << 16), f.v[2] | (f.v[3] << 16));
  }
}

/* ---- kernels ------------------------------------------------------------ */

/* VEC == 4: groups of four in the grid-stride loop, then the first n % 4
 * threads of the grid convert the leftover elements (fewer than a block). */
template <int D, int S, int VEC>
static __global__ void convert_kernel(void *__restrict__ dst, const void *__restrict__ src,
                                      size_t n) {
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  if constexpr (VEC == 4) {
    const size_t groups = n / 4;
    for (size_t g = tid; g < groups; g += stride) {
      Four f = load4<S>(src, g);
#pragma unroll
      for (int k = 0; k < 4; ++k) f.v[k] = convert_one<D, S>(f.v[k]);
      store4<D>(dst, g, f);
    }
    const size_t i = groups * 4 + tid;
    if (i < n) store1<D>(dst, i, convert_one<D, S>(load1<S>(src, i)));
  } else {
    for (size_t i = tid; i < n; i += stride) store1<D>(dst, i, convert_one<D, S>(load1<S>(src, i)));
  }
}

/* T is the element's storage type. With VEC, dst is 16-byte aligned and
 * written as uint4 (the pattern replicated), then the first few threads
 * write the leftover elements. */
template <typename T, bool VEC>
static __global__ void fill_kernel(T *__restrict__ dst, T value, uint4 pattern, size_t n) {
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  if constexpr (VEC) {
    constexpr size_t per = sizeof(uint4) / sizeof(T);
    const size_t groups = n / per;
    uint4 *__restrict__ d4 = reinterpret_cast<uint4 *>(dst);
    for (size_t g = tid; g < groups; g += stride) d4[g] = pattern;
    const size_t i = groups * per + tid;
    if (i < n) dst[i] = value;
  } else {
    for (size_t i = tid; i < n; i += stride) dst[i] = value;
  }
}

/* ---- launch helpers ----------------------------------------------------- */

unsigned grid_for(size_t work) {
  size_t blocks = (work + kThreads - 1) / kThreads;
  if (blocks == 0) blocks = 1;
  return (unsigned)(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

bool aligned(const void *p, size_t bytes) {
  return ((uintptr_t)p % bytes) == 0;
}

template <int D, int S>
ddp_status_t launch_convert(void *dst, const void *src, size_t n, cudaStream_t stream) {
  constexpr size_t dsz = D == DDP_DTYPE_F32 ? 4 : 2;
  constexpr size_t ssz = S == DDP_DTYPE_F32 ? 4 : 2;
  if (aligned(dst, 4 * dsz) && aligned(src, 4 * ssz))
    convert_kernel<D, S, 4><<<grid_for(n / 4), kThreads, 0, stream>>>(dst, src, n);
  else
    convert_kernel<D, S, 1><<<grid_for(n), kThreads, 0, stream>>>(dst, src, n);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

template <typename T>
ddp_status_t launch_fill(void *dst, T value, size_t n, cudaStream_t stream) {
  T *d = static_cast<T *>(dst);
  if (aligned(dst, sizeof(uint4))) {
    uint32_t word = sizeof(T) == 4 ? (uint32_t)value : ((uint32_t)value | ((uint32_t)value << 16));
    uint4 pattern = make_uint4(word, word, word, word);
    fill_kernel<T, true>
        <<<grid_for(n / (sizeof(uint4) / sizeof(T))), kThreads, 0, stream>>>(d, value, pattern, n);
  } else {
    fill_kernel<T, false><<<grid_for(n), kThreads, 0, stream>>>(d, value, uint4{}, n);
  }
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

}  // namespace

/* ---- launchers ------------------------------------------------------------ */

extern "C" ddp_status_t ddp_cuda_convert(void *dst, ddp_dtype_t dst_dtype, const void *src,
                                         ddp_dtype_t src_dtype, size_t n, cudaStream_t stream) {
  if (!ddp_dtype_is_float(dst_dtype) || !ddp_dtype_is_float(src_dtype))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_convert: unsupported conversion %s (%d) -> %s (%d)",
             ddp_dtype_name(src_dtype), (int)src_dtype, ddp_dtype_name(dst_dtype), (int)dst_dtype);
  if (n == 0) return DDP_OK;
  const size_t dsz = ddp_dtype_size(dst_dtype), ssz = ddp_dtype_size(src_dtype);
  if (!dst || !src)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_convert: NULL %s with n = %zu", !dst ? "dst" : "src",
             n);
  if (n > SIZE_MAX / 4)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_convert: n = %zu overflows size_t", n);
  /* A misaligned element access is a fault on the device, not a slow path. */
  if (!aligned(dst, dsz))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_convert: dst %p not aligned to %zu bytes", dst, dsz);
  if (!aligned(src, ssz))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_convert: src %p not aligned to %zu bytes", src, ssz);
  const uintptr_t d0 = (uintptr_t)dst, s0 = (uintptr_t)src;
  if (d0 < s0 + n * ssz && s0 < d0 + n * dsz)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_convert: dst and src overlap");

  if (dst_dtype == src_dtype) {
    DDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dsz, cudaMemcpyDeviceToDevice, stream));
    return DDP_OK;
  }
  switch (dst_dtype * 4 + src_dtype) {
    case DDP_DTYPE_F32 * 4 + DDP_DTYPE_BF16:
      return launch_convert<DDP_DTYPE_F32, DDP_DTYPE_BF16>(dst, src, n, stream);
    case DDP_DTYPE_F32 * 4 + DDP_DTYPE_F16:
      return launch_convert<DDP_DTYPE_F32, DDP_DTYPE_F16>(dst, src, n, stream);
    case DDP_DTYPE_BF16 * 4 + DDP_DTYPE_F32:
      return launch_convert<DDP_DTYPE_BF16, DDP_DTYPE_F32>(dst, src, n, stream);
    case DDP_DTYPE_BF16 * 4 + DDP_DTYPE_F16:
      return launch_convert<DDP_DTYPE_BF16, DDP_DTYPE_F16>(dst, src, n, stream);
    case DDP_DTYPE_F16 * 4 + DDP_DTYPE_F32:
      return launch_convert<DDP_DTYPE_F16, DDP_DTYPE_F32>(dst, src, n, stream);
    case DDP_DTYPE_F16 * 4 + DDP_DTYPE_BF16:
      return launch_convert<DDP_DTYPE_F16, DDP_DTYPE_BF16>(dst, src, n, stream);
    default:
      break;
  }
  DDP_FAIL(DDP_ERR_INTERNAL, "ddp_cuda_convert: no kernel for %s -> %s", ddp_dtype_name(src_dtype),
           ddp_dtype_name(dst_dtype));
}

extern "C" ddp_status_t ddp_cuda_fill(void *dst, ddp_dtype_t dtype, float value, size_t n,
                                      cudaStream_t stream) {
  const size_t sz = ddp_dtype_size(dtype);
  if (sz == 0) DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_fill: invalid dtype %d", (int)dtype);
  /* The comparisons are false for NaN, and they bound the cast, which would
   * otherwise be undefined. */
  if (dtype == DDP_DTYPE_I32 && !(value >= -2147483648.0f && value < 2147483648.0f))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_fill: %g is not representable as int32", (double)value);
  if (n == 0) return DDP_OK;
  if (!dst) DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_fill: NULL dst with n = %zu", n);
  if (!aligned(dst, sz))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_cuda_fill: dst %p not aligned to its %zu-byte elements", dst,
             sz);

  switch (dtype) {
    case DDP_DTYPE_F32: {
      uint32_t bits;
      memcpy(&bits, &value, sizeof bits);
      return launch_fill<uint32_t>(dst, bits, n, stream);
    }
    case DDP_DTYPE_BF16:
      return launch_fill<uint16_t>(dst, ddp_f32_to_bf16(value), n, stream);
    case DDP_DTYPE_F16:
      return launch_fill<uint16_t>(dst, ddp_f32_to_f16(value), n, stream);
    case DDP_DTYPE_I32:
      return launch_fill<uint32_t>(dst, (uint32_t)(int32_t)value, n, stream);
    default:
      break;
  }
  DDP_FAIL(DDP_ERR_INTERNAL, "ddp_cuda_fill: no kernel for %s", ddp_dtype_name(dtype));
}
