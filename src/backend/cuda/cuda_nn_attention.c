/* Causal multi-head self-attention on CUDA (ddptrain/nn.h's attention_fwd
 * and attention_bwd): batched GEMMs through the backend's own GEMM around
 * the layout and softmax kernels of kernels/attention.cu. The CPU twin is
 * src/backend/cpu/cpu_attention.c.
 *
 * qkv (B,T,3C) is first split into fp32 q, k, v laid out (B,NH,T,hs): the
 * B*NH (T,hs) slabs then sit a uniform T*hs apart, so each product below
 * is ONE strided-batched GEMM over all B*NH heads (in qkv's own layout the
 * stride from head to head is hs but from sequence to sequence T*3C). The
 * operands are fp32 under every dt: widening is exact, so the GEMMs see
 * the numbers the CPU twin sees, and the probabilities are fp32 anyway.
 * The scale 1/sqrt(hs) is folded into the alpha of every GEMM that needs
 * it (scores, dq, dk), as the CPU twin does for the scores.
 *
 * Workspace (the shared scratch, cuda_impl.h), in slots of nc = B*T*C
 * floats (rounded up to 64 floats, so each slot is 256-byte aligned):
 *   forward  3 slots: q, k, v; the fp32 output reuses q's slot (q is dead
 *            once the scores exist);
 *   eval     3 slots plus the scores of one row block of all B*NH heads;
 *   backward 5 slots: q, k, v, dout in head layout, dv; dq and dk reuse
 *            the slots of dout and v, which are dead once dP is computed.
 * ddp_cuda_attention_scratch_bytes reserves 5 slots of the (N, C)
 * activation for up to N = B*T rows. Eval takes its row blocks from
 * whatever is reserved past its 3 slots, at least 2nc floats: a block of R
 * rows of all heads needs B*NH*R*T floats, so R >= 2*hs rows always fit
 * whatever T is (rows = min(T, fitting)); this bound is independent of T,
 * which reserve() is never told. Training (att given) computes whole
 * (T,T) score matrices into att, with zeros above the diagonal; eval skips
 * the columns past each block's last row like the CPU twin. Eval and
 * training give the same values up to the summation order the GEMM
 * library picks for the different shapes.
 *
 * Backward honours the contract that att's columns past the diagonal are
 * never read (any forward's att, e.g. the CPU's, is accepted): the masked
 * copy of P that feeds dV is made in the caller's scratch before dP
 * overwrites it.
 *
 * No host synchronisation and no allocation; all kernels and cuBLAS GEMMs
 * are deterministic, so two calls give bit-identical results. */
#include <config.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "attention.h"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"
#include "ddptrain/check.h"

/* Slots of workspace, each one fp32 activation (see above). */
#define ATT_FWD_SLOTS 3
#define ATT_BWD_SLOTS 5
/* Slots start on 256-byte boundaries (the scratch itself does), so every
 * GEMM operand is aligned for the library's vectorised kernels. */
#define ATT_SLOT_ALIGN 64

/* Floats in one slot for nc activation elements. */
static int64_t slot_floats(int64_t nc) {
  return (nc + ATT_SLOT_ALIGN - 1) / ATT_SLOT_ALIGN * ATT_SLOT_ALIGN;
}

size_t ddp_cuda_attention_scratch_bytes(ddp_dtype_t dt, int64_t N, int C, int V) {
  (void)dt; /* fp32 workspace under every dt */
  (void)V;
  if (N < 1 || C < 1) return 0;
  return (size_t)(ATT_BWD_SLOTS * slot_floats(N * C)) * sizeof(float);
}

ddp_status_t ddp_cuda_attention_check_args(const char *op, ddp_dtype_t dt, int B, int T, int C,
                                           int NH) {
  if (dt != DDP_DTYPE_F32 && dt != DDP_DTYPE_BF16 && dt != DDP_DTYPE_F16)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: %s: activation dtype %s (%d) is not fp32, bf16 or fp16", op,
             ddp_dtype_name(dt), (int)dt);
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: %s: sizes B=%d T=%d C=%d NH=%d must be positive", op, B, T,
             C, NH);
  if (C % NH != 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: %s: C=%d is not a multiple of NH=%d", op, C, NH);
  return DDP_OK;
}

/* An fp32 GEMM batched over the B*NH slabs: C_i = alpha op(A_i) op(B_i),
 * operand X_i at x + i * sx. */
