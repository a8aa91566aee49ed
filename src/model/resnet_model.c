/* --model resnet: the ResNet behind the runtime's model interface
 * (ddptrain/model.h): its flags, their combinations, the FLOP count,
 * memory (everything allocated once, in create, for the largest
 * micro-batch), and the steps. The network itself is in resnet_layout.c
 * (architecture and tables), resnet_forward.c and resnet_backward.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/log.h"
#include "ddptrain/nn.h"
#include "model/builtin.h"
#include "model/graph_replay.h"
#include "model/resnet.h"

static const char *const k_depths[] = {"10", "14", "18", "34", "50", "101", "152", NULL};
static const char *const k_stems[] = {"auto", "cifar", "imagenet", NULL};

static const ddp_option_def_t k_options[] = {
    {"depth", DDP_OPTION_STRING, "18", 0, 0, "D",
     "ResNet depth: 18 and 34 (basic blocks), 50, 101 and 152 (bottleneck blocks) as "
     "torchvision's; 10 (basic) and 14 (bottleneck) have one block per stage, for small tests",
     k_depths, 0},
    {"width", DDP_OPTION_INT, "64", 1, 4096, "W",
     "channels of the stem and the first stage (each stage doubles them; torchvision: 64)", NULL,
     0},
    {"stem", DDP_OPTION_STRING, "auto", 0, 0, "KIND",
     "cifar: a 3x3 convolution; imagenet: a 7x7 stride-2 convolution and a 3x3 stride-2 "
     "max-pool; auto: cifar for images under 64 pixels on a side, imagenet otherwise",
     k_stems, 0},
    {"zero-init-residual", DDP_OPTION_INT, "0", 0, 1, "0|1",
     "start each block's last BatchNorm gamma at 0, so every block starts as the identity", NULL,
     0},
    {"sync-bn", DDP_OPTION_INT, "0", 0, 1, "0|1",
     "BatchNorm statistics over all ranks' batches (as SyncBatchNorm) instead of each rank's "
     "own (as PyTorch DDP); costs 3 small all-reduces per BatchNorm and step",
     NULL, 0},
    {"bn-momentum", DDP_OPTION_FLOAT, "0.1", 0, 1, "M",
     "BatchNorm running statistics: new = (1 - M) old + M batch", NULL, 0},
    {"bn-eps", DDP_OPTION_FLOAT, "1e-5", 1e-12, 1, "E", "BatchNorm epsilon", NULL, 0},
    {"label-smoothing", DDP_OPTION_FLOAT, "0", 0, 0.999, "X",
     "cross-entropy against (1 - X) one-hot + X / classes", NULL, 0},
};

/* The flags that fix the tensors. */
static const char *const k_ckpt_keys[] = {"depth", "width", "stem", NULL};

static ddp_status_t resnet_validate(const ddp_options_t *o) {
  resnet_config_t c;
  DDP_CHECK(resnet_config_from_options(o, &c));
  const int64_t widest = (int64_t)c.width * 8 * (c.bottleneck ? 4 : 1);
  if (widest > 65536) {
    ddp_log_at(DDP_LOG_LEVEL_ERROR, NULL, 0,
               "option --width %d makes the last stage of --depth %d %lld channels wide (at most "
               "65536)",
               c.width, c.depth, (long long)widest);
    return DDP_ERR_INVALID_ARG;
  }
  return DDP_OK;
}

static ddp_status_t resnet_cost(const ddp_options_t *o, const ddp_data_shape_t *d, double *a,
                                double *b) {
  resnet_config_t c;
  resnet_t r;
  DDP_CHECK(resnet_config_from_options(o, &c));
  DDP_CHECK(resnet_config_set_data(&c, d));
  ddp_status_t st = resnet_layout(&r, &c);
  /* forward 2 FLOPs a multiply-add; backward twice that (data and weights) */
  if (st == DDP_OK) *a = 6.0 * resnet_forward_macs(&r), *b = 0.0;
  resnet_layout_free(&r);
  return st;
}

static void resnet_destroy(ddp_model_t *m) {
  resnet_t *r = m->impl;
  if (!r) return;
  ddp_backend_t *be = m->be;
  ddp_slot_stager_destroy(&r->in); /* first: it waits for its copies */
  void *mem[] = {m->params, m->grads,    m->buffers, r->arena, r->pool_ws, r->stats_mem,
                 r->losses, r->loss_sum, r->ones,    m->compute_params};
  for (size_t i = 0; i < sizeof mem / sizeof mem[0]; ++i)
    if (mem[i]) ddp_backend_free(be, mem[i]);
  for (; r->nn_reserved > 0; --r->nn_reserved) be->ops->nn->release(be);
  resnet_layout_free(r);
  free(r);
  m->impl = NULL;
}

