/* Causal multi-head self-attention on the CPU (ddptrain/nn.h): forward
 * (training, saving the probabilities, and eval, without) and backward.
 *
 * Layout: qkv (B,T,3C) holds per row [q | k | v]; head h of q, k and v is
 * the hs = C/NH columns at offsets h*hs, C + h*hs and 2C + h*hs, so one head
 * over all positions is a T x hs matrix with row pitch 3C, and consecutive
 * heads are hs apart: every product below is one strided-batched GEMM over
 * the NH heads of a sequence, read straight out of qkv without copies.
 *
 * Causality is exploited by row blocks: rows [r0, r1) of the score matrix
 * only need columns [0, r1), so each block is a (r1 - r0) x r1 GEMM and the
 * upper-right triangle of blocks is never computed (T = 256 with blocks of
 * ATT_BLOCK = 64 does 62.5% of the full T x T work). Inside a block, row t's
 * columns (t, r1) are computed but masked: they are set to exactly 0 in P
 * and in dS, so the following GEMMs over the block add nothing from them.
 *
 * Per the contract, only columns 0..t of a saved probability row are ever
 * read (backward copies the block of P it feeds a GEMM, zero-filling the
 * rest), so any attention forward's output, e.g. a CUDA kernel's, can be
 * passed to this backward. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_nn_impl.h"
#include "ddptrain/check.h"

/* Rows per block. Smaller blocks skip more of the masked triangle but make
 * smaller, less efficient GEMMs. At B=16, T=256, C=256, NH=4 (hs = 64), one
 * thread, forward / backward best of 10: 32 rows 24.6 / 29.8 ms, 64 rows
 * 22.4 / 28.7, 128 rows 23.4 / 29.8, 256 (no blocking) 25.2 / 35.8. */
#define ATT_BLOCK 64

static ddp_status_t check_sizes(const char *op, int B, int T, int C, int NH) {
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: %s: sizes B=%d T=%d C=%d NH=%d must be positive", op, B, T,
             C, NH);
  if (C % NH != 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: %s: C=%d is not a multiple of NH=%d", op, C, NH);
  return DDP_OK;
}

/* One GEMM batched over the NH heads: every operand advances by `stride_*`
 * from one head to the next. */
static ddp_gemm_t head_gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                            int64_t stride_a, const float *b, int64_t ldb, int64_t stride_b,
                            float *c, int64_t ldc, int64_t stride_c, int NH) {
  ddp_gemm_t g = ddp_gemm_packed_f32(m, n, k, a, b, c);
  g.lda = lda;
  g.stride_a = stride_a;
  g.ldb = ldb;
  g.stride_b = stride_b;
  g.ldc = ldc;
  g.stride_c = stride_c;
  g.batch = NH;
  return g;
}

/* Softmax of row p[0..t] in place (the scores arrive scaled); columns
 * t+1 .. n-1 are set to 0 so a GEMM over n columns ignores them. */
DDP_CPU_CLONES static void softmax_causal_row(float *p, size_t t, size_t n) {
  const size_t len = t + 1;
  const float mx = cpu_row_max(p, len);
  cpu_vf acc = cpu_vsplat(0.0f);
  size_t i = 0;
  for (; i + CPU_VW <= len; i += CPU_VW) {
    const cpu_vf e = cpu_vexp(cpu_vload(p + i) - mx);
    cpu_vstore(p + i, e);
    acc += e;
  }
  if (i < len) {
    const cpu_vf e = cpu_vexp(cpu_vload_part(p + i, len - i, -__builtin_inff()) - mx);
    cpu_vstore_part(p + i, e, len - i);
    acc += e;
  }
  /* The row maximum contributes exp(0) = 1, so the sum is at least 1. */
  const float inv = 1.0f / cpu_vhsum(acc);
  i = 0;
  for (; i + CPU_VW <= len; i += CPU_VW) cpu_vstore(p + i, cpu_vload(p + i) * inv);
  for (; i < len; ++i) p[i] *= inv;
  if (n > len) memset(p + len, 0, (n - len) * sizeof *p);
}

/* Forward of the row block [r0, r1) of sequence b, all heads at once. p is
 * the block's score/probability storage: head h's row t lives at
 * p + h * p_stride + (t - r0) * ldp. */