typedef struct slab_operand {
  const float *p;
  int64_t ld, stride;
  int trans;
} slab_operand_t;

static ddp_status_t slab_gemm(ddp_backend_t *be, int64_t m, int64_t n, int64_t k, float alpha,
                              slab_operand_t a, slab_operand_t b, float *c, int64_t ldc,
                              int64_t stride_c, int64_t batch, ddp_stream_t s) {
  ddp_gemm_t g = ddp_gemm_packed_f32(m, n, k, a.p, b.p, c);
  g.trans_a = a.trans ? DDP_TRANSPOSE_YES : DDP_TRANSPOSE_NO;
  g.trans_b = b.trans ? DDP_TRANSPOSE_YES : DDP_TRANSPOSE_NO;
  g.alpha = alpha;
  g.lda = a.ld;
  g.stride_a = a.stride;
  g.ldb = b.ld;
  g.stride_b = b.stride;
  g.ldc = ldc;
  g.stride_c = stride_c;
  g.batch = batch;
  return be->ops->gemm(be, &g, s);
}

static slab_operand_t plain(const float *p, int64_t ld, int64_t stride) {
  return (slab_operand_t){.p = p, .ld = ld, .stride = stride, .trans = 0};
}

static slab_operand_t transposed(const float *p, int64_t ld, int64_t stride) {
  return (slab_operand_t){.p = p, .ld = ld, .stride = stride, .trans = 1};
}

/* Eval: out (head layout) from q, k, v in row blocks of all heads at once,
 * the scores of a block in sc (cap floats). */
static ddp_status_t attention_eval(ddp_backend_t *be, float *o, const float *q, const float *k,
                                   const float *v, float *sc, size_t cap, int64_t nmat, int T,
                                   int64_t hs, float scale, ddp_stream_t s) {
  const cudaStream_t cs = ddp_cuda_stream(be, s);
  const int64_t fit = (int64_t)(cap / ((size_t)nmat * (size_t)T));
  const int64_t R = fit < T ? fit : T;
  const int64_t slab = (int64_t)T * hs;
  for (int64_t r0 = 0; r0 < T; r0 += R) {
    const int64_t r1 = r0 + R < T ? r0 + R : T, rows = r1 - r0;
    /* scores[r0:r1, 0:r1] = scale * Q[r0:r1] K[0:r1]^T */
    DDP_CHECK(slab_gemm(be, rows, r1, hs, scale, plain(q + r0 * hs, hs, slab),
                        transposed(k, hs, slab), sc, r1, rows * r1, nmat, s));
    DDP_CHECK(
        ddp_cuda_attention_softmax_fwd(sc, nmat, (int)rows, (int)r0, (int)r1, r1, rows * r1, cs));
    /* out[r0:r1] = P V[0:r1]; writes only q rows this block has consumed */
    DDP_CHECK(slab_gemm(be, rows, hs, r1, 1.0f, plain(sc, r1, rows * r1), plain(v, hs, slab),
                        o + r0 * hs, hs, slab, nmat, s));
  }
  return DDP_OK;
}