static ddp_status_t alloc(ddp_backend_t *be, size_t bytes, void **p) {
  return ddp_backend_alloc(be, bytes > 0 ? bytes : 1, p);
}

/* Carves the activations out of one allocation (or, with base NULL,
 * counts their bytes). */
static size_t place(resnet_t *r, char *base) {
  const size_t es = ddp_dtype_size(r->dt), N = (size_t)r->max_batch;
  size_t off = 0;
#define TAKE(ptr, elems, size)                                            \
  do {                                                                    \
    if (base) (ptr) = base + off;                                         \
    off += ((size_t)(elems) * (size) + 255) & ~(size_t)255; /* aligned */ \
  } while (0)
  for (int i = 0; i < r->n_units; ++i) {
    resnet_unit_t *u = &r->units[i];
    TAKE(u->c, N * (size_t)u->out_elems, es);
    if (u->relu) TAKE(u->a, N * (size_t)u->out_elems, es);
  }
  for (int i = 0; i < r->n_blocks; ++i)
    TAKE(r->blocks[i].out, N * (size_t)r->blocks[i].out_elems, es);
  if (r->pool_elems) TAKE(r->pool, N * (size_t)r->pool_elems, es);
  for (int i = 0; i < 4; ++i) TAKE(r->grad[i], N * (size_t)r->max_act_elems, es);
  TAKE(r->pooled, N * (size_t)r->features, es);
  TAKE(r->logits, N * (size_t)r->cfg.classes, sizeof(float));
  if (base) r->logits_dt = r->logits; /* x_in: the pixels' slot in fp32 (resnet_upload) */
  if (r->dt != DDP_DTYPE_F32) { /* the half copies of the fp32 ends */
    TAKE(r->x_in, N * (size_t)r->cfg.H * r->cfg.W * r->cfg.C, es);
    TAKE(r->logits_dt, N * (size_t)r->cfg.classes, es);
  }
#undef TAKE
  return off;
}

/* oneDNN and cuDNN pick their kernels per shape: once here, not in step 1. */
static ddp_status_t prepare(resnet_t *r) {
  const ddp_conv_ops_t *cv = r->be->ops->conv;
  for (int i = 0; i < r->n_units; ++i) {
    resnet_unit_t *u = &r->units[i];
    ddp_conv_shape_t sh = u->conv;
    sh.N = (int)r->max_batch;
    DDP_CHECK(cv->conv_prepare(r->be, r->dt, &sh));
    const ddp_bn_shape_t bs = resnet_bn_shape(r, u, (int)r->max_batch);
    DDP_CHECK(cv->bn_prepare(r->be, r->dt, &bs));
  }
  return DDP_OK;
}

/* The activations and the kernels' choice, made by the first forward, in
 * the run's precision: a model made in fp32 and switched to bf16 had held
 * an fp32 arena and its bf16 successor at once (ResNet-50 at batch 128 on a
 * GPU peaked at 18.7 GiB where PyTorch needs 6), and searched cuDNN's
 * algorithms for fp32 shapes it never ran. */
ddp_status_t resnet_materialise(resnet_t *r) {
  if (r->arena) return DDP_OK;
  void *arena = NULL;
  DDP_CHECK(alloc(r->be, place(r, NULL), &arena));
  r->arena = arena;
  place(r, r->arena);
  return prepare(r);
}

/* The conv table may be partial (a backend still growing one): every op
 * this configuration calls must be there, or the model is refused, naming
 * the first missing one. */