static ddp_status_t attention_block_fwd(ddp_backend_t *be, float *out, float *p, int64_t ldp,
                                        int64_t p_stride, const float *qkv, int64_t b, int64_t r0,
                                        int64_t r1, int T, int C, int NH, ddp_stream_t s) {
  const int64_t hs = C / NH, C3 = 3 * (int64_t)C, rows = r1 - r0;
  const float *seq = qkv + b * T * C3;
  /* S = scale * Q[r0:r1] K[0:r1]^T */
  ddp_gemm_t g =
      head_gemm(rows, r1, hs, seq + r0 * C3, C3, hs, seq + C, C3, hs, p, ldp, p_stride, NH);
  g.trans_b = DDP_TRANSPOSE_YES;
  g.alpha = (float)(1.0 / sqrt((double)hs));
  DDP_CHECK(ddp_backend_gemm(be, &g, s));
  for (int h = 0; h < NH; ++h)
    for (int64_t t = r0; t < r1; ++t)
      softmax_causal_row(p + h * p_stride + (t - r0) * ldp, (size_t)t, (size_t)r1);
  /* out[r0:r1] = P V[0:r1] */
  g = head_gemm(rows, hs, r1, p, ldp, p_stride, seq + 2 * C, C3, hs,
                out + (b * T + r0) * (int64_t)C, C, hs, NH);
  return ddp_backend_gemm(be, &g, s);
}

// out (B,T,C), att (B,NH,T,T) or NULL, qkv (B,T,3C)
ddp_status_t ddp_cpu_attention_fwd_f32(ddp_backend_t *be, float *out, float *att, const float *qkv,
                                       int B, int T, int C, int NH, ddp_stream_t s) {
  DDP_CHECK(check_sizes("attention_fwd", B, T, C, NH));
  if (!out || !qkv) DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: attention_fwd: NULL pointer");
  const int64_t TT = (int64_t)T * T;
  if (att) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        const int64_t r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
        DDP_CHECK(attention_block_fwd(be, out, att + b * NH * TT + r0 * T, T, TT, qkv, b, r0, r1, T,
                                      C, NH, s));
      }
    return DDP_OK;
  }
  /* Eval: no (B,NH,T,T) buffer, so the probabilities of one row block of all
   * heads go to a scratch of NH * ATT_BLOCK * T floats, allocated here once
   * per call. A heap allocation is acceptable because eval is not the step
   * loop (training passes att and allocates nothing); blocks are computed
   * exactly as in training, so eval and training outputs agree bit for bit. */
  const int64_t rows = T < ATT_BLOCK ? T : ATT_BLOCK;
  float *scratch = malloc((size_t)(NH * rows * T) * sizeof *scratch);
  if (!scratch)
    DDP_FAIL(DDP_ERR_OOM, "nn: attention_fwd: cannot allocate %.2f MiB of eval scratch",
             (double)(NH * rows * T) * sizeof(float) / 1048576.0);
  ddp_status_t st = DDP_OK;
  for (int64_t b = 0; b < B && st == DDP_OK; ++b)
    for (int64_t r0 = 0; r0 < T && st == DDP_OK; r0 += ATT_BLOCK) {
      const int64_t r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
      st = attention_block_fwd(be, out, scratch, T, rows * T, qkv, b, r0, r1, T, C, NH, s);
    }
  free(scratch);
  return st;
}

/* dS = P * (dP - rowsum(P * dP)) * scale for columns 0..t of row t, read
 * from p (probabilities) and d (dP, overwritten with dS); columns t+1 .. n-1
 * of d are set to 0. */
DDP_CPU_CLONES static void softmax_causal_row_bwd(float *restrict d, const float *restrict p,
                                                  size_t t, size_t n, float scale) {
  const size_t len = t + 1;
  cpu_vf acc = cpu_vsplat(0.0f);
  size_t i = 0;
  for (; i + CPU_VW <= len; i += CPU_VW) acc += cpu_vload(p + i) * cpu_vload(d + i);
  float dot = cpu_vhsum(acc);
  for (; i < len; ++i) dot += p[i] * d[i];
  i = 0;
  for (; i + CPU_VW <= len; i += CPU_VW)
    cpu_vstore(d + i, cpu_vload(p + i) * (cpu_vload(d + i) - dot) * scale);
  for (; i < len; ++i) d[i] = p[i] * (d[i] - dot) * scale;
  if (n > len) memset(d + len, 0, (n - len) * sizeof *d);
}

