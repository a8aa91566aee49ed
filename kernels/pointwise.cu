/* Element-wise nn kernels: GELU forward and backward, residual add
 * (launchers declared in kernels/pointwise.h; CPU twins in
 * src/backend/cpu/cpu_nn.c).
 *
 * One templated grid-stride kernel serves all three: each thread loads its
 * elements of both inputs, then stores the output element(s) it loaded them
 * for. Since no thread ever writes an element another thread reads, out may
 * be the same buffer as an input (add's out == a, gelu_bwd's dinp == dout);
 * that is also why no pointer here is __restrict__. Indices are size_t.
 * When every buffer is aligned to four elements, each thread moves four
 * elements per access (16 bytes fp32, 8 bytes half); the leftover n % 4
 * elements go to the first threads of the grid. */
#include <math.h>

#include "core/foreign_check.h"
#include "nn_io.cuh"
#include "pointwise.h"

namespace {

using namespace ddp_nn;

/* GELU, tanh form, computed as x * sigmoid(2u) = x / (1 + exp(-2u)) with
 * u = sqrt(2/pi) (x + 0.044715 x^3) and -2u capped at 80: the same formula
 * as the CPU twin (see cpu_nn.c for why it is written this way). */
constexpr float kGeluK0 = 0.7978845608028654f; /* sqrt(2/pi) */
constexpr float kGeluK1 = 0.044715f;

struct GeluFwd {
  static constexpr bool kUnary = true;
  __device__ __forceinline__ float operator()(float x, float) const {
    const float x2 = x * x;
    const float u = kGeluK0 * (x + kGeluK1 * x2 * x);
    const float e = expf(fminf(-2.0f * u, 80.0f));
    return x / (1.0f + e);
  }
};

/* x = inp, g = dout: g * d/dx [x sigmoid(2u)] = g (s + 2 x s (1 - s) u')
 * with s = 1 / (1 + e) and 1 - s = e s. */
struct GeluBwd {
  static constexpr bool kUnary = false;
  __device__ __forceinline__ float operator()(float x, float g) const {
    const float x2 = x * x;
    const float u = kGeluK0 * (x + kGeluK1 * x2 * x);
    const float du = kGeluK0 * (1.0f + 3.0f * kGeluK1 * x2);
    const float e = expf(fminf(-2.0f * u, 80.0f));
    const float sg = 1.0f / (1.0f + e);
    return g * sg * (1.0f + 2.0f * x * e * sg * du);
  }
};

struct Add {
  static constexpr bool kUnary = false;
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

template <int DT, typename Op>
__device__ __forceinline__ float apply(Op op, const void *x, const void *y, size_t i) {
  const float a = load<DT>(x, i);
  return op(a, Op::kUnary ? a : load<DT>(y, i));
}

/* out[i] = op(x[i], y[i]); a unary op (Op::kUnary) gets y == x and y is
 * never loaded. */
template <int DT, int VEC, typename Op>
static __global__ void ew_kernel(void *out, const void *x, const void *y, size_t n, Op op) {
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  if constexpr (VEC == 4) {
    const size_t groups = n / 4;
    for (size_t g = tid; g < groups; g += stride) {
      const F4 a = load4<DT>(x, g);
      const F4 b = Op::kUnary ? a : load4<DT>(y, g);
      F4 r;
#pragma unroll
      for (int k = 0; k < 4; ++k) r.v[k] = op(a.v[k], b.v[k]);
      store4<DT>(out, g, r);
    }
    const size_t i = groups * 4 + tid;
    if (i < n) store<DT>(out, i, apply<DT>(op, x, y, i));
  } else {
    for (size_t i = tid; i < n; i += stride) store<DT>(out, i, apply<DT>(op, x, y, i));
  }
}

template <int DT, typename Op>
ddp_status_t launch_dt(void *out, const void *x, const void *y, size_t n, Op op,
                       cudaStream_t stream) {
  constexpr size_t vec_bytes = 4 * sizeof(typename Elem<DT>::T);
  if (aligned(out, vec_bytes) && aligned(x, vec_bytes) && aligned(y, vec_bytes))
    ew_kernel<DT, 4><<<grid_for(n / 4), kEwThreads, 0, stream>>>(out, x, y, n, op);
  else
    ew_kernel<DT, 1><<<grid_for(n), kEwThreads, 0, stream>>>(out, x, y, n, op);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

/* Validates and dispatches on dt. `what` names the op in error messages. */
template <typename Op>
ddp_status_t launch(const char *what, ddp_dtype_t dt, void *out, const void *x, const void *y,
                    size_t n, Op op, cudaStream_t stream) {
  if (dt != DDP_DTYPE_F32 && dt != DDP_DTYPE_BF16 && dt != DDP_DTYPE_F16)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: activation dtype %s (%d) is not fp32, bf16 or fp16", what,
             ddp_dtype_name(dt), (int)dt);
  if (n == 0) return DDP_OK;
  if (!out || !x || !y) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: NULL pointer with n = %zu", what, n);
  const size_t esz = ddp_dtype_size(dt);
  /* A misaligned element access faults on the device. */
  if (!aligned(out, esz) || !aligned(x, esz) || !aligned(y, esz))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: a buffer is not aligned to its %zu-byte elements", what,
             esz);
  switch (dt) {
    case DDP_DTYPE_F32:
      return launch_dt<DDP_DTYPE_F32>(out, x, y, n, op, stream);
    case DDP_DTYPE_BF16:
      return launch_dt<DDP_DTYPE_BF16>(out, x, y, n, op, stream);
    default:
      return launch_dt<DDP_DTYPE_F16>(out, x, y, n, op, stream);
  }
}

}  // namespace

extern "C" ddp_status_t ddp_cuda_gelu_fwd(ddp_dtype_t dt, void *out, const void *inp, size_t n,
                                          cudaStream_t stream) {
  return launch("gelu_fwd", dt, out, inp, inp, n, GeluFwd{}, stream);
}

extern "C" ddp_status_t ddp_cuda_gelu_bwd(ddp_dtype_t dt, void *dinp, const void *inp,
                                          const void *dout, size_t n, cudaStream_t stream) {
  return launch("gelu_bwd", dt, dinp, inp, dout, n, GeluBwd{}, stream);
}

extern "C" ddp_status_t ddp_cuda_add(ddp_dtype_t dt, void *out, const void *a, const void *b,
                                     size_t n, cudaStream_t stream) {
  return launch("add", dt, out, a, b, n, Add{}, stream);
}
