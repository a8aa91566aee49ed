/* --model gpt: the GPT-2 decoder (model/gpt.h) behind the runtime's model
 * interface (ddptrain/model.h). The decoder keeps its own interface for
 * its tests; this file only translates: its flags into a configuration and
 * execution options, token batches into its calls, and its parameter
 * table, buffers and hooks into the fields of ddp_model_t. */
#include <stdio.h>
#include <string.h>

#include "ddptrain/check.h"
#include "core/ascii.h"
#include "model/builtin.h"
#include "model/gpt.h"

static const char *const k_attention[] = {"auto", "flash", "matrix", NULL};
static const char *const k_on_off[] = {"on", "off", NULL};

static const ddp_option_def_t k_options[] = {
    {"n-layer", DDP_OPTION_INT, "2", 1, 1000, "L", "transformer blocks", NULL, 0},
    {"n-head", DDP_OPTION_INT, "4", 1, 4096, "H", "attention heads", NULL, 0},
    {"n-embd", DDP_OPTION_INT, "128", 1, 65536, "C", "embedding width (a multiple of --n-head)",
     NULL, 0},
    {"attention", DDP_OPTION_STRING, "auto", 0, 0, "KIND",
     "attention kernel: flash (tiles with an online softmax: no T x T probabilities kept, and "
     "no work on the padding after each row's last target), matrix (probabilities kept for "
     "backward), or auto: flash on GPUs, matrix on the CPU, where it is faster",
     k_attention, 0},
    {"recompute", DDP_OPTION_STRING, "off", 0, 0, "on|off",
     "recompute LayerNorm and GELU outputs in backward instead of keeping them: 6 of each "
     "block's 16 token x channel activation buffers are not stored, for a larger batch in the "
     "same memory at the cost of one LayerNorm and GELU pass more per block; results unchanged",
     k_on_off, 0},
};

/* The flags that fix the tensors (with the runtime's --seq-len). */
static const char *const k_ckpt_keys[] = {"n-layer", "n-head", "n-embd", "seq-len", NULL};

static ddp_gpt_t *gpt_of(const ddp_model_t *m) {
  return (ddp_gpt_t *)m->impl;
}

/* The configuration the flags and the data describe. */
static ddp_status_t config_of(const ddp_options_t *o, int vocab, int seq_len, ddp_gpt_config_t *c) {
  int64_t L, H, C;
  DDP_CHECK(ddp_options_get_int(o, "n-layer", &L));
  DDP_CHECK(ddp_options_get_int(o, "n-head", &H));
  DDP_CHECK(ddp_options_get_int(o, "n-embd", &C));
  *c = (ddp_gpt_config_t){.n_layer = (int)L,
                          .n_head = (int)H,
                          .n_embd = (int)C,
                          .max_seq_len = seq_len,
                          .vocab = vocab};
  return ddp_gpt_config_validate(c);
}

/* Runs before the ranks start (ddp_options_validate): a bad combination is
 * a command-line error, one line without a source location, like a bad
 * flag. */
static ddp_status_t gpt_validate(const ddp_options_t *o) {
  int64_t H, C;
  DDP_CHECK(ddp_options_get_int(o, "n-head", &H));
  DDP_CHECK(ddp_options_get_int(o, "n-embd", &C));
  if (C % H != 0) {
    ddp_log_at(DDP_LOG_LEVEL_ERROR, NULL, 0,
               "option --n-embd %lld is not a multiple of --n-head %lld (each head takes "
               "n-embd / n-head channels)",
               (long long)C, (long long)H);
    return DDP_ERR_INVALID_ARG;
  }
  ddp_gpt_config_t c;
  return config_of(o, 2, (int)o->seq_len, &c); /* the vocabulary comes with the data */
}

static ddp_status_t gpt_cost(const ddp_options_t *o, const ddp_data_shape_t *d, double *a,
                             double *b) {
  ddp_gpt_config_t c;
  DDP_CHECK(config_of(o, d->vocab, d->seq_len, &c));
  ddp_gpt_cost_model(&c, a, b);
  return DDP_OK;
}

/* The decoder's hooks call the runtime's, whatever it sets them to later. */
static void on_grad(void *ctx, size_t offset, size_t count) {
  ddp_model_t *m = ctx;
  if (m->grad_ready_fn) m->grad_ready_fn(m->grad_ready_ctx, offset, count);
}

static ddp_status_t on_watch(void *ctx, const char *what, void *x, ddp_dtype_t dtype, size_t n) {
  ddp_model_t *m = ctx;
  return ddp_model_watch(m, what, x, dtype, n);
}

/* Where the decoder's buffers are now (set_precision adds the compute copy). */
static void publish(ddp_model_t *m) {
  ddp_gpt_t *g = gpt_of(m);
  m->tensors = ddp_gpt_tensor(g, 0);
  m->n_tensors = ddp_gpt_num_tensors(g);
  m->n_params = ddp_gpt_num_params(g);
  m->params = ddp_gpt_params(g);
  m->grads = ddp_gpt_grads(g);
  m->n_outputs = ddp_gpt_config(g)->vocab;
  m->precision = ddp_gpt_precision(g);
  m->compute_params = ddp_gpt_compute_params(g);
}

