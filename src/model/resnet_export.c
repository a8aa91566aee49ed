/* ResNet weights to safetensors under torchvision's state_dict names: every
 * parameter (convolution weights transposed from the (K,R,S,C) they are
 * kept in to PyTorch's (K,C,R,S)) and every buffer: running_mean and
 * running_var fp32, num_batches_tracked a 0-dimensional int64, as PyTorch
 * keeps it. The metadata names the architecture, so a reader can rebuild
 * the module (torchvision.models.resnet18(num_classes=...) for --depth 18,
 * --width 64 and the imagenet stem). */
#include <stdio.h>
#include <stdlib.h>

#include "ddptrain/check.h"
#include "ddptrain/safetensors.h"
#include "ddptrain/version.h"
#include "model/resnet.h"

ddp_status_t resnet_export(ddp_model_t *m, const char *path) {
  resnet_t *r = m->impl;
  const int nt = m->n_tensors + r->n_buffers;
  ddp_status_t st = DDP_OK;
  float *host = malloc(m->n_params * sizeof *host);
  float *conv = malloc(m->n_params * sizeof *conv);
  float *buf = malloc(r->n_buffer_floats * sizeof *buf);
  int64_t *counts = malloc((size_t)r->n_units * sizeof *counts);
  ddp_st_tensor_t *t = calloc((size_t)nt, sizeof *t);
  if (!host || !conv || !buf || !counts || !t)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "resnet: export: out of host memory");
  DDP_CHECK_GOTO(ddp_model_params_to_host(m, host), st, out);
  DDP_CHECK_GOTO(ddp_backend_copy(m->be, buf, m->buffers, r->n_buffer_floats * sizeof *buf,
                                  DDP_COPY_KIND_DEVICE_TO_HOST, NULL),
                 st, out);
  DDP_CHECK_GOTO(ddp_backend_sync(m->be, NULL), st, out);
  for (int i = 0; i < m->n_tensors; ++i) {
    const ddp_param_t *p = &m->tensors[i];
    t[i] = (ddp_st_tensor_t){
        .name = p->name, .dtype = DDP_DTYPE_F32, .ndim = p->ndim, .data = host + p->offset};
    for (int d = 0; d < p->ndim; ++d) t[i].shape[d] = p->shape[d];
    if (p->ndim != 4) continue;
    const int64_t K = p->shape[0], R = p->shape[1], S = p->shape[2], C = p->shape[3];
    float *dst = conv + p->offset;
    const float *src = host + p->offset;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t y = 0; y < R; ++y)
        for (int64_t x = 0; x < S; ++x)
          for (int64_t c = 0; c < C; ++c)
            dst[((k * C + c) * R + y) * S + x] = src[((k * R + y) * S + x) * C + c];
    t[i].data = dst;
    t[i].shape[1] = C, t[i].shape[2] = R, t[i].shape[3] = S;
  }
  for (int i = 0; i < r->n_buffers; ++i) {
    const ddp_buffer_t *b = &r->buffers[i];
    ddp_st_tensor_t *e = &t[m->n_tensors + i];
    if (b->kind == DDP_BUFFER_COUNT) {
      const int j = (int)(b->t.offset - r->counters_offset);
      counts[j] = (int64_t)buf[b->t.offset];
      *e = (ddp_st_tensor_t){
          .name = b->t.name, .dtype = DDP_ST_DTYPE_I64, .ndim = 0, .data = &counts[j]};
      continue;
    }
    *e = (ddp_st_tensor_t){
        .name = b->t.name, .dtype = DDP_DTYPE_F32, .ndim = 1, .data = buf + b->t.offset};
    e->shape[0] = b->t.shape[0];
  }
  char depth[16], width[16], classes[16];
  snprintf(depth, sizeof depth, "%d", r->cfg.depth);
  snprintf(width, sizeof width, "%d", r->cfg.width);
  snprintf(classes, sizeof classes, "%d", r->cfg.classes);
  const char *meta[] = {"format",
                        "pt",
                        "producer",
                        "ddptrain",
                        "ddptrain_version",
                        ddp_version(),
                        "model",
                        "resnet",
                        "depth",
                        depth,
                        "width",
                        width,
                        "stem",
                        r->cfg.imagenet_stem ? "imagenet" : "cifar",
                        "num_classes",
                        classes,
                        NULL};
  st = ddp_safetensors_write(path, t, nt, meta);
out:
  free(t);
  free(counts);
  free(buf);
  free(conv);
  free(host);
  return st;
}