static ddp_status_t check_ops(const ddp_backend_t *be, const resnet_config_t *c) {
  const ddp_conv_ops_t *cv = be->ops->conv;
  const struct {
    const char *name;
    int present, needed;
  } ops[] = {
      {"conv_fwd", cv->conv_fwd != NULL, 1},
      {"conv_bwd_data", cv->conv_bwd_data != NULL, 1},
      {"conv_bwd_weights", cv->conv_bwd_weights != NULL, 1},
      {"conv_prepare", cv->conv_prepare != NULL, 1},
      {"bn_fwd", cv->bn_fwd != NULL, 1},
      {"bn_bwd", cv->bn_bwd != NULL, 1},
      {"bn_prepare", cv->bn_prepare != NULL, 1},
      {"relu_fwd", cv->relu_fwd != NULL, 1},
      {"relu_bwd", cv->relu_bwd != NULL, 1},
      {"add_relu_fwd", cv->add_relu_fwd != NULL, 1},
      {"avgpool_fwd", cv->avgpool_fwd != NULL, 1},
      {"avgpool_bwd", cv->avgpool_bwd != NULL, 1},
      {"maxpool_workspace_bytes", cv->maxpool_workspace_bytes != NULL, c->imagenet_stem},
      {"maxpool_fwd", cv->maxpool_fwd != NULL, c->imagenet_stem},
      {"maxpool_bwd", cv->maxpool_bwd != NULL, c->imagenet_stem},
      {"bn_reduce_fwd", cv->bn_reduce_fwd != NULL, c->sync_bn},
      {"bn_apply_fwd", cv->bn_apply_fwd != NULL, c->sync_bn},
      {"bn_reduce_bwd", cv->bn_reduce_bwd != NULL, c->sync_bn},
      {"bn_apply_bwd", cv->bn_apply_bwd != NULL, c->sync_bn},
      {"nn linear_fwd", be->ops->nn->linear_fwd != NULL, 1},
      {"nn linear_bwd", be->ops->nn->linear_bwd != NULL, 1},
      {"nn add", be->ops->nn->add != NULL, 1},
      {"nn xent_fused", be->ops->nn->xent_fused != NULL, 1},
  };
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i)
    if (ops[i].needed && !ops[i].present)
      DDP_FAIL(DDP_ERR_UNSUPPORTED, "model resnet%s: the %s backend has no %s op",
               c->sync_bn ? " --sync-bn 1" : "", be->ops->name, ops[i].name);
  return DDP_OK;
}

static ddp_status_t resnet_create(ddp_model_t *m, const ddp_model_setup_t *s) {
  ddp_backend_t *be = s->be;
  if (!be->ops->conv || !be->ops->nn)
    DDP_FAIL(DDP_ERR_UNSUPPORTED,
             "model resnet needs convolution kernels; the %s backend has none (a CPU build "
             "without oneDNN?)",
             be->ops->name);
  if (s->max_batch < 1 || s->max_batch > (1 << 20))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "resnet: a micro-batch of %lld records", (long long)s->max_batch);
  resnet_config_t c;
  DDP_CHECK(resnet_config_from_options(s->opts, &c));
  DDP_CHECK(resnet_config_set_data(&c, &s->data));
  DDP_CHECK(check_ops(be, &c));
  resnet_t *r = calloc(1, sizeof *r);
  if (!r) DDP_FAIL(DDP_ERR_OOM, "resnet: out of host memory");
  m->impl = r;
  DDP_CHECK(resnet_layout(r, &c));
  r->be = be, r->dt = DDP_DTYPE_F32, r->max_batch = s->max_batch;
  r->world = s->world > 0 ? s->world : 1;
  const size_t N = (size_t)s->max_batch;
  DDP_CHECK(alloc(be, r->n_params * sizeof(float), (void **)&m->params));
  DDP_CHECK(alloc(be, r->n_params * sizeof(float), (void **)&m->grads));
  DDP_CHECK(alloc(be, r->n_buffer_floats * sizeof(float), (void **)&m->buffers));
  size_t stats = 0;
  for (int i = 0; i < r->n_units; ++i) stats += 6 * (size_t)r->units[i].K;
  DDP_CHECK(alloc(be, stats * sizeof(float), (void **)&r->stats_mem));
  for (int i = 0, off = 0; i < r->n_units; off += 6 * r->units[i].K, ++i)
    r->units[i].stats = r->stats_mem + off;
  if (c.imagenet_stem) {
    const resnet_unit_t *st = &r->units[0];
    const ddp_pool_shape_t ps = {
        .N = (int)N, .H = st->OH, .W = st->OW, .C = st->K, .kernel = 3, .stride = 2, .pad = 1};
    size_t bytes = 0;
    DDP_CHECK(be->ops->conv->maxpool_workspace_bytes(be, r->dt, &ps, &bytes));
    DDP_CHECK(alloc(be, bytes, &r->pool_ws));
  }
  DDP_CHECK(alloc(be, N * sizeof(float), (void **)&r->losses));
  DDP_CHECK(alloc(be, sizeof(float), (void **)&r->loss_sum));
  DDP_CHECK(alloc(be, (size_t)r->n_units * sizeof(float), (void **)&r->ones));
  const size_t in_caps[2] = {N * (size_t)c.H * c.W * c.C * sizeof(float), N * sizeof(int32_t)};
  DDP_CHECK(ddp_slot_stager_init(&r->in, be, 2, in_caps));
  /* the classifier's linear (its bias gradient's column sums, on a GPU)
   * and the loss take the nn table's scratch, sized here for fp32 and
   * again by set_precision for a half type */
  DDP_CHECK(be->ops->nn->reserve(be, DDP_DTYPE_F32, r->max_batch, r->features, c.classes));
  r->nn_reserved++;
  DDP_CHECK(be->ops->fill(be, r->loss_sum, DDP_DTYPE_F32, 0.0f, 1, NULL));
  DDP_CHECK(be->ops->fill(be, r->ones, DDP_DTYPE_F32, 1.0f, (size_t)r->n_units, NULL));
  DDP_CHECK(be->ops->fill(be, m->buffers, DDP_DTYPE_F32, 0.0f, r->n_buffer_floats, NULL));
  m->tensors = r->table, m->n_tensors = r->n_tensors, m->n_params = r->n_params;
  m->n_outputs = c.classes;
  m->buffer_tensors = r->buffers, m->n_buffer_tensors = r->n_buffers;
  m->n_buffer_floats = r->n_buffer_floats;
  m->buffers_in_sync = c.sync_bn;
  return ddp_backend_sync(be, NULL);
}

