/* The batch-norm reductions (launchers in kernels/conv_ops.h): per-channel
 * sums over the M positions of a channels-last tensor, for the forward
 * statistics and the backward's two sums, each finished in the same launch
 * (the statistics, the parameter gradients).
 *
 * Every sum is taken in an order fixed by M alone, never by the GPU, the
 * buffers' alignment or the width of the accesses, so results repeat bit
 * for bit and equal across the access widths:
 *   - the M rows are cut into P slices (ddp_cuda_bn_slices);
 *   - within a slice, row r goes to lane r % 32; each lane adds its rows in
 *     order, and the 32 lanes are added in a fixed tree (lane l += lane l +
 *     16, then + 8, + 4, + 2, + 1);
 *   - the slices' partials are added in groups of DDP_CUDA_BN_GROUP in slice
 *     order, then the groups in group order.
 * The one atomic, a group's arrival count, elects which block adds, never
 * the order. Arithmetic is fp32; half values are widened exactly. The CPU
 * twins are the CPU backend's batch-norm ops (ddptrain/conv.h). */
#include <stdint.h>

#include <type_traits>

#include "conv_common.cuh"
#include "conv_ops.h"

namespace {

using namespace ddp_nn;
using namespace ddp_conv;

constexpr int kBnThreads = 256; /* per block, one dimension */
constexpr int kBnLanes = 32;    /* a slice's rows go to 32 lanes, r % 32 */

template <int V>
using IC = std::integral_constant<int, V>;

/* What bn_partial_kernel sums per channel c over its rows:
 *   kSumX        a = x;
 *   kSumCentred  a = (x - mean[c])^2;
 *   kSumBwd      a = dy, b = dy (x - mean[c]);
 *   kSumShifted  a = x - k, b = (x - k)^2 with k = x[row 0, c], a sample
 *                of the channel: the one-pass statistics (ddp_cuda_bn_stats),
 *                whose cancellation is that of the data about one of its own
 *                values, not about zero;
 *   kSumBwdRelu  kSumBwd's of dy masked by the forward's ReLU, recomputed;
 *   kSumBwdMaskOut kSumBwd's of g = (y > 0 ? dy : 0), y the forward's ReLU
 *                output, and g written over dy (a block's output gradient,
 *                which its shortcut needs too). */
enum {
  kSumX = 0,
  kSumCentred = 1,
  kSumBwd = 2,
  kSumShifted = 3,
  kSumBwdRelu = 4,
  kSumBwdMaskOut = 5
};

template <int MODE>
__host__ __device__ constexpr bool reads_dy() {
  return MODE == kSumBwd || MODE == kSumBwdRelu || MODE == kSumBwdMaskOut;
}
template <int MODE>
__host__ __device__ constexpr bool two_sums() {
  return reads_dy<MODE>() || MODE == kSumShifted;
}

/* The raw word of B bytes that one access moves. */
template <int B>
struct RawOf;
template <>
struct RawOf<2> {
  using T = uint16_t;
};
template <>
struct RawOf<4> {
  using T = uint32_t;
};
template <>
struct RawOf<8> {
  using T = uint2;
};
template <>
struct RawOf<16> {
  using T = uint4;
};

/* N neighbouring elements of a DT buffer in one access (the buffer aligned
 * to N elements, i a multiple of N), kept raw in registers until used:
 * loads of the next rows are issued before the current ones are unpacked. */
template <int DT, int N>
struct Pack {
  static constexpr int kElem = DT == DDP_DTYPE_F32 ? 4 : 2;
  using Raw = typename RawOf<N * kElem>::T;

  __device__ static Raw load(const void *p, size_t i) { return static_cast<const Raw *>(p)[i / N]; }
  __device__ static void store(void *p, size_t i, Raw r) { static_cast<Raw *>(p)[i / N] = r; }

  __device__ static void unpack(const Raw &r, float out[N]) {
    if constexpr (DT != DDP_DTYPE_F32 && N == 1) {
      out[0] = to_f32<DT>(r);
    } else {
      const uint32_t *w = reinterpret_cast<const uint32_t *>(&r);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if constexpr (DT == DDP_DTYPE_F32)
          out[k] = __uint_as_float(w[k]);
        else
          out[k] = to_f32<DT>((uint16_t)(k % 2 ? w[k / 2] >> 16 : w[k / 2] & 0xFFFFu));
      }
    }
  }

