/* Optimizers, learning-rate schedule and gradient clipping.
 *
 * Parameters, gradients and optimizer state are single flat fp32 buffers.
 * A step is one fused pass over all parameters (multi-tensor): the buffer is
 * described by the model's parameter table (ddptrain/param.h), one entry per
 * tensor, each saying whether weight decay applies (GPT-2 practice: 2-D
 * weights only) and, for LAMB, giving the tensor boundaries its per-tensor
 * trust ratio needs. The optimizer reads only offset, count and decay of an
 * entry: names and shapes may be left empty, and a tensor may be empty.
 *
 * Clipping never needs the host: the step reads the squared global gradient
 * norm from backend memory (written by ddp_optim_grad_sumsq) and scales the
 * gradients by min(1, max_norm / (norm + 1e-6)) inside the same pass.
 * `grad_scale` multiplies gradients first (loss-scale unscaling later). */
#ifndef DDPTRAIN_OPTIM_H
#define DDPTRAIN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"
#include "ddptrain/param.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ddp_optim_kind {
  DDP_OPTIM_KIND_ADAMW = 0,
  DDP_OPTIM_KIND_SGD = 1,
  DDP_OPTIM_KIND_LAMB = 2
} ddp_optim_kind_t;

/* "adamw" | "sgd" | "lamb" (silent on bad input). */
ddp_status_t ddp_optim_kind_parse(const char *text, ddp_optim_kind_t *kind);
const char *ddp_optim_kind_name(ddp_optim_kind_t kind);

typedef struct ddp_optim_config {
  ddp_optim_kind_t kind;
  float beta1, beta2, eps; /* AdamW/LAMB (PyTorch defaults 0.9, 0.999, 1e-8) */
  float weight_decay;      /* decoupled for AdamW/LAMB; L2 (added to g) for SGD */
  float momentum;          /* SGD */
  int nesterov;            /* SGD */
  float max_grad_norm;     /* <= 0: no clipping */
} ddp_optim_config_t;

/* Floats of optimizer state per parameter: AdamW/LAMB 2 (m, v), SGD 1
 * (momentum buffer; 0 when momentum == 0). State must start zeroed.
 * Layout, shared by every backend so state and checkpoints are portable:
 * AdamW/LAMB m in state[0, n), v in state[n, 2n); SGD buffer in state[0, n). */
size_t ddp_optim_state_per_param(const ddp_optim_config_t *cfg);

/* step is 0-based (negative counts as 0; warmup < 0 as 0):
 *   step < warmup:        lr * (step + 1) / warmup   (step 0 already trains,
 *                         step warmup-1 reaches lr; nanoGPT/llm.c)
 *   step >= total_steps:  min_lr
 *   otherwise:            min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * progress)),
 *                         progress = (step - warmup) / max(1, total_steps - warmup)
 *                         clamped to [0, 1]
 * computed in double. warmup == 0: pure cosine from step 0. */
float ddp_lr_schedule(int64_t step, float lr, float min_lr, int64_t warmup, int64_t total_steps);

typedef struct ddp_optim_step_args {
  const ddp_optim_config_t *cfg;
  float *params;      /* (n) fp32 master weights */
  const float *grads; /* (n) */
  float *state;       /* (n * state_per_param), layout above */
  /* Host array: the segments of the flat buffers, sorted by offset,
   * disjoint and covering [0, n) (offset, count and decay are read). */
  const ddp_param_t *tensors;
  int n_tensors;
  size_t n;
  int64_t t; /* 1-based step count (bias correction) */
  float lr;
  float grad_scale;        /* gradients are multiplied by this first */
  const float *grad_sumsq; /* backend memory, 1 float: sum of squares of the
                            *scaled* gradients; NULL when not clipping */
  /* Mixed precision. compute_params (n elements of compute_dtype, uint16 bit
   * patterns for bf16/fp16, or NULL): the same pass also writes each updated
   * weight rounded to compute_dtype there (the half compute
   * copy the model reads), block by block while the weight is in cache, so
   * the copy costs no extra sweep. */
  void *compute_params;
  ddp_dtype_t compute_dtype;
  /* Nonzero (the loss scaler's skip): when *grad_sumsq is not finite, some
   * gradient is inf or NaN and the step changes nothing at all (params,
   * state, compute copy), decided from backend memory with no host sync.
   * Needs grad_sumsq. */
  int skip_nonfinite;
} ddp_optim_step_args_t;

