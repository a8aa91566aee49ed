/* The ResNet's forward: stem, blocks, global average pool, classifier and
 * the loss, through the conv and nn tables. Training keeps each conv output
 * (the BN's input) and each ReLU output for the backward and moves the
 * running statistics; inference normalises by the running statistics.
 *
 * BatchNorm in training has two forms. Per-rank statistics (the default,
 * as PyTorch DDP) are one library call. With --sync-bn the statistics are
 * those of all ranks' batches together: the parts of the conv table
 * reduce per channel, the model sums the C values over the ranks
 * (ddp_model_allreduce) and divides by the positions of all ranks, twice
 * (mean, then the centred squares, which keeps the variance free of
 * cancellation). */
#include <stdio.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/nn.h"
#include "model/resnet.h"

const void *resnet_weight(const ddp_model_t *m, int t) {
  const size_t off = m->tensors[t].offset;
  if (m->compute_params)
    return (const char *)m->compute_params + off * ddp_dtype_size(m->precision);
  return m->params + off;
}

ddp_bn_shape_t resnet_bn_shape(const resnet_t *r, const resnet_unit_t *u, int N) {
  return (ddp_bn_shape_t){.N = N,
                          .H = u->OH,
                          .W = u->OW,
                          .C = u->K,
                          .eps = r->cfg.bn_eps,
                          .momentum = r->cfg.bn_momentum};
}

int64_t resnet_bn_positions(const resnet_t *r, const resnet_unit_t *u, int N) {
  /* every rank trains on micro-batches of the same size (record batches, §4.2) */
  return (int64_t)(r->cfg.sync_bn ? r->world : 1) * N * u->OH * u->OW;
}

/* dst[0..n) = src * alpha on the compute stream: a 1 x n product with the
 * constant 1, so no host sync and no kernel of our own. */
static ddp_status_t scale(resnet_t *r, float *dst, const float *src, int n, double alpha) {
  ddp_gemm_t g = ddp_gemm_packed_f32(1, n, 1, r->ones, src, dst);
  g.alpha = (float)alpha;
  return ddp_backend_gemm(r->be, &g, NULL);
}

/* The ReLU after a BN, alone or with the block's residual added first. */
static ddp_status_t relu_after(resnet_t *r, void *out, const void *residual, size_t n) {
  const ddp_conv_ops_t *cv = r->be->ops->conv;
  if (residual) return cv->add_relu_fwd(r->be, r->dt, out, out, residual, n, NULL);
  return cv->relu_fwd(r->be, r->dt, out, out, n, NULL);
}

/* One rank's BN of unit u's conv output into `out`, then the ReLU when
 * `relu` (with `residual` added first when not NULL): in one op where the
 * table has bn_relu_fwd (on a GPU's own batch norm, one pass over the
 * activation instead of two), else bn_fwd and the ReLU op. */
static ddp_status_t bn_relu_local(resnet_t *r, const ddp_bn_shape_t *sh, void *out, float *save_a,
                                  float *save_b, float *rmean, float *rvar, const void *in,
                                  const float *gamma, const float *beta, int relu,
                                  const void *residual, int training) {
  const ddp_conv_ops_t *cv = r->be->ops->conv;
  if (relu && cv->bn_relu_fwd)
    return cv->bn_relu_fwd(r->be, r->dt, out, save_a, save_b, rmean, rvar, in, gamma, beta,
                           residual, sh, training, NULL);
  DDP_CHECK(cv->bn_fwd(r->be, r->dt, out, save_a, save_b, rmean, rvar, in, gamma, beta, sh,
                       training, NULL));
  return relu ? relu_after(r, out, residual, (size_t)sh->N * sh->H * sh->W * sh->C) : DDP_OK;
}

/* BatchNorm of unit u's conv output into `out`, then the ReLU when `relu`
 * (the block's residual added first when `residual` is not NULL). */