static ddp_status_t gpt_create(ddp_model_t *m, const ddp_model_setup_t *s) {
  ddp_gpt_config_t c;
  DDP_CHECK(config_of(s->opts, s->data.vocab, s->data.seq_len, &c));
  const char *attention, *recompute;
  DDP_CHECK(ddp_options_get_string(s->opts, "attention", &attention));
  DDP_CHECK(ddp_options_get_string(s->opts, "recompute", &recompute));
  ddp_gpt_t *g = NULL;
  DDP_CHECK(ddp_gpt_create(&g, s->be, &c, s->max_batch));
  m->impl = g;
  /* The runtime always takes the fused classifier (one call per
   * micro-step), so only a chunk of logits is ever held. */
  const ddp_gpt_exec_t exec = {
      .recompute = ddp_ascii_ieq(recompute, "on"),
      .fused_classifier = 1,
      .attention = ddp_ascii_ieq(attention, "flash")    ? DDP_GPT_ATTENTION_FLASH
                   : ddp_ascii_ieq(attention, "matrix") ? DDP_GPT_ATTENTION_MATRIX
                                                        : DDP_GPT_ATTENTION_AUTO};
  DDP_CHECK(ddp_gpt_set_exec(g, &exec));
  ddp_gpt_set_grad_hook(g, on_grad, m);
  publish(m);
  return DDP_OK;
}

static void gpt_destroy(ddp_model_t *m) {
  ddp_gpt_destroy(gpt_of(m));
  m->impl = NULL;
}

static ddp_status_t gpt_init_weights(ddp_model_t *m, uint64_t seed) {
  return ddp_gpt_init_weights(gpt_of(m), seed);
}

static ddp_status_t gpt_set_precision(ddp_model_t *m, ddp_dtype_t dtype) {
  DDP_CHECK(ddp_gpt_set_precision(gpt_of(m), dtype));
  publish(m);
  return DDP_OK;
}

static ddp_status_t gpt_forward_backward(ddp_model_t *m, const void *batch, float dloss,
                                         int accumulate, int notify) {
  const ddp_batch_t *b = batch;
  /* a watcher costs a name per activation: installed only while one is set */
  ddp_gpt_set_watch(gpt_of(m), m->watch_fn ? on_watch : NULL, m);
  return ddp_gpt_forward_backward(gpt_of(m), b->inputs, b->targets, b->B, b->T, dloss, accumulate,
                                  notify);
}

static ddp_status_t gpt_eval_forward(ddp_model_t *m, const void *batch) {
  const ddp_batch_t *b = batch;
  return ddp_gpt_forward(gpt_of(m), b->inputs, b->targets, b->B, b->T, 0, 0.0f);
}

static ddp_status_t gpt_take_loss(ddp_model_t *m, double *loss_sum) {
  return ddp_gpt_take_loss(gpt_of(m), loss_sum);
}

static ddp_status_t gpt_copy_outputs(ddp_model_t *m, float *host, int64_t n_rows) {
  return ddp_gpt_copy_logits_to_host(gpt_of(m), host, n_rows);
}

static void gpt_describe(const ddp_model_t *m, char *buf, size_t len) {
  const ddp_gpt_t *g = gpt_of(m);
  const ddp_gpt_config_t *c = ddp_gpt_config(g);
  snprintf(buf, len, "GPT L%d H%d C%d T%d, %.2fM parameters, %.1f MiB activations%s, %s attention",
           c->n_layer, c->n_head, c->n_embd, c->max_seq_len, (double)ddp_gpt_num_params(g) / 1e6,
           (double)ddp_gpt_activation_bytes(g) / 1048576.0,
           ddp_gpt_exec(g)->recompute ? " (recomputing LayerNorm and GELU)" : "",
           ddp_gpt_attention_name(g));
}

static ddp_status_t gpt_export(ddp_model_t *m, const char *path) {
  return ddp_gpt_export_safetensors(gpt_of(m), path);
}

const ddp_model_ops_t ddp_gpt_model_ops = {
    .name = "gpt",
    .summary = "a GPT-2 decoder (pre-LayerNorm blocks, learned positions, tied LM head) on tokens",
    .batch_kind = DDP_BATCH_TOKENS,
    .devices = DDP_MODEL_ON(DDP_DEVICE_KIND_CPU) | DDP_MODEL_ON(DDP_DEVICE_KIND_CUDA),
    .uses_nn_ops = 1,
    .options = k_options,
    .n_options = (int)(sizeof k_options / sizeof k_options[0]),
    .ckpt_keys = k_ckpt_keys,
    .validate = gpt_validate,
    .cost = gpt_cost,
    .create = gpt_create,
    .destroy = gpt_destroy,
    .init_weights = gpt_init_weights,
    .set_precision = gpt_set_precision,
    .forward_backward = gpt_forward_backward,
    .eval_forward = gpt_eval_forward,
    .take_loss = gpt_take_loss,
    .copy_outputs = gpt_copy_outputs,
    .describe = gpt_describe,
    .export_weights = gpt_export,
};
