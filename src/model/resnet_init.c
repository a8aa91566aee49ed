/* The ResNet's initial weights, as torchvision initialises its ResNets, a
 * pure function of the seed: convolutions kaiming-normal (fan_out, ReLU
 * gain: std sqrt(2 / (K R S))), BatchNorm gamma 1 and beta 0 (gamma 0 for
 * each block's last BN under --zero-init-residual 1, so every block starts
 * as the identity), the classifier as nn.Linear's default (uniform within
 * 1/sqrt(fan_in), weight and bias). Buffers start as PyTorch's: running
 * mean 0, running variance 1, no batches counted. */
#include <math.h>
#include <stdlib.h>

#include "ddptrain/check.h"
#include "ddptrain/rng.h"
#include "model/resnet.h"

/* Each tensor draws from its own stream, derived from the seed and its
 * table index, so one tensor's size never shifts another's values. */
static void fill_tensor(const ddp_rng_t *root, int index, const ddp_param_t *t, float *host,
                        int normal, float scale) {
  ddp_rng_t rng;
  ddp_rng_derive(root, (uint64_t)index, &rng);
  float *x = host + t->offset;
  if (normal) {
    ddp_rng_fill_normal(&rng, 0, 0.0f, scale, x, t->count);
    return;
  }
  ddp_rng_fill_uniform(&rng, 0, x, t->count);
  for (size_t i = 0; i < t->count; ++i) x[i] = (2.0f * x[i] - 1.0f) * scale;
}

ddp_status_t resnet_init_weights(ddp_model_t *m, uint64_t seed) {
  resnet_t *r = m->impl;
  float *host = malloc(m->n_params * sizeof *host);
  float *buf = malloc(r->n_buffer_floats * sizeof *buf);
  ddp_status_t st = DDP_OK;
  if (!host || !buf) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "resnet: out of host memory");
  ddp_rng_t root;
  ddp_rng_init(&root, seed, 0x7265736e6574ull /* "resnet" */);
  const float fc_bound = 1.0f / sqrtf((float)r->features);
  fill_tensor(&root, r->fc_t, &m->tensors[r->fc_t], host, 0, fc_bound);
  fill_tensor(&root, r->fc_t + 1, &m->tensors[r->fc_t + 1], host, 0, fc_bound);
  for (int i = 0; i < r->n_units; ++i) {
    const resnet_unit_t *u = &r->units[i];
    const ddp_param_t *gamma = &m->tensors[u->t], *beta = &m->tensors[u->t + 1];
    const resnet_block_t *owner = NULL;
    for (int b = 0; b < r->n_blocks && !owner; ++b)
      if (i == r->blocks[b].first_unit + r->blocks[b].n_main - 1) owner = &r->blocks[b];
    const float g0 = owner && r->cfg.zero_init_residual ? 0.0f : 1.0f;
    for (size_t k = 0; k < gamma->count; ++k) host[gamma->offset + k] = g0;
    for (size_t k = 0; k < beta->count; ++k) host[beta->offset + k] = 0.0f;
    const float fan_out = (float)(u->K * u->conv.R * u->conv.S);
    fill_tensor(&root, u->t + 2, &m->tensors[u->t + 2], host, 1, sqrtf(2.0f / fan_out));
  }
  for (int i = 0; i < r->n_buffers; ++i) {
    const ddp_param_t *t = &r->buffers[i].t;
    const float v = r->buffers[i].kind == DDP_BUFFER_MEAN && (i % 2) == 1 ? 1.0f : 0.0f;
    for (size_t k = 0; k < t->count; ++k) buf[t->offset + k] = v;
  }
  DDP_CHECK_GOTO(ddp_model_params_from_host(m, host), st, out);
  DDP_CHECK_GOTO(ddp_backend_copy(m->be, m->buffers, buf, r->n_buffer_floats * sizeof *buf,
                                  DDP_COPY_KIND_HOST_TO_DEVICE, NULL),
                 st, out);
  st = ddp_backend_sync(m->be, NULL);
out:
  free(buf);
  free(host);
  return st;
}