// out (B,T,C), att (B,NH,T,T) fp32 or NULL (eval), qkv (B,T,3C)
ddp_status_t ddp_cuda_nn_attention_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *att,
                                       const void *qkv, int B, int T, int C, int NH,
                                       ddp_stream_t s) {
  DDP_CHECK(ddp_cuda_attention_check_args("attention_fwd", dt, B, T, C, NH));
  if (!out || !qkv) DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: attention_fwd: NULL pointer");
  const int64_t hs = C / NH, nc = (int64_t)B * T * C, nmat = (int64_t)B * NH;
  const int64_t slab = (int64_t)T * hs, TT = (int64_t)T * T;
  const float scale = (float)(1.0 / sqrt((double)hs));
  const cudaStream_t cs = ddp_cuda_stream(be, s);
  /* eval needs at least one row of scores per head */
  const int64_t slot = slot_floats(nc);
  const size_t need = (size_t)(ATT_FWD_SLOTS * slot + (att ? 0 : nmat * T)) * sizeof(float);
  void *wsp;
  DDP_CHECK(ddp_cuda_scratch_get(be, need, "attention_fwd", &wsp));
  float *const q = wsp, *const k = q + slot, *const v = q + 2 * slot, *const o = q;

  float *const qkv_parts[3] = {q, k, v};
  DDP_CHECK(ddp_cuda_attention_to_heads(qkv_parts, qkv, dt, 3, B, T, C, NH, cs));
  if (att) {
    /* att = softmax(scale * Q K^T), zeros above the diagonal */
    DDP_CHECK(slab_gemm(be, T, T, hs, scale, plain(q, hs, slab), transposed(k, hs, slab), att, T,
                        TT, nmat, s));
    DDP_CHECK(ddp_cuda_attention_softmax_fwd(att, nmat, T, 0, T, T, TT, cs));
    /* out = P V */
    DDP_CHECK(
        slab_gemm(be, T, hs, T, 1.0f, plain(att, T, TT), plain(v, hs, slab), o, hs, slab, nmat, s));
  } else {
    const size_t floats = ddp_cuda_state(be)->scratch_bytes / sizeof(float);
    DDP_CHECK(attention_eval(be, o, q, k, v, q + ATT_FWD_SLOTS * slot,
                             floats - (size_t)(ATT_FWD_SLOTS * slot), nmat, T, hs, scale, s));
  }
  const float *parts[1] = {o};
  return ddp_cuda_attention_from_heads(out, dt, parts, 1, B, T, C, NH, cs);
}

// dqkv (B,T,3C) =, scratch (B,NH,T,T) fp32, dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T) fp32
ddp_status_t ddp_cuda_nn_attention_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dqkv,
                                       float *scratch, const void *dout, const void *qkv,
                                       const float *att, int B, int T, int C, int NH,
                                       ddp_stream_t s) {
  DDP_CHECK(ddp_cuda_attention_check_args("attention_bwd", dt, B, T, C, NH));
  if (!dqkv || !scratch || !dout || !qkv || !att)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: attention_bwd: NULL pointer");
  const int64_t hs = C / NH, nc = (int64_t)B * T * C, nmat = (int64_t)B * NH;
  const int64_t slab = (int64_t)T * hs, TT = (int64_t)T * T;
  const float scale = (float)(1.0 / sqrt((double)hs));
  const cudaStream_t cs = ddp_cuda_stream(be, s);
  const int64_t slot = slot_floats(nc);
  void *wsp;
  DDP_CHECK(ddp_cuda_scratch_get(be, (size_t)(ATT_BWD_SLOTS * slot) * sizeof(float),
                                 "attention_bwd", &wsp));
  float *const q = wsp, *const k = q + slot, *const v = q + 2 * slot;
  float *const g = q + 3 * slot, *const dv = q + 4 * slot;
  float *const dq = g, *const dk = v; /* dead once dP exists */

  float *const qkv_parts[3] = {q, k, v}, *const dout_part[1] = {g};
  DDP_CHECK(ddp_cuda_attention_to_heads(qkv_parts, qkv, dt, 3, B, T, C, NH, cs));
  DDP_CHECK(ddp_cuda_attention_to_heads(dout_part, dout, dt, 1, B, T, C, NH, cs));
  /* dV = P^T dout, P masked in scratch */
  DDP_CHECK(ddp_cuda_attention_mask_copy(scratch, att, nmat, T, cs));
  DDP_CHECK(slab_gemm(be, T, hs, T, 1.0f, transposed(scratch, T, TT), plain(g, hs, slab), dv, hs,
                      slab, nmat, s));
  /* dP = dout V^T, then dS = softmax backward of dP (scale still to come) */
  DDP_CHECK(slab_gemm(be, T, T, hs, 1.0f, plain(g, hs, slab), transposed(v, hs, slab), scratch, T,
                      TT, nmat, s));
  DDP_CHECK(ddp_cuda_attention_softmax_bwd(scratch, att, nmat, T, cs));
  /* dQ = scale * dS K, dK = scale * dS^T Q */
  DDP_CHECK(slab_gemm(be, T, hs, T, scale, plain(scratch, T, TT), plain(k, hs, slab), dq, hs, slab,
                      nmat, s));
  DDP_CHECK(slab_gemm(be, T, hs, T, scale, transposed(scratch, T, TT), plain(q, hs, slab), dk, hs,
                      slab, nmat, s));
  const float *parts[3] = {dq, dk, dv};
  return ddp_cuda_attention_from_heads(dqkv, dt, parts, 3, B, T, C, NH, cs);
}