static ddp_status_t bn_forward(ddp_model_t *m, resnet_t *r, resnet_unit_t *u, void *out, int N,
                               int training, int relu, const void *residual) {
  const ddp_conv_ops_t *cv = r->be->ops->conv;
  const ddp_bn_shape_t sh = resnet_bn_shape(r, u, N);
  const float *gamma = m->params + m->tensors[u->t].offset;
  const float *beta = m->params + m->tensors[u->t + 1].offset;
  float *rmean = m->buffers + r->buffers[u->b].t.offset;
  float *rvar = m->buffers + r->buffers[u->b + 1].t.offset;
  const int K = u->K;
  if (!training)
    return bn_relu_local(r, &sh, out, NULL, NULL, rmean, rvar, u->c, gamma, beta, relu, residual,
                         0);
  if ((int64_t)N * u->OH * u->OW < 2)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "resnet: %s sees %d position(s) per channel in training (batch %d x %dx%d); batch "
             "norm needs at least 2: use a larger micro-batch or larger images",
             u->bn_name, N * u->OH * u->OW, N, u->OH, u->OW);
  if (!r->cfg.sync_bn)
    return bn_relu_local(r, &sh, out, u->stats, u->stats + K, rmean, rvar, u->c, gamma, beta,
                         relu, residual, 1);
  const int64_t M = resnet_bn_positions(r, u, N);
  float *mean = u->stats, *var = u->stats + K, *sums = u->stats + 4 * K;
  DDP_CHECK(cv->bn_reduce_fwd(r->be, r->dt, sums, u->c, NULL, &sh, NULL));
  DDP_CHECK(ddp_model_allreduce(m, sums, (size_t)K));
  DDP_CHECK(scale(r, mean, sums, K, 1.0 / (double)M));
  DDP_CHECK(cv->bn_reduce_fwd(r->be, r->dt, sums, u->c, mean, &sh, NULL));
  DDP_CHECK(ddp_model_allreduce(m, sums, (size_t)K));
  DDP_CHECK(scale(r, var, sums, K, 1.0 / (double)M));
  DDP_CHECK(cv->bn_apply_fwd(r->be, r->dt, out, rmean, rvar, u->c, mean, var, gamma, beta, M,
                             &sh, NULL));
  return relu ? relu_after(r, out, residual, (size_t)N * (size_t)u->out_elems) : DDP_OK;
}

/* Conv, BN and (where the unit has one) ReLU from `in` into `out`; with a
 * residual (a block's last unit), the residual add and the block's ReLU
 * follow the BN too. */
static ddp_status_t unit_forward(ddp_model_t *m, resnet_t *r, resnet_unit_t *u, const void *in,
                                 void *out, int N, int training, const void *residual) {
  const ddp_conv_ops_t *cv = r->be->ops->conv;
  ddp_conv_shape_t sh = u->conv;
  sh.N = N;
  DDP_CHECK(cv->conv_fwd(r->be, r->dt, u->c, in, resnet_weight(m, u->t + 2), &sh, NULL));
  return bn_forward(m, r, u, out, N, training, u->relu || residual, residual);
}

/* The one place the loss is computed: the sum of the rows' cross-entropy
 * (label-smoothed by --label-smoothing, in training and evaluation alike,
 * as PyTorch's CrossEntropyLoss(label_smoothing)) into the accumulator, and
 * in training dlogits (in place) scaled by dloss. */
static ddp_status_t loss(resnet_t *r, int N, int training, float dloss) {
  const int V = r->cfg.classes;
  return r->be->ops->nn->xent_fused(r->be, DDP_DTYPE_F32, r->losses, r->loss_sum,
                                    training ? r->logits : NULL, r->logits, r->labels,
                                    training ? dloss : 0.0f, r->cfg.label_smoothing, N, V, V, NULL);
}

ddp_status_t resnet_upload(ddp_model_t *m, const ddp_record_batch_t *batch) {
  resnet_t *r = m->impl;
  const int N = batch->B;
  const resnet_config_t *c = &r->cfg;
  if (N < 1 || N > r->max_batch)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "resnet: a batch of %d records (this model holds 1 .. %lld)", N,
             (long long)r->max_batch);
  if (batch->floats != (int64_t)c->H * c->W * c->C)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "resnet: records of %lld floats, the model takes %dx%dx%d images",
             (long long)batch->floats, c->H, c->W, c->C);
  DDP_CHECK(resnet_materialise(r));
  /* fp32 pixels from the loader, on the stager's copy stream while the
   * previous pass computes; a half run converts them on the device */
  const size_t pixels = (size_t)N * (size_t)batch->floats;
  const void *const src[2] = {batch->inputs, batch->labels};
  const size_t bytes[2] = {pixels * sizeof(float), (size_t)N * sizeof(int32_t)};
  void *dev[2];
  DDP_CHECK(ddp_slot_stager_put(&r->in, "resnet: the batch", src, bytes, dev));
  r->labels = dev[1];
  if (r->dt == DDP_DTYPE_F32) {
    r->x_in = dev[0];
    return DDP_OK;
  }
  return r->be->ops->convert(r->be, r->x_in, r->dt, dev[0], DDP_DTYPE_F32, pixels, NULL);
}

