/* Flash attention kernels: causal multi-head self-attention without the
 * T x T matrix, forward and backward, with per-sequence lengths (launchers
 * and contract in kernels/flash_attention.h; CPU twin
 * src/backend/cpu/cpu_flash_attention.c, same tiling and online softmax).
 *
 * Layout: qkv (B,T,3C), per row [q | k | v], head h at columns h*hs of each
 * part; out, dout (B,T,C); lse and the backward's D (B,NH,T). A query row
 * t of sequence b is valid when t < len = clamp(lens[b], 0, T); others are
 * padding: their outputs are written as zeros and nothing else is done.
 *
 * Tensor-core path (bf16/fp16, hs in {16, 32, 64, 128}): blocks of 4 warps,
 * tiles of 64 queries x 64 keys, each warp owning 16 rows of the tile.
 * Products go through nvcuda::wmma 16x16x16 fragments (half operands, fp32
 * accumulators); per-row softmax work is done by lanes on an fp32 copy of
 * the warp's 16 x 64 score tile in shared memory, two lanes per row (lane
 * 2r + e takes row r, columns e, e+2, ..., e+62: two-way bank conflicts at
 * most). The fp32 tile is then overwritten in place by its half-precision
 * image (pitch = 2x the float pitch, in halfs), which feeds the next
 * product, so P or dS needs no extra shared memory.
 *   forward   grid (query tiles, NH, B), heaviest (last) tiles first. The
 *             Q tile is staged through the K buffer into registers
 *             (matrix_a fragments kept for the whole loop); for each key
 *             tile up to the diagonal: S = Q K^T, online softmax (running
 *             max m and sum l per row, in registers of the row's two
 *             lanes), the output rows (fp32 registers, each lane half of
 *             the row's hs columns) rescaled by exp(m_old - m_new) and P V
 *             added. out = acc / l, lse = m + log l.
 *   backward  D = rowsum(dout * out) per row (one warp per row), then two
 *             kernels that each own their output, so no atomics:
 *             dQ: grid (query tiles, NH, B); Q and dO fragments in
 *                 registers; for each key tile up to the diagonal:
 *                 S = Q K^T, dP = dO V^T, dS = P (dP - D) with
 *                 P = exp(scale S - lse), dQ += dS K (accumulators in
 *                 registers); dQ *= scale at the end.
 *             dK, dV: grid (key tiles, NH, B), K and V tiles resident in
 *                 shared memory; for each query tile from the diagonal to
 *                 the last valid one: S^T = K Q^T, dP^T = V dO^T,
 *                 P^T, dS^T as above, dV += P^T dO, dK += dS^T Q.
 *             P and dS are rounded to the half type for the tensor-core
 *             products (the row sums and the softmax stay fp32), which is
 *             where these results differ from the fp32 twin beyond
 *             summation order.
 * Causal skipping: key tiles past a query tile's diagonal are never loaded;
 * the diagonal tile is masked per element (key > query -> P = 0). lens
 * skipping: query tiles at or past len only write zeros, key tiles at or
 * past len are never loaded by the forward and dQ kernels, and the dK/dV
 * kernel stops at the last query tile holding a valid row. Rows at or past
 * len inside a loaded tile are zero-filled in shared memory, so whatever a
 * caller left in padding positions (even NaN) cannot leak through 0 * x.
 *
 * CUDA-core path (fp32 and the other head sizes, hs <= 128): one warp per
 * row (query row for forward and dQ, key row for dK/dV), lanes over keys
 * (or queries) in chunks of 32 for the scores, over head columns for the
 * accumulations; the same online softmax in fp32 with expf.
 *
 * Shared memory per block (bytes; opt-in beyond 48 KiB, set per launch):
 *   hs        16     32     64    128
 *   forward   13824  23552  35840  68608
 *   dQ        47616  50688  53760  70144
 *   dK, dV    53760  59904  72192 104960
 * all under the 163 KiB a block may take on sm_80 (227 KiB on sm_90); sm_86
 * and sm_89 allow 99 KiB, so there hs = 128 takes the CUDA-core path
 * (device_fits_tc). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <mma.h>
#include <stdint.h>

#include "flash_attention.h"
#include "core/foreign_check.h"
#include "nn_io.cuh"

namespace {

using namespace nvcuda;

constexpr unsigned kFull = 0xFFFFFFFFu;
constexpr int kTile = 64; /* queries per query tile = keys per key tile */
constexpr int kWarps = 4; /* 16 rows of a tile each */
constexpr int kThreads = kWarps * 32;
constexpr int kSimtWarps = 4;
constexpr int kMaxHs = DDP_FLASH_MAX_HS;
/* Float pitch of a warp's 16 x 64 score tile; its half image has pitch
 * 2 * kLdS halfs. Both are multiples of 16 bytes as wmma requires. */
constexpr int kLdS = kTile + 4;

__device__ __forceinline__ int seq_len(const int32_t *lens, int b, int T) {
  if (!lens) return T;
  const int l = lens[b];
  return l < 0 ? 0 : (l > T ? T : l);
}

/* ---- CUDA-core path ------------------------------------------------------- */

/* Row r of the (B,NH,T) row space. */
struct RowId {
  int b, h, t;
};

__device__ __forceinline__ RowId row_id(int64_t r, int T, int NH) {
  RowId id;
  id.t = (int)(r % T);
  const int64_t bh = r / T;
  id.h = (int)(bh % NH);
  id.b = (int)(bh / NH);
  return id;
}

template <int DT>
__device__ __forceinline__ float dot_row(const float *x, const void *p, int64_t off, int hs) {
  float acc = 0.0f;
  for (int d = 0; d < hs; ++d) acc += x[d] * ddp_nn::load<DT>(p, (size_t)(off + d));
  return acc;
}

