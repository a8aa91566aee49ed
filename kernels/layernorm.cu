/* LayerNorm kernels: forward, the residual add fused with the forward, and
 * the backward with its deterministic parameter-gradient reduction
 * (launchers declared in kernels/layernorm.h).
 *
 * Forward: one warp per row. Each lane walks the channels lane, lane + 32,
 * ... (coalesced), and the row is read two more times after the first pass
 * (the mean, then the variance about the mean, then the output): a row is a
 * few KiB, so the later passes hit L1/L2, and taking the variance about the
 * computed mean keeps rows with a large offset accurate in fp32, where
 * E[x^2] - E[x]^2 would cancel. The fused op stores resid = a + b rounded to
 * dt in the first pass and reads its own stored values back in the others
 * (each lane only re-reads elements it wrote, so program order makes them
 * visible, and resid may alias a: a lane reads a[i] before writing
 * resid[i]). Nothing is __restrict__: resid aliases a by contract.
 *
 * Backward: the rows are split into at most DDP_CUDA_LN_BWD_GROUPS fixed,
 * contiguous groups, one warp each. A warp walks its rows in order, adds
 * each row's gradient into dinp (one rounding to dt per element, as the CPU
 * twin), and keeps running sums of dw and db for its group in its own slice
 * of the scratch (first row writes, later rows add: no memset). A second
 * kernel adds the group partials per channel in a fixed order and stores dw,
 * db (= or += per accumulate). No atomics, so results are bit-identical run
 * to run for the same N.
 *
 * Arithmetic is fp32 throughout; half values are loaded as bit patterns and
 * widened exactly, and each stored half value is rounded once to nearest
 * even. The CPU twins (src/backend/cpu/cpu_nn.c, cpu_nn_dtype.c) take their
 * statistics in double, so the two agree to fp32 summation error, not bit
 * for bit (the stored sum of the fused op is the exception: it is one
 * correctly rounded addition on both). */
#include <stdint.h>

#include <type_traits>

#include "core/foreign_check.h"
#include "layernorm.h"
#include "nn_io.cuh"

namespace {

constexpr int kWarp = 32;
constexpr int kRowThreads = 256; /* 8 warps: 8 rows (forward) or groups per block */
constexpr float kEps = 1e-5f;    /* PyTorch's default, as the CPU twin */
/* The reduction of the partials: 32 channels per block (one coalesced
 * segment per partial row) by 16 interleaved slices of the groups. */
constexpr int kRedX = 32;
constexpr int kRedY = 16;

using ddp_nn::load;
using ddp_nn::warp_sum;

/* v rounded to D (nearest even), as fp32. */
template <int D>
__device__ __forceinline__ float rounded(float v) {
  return ddp_nn::to_f32<D>(ddp_nn::from_f32<D>(v));
}

/* Stores v rounded to D and returns the stored value as fp32. */
template <int D>
__device__ __forceinline__ float store_get(void *p, int64_t i, float v) {
  const typename ddp_nn::Elem<D>::T h = ddp_nn::from_f32<D>(v);
  static_cast<typename ddp_nn::Elem<D>::T *>(p)[i] = h;
  return ddp_nn::to_f32<D>(h);
}

/* kResid: resid = a + b first and x = resid; otherwise x = a (inp). */
template <int D, bool kResid>
__global__ void ln_fwd_kernel(void *resid, void *out, float *mean, float *rstd, const void *a,
                              const void *b, const void *w, const void *bias, int N, int C) {
  const int64_t row = (int64_t)blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return; /* whole warps: all lanes of a live warp take part below */
  const int64_t off = row * (int64_t)C;
  const void *x = kResid ? resid : a;
  /* The mean is taken of x - x[0]: for a row with a large common offset
   * (1e3 + N(0,1)) the fp32 partial sums then carry rounding errors of the
   * spread, not of the offset. Lane 0 reads it (under kResid from a and b,
   * before its own store of resid[0], which may be a[0]) and the shuffle
   * hands it to the others, so every lane uses the same shift. */
  float x0 = 0.0f;
  if (lane == 0)
    x0 = kResid ? rounded<D>(__fadd_rn(load<D>(a, off), load<D>(b, off))) : load<D>(x, off);
  x0 = __shfl_sync(0xffffffffu, x0, 0);
  /* From here on the arithmetic is spelled with explicit roundings (_rn
   * intrinsics, which the compiler never contracts or reorders), so both
   * instantiations compute the same operations: the fused op's out, mean
   * and rstd are bit-identical to layernorm_fwd's on the stored resid. */
  float sum = 0.0f;
  for (int i = lane; i < C; i += kWarp) {
    float v;
    if constexpr (kResid)
      v = store_get<D>(resid, off + i, __fadd_rn(load<D>(a, off + i), load<D>(b, off + i)));
    else
      v = load<D>(x, off + i);
    sum = __fadd_rn(sum, __fsub_rn(v, x0));
  }
  const float m = __fadd_rn(x0, __fdiv_rn(warp_sum(sum), (float)C));
  float var = 0.0f;
  for (int i = lane; i < C; i += kWarp) {
    const float d = __fsub_rn(load<D>(x, off + i), m);
    var = __fmaf_rn(d, d, var);
  }
  /* 1/sqrt rather than rsqrtf: both correctly rounded, so within an ulp of
   * the CPU twin's value. */
  const float r = __frcp_rn(__fsqrt_rn(__fadd_rn(__fdiv_rn(warp_sum(var), (float)C), kEps)));
  for (int i = lane; i < C; i += kWarp) {
    const float norm = __fmul_rn(__fsub_rn(load<D>(x, off + i), m), r);
    ddp_nn::store<D>(out, off + i, __fmaf_rn(norm, load<D>(w, i), load<D>(bias, i)));
  }
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = r;
  }
}

