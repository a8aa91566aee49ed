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
 *   - values are fp32 in memory; under bf16/fp16 (ddptrain/amp.h) the model
 *     stores activations and activation gradients in the half type through
 *     store_round, so every op reads half values and computes in fp32.
 * Every op has a finite-difference test of its backward (tests/check_nn.c). */
#ifndef DDPTRAIN_NN_H
#define DDPTRAIN_NN_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_nn_ops {
  /* out (B,T,C) = wte[tokens[b,t]] + wpe[t]. tokens (B,T) int32 in [0,V):
   * the op does not know V, so callers validate tokens (the model does, on
   * the host, before any upload). */
  ddp_status_t (*embed_fwd)(ddp_backend_t *be, float *out, const int32_t *tokens, const float *wte,
                            const float *wpe, int B, int T, int C, ddp_stream_t s);
  /* dwte[tokens[b,t]] += dout[b,t] (always accumulates: the tied LM head
   * wrote dwte first); dwpe[t] = / += sum_b dout[b,t] per `accumulate`.
   * Deterministic: no order-dependent summation. */
  ddp_status_t (*embed_bwd)(ddp_backend_t *be, float *dwte, float *dwpe, const float *dout,
                            const int32_t *tokens, int B, int T, int C, int accumulate,
                            ddp_stream_t s);

  /* out (N,C) = (inp - mean) * rstd * w + b, eps 1e-5, biased variance (as
   * PyTorch). mean, rstd (N) are saved for backward; NULL in eval. */
  ddp_status_t (*layernorm_fwd)(ddp_backend_t *be, float *out, float *mean, float *rstd,
                                const float *inp, const float *w, const float *b, int N, int C,
                                ddp_stream_t s);
  /* dinp (N,C) += ...; dw, db (C) = / += per `accumulate`. */
  ddp_status_t (*layernorm_bwd)(ddp_backend_t *be, float *dinp, float *dw, float *db,
                                const float *dout, const float *inp, const float *w,
                                const float *mean, const float *rstd, int N, int C, int accumulate,
                                ddp_stream_t s);

  /* out (N,OC) = inp (N,IC) @ w (OC,IC)^T + bias (OC); bias may be NULL.
   * w is PyTorch's nn.Linear layout (out_features, in_features). */
  ddp_status_t (*linear_fwd)(ddp_backend_t *be, float *out, const float *inp, const float *w,
                             const float *bias, int N, int IC, int OC, ddp_stream_t s);
  /* dinp (N,IC) = / += dout @ w per `accumulate_dinp` (NULL: not wanted);
   * dw (OC,IC), dbias (OC) = / += per `accumulate` (dbias NULL: no bias). */
  ddp_status_t (*linear_bwd)(ddp_backend_t *be, float *dinp, float *dw, float *dbias,
                             const float *dout, const float *inp, const float *w, int N, int IC,
                             int OC, int accumulate, int accumulate_dinp, ddp_stream_t s);

  /* out = GELU(inp), tanh approximation, n elements. */
  ddp_status_t (*gelu_fwd)(ddp_backend_t *be, float *out, const float *inp, size_t n,
                           ddp_stream_t s);
  /* dinp = dout * GELU'(inp) (overwrites; dinp may alias dout). */
  ddp_status_t (*gelu_bwd)(ddp_backend_t *be, float *dinp, const float *inp, const float *dout,
                           size_t n, ddp_stream_t s);

  /* out = a + b, n elements (out may alias a). */
  ddp_status_t (*add)(ddp_backend_t *be, float *out, const float *a, const float *b, size_t n,
                      ddp_stream_t s);

  /* Causal multi-head self-attention.
   * qkv (B,T,3C): per row [q | k | v], each C = NH heads of hs = C/NH.
   * out (B,T,C): per head softmax(q k^T / sqrt(hs), causal) v.
   * att (B,NH,T,T): softmax probabilities saved for backward (row t holds
   * columns 0..t; the rest is never read); NULL in eval, where the op works
   * through row blocks with its own scratch (the CPU backend: NH*min(T,64)*T
   * floats per call, outside the training step loop). */
  ddp_status_t (*attention_fwd)(ddp_backend_t *be, float *out, float *att, const float *qkv, int B,
                                int T, int C, int NH, ddp_stream_t s);
  /* dqkv (B,T,3C) = gradient (overwrites). scratch: B*NH*T*T floats (the CPU
   * backend uses only NH*min(T,64)*T of them). */
  ddp_status_t (*attention_bwd)(ddp_backend_t *be, float *dqkv, float *scratch, const float *dout,
                                const float *qkv, const float *att, int B, int T, int C, int NH,
                                ddp_stream_t s);

  /* Softmax cross-entropy with ignore index -1. logits (N,Vp) with V valid
   * columns. losses (N, required): -log softmax(logits)[target], 0 where
   * target is -1. loss_sum (1, required): += sum of losses (device-side
   * accumulation: no host sync). Targets outside [-1, V) are rejected before
   * anything is written.
   * With dlogits non-NULL the backward is fused: dlogits (N,Vp) =
   * (softmax - onehot) * dloss (0 at ignored rows and padding columns);
   * dlogits may alias logits. */
  ddp_status_t (*xent_fused)(ddp_backend_t *be, float *losses, float *loss_sum, float *dlogits,
                             const float *logits, const int32_t *targets, float dloss, int N, int V,
                             int Vp, ddp_stream_t s);

  /* x (n) = x rounded to dtype (round to nearest even; fp32: unchanged): the
   * store of a half-precision activation. The CPU backend keeps half values
   * in fp32 slots (ddp_round_host), which holds exactly the numbers half
   * storage would, so ops need no half variants there. */
  ddp_status_t (*store_round)(ddp_backend_t *be, float *x, ddp_dtype_t dtype, size_t n,
                              ddp_stream_t s);
} ddp_nn_ops_t;

/* The CPU implementation (also the oracle for every CUDA kernel). */
extern const ddp_nn_ops_t ddp_nn_cpu_ops;

#ifdef __cplusplus
}
#endif
#endif