template <int DT>
__global__ void __launch_bounds__(kSimtWarps * 32)
    fwd_simt(void *out, float *lse, const void *qkv, const int32_t *lens, int B, int T, int C,
             int NH, float scale) {
  __shared__ float qs[kSimtWarps][kMaxHs];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, hs = C / NH;
  const int64_t C3 = 3 * (int64_t)C, nrows = (int64_t)B * NH * T;
  for (int64_t r = (int64_t)blockIdx.x * kSimtWarps + w; r < nrows;
       r += (int64_t)gridDim.x * kSimtWarps) {
    const RowId id = row_id(r, T, NH);
    const int len = seq_len(lens, id.b, T), t = id.t;
    const int64_t orow = ((int64_t)id.b * T + t) * C + (int64_t)id.h * hs;
    if (t >= len) {
      for (int d = lane; d < hs; d += 32) ddp_nn::store<DT>(out, (size_t)(orow + d), 0.0f);
      if (lse && lane == 0) lse[r] = 0.0f;
      continue;
    }
    const int64_t seq = (int64_t)id.b * T * C3 + (int64_t)id.h * hs;
    __syncwarp();
    for (int d = lane; d < hs; d += 32)
      qs[w][d] = ddp_nn::load<DT>(qkv, (size_t)(seq + t * C3 + d));
    __syncwarp();
    float o[kMaxHs / 32] = {0.0f, 0.0f, 0.0f, 0.0f};
    float m = -INFINITY, l = 0.0f;
    for (int k0 = 0; k0 <= t; k0 += 32) {
      const int j = k0 + lane;
      const float s = j <= t ? dot_row<DT>(qs[w], qkv, seq + C + j * C3, hs) * scale : -INFINITY;
      /* lane 0's key k0 <= t is always valid, so mnew is finite */
      const float mnew = fmaxf(m, ddp_nn::warp_max(s));
      const float p = j <= t ? expf(s - mnew) : 0.0f;
      const float alpha = expf(m - mnew); /* 0 on the first chunk (m = -inf) */
      l = l * alpha + ddp_nn::warp_sum(p);
      m = mnew;
#pragma unroll
      for (int i = 0; i < kMaxHs / 32; ++i) o[i] *= alpha;
      const int nj = t - k0 + 1 < 32 ? t - k0 + 1 : 32;
      for (int jj = 0; jj < nj; ++jj) {
        const float pj = __shfl_sync(kFull, p, jj);
        const int64_t vr = seq + 2 * (int64_t)C + (k0 + jj) * C3;
#pragma unroll
        for (int i = 0; i < kMaxHs / 32; ++i) {
          const int d = lane + 32 * i;
          if (d < hs) o[i] += pj * ddp_nn::load<DT>(qkv, (size_t)(vr + d));
        }
      }
    }
    const float inv = 1.0f / l;
#pragma unroll
    for (int i = 0; i < kMaxHs / 32; ++i) {
      const int d = lane + 32 * i;
      if (d < hs) ddp_nn::store<DT>(out, (size_t)(orow + d), o[i] * inv);
    }
    if (lse && lane == 0) lse[r] = m + logf(l);
  }
}

/* D = rowsum(dout * out) per (b, h, t) row; 0 at padding rows. */
template <int DT>
__global__ void __launch_bounds__(kSimtWarps * 32)
    dot_rows(float *dsum, const void *dout, const void *out, const int32_t *lens, int B, int T,
             int C, int NH) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, hs = C / NH;
  const int64_t nrows = (int64_t)B * NH * T;
  for (int64_t r = (int64_t)blockIdx.x * kSimtWarps + w; r < nrows;
       r += (int64_t)gridDim.x * kSimtWarps) {
    const RowId id = row_id(r, T, NH);
    float acc = 0.0f;
    if (id.t < seq_len(lens, id.b, T)) {
      const int64_t off = ((int64_t)id.b * T + id.t) * C + (int64_t)id.h * hs;
      for (int d = lane; d < hs; d += 32)
        acc += ddp_nn::load<DT>(dout, (size_t)(off + d)) * ddp_nn::load<DT>(out, (size_t)(off + d));
      acc = ddp_nn::warp_sum(acc);
    }
    if (lane == 0) dsum[r] = acc;
  }
}