/* sumsq (backend memory, 1 float) = sum over i < n of (scale * g[i])^2,
 * with scale * g[i] rounded to fp32 first (the gradient as the step sees it)
 * and the squares accumulated in double on the CPU for determinism and
 * accuracy; *sumsq is overwritten, not accumulated. Rejects a NULL or
 * non-CPU backend, NULL pointers and a non-finite scale. */
ddp_status_t ddp_optim_grad_sumsq_cpu(ddp_backend_t *be, float *sumsq, const float *grads, size_t n,
                                      float scale, ddp_stream_t s);

/* The fused step on the CPU backend (the CUDA kernel's oracle).
 * This CPU twin dereferences the buffers directly (the CPU backend's memory
 * is host memory) and refuses other backends (DDP_ERR_UNSUPPORTED); work runs
 * at once, so the stream is unused. params, grads and state must not overlap.
 *
 * Gradient: g = grads[i] * grad_scale * clip, where clip =
 * min(1, max_grad_norm / (sqrt(*grad_sumsq) + 1e-6)) when max_grad_norm > 0
 * and grad_sumsq != NULL, else 1 (torch.nn.utils.clip_grad_norm_; computed
 * once per step in double; a NaN norm propagates into the step as in torch,
 * so the AMP inf check must skip such steps first). Per kind, with
 * bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (double, once per step):
 *   AdamW (torch.optim.AdamW): p *= 1 - lr*wd (decaying tensors);
 *     m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *     p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps).
 *   SGD (torch.optim.SGD, dampening 0): g += wd p (decaying tensors);
 *     momentum > 0: buf = g when t == 1, else momentum buf + g;
 *     d = g + momentum buf (nesterov) or buf; momentum == 0: d = g; p -= lr d.
 *   LAMB (apex FusedLAMB, adam_w_mode, grad averaging, trust ratio on every
 *     tensor as in NVLAMB): m, v as AdamW; per tensor
 *     r = (m/bc1) / (sqrt(v/bc2) + eps) + wd p (wd on decaying tensors only),
 *     trust = ||p|| / ||r|| when both are > 0, else 1; p -= lr trust r.
 * Bad input (NULL pointers, skip_nonfinite without grad_sumsq, a
 * compute_params overlapping another buffer or a non-float compute_dtype, tensors not
 * sorted/disjoint/covering [0, n), n_tensors < 1, t < 1, lr negative or not finite, non-finite
 * grad_scale, unknown kind, negative or non-finite weight_decay, NaN max_grad_norm; AdamW/LAMB:
 * betas outside [0, 1), eps not > 0; SGD: negative momentum, nesterov without momentum) returns
 * DDP_ERR_INVALID_ARG with a logged message and modifies nothing. */
ddp_status_t ddp_optim_step_cpu(ddp_backend_t *be, const ddp_optim_step_args_t *args,
                                ddp_stream_t s);

/* The gradient epilogue of a half-precision all-reduce (the reducer's
 * finish(), one bucket per call), fused so that the widened gradients are
 * written, unscaled and squared in a single pass (also for fp32, in place
 * with dst == src: --zero 1's reduced shard blocks):
 *   dst[i] = (float)src[i] * scale     (the half value widened exactly, then
 *                                       one fp32 multiply, rounded)
 *   *partial = sum over i < n of (double)dst[i]^2
 * accumulated in double in a fixed order that depends on n only (here: the
 * lanes of ddp_optim_grad_sumsq_cpu, so for one bucket the result rounded to
 * fp32 equals ddp_optim_grad_sumsq_cpu on the widened buffer, bit for bit).
 * An inf or NaN anywhere makes *partial non-finite (squares are never
 * negative, so nothing cancels it): the loss scaler's overflow flag survives.
 * src holds n elements of src_dtype (bf16 or fp16 bit patterns, or fp32);
 * partial is one double of backend memory, overwritten. Rejects
 * (DDP_ERR_INVALID_ARG, nothing written) NULL pointers, another src_dtype, a
 * non-finite scale and dst overlapping src (except fp32 with dst == src);
 * refuses a non-CPU backend (DDP_ERR_UNSUPPORTED). */