/* bf16/fp16 (docs/design.md §7): activations, activation gradients and the
 * compute copy of the weights (m->compute_params, which the optimizer
 * rewrites from the fp32 masters after every step) in dtype; the pixels
 * arrive in fp32 and are converted once per step, the logits are converted
 * to fp32 for the loss and dlogits back to dtype. BatchNorm's gamma and
 * beta are read from the fp32 masters (m->params), never from their
 * rounded compute copy, as conv.h's BN ops take them in fp32; statistics
 * and every parameter gradient stay fp32. fp16's loss scale arrives in
 * dloss and leaves in the gradients, which the runtime's scaler checks. */
static ddp_status_t resnet_set_precision(ddp_model_t *m, ddp_dtype_t dtype) {
  resnet_t *r = m->impl;
  ddp_backend_t *be = m->be;
  if (dtype != DDP_DTYPE_F32 && dtype != DDP_DTYPE_BF16 && dtype != DDP_DTYPE_F16)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "resnet: precision %s is not fp32, bf16 or fp16",
             ddp_dtype_name(dtype));
  if (dtype == r->dt) return DDP_OK;
  if (r->dt != DDP_DTYPE_F32)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "resnet: precision is already %s", ddp_dtype_name(r->dt));
  if (r->arena)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "resnet: the precision is set before the first forward");
  const size_t f32_bytes = place(r, NULL), es = ddp_dtype_size(dtype);
  /* the classifier's linear widens into the nn table's workspace */
  DDP_CHECK(be->ops->nn->reserve(be, dtype, r->max_batch, r->features, r->cfg.classes));
  r->nn_reserved++;
  DDP_CHECK(alloc(be, m->n_params * es, &m->compute_params));
  r->dt = dtype;
  const size_t bytes = place(r, NULL);
  m->precision = dtype;
  if (r->cfg.imagenet_stem) { /* the winners' record is the same; the prepare is dtype's */
    const resnet_unit_t *st0 = &r->units[0];
    const ddp_pool_shape_t ps = {.N = (int)r->max_batch,
                                 .H = st0->OH,
                                 .W = st0->OW,
                                 .C = st0->K,
                                 .kernel = 3,
                                 .stride = 2,
                                 .pad = 1};
    size_t ws = 0;
    DDP_CHECK(be->ops->conv->maxpool_workspace_bytes(be, dtype, &ps, &ws));
  }
  DDP_LOG_INFO(
      "precision %s: %.1f MiB activations (fp32: %.1f MiB), %.1f MiB compute copy of the "
      "weights",
      ddp_dtype_name(dtype), (double)bytes / 1048576.0, (double)f32_bytes / 1048576.0,
      (double)(m->n_params * es) / 1048576.0);
  /* zeros until the weights arrive: init_weights, a load or the broadcast
   * write the masters and refresh the copy (§7) */
  DDP_CHECK(be->ops->fill(be, m->compute_params, dtype, 0.0f, m->n_params, NULL));
  return ddp_backend_sync(be, NULL);
}

/* The runtime reuses the host batch once a step returns; on a GPU the
 * uploads are asynchronous, so the step waits for them (queued first, they
 * are long done by the time the whole pass is queued). */
static ddp_status_t batch_released(ddp_model_t *m) {
  resnet_t *r = m->impl;
  DDP_CHECK(ddp_slot_stager_release(&r->in)); /* after the pass's last read of the slot */
  return ddp_slot_stager_wait_copied(&r->in);
}

/* What a training pass on the device depends on, besides device memory:
 * the replay key (model/graph_replay.h); no padding, compared as bytes. */