template <int DT>
__global__ void __launch_bounds__(kSimtWarps * 32)
    bwd_dq_simt(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *dsum,
                const int32_t *lens, int B, int T, int C, int NH, float scale) {
  __shared__ float qs[kSimtWarps][kMaxHs], gs[kSimtWarps][kMaxHs];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, hs = C / NH;
  const int64_t C3 = 3 * (int64_t)C, nrows = (int64_t)B * NH * T;
  for (int64_t r = (int64_t)blockIdx.x * kSimtWarps + w; r < nrows;
       r += (int64_t)gridDim.x * kSimtWarps) {
    const RowId id = row_id(r, T, NH);
    const int len = seq_len(lens, id.b, T), t = id.t;
    const int64_t seq = (int64_t)id.b * T * C3 + (int64_t)id.h * hs;
    const int64_t drow = seq + t * C3; /* dQ: part 0 */
    if (t >= len) {
      for (int d = lane; d < hs; d += 32) ddp_nn::store<DT>(dqkv, (size_t)(drow + d), 0.0f);
      continue;
    }
    const int64_t grow = ((int64_t)id.b * T + t) * C + (int64_t)id.h * hs;
    __syncwarp();
    for (int d = lane; d < hs; d += 32) {
      qs[w][d] = ddp_nn::load<DT>(qkv, (size_t)(drow + d));
      gs[w][d] = ddp_nn::load<DT>(dout, (size_t)(grow + d));
    }
    __syncwarp();
    const float lt = lse[r], Dt = dsum[r];
    float dq[kMaxHs / 32] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k0 = 0; k0 <= t; k0 += 32) {
      const int j = k0 + lane;
      float ds = 0.0f;
      if (j <= t) {
        const float s = dot_row<DT>(qs[w], qkv, seq + C + j * C3, hs) * scale;
        const float dp = dot_row<DT>(gs[w], qkv, seq + 2 * (int64_t)C + j * C3, hs);
        ds = expf(s - lt) * (dp - Dt);
      }
      const int nj = t - k0 + 1 < 32 ? t - k0 + 1 : 32;
      for (int jj = 0; jj < nj; ++jj) {
        const float dsj = __shfl_sync(kFull, ds, jj);
        const int64_t kr = seq + C + (k0 + jj) * C3;
#pragma unroll
        for (int i = 0; i < kMaxHs / 32; ++i) {
          const int d = lane + 32 * i;
          if (d < hs) dq[i] += dsj * ddp_nn::load<DT>(qkv, (size_t)(kr + d));
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kMaxHs / 32; ++i) {
      const int d = lane + 32 * i;
      if (d < hs) ddp_nn::store<DT>(dqkv, (size_t)(drow + d), dq[i] * scale);
    }
  }
}

template <int DT>
__global__ void __launch_bounds__(kSimtWarps * 32)
    bwd_dkv_simt(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *dsum,
                 const int32_t *lens, int B, int T, int C, int NH, float scale) {
  __shared__ float ks[kSimtWarps][kMaxHs], vs[kSimtWarps][kMaxHs];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, hs = C / NH;
  const int64_t C3 = 3 * (int64_t)C, nrows = (int64_t)B * NH * T;
  for (int64_t r = (int64_t)blockIdx.x * kSimtWarps + w; r < nrows;
       r += (int64_t)gridDim.x * kSimtWarps) {
    const RowId id = row_id(r, T, NH);
    const int len = seq_len(lens, id.b, T), j = id.t; /* this row is key j */
    const int64_t seq = (int64_t)id.b * T * C3 + (int64_t)id.h * hs;
    const int64_t krow = seq + j * C3 + C, vrow = krow + C;
    if (j >= len) {
      for (int d = lane; d < hs; d += 32) {
        ddp_nn::store<DT>(dqkv, (size_t)(krow + d), 0.0f);
        ddp_nn::store<DT>(dqkv, (size_t)(vrow + d), 0.0f);
      }
      continue;
    }
    __syncwarp();
    for (int d = lane; d < hs; d += 32) {
      ks[w][d] = ddp_nn::load<DT>(qkv, (size_t)(krow + d));
      vs[w][d] = ddp_nn::load<DT>(qkv, (size_t)(vrow + d));
    }
    __syncwarp();
    const int64_t lrow = r - j; /* (b, h, 0) in the (B,NH,T) row space */
    const int64_t gseq = (int64_t)id.b * T * C + (int64_t)id.h * hs;
    float dk[kMaxHs / 32] = {0.0f, 0.0f, 0.0f, 0.0f}, dv[kMaxHs / 32] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int q0 = j; q0 < len; q0 += 32) {
      const int t = q0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (t < len) {
        const float s = dot_row<DT>(ks[w], qkv, seq + t * C3, hs) * scale;
        const float dp = dot_row<DT>(vs[w], dout, gseq + (int64_t)t * C, hs);
        p = expf(s - lse[lrow + t]);
        ds = p * (dp - dsum[lrow + t]);
      }
      const int nt = len - q0 < 32 ? len - q0 : 32;
      for (int tt = 0; tt < nt; ++tt) {
        const float pt = __shfl_sync(kFull, p, tt), dst = __shfl_sync(kFull, ds, tt);
        const int64_t qr = seq + (q0 + tt) * C3, gr = gseq + (int64_t)(q0 + tt) * C;
#pragma unroll
        for (int i = 0; i < kMaxHs / 32; ++i) {
          const int d = lane + 32 * i;
          if (d < hs) {
            dv[i] += pt * ddp_nn::load<DT>(dout, (size_t)(gr + d));
            dk[i] += dst * ddp_nn::load<DT>(qkv, (size_t)(qr + d));
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kMaxHs / 32; ++i) {
      const int d = lane + 32 * i;
      if (d < hs) {
        ddp_nn::store<DT>(dqkv, (size_t)(krow + d), dk[i] * scale);
        ddp_nn::store<DT>(dqkv, (size_t)(vrow + d), dv[i]);
      }
    }
  }
}

/* ---- tensor-core path ----------------------------------------------------- */

template <int DT>
struct HalfT;
template <>
struct HalfT<DDP_DTYPE_BF16> {
  using T = __nv_bfloat16;
  static __device__ __forceinline__ T cvt(float x) { return __float2bfloat16_rn(x); }
};
template <>
struct HalfT<DDP_DTYPE_F16> {
  using T = __half;
  static __device__ __forceinline__ T cvt(float x) { return __float2half_rn(x); }
};

/* Shared-memory geometry for head size HS. */
template <int HS>
struct Geo {
  static constexpr int kLdh = HS + 8; /* halfs: pitch of a 64-row operand tile */
  /* floats: pitch of a warp's fp32 tile that must also hold 16 x HS */
  static constexpr int kLdw = (HS > kTile ? HS : kTile) + 4;
  static constexpr int kTileBytes = kTile * kLdh * 2;
  /* fwd: one 16 x kLdw fp32 region per warp */
  static constexpr int kFwdWarpBytes = 16 * kLdw * 4;
  /* bwd: two 16 x kLdS fp32 regions per warp (S and dP), which together also
   * hold a 16 x (HS + 4) accumulator tile at the end */
  static constexpr int kBwdWarpBytes = 2 * 16 * kLdS * 4;
  static constexpr int kAccLd = HS + 4;
  static_assert(16 * kAccLd * 4 <= kBwdWarpBytes, "accumulator tile does not fit");
  static constexpr int kStatBytes = 2 * kTile * 4; /* lse and D of 64 rows */
  static constexpr int kFwdSmem = 2 * kTileBytes + kWarps * kFwdWarpBytes;
  static constexpr int kDqSmem = 2 * kTileBytes + kWarps * kBwdWarpBytes + kStatBytes;
  static constexpr int kDkvSmem = 4 * kTileBytes + kWarps * kBwdWarpBytes + kStatBytes;
  static_assert(kTileBytes % 128 == 0 && kFwdWarpBytes % 128 == 0 && kBwdWarpBytes % 128 == 0,
                "regions must stay 128-byte aligned");
};

/* rows [row0, row0 + 64) x HS of a (T, pitch) half matrix into dst (pitch
 * kLdh); rows at or past `limit` become zeros. 16-byte accesses: src and
 * the pitch are multiples of 8 halfs (checked by the launcher). */
template <int HS, typename H>
__device__ __forceinline__ void load_tile(H *dst, const uint16_t *src, int64_t pitch, int row0,
                                          int limit) {
  constexpr int kChunks = HS / 8;
  for (int i = threadIdx.x; i < kTile * kChunks; i += kThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r < limit) v = *reinterpret_cast<const uint4 *>(src + (row0 + r) * pitch + c);
    *reinterpret_cast<uint4 *>(dst + r * Geo<HS>::kLdh + c) = v;
  }
}

/* Zeros rows [row0, min(row0 + 64, T)) x HS of a half matrix (pitch). */
template <int HS>
__device__ __forceinline__ void zero_rows(uint16_t *dst, int64_t pitch, int row0, int T) {
  const int rows = T - row0 < kTile ? T - row0 : kTile;
  for (int i = threadIdx.x; i < rows * HS; i += kThreads) dst[(row0 + i / HS) * pitch + i % HS] = 0;
}

/* N halfs (a multiple of 8) from fp32 x * mul, or +0 everywhere when !keep
 * (padding rows: exact zeros, never -0 from a product), 16-byte stores (dst
 * aligned to 8 halfs). */
template <int DT, int N>
__device__ __forceinline__ void store_halfs(uint16_t *dst, const float *x, float mul, bool keep) {
#pragma unroll
  for (int i = 0; i < N; i += 8) {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t lo = keep ? ddp_nn::from_f32<DT>(x[i + 2 * k] * mul) : 0u;
      const uint32_t hi = keep ? ddp_nn::from_f32<DT>(x[i + 2 * k + 1] * mul) : 0u;
      w[k] = lo | (hi << 16);
    }
    *reinterpret_cast<uint4 *>(dst + i) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

template <typename H>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, H, wmma::row_major>;
template <typename H>
using FragBc = wmma::fragment<wmma::matrix_b, 16, 16, 16, H, wmma::col_major>;
template <typename H>
using FragBr = wmma::fragment<wmma::matrix_b, 16, 16, 16, H, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/* The warp's 16 x 64 product A (16 x HS, fragments a) B^T, B being 64 rows
 * of a tile (pitch kLdh), into out (fp32, pitch kLdS or larger). */
template <int HS, typename H>
__device__ __forceinline__ void product_abt(float *out, int ldo, const FragA<H> *a, const H *b) {
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < HS / 16; ++kk) {
      FragBc<H> bf;
      wmma::load_matrix_sync(bf, b + n * 16 * Geo<HS>::kLdh + kk * 16, Geo<HS>::kLdh);
      wmma::mma_sync(acc, a[kk], bf, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, ldo, wmma::mem_row_major);
  }
}

/* acc[n] += A (16 x 64, half, pitch lda) B (64 rows of a tile, pitch kLdh)
 * for the HS/16 column blocks n. */
template <int HS, typename H>
__device__ __forceinline__ void product_ab_acc(FragC *acc, const H *a, int lda, const H *b) {
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    FragA<H> af;
    wmma::load_matrix_sync(af, a + kk * 16, lda);
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) {
      FragBr<H> bf;
      wmma::load_matrix_sync(bf, b + kk * 16 * Geo<HS>::kLdh + n * 16, Geo<HS>::kLdh);
      wmma::mma_sync(acc[n], af, bf, acc[n]);
    }
  }
}