  /* v holds values of DT (widened), so packing is exact */
  __device__ static Raw pack(const float v[N]) {
    Raw r;
    if constexpr (DT != DDP_DTYPE_F32 && N == 1) {
      r = from_f32<DT>(v[0]);
    } else {
      uint32_t *w = reinterpret_cast<uint32_t *>(&r);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if constexpr (DT == DDP_DTYPE_F32)
          w[k] = __float_as_uint(v[k]);
        else if (k % 2 == 0)
          w[k / 2] = from_f32<DT>(v[k]);
        else
          w[k / 2] |= (uint32_t)from_f32<DT>(v[k]) << 16;
      }
    }
    return r;
  }
};

/* One thread's rows of one step of its slice: lanes ty + q R (q < LPT,
 * R = 32 / LPT rows read at once) of the 32, i.e. rows m0 + ty + q R, each
 * CPT channels wide. */
template <int DT, int MODE, int CPT, int LPT>
struct BnRows {
  using Io = Pack<DT, CPT>;
  static constexpr int R = kBnLanes / LPT;
  typename Io::Raw x[LPT], dy[LPT], y[LPT];

  __device__ void fetch(const void *px, const void *pdy, const void *py, int64_t m0, int ty,
                        int64_t hi, int C, int c0) {
#pragma unroll
    for (int q = 0; q < LPT; ++q) {
      const int64_t m = m0 + ty + (int64_t)q * R;
      if (m >= hi) continue;
      const size_t i = (size_t)m * C + c0;
      x[q] = Io::load(px, i);
      if constexpr (reads_dy<MODE>()) dy[q] = Io::load(pdy, i);
      if constexpr (MODE == kSumBwdMaskOut) y[q] = Io::load(py, i);
    }
  }
};

/* What the last block to finish a reduction does once its channels' sums
 * are known (BnTail holds what each needs):
 *   kFinSums   nothing more;
 *   kFinStats  the one-pass statistics (ddp_cuda_bn_stats);
 *   kFinGrads  the parameter gradients from the backward sums. */
enum { kFinSums = 0, kFinStats = 1, kFinGrads = 2 };

struct BnTail {
  float *sums;        /* nsums x C */
  unsigned *counters; /* one per block column, zero between reductions */
  /* kFinStats */
  float *mean, *var, *istd, *rm, *rv;
  double inv_m;
  float eps, momentum, unbias;
  /* kFinGrads */
  float *dgamma, *dbeta;
  const float *g_istd;
  int accumulate;
};

/* The one-pass statistics of channel c from the shifted sums s1 = sum (x -
 * k), s2 = sum (x - k)^2 (k = x[row 0, c]): mean = k + s1/M, the biased
 * variance s2/M - (s1/M)^2 (in double, never below 0), the inverse
 * standard deviation, and the running statistics moved as the apply's
 * would be (rm NULL: not moved). */
template <int DT>
__device__ __forceinline__ void bn_stats_of(const BnTail &t, const void *x, int C, int c) {
  const double d = (double)t.sums[c] * t.inv_m;
  const double v = (double)t.sums[C + c] * t.inv_m - d * d;
  const float mu = (float)((double)load<DT>(x, (size_t)c) + d), va = v > 0.0 ? (float)v : 0.0f;
  t.mean[c] = mu;
  t.var[c] = va;
  t.istd[c] = 1.0f / sqrtf(va + t.eps);
  if (t.rm) {
    t.rm[c] = (1.0f - t.momentum) * t.rm[c] + t.momentum * mu;
    t.rv[c] = (1.0f - t.momentum) * t.rv[c] + t.momentum * (va * t.unbias);
  }
}

/* Whether this block is the last of n to arrive at *counter, after every
 * thread's writes were made visible to the other blocks; the count wraps
 * back to 0 for the next reduction. flag: a __shared__ word. */
__device__ __forceinline__ bool last_to_arrive(unsigned *counter, unsigned n, unsigned &flag) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) flag = atomicInc(counter, n - 1u) == n - 1u;
  __syncthreads();
  const bool last = flag != 0;
  if (last) __threadfence();
  return last;
}

