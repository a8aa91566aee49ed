/* The ResNet's backward, from the loss's dlogits (left in place by the
 * forward) to the stem. Each tensor is announced (ddp_model_grad_ready) as
 * soon as its gradient is final, which is the parameter table's order: fc,
 * then each block from the last (its main path from the last unit, then its
 * projection), the stem last. Activation gradients live in four scratch
 * buffers whose roles rotate from block to block: the gradient arriving at
 * the block's output (X), the BN's input gradient (P), the conv's input
 * gradient (Q), and the gradient leaving the block (R). */
#include "ddptrain/check.h"
#include "ddptrain/nn.h"
#include "model/resnet.h"

static void ready(ddp_model_t *m, int t, int notify) {
  if (notify) ddp_model_grad_ready(m, t);
}

/* BatchNorm's backward for unit u: dc (the conv output's gradient) from
 * dout, and its parameter gradients. */
static ddp_status_t bn_backward(ddp_model_t *m, resnet_t *r, const resnet_unit_t *u, void *dc,
                                const void *dout, int N, int acc) {
  const ddp_conv_ops_t *cv = r->be->ops->conv;
  const ddp_bn_shape_t sh = resnet_bn_shape(r, u, N);
  const float *gamma = m->params + m->tensors[u->t].offset;
  float *dgamma = m->grads + m->tensors[u->t].offset;
  float *dbeta = m->grads + m->tensors[u->t + 1].offset;
  const int K = u->K;
  if (!r->cfg.sync_bn)
    return cv->bn_bwd(r->be, r->dt, dc, dgamma, dbeta, dout, u->c, gamma, u->stats, u->stats + K,
                      &sh, acc, NULL);
  /* the input gradient needs the sums of all ranks; dgamma and dbeta take
   * this rank's own, and the reducer adds them as any parameter's */
  float *mean = u->stats, *var = u->stats + K, *local = u->stats + 2 * K, *all = u->stats + 4 * K;
  DDP_CHECK(cv->bn_reduce_bwd(r->be, r->dt, local, dout, u->c, mean, &sh, NULL));
  DDP_CHECK(ddp_backend_copy(r->be, all, local, 2 * (size_t)K * sizeof(float),
                             DDP_COPY_KIND_DEVICE_TO_DEVICE, NULL));
  DDP_CHECK(ddp_model_allreduce(m, all, 2 * (size_t)K));
  return cv->bn_apply_bwd(r->be, r->dt, dc, dgamma, dbeta, dout, u->c, mean, var, gamma, all, local,
                          resnet_bn_positions(r, u, N), &sh, acc, NULL);
}

/* BN and conv backward of unit u: parameter gradients, and the gradient of
 * the unit's input into din (NULL: not wanted, the stem's image). dc is
 * scratch for the conv output's gradient. */
static ddp_status_t unit_backward(ddp_model_t *m, resnet_t *r, const resnet_unit_t *u,
                                  const void *dout, void *dc, const void *in, void *din, int N,
                                  int acc, int notify) {
  const ddp_conv_ops_t *cv = r->be->ops->conv;
  ddp_conv_shape_t sh = u->conv;
  sh.N = N;
  DDP_CHECK(bn_backward(m, r, u, dc, dout, N, acc));
  ready(m, u->t, notify);
  ready(m, u->t + 1, notify);
  DDP_CHECK(cv->conv_bwd_weights(r->be, r->dt, m->grads + m->tensors[u->t + 2].offset, dc, in, &sh,
                                 acc, NULL));
  ready(m, u->t + 2, notify);
  if (din)
    DDP_CHECK(cv->conv_bwd_data(r->be, r->dt, din, dc, resnet_weight(m, u->t + 2), &sh, NULL));
  return DDP_OK;
}

/* What the stem hands to the first block (the max-pool's output, or the
 * stem's ReLU output). */
static const void *stem_output(const resnet_t *r) {
  return r->cfg.imagenet_stem ? r->pool : r->units[0].a;
}