template <int DT, int HS>
__global__ void __launch_bounds__(kThreads)
    fwd_tc(void *out, float *lse, const void *qkv, const int32_t *lens, int T, int C, int NH,
           float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using H = typename HalfT<DT>::T;
  using G = Geo<HS>;
  extern __shared__ __align__(128) unsigned char smem[];
  H *const ks = reinterpret_cast<H *>(smem);
  H *const vs = reinterpret_cast<H *>(smem + G::kTileBytes);
  float *const wreg =
      reinterpret_cast<float *>(smem + 2 * G::kTileBytes + (threadIdx.x >> 5) * G::kFwdWarpBytes);
  H *const preg = reinterpret_cast<H *>(wreg); /* P, pitch 2 * kLdw halfs */
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int qt = (int)gridDim.x - 1 - (int)blockIdx.x; /* the longest rows first */
  const int h = blockIdx.y, b = blockIdx.z, q0 = qt * kTile;
  const int len = seq_len(lens, b, T);
  const int64_t C3 = 3 * (int64_t)C;
  const uint16_t *const seq =
      static_cast<const uint16_t *>(qkv) + (int64_t)b * T * C3 + (int64_t)h * HS;
  uint16_t *const obase = static_cast<uint16_t *>(out) + (int64_t)b * T * C + (int64_t)h * HS;
  float *const lrow = lse ? lse + ((int64_t)b * NH + h) * T : nullptr;
  if (q0 >= len) { /* all padding: zeros (the whole block takes this branch) */
    zero_rows<HS>(obase, C, q0, T);
    if (lrow)
      for (int i = threadIdx.x; i < kTile && q0 + i < T; i += kThreads) lrow[q0 + i] = 0.0f;
    return;
  }
  /* Q through the K buffer into registers */
  load_tile<HS>(ks, seq, C3, q0, len);
  __syncthreads();
  FragA<H> qf[HS / 16];
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk)
    wmma::load_matrix_sync(qf[kk], ks + w * 16 * G::kLdh + kk * 16, G::kLdh);
  const int r = lane >> 1, e = lane & 1, t = q0 + w * 16 + r;
  float o[HS / 2];
