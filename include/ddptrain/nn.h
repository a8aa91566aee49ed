/* Neural-network operations: the fused layer kernels the models call.
 *
 * A model is written once against this table; each backend fills it (the CPU
 * backend in src/backend/cpu/cpu_nn*.c, CUDA in kernels/). Conventions:
 *   - outputs first, then inputs/weights, then sizes, the stream last;
 *   - every pointer is backend memory (device memory on CUDA);
 *   - a shape comment on each argument: N = B*T rows, C channels, V vocab,
 *     Vp the padded row pitch of logits (>= V, padding columns ignored);
 *   - parameter gradients follow `accumulate`: 0 overwrites them (the first
 *     micro-step of an optimizer step: no memset needed), 1 adds to them;
 *   - gradients of activations flowing into the residual stream always
 *     accumulate (`dresid +=`), because the residual stream's gradient is the
 *     sum of its branches; other activation gradients are overwritten;
 *   - every op takes `dt`, the storage type of its activation buffers
 *     (amp/amp.h's precision): fp32, bf16 or fp16. Activations,
 *     activation gradients and the weights the op reads (the model's compute
 *     copy) are `void *` buffers of dt elements (uint16 bit patterns for
 *     bf16/fp16); everything else stays fp32 under any dt: parameter
 *     gradients (dw, db, dwte, dwpe), LayerNorm mean/rstd, the attention
 *     probabilities `att` and attention scratch (fp32 like the softmax that
 *     makes them), per-token losses and the loss sum. Ops load half values,
 *     compute in fp32 (matrix products: half operands, fp32 accumulation)
 *     and store each output once, rounded to nearest even;
 *   - under bf16/fp16 an op may need fp32 workspace (the CPU backend widens
 *     operands there): reserve() sizes it once, before the step loop, and an
 *     op that finds too little fails instead of allocating.
 * Every op has a finite-difference test of its backward (tests/check_nn.c). */
