/* The GPT-2 decoder: parameters, forward, backward and eval. This is the
 * model's own interface, used by its adapter to the runtime's model
 * interface (src/model/gpt_model.c, registered as --model gpt) and by the
 * model's tests; nothing else in the runtime includes it.
 *
 * Architecture (must match tests/reference/gpt_reference.py exactly): token +
 * learned position embeddings; n_layer pre-LayerNorm blocks (eps 1e-5) of
 * causal multi-head self-attention (fused qkv Linear(C,3C) with bias, output
 * Linear(C,C)) and an MLP (Linear(C,4C), tanh-GELU, Linear(4C,C)); a final
 * LayerNorm; an LM head tied to the token embedding; no dropout.
 *
 * Memory is allocated once: parameters and gradients as two flat buffers in
 * ddp_gpt_create, and an activation arena sized for the largest micro-batch
 * (tokens_per_batch padded tokens, sequences up to max_seq_len) in the final
 * precision and exec settings, allocated by the first forward. Each forward
 * resets the arena; nothing is allocated per step after the first.
 *
 * Parameters are laid out in the order backward finishes their gradients
 * (ln_f, then blocks from last to first, then wpe, then wte, which the
 * embedding backward completes last), so gradient buckets are contiguous
 * slices that fill from the front. `on_grad_ready` is called once per tensor,
 * in that order, on backward passes asked to notify (the last micro-step).
 *
 * The loss of a micro-batch is the SUM of its token cross-entropies; the
 * trainer passes dloss = 1 / (target tokens of the whole optimizer step), so
 * gradients of all micro-steps (and ranks) add up to the gradient of the mean. */
#ifndef DDPTRAIN_MODEL_GPT_H
#define DDPTRAIN_MODEL_GPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ddptrain/backend.h"
#include "ddptrain/nn.h"
#include "ddptrain/param.h"
#include "core/arena.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_gpt_config {
  int n_layer, n_head, n_embd;
  int max_seq_len; /* T max: rows of wpe */
  int vocab;       /* V */
  int vocab_pad;   /* logits rows padded to a multiple of this; 0: the
                      backend's choice (128 on GPUs, where aligned rows feed
                      tensor cores and vector loads; 1 on the CPU, where the
                      extra columns would only cost time) */
} ddp_gpt_config_t;

/* Checks the configuration: positive sizes, n_embd % n_head == 0, ... */
ddp_status_t ddp_gpt_config_validate(const ddp_gpt_config_t *cfg);

typedef void (*ddp_grad_ready_fn)(void *ctx, size_t offset, size_t count);

typedef struct ddp_gpt ddp_gpt_t;

/* tokens_per_batch: the padded-token budget of one micro-batch (B*T <= it). */
ddp_status_t ddp_gpt_create(ddp_gpt_t **out, ddp_backend_t *be, const ddp_gpt_config_t *cfg,
                            int64_t tokens_per_batch);
void ddp_gpt_destroy(ddp_gpt_t *m);

const ddp_gpt_config_t *ddp_gpt_config(const ddp_gpt_t *m);
size_t ddp_gpt_num_params(const ddp_gpt_t *m);

/* Parameters of a configuration (without creating a model), and the FLOP
 * model MFU and the sampler's cost use: a micro-batch of B rows padded to T
 * executes B*T*(a + b*T) FLOPs, forward and backward, with a = 6N and
 * b = 6 L C (the causal attention products). */
size_t ddp_gpt_config_params(const ddp_gpt_config_t *cfg);
void ddp_gpt_cost_model(const ddp_gpt_config_t *cfg, double *a, double *b);
int ddp_gpt_num_tensors(const ddp_gpt_t *m);
/* Entry `index` of the parameter table (ddptrain/param.h); the entries are
 * one array, so ddp_gpt_tensor(m, 0) is the whole table. Every 2-D weight
 * (wte, wpe and the blocks' Linear weights) has decay set. */