#pragma unroll
  for (int i = 0; i < HS / 2; ++i) o[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads(); /* everyone is done with the previous K, V (or Q) */
    load_tile<HS>(ks, seq + C, C3, k0, len);
    load_tile<HS>(vs, seq + 2 * C, C3, k0, len);
    __syncthreads();
    product_abt<HS>(wreg, G::kLdw, qf, ks);
    __syncwarp();
    float s[kTile / 2];
    float tmax = -INFINITY;
#pragma unroll
    for (int i = 0; i < kTile / 2; ++i) {
      const int c = 2 * i + e;
      s[i] = k0 + c <= t ? wreg[r * G::kLdw + c] * scale : -INFINITY;
      tmax = fmaxf(tmax, s[i]);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(kFull, tmax, 1));
    /* key 0 <= t is in the first tile, so m is finite from there on */
    const float mnew = fmaxf(m, tmax);
    const float alpha = __expf(m - mnew); /* 0 on the first tile */
    __syncwarp();                         /* all of S read: P overwrites it */
    float rs = 0.0f;
#pragma unroll
    for (int i = 0; i < kTile / 2; ++i) {
      const float p = __expf(s[i] - mnew);
      rs += p;
      preg[r * 2 * G::kLdw + 2 * i + e] = HalfT<DT>::cvt(p);
    }
    rs += __shfl_xor_sync(kFull, rs, 1);
    l = l * alpha + rs;
    m = mnew;
    __syncwarp();
    FragA<H> pf[kTile / 16];
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk)
      wmma::load_matrix_sync(pf[kk], preg + kk * 16, 2 * G::kLdw);
    __syncwarp(); /* P is in registers: the region takes P V */
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) {
      FragC acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
        FragBr<H> vf;
        wmma::load_matrix_sync(vf, vs + kk * 16 * G::kLdh + n * 16, G::kLdh);
        wmma::mma_sync(acc, pf[kk], vf, acc);
      }
      wmma::store_matrix_sync(wreg + n * 16, acc, G::kLdw, wmma::mem_row_major);
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < HS / 2; ++i) o[i] = o[i] * alpha + wreg[r * G::kLdw + e * (HS / 2) + i];
    __syncwarp();
  }
  if (t < T) {
    uint16_t *const dst = obase + (int64_t)t * C + e * (HS / 2);
    store_halfs<DT, HS / 2>(dst, o, 1.0f / l, t < len);
    if (lrow && e == 0) lrow[t] = t < len ? m + logf(l) : 0.0f;
  }
#else
  __trap(); /* the launcher never picks this path below sm_80 */
#endif
}

/* P and dS of one 16 x 64 tile, computed by the warp's lanes from the S and
 * dP regions (fp32, pitch kLdS), written back in place as halfs (pitch
 * 2 * kLdS): dS into the dP region, and P into the S region when wanted.
 * Element (r, c) is valid when valid(r, c); lse and D are per row (dq:
 * rows are queries) or per column (dkv: columns are queries), given by the
 * caller's functors. */
template <int DT, bool kWantP, typename Valid, typename Lse, typename Dsum>
__device__ __forceinline__ void softmax_bwd_tile(float *sreg, float *dpreg, float scale,
                                                 Valid valid, Lse lse_of, Dsum d_of) {
  using H = typename HalfT<DT>::T;
  const int lane = threadIdx.x & 31, r = lane >> 1, e = lane & 1;
  float p[kTile / 2], ds[kTile / 2];
#pragma unroll
  for (int i = 0; i < kTile / 2; ++i) {
    const int c = 2 * i + e;
    p[i] = valid(r, c) ? __expf(sreg[r * kLdS + c] * scale - lse_of(r, c)) : 0.0f;
    ds[i] = p[i] * (dpreg[r * kLdS + c] - d_of(r, c));
  }
  __syncwarp(); /* all of S and dP read before the halfs overwrite them */
  H *const ph = reinterpret_cast<H *>(sreg);
  H *const dh = reinterpret_cast<H *>(dpreg);
#pragma unroll
  for (int i = 0; i < kTile / 2; ++i) {
    const int c = 2 * i + e;
    if (kWantP) ph[r * 2 * kLdS + c] = HalfT<DT>::cvt(p[i]);
    dh[r * 2 * kLdS + c] = HalfT<DT>::cvt(ds[i]);
  }
  __syncwarp();
}

/* Writes the warp's accumulators (16 rows x HS) times mul into rows
 * row0 + 0..15 of a half matrix (pitch), through the warp's region; rows
 * at or past `valid` get zeros, rows at or past T nothing. */
template <int DT, int HS>
__device__ __forceinline__ void store_acc(uint16_t *dst, int64_t pitch, const FragC *acc,
                                          float *reg, int row0, int valid, int T, float mul) {
  using G = Geo<HS>;
  const int lane = threadIdx.x & 31, r = lane >> 1, e = lane & 1;
  __syncwarp();
#pragma unroll
  for (int n = 0; n < HS / 16; ++n)
    wmma::store_matrix_sync(reg + n * 16, acc[n], G::kAccLd, wmma::mem_row_major);
  __syncwarp();
  const int t = row0 + r;
  if (t < T)
    store_halfs<DT, HS / 2>(dst + t * pitch + e * (HS / 2), reg + r * G::kAccLd + e * (HS / 2), mul,
                            t < valid);
  __syncwarp();
}