ddp_status_t resnet_backward(ddp_model_t *m, int N, int acc, int notify) {
  resnet_t *r = m->impl;
  const ddp_conv_ops_t *cv = r->be->ops->conv;
  const ddp_nn_ops_t *nn = r->be->ops->nn;
  void **g = r->grad;
  /* classifier: r->logits holds dlogits in fp32, which a half run rounds
   * once to dt, the type the linear's backward reads */
  if (r->dt != DDP_DTYPE_F32)
    DDP_CHECK(r->be->ops->convert(r->be, r->logits_dt, r->dt, r->logits, DDP_DTYPE_F32,
                                  (size_t)N * (size_t)r->cfg.classes, NULL));
  DDP_CHECK(nn->linear_bwd(r->be, r->dt, g[0], m->grads + m->tensors[r->fc_t].offset,
                           m->grads + m->tensors[r->fc_t + 1].offset, r->logits_dt, r->pooled,
                           resnet_weight(m, r->fc_t), N, r->features, r->cfg.classes, acc, 0,
                           NULL));
  ready(m, r->fc_t, notify);
  ready(m, r->fc_t + 1, notify);
  const resnet_block_t *lastb = &r->blocks[r->n_blocks - 1];
  DDP_CHECK(cv->avgpool_bwd(r->be, r->dt, g[1], g[0], N, lastb->OH * lastb->OW, r->features, NULL));
  int X = 1, P = 0, Q = 2, R = 3;
  for (int bi = r->n_blocks - 1; bi >= 0; --bi) {
    const resnet_block_t *b = &r->blocks[bi];
    const void *input = bi > 0 ? r->blocks[bi - 1].out : stem_output(r);
    const size_t n_out = (size_t)N * (size_t)b->out_elems;
    DDP_CHECK(cv->relu_bwd(r->be, r->dt, g[X], g[X], b->out, n_out, NULL));
    const void *d = g[X];
    for (int k = b->n_main - 1; k >= 0; --k) {
      const resnet_unit_t *u = &r->units[b->first_unit + k];
      const resnet_unit_t *prev = k > 0 ? u - 1 : NULL;
      void *din = k > 0 ? g[Q] : g[R];
      DDP_CHECK(unit_backward(m, r, u, d, g[P], prev ? prev->a : input, din, N, acc, notify));
      if (prev) {
        DDP_CHECK(cv->relu_bwd(r->be, r->dt, g[Q], g[Q], prev->a,
                               (size_t)N * (size_t)prev->out_elems, NULL));
        d = g[Q];
      }
    }
    const size_t n_in = (size_t)N * (size_t)r->units[b->first_unit].conv.H *
                        (size_t)r->units[b->first_unit].conv.W *
                        (size_t)r->units[b->first_unit].conv.C;
    if (b->downsample >= 0) {
      DDP_CHECK(
          unit_backward(m, r, &r->units[b->downsample], g[X], g[P], input, g[Q], N, acc, notify));
      DDP_CHECK(nn->add(r->be, r->dt, g[R], g[R], g[Q], n_in, NULL));
    } else {
      DDP_CHECK(nn->add(r->be, r->dt, g[R], g[R], g[X], n_in, NULL));
    }
    const int old_x = X;
    X = R, R = old_x; /* the gradient leaving this block arrives at the one before */
  }
  const resnet_unit_t *stem = &r->units[0];
  const size_t n_stem = (size_t)N * (size_t)stem->out_elems;
  const void *d = g[X];
  if (r->cfg.imagenet_stem) {
    const ddp_pool_shape_t ps = {
        .N = N, .H = stem->OH, .W = stem->OW, .C = stem->K, .kernel = 3, .stride = 2, .pad = 1};
    DDP_CHECK(cv->maxpool_bwd(r->be, r->dt, g[P], g[X], r->pool_ws, &ps, NULL));
    d = g[P];
  }
  DDP_CHECK(cv->relu_bwd(r->be, r->dt, (void *)d, d, stem->a, n_stem, NULL));
  return unit_backward(m, r, stem, d, g[Q], r->x_in, NULL, N, acc, notify);
}
