/* Flash-style causal multi-head self-attention on the CPU (ddptrain/nn.h's
 * flash_attention_fwd and flash_attention_bwd): the same algorithm as the
 * CUDA kernels of kernels/flash_attention.cu, which it is the oracle for,
 * and the CPU backend's own op.
 *
 * No T x T matrix: per sequence and head, query rows go in blocks of
 * FA_BQ and keys in tiles of FA_BK. The forward keeps a running row
 * maximum m and sum l (online softmax): each key tile's scores S = scale *
 * Q K^T (one sgemm), P = exp(S - m_new), the output rows rescaled by
 * exp(m_old - m_new) and P V added (one sgemm); at the end out /= l and
 * lse = m + log(l) is saved. The backward recomputes P = exp(S - lse) tile
 * by tile, with D = rowsum(dout * out) computed first:
 *   dV += P^T dO,  dP = dO V^T,  dS = P * (dP - D),
 *   dQ += scale * dS K,  dK += scale * dS^T Q.
 * Key tiles past a block's last row are never touched (causal skipping);
 * inside the diagonal tile the entries past each row's position are
 * computed by the sgemm but set to exactly 0 in P (and hence in dS).
 * Query rows at or past lens[b] are padding: nothing is computed for
 * them (their keys would be past every valid row's position anyway), their
 * out and dqkv rows are zeros and their lse and D are 0.
 *
 * Tiles live on the stack (S and dP: 2 * FA_BQ * FA_BK floats, 64 KiB), so
 * fp32 calls need no workspace at all; every sum runs in a fixed order on
 * one thread (OpenBLAS splits an sgemm's output, not its k loop), so results
 * are bit-reproducible. Under bf16/fp16 one sequence at a time is widened
 * into the backend's fp32 workspace (cpu_nn_workspace.c, sized by
 * reserve()): 4*T*C floats forward, 8*T*C backward. Each stored output is
 * rounded once. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_nn_impl.h"
#include "ddptrain/check.h"
#include "ddptrain/dtype.h"

/* Query rows per block and keys per tile. Larger tiles make fewer, larger
 * sgemm calls (each has a fixed cost) at the price of more masked work in
 * the diagonal tile; see bench/RESULTS.md ("Flash attention on the CPU"). */
#define FA_BQ 64
#define FA_BK 128