/* For sum k < KS and each channel c of the column at cbase (W wide):
 * out[(k*out_rows + out_row)*C + c] = the sum over q < n, in q's order, of
 * in[(k*in_rows + first + q)*C + c]. A thread per sum and channel, so a
 * warp reads 32 neighbouring floats of a row (from L2: other blocks wrote
 * them). */
template <int KS, int W>
__device__ __forceinline__ void add_partials(float *out, int out_rows, int out_row, const float *in,
                                             int in_rows, int first, int n, int C, int cbase) {
  for (int j = threadIdx.x; j < KS * W; j += kBnThreads) {
    const int k = j / W, c = cbase + j % W;
    if (c >= C) continue;
    float acc = 0.0f;
    for (int q = 0; q < n; ++q) acc += __ldcg(&in[(size_t)(k * in_rows + first + q) * C + c]);
    out[(size_t)(k * out_rows + out_row) * C + c] = acc;
  }
}

/* MODE's terms of one element: channel value xv, output gradient dv (g
 * after any mask), the channel's shift mu. */
template <int MODE>
__device__ __forceinline__ void bn_accumulate(float &a, float &b, float xv, float dv, float mu) {
  if constexpr (reads_dy<MODE>()) {
    a += dv;
    b += dv * (xv - mu);
  } else if constexpr (MODE == kSumShifted) {
    const float v = xv - mu;
    a += v;
    b += v * v;
  } else if constexpr (MODE == kSumCentred) {
    const float v = xv - mu;
    a += v * v;
  } else {
    a += xv;
  }
}

/* A 1-D block of 256 threads, grid (ceil(C / W), P): T threads across a
 * row, each CPT neighbouring channels wide (W = T CPT channels per block),
 * and R = 256 / T rows read at once. CPT is 16 bytes' worth where C and the
 * buffers allow (8 bf16 or fp16, 4 fp32), else 1: wide accesses keep
 * enough bytes in flight to run these passes at the memory's speed (two
 * bf16 channels a thread, 1 KB per block per row step, held an H100 at
 * 0.9-1.4 TB/s).
 *
 * Thread (tx, ty) holds lanes ty + q R, q < LPT = 32 / R, of its channels
 * and adds rows m0 + ty + q R at each step of 32 rows, loading the next
 * step's rows before it adds the current ones. The tree's levels that pair
 * lanes of one thread (distance >= R) are added in registers, the rest in
 * shared memory: the same additions in the same order for every T and CPT,
 * so the same bits. The slice's partials land at scratch[(k*P + p)*C + c].
 *
 * Then the partials are added in two fixed-order stages, by blocks that
 * the arrival counts elect (who adds, never the order): the last block of
 * each group of DDP_CUDA_BN_GROUP slices adds its group's partials in
 * slice order, and the last group of the column adds the groups' sums in
 * group order and runs FIN for the column's channels. A thread per sum
 * and channel, so that a warp reads 32 neighbouring floats. One launch
 * instead of three (partials, slices, statistics or parameter gradients):
 * a ResNet-50 step made 159 slice launches and 106 small finishing ones,
 * each a few microseconds plus the gap before it. */
