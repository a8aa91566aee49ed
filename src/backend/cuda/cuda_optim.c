/* The optimizer on the CUDA backend: plan tables, the per-step launch
 * (kernels/optim.cu) and the backend's optimizer table, whose gradient
 * epilogue entries are in cuda_grad_epilogue.c. src/optim/optim.c has checked
 * every argument before an entry here runs. The per-step constants are
 * computed on the host in double exactly as the CPU twin computes them
 * (src/backend/cpu/cpu_optim.c); everything that depends on the gradients
 * (clipping, the loss scaler's skip) is decided on the device from the
 * squared norm there, so a step enqueues its kernels and returns without
 * waiting. */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "ddptrain/check.h"
#include "backend/cuda/cuda_grad_epilogue.h"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_optim.h"
#include "optim.h"

typedef struct ddp_cuda_optim_plan {
  ddp_cuda_optim_chunk_t *chunks;   /* device */
  int32_t *seg_decay;               /* device, n_segs */
  int32_t *seg_chunk_begin;         /* device, n_segs + 1 */
  double *lamb_partials;            /* device, 2 per chunk */
  float *lamb_ratio;                /* device, n_segs */
  int64_t *skipped;                 /* device: steps skipped on a non-finite norm */
  int32_t *lamb_begin, *lamb_index; /* device: LAMB's groups over a shard, or NULL */
  int n_chunks, n_segs;
} ddp_cuda_optim_plan_t;

static void cuda_plan_destroy(ddp_backend_t *be, void *impl);

static ddp_status_t upload(ddp_backend_t *be, void **dev, const void *host, size_t bytes) {
  DDP_CHECK(ddp_backend_alloc(be, bytes, dev));
  DDP_CHECK(ddp_backend_copy(be, *dev, host, bytes, DDP_COPY_KIND_HOST_TO_DEVICE, NULL));
  return ddp_backend_sync(be, NULL); /* the host tables are freed next */
}

static ddp_status_t cuda_plan_create(ddp_backend_t *be, const ddp_param_t *tensors, int n_tensors,
                                     size_t n, void **out) {
  *out = NULL;
  size_t n_chunks = 0;
  for (int k = 0; k < n_tensors; ++k)
    n_chunks += (tensors[k].count + DDP_CUDA_OPTIM_CHUNK - 1) / DDP_CUDA_OPTIM_CHUNK;
  if (n_chunks < 1 || n_chunks > INT32_MAX / 2)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim plan: %zu parameters make %zu chunks", n, n_chunks);
  ddp_cuda_optim_plan_t *p = calloc(1, sizeof *p);
  ddp_cuda_optim_chunk_t *chunks = malloc(n_chunks * sizeof *chunks);
  int32_t *decay = malloc((size_t)n_tensors * sizeof *decay);
  int32_t *begin = malloc(((size_t)n_tensors + 1) * sizeof *begin);
  ddp_status_t st = DDP_OK;
  if (!p || !chunks || !decay || !begin)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, out_host, "optim plan: out of host memory");
  size_t c = 0;
  for (int k = 0; k < n_tensors; ++k) {
    decay[k] = tensors[k].decay != 0;
    begin[k] = (int32_t)c;
    for (size_t off = 0; off < tensors[k].count; off += DDP_CUDA_OPTIM_CHUNK) {
      const size_t left = tensors[k].count - off;
      chunks[c++] = (ddp_cuda_optim_chunk_t){
          .start = (int64_t)(tensors[k].offset + off),
          .len = (int32_t)(left < DDP_CUDA_OPTIM_CHUNK ? left : DDP_CUDA_OPTIM_CHUNK),
          .seg = k};
    }
  }
  begin[n_tensors] = (int32_t)c;
  p->n_chunks = (int)n_chunks;
  p->n_segs = n_tensors;
  DDP_CHECK_GOTO(upload(be, (void **)&p->chunks, chunks, n_chunks * sizeof *chunks), st, fail);
  DDP_CHECK_GOTO(upload(be, (void **)&p->seg_decay, decay, (size_t)n_tensors * sizeof *decay), st,
                 fail);
  DDP_CHECK_GOTO(
      upload(be, (void **)&p->seg_chunk_begin, begin, ((size_t)n_tensors + 1) * sizeof *begin), st,
      fail);
  DDP_CHECK_GOTO(ddp_backend_alloc(be, 2 * n_chunks * sizeof(double), (void **)&p->lamb_partials),
                 st, fail);
  DDP_CHECK_GOTO(ddp_backend_alloc(be, (size_t)n_tensors * sizeof(float), (void **)&p->lamb_ratio),
                 st, fail);
  DDP_CHECK_GOTO(ddp_backend_alloc(be, sizeof(int64_t), (void **)&p->skipped), st, fail);
  DDP_CHECK_GOTO(be->ops->fill(be, p->skipped, DDP_DTYPE_I32, 0.0f, 2, NULL), st, fail);
  /* the zeroed counter must be visible to steps enqueued on any stream */
  DDP_CHECK_GOTO(ddp_backend_sync(be, NULL), st, fail);
  *out = p;
  p = NULL;