template <int DT, int HS>
__global__ void __launch_bounds__(kThreads)
    bwd_dq_tc(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *dsum,
              const int32_t *lens, int T, int C, int NH, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using H = typename HalfT<DT>::T;
  using G = Geo<HS>;
  extern __shared__ __align__(128) unsigned char smem[];
  H *const ks = reinterpret_cast<H *>(smem);
  H *const vs = reinterpret_cast<H *>(smem + G::kTileBytes);
  const int w = threadIdx.x >> 5;
  float *const sreg = reinterpret_cast<float *>(smem + 2 * G::kTileBytes + w * G::kBwdWarpBytes);
  float *const dpreg = sreg + 16 * kLdS;
  float *const lse_s =
      reinterpret_cast<float *>(smem + 2 * G::kTileBytes + kWarps * G::kBwdWarpBytes);
  float *const d_s = lse_s + kTile;
  const int qt = (int)gridDim.x - 1 - (int)blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, q0 = qt * kTile;
  const int len = seq_len(lens, b, T);
  const int64_t C3 = 3 * (int64_t)C;
  const uint16_t *const seq =
      static_cast<const uint16_t *>(qkv) + (int64_t)b * T * C3 + (int64_t)h * HS;
  const uint16_t *const gseq =
      static_cast<const uint16_t *>(dout) + (int64_t)b * T * C + (int64_t)h * HS;
  uint16_t *const dq_base = static_cast<uint16_t *>(dqkv) + (int64_t)b * T * C3 + (int64_t)h * HS;
  if (q0 >= len) {
    zero_rows<HS>(dq_base, C3, q0, T);
    return;
  }
  const int64_t lrow = ((int64_t)b * NH + h) * T;
  /* Q and dO through the K and V buffers into registers */
  load_tile<HS>(ks, seq, C3, q0, len);
  load_tile<HS>(vs, gseq, C, q0, len);
  for (int i = threadIdx.x; i < kTile; i += kThreads) {
    const bool ok = q0 + i < len;
    lse_s[i] = ok ? lse[lrow + q0 + i] : 0.0f;
    d_s[i] = ok ? dsum[lrow + q0 + i] : 0.0f;
  }
  __syncthreads();
  FragA<H> qf[HS / 16], gf[HS / 16];
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
    wmma::load_matrix_sync(qf[kk], ks + w * 16 * G::kLdh + kk * 16, G::kLdh);
    wmma::load_matrix_sync(gf[kk], vs + w * 16 * G::kLdh + kk * 16, G::kLdh);
  }
  FragC acc[HS / 16];
#pragma unroll
  for (int n = 0; n < HS / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
  const int rbase = w * 16; /* this warp's rows within the tile */
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();
    load_tile<HS>(ks, seq + C, C3, k0, len);
    load_tile<HS>(vs, seq + 2 * C, C3, k0, len);
    __syncthreads();
    product_abt<HS>(sreg, kLdS, qf, ks);  /* S = Q K^T */
    product_abt<HS>(dpreg, kLdS, gf, vs); /* dP = dO V^T */
    __syncwarp();
    softmax_bwd_tile<DT, false>(
        sreg, dpreg, scale,
        [=](int r, int c) {
          const int t = q0 + rbase + r;
          return k0 + c <= t && t < len;
        },
        [=](int r, int) { return lse_s[rbase + r]; }, [=](int r, int) { return d_s[rbase + r]; });
    /* dQ += dS K */
    product_ab_acc<HS>(acc, reinterpret_cast<const H *>(dpreg), 2 * kLdS, ks);
  }
  store_acc<DT, HS>(dq_base, C3, acc, sreg, q0 + rbase, len, T, scale);
#else
  __trap();
#endif
}

template <int DT, int HS>
__global__ void __launch_bounds__(kThreads)
    bwd_dkv_tc(void *dqkv, const void *dout, const void *qkv, const float *lse, const float *dsum,
               const int32_t *lens, int T, int C, int NH, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using H = typename HalfT<DT>::T;
  using G = Geo<HS>;
  extern __shared__ __align__(128) unsigned char smem[];
  H *const ks = reinterpret_cast<H *>(smem);
  H *const vs = reinterpret_cast<H *>(smem + G::kTileBytes);
  H *const qs = reinterpret_cast<H *>(smem + 2 * G::kTileBytes);
  H *const gs = reinterpret_cast<H *>(smem + 3 * G::kTileBytes);
  const int w = threadIdx.x >> 5;
  float *const sreg = reinterpret_cast<float *>(smem + 4 * G::kTileBytes + w * G::kBwdWarpBytes);
  float *const dpreg = sreg + 16 * kLdS;
  float *const lse_s =
      reinterpret_cast<float *>(smem + 4 * G::kTileBytes + kWarps * G::kBwdWarpBytes);
  float *const d_s = lse_s + kTile;
  const int kt = blockIdx.x; /* the earliest keys have the most queries: first */
  const int h = blockIdx.y, b = blockIdx.z, k0 = kt * kTile;
  const int len = seq_len(lens, b, T);
  const int64_t C3 = 3 * (int64_t)C;
  const uint16_t *const seq =
      static_cast<const uint16_t *>(qkv) + (int64_t)b * T * C3 + (int64_t)h * HS;
  const uint16_t *const gseq =
      static_cast<const uint16_t *>(dout) + (int64_t)b * T * C + (int64_t)h * HS;
  uint16_t *const dk_base =
      static_cast<uint16_t *>(dqkv) + (int64_t)b * T * C3 + C + (int64_t)h * HS;
  uint16_t *const dv_base = dk_base + C;
  if (k0 >= len) {
    zero_rows<HS>(dk_base, C3, k0, T);
    zero_rows<HS>(dv_base, C3, k0, T);
    return;
  }
  const int64_t lrow = ((int64_t)b * NH + h) * T;
  load_tile<HS>(ks, seq + C, C3, k0, len);
  load_tile<HS>(vs, seq + 2 * C, C3, k0, len);
  FragC dk[HS / 16], dv[HS / 16];
#pragma unroll
  for (int n = 0; n < HS / 16; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  const int rbase = w * 16; /* this warp's keys within the tile */
  const int nqt = (len + kTile - 1) / kTile;
  for (int qt = kt; qt < nqt; ++qt) {
    const int q0 = qt * kTile;
    __syncthreads(); /* the previous Q, dO, lse, D are consumed */
    load_tile<HS>(qs, seq, C3, q0, len);
    load_tile<HS>(gs, gseq, C, q0, len);
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      const bool ok = q0 + i < len;
      lse_s[i] = ok ? lse[lrow + q0 + i] : 0.0f;
      d_s[i] = ok ? dsum[lrow + q0 + i] : 0.0f;
    }
    __syncthreads();
    /* S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys */
    {
      FragA<H> af[HS / 16];
#pragma unroll
      for (int kk = 0; kk < HS / 16; ++kk)
        wmma::load_matrix_sync(af[kk], ks + rbase * G::kLdh + kk * 16, G::kLdh);
      product_abt<HS>(sreg, kLdS, af, qs);
#pragma unroll
      for (int kk = 0; kk < HS / 16; ++kk)
        wmma::load_matrix_sync(af[kk], vs + rbase * G::kLdh + kk * 16, G::kLdh);
      product_abt<HS>(dpreg, kLdS, af, gs);
    }
    __syncwarp();
    softmax_bwd_tile<DT, true>(
        sreg, dpreg, scale,
        [=](int r, int c) {
          const int t = q0 + c;
          return t >= k0 + rbase + r && t < len;
        },
        [=](int, int c) { return lse_s[c]; }, [=](int, int c) { return d_s[c]; });
    /* dV += P^T dO, dK += dS^T Q */
    product_ab_acc<HS>(dv, reinterpret_cast<const H *>(sreg), 2 * kLdS, gs);
    product_ab_acc<HS>(dk, reinterpret_cast<const H *>(dpreg), 2 * kLdS, qs);
  }
  store_acc<DT, HS>(dv_base, C3, dv, sreg, k0 + rbase, len, T, 1.0f);
  store_acc<DT, HS>(dk_base, C3, dk, sreg, k0 + rbase, len, T, scale);
#else
  __trap();
#endif
}