/* One warp per group g of rows [g*N/groups, (g+1)*N/groups), never empty
 * since groups <= N. part: groups x [dw (C) | db (C)]. */
template <int D>
__global__ void ln_bwd_kernel(void *dinp, float *part, const void *dout, const void *inp,
                              const void *w, const float *mean, const float *rstd, int N, int C,
                              int groups) {
  const int64_t g = (int64_t)blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (g >= groups) return;
  const int64_t r0 = g * N / groups, r1 = (g + 1) * N / groups;
  float *pw = part + g * 2 * (int64_t)C, *pb = pw + C;
  for (int64_t row = r0; row < r1; ++row) {
    const int64_t off = row * (int64_t)C;
    const float m = mean[row], rs = rstd[row];
    /* The two row means of the CPU twin: mean(w * dout) and
     * mean(w * dout * norm). */
    float s1 = 0.0f, s2 = 0.0f;
    for (int i = lane; i < C; i += kWarp) {
      const float norm = (load<D>(inp, off + i) - m) * rs;
      const float dnorm = load<D>(w, i) * load<D>(dout, off + i);
      s1 += dnorm;
      s2 += dnorm * norm;
    }
    const float dnorm_mean = warp_sum(s1) / (float)C;
    const float dnorm_norm_mean = warp_sum(s2) / (float)C;
    const bool first = row == r0;
    for (int i = lane; i < C; i += kWarp) {
      const float gi = load<D>(dout, off + i);
      const float norm = (load<D>(inp, off + i) - m) * rs;
      const float dnorm = load<D>(w, i) * gi;
      ddp_nn::store<D>(dinp, off + i,
                       load<D>(dinp, off + i) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs);
      pw[i] = first ? norm * gi : pw[i] + norm * gi;
      pb[i] = first ? gi : pb[i] + gi;
    }
  }
}

/* Column j of [dw | db] (j < 2C): thread row ty adds the partials of groups
 * ty, ty + kRedY, ... in order, then thread row 0 adds the kRedY results in
 * order. */
