/* Convolutional-network kernels of ours (launchers in kernels/conv_ops.h):
 * ReLU, add + ReLU, global average and max pooling, the batch-norm apply
 * passes and the half weight-gradient fold; the batch-norm reductions are
 * bn_reduce.cu's.
 *
 * Element-wise kernels are grid-stride loops in which each thread reads the
 * inputs of the elements it writes and nothing else, so an output may be
 * the same buffer as an input. Pooling backwards are gathers (one thread
 * per input element), never scatters: no atomics, so every result repeats
 * bit for bit. Arithmetic is fp32; half values are widened exactly and
 * each stored value is rounded once to nearest even (nn_io.cuh). */
#include <stdint.h>

#include <initializer_list>
#include <type_traits>

#include "conv_common.cuh"
#include "conv_ops.h"

namespace {

using namespace ddp_nn;
using namespace ddp_conv;

/* ---- activations ---------------------------------------------------------- */

enum { kRelu = 0, kAddRelu = 1, kReluBwd = 2 };

/* kRelu: out = relu(x); kAddRelu: out = relu(x + y); kReluBwd: out = y > 0
 * ? x : 0 with x = dout, y = the forward's output. A NaN input gives 0, as
 * the comparison form of the CPU twin. */
template <int OP>
__device__ __forceinline__ float relu_op(float x, float y) {
  if constexpr (OP == kRelu) {
    return x > 0.0f ? x : 0.0f;
  } else if constexpr (OP == kAddRelu) {
    const float v = x + y;
    return v > 0.0f ? v : 0.0f;
  } else {
    return y > 0.0f ? x : 0.0f;
  }
}

/* VEC 4: each thread moves groups of four elements per access (8 bytes of
 * a half type, 16 of fp32), the n % 4 leftover going to the grid's first
 * threads; the buffers are aligned to four elements. These passes are
 * bandwidth-bound, and 2-byte accesses left an H100 at 1.3-1.6 TB/s where
 * the grouped ones reach 2.9 (Nsight Compute, ResNet-50 bf16). Same
 * arithmetic per element either way, so the same bits. */
template <int DT, int OP, int VEC>
__global__ void relu_kernel(void *out, const void *x, const void *y, size_t n) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t done = 0;
  if constexpr (VEC == 4) {
    const size_t groups = n / 4;
    for (size_t g = tid; g < groups; g += stride) {
      const F4 a = load4<DT>(x, g);
      const F4 b = OP == kRelu ? a : load4<DT>(y, g);
      F4 r;
#pragma unroll
      for (int k = 0; k < 4; ++k) r.v[k] = relu_op<OP>(a.v[k], b.v[k]);
      store4<DT>(out, g, r);
    }
    done = groups * 4;
  }
  for (size_t i = done + tid; i < n; i += stride)
    store<DT>(out, i, relu_op<OP>(load<DT>(x, i), OP == kRelu ? 0.0f : load<DT>(y, i)));
}

/* Whether every buffer given (NULL ones are skipped) holds whole aligned
 * groups of four dt elements. */
bool aligned4(ddp_dtype_t dt, const void *a, const void *b, const void *c) {
  const size_t bytes = 4 * ddp_dtype_size(dt);
  return (!a || aligned(a, bytes)) && (!b || aligned(b, bytes)) && (!c || aligned(c, bytes));
}

/* launch(v) with v an integral constant: 4 when `grouped` (the kernel's
 * four-element version, over n / 4 groups), else 1 (its scalar version,
 * for misaligned buffers or channels not a multiple of 4). */
template <typename Launch>
void grouped_or_scalar(bool grouped, Launch launch) {
  if (grouped)
    launch(std::integral_constant<int, 4>{});
  else
    launch(std::integral_constant<int, 1>{});
}

template <int OP>
ddp_status_t relu_launch(const char *what, ddp_dtype_t dt, void *out, const void *x, const void *y,
                         size_t n, cudaStream_t s) {
  if (n == 0) return DDP_OK;
  CONV_DISPATCH(what, dt, grouped_or_scalar(aligned4(dt, out, x, y), [&](auto v) {
                  constexpr int V = decltype(v)::value;
                  relu_kernel<DT, OP, V><<<grid_for(n / V), kEwThreads, 0, s>>>(out, x, y, n);
                }););
  return DDP_OK;
}