#ifndef DDPTRAIN_NN_H
#define DDPTRAIN_NN_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"
#include "ddptrain/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_nn_ops {
  /* out (B,T,C) = wte[tokens[b,t]] + wpe[t]. tokens (B,T) int32 in [0,V):
   * the op does not know V, so callers validate tokens (the model does, on
   * the host, before any upload). */
  ddp_status_t (*embed_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *out, const int32_t *tokens,
                            const void *wte, const void *wpe, int B, int T, int C, ddp_stream_t s);
  /* dwte[tokens[b,t]] += dout[b,t] (always accumulates: the tied LM head
   * wrote dwte first); dwpe[t] = / += sum_b dout[b,t] per `accumulate`.
   * Deterministic: no order-dependent summation. dwte, dwpe fp32. */
  ddp_status_t (*embed_bwd)(ddp_backend_t *be, ddp_dtype_t dt, float *dwte, float *dwpe,
                            const void *dout, const int32_t *tokens, int B, int T, int C,
                            int accumulate, ddp_stream_t s);

  /* out (N,C) = (inp - mean) * rstd * w + b, eps 1e-5, biased variance (as
   * PyTorch). mean, rstd (N, fp32) are saved for backward; NULL in eval. */
  ddp_status_t (*layernorm_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *mean,
                                float *rstd, const void *inp, const void *w, const void *b, int N,
                                int C, ddp_stream_t s);
  /* dinp (N,C) += ...; dw, db (C, fp32) = / += per `accumulate`. */
  ddp_status_t (*layernorm_bwd)(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dw, float *db,
                                const void *dout, const void *inp, const void *w, const float *mean,
                                const float *rstd, int N, int C, int accumulate, ddp_stream_t s);

  /* out (N,OC) = inp (N,IC) @ w (OC,IC)^T + bias (OC); bias may be NULL.
   * w is PyTorch's nn.Linear layout (out_features, in_features). */
  ddp_status_t (*linear_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                             const void *w, const void *bias, int N, int IC, int OC,
                             ddp_stream_t s);
  /* dinp (N,IC) = / += dout @ w per `accumulate_dinp` (NULL: not wanted);
   * dw (OC,IC), dbias (OC) fp32 = / += per `accumulate` (dbias NULL: no
   * bias). */
  ddp_status_t (*linear_bwd)(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dw, float *dbias,
                             const void *dout, const void *inp, const void *w, int N, int IC,
                             int OC, int accumulate, int accumulate_dinp, ddp_stream_t s);

  /* out = GELU(inp), tanh approximation, n elements. */
  ddp_status_t (*gelu_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp, size_t n,
                           ddp_stream_t s);
  /* dinp = dout * GELU'(inp) (overwrites; dinp may alias dout). */
  ddp_status_t (*gelu_bwd)(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *inp,
                           const void *dout, size_t n, ddp_stream_t s);

  /* out = a + b, n elements (out may alias a). */
  ddp_status_t (*add)(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *a, const void *b,
                      size_t n, ddp_stream_t s);

  /* Causal multi-head self-attention.
   * qkv (B,T,3C): per row [q | k | v], each C = NH heads of hs = C/NH.
   * out (B,T,C): per head softmax(q k^T / sqrt(hs), causal) v.
   * att (B,NH,T,T, fp32): softmax probabilities saved for backward (row t
   * holds columns 0..t; the rest is never read); NULL in eval, where the op
   * works through row blocks with its own scratch (the CPU backend:
   * NH*min(T,64)*T floats per call, outside the training step loop). */
  ddp_status_t (*attention_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *att,
                                const void *qkv, int B, int T, int C, int NH, ddp_stream_t s);
  /* dqkv (B,T,3C) = gradient (overwrites). scratch (fp32): B*NH*T*T floats
   * (the CPU backend uses only NH*min(T,64)*T of them). */
  ddp_status_t (*attention_bwd)(ddp_backend_t *be, ddp_dtype_t dt, void *dqkv, float *scratch,
                                const void *dout, const void *qkv, const float *att, int B, int T,
                                int C, int NH, ddp_stream_t s);

  /* Softmax cross-entropy with ignore index -1. logits (N,Vp) with V valid
   * columns. losses (N, fp32, required): -log softmax(logits)[target], 0
   * where target is -1. loss_sum (1, fp32, required): += sum of losses
   * (device-side accumulation: no host sync). Targets outside [-1, V):
   * the CPU backend rejects them before anything is written; a GPU cannot
   * without a host sync, so the CUDA kernel never reads out of bounds and
   * writes NaN as that row's loss (the run's non-finite-loss check stops
   * it) and zeros to its dlogits row. Callers validate targets on the host
   * before upload (ddp_gpt does).
   * With dlogits non-NULL the backward is fused: dlogits (N,Vp) =
   * (softmax - onehot) * dloss (0 at ignored rows and padding columns);
   * dlogits may alias logits.
   * smoothing (label smoothing e, in [0, 1); anything else is
   * DDP_ERR_INVALID_ARG) is PyTorch's CrossEntropyLoss(label_smoothing=e):
   * a row's loss is (1-e)(-log p_target) + e * mean over the V valid
   * columns of (-log p_c), and the gradient's target distribution is
   * (1-e) onehot + e/V: dlogits = (softmax - (1-e) onehot - e/V) * dloss.
   * e = 0 computes exactly what the unsmoothed op always has (bit for bit). */
  ddp_status_t (*xent_fused)(ddp_backend_t *be, ddp_dtype_t dt, float *losses, float *loss_sum,
                             void *dlogits, const void *logits, const int32_t *targets, float dloss,
                             float smoothing, int N, int V, int Vp, ddp_stream_t s);

  /* The residual add fused with the LayerNorm that follows it:
   * resid (N,C) = a + b, rounded to dt once (exactly what `add` stores), and
   * out (N,C) = layernorm(resid) with w, bias (C), exactly as layernorm_fwd
   * computes it from the stored resid (so the pair equals add followed by
   * layernorm_fwd, bit for bit on the CPU backend). mean, rstd (N, fp32) as
   * layernorm_fwd's: saved for backward, NULL in eval. resid may alias a
   * (the residual stream updated in place); out aliases none of the others.
   * One pass per row instead of a write and a re-read of the stream. */
  ddp_status_t (*residual_layernorm_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *resid, void *out,
                                         float *mean, float *rstd, const void *a, const void *b,
                                         const void *w, const void *bias, int N, int C,
                                         ddp_stream_t s);

  /* Makes the ops under dt ready for up to N rows of a GPT with C channels
   * and (padded) vocabulary V: linear shapes (IC, OC) among (C, C), (C, 3C),
   * (C, 4C), (4C, C), (C, V); embedding, layernorm and attention on
   * N x C; cross-entropy on N x V. The CPU backend sizes its fp32
   * workspace here (nothing under fp32); a backend that needs none returns
   * DDP_OK. Call outside the step loop; growing only, so the largest of
   * several callers' needs holds. */
  ddp_status_t (*reserve)(ddp_backend_t *be, ddp_dtype_t dt, int64_t N, int C, int V);
  /* Drops one reserve()'s hold (the last frees the workspace). */
  void (*release)(ddp_backend_t *be);

  /* The MLP's first linear with GELU fused in its epilogue:
   * pre (N,OC) = inp (N,IC) @ w (OC,IC)^T + bias (OC), out (N,OC) = GELU(pre)
   * (tanh approximation, as gelu_fwd). pre is saved for backward (NULL in eval:
   * only out is written). Equals linear_fwd then gelu_fwd up to rounding (on the
   * CPU exactly: it is that composition). bias is required; out, pre and inp
   * are distinct buffers. */
  ddp_status_t (*linear_gelu_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *out, void *pre,
                                  const void *inp, const void *w, const void *bias, int N, int IC,
                                  int OC, ddp_stream_t s);
  /* The gradient flowing back through the next linear into GELU, fused:
   * dpre (N,K) = (dout (N,OC) @ w (OC,K)) * GELU'(pre (N,K)), and the bias
   * gradient of the linear that made pre: dbias (K, fp32) = / += column sums
   * of dpre per `accumulate`. (The next linear's own dw/dbias are computed by
   * linear_bwd with dinp NULL.) dbias is required; dpre aliases none of the
   * inputs. The CPU backend sums the stored dpre exactly as linear_bwd sums
   * dout into dbias; the CUDA backend's fused path sums in cuBLASLt's order
   * (see cuda_nn_linear.c). */
  ddp_status_t (*linear_dgelu_bwd)(ddp_backend_t *be, ddp_dtype_t dt, void *dpre, float *dbias,
                                   const void *dout, const void *w, const void *pre, int N, int K,
                                   int OC, int accumulate, ddp_stream_t s);

  /* Causal multi-head self-attention without the T x T matrix (flash-style:
   * tiles of keys, online softmax). qkv (B,T,3C) and out (B,T,C) as
   * attention_fwd; scale 1/sqrt(hs). lens (B, int32, backend memory) or NULL
   * (every row is T tokens): row b's positions >= lens[b] (0 <= lens[b] <=
   * T) are padding: no work is done for them and out rows there are written
   * as zeros; valid positions attend to valid positions only (keys < lens[b]
   * follow from causality). The CPU backend rejects lens outside [0, T]; a
   * GPU cannot see them without a host sync, so the CUDA kernels clamp them
   * into [0, T]. lse (B,NH,T, fp32): natural-log log-sum-exp of each query
   * row's scaled scores, saved for backward (0 at padding rows); NULL in
   * eval. Head sizes: any on the CPU; hs <= 128 on CUDA (tensor cores for
   * bf16/fp16 at hs 16, 32, 64, 128), larger ones DDP_ERR_UNSUPPORTED. */
  ddp_status_t (*flash_attention_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *lse,
                                      const void *qkv, const int32_t *lens, int B, int T, int C,
                                      int NH, ddp_stream_t s);
  /* dqkv (B,T,3C) = gradient (overwrites; zeros at padding rows). out and
   * lse are the forward's (out as stored, in dt). scratch: fp32, B*NH*T
   * floats (the row sums D = rowsum(dout * out)). Deterministic: no atomics
   * or order-dependent sums, so the same inputs give the same bits. */
  ddp_status_t (*flash_attention_bwd)(ddp_backend_t *be, ddp_dtype_t dt, void *dqkv, float *scratch,
                                      const void *dout, const void *qkv, const void *out,
                                      const float *lse, const int32_t *lens, int B, int T, int C,
                                      int NH, ddp_stream_t s);

  /* One decoding step of causal attention against a KV cache. qkv
   * (B,Tc,3C) holds, per sequence b, the qkv rows of positions 0..t (the
   * cache: rows as attention_fwd reads them, Tc >= t+1 rows per sequence);
   * out (B,C) = per head softmax(q_t k_j^T / sqrt(hs), j <= t) v_j, with q_t
   * the q of row (b,t): exactly row t of attention_fwd over the first t+1
   * rows. Eval only (no backward); fp32 softmax under every dt. NULL in a
   * table without it (ddp_gpt_decoder_create then refuses the backend). */
  ddp_status_t (*attention_decode)(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *qkv,
                                   int B, int Tc, int t, int C, int NH, ddp_stream_t s);

} ddp_nn_ops_t;

/* The CPU implementation (also the oracle for every CUDA kernel). */
extern const ddp_nn_ops_t ddp_nn_cpu_ops;

#ifdef __cplusplus
}
#endif
#endif
