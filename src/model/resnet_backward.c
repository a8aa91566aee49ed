/* The ResNet's backward, from the loss's dlogits (left in place by the
 * forward) to the stem. Each tensor is announced (ddp_model_grad_ready) as
 * soon as its gradient is final, which is the parameter table's order: fc,
 * then each block from the last (its main path from the last unit, then its
 * projection), the stem last. Activation gradients live in four scratch
 * buffers whose roles rotate from block to block: the gradient arriving at
 * the block's output (X), the BN's input gradient (P), the conv's input
 * gradient (Q), and the gradient leaving the block (R, where a projection
 * shortcut's gradient is added; an identity block's first conv adds its
 * input gradient into X, which then leaves the block). */
#include "ddptrain/check.h"
#include "ddptrain/nn.h"
#include "model/resnet.h"

static void ready(ddp_model_t *m, int t, int notify) {
  if (notify) ddp_model_grad_ready(m, t);
}

/* BatchNorm's backward for unit u: dc (the conv output's gradient) from
 * dout, and its parameter gradients. relu_out (may be NULL): dout is the
 * gradient of the ReLU after the BN, whose output that is (u->a; or the
 * block's output, residual 1, where the ReLU followed the residual add),
 * and the ReLU's backward comes first, fused where the table has
 * bn_relu_bwd. dout is scratch (masked in place); with a residual it
 * holds the masked gradient afterwards, which the shortcut takes. */
static ddp_status_t bn_backward(ddp_model_t *m, resnet_t *r, const resnet_unit_t *u, void *dc,
                                void *dout, int N, int acc, const void *relu_out, int residual) {
  const ddp_conv_ops_t *cv = r->be->ops->conv;
  const ddp_bn_shape_t sh = resnet_bn_shape(r, u, N);
  const float *gamma = m->params + m->tensors[u->t].offset;
  const float *beta = m->params + m->tensors[u->t + 1].offset;
  float *dgamma = m->grads + m->tensors[u->t].offset;
  float *dbeta = m->grads + m->tensors[u->t + 1].offset;
  const int K = u->K;
  if (relu_out && !r->cfg.sync_bn && cv->bn_relu_bwd)
    return cv->bn_relu_bwd(r->be, r->dt, dc, dgamma, dbeta, dout, u->c, relu_out, gamma, beta,
                           u->stats, u->stats + K, residual, &sh, acc, NULL);
  if (relu_out)
    DDP_CHECK(
        cv->relu_bwd(r->be, r->dt, dout, dout, relu_out, (size_t)N * (size_t)u->out_elems, NULL));
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

/* Where a unit's input gradient goes: written into din, or added to what
 * din holds (a block's first conv meeting its shortcut's gradient), in
 * one pass where the table has conv_bwd_data_add, else through `scratch`
 * and an add. din NULL: not wanted (the stem's image). */
typedef struct input_grad {
  void *din;
  int add;
  void *scratch;
} input_grad_t;

/* BN (with the ReLU whose output is relu_out first, bn_backward's) and
 * conv backward of unit u: parameter gradients, and the gradient of the
 * unit's input into `to`. dc is scratch for the conv output's gradient;
 * dout is scratch too. */
static ddp_status_t unit_backward(ddp_model_t *m, resnet_t *r, const resnet_unit_t *u, void *dout,
                                  void *dc, const void *in, input_grad_t to, int N, int acc,
                                  const void *relu_out, int residual, int notify) {
  const ddp_conv_ops_t *cv = r->be->ops->conv;
  ddp_conv_shape_t sh = u->conv;
  sh.N = N;
  DDP_CHECK(bn_backward(m, r, u, dc, dout, N, acc, relu_out, residual));
  ready(m, u->t, notify);
  ready(m, u->t + 1, notify);
  DDP_CHECK(cv->conv_bwd_weights(r->be, r->dt, m->grads + m->tensors[u->t + 2].offset, dc, in, &sh,
                                 acc, NULL));
  ready(m, u->t + 2, notify);
  const void *w = resnet_weight(m, u->t + 2);
  if (!to.din) return DDP_OK;
  if (!to.add) return cv->conv_bwd_data(r->be, r->dt, to.din, dc, w, &sh, NULL);
  if (cv->conv_bwd_data_add) return cv->conv_bwd_data_add(r->be, r->dt, to.din, dc, w, &sh, NULL);
  DDP_CHECK(cv->conv_bwd_data(r->be, r->dt, to.scratch, dc, w, &sh, NULL));
  return r->be->ops->nn->add(r->be, r->dt, to.din, to.din, to.scratch,
                             (size_t)N * (size_t)sh.H * (size_t)sh.W * (size_t)sh.C, NULL);
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
    const int ds = b->downsample >= 0;
    /* The main path from its last unit, whose BN's backward masks X by the
     * block's output ReLU in place: that gradient feeds the shortcut too.
     * Each unit's input gradient goes to Q, where the unit before it takes
     * it as the gradient of its ReLU output; the first unit's meets the
     * shortcut's, which for an identity shortcut is X itself (added to it)
     * and for a projection is written to R, the projection's own added
     * after. */
    void *d = g[X];
    for (int k = b->n_main - 1; k >= 0; --k) {
      const resnet_unit_t *u = &r->units[b->first_unit + k];
      const int last = k == b->n_main - 1;
      const input_grad_t to = k > 0 ? (input_grad_t){g[Q], 0, NULL}
                              : ds  ? (input_grad_t){g[R], 0, NULL}
                                    : (input_grad_t){g[X], 1, g[R]};
      DDP_CHECK(unit_backward(m, r, u, d, g[P], k > 0 ? (u - 1)->a : input, to, N, acc,
                              last ? b->out : u->a, last, notify));
      d = g[Q];
    }
    if (ds) {
      DDP_CHECK(unit_backward(m, r, &r->units[b->downsample], g[X], g[P], input,
                              (input_grad_t){g[R], 1, g[Q]}, N, acc, NULL, 0, notify));
      const int old_x = X;
      X = R, R = old_x; /* the gradient leaving this block arrives at the one before */
    }
  }
  const resnet_unit_t *stem = &r->units[0];
  void *d = g[X];
  if (r->cfg.imagenet_stem) {
    const ddp_pool_shape_t ps = {
        .N = N, .H = stem->OH, .W = stem->OW, .C = stem->K, .kernel = 3, .stride = 2, .pad = 1};
    DDP_CHECK(cv->maxpool_bwd(r->be, r->dt, g[P], g[X], r->pool_ws, &ps, NULL));
    d = g[P];
  }
  return unit_backward(m, r, stem, d, g[Q], r->x_in, (input_grad_t){NULL, 0, NULL}, N, acc, stem->a,
                       0, notify);
}