/* ---- global average pooling ------------------------------------------------- */

template <int DT>
__global__ void avgpool_fwd_kernel(void *out, const void *inp, int N, int HW, int C) {
  const size_t total = (size_t)N * C, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    const size_t n = i / C, c = i % C;
    const size_t base = n * (size_t)HW * C + c;
    float acc = 0.0f;
    for (int p = 0; p < HW; ++p) acc += load<DT>(inp, base + (size_t)p * C);
    store<DT>(out, i, acc / (float)HW);
  }
}

template <int DT>
__global__ void avgpool_bwd_kernel(void *dinp, const void *dout, int N, int HW, int C) {
  const size_t total = (size_t)N * HW * C, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    const size_t c = i % C, n = i / ((size_t)HW * C);
    store<DT>(dinp, i, load<DT>(dout, n * C + c) / (float)HW);
  }
}

/* ---- max pooling ------------------------------------------------------------ */

/* VEC 4 (C a multiple of 4, buffers aligned to four elements): a thread
 * takes four neighbouring channels of one output (forward) or input
 * (backward) position, so the position's index arithmetic (64-bit
 * divisions, the window bounds) is done once for four elements and the
 * loads are 8 bytes (half) or 16 (fp32); each channel's comparisons and
 * sums run in the scalar kernel's order, so the bits are the same. The
 * scalar backward took 1.37 ms of a ResNet-50 bf16 step on an H100 for
 * 0.2 GB of gradient. */
template <int VEC>
struct Ws; /* VEC window positions of the forward's record, one access */
template <>
struct Ws<1> {
  uint16_t v[1];
  __device__ static Ws load(const uint16_t *ws, size_t g) { return Ws{{ws[g]}}; }
  __device__ void store(uint16_t *ws, size_t g) const { ws[g] = v[0]; }
};
template <>
struct Ws<4> {
  uint16_t v[4];
  __device__ static Ws load(const uint16_t *ws, size_t g) {
    const uint2 q = reinterpret_cast<const uint2 *>(ws)[g];
    return Ws{{(uint16_t)(q.x & 0xFFFFu), (uint16_t)(q.x >> 16), (uint16_t)(q.y & 0xFFFFu),
               (uint16_t)(q.y >> 16)}};
  }
  __device__ void store(uint16_t *ws, size_t g) const {
    reinterpret_cast<uint2 *>(ws)[g] =
        make_uint2(v[0] | ((uint32_t)v[1] << 16), v[2] | ((uint32_t)v[3] << 16));
  }
};

/* Group g of VEC elements of a DT buffer, as fp32 (VEC 1: element g). */
template <int DT, int VEC>
__device__ __forceinline__ F4 load_group(const void *p, size_t g) {
  if constexpr (VEC == 4) {
    return load4<DT>(p, g);
  } else {
    F4 f;
    f.v[0] = load<DT>(p, g);
    return f;
  }
}

template <int DT, int VEC>
__device__ __forceinline__ void store_group(void *p, size_t g, const F4 &f) {
  if constexpr (VEC == 4)
    store4<DT>(p, g, f);
  else
    store<DT>(p, g, f.v[0]);
}

template <int DT, int VEC>
__global__ void maxpool_fwd_kernel(void *out, uint16_t *ws, const void *inp,
                                   ddp_cuda_pool_dims_t d) {
  const int CG = d.C / VEC; /* channel groups */
  const size_t total = (size_t)d.N * d.OH * d.OW * CG, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int cg = (int)(i % CG);
    size_t t = i / CG;
    const int ow = (int)(t % d.OW);
    t /= d.OW;
    const int oh = (int)(t % d.OH);
    const size_t n = t / d.OH;
    const int h0 = oh * d.stride - d.pad, w0 = ow * d.stride - d.pad;
    F4 best = {};
    Ws<VEC> where;
#pragma unroll
    for (int k = 0; k < VEC; ++k) where.v[k] = 0xFFFFu; /* none yet */
    for (int kh = 0; kh < d.kernel; ++kh) {
      const int h = h0 + kh;
      if (h < 0 || h >= d.H) continue;
      for (int kw = 0; kw < d.kernel; ++kw) {
        const int w = w0 + kw;
        if (w < 0 || w >= d.W) continue;
        const F4 v = load_group<DT, VEC>(inp, ((n * d.H + h) * d.W + w) * CG + cg);
        const uint16_t pos = (uint16_t)(kh * d.kernel + kw);
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          if (where.v[k] == 0xFFFFu || v.v[k] > best.v[k]) best.v[k] = v.v[k], where.v[k] = pos;
      }
    }
    store_group<DT, VEC>(out, i, best);
    if (ws) where.store(ws, i);
  }
}