ddp_status_t ddp_optim_grad_epilogue_cpu(ddp_backend_t *be, float *dst, const void *src,
                                         ddp_dtype_t src_dtype, size_t n, float scale,
                                         double *partial, ddp_stream_t s);

/* *sumsq (backend memory, 1 float) = (float)(partials[0] + partials[1] + ...
 * + partials[n - 1]), added in double in exactly that order (one bucket
 * after the other), so the total is reproducible and the same on every
 * backend for the same partials. Rejects NULL pointers and n < 1. */
ddp_status_t ddp_optim_sum_partials_cpu(ddp_backend_t *be, float *sumsq, const double *partials,
                                        int n, ddp_stream_t s);

/* ---- backend-neutral entry points ----------------------------------------
 * What the trainer calls. Each checks its arguments as the CPU functions
 * above do (same rules, same messages, on every backend), then runs the
 * backend's optimizer (ddp_backend_ops_t.optim): on the CPU backend the
 * work of the CPU functions above, on CUDA the kernels of kernels/optim.cu
 * and kernels/grad_epilogue.cu (bit-identical arithmetic per element, sums
 * of squares in a different fixed order). A backend without an optimizer
 * is refused with DDP_ERR_UNSUPPORTED. A plan holds what a backend
 * needs per parameter layout (on CUDA the chunk and tensor tables in device
 * memory and LAMB's scratch); it is made once, before the step loop, so
 * steps allocate nothing. */
typedef struct ddp_optim_plan ddp_optim_plan_t;

/* Validates the configuration and the tensor table (as ddp_optim_step_cpu
 * does) and prepares the plan for n parameters. */
ddp_status_t ddp_optim_plan_create(ddp_backend_t *be, const ddp_optim_config_t *cfg,
                                   const ddp_param_t *tensors, int n_tensors, size_t n,
                                   ddp_optim_plan_t **out);
void ddp_optim_plan_destroy(ddp_optim_plan_t *plan);

/* ddp_optim_grad_sumsq_cpu's contract on any backend (enqueued on s; no
 * host sync on a GPU). */
ddp_status_t ddp_optim_grad_sumsq(ddp_backend_t *be, float *sumsq, const float *grads, size_t n,
                                  float scale, ddp_stream_t s);
/* ddp_optim_grad_epilogue_cpu's contract on any backend (enqueued on s, no
 * host sync on a GPU). The CUDA kernel rounds every dst element exactly as
 * the CPU does; its partial adds the same squares in another fixed order
 * (per-block partials, then the blocks in order), so it is reproducible bit
 * for bit but equals the CPU's only to double rounding. On CUDA, calls
 * share one scratch array of block sums: they must not run concurrently on
 * two streams (the reducer issues them in bucket order on one stream). */
ddp_status_t ddp_optim_grad_epilogue(ddp_backend_t *be, float *dst, const void *src,
                                     ddp_dtype_t src_dtype, size_t n, float scale, double *partial,
                                     ddp_stream_t s);
/* ddp_optim_sum_partials_cpu's contract on any backend (one GPU thread adds
 * the partials in order: the same bits as the CPU). */
ddp_status_t ddp_optim_sum_partials(ddp_backend_t *be, float *sumsq, const double *partials, int n,
                                    ddp_stream_t s);
/* ddp_optim_step_cpu's contract on any backend; args must describe the
 * plan's layout (same n and tensor count). */
ddp_status_t ddp_optim_step(ddp_backend_t *be, ddp_optim_plan_t *plan,
                            const ddp_optim_step_args_t *args, ddp_stream_t s);