#define FA_REQUIRE(cond, ...)                                       \
  do {                                                              \
    if (!(cond)) DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: " __VA_ARGS__); \
  } while (0)

size_t ddp_cpu_flash_attention_workspace_floats(size_t n, size_t c) {
  return 8 * n * c; /* backward: one sequence of T <= n rows, see above */
}

static ddp_status_t check_args(const char *op, ddp_dtype_t dt, const int32_t *lens, int B, int T,
                               int C, int NH) {
  FA_REQUIRE(dt == DDP_DTYPE_F32 || dt == DDP_DTYPE_BF16 || dt == DDP_DTYPE_F16,
             "%s: activation dtype %s (%d) is not fp32, bf16 or fp16", op, ddp_dtype_name(dt),
             (int)dt);
  FA_REQUIRE(B > 0 && T > 0 && C > 0 && NH > 0, "%s: sizes B=%d T=%d C=%d NH=%d must be positive",
             op, B, T, C, NH);
  FA_REQUIRE(C % NH == 0, "%s: C=%d is not a multiple of NH=%d", op, C, NH);
  FA_REQUIRE((int64_t)T * 3 * C <= INT32_MAX, "%s: T=%d x 3C=%d is too large for sgemm", op, T,
             3 * C);
  if (lens)
    for (int b = 0; b < B; ++b)
      FA_REQUIRE(lens[b] >= 0 && lens[b] <= T, "%s: lens[%d]=%d is outside [0, T=%d]", op, b,
                 (int)lens[b], T);
  return DDP_OK;
}

/* C (m,n) = alpha op(A) op(B) + beta C, fp32, row-major with the given
 * leading dimensions. */
static ddp_status_t gemm(ddp_backend_t *be, int ta, int tb, int64_t m, int64_t n, int64_t k,
                         float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                         float beta, float *c, int64_t ldc, ddp_stream_t s) {
  ddp_gemm_t g = ddp_gemm_packed_f32(m, n, k, a, b, c);
  g.trans_a = ta ? DDP_TRANSPOSE_YES : DDP_TRANSPOSE_NO;
  g.trans_b = tb ? DDP_TRANSPOSE_YES : DDP_TRANSPOSE_NO;
  g.alpha = alpha;
  g.beta = beta;
  g.lda = lda;
  g.ldb = ldb;
  g.ldc = ldc;
  return ddp_backend_gemm(be, &g, s);
}

/* p[0..nv) = exp(p - mx), p[nv..n) = 0; returns the sum of the first nv. */
DDP_CPU_CLONES static float exp_row(float *p, size_t nv, size_t n, float mx) {
  cpu_vf acc = cpu_vsplat(0.0f);
  size_t i = 0;
  for (; i + CPU_VW <= nv; i += CPU_VW) {
    const cpu_vf e = cpu_vexp(cpu_vload(p + i) - mx);
    cpu_vstore(p + i, e);
    acc += e;
  }
  if (i < nv) {
    const cpu_vf e = cpu_vexp(cpu_vload_part(p + i, nv - i, -__builtin_inff()) - mx);
    cpu_vstore_part(p + i, e, nv - i);
    acc += e;
  }
  if (n > nv) memset(p + nv, 0, (n - nv) * sizeof *p);
  return cpu_vhsum(acc);
}

/* d[j] = p[j] * (d[j] - dsum), j < n. */
DDP_CPU_CLONES static void ds_row(float *restrict d, const float *restrict p, size_t n,
                                  float dsum) {
  size_t i = 0;
  for (; i + CPU_VW <= n; i += CPU_VW)
    cpu_vstore(d + i, cpu_vload(p + i) * (cpu_vload(d + i) - dsum));
  for (; i < n; ++i) d[i] = p[i] * (d[i] - dsum);
}

static void scale_row(float *x, size_t n, float a) {
  for (size_t i = 0; i < n; ++i) x[i] *= a;
}

static float dot(const float *x, const float *y, size_t n) {
  float acc = 0.0f;
  for (size_t i = 0; i < n; ++i) acc += x[i] * y[i];
  return acc;
}

/* Valid keys of row t in the tile [k0, k1): those <= t (may be <= 0). */
static int64_t valid_keys(int64_t t, int64_t k0, int64_t k1) {
  return (t + 1 < k1 ? t + 1 : k1) - k0;
}

// one sequence: out (T,C), lse (NH,T) or NULL, qkv (T,3C); rows >= len padding
static ddp_status_t fwd_seq(ddp_backend_t *be, float *out, float *lse, const float *qkv, int len,
                            int T, int C, int NH, ddp_stream_t s) {
  const int64_t hs = C / NH, C3 = 3 * (int64_t)C;
  const float scale = (float)(1.0 / sqrt((double)hs));
  float sc[FA_BQ * FA_BK], m[FA_BQ], l[FA_BQ];
  for (int64_t t = len; t < T; ++t) memset(out + t * C, 0, (size_t)C * sizeof *out);
  for (int64_t h = 0; h < NH; ++h) {
    const float *q = qkv + h * hs, *k = qkv + C + h * hs, *v = qkv + 2 * C + h * hs;
    float *o = out + h * hs;
    if (lse)
      for (int64_t t = len; t < T; ++t) lse[h * T + t] = 0.0f;
    for (int64_t r0 = 0; r0 < len; r0 += FA_BQ) {
      const int64_t r1 = r0 + FA_BQ < len ? r0 + FA_BQ : len, rows = r1 - r0;
      for (int64_t i = 0; i < rows; ++i) m[i] = -INFINITY, l[i] = 0.0f;
      for (int64_t k0 = 0; k0 < r1; k0 += FA_BK) {
        const int64_t k1 = k0 + FA_BK < r1 ? k0 + FA_BK : r1, nk = k1 - k0;
        DDP_CHECK(gemm(be, 0, 1, rows, nk, hs, scale, q + r0 * C3, C3, k + k0 * C3, C3, 0.0f, sc,
                       FA_BK, s));
        for (int64_t i = 0; i < rows; ++i) {
          float *row = sc + i * FA_BK;
          const int64_t nv = valid_keys(r0 + i, k0, k1);
          if (nv <= 0) { /* the whole tile is past row t: P row 0, no rescale */
            memset(row, 0, (size_t)nk * sizeof *row);
            continue;
          }
          const float tmax = cpu_row_max(row, (size_t)nv);
          const float mx = tmax > m[i] ? tmax : m[i];
          const float sum = exp_row(row, (size_t)nv, (size_t)nk, mx);
          /* The first tile holds key 0 <= t for every row: m[i] is finite
           * from there on, and the output row exists to be rescaled. */
          const float alpha = k0 == 0 ? 0.0f : expf(m[i] - mx);
          if (k0 > 0 && alpha != 1.0f) scale_row(o + (r0 + i) * C, (size_t)hs, alpha);
          l[i] = l[i] * alpha + sum;
          m[i] = mx;
        }
        DDP_CHECK(gemm(be, 0, 0, rows, hs, nk, 1.0f, sc, FA_BK, v + k0 * C3, C3,
                       k0 == 0 ? 0.0f : 1.0f, o + r0 * C, C, s));
      }
      for (int64_t i = 0; i < rows; ++i) {
        scale_row(o + (r0 + i) * C, (size_t)hs, 1.0f / l[i]);
        if (lse) lse[h * T + r0 + i] = m[i] + logf(l[i]);
      }
    }
  }
  return DDP_OK;
}

// one sequence: dqkv (T,3C) =, D (NH,T), dout (T,C), qkv (T,3C), out (T,C), lse (NH,T)
static ddp_status_t bwd_seq(ddp_backend_t *be, float *dqkv, float *D, const float *dout,
                            const float *qkv, const float *out, const float *lse, int len, int T,
                            int C, int NH, ddp_stream_t s) {
  const int64_t hs = C / NH, C3 = 3 * (int64_t)C;
  const float scale = (float)(1.0 / sqrt((double)hs));
  float pb[FA_BQ * FA_BK], db[FA_BQ * FA_BK];
  /* Every gradient below accumulates (beta 1) in a fixed order; padding
   * rows keep these zeros. */
  memset(dqkv, 0, (size_t)(T * C3) * sizeof *dqkv);
  for (int64_t h = 0; h < NH; ++h) {
    const float *q = qkv + h * hs, *k = qkv + C + h * hs, *v = qkv + 2 * C + h * hs;
    const float *g = dout + h * hs;
    float *dq = dqkv + h * hs, *dk = dqkv + C + h * hs, *dv = dqkv + 2 * C + h * hs;
    float *Dh = D + h * T;
    const float *lh = lse + h * T;
    for (int64_t t = 0; t < T; ++t)
      Dh[t] = t < len ? dot(g + t * C, out + t * C + h * hs, (size_t)hs) : 0.0f;
    for (int64_t r0 = 0; r0 < len; r0 += FA_BQ) {
      const int64_t r1 = r0 + FA_BQ < len ? r0 + FA_BQ : len, rows = r1 - r0;
      for (int64_t k0 = 0; k0 < r1; k0 += FA_BK) {
        const int64_t k1 = k0 + FA_BK < r1 ? k0 + FA_BK : r1, nk = k1 - k0;
        DDP_CHECK(gemm(be, 0, 1, rows, nk, hs, scale, q + r0 * C3, C3, k + k0 * C3, C3, 0.0f, pb,
                       FA_BK, s));
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t nv = valid_keys(r0 + i, k0, k1);
          float *row = pb + i * FA_BK;
          if (nv <= 0)
            memset(row, 0, (size_t)nk * sizeof *row);
          else
            (void)exp_row(row, (size_t)nv, (size_t)nk, lh[r0 + i]);
        }
        /* dV[k0:k1] += P^T dO[r0:r1] */
        DDP_CHECK(gemm(be, 1, 0, nk, hs, rows, 1.0f, pb, FA_BK, g + r0 * C, C, 1.0f, dv + k0 * C3,
                       C3, s));
        /* dP = dO[r0:r1] V[k0:k1]^T, then dS = P * (dP - D) in place */
        DDP_CHECK(
            gemm(be, 0, 1, rows, nk, hs, 1.0f, g + r0 * C, C, v + k0 * C3, C3, 0.0f, db, FA_BK, s));
        for (int64_t i = 0; i < rows; ++i)
          ds_row(db + i * FA_BK, pb + i * FA_BK, (size_t)nk, Dh[r0 + i]);
        /* dQ[r0:r1] += scale dS K[k0:k1];  dK[k0:k1] += scale dS^T Q[r0:r1] */
        DDP_CHECK(gemm(be, 0, 0, rows, hs, nk, scale, db, FA_BK, k + k0 * C3, C3, 1.0f,
                       dq + r0 * C3, C3, s));
        DDP_CHECK(gemm(be, 1, 0, nk, hs, rows, scale, db, FA_BK, q + r0 * C3, C3, 1.0f,
                       dk + k0 * C3, C3, s));
      }
    }
  }
  return DDP_OK;
}

