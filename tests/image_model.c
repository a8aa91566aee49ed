/* A test program: ddptrain with two tiny linear classifiers registered
 * beside the built-in models, as a user's program would register its own
 * (ddptrain/main.h):
 *   imglin  an image model (image_data = 1): softmax regression on the
 *           (H,W,C) pixels the loader augmented and normalised;
 *   reclin  the same on record files (a record model without image_data),
 *           to check that each refuses the other's data.
 * tests/test_images.sh trains them. Plain fp32 on the CPU, so runs can be
 * compared bit for bit. */
#include <ddptrain/ddptrain.h>
#include <ddptrain/main.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct linear {
  int D, K;
  float *z;        /* logits, then their gradient, for the largest micro-batch */
  double loss_sum; /* host memory on the CPU */
  ddp_param_t table[2];
} linear_t;

static ddp_status_t create(ddp_model_t *m, const ddp_model_setup_t *s) {
  linear_t *p = calloc(1, sizeof *p);
  if (!p) return DDP_ERR_OOM;
  m->impl = p;
  p->D = (int)s->data.record_floats;
  p->K = s->data.n_classes;
  const int64_t w_shape[2] = {p->K, p->D}, b_shape[1] = {p->K};
  DDP_CHECK(ddp_param_set(&p->table[0], "fc.weight", 2, w_shape, 0, 1));
  DDP_CHECK(ddp_param_set(&p->table[1], "fc.bias", 1, b_shape, p->table[0].count, 0));
  const size_t n = p->table[0].count + p->table[1].count;
  DDP_CHECK(ddp_backend_alloc(m->be, n * sizeof(float), (void **)&m->params));
  DDP_CHECK(ddp_backend_alloc(m->be, n * sizeof(float), (void **)&m->grads));
  DDP_CHECK(ddp_backend_alloc(m->be, (size_t)s->max_batch * (size_t)p->K * sizeof(float),
                              (void **)&p->z));
  m->tensors = p->table, m->n_tensors = 2, m->n_params = n, m->n_outputs = p->K;
  return DDP_OK;
}

static void destroy(ddp_model_t *m) {
  linear_t *p = m->impl;
  if (!p) return;
  ddp_backend_free(m->be, m->params);
  ddp_backend_free(m->be, m->grads);
  ddp_backend_free(m->be, p->z);
  free(p);
}

static ddp_status_t init_weights(ddp_model_t *m, uint64_t seed) {
  ddp_rng_t rng;
  ddp_rng_init(&rng, seed, 5);
  ddp_rng_fill_normal(&rng, 0, 0.0f, 0.01f, m->params, m->n_params);
  return DDP_OK;
}

/* z = W x + b; the summed cross-entropy; with grad, z becomes dloss *
 * (softmax(z) - onehot(y)). */
static double forward(ddp_model_t *m, const ddp_record_batch_t *b, float dloss, int grad) {
  linear_t *p = m->impl;
  const float *W = m->params, *bias = m->params + p->table[1].offset;
  double loss = 0.0;
  for (int r = 0; r < b->B; ++r) {
    const float *x = b->inputs + (size_t)r * p->D;
    float *z = p->z + (size_t)r * p->K, top = -INFINITY;
    for (int k = 0; k < p->K; ++k) {
      float a = bias[k];
      for (int d = 0; d < p->D; ++d) a += W[(size_t)k * p->D + d] * x[d];
      z[k] = a;
      top = a > top ? a : top;
    }
    double sum = 0.0;
    for (int k = 0; k < p->K; ++k) sum += exp((double)(z[k] - top));
    loss += log(sum) - (double)(z[b->labels[r]] - top);
    for (int k = 0; grad && k < p->K; ++k)
      z[k] = dloss * (float)(exp((double)(z[k] - top)) / sum - (k == b->labels[r]));
  }
  return loss;
}

static ddp_status_t forward_backward(ddp_model_t *m, const void *batch, float dloss, int acc,
                                     int notify) {
  linear_t *p = m->impl;
  const ddp_record_batch_t *b = batch;
  p->loss_sum += forward(m, b, dloss, 1);
  float *gW = m->grads, *gb = m->grads + p->table[1].offset;
  for (int k = 0; k < p->K; ++k) {
    float sb = 0.0f;
    for (int r = 0; r < b->B; ++r) sb += p->z[r * p->K + k];
    gb[k] = acc ? gb[k] + sb : sb;
    for (int d = 0; d < p->D; ++d) {
      float s = 0.0f;
      for (int r = 0; r < b->B; ++r) s += p->z[r * p->K + k] * b->inputs[(size_t)r * p->D + d];
      float *g = &gW[(size_t)k * p->D + d];
      *g = acc ? *g + s : s;
    }
  }
  if (notify) {
    ddp_model_grad_ready(m, 0);
    ddp_model_grad_ready(m, 1);
  }
  return DDP_OK;
}

static ddp_status_t eval_forward(ddp_model_t *m, const void *batch) {
  ((linear_t *)m->impl)->loss_sum += forward(m, batch, 0.0f, 0);
  return DDP_OK;
}

static ddp_status_t take_loss(ddp_model_t *m, double *loss_sum) {
  linear_t *p = m->impl;
  *loss_sum = p->loss_sum;
  p->loss_sum = 0.0;
  return DDP_OK;
}

static ddp_status_t copy_outputs(ddp_model_t *m, float *host, int64_t rows) {
  linear_t *p = m->impl;
  memcpy(host, p->z, (size_t)rows * (size_t)p->K * sizeof *host);
  return DDP_OK;
}

#define LINEAR_OPS                                                                                 \
  .batch_kind = DDP_BATCH_RECORDS, .devices = DDP_MODEL_ON(DDP_DEVICE_KIND_CPU), .create = create, \
  .destroy = destroy, .init_weights = init_weights, .forward_backward = forward_backward,          \
  .eval_forward = eval_forward, .take_loss = take_loss, .copy_outputs = copy_outputs

static const ddp_model_ops_t k_imglin = {.name = "imglin",
                                         .summary = "test: softmax regression on image pixels",
                                         .image_data = 1,
                                         LINEAR_OPS};
static const ddp_model_ops_t k_reclin = {
    .name = "reclin", .summary = "test: softmax regression on record files", LINEAR_OPS};

int main(int argc, char **argv) {
  if (ddp_model_register(&k_imglin) != DDP_OK || ddp_model_register(&k_reclin) != DDP_OK) return 1;
  const ddp_main_config_t cfg = {.program = "image_model", .default_model = "imglin"};
  return ddp_main(argc, argv, &cfg);
}