template <int DT, int VEC>
__global__ void maxpool_bwd_kernel(void *dinp, const void *dout, const uint16_t *ws,
                                   ddp_cuda_pool_dims_t d) {
  const int CG = d.C / VEC;
  const size_t total = (size_t)d.N * d.H * d.W * CG, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int cg = (int)(i % CG);
    size_t t = i / CG;
    const int w = (int)(t % d.W);
    t /= d.W;
    const int h = (int)(t % d.H);
    const size_t n = t / d.H;
    /* Windows oh with oh*stride - pad <= h < oh*stride - pad + kernel. */
    const int hp = h + d.pad, wp = w + d.pad;
    const int oh_lo = hp - d.kernel + 1 > 0 ? (hp - d.kernel + d.stride) / d.stride : 0;
    const int ow_lo = wp - d.kernel + 1 > 0 ? (wp - d.kernel + d.stride) / d.stride : 0;
    const int oh_hi = min(hp / d.stride, d.OH - 1), ow_hi = min(wp / d.stride, d.OW - 1);
    F4 acc = {};
    for (int oh = oh_lo; oh <= oh_hi; ++oh)
      for (int ow = ow_lo; ow <= ow_hi; ++ow) {
        const size_t o = ((n * d.OH + oh) * d.OW + ow) * CG + cg;
        const uint16_t pos = (uint16_t)((hp - oh * d.stride) * d.kernel + (wp - ow * d.stride));
        const Ws<VEC> won = Ws<VEC>::load(ws, o);
        const F4 g = load_group<DT, VEC>(dout, o);
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          if (won.v[k] == pos) acc.v[k] += g.v[k];
      }
    store_group<DT, VEC>(dinp, i, acc);
  }
}

/* ---- batch-norm apply ------------------------------------------------------ */

/* The channel of element i of an NHWC tensor as a grid-stride loop walks
 * it: one 64-bit remainder per thread, then an add and a compare a step.
 * A 64-bit remainder per element (dozens of instructions) costs about as
 * much as the element's memory traffic in these bandwidth-bound passes. */
struct ChannelWalk {
  int c, step, C;
  __device__ ChannelWalk(size_t i0, size_t stride, int channels)
      : c((int)(i0 % (size_t)channels)), step((int)(stride % (size_t)channels)), C(channels) {}
  __device__ void next() {
    c += step; /* both below C, so one subtraction wraps it */
    if (c >= C) c -= C;
  }
};

__device__ __forceinline__ float istd_of(const float *istd, const float *var, float eps, int c) {
  return istd ? istd[c] : 1.0f / sqrtf(var[c] + eps);
}

/* One channel's parameters as the apply kernels use them. */
struct BnChan {
  float mean, istd, gamma, beta;
};

/* The parameters of channels c..c+3 (c a multiple of 4) of per-channel
 * arrays: one 16-byte load each where the arrays are aligned to 16 bytes
 * (PV), else four. The apply kernels are bandwidth-bound, and four scalar
 * loads per parameter per group of four elements (plus a square root and
 * a division per element where the inverse std was not given) held them
 * near 2 TB/s on an H100 where a plain element-wise kernel reaches 2.9. */
template <bool PV>
__device__ __forceinline__ void chan4(float out[4], const float *a, int c) {
  if constexpr (PV) {
    const float4 v = *reinterpret_cast<const float4 *>(a + c);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) out[k] = a[c + k];
  }
}

/* mean, istd (given, or 1 / sqrt(var + eps) as the CPU twin computes it),
 * gamma and (beta may be NULL) beta of channels c..c+3. */