typedef struct pass {
  int32_t N;
  float dloss;
  int32_t accumulate, notify;
  int32_t slot; /* the input slot: the loss reads its labels (and the stem its pixels in fp32) */
} pass_t;

static ddp_status_t pass_on_device(ddp_model_t *m, void *ctx) {
  const pass_t *p = ctx;
  DDP_CHECK(resnet_forward_device(m, p->N, 1, p->dloss));
  return resnet_backward(m, p->N, p->accumulate, p->notify);
}

static ddp_status_t resnet_forward_backward(ddp_model_t *m, const void *batch, float dloss,
                                            int accumulate, int notify) {
  const ddp_record_batch_t *b = batch;
  const resnet_t *r = m->impl;
  DDP_CHECK(resnet_upload(m, b));
  const pass_t p = {.N = b->B,
                    .dloss = dloss,
                    .accumulate = accumulate != 0,
                    .notify = notify != 0,
                    .slot = r->in.slot};
  /* Recorded and replayed where the runtime allows it (m->replay; never
   * with a watcher), except when the pass talks to the host itself: a
   * synchronised BN sums its statistics over the ranks inside it. */
  ddp_graph_replay_t *rp = r->cfg.sync_bn && m->allreduce_fn ? NULL : m->replay;
  DDP_CHECK(ddp_graph_replay_run(rp, m, &p, sizeof p, pass_on_device, (void *)&p));
  return batch_released(m);
}

static ddp_status_t resnet_eval_forward(ddp_model_t *m, const void *batch) {
  DDP_CHECK(resnet_forward(m, batch, 0, 0.0f));
  return batch_released(m);
}

static ddp_status_t resnet_take_loss(ddp_model_t *m, double *loss_sum) {
  resnet_t *r = m->impl;
  float v = 0.0f;
  DDP_CHECK(ddp_backend_copy(m->be, &v, r->loss_sum, sizeof v, DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  DDP_CHECK(ddp_backend_sync(m->be, NULL));
  DDP_CHECK(m->be->ops->fill(m->be, r->loss_sum, DDP_DTYPE_F32, 0.0f, 1, NULL));
  *loss_sum = v;
  return DDP_OK;
}

static ddp_status_t resnet_copy_outputs(ddp_model_t *m, float *host, int64_t n_rows) {
  resnet_t *r = m->impl;
  if (n_rows < 0 || n_rows > r->last_n)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "resnet: %lld rows of logits asked, the last forward had %d",
             (long long)n_rows, r->last_n);
  DDP_CHECK(ddp_backend_copy(m->be, host, r->logits,
                             (size_t)n_rows * (size_t)r->cfg.classes * sizeof(float),
                             DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  return ddp_backend_sync(m->be, NULL);
}

static void resnet_describe(const ddp_model_t *m, char *buf, size_t len) {
  const resnet_t *r = m->impl;
  const resnet_config_t *c = &r->cfg;
  snprintf(buf, len,
           "ResNet-%d (%s blocks, width %d, %s stem) on %dx%dx%d images, %d classes, %.2fM "
           "parameters, %.1f MFLOP per image forward, %s BatchNorm, %s",
           c->depth, c->bottleneck ? "bottleneck" : "basic", c->width,
           c->imagenet_stem ? "imagenet" : "cifar", c->H, c->W, c->C, c->classes,
           (double)m->n_params / 1e6, 2.0 * resnet_forward_macs(r) / 1e6,
           c->sync_bn ? "synchronised" : "per-rank", ddp_dtype_name(r->dt));
}

const ddp_model_ops_t ddp_resnet_model_ops = {
    .name = "resnet",
    .summary = "a ResNet (18/34/50/101/152, basic or bottleneck blocks, BatchNorm) on images",
    .batch_kind = DDP_BATCH_RECORDS,
    .devices = DDP_MODEL_ON(DDP_DEVICE_KIND_CPU) | DDP_MODEL_ON(DDP_DEVICE_KIND_CUDA),
    .uses_nn_ops = 1,
    .image_data = 1,
    .options = k_options,
    .n_options = (int)(sizeof k_options / sizeof k_options[0]),
    .ckpt_keys = k_ckpt_keys,
    .validate = resnet_validate,
    .cost = resnet_cost,
    .create = resnet_create,
    .destroy = resnet_destroy,
    .init_weights = resnet_init_weights,
    .set_precision = resnet_set_precision,
    .forward_backward = resnet_forward_backward,
    .eval_forward = resnet_eval_forward,
    .take_loss = resnet_take_loss,
    .copy_outputs = resnet_copy_outputs,
    .describe = resnet_describe,
    .export_weights = resnet_export,
};