/* Steps of this plan that skip_nonfinite skipped (a non-finite gradient
 * norm) since it was made: counted where the decision is taken (on a GPU,
 * on the device), read here with one host sync, so a trainer can check at
 * its log interval instead of after every step. */
ddp_status_t ddp_optim_plan_skipped_steps(ddp_optim_plan_t *plan, int64_t *count);

/* ---- LAMB over a shard (--zero 1) ------------------------------------------
 * Under --zero 1 the step's table is this rank's shard: pieces of the
 * model's tensors (a tensor may be cut across ranks, and within a rank at a
 * bucket boundary). LAMB's trust ratio needs the norms of whole tensors, so
 * the step runs in three parts with an exchange between the first two:
 *   ddp_optim_lamb_sums:   moments, and per piece j sums[2j] = ||p_j||^2,
 *                          sums[2j + 1] = ||r_j||^2 (double, r as above);
 *   (the caller all-gathers every rank's sums, one row of 2 x stride
 *    doubles per rank, rank-major: piece j of rank q at 2 (q stride + j));
 *   ddp_optim_lamb_ratios: per piece, its tensor's norms summed over all its
 *                          pieces on all ranks, in ascending global index
 *                          (q stride + j), so every rank adds the same
 *                          doubles in the same order and gets the same bits;
 *                          ratio = lr x trust, trust as in the step above;
 *   ddp_optim_lamb_apply:  p -= ratio r, and the compute copy.
 * With every tensor in one piece this is the unsharded LAMB step bit for
 * bit; split, the norms are the same sums in another order. Clipping and
 * skip_nonfinite act as in ddp_optim_step: a skipped step leaves params,
 * state and compute copy alone (sums and ratios are then meaningless and
 * unused) and is counted once, by ddp_optim_lamb_apply. */
typedef struct ddp_optim_lamb_groups {
  int n_ranks; /* rows of the exchanged sums */
  int rank;    /* this rank's row */
  int stride;  /* pieces per row (the most any rank has): >= first + the plan's tensors */
  int first;   /* the plan's piece j is piece first + j of its rank's row (a
                * rank's pieces may be spread over several plans) */
  /* Host arrays, copied: for local piece j (j < the plan's n_tensors), the
   * global indices q x stride + i of every piece of its tensor (itself
   * included), strictly ascending, are index[begin[j] .. begin[j + 1]). */
  const int32_t *begin; /* n_tensors + 1, begin[0] == 0 */
  const int32_t *index;
} ddp_optim_lamb_groups_t;

/* Gives a plan its groups (checked: counts, ascending rows inside
 * [0, n_ranks x stride), each row holding the piece itself; a plan takes
 * them once). Copies the table to the backend; not on the step path. */
ddp_status_t ddp_optim_plan_set_lamb_groups(ddp_optim_plan_t *plan,
                                            const ddp_optim_lamb_groups_t *groups);
/* Part 1 (args as for ddp_optim_step, kind LAMB, on a plan with groups):
 * sums (backend memory, 2 x n_tensors doubles written: the plan's part of
 * its rank's row, from piece `first`; the rest of the row is not touched). */
ddp_status_t ddp_optim_lamb_sums(ddp_backend_t *be, ddp_optim_plan_t *plan,
                                 const ddp_optim_step_args_t *args, double *sums, ddp_stream_t s);
/* Part 2: all_sums (backend memory, 2 x stride x n_ranks doubles) into
 * ratio (backend memory, n_tensors floats). lr finite and >= 0. */
ddp_status_t ddp_optim_lamb_ratios(ddp_backend_t *be, ddp_optim_plan_t *plan, float lr,
                                   const double *all_sums, float *ratio, ddp_stream_t s);
/* Part 3: the update with the ratios of part 2 (same args as part 1). */
ddp_status_t ddp_optim_lamb_apply(ddp_backend_t *be, ddp_optim_plan_t *plan,
                                  const ddp_optim_step_args_t *args, const float *ratio,
                                  ddp_stream_t s);

#ifdef __cplusplus
}
#endif
#endif