template <bool PV>
__device__ __forceinline__ void bn_chan4(BnChan p[4], const float *mean, const float *var,
                                         const float *istd, const float *gamma, const float *beta,
                                         float eps, int c) {
  float m[4], s[4], g[4], b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  chan4<PV>(m, mean, c);
  if (istd) {
    chan4<PV>(s, istd, c);
  } else {
    chan4<PV>(s, var, c);
#pragma unroll
    for (int k = 0; k < 4; ++k) s[k] = 1.0f / sqrtf(s[k] + eps);
  }
  chan4<PV>(g, gamma, c);
  if (beta) chan4<PV>(b, beta, c);
#pragma unroll
  for (int k = 0; k < 4; ++k) p[k] = BnChan{m[k], s[k], g[k], b[k]};
}

__device__ __forceinline__ BnChan bn_chan1(const float *mean, const float *var, const float *istd,
                                           const float *gamma, const float *beta, float eps,
                                           int c) {
  return BnChan{mean[c], istd_of(istd, var, eps, c), gamma[c], beta ? beta[c] : 0.0f};
}

/* The apply's epilogue (ddp_cuda_bn_apply_act_fwd): none, ReLU, or
 * the residual add and ReLU of a block's output. */
enum { kBnPlain = 0, kBnRelu = 1, kBnAddRelu = 2 };

/* v (the normalised value, fp32) through the epilogue, as the separate ops
 * would compute it: ReLU of the stored value (ReLU commutes with rounding
 * to dt, so it applies to v directly), or the stored value (v rounded to
 * dt) plus the residual, then the ReLU; the caller rounds the result once
 * more, as add_relu_fwd's store does. */
template <int DT, int EPI>
__device__ __forceinline__ float bn_epilogue(float v, float residual) {
  if constexpr (EPI == kBnRelu) {
    return v > 0.0f ? v : 0.0f;
  } else if constexpr (EPI == kBnAddRelu) {
    const float sum = to_f32<DT>(from_f32<DT>(v)) + residual;
    return sum > 0.0f ? sum : 0.0f;
  } else {
    return v;
  }
}

/* VEC 4 (C a multiple of 4, buffers aligned to four elements): a group of
 * four is four neighbouring channels of one position, so the walk steps
 * the group's first channel; PV: the per-channel arrays are aligned to 16
 * bytes (chan4). res: the residual (kBnAddRelu only). istd may be NULL
 * (computed from var). The arithmetic is the CPU twin's expression,
 * (x - mean) istd gamma + beta, with istd = 1 / sqrt(var + eps). */
template <int DT, int VEC, int EPI, bool PV>
__global__ void bn_apply_fwd_kernel(void *out, const void *x, const void *res, const float *mean,
                                    const float *var, const float *istd, const float *gamma,
                                    const float *beta, float eps, size_t n, int C) {
  const size_t stride = (size_t)gridDim.x * blockDim.x,
               i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  ChannelWalk ch(i0 * VEC, stride * VEC, C);
  for (size_t i = i0; i < n / VEC; i += stride, ch.next()) {
    if constexpr (VEC == 4) {
      const F4 v = load4<DT>(x, i);
      const F4 b = EPI == kBnAddRelu ? load4<DT>(res, i) : F4{};
      BnChan p[4];
      bn_chan4<PV>(p, mean, var, istd, gamma, beta, eps, ch.c);
      F4 r;
#pragma unroll
      for (int k = 0; k < 4; ++k)
        r.v[k] = bn_epilogue<DT, EPI>(
            bn_affine(v.v[k], p[k].mean, p[k].istd, p[k].gamma, p[k].beta), b.v[k]);
      store4<DT>(out, i, r);
    } else {
      const float b = EPI == kBnAddRelu ? load<DT>(res, i) : 0.0f;
      const BnChan p = bn_chan1(mean, var, istd, gamma, beta, eps, ch.c);
      store<DT>(
          out, i,
          bn_epilogue<DT, EPI>(bn_affine(load<DT>(x, i), p.mean, p.istd, p.gamma, p.beta), b));
    }
  }
}

__global__ void bn_running_kernel(float *rm, float *rv, const float *mean, const float *var,
                                  float momentum, float unbias, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  rm[c] = (1.0f - momentum) * rm[c] + momentum * mean[c];
  rv[c] = (1.0f - momentum) * rv[c] + momentum * (var[c] * unbias);
}