ddp_status_t resnet_forward(ddp_model_t *m, const ddp_record_batch_t *batch, int training,
                            float dloss) {
  DDP_CHECK(resnet_upload(m, batch));
  return resnet_forward_device(m, batch->B, training, dloss);
}

ddp_status_t resnet_forward_device(ddp_model_t *m, int N, int training, float dloss) {
  resnet_t *r = m->impl;
  const ddp_conv_ops_t *cv = r->be->ops->conv;
  const resnet_config_t *c = &r->cfg;
  resnet_unit_t *stem = &r->units[0];
  DDP_CHECK(unit_forward(m, r, stem, r->x_in, stem->a, N, training, NULL));
  const void *cur = stem->a;
  if (c->imagenet_stem) {
    const ddp_pool_shape_t ps = {
        .N = N, .H = stem->OH, .W = stem->OW, .C = stem->K, .kernel = 3, .stride = 2, .pad = 1};
    DDP_CHECK(
        cv->maxpool_fwd(r->be, r->dt, r->pool, training ? r->pool_ws : NULL, stem->a, &ps, NULL));
    cur = r->pool;
  }
  for (int bi = 0; bi < r->n_blocks; ++bi) {
    resnet_block_t *b = &r->blocks[bi];
    /* the shortcut first: the last unit's BN adds it and applies the
     * block's ReLU as it writes the block's output */
    const size_t n = (size_t)N * (size_t)b->out_elems;
    const void *shortcut = cur;
    if (b->downsample >= 0) {
      resnet_unit_t *d = &r->units[b->downsample];
      DDP_CHECK(unit_forward(m, r, d, cur, r->grad[3], N, training, NULL)); /* free in forward */
      shortcut = r->grad[3];
    }
    const void *x = cur;
    for (int k = 0; k < b->n_main; ++k) {
      resnet_unit_t *u = &r->units[b->first_unit + k];
      const int last = k == b->n_main - 1;
      DDP_CHECK(unit_forward(m, r, u, x, last ? b->out : u->a, N, training,
                             last ? shortcut : NULL));
      x = u->a;
    }
    if (m->watch_fn) {
      char what[64];
      snprintf(what, sizeof what, "forward: %s output", b->name);
      DDP_CHECK(ddp_model_watch(m, what, b->out, r->dt, n));
    }
    cur = b->out;
  }
  const resnet_block_t *last = &r->blocks[r->n_blocks - 1];
  DDP_CHECK(
      cv->avgpool_fwd(r->be, r->dt, r->pooled, cur, N, last->OH * last->OW, r->features, NULL));
  const size_t n_logits = (size_t)N * (size_t)c->classes;
  DDP_CHECK(r->be->ops->nn->linear_fwd(r->be, r->dt, r->logits_dt, r->pooled,
                                       resnet_weight(m, r->fc_t), resnet_weight(m, r->fc_t + 1), N,
                                       r->features, c->classes, NULL));
  if (r->dt != DDP_DTYPE_F32) /* the loss reads fp32 logits */
    DDP_CHECK(
        r->be->ops->convert(r->be, r->logits, DDP_DTYPE_F32, r->logits_dt, r->dt, n_logits, NULL));
  DDP_CHECK(ddp_model_watch(m, "forward: logits", r->logits, DDP_DTYPE_F32, n_logits));
  if (training) /* every BN has seen one more batch: all counters in one add */
    DDP_CHECK(r->be->ops->nn->add(r->be, DDP_DTYPE_F32, m->buffers + r->counters_offset,
                                  m->buffers + r->counters_offset, r->ones, (size_t)r->n_units,
                                  NULL));
  r->last_n = N;
  return loss(r, N, training, dloss);
}