template <int DT, int MODE, int CPT, int T, int FIN>
__global__ void __launch_bounds__(kBnThreads)
    bn_partial_kernel(float *scratch, const void *x, const void *dy, const float *mean,
                      ddp_cuda_bn_relu_t relu, const void *y, void *g_out, BnTail tail, int64_t M,
                      int C, int64_t rows_per_slice) {
  constexpr int W = T * CPT;        /* channels per block */
  constexpr int R = kBnThreads / T; /* rows read at once */
  constexpr int LPT = kBnLanes / R; /* lanes per thread */
  static_assert(R * LPT == kBnLanes && LPT >= 1, "T must be 8, 16 or 32");
  constexpr bool kTwo = two_sums<MODE>();
  using Rows = BnRows<DT, MODE, CPT, LPT>;
  static_assert(Rows::R == R, "a step's rows: the block's and the thread's view agree");
  __shared__ float sa[R][W + 1], sb[kTwo ? R : 1][W + 1];
  __shared__ unsigned last;
  const int tx = threadIdx.x % T, ty = threadIdx.x / T;
  const int c0 = blockIdx.x * W + tx * CPT, p = blockIdx.y, P = gridDim.y;
  float a[LPT][CPT], b[LPT][CPT];
#pragma unroll
  for (int q = 0; q < LPT; ++q)
#pragma unroll
    for (int k = 0; k < CPT; ++k) a[q][k] = 0.0f, b[q][k] = 0.0f;
  if (c0 < C) { /* C % CPT == 0, so all CPT channels are real */
    float mu[CPT], r_istd[CPT], r_gamma[CPT], r_beta[CPT];
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
      const int c = c0 + k;
      mu[k] = MODE == kSumShifted ? load<DT>(x, (size_t)c) : MODE == kSumX ? 0.0f : mean[c];
      r_istd[k] = r_gamma[k] = r_beta[k] = 0.0f;
      if constexpr (MODE == kSumBwdRelu)
        r_istd[k] = relu.istd[c], r_gamma[k] = relu.gamma[c], r_beta[k] = relu.beta[c];
    }
    const int64_t lo = (int64_t)p * rows_per_slice;
    const int64_t hi = lo + rows_per_slice < M ? lo + rows_per_slice : M;
    Rows cur, nxt;
    cur.fetch(x, dy, y, lo, ty, hi, C, c0);
    for (int64_t m0 = lo; m0 < hi; m0 += kBnLanes) {
      if (m0 + kBnLanes < hi) nxt.fetch(x, dy, y, m0 + kBnLanes, ty, hi, C, c0);
#pragma unroll
      for (int q = 0; q < LPT; ++q) {
        const int64_t m = m0 + ty + (int64_t)q * R;
        if (m >= hi) continue;
        float xv[CPT], dv[CPT];
        Rows::Io::unpack(cur.x[q], xv);
        if constexpr (reads_dy<MODE>()) Rows::Io::unpack(cur.dy[q], dv);
        if constexpr (MODE == kSumBwdMaskOut) {
          /* relu_bwd's rule (a NaN output gives 0); the kept values are
           * dy's own, so the store is exact */
          float yv[CPT];
          Rows::Io::unpack(cur.y[q], yv);
#pragma unroll
          for (int k = 0; k < CPT; ++k) dv[k] = yv[k] > 0.0f ? dv[k] : 0.0f;
          Rows::Io::store(g_out, (size_t)m * C + c0, Rows::Io::pack(dv));
        }
#pragma unroll
        for (int k = 0; k < CPT; ++k) {
          float g = 0.0f;
          if constexpr (MODE == kSumBwdRelu)
            g = relu_masked<DT>(dv[k], xv[k], mu[k], r_istd[k], r_gamma[k], r_beta[k]);
          else if constexpr (reads_dy<MODE>())
            g = dv[k];
          bn_accumulate<MODE>(a[q][k], b[q][k], xv[k], g, mu[k]);
        }
      }
      cur = nxt;
    }
  }
  /* the tree's levels within a thread: lane distance h R, from 16 down to R */
#pragma unroll
  for (int h = LPT / 2; h >= 1; h /= 2)
#pragma unroll
    for (int q = 0; q < h; ++q)
#pragma unroll
      for (int k = 0; k < CPT; ++k) a[q][k] += a[q + h][k], b[q][k] += b[q + h][k];