fail:
  if (p) cuda_plan_destroy(be, p);
  p = NULL;
out_host:
  free(p);
  free(chunks);
  free(decay);
  free(begin);
  return st;
}

static void cuda_plan_destroy(ddp_backend_t *be, void *impl) {
  ddp_cuda_optim_plan_t *p = impl;
  if (!p) return;
  ddp_backend_free(be, p->chunks);
  ddp_backend_free(be, p->seg_decay);
  ddp_backend_free(be, p->seg_chunk_begin);
  ddp_backend_free(be, p->lamb_partials);
  ddp_backend_free(be, p->lamb_ratio);
  ddp_backend_free(be, p->skipped);
  if (p->lamb_begin) ddp_backend_free(be, p->lamb_begin);
  if (p->lamb_index) ddp_backend_free(be, p->lamb_index);
  free(p);
}

static ddp_status_t cuda_grad_sumsq(ddp_backend_t *be, float *sumsq, const float *grads, size_t n,
                                    float scale, ddp_stream_t s) {
  return ddp_cuda_grad_sumsq(sumsq, grads, n, scale, ddp_cuda_stream(be, s));
}

/* The CPU twin's per-step constants (cpu_optim.c step_coef), in double. */
static ddp_cuda_optim_coef_t step_coef(const ddp_optim_step_args_t *a) {
  const ddp_optim_config_t *cfg = a->cfg;
  const double t = (double)a->t;
  const double bc1 = 1.0 - pow((double)cfg->beta1, t), bc2 = 1.0 - pow((double)cfg->beta2, t);
  ddp_cuda_optim_coef_t c = {.kind = (int)cfg->kind,
                             .lr = a->lr,
                             .b1 = cfg->beta1,
                             .omb1 = (float)(1.0 - (double)cfg->beta1),
                             .b2 = cfg->beta2,
                             .omb2 = (float)(1.0 - (double)cfg->beta2),
                             .eps = cfg->eps,
                             .bc1 = (float)bc1,
                             .bc2 = (float)bc2,
                             .step_size = (float)((double)a->lr / bc1),
                             .bc2_sqrt = (float)sqrt(bc2),
                             .wd = cfg->weight_decay,
                             .decay_mul = (float)(1.0 - (double)a->lr * (double)cfg->weight_decay),
                             .momentum = cfg->momentum,
                             .first = a->t == 1,
                             .nesterov = cfg->nesterov != 0,
                             .has_buf = ddp_optim_state_per_param(cfg) > 0,
                             .grad_scale = a->grad_scale,
                             .max_grad_norm = cfg->max_grad_norm,
                             .use_sumsq = a->grad_sumsq != NULL,
                             .skip_nonfinite = a->skip_nonfinite};
  return c;
}