static inline const void *half_at(const void *p, size_t i) {
  return (const uint16_t *)p + i;
}

static inline void *half_at_mut(void *p, size_t i) {
  return (uint16_t *)p + i;
}

/* Arguments are validated before these run (non-NULL, distinct buffers),
 * so the conversions cannot fail. */
static void widen(float *dst, const void *src, ddp_dtype_t dt, size_t n) {
  (void)ddp_convert_host(dst, DDP_DTYPE_F32, src, dt, n);
}

static void narrow(void *dst, const float *src, ddp_dtype_t dt, size_t n) {
  (void)ddp_convert_host(dst, dt, src, DDP_DTYPE_F32, n);
}

// out (B,T,C), lse (B,NH,T) or NULL, qkv (B,T,3C), lens (B) or NULL
ddp_status_t ddp_cpu_flash_attention_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *lse,
                                         const void *qkv, const int32_t *lens, int B, int T, int C,
                                         int NH, ddp_stream_t s) {
  FA_REQUIRE(be && out && qkv, "flash_attention_fwd: NULL pointer");
  DDP_CHECK(check_args("flash_attention_fwd", dt, lens, B, T, C, NH));
  const size_t tc = (size_t)T * (size_t)C;
  float *ws = NULL;
  if (dt != DDP_DTYPE_F32) DDP_CHECK(ddp_cpu_nn_workspace(be, 4 * tc, "flash_attention_fwd", &ws));
  for (int b = 0; b < B; ++b) {
    const int len = lens ? lens[b] : T;
    float *lb = lse ? lse + (size_t)b * NH * T : NULL;
    if (dt == DDP_DTYPE_F32) {
      DDP_CHECK(fwd_seq(be, (float *)out + b * tc, lb, (const float *)qkv + 3 * b * tc, len, T, C,
                        NH, s));
      continue;
    }
    widen(ws, half_at(qkv, 3 * b * tc), dt, 3 * tc);
    DDP_CHECK(fwd_seq(be, ws + 3 * tc, lb, ws, len, T, C, NH, s));
    narrow(half_at_mut(out, b * tc), ws + 3 * tc, dt, tc);
  }
  return DDP_OK;
}