// dqkv (B,T,3C) =, scratch (B,NH,T,T), dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T)
ddp_status_t ddp_cpu_attention_bwd_f32(ddp_backend_t *be, float *dqkv, float *scratch,
                                       const float *dout, const float *qkv, const float *att, int B,
                                       int T, int C, int NH, ddp_stream_t s) {
  DDP_CHECK(check_sizes("attention_bwd", B, T, C, NH));
  if (!dqkv || !scratch || !dout || !qkv || !att)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: attention_bwd: NULL pointer");
  const int64_t hs = C / NH, C3 = 3 * (int64_t)C, TT = (int64_t)T * T;
  const float scale = (float)(1.0 / sqrt((double)hs));
  /* One row block of all heads at a time lives in scratch, head h at
   * h * sstride: NH * min(T, ATT_BLOCK) * T floats of the B*NH*T*T the
   * contract provides, reused for every block so it stays in cache. */
  const int64_t sstride = (T < ATT_BLOCK ? T : ATT_BLOCK) * (int64_t)T;
  for (int64_t b = 0; b < B; ++b) {
    const float *seq = qkv + b * T * C3;
    float *dseq = dqkv + b * T * C3;
    const float *pb = att + b * NH * TT;
    /* Blocks run last to first: the last block's dK, dV GEMMs cover all T
     * rows and overwrite them (beta 0, so whatever dqkv held is ignored);
     * each earlier block covers a prefix and adds to it (beta 1). */
    const int64_t nblocks = (T + ATT_BLOCK - 1) / ATT_BLOCK;
    for (int64_t blk = nblocks - 1; blk >= 0; --blk) {
      const int64_t r0 = blk * ATT_BLOCK;
      const int64_t r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, rows = r1 - r0;
      const float beta = blk == nblocks - 1 ? 0.0f : 1.0f;
      const float *dblk = dout + (b * T + r0) * (int64_t)C;
      /* The block of P, masked, into scratch: P's own masked entries are
       * never read. It is the A operand of dV, then dP overwrites it.
       * (Reading the off-diagonal columns [0, r0) from att in place and
       * copying only the diagonal tile costs one more GEMM per block and
       * measured no faster at T = 256.) */
      for (int h = 0; h < NH; ++h)
        for (int64_t t = r0; t < r1; ++t) {
          float *dst = scratch + h * sstride + (t - r0) * T;
          memcpy(dst, pb + h * TT + t * T, (size_t)(t + 1) * sizeof *dst);
          if (r1 > t + 1) memset(dst + t + 1, 0, (size_t)(r1 - t - 1) * sizeof *dst);
        }
      /* dV[0:r1] (+)= P_blk^T dout_blk */
      ddp_gemm_t g =
          head_gemm(r1, hs, rows, scratch, T, sstride, dblk, C, hs, dseq + 2 * C, C3, hs, NH);
      g.trans_a = DDP_TRANSPOSE_YES;
      g.beta = beta;
      DDP_CHECK(ddp_backend_gemm(be, &g, s));
      /* dP_blk = dout_blk V[0:r1]^T */
      g = head_gemm(rows, r1, hs, dblk, C, hs, seq + 2 * C, C3, hs, scratch, T, sstride, NH);
      g.trans_b = DDP_TRANSPOSE_YES;
      DDP_CHECK(ddp_backend_gemm(be, &g, s));
      for (int h = 0; h < NH; ++h)
        for (int64_t t = r0; t < r1; ++t)
          softmax_causal_row_bwd(scratch + h * sstride + (t - r0) * T, pb + h * TT + t * T,
                                 (size_t)t, (size_t)r1, scale);
      /* dQ_blk = dS_blk K[0:r1] (the scale is already in dS) */
      g = head_gemm(rows, hs, r1, scratch, T, sstride, seq + C, C3, hs, dseq + r0 * C3, C3, hs, NH);
      DDP_CHECK(ddp_backend_gemm(be, &g, s));
      /* dK[0:r1] (+)= dS_blk^T Q_blk */
      g = head_gemm(r1, hs, rows, scratch, T, sstride, seq + r0 * C3, C3, hs, dseq + C, C3, hs, NH);
      g.trans_a = DDP_TRANSPOSE_YES;
      g.beta = beta;
      DDP_CHECK(ddp_backend_gemm(be, &g, s));
    }
  }
  return DDP_OK;
}