const ddp_param_t *ddp_gpt_tensor(const ddp_gpt_t *m, int index);
/* Flat buffers in backend memory. */
float *ddp_gpt_params(ddp_gpt_t *m);
float *ddp_gpt_grads(ddp_gpt_t *m);
/* Copies all parameters (n_params floats) to / from host memory. */
ddp_status_t ddp_gpt_copy_params_to_host(ddp_gpt_t *m, float *host);
ddp_status_t ddp_gpt_copy_params_from_host(ddp_gpt_t *m, const float *host);
/* Mixed precision (amp/amp.h). dtype bf16/fp16: allocates the compute
 * copy of the weights and re-sizes the activation arena for dtype elements
 * (call at set-up, once, before training): forward and backward then read
 * that copy, and store activations and activation gradients in dtype;
 * master weights (ddp_gpt_params) and gradients stay fp32. fp32 (the
 * default) changes nothing. */
ddp_status_t ddp_gpt_set_precision(ddp_gpt_t *m, ddp_dtype_t dtype);
ddp_dtype_t ddp_gpt_precision(const ddp_gpt_t *m);
/* The compute copy (n_params elements of the half type, uint16 bit
 * patterns) for the optimizer pass to write; NULL in fp32. */
void *ddp_gpt_compute_params(ddp_gpt_t *m);
/* Rewrites the compute copy from the master weights, after anything other
 * than the optimizer changed them (ddp_gpt_copy_params_from_host and
 * ddp_gpt_init_weights do it themselves). A no-op in fp32. */
ddp_status_t ddp_gpt_refresh_compute_params(ddp_gpt_t *m);

/* Bytes of activation arena reserved (for logs and memory reports). */
size_t ddp_gpt_activation_bytes(const ddp_gpt_t *m);

/* GPT-2 initialisation from the counter-based RNG: normal(0, 0.02); the two
 * residual output projections of each block normal(0, 0.02/sqrt(2 n_layer));
 * biases 0; LayerNorm weight 1, bias 0. Each tensor draws from its own
 * sub-stream (derived from its name's position in the model), so the values
 * do not depend on the layout order. */
ddp_status_t ddp_gpt_init_weights(ddp_gpt_t *m, uint64_t seed);

void ddp_gpt_set_grad_hook(ddp_gpt_t *m, ddp_grad_ready_fn fn, void *ctx);

/* A watcher (--detect-anomaly, fault injection) is shown each activation of
 * a training forward and each parameter gradient as backward completes it,
 * with a name ("forward: h.0.mlp.c_fc output", "backward: gradient of
 * transformer.h.0.mlp.c_fc.weight"); x is backend memory of n dtype
 * elements (activations: the precision of ddp_gpt_set_precision; gradients
 * and losses: fp32). A status other
 * than DDP_OK ends the pass with it. NULL (the default): no calls, no cost. */
typedef ddp_status_t (*ddp_gpt_watch_fn)(void *ctx, const char *what, void *x, ddp_dtype_t dtype,
                                         size_t n);
void ddp_gpt_set_watch(ddp_gpt_t *m, ddp_gpt_watch_fn fn, void *ctx);

/* Forward of one micro-batch: inputs/targets (B,T) int32 host arrays (targets
 * -1 at ignored positions). With train != 0 activations are kept for
 * backward and the loss gradient (scaled by dloss) is fused into the loss.
 * The loss sum is added to a device-side accumulator (no host sync); read it
 * with ddp_gpt_take_loss. */
ddp_status_t ddp_gpt_forward(ddp_gpt_t *m, const int32_t *inputs, const int32_t *targets, int B,
                             int T, int train, float dloss);

/* Backward of the last training forward. accumulate == 0 overwrites the
 * gradients (first micro-step); notify != 0 calls the grad hook per tensor. */
ddp_status_t ddp_gpt_backward(ddp_gpt_t *m, int accumulate, int notify);