__global__ void ln_bwd_reduce_kernel(float *dw, float *db, const float *part, int C, int groups,
                                     int accumulate) {
  __shared__ float sh[kRedY][kRedX + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t two_c = 2 * (int64_t)C;
  const int64_t j = (int64_t)blockIdx.x * kRedX + tx;
  float s = 0.0f;
  if (j < two_c)
    for (int g = ty; g < groups; g += kRedY) s += part[(int64_t)g * two_c + j];
  sh[ty][tx] = s;
  __syncthreads();
  if (ty != 0 || j >= two_c) return;
  float t = 0.0f;
  for (int k = 0; k < kRedY; ++k) t += sh[k][tx];
  float *dst = j < C ? dw + j : db + (j - C);
  *dst = accumulate ? *dst + t : t;
}

using F32 = std::integral_constant<int, DDP_DTYPE_F32>;
using BF16 = std::integral_constant<int, DDP_DTYPE_BF16>;
using F16 = std::integral_constant<int, DDP_DTYPE_F16>;

/* Validates what every launcher shares, then calls launch(tag) with the
 * dtype as a type (tag::value) and checks the launch. */
template <typename Launch>
ddp_status_t dispatch(const char *op, ddp_dtype_t dt, int N, int C, bool pointers_ok,
                      Launch &&launch) {
  if (N <= 0 || C <= 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: sizes N=%d C=%d must be positive", op, N, C);
  if (!pointers_ok) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: NULL pointer", op);
  switch (dt) {
    case DDP_DTYPE_F32:
      launch(F32{});
      break;
    case DDP_DTYPE_BF16:
      launch(BF16{});
      break;
    case DDP_DTYPE_F16:
      launch(F16{});
      break;
    default:
      DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: dtype %s (%d) is not fp32, bf16 or fp16", op,
               ddp_dtype_name(dt), (int)dt);
  }
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

unsigned blocks_for_warps(int64_t warps) {
  const int64_t per_block = kRowThreads / kWarp;
  return (unsigned)((warps + per_block - 1) / per_block);
}

}  // namespace

extern "C" ddp_status_t ddp_cuda_layernorm_fwd(ddp_dtype_t dt, void *out, float *mean, float *rstd,
                                               const void *inp, const void *w, const void *b, int N,
                                               int C, cudaStream_t stream) {
  return dispatch("ddp_cuda_layernorm_fwd", dt, N, C, out && inp && w && b, [&](auto d) {
    ln_fwd_kernel<decltype(d)::value, false><<<blocks_for_warps(N), kRowThreads, 0, stream>>>(
        nullptr, out, mean, rstd, inp, nullptr, w, b, N, C);
  });
}

extern "C" ddp_status_t ddp_cuda_residual_layernorm_fwd(ddp_dtype_t dt, void *resid, void *out,
                                                        float *mean, float *rstd, const void *a,
                                                        const void *b, const void *w,
                                                        const void *bias, int N, int C,
                                                        cudaStream_t stream) {
  return dispatch("ddp_cuda_residual_layernorm_fwd", dt, N, C, resid && out && a && b && w && bias,
                  [&](auto d) {
                    ln_fwd_kernel<decltype(d)::value, true>
                        <<<blocks_for_warps(N), kRowThreads, 0, stream>>>(resid, out, mean, rstd, a,
                                                                          b, w, bias, N, C);
                  });
}

extern "C" ddp_status_t ddp_cuda_layernorm_bwd(ddp_dtype_t dt, void *dinp, float *dw, float *db,
                                               float *scratch, const void *dout, const void *inp,
                                               const void *w, const float *mean, const float *rstd,
                                               int N, int C, int accumulate, cudaStream_t stream) {
  const int groups = N < DDP_CUDA_LN_BWD_GROUPS ? N : DDP_CUDA_LN_BWD_GROUPS;
  const bool ok = dinp && dw && db && scratch && dout && inp && w && mean && rstd;
  return dispatch("ddp_cuda_layernorm_bwd", dt, N, C, ok, [&](auto d) {
    ln_bwd_kernel<decltype(d)::value><<<blocks_for_warps(groups), kRowThreads, 0, stream>>>(
        dinp, scratch, dout, inp, w, mean, rstd, N, C, groups);
    const unsigned red_blocks = (unsigned)((2 * (int64_t)C + kRedX - 1) / kRedX);
    ln_bwd_reduce_kernel<<<red_blocks, dim3(kRedX, kRedY), 0, stream>>>(dw, db, scratch, C, groups,
                                                                        accumulate);
  });
}