// dqkv (B,T,3C) =, scratch (B,NH,T), dout (B,T,C), qkv (B,T,3C), out (B,T,C), lse (B,NH,T)
ddp_status_t ddp_cpu_flash_attention_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dqkv,
                                         float *scratch, const void *dout, const void *qkv,
                                         const void *out, const float *lse, const int32_t *lens,
                                         int B, int T, int C, int NH, ddp_stream_t s) {
  FA_REQUIRE(be && dqkv && scratch && dout && qkv && out && lse,
             "flash_attention_bwd: NULL pointer");
  DDP_CHECK(check_args("flash_attention_bwd", dt, lens, B, T, C, NH));
  const size_t tc = (size_t)T * (size_t)C, nht = (size_t)NH * (size_t)T;
  float *ws = NULL;
  if (dt != DDP_DTYPE_F32) DDP_CHECK(ddp_cpu_nn_workspace(be, 8 * tc, "flash_attention_bwd", &ws));
  for (int b = 0; b < B; ++b) {
    const int len = lens ? lens[b] : T;
    float *Db = scratch + b * nht;
    const float *lb = lse + b * nht;
    if (dt == DDP_DTYPE_F32) {
      DDP_CHECK(bwd_seq(be, (float *)dqkv + 3 * b * tc, Db, (const float *)dout + b * tc,
                        (const float *)qkv + 3 * b * tc, (const float *)out + b * tc, lb, len, T, C,
                        NH, s));
      continue;
    }
    float *q = ws, *dq = ws + 3 * tc, *g = ws + 6 * tc, *o = ws + 7 * tc;
    widen(q, half_at(qkv, 3 * b * tc), dt, 3 * tc);
    widen(g, half_at(dout, b * tc), dt, tc);
    widen(o, half_at(out, b * tc), dt, tc);
    DDP_CHECK(bwd_seq(be, dq, Db, g, q, o, lb, len, T, C, NH, s));
    narrow(half_at_mut(dqkv, 3 * b * tc), dq, dt, 3 * tc);
  }
  return DDP_OK;
}