/* Which attention the blocks run. */
typedef enum ddp_gpt_attention {
  DDP_GPT_ATTENTION_AUTO = 0,   /* flash on GPUs; matrix on the CPU, where flash
                                   measured 10-30% slower per call (bench/RESULTS.md) */
  DDP_GPT_ATTENTION_MATRIX = 1, /* softmax probabilities (B,NH,T,T) kept for backward */
  DDP_GPT_ATTENTION_FLASH = 2   /* tiles with an online softmax: only (B,NH,T) kept,
                                   and no work on the padding after each row's last
                                   target */
} ddp_gpt_attention_t;

/* How the model runs (not what it computes): set outside the step loop,
 * after ddp_gpt_set_precision; each call re-sizes the activation arena. */
typedef struct ddp_gpt_exec {
  /* 1: backward recomputes the LayerNorm outputs (ln_1, ln_2) and GELU's
   * output from the saved residual stream, statistics and c_fc output
   * instead of keeping them: 6 of each block's 16 N x C activation
   * buffers are not stored (two cheap memory-bound ops and one LayerNorm
   * more per block in backward). Results are unchanged (the recomputation
   * runs the forward's ops on the same inputs). */
  int recompute;
  /* 1: the training layout keeps only a chunk of logits rows, for
   * ddp_gpt_forward_backward, which runs the LM head and the cross-entropy
   * with their backward chunk by chunk; ddp_gpt_forward(train = 1) of more
   * tokens than a chunk is then refused. */
  int fused_classifier;
  ddp_gpt_attention_t attention;
} ddp_gpt_exec_t;
/* The zeroed struct is the default (everything kept, full logits). On
 * failure (the arena does not fit) the previous options stay in force. */
ddp_status_t ddp_gpt_set_exec(ddp_gpt_t *m, const ddp_gpt_exec_t *exec);
const ddp_gpt_exec_t *ddp_gpt_exec(const ddp_gpt_t *m);
/* The attention in use once "auto" is resolved: "flash" or "matrix". */
const char *ddp_gpt_attention_name(const ddp_gpt_t *m);

/* One training micro-step: forward and backward of a micro-batch in one
 * call (arguments as ddp_gpt_forward with train = 1 and ddp_gpt_backward),
 * which lets the LM head and the cross-entropy run fused with their
 * backward, chunk by chunk, so the N x V logits never exist at once under
 * fused_classifier. Same loss and gradients as the two calls, up to the
 * summation order of the LM head's weight gradient over chunks (with one
 * chunk: the same operations in the same order). */
ddp_status_t ddp_gpt_forward_backward(ddp_gpt_t *m, const int32_t *inputs, const int32_t *targets,
                                      int B, int T, float dloss, int accumulate, int notify);

/* Reads and zeroes the device-side loss accumulator (one host sync). */
ddp_status_t ddp_gpt_take_loss(ddp_gpt_t *m, double *loss_sum);

/* Logits of the last forward (backend memory, B*T rows of V values at a
 * row pitch of ddp_gpt_vocab_padded(), valid after an eval forward; a
 * training forward overwrites them with their gradient). */
const void *ddp_gpt_logits(const ddp_gpt_t *m);
/* The vocabulary rounded up to a multiple of vocab_pad: the logits' row pitch.
 * The LM head computes the padding columns from zero rows that follow wte
 * in the flat buffers (outside n_params); they are 0 and the loss ignores
 * them. */
int ddp_gpt_vocab_padded(const ddp_gpt_t *m);
/* Copies the first n_rows rows (of V values) of those logits to the host as
 * fp32 (half logits widened exactly). */
ddp_status_t ddp_gpt_copy_logits_to_host(ddp_gpt_t *m, float *host, int64_t n_rows);

/* Writes every parameter to a safetensors file (fp32, PyTorch state_dict
 * keys; the tied LM head is not repeated). Atomic: temporary file + rename. */
ddp_status_t ddp_gpt_export_safetensors(ddp_gpt_t *m, const char *path);

#ifdef __cplusplus
}
#endif
#endif