/* dinp of one element from its channel's parameters and the sums g0 =
 * g[c], g1 = g[C + c]: gamma istd (dy - g0/M - xhat istd g1/M). RELU: dy
 * is first masked by the forward's ReLU, recomputed from p (whose beta is
 * the forward's): kept where round((x - mean) istd gamma + beta) > 0, the
 * forward's own expression and rounding. */
template <int DT, int RELU>
__device__ __forceinline__ float bn_dinp(float dy, float x, const BnChan &p, float g0, float g1,
                                         float inv_m) {
  if constexpr (RELU) dy = relu_masked<DT>(dy, x, p.mean, p.istd, p.gamma, p.beta);
  const float xh = (x - p.mean) * p.istd;
  const float r = dy - g0 * inv_m - xh * p.istd * g1 * inv_m;
  return p.gamma * p.istd * r;
}

/* relu_beta: the forward's beta when RELU (the mask), else unused. */
template <int DT, int VEC, int RELU, bool PV>
__global__ void bn_apply_bwd_kernel(void *dinp, const void *dy, const void *x, const float *mean,
                                    const float *var, const float *istd_in, const float *gamma,
                                    const float *relu_beta, const float *g, float eps, float inv_m,
                                    size_t n, int C) {
  const size_t stride = (size_t)gridDim.x * blockDim.x,
               i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  ChannelWalk ch(i0 * VEC, stride * VEC, C);
  for (size_t i = i0; i < n / VEC; i += stride, ch.next()) {
    if constexpr (VEC == 4) {
      const F4 d = load4<DT>(dy, i), v = load4<DT>(x, i);
      BnChan p[4];
      bn_chan4<PV>(p, mean, var, istd_in, gamma, RELU ? relu_beta : NULL, eps, ch.c);
      float g0[4], g1[4];
      chan4<PV>(g0, g, ch.c);
      chan4<PV>(g1, g + C, ch.c);
      F4 r;
#pragma unroll
      for (int k = 0; k < 4; ++k)
        r.v[k] = bn_dinp<DT, RELU>(d.v[k], v.v[k], p[k], g0[k], g1[k], inv_m);
      store4<DT>(dinp, i, r);
    } else {
      const int c = ch.c;
      const BnChan p = bn_chan1(mean, var, istd_in, gamma, RELU ? relu_beta : NULL, eps, c);
      store<DT>(dinp, i,
                bn_dinp<DT, RELU>(load<DT>(dy, i), load<DT>(x, i), p, g[c], g[C + c], inv_m));
    }
  }
}

__global__ void bn_param_grad_kernel(float *dgamma, float *dbeta, const float *var,
                                     const float *istd, const float *l, float eps, int C,
                                     int accumulate) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const float dg = l[C + c] * istd_of(istd, var, eps, c), db = l[c];
  dgamma[c] = accumulate ? dgamma[c] + dg : dg;
  dbeta[c] = accumulate ? dbeta[c] + db : db;
}

/* ---- convolution helpers -------------------------------------------------- */

template <int DT>
__global__ void dw_fold_kernel(float *dw, const void *src, size_t n, int accumulate) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = load<DT>(src, i);
    dw[i] = accumulate ? dw[i] + v : v;
  }
}

unsigned blocks_for(int n) {
  return (unsigned)((n + kEwThreads - 1) / kEwThreads);
}

}  // namespace

extern "C" ddp_status_t ddp_cuda_relu_fwd(ddp_dtype_t dt, void *out, const void *inp, size_t n,
                                          cudaStream_t stream) {
  return relu_launch<kRelu>("relu_fwd", dt, out, inp, inp, n, stream);
}

extern "C" ddp_status_t ddp_cuda_add_relu_fwd(ddp_dtype_t dt, void *out, const void *a,
                                              const void *b, size_t n, cudaStream_t stream) {
  return relu_launch<kAddRelu>("add_relu_fwd", dt, out, a, b, n, stream);
}

extern "C" ddp_status_t ddp_cuda_relu_bwd(ddp_dtype_t dt, void *dinp, const void *dout,
                                          const void *out, size_t n, cudaStream_t stream) {
  return relu_launch<kReluBwd>("relu_bwd", dt, dinp, dout, out, n, stream);
}