/* ---- launch --------------------------------------------------------------- */

unsigned simt_grid(int64_t rows) {
  const int64_t blocks = (rows + kSimtWarps - 1) / kSimtWarps;
  return (unsigned)(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

bool aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}

/* The largest dynamic shared memory of the three tensor-core kernels of
 * head size HS: forward and backward must both fit, so that a shape never
 * runs its forward on one path and fails its backward on the other. */
template <int HS>
constexpr int tc_smem() {
  return Geo<HS>::kFwdSmem > Geo<HS>::kDqSmem
             ? (Geo<HS>::kFwdSmem > Geo<HS>::kDkvSmem ? Geo<HS>::kFwdSmem : Geo<HS>::kDkvSmem)
             : (Geo<HS>::kDqSmem > Geo<HS>::kDkvSmem ? Geo<HS>::kDqSmem : Geo<HS>::kDkvSmem);
}

/* Compute capability >= 8.0 (bf16 mma) and enough opt-in shared memory per
 * block for the kernels of head size hs: sm_80 and sm_90 give 163 / 227 KiB,
 * but sm_86 and sm_89 only 99 KiB, less than the hs = 128 backward needs;
 * there cudaFuncSetAttribute would fail the call instead of the CUDA-core
 * kernels running. */
bool device_fits_tc(int hs) {
  int dev = 0, major = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
    return false;
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return false;
  const size_t need = ddp_cuda_flash_attention_tc_smem_bytes(hs);
  return major >= 8 && need > 0 && need <= (size_t)optin;
}

template <typename K>
ddp_status_t set_smem(K kernel, int bytes) {
  DDP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  return DDP_OK;
}

struct Args {
  void *out, *dqkv;
  float *lse, *dsum;   /* forward: lse written */
  const float *lse_in; /* backward: the forward's lse */
  const void *qkv, *dout, *fout;
  const int32_t *lens;
  int B, T, C, NH;
  float scale;
  cudaStream_t stream;
};

dim3 tile_grid(const Args &a) {
  return dim3((unsigned)((a.T + kTile - 1) / kTile), (unsigned)a.NH, (unsigned)a.B);
}

template <int DT, int HS>
ddp_status_t launch_tc(const Args &a, bool backward) {
  using G = Geo<HS>;
  if (!backward) {
    DDP_CHECK(set_smem(fwd_tc<DT, HS>, G::kFwdSmem));
    fwd_tc<DT, HS><<<tile_grid(a), kThreads, G::kFwdSmem, a.stream>>>(a.out, a.lse, a.qkv, a.lens,
                                                                      a.T, a.C, a.NH, a.scale);
    DDP_CUDA_CHECK(cudaGetLastError());
    return DDP_OK;
  }
  DDP_CHECK(set_smem(bwd_dq_tc<DT, HS>, G::kDqSmem));
  DDP_CHECK(set_smem(bwd_dkv_tc<DT, HS>, G::kDkvSmem));
  bwd_dq_tc<DT, HS><<<tile_grid(a), kThreads, G::kDqSmem, a.stream>>>(
      a.dqkv, a.dout, a.qkv, a.lse_in, a.dsum, a.lens, a.T, a.C, a.NH, a.scale);
  DDP_CUDA_CHECK(cudaGetLastError());
  bwd_dkv_tc<DT, HS><<<tile_grid(a), kThreads, G::kDkvSmem, a.stream>>>(
      a.dqkv, a.dout, a.qkv, a.lse_in, a.dsum, a.lens, a.T, a.C, a.NH, a.scale);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

template <int DT>
ddp_status_t launch_tc_hs(const Args &a, int hs, bool backward) {
  switch (hs) {
    case 16:
      return launch_tc<DT, 16>(a, backward);
    case 32:
      return launch_tc<DT, 32>(a, backward);
    case 64:
      return launch_tc<DT, 64>(a, backward);
    case 128:
      return launch_tc<DT, 128>(a, backward);
    default:
      DDP_FAIL(DDP_ERR_INTERNAL, "flash attention: no tensor-core kernel for head size %d", hs);
  }
}

template <int DT>
ddp_status_t launch_simt(const Args &a, bool backward) {
  const unsigned grid = simt_grid((int64_t)a.B * a.NH * a.T);
  if (!backward) {
    fwd_simt<DT><<<grid, kSimtWarps * 32, 0, a.stream>>>(a.out, a.lse, a.qkv, a.lens, a.B, a.T, a.C,
                                                         a.NH, a.scale);
    DDP_CUDA_CHECK(cudaGetLastError());
    return DDP_OK;
  }
  bwd_dq_simt<DT><<<grid, kSimtWarps * 32, 0, a.stream>>>(a.dqkv, a.dout, a.qkv, a.lse_in, a.dsum,
                                                          a.lens, a.B, a.T, a.C, a.NH, a.scale);
  DDP_CUDA_CHECK(cudaGetLastError());
  bwd_dkv_simt<DT><<<grid, kSimtWarps * 32, 0, a.stream>>>(a.dqkv, a.dout, a.qkv, a.lse_in, a.dsum,
                                                           a.lens, a.B, a.T, a.C, a.NH, a.scale);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

template <int DT>
ddp_status_t launch_dot(const Args &a) {
  dot_rows<DT><<<simt_grid((int64_t)a.B * a.NH * a.T), kSimtWarps * 32, 0, a.stream>>>(
      a.dsum, a.dout, a.fout, a.lens, a.B, a.T, a.C, a.NH);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

ddp_status_t check(const char *op, ddp_dtype_t dt, int B, int T, int C, int NH) {
  if (dt != DDP_DTYPE_F32 && dt != DDP_DTYPE_BF16 && dt != DDP_DTYPE_F16)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: activation dtype %s (%d) is not fp32, bf16 or fp16", op,
             ddp_dtype_name(dt), (int)dt);
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0 || C % NH != 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: bad shape B=%d T=%d C=%d NH=%d", op, B, T, C, NH);
  if (B > 65535 || NH > 65535)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "%s: B=%d or NH=%d exceeds the grid limit 65535", op, B, NH);
  if (C / NH > kMaxHs)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "%s: head size hs=%d (C=%d / NH=%d) is larger than %d", op,
             C / NH, C, NH, kMaxHs);
  return DDP_OK;
}

bool tc_head(int hs) {
  return hs == 16 || hs == 32 || hs == 64 || hs == 128;
}

}  // namespace