#pragma unroll
  for (int k = 0; k < CPT; ++k) {
    sa[ty][tx * CPT + k] = a[0][k];
    if constexpr (kTwo) sb[ty][tx * CPT + k] = b[0][k];
  }
  __syncthreads();
  /* and across threads: lane distance R / 2 down to 1 */
  for (int half = R / 2; half > 0; half >>= 1) {
    if (ty < half) {
#pragma unroll
      for (int k = 0; k < CPT; ++k) {
        sa[ty][tx * CPT + k] += sa[ty + half][tx * CPT + k];
        if constexpr (kTwo) sb[ty][tx * CPT + k] += sb[ty + half][tx * CPT + k];
      }
    }
    __syncthreads();
  }
  if (ty == 0 && c0 < C) {
#pragma unroll
    for (int k = 0; k < CPT; ++k) {
      scratch[(size_t)p * C + c0 + k] = sa[0][tx * CPT + k];
      if constexpr (kTwo) scratch[(size_t)(P + p) * C + c0 + k] = sb[0][tx * CPT + k];
    }
  }
  /* this block's partials out to every block, then count the arrivals in
   * its group of slices; atomicInc wraps the last back to 0, ready for the
   * next reduction */
  constexpr int kSums = kTwo ? 2 : 1;
  const int G = DDP_CUDA_BN_GROUP, ng = (P + G - 1) / G, g = p / G;
  const int g_lo = g * G, g_n = P - g_lo < G ? P - g_lo : G;
  unsigned *col = tail.counters + (size_t)blockIdx.x * (size_t)(ng + 1);
  float *gsum = scratch + (size_t)kSums * P * C; /* [(k*ng + g)*C + c] */
  const int cbase = blockIdx.x * W;
  if (!last_to_arrive(&col[g], (unsigned)g_n, last)) return;
  /* the group's partials, in slice order */
  add_partials<kSums, W>(gsum, ng, g, scratch, P, g_lo, g_n, C, cbase);
  if (!last_to_arrive(&col[ng], (unsigned)ng, last)) return;
  /* the last group of the column: the groups' sums, in group order */
  add_partials<kSums, W>(tail.sums, 1, 0, gsum, ng, 0, ng, C, cbase);
  if constexpr (FIN != kFinSums) {
    __syncthreads(); /* the sums, written by several warps */
    for (int j = threadIdx.x; j < W; j += kBnThreads) {
      const int c = cbase + j;
      if (c >= C) break;
      if constexpr (FIN == kFinStats) {
        bn_stats_of<DT>(tail, x, C, c);
      } else {
        const float dg = tail.sums[C + c] * tail.g_istd[c], db = tail.sums[c];
        tail.dgamma[c] = tail.accumulate ? tail.dgamma[c] + dg : dg;
        tail.dbeta[c] = tail.accumulate ? tail.dbeta[c] + db : db;
      }
    }
  }
}

/* The reductions' one launch: MODE's partials, the sums (tail.sums) and
 * FIN, with tail.counters (ddp_cuda_bn_counters_needed(M, C) of them,
 * zero). Wide accesses (16 bytes) where C is a multiple of their channels
 * and every buffer is aligned to 16 bytes, 128 channels a block where C
 * fills them (64 where it does not; fp32: 64 and 32); else one channel a
 * thread, 32 a block. Every column is at least 32 channels wide, as
 * ddp_cuda_bn_counters_needed counts. */
template <int MODE, int FIN>
ddp_status_t bn_reduce_launch(ddp_dtype_t dt, float *scratch, const void *x, const void *dy,
                              const float *mean, const ddp_cuda_bn_relu_t &relu, const BnTail &tail,
                              int64_t M, int C, cudaStream_t stream, const void *y = NULL,
                              void *g_out = NULL) {
  if (!tail.counters || !tail.sums)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "bn_reduce: the sums and the arrival counters are required");
  const int P = ddp_cuda_bn_slices(M);
  const int64_t rows = (M + P - 1) / P;
  const int wide = 16 / (int)ddp_dtype_size(dt); /* channels in 16 bytes */
  const bool vec = C % wide == 0 && aligned(x, 16) && (!dy || aligned(dy, 16)) &&
                   (!y || aligned(y, 16)) && (!g_out || aligned(g_out, 16));
  const bool broad = C >= 16 * wide;
  auto launch = [&](auto cpt, auto t, auto dtc) {
    constexpr int CPT = decltype(cpt)::value, T = decltype(t)::value, DT = decltype(dtc)::value;
    const dim3 grid((unsigned)((C + T * CPT - 1) / (T * CPT)), (unsigned)P);
    bn_partial_kernel<DT, MODE, CPT, T, FIN>
        <<<grid, kBnThreads, 0, stream>>>(scratch, x, dy, mean, relu, y, g_out, tail, M, C, rows);
  };
  CONV_DISPATCH("bn_reduce", dt, {
    constexpr int kWide = DT == DDP_DTYPE_F32 ? 4 : 8;
    if (vec && broad)
      launch(IC<kWide>{}, IC<16>{}, IC<DT>{});
    else if (vec)
      launch(IC<kWide>{}, IC<8>{}, IC<DT>{});
    else
      launch(IC<1>{}, IC<32>{}, IC<DT>{});
  });
  return DDP_OK;
}