static ddp_status_t cuda_step(ddp_backend_t *be, void *impl, const ddp_optim_step_args_t *a,
                              ddp_stream_t s) {
  const ddp_cuda_optim_plan_t *p = impl;
  const ddp_cuda_optim_coef_t c = step_coef(a);
  return ddp_cuda_optim_update(&c, a->params, a->grads, a->state, a->n, a->compute_params,
                               a->compute_dtype, a->grad_sumsq, p->chunks, p->n_chunks,
                               p->seg_decay, p->seg_chunk_begin, p->n_segs, p->lamb_partials,
                               p->lamb_ratio, p->skipped, ddp_cuda_stream(be, s));
}

static ddp_status_t cuda_skipped_steps(ddp_backend_t *be, void *impl, int64_t *count) {
  const ddp_cuda_optim_plan_t *p = impl;
  DDP_CHECK(
      ddp_backend_copy(be, count, p->skipped, sizeof *count, DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  return ddp_backend_sync(be, NULL);
}

/* ---- LAMB over a shard ---------------------------------------------------- */

static ddp_status_t cuda_lamb_groups(ddp_backend_t *be, void *impl,
                                     const ddp_optim_lamb_groups_t *g) {
  ddp_cuda_optim_plan_t *p = impl;
  const size_t nb = ((size_t)p->n_segs + 1) * sizeof(int32_t);
  const size_t ni = (size_t)g->begin[p->n_segs] * sizeof(int32_t);
  ddp_status_t st = upload(be, (void **)&p->lamb_begin, g->begin, nb);
  if (st == DDP_OK) st = upload(be, (void **)&p->lamb_index, g->index, ni);
  if (st != DDP_OK) {
    if (p->lamb_begin) ddp_backend_free(be, p->lamb_begin);
    if (p->lamb_index) ddp_backend_free(be, p->lamb_index);
    p->lamb_begin = p->lamb_index = NULL;
  }
  return st;
}

static ddp_status_t cuda_lamb_sums(ddp_backend_t *be, void *impl, const ddp_optim_step_args_t *a,
                                   double *sums, ddp_stream_t s) {
  const ddp_cuda_optim_plan_t *p = impl;
  const ddp_cuda_optim_coef_t c = step_coef(a);
  return ddp_cuda_optim_lamb_sums(&c, a->params, a->grads, a->state, a->n, a->grad_sumsq, p->chunks,
                                  p->n_chunks, p->seg_decay, p->seg_chunk_begin, p->n_segs,
                                  p->lamb_partials, sums, ddp_cuda_stream(be, s));
}

static ddp_status_t cuda_lamb_ratios(ddp_backend_t *be, void *impl, float lr,
                                     const double *all_sums, float *ratio, ddp_stream_t s) {
  const ddp_cuda_optim_plan_t *p = impl;
  return ddp_cuda_optim_lamb_ratios(lr, all_sums, p->lamb_begin, p->lamb_index, p->n_segs, ratio,
                                    ddp_cuda_stream(be, s));
}

static ddp_status_t cuda_lamb_apply(ddp_backend_t *be, void *impl, const ddp_optim_step_args_t *a,
                                    const float *ratio, ddp_stream_t s) {
  const ddp_cuda_optim_plan_t *p = impl;
  const ddp_cuda_optim_coef_t c = step_coef(a);
  return ddp_cuda_optim_lamb_apply(&c, a->params, a->state, a->n, a->compute_params,
                                   a->compute_dtype, a->grad_sumsq, p->chunks, p->n_chunks,
                                   p->seg_decay, ratio, p->skipped, ddp_cuda_stream(be, s));
}

const ddp_optim_ops_t ddp_optim_cuda_ops = {
    .plan_create = cuda_plan_create,
    .plan_destroy = cuda_plan_destroy,
    .step = cuda_step,
    .skipped_steps = cuda_skipped_steps,
    .grad_sumsq = cuda_grad_sumsq,
    .grad_epilogue = ddp_cuda_optim_grad_epilogue,
    .sum_partials = ddp_cuda_optim_sum_partials,
    .lamb_groups = cuda_lamb_groups,
    .lamb_sums = cuda_lamb_sums,
    .lamb_ratios = cuda_lamb_ratios,
    .lamb_apply = cuda_lamb_apply,
};