extern "C" int ddp_cuda_flash_attention_tensor_cores(ddp_dtype_t dt, int C, int NH, const void *a,
                                                     const void *b, const void *c, const void *d) {
  if (dt != DDP_DTYPE_BF16 && dt != DDP_DTYPE_F16) return 0;
  if (C <= 0 || NH <= 0 || C % NH != 0 || !tc_head(C / NH)) return 0;
  if (!aligned16(a) || !aligned16(b) || !aligned16(c) || !aligned16(d)) return 0;
  return device_fits_tc(C / NH) ? 1 : 0;
}

extern "C" size_t ddp_cuda_flash_attention_tc_smem_bytes(int hs) {
  switch (hs) {
    case 16:
      return (size_t)tc_smem<16>();
    case 32:
      return (size_t)tc_smem<32>();
    case 64:
      return (size_t)tc_smem<64>();
    case 128:
      return (size_t)tc_smem<128>();
    default:
      return 0;
  }
}

extern "C" ddp_status_t ddp_cuda_flash_attention_fwd(void *out, float *lse, const void *qkv,
                                                     const int32_t *lens, ddp_dtype_t dt, int B,
                                                     int T, int C, int NH, cudaStream_t stream) {
  const char *op = "ddp_cuda_flash_attention_fwd";
  if (!out || !qkv) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: NULL pointer", op);
  DDP_CHECK(check(op, dt, B, T, C, NH));
  const int hs = C / NH;
  Args a = {};
  a.out = out, a.lse = lse, a.qkv = qkv, a.lens = lens;
  a.B = B, a.T = T, a.C = C, a.NH = NH, a.stream = stream;
  a.scale = (float)(1.0 / sqrt((double)hs));
  if (ddp_cuda_flash_attention_tensor_cores(dt, C, NH, out, qkv, NULL, NULL))
    return dt == DDP_DTYPE_BF16 ? launch_tc_hs<DDP_DTYPE_BF16>(a, hs, false)
                                : launch_tc_hs<DDP_DTYPE_F16>(a, hs, false);
  switch (dt) {
    case DDP_DTYPE_BF16:
      return launch_simt<DDP_DTYPE_BF16>(a, false);
    case DDP_DTYPE_F16:
      return launch_simt<DDP_DTYPE_F16>(a, false);
    default:
      return launch_simt<DDP_DTYPE_F32>(a, false);
  }
}

extern "C" ddp_status_t ddp_cuda_flash_attention_bwd(void *dqkv, float *dsum, const void *dout,
                                                     const void *qkv, const void *out,
                                                     const float *lse, const int32_t *lens,
                                                     ddp_dtype_t dt, int B, int T, int C, int NH,
                                                     cudaStream_t stream) {
  const char *op = "ddp_cuda_flash_attention_bwd";
  if (!dqkv || !dsum || !dout || !qkv || !out || !lse)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: NULL pointer", op);
  DDP_CHECK(check(op, dt, B, T, C, NH));
  const int hs = C / NH;
  Args a = {};
  a.dqkv = dqkv, a.dsum = dsum, a.dout = dout, a.qkv = qkv, a.fout = out, a.lse_in = lse;
  a.lens = lens, a.B = B, a.T = T, a.C = C, a.NH = NH, a.stream = stream;
  a.scale = (float)(1.0 / sqrt((double)hs));
  switch (dt) {
    case DDP_DTYPE_BF16:
      DDP_CHECK(launch_dot<DDP_DTYPE_BF16>(a));
      break;
    case DDP_DTYPE_F16:
      DDP_CHECK(launch_dot<DDP_DTYPE_F16>(a));
      break;
    default:
      DDP_CHECK(launch_dot<DDP_DTYPE_F32>(a));
      break;
  }
  if (ddp_cuda_flash_attention_tensor_cores(dt, C, NH, dqkv, dout, qkv, out))
    return dt == DDP_DTYPE_BF16 ? launch_tc_hs<DDP_DTYPE_BF16>(a, hs, true)
                                : launch_tc_hs<DDP_DTYPE_F16>(a, hs, true);
  switch (dt) {
    case DDP_DTYPE_BF16:
      return launch_simt<DDP_DTYPE_BF16>(a, true);
    case DDP_DTYPE_F16:
      return launch_simt<DDP_DTYPE_F16>(a, true);
    default:
      return launch_simt<DDP_DTYPE_F32>(a, true);
  }
}