/* The backward sums' tail: the parameter gradients where grads is given.
 * y, g_out: kSumBwdMaskOut's. */
template <int MODE>
ddp_status_t bn_reduce_bwd_launch(ddp_dtype_t dt, float *sums, float *scratch, unsigned *counters,
                                  const void *x, const void *dy, const float *mean,
                                  const ddp_cuda_bn_relu_t &relu, const ddp_cuda_bn_grads_t *grads,
                                  int64_t M, int C, cudaStream_t stream, const void *y = NULL,
                                  void *g_out = NULL) {
  BnTail t{};
  t.sums = sums, t.counters = counters;
  if (!grads)
    return bn_reduce_launch<MODE, kFinSums>(dt, scratch, x, dy, mean, relu, t, M, C, stream, y,
                                            g_out);
  t.dgamma = grads->dgamma, t.dbeta = grads->dbeta, t.g_istd = grads->istd;
  t.accumulate = grads->accumulate;
  return bn_reduce_launch<MODE, kFinGrads>(dt, scratch, x, dy, mean, relu, t, M, C, stream, y,
                                           g_out);
}

}  // namespace

extern "C" ddp_status_t ddp_cuda_bn_reduce(ddp_dtype_t dt, float *sums, float *scratch,
                                           unsigned *counters, const void *x, const void *dy,
                                           const float *mean, const ddp_cuda_bn_grads_t *grads,
                                           int64_t M, int C, cudaStream_t stream) {
  const ddp_cuda_bn_relu_t none = {NULL, NULL, NULL};
  if (dy)
    return bn_reduce_bwd_launch<kSumBwd>(dt, sums, scratch, counters, x, dy, mean, none, grads, M,
                                         C, stream);
  BnTail t{};
  t.sums = sums, t.counters = counters;
  if (mean)
    return bn_reduce_launch<kSumCentred, kFinSums>(dt, scratch, x, dy, mean, none, t, M, C, stream);
  return bn_reduce_launch<kSumX, kFinSums>(dt, scratch, x, dy, mean, none, t, M, C, stream);
}

extern "C" ddp_status_t ddp_cuda_bn_reduce_relu(ddp_dtype_t dt, float *sums, float *scratch,
                                                unsigned *counters, const void *x, const void *dy,
                                                const float *mean, const ddp_cuda_bn_relu_t *relu,
                                                const ddp_cuda_bn_grads_t *grads, int64_t M, int C,
                                                cudaStream_t stream) {
  return bn_reduce_bwd_launch<kSumBwdRelu>(dt, sums, scratch, counters, x, dy, mean, *relu, grads,
                                           M, C, stream);
}

extern "C" ddp_status_t ddp_cuda_bn_reduce_mask_out(ddp_dtype_t dt, float *sums, float *scratch,
                                                    unsigned *counters, const void *x, void *dy,
                                                    const void *y, const float *mean,
                                                    const ddp_cuda_bn_grads_t *grads, int64_t M,
                                                    int C, cudaStream_t stream) {
  const ddp_cuda_bn_relu_t none = {NULL, NULL, NULL};
  return bn_reduce_bwd_launch<kSumBwdMaskOut>(dt, sums, scratch, counters, x, dy, mean, none, grads,
                                              M, C, stream, y, dy);
}

extern "C" ddp_status_t ddp_cuda_bn_stats(ddp_dtype_t dt, float *mean, float *var, float *istd,
                                          float *running_mean, float *running_var, float *sums,
                                          float *scratch, unsigned *counters, const void *x,
                                          int64_t M, int C, float eps, float momentum,
                                          cudaStream_t stream) {
  const ddp_cuda_bn_relu_t none = {NULL, NULL, NULL};
  BnTail t{};
  t.sums = sums, t.counters = counters;
  t.mean = mean, t.var = var, t.istd = istd, t.rm = running_mean, t.rv = running_var;
  t.inv_m = 1.0 / (double)M, t.eps = eps, t.momentum = momentum;
  t.unbias = M > 1 ? (float)((double)M / (double)(M - 1)) : 1.0f;
  return bn_reduce_launch<kSumShifted, kFinStats>(dt, scratch, x, NULL, NULL, none, t, M, C,
                                                  stream);
}