extern "C" ddp_status_t ddp_cuda_avgpool_fwd(ddp_dtype_t dt, void *out, const void *inp, int N,
                                             int HW, int C, cudaStream_t stream) {
  const size_t n = (size_t)N * C;
  CONV_DISPATCH("avgpool_fwd", dt,
                avgpool_fwd_kernel<DT>
                <<<grid_for(n), kEwThreads, 0, stream>>>(out, inp, N, HW, C););

  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_avgpool_bwd(ddp_dtype_t dt, void *dinp, const void *dout, int N,
                                             int HW, int C, cudaStream_t stream) {
  const size_t n = (size_t)N * HW * C;
  CONV_DISPATCH("avgpool_bwd", dt,
                avgpool_bwd_kernel<DT>
                <<<grid_for(n), kEwThreads, 0, stream>>>(dinp, dout, N, HW, C););

  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_maxpool_fwd(ddp_dtype_t dt, void *out, uint16_t *ws,
                                             const void *inp, const ddp_cuda_pool_dims_t *d,
                                             cudaStream_t stream) {
  const size_t n = (size_t)d->N * d->OH * d->OW * d->C;
  const ddp_cuda_pool_dims_t dims = *d;
  const bool grouped = d->C % 4 == 0 && aligned4(dt, out, inp, NULL) && (!ws || aligned(ws, 8));
  CONV_DISPATCH("maxpool_fwd", dt, grouped_or_scalar(grouped, [&](auto v) {
                  constexpr int V = decltype(v)::value;
                  maxpool_fwd_kernel<DT, V>
                      <<<grid_for(n / V), kEwThreads, 0, stream>>>(out, ws, inp, dims);
                }););

  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_maxpool_bwd(ddp_dtype_t dt, void *dinp, const void *dout,
                                             const uint16_t *ws, const ddp_cuda_pool_dims_t *d,
                                             cudaStream_t stream) {
  const size_t n = (size_t)d->N * d->H * d->W * d->C;
  const ddp_cuda_pool_dims_t dims = *d;
  const bool grouped = d->C % 4 == 0 && aligned4(dt, dinp, dout, NULL) && aligned(ws, 8);
  CONV_DISPATCH("maxpool_bwd", dt, grouped_or_scalar(grouped, [&](auto v) {
                  constexpr int V = decltype(v)::value;
                  maxpool_bwd_kernel<DT, V>
                      <<<grid_for(n / V), kEwThreads, 0, stream>>>(dinp, dout, ws, dims);
                }););

  return DDP_OK;
}

/* launch(v, pv) with integral constants: the four-element version (v 4)
 * where `grouped`, with 16-byte parameter loads (pv) where every
 * per-channel array given is aligned to 16 bytes; else the scalar version. */
template <typename Launch>
void grouped_params(bool grouped, std::initializer_list<const float *> params, Launch launch) {
  bool p16 = grouped;
  for (const float *p : params) p16 = p16 && (!p || aligned(p, 16));
  if (p16)
    launch(std::integral_constant<int, 4>{}, std::true_type{});
  else if (grouped)
    launch(std::integral_constant<int, 4>{}, std::false_type{});
  else
    launch(std::integral_constant<int, 1>{}, std::false_type{});
}

template <int EPI>
ddp_status_t bn_apply_fwd_launch(ddp_dtype_t dt, void *out, const void *x, const void *res,
                                 const float *mean, const float *var, const float *istd,
                                 const float *gamma, const float *beta, float eps, size_t n, int C,
                                 cudaStream_t stream) {
  const bool grouped = C % 4 == 0 && aligned4(dt, out, x, res);
  CONV_DISPATCH(
      "bn_apply_fwd", dt,
      grouped_params(grouped, {mean, istd ? istd : var, gamma, beta}, [&](auto v, auto pv) {
        constexpr int V = decltype(v)::value;
        constexpr bool PV = decltype(pv)::value;
        bn_apply_fwd_kernel<DT, V, EPI, PV><<<grid_for(n / V), kEwThreads, 0, stream>>>(
            out, x, res, mean, var, istd, gamma, beta, eps, n, C);
      }););
  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_bn_apply_act_fwd(ddp_dtype_t dt, void *out, float *running_mean,
                                                  float *running_var, const void *x,
                                                  const float *mean, const float *var,
                                                  const float *istd, const float *gamma,
                                                  const float *beta, float eps, float momentum,
                                                  float unbias, int64_t M, int C, int relu,
                                                  const void *residual, cudaStream_t stream) {
  const size_t n = (size_t)M * C;
  if (residual)
    DDP_CHECK(bn_apply_fwd_launch<kBnAddRelu>(dt, out, x, residual, mean, var, istd, gamma, beta,
                                              eps, n, C, stream));
  else if (relu)
    DDP_CHECK(bn_apply_fwd_launch<kBnRelu>(dt, out, x, NULL, mean, var, istd, gamma, beta, eps, n,
                                           C, stream));
  else
    DDP_CHECK(bn_apply_fwd_launch<kBnPlain>(dt, out, x, NULL, mean, var, istd, gamma, beta, eps, n,
                                            C, stream));
  if (running_mean) {
    bn_running_kernel<<<blocks_for(C), kEwThreads, 0, stream>>>(running_mean, running_var, mean,
                                                                var, momentum, unbias, C);
    DDP_CUDA_CHECK(cudaGetLastError());
  }
  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_bn_apply_fwd(ddp_dtype_t dt, void *out, float *running_mean,
                                              float *running_var, const void *x, const float *mean,
                                              const float *var, const float *gamma,
                                              const float *beta, float eps, float momentum,
                                              float unbias, int64_t M, int C, cudaStream_t stream) {
  return ddp_cuda_bn_apply_act_fwd(dt, out, running_mean, running_var, x, mean, var, NULL, gamma,
                                   beta, eps, momentum, unbias, M, C, 0, NULL, stream);
}

extern "C" ddp_status_t ddp_cuda_bn_apply_bwd(ddp_dtype_t dt, void *dinp, float *dgamma,
                                              float *dbeta, const void *dy, const void *x,
                                              const float *mean, const float *var,
                                              const float *istd, const float *gamma, const float *g,
                                              const float *l, float eps, double M_total, int64_t M,
                                              int C, int accumulate, const ddp_cuda_bn_relu_t *relu,
                                              cudaStream_t stream) {
  /* the mask is recomputed from the apply's own mean, istd and gamma */
  if (relu && (!istd || relu->istd != istd || relu->gamma != gamma))
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "bn_apply_bwd: the ReLU's mask needs the apply's own istd and gamma");
  const size_t n = (size_t)M * C;
  const float inv_m = (float)(1.0 / M_total);
  const float *relu_beta = relu ? relu->beta : NULL;
  const bool grouped = C % 4 == 0 && aligned4(dt, dinp, dy, x);
  CONV_DISPATCH(
      "bn_apply_bwd", dt,
      grouped_params(grouped, {mean, istd ? istd : var, gamma, relu_beta, g}, [&](auto v, auto pv) {
        constexpr int V = decltype(v)::value;
        constexpr bool PV = decltype(pv)::value;
        const unsigned grid = grid_for(n / V);
        if (relu)
          bn_apply_bwd_kernel<DT, V, 1, PV><<<grid, kEwThreads, 0, stream>>>(
              dinp, dy, x, mean, var, istd, gamma, relu_beta, g, eps, inv_m, n, C);
        else
          bn_apply_bwd_kernel<DT, V, 0, PV><<<grid, kEwThreads, 0, stream>>>(
              dinp, dy, x, mean, var, istd, gamma, relu_beta, g, eps, inv_m, n, C);
      }););
  if (dgamma)
    bn_param_grad_kernel<<<blocks_for(C), kEwThreads, 0, stream>>>(dgamma, dbeta, var, istd, l, eps,
                                                                   C, accumulate);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_conv_dw_fold(ddp_dtype_t dt, float *dw, const void *src, size_t n,
                                              int accumulate, cudaStream_t stream) {
  if (n == 0) return DDP_OK;
  CONV_DISPATCH("conv_bwd_weights", dt,
                dw_fold_kernel<DT>
                <<<grid_for(n), kEwThreads, 0, stream>>>(dw, src, n, accumulate););

  return DDP_OK;
}
