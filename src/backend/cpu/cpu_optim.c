/* The optimizers (AdamW, SGD, LAMB) and the global gradient norm on the
 * CPU backend: the public CPU twins ddp_optim_step_cpu and
 * ddp_optim_grad_sumsq_cpu (see optim/optim.h), the CPU plan, LAMB's three
 * parts over a shard (--zero 1), and the CPU backend's optimizer table
 * (backend/optim_ops.h), whose entries do the same work once
 * src/optim/optim.c has checked the arguments.
 *
 * These are the twins of the fused CUDA kernels (kernels/optim.cu), which
 * implement the same contract and are tested against these functions. The
 * CPU backend's "device" memory is host memory, so the step dereferences
 * its buffers directly instead of going through copy(); the public twins
 * refuse any other backend. Work runs at once on the calling thread, in a
 * fixed order, so results are bit-identical from run to run.
 *
 * State layout (the CUDA kernel uses the same, so state is portable between
 * backends and checkpoints): AdamW/LAMB keep m in state[0, n) and v in
 * state[n, 2n); SGD keeps its momentum buffer in state[0, n).
 *
 * Loop shape. Every element is read and written once per step (LAMB: twice,
 * norms then update), in blocks of BLOCK elements that stay in L1 between the
 * loops of a block. gcc's -O2 vectoriser ("very cheap" cost model) only takes
 * loops whose trip count is a multiple of the vector width, hence the
 * fixed-length inner loops and a scalar tail per segment (one tensor of the
 * table). sqrtf is kept in a loop of its own: under the default -fmath-errno
 * it is a call with a branch that stops vectorisation of any loop containing
 * it, so isolating it keeps everything else vectorised (with -fno-math-errno
 * it vectorises too). Per-element branches are avoided: weight decay is a
 * per-segment factor (1 or 0 where it does not apply), and per-step choices
 * (first SGD step, Nesterov) are loop-invariant selects. */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "backend/cpu/cpu_optim.h"
#include "optim/optim.h"

#define BLOCK DDP_CPU_OPTIM_BLOCK
#define LANES DDP_CPU_OPTIM_LANES

ddp_status_t ddp_cpu_optim_require_host(const ddp_backend_t *be, const char *what) {
  if (!be || !be->ops) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: NULL backend", what);
  if (be->ops->kind != DDP_DEVICE_KIND_CPU)
    DDP_FAIL(DDP_ERR_UNSUPPORTED,
             "%s: the CPU implementation needs host memory; backend '%s' has its own", what,
             be->ops->name ? be->ops->name : "?");
  return DDP_OK;
}

/* ---- the global gradient norm ------------------------------------------ */

static ddp_status_t cpu_grad_sumsq(ddp_backend_t *be, float *sumsq, const float *grads, size_t n,
                                   float scale, ddp_stream_t s) {
  (void)be, (void)s; /* CPU: work runs at once */
  double acc[LANES] = {0};
  float t[BLOCK];
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK) {
    ddp_cpu_optim_scale_block(t, grads + i, scale, BLOCK);
    ddp_cpu_optim_sumsq_lanes(acc, t, BLOCK);
  }
  ddp_cpu_optim_scale_block(t, grads + i, scale, n - i);
  ddp_cpu_optim_sumsq_lanes(acc, t, n - i);
  *sumsq = (float)ddp_cpu_optim_lanes_total(acc);
  return DDP_OK;
}

ddp_status_t ddp_optim_grad_sumsq_cpu(ddp_backend_t *be, float *sumsq, const float *grads, size_t n,
                                      float scale, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_optim_require_host(be, "optim_grad_sumsq"));
  DDP_CHECK(ddp_optim_check_grad_sumsq(sumsq, grads, scale));
  return cpu_grad_sumsq(be, sumsq, grads, n, scale, s);
}

/* ---- per-step constants ------------------------------------------------ */

typedef struct step_coef {
  float gmul; /* grad_scale * clip coefficient */
  float lr;
  float b1, omb1, b2, omb2, eps;
  float bc1, bc2;      /* 1 - beta^t (LAMB divides by them, as apex) */
  float step_size;     /* AdamW: lr / bc1 */
  float bc2_sqrt;      /* AdamW: sqrt(bc2) */
  float wd, momentum;  /* SGD */
  int first, nesterov; /* SGD */
} step_coef_t;

/* torch.nn.utils.clip_grad_norm_: coef = max / (norm + 1e-6), clamped at 1
 * from above; a NaN coefficient propagates (as torch's clamp does), so a
 * non-finite norm poisons the step instead of silently not clipping. */
static float grad_multiplier(const ddp_optim_step_args_t *a) {
  double mul = (double)a->grad_scale;
  if (a->cfg->max_grad_norm > 0.0f && a->grad_sumsq) {
    double coef = (double)a->cfg->max_grad_norm / (sqrt((double)*a->grad_sumsq) + 1e-6);
    if (!(coef >= 1.0)) mul *= coef;
  }
  return (float)mul;
}

static step_coef_t step_coef(const ddp_optim_step_args_t *a) {
  const ddp_optim_config_t *cfg = a->cfg;
  step_coef_t c = {.gmul = grad_multiplier(a), .lr = a->lr};
  double t = (double)a->t;
  double bc1 = 1.0 - pow((double)cfg->beta1, t), bc2 = 1.0 - pow((double)cfg->beta2, t);
  c.b1 = cfg->beta1;
  c.omb1 = (float)(1.0 - (double)cfg->beta1);
  c.b2 = cfg->beta2;
  c.omb2 = (float)(1.0 - (double)cfg->beta2);
  c.eps = cfg->eps;
  c.bc1 = (float)bc1;
  c.bc2 = (float)bc2;
  c.step_size = (float)((double)a->lr / bc1);
  c.bc2_sqrt = (float)sqrt(bc2);
  c.wd = cfg->weight_decay;
  c.momentum = cfg->momentum;
  c.first = a->t == 1;
  c.nesterov = cfg->nesterov != 0;
  return c;
}

/* The compute copy of len updated weights (nothing in fp32 training). */
typedef struct compute_out {
  unsigned char *dst; /* at the segment's first element; NULL: no copy */
  ddp_dtype_t dtype;
} compute_out_t;

/* Narrows the block to the compute type (uint16 bit patterns for bf16/fp16,
 * round to nearest even) into the copy, elements off.. of the segment. */
static inline void emit(const compute_out_t *o, size_t off, const float *p, size_t len) {
  if (o->dst) /* arguments checked once */
    (void)ddp_convert_host(o->dst + off * ddp_dtype_size(o->dtype), o->dtype, p, DDP_DTYPE_F32,
                           len);
}

/* ---- AdamW ------------------------------------------------------------- */

/* m, v updated in place; p *= decay_mul (torch's p.mul_(1 - lr * wd)), then
 * p -= step_size * m / (sqrt(v) / sqrt(bc2) + eps), torch's operation order. */
static inline void adamw_block(float *restrict p, const float *restrict g, float *restrict m,
                               float *restrict v, size_t len, const step_coef_t *c,
                               float decay_mul) {
  const float gmul = c->gmul, b1 = c->b1, omb1 = c->omb1, b2 = c->b2, omb2 = c->omb2;
  const float step_size = c->step_size, bc2_sqrt = c->bc2_sqrt, eps = c->eps;
  float s[BLOCK];
  for (size_t i = 0; i < len; ++i) {
    float gi = g[i] * gmul;
    m[i] = b1 * m[i] + omb1 * gi;
    v[i] = b2 * v[i] + omb2 * gi * gi;
  }
  for (size_t i = 0; i < len; ++i) s[i] = sqrtf(v[i]);
  for (size_t i = 0; i < len; ++i)
    p[i] = p[i] * decay_mul - step_size * m[i] / (s[i] / bc2_sqrt + eps);
}

static void adamw_segment(float *restrict p, const float *restrict g, float *restrict m,
                          float *restrict v, size_t n, const step_coef_t *c, float decay_mul,
                          const compute_out_t *o) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK) {
    adamw_block(p + i, g + i, m + i, v + i, BLOCK, c, decay_mul);
    emit(o, i, p + i, BLOCK);
  }
  adamw_block(p + i, g + i, m + i, v + i, n - i, c, decay_mul);
  emit(o, i, p + i, n - i);
}

/* ---- SGD --------------------------------------------------------------- */

/* torch.optim.SGD with dampening 0: g += wd * p (wd 0 on segments without
 * decay); buf = g on the first step, else momentum * buf + g; the applied
 * direction is g + momentum * buf (Nesterov) or buf. `first` and `nesterov`
 * are literal constants at every call site, so each combination compiles to
 * its own branch-free loop. */
static inline void sgd_block(float *restrict p, const float *restrict g, float *restrict buf,
                             size_t len, const step_coef_t *c, float wd, int first, int nesterov) {
  const float gmul = c->gmul, mom = c->momentum, lr = c->lr;
  for (size_t i = 0; i < len; ++i) {
    float gi = g[i] * gmul + wd * p[i];
    float b = first ? gi : mom * buf[i] + gi;
    buf[i] = b;
    float d = nesterov ? gi + mom * b : b;
    p[i] = p[i] - lr * d;
  }
}

static inline void sgd_plain_block(float *restrict p, const float *restrict g, size_t len,
                                   const step_coef_t *c, float wd) {
  const float gmul = c->gmul, lr = c->lr;
  for (size_t i = 0; i < len; ++i) p[i] = p[i] - lr * (g[i] * gmul + wd * p[i]);
}

#define SGD_BLOCKS(first, nesterov)                                    \
  do {                                                                 \
    for (; i + BLOCK <= n; i += BLOCK) {                               \
      sgd_block(p + i, g + i, buf + i, BLOCK, c, wd, first, nesterov); \
      emit(o, i, p + i, BLOCK);                                        \
    }                                                                  \
    sgd_block(p + i, g + i, buf + i, n - i, c, wd, first, nesterov);   \
    emit(o, i, p + i, n - i);                                          \
  } while (0)

static void sgd_segment(float *restrict p, const float *restrict g, float *restrict buf, size_t n,
                        const step_coef_t *c, float wd, const compute_out_t *o) {
  size_t i = 0;
  if (!buf) {
    for (; i + BLOCK <= n; i += BLOCK) {
      sgd_plain_block(p + i, g + i, BLOCK, c, wd);
      emit(o, i, p + i, BLOCK);
    }
    sgd_plain_block(p + i, g + i, n - i, c, wd);
    emit(o, i, p + i, n - i);
  } else if (c->first) {
    if (c->nesterov)
      SGD_BLOCKS(1, 1);
    else
      SGD_BLOCKS(1, 0);
  } else {
    if (c->nesterov)
      SGD_BLOCKS(0, 1);
    else
      SGD_BLOCKS(0, 0);
  }
}
#undef SGD_BLOCKS

/* ---- LAMB -------------------------------------------------------------- */

/* r = (m / bc1) / (sqrt(v / bc2) + eps) + wd * p, apex's MOMENT_MODE_1
 * expression. Both passes call this, so the r that is applied is bit for
 * bit the r whose norm was taken. */
static inline void lamb_r_block(float *restrict r, const float *restrict p, const float *restrict m,
                                const float *restrict v, size_t len, const step_coef_t *c,
                                float wd) {
  const float bc1 = c->bc1, bc2 = c->bc2, eps = c->eps;
  for (size_t i = 0; i < len; ++i) r[i] = v[i] / bc2;
  for (size_t i = 0; i < len; ++i) r[i] = sqrtf(r[i]);
  for (size_t i = 0; i < len; ++i) r[i] = (m[i] / bc1) / (r[i] + eps) + wd * p[i];
}

static inline void lamb_moments_block(const float *restrict g, float *restrict m, float *restrict v,
                                      size_t len, const step_coef_t *c) {
  const float gmul = c->gmul, b1 = c->b1, omb1 = c->omb1, b2 = c->b2, omb2 = c->omb2;
  for (size_t i = 0; i < len; ++i) {
    float gi = g[i] * gmul;
    m[i] = b1 * m[i] + omb1 * gi;
    v[i] = b2 * v[i] + omb2 * gi * gi;
  }
}

/* Pass 1: moments, ||p||^2 and ||r||^2 (double). */
static inline void lamb_norms_block(double pacc[LANES], double racc[LANES], const float *restrict p,
                                    const float *restrict g, float *restrict m, float *restrict v,
                                    size_t len, const step_coef_t *c, float wd) {
  float r[BLOCK];
  lamb_moments_block(g, m, v, len, c);
  lamb_r_block(r, p, m, v, len, c, wd);
  ddp_cpu_optim_sumsq_lanes(pacc, p, len);
  ddp_cpu_optim_sumsq_lanes(racc, r, len);
}

/* Pass 2: p -= lr * trust * r. */
static inline void lamb_apply_block(float *restrict p, const float *restrict m,
                                    const float *restrict v, size_t len, const step_coef_t *c,
                                    float wd, float ratio) {
  float r[BLOCK];
  lamb_r_block(r, p, m, v, len, c, wd);
  for (size_t i = 0; i < len; ++i) p[i] = p[i] - ratio * r[i];
}

/* Pass 1 over one segment: moments, and its ||p||^2, ||r||^2 (double). */
static void lamb_segment_sums(const float *restrict p, const float *restrict g, float *restrict m,
                              float *restrict v, size_t n, const step_coef_t *c, float wd,
                              double *pp, double *rr) {
  double pacc[LANES] = {0}, racc[LANES] = {0};
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    lamb_norms_block(pacc, racc, p + i, g + i, m + i, v + i, BLOCK, c, wd);
  lamb_norms_block(pacc, racc, p + i, g + i, m + i, v + i, n - i, c, wd);
  *pp = ddp_cpu_optim_lanes_total(pacc);
  *rr = ddp_cpu_optim_lanes_total(racc);
}

/* lr x trust from a tensor's squared norms (kernels/optim.cu has the same
 * expression: both round the same doubles to the same float). */
static float lamb_ratio(float lr, double pp, double rr) {
  const double p_norm = sqrt(pp), r_norm = sqrt(rr);
  const double trust = p_norm > 0.0 && r_norm > 0.0 ? p_norm / r_norm : 1.0;
  return (float)((double)lr * trust);
}

/* Pass 2 over one segment: p -= ratio * r, and the compute copy. */
static void lamb_segment_apply(float *restrict p, const float *restrict m, const float *restrict v,
                               size_t n, const step_coef_t *c, float wd, float ratio,
                               const compute_out_t *o) {
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK) {
    lamb_apply_block(p + i, m + i, v + i, BLOCK, c, wd, ratio);
    emit(o, i, p + i, BLOCK);
  }
  lamb_apply_block(p + i, m + i, v + i, n - i, c, wd, ratio);
  emit(o, i, p + i, n - i);
}

static void lamb_segment(float *restrict p, const float *restrict g, float *restrict m,
                         float *restrict v, size_t n, const step_coef_t *c, float wd,
                         const compute_out_t *o) {
  double pp, rr;
  lamb_segment_sums(p, g, m, v, n, c, wd, &pp, &rr);
  lamb_segment_apply(p, m, v, n, c, wd, lamb_ratio(c->lr, pp, rr), o);
}

/* ---- the step ---------------------------------------------------------- */

/* The compute copy of segment sg (none in an fp32 run). */
static compute_out_t compute_out(const ddp_optim_step_args_t *args, const ddp_param_t *sg) {
  return (compute_out_t){.dst = args->compute_params
                                    ? (unsigned char *)args->compute_params +
                                          sg->offset * ddp_dtype_size(args->compute_dtype)
                                    : NULL,
                         .dtype = args->compute_dtype};
}

/* The step on checked arguments. */
static void cpu_step(const ddp_optim_step_args_t *args) {
  /* The loss scaler's skip: an inf/NaN gradient makes the sum of squares
   * non-finite (squares accumulate in double, so finite gradients cannot
   * overflow it), and the step leaves everything as it was. */
  if (args->skip_nonfinite && !isfinite(*args->grad_sumsq)) return;
  const ddp_optim_config_t *cfg = args->cfg;
  const step_coef_t c = step_coef(args);
  const size_t n = args->n;
  float *state = args->state;
  const int has_state = ddp_optim_state_per_param(cfg) > 0;
  for (int k = 0; k < args->n_tensors; ++k) {
    const ddp_param_t *sg = &args->tensors[k];
    float *p = args->params + sg->offset;
    const float *g = args->grads + sg->offset;
    float wd = sg->decay ? cfg->weight_decay : 0.0f;
    const compute_out_t o = compute_out(args, sg);
    switch (cfg->kind) {
      case DDP_OPTIM_KIND_ADAMW: {
        float decay_mul = (float)(1.0 - (double)args->lr * (double)wd);
        adamw_segment(p, g, state + sg->offset, state + n + sg->offset, sg->count, &c, decay_mul,
                      &o);
        break;
      }
      case DDP_OPTIM_KIND_SGD:
        sgd_segment(p, g, has_state ? state + sg->offset : NULL, sg->count, &c, wd, &o);
        break;
      case DDP_OPTIM_KIND_LAMB:
        lamb_segment(p, g, state + sg->offset, state + n + sg->offset, sg->count, &c, wd, &o);
        break;
    }
  }
}

ddp_status_t ddp_optim_step_cpu(ddp_backend_t *be, const ddp_optim_step_args_t *args,
                                ddp_stream_t s) {
  (void)s; /* CPU: work runs at once */
  DDP_CHECK(ddp_cpu_optim_require_host(be, "optim_step"));
  DDP_CHECK(ddp_optim_check_step(args));
  cpu_step(args);
  return DDP_OK;
}

/* ---- the plan and the table --------------------------------------------- */

/* The CPU needs nothing per layout but the count of skipped steps, which it
 * decides on the host, where the norm is. */
typedef struct cpu_optim_plan {
  int64_t skipped;
  /* LAMB over a shard: the groups (optim/optim.h), NULL without */
  int32_t *lamb_begin, *lamb_index;
  int n_pieces;
} cpu_optim_plan_t;

static ddp_status_t cpu_plan_create(ddp_backend_t *be, const ddp_param_t *tensors, int n_tensors,
                                    size_t n, void **impl) {
  (void)be, (void)tensors, (void)n;
  cpu_optim_plan_t *p = calloc(1, sizeof *p);
  if (!p) DDP_FAIL(DDP_ERR_OOM, "optim plan: out of host memory");
  p->n_pieces = n_tensors;
  *impl = p;
  return DDP_OK;
}

static void cpu_plan_destroy(ddp_backend_t *be, void *impl) {
  (void)be;
  cpu_optim_plan_t *p = impl;
  if (!p) return;
  free(p->lamb_begin);
  free(p->lamb_index);
  free(p);
}

static ddp_status_t cpu_plan_step(ddp_backend_t *be, void *impl, const ddp_optim_step_args_t *args,
                                  ddp_stream_t s) {
  (void)be, (void)s;
  cpu_optim_plan_t *p = impl;
  if (args->skip_nonfinite && !isfinite(*args->grad_sumsq)) p->skipped++;
  cpu_step(args);
  return DDP_OK;
}

static ddp_status_t cpu_skipped_steps(ddp_backend_t *be, void *impl, int64_t *count) {
  (void)be;
  *count = ((const cpu_optim_plan_t *)impl)->skipped;
  return DDP_OK;
}

/* ---- LAMB over a shard ---------------------------------------------------- */

static ddp_status_t cpu_lamb_groups(ddp_backend_t *be, void *impl,
                                    const ddp_optim_lamb_groups_t *g) {
  (void)be;
  cpu_optim_plan_t *p = impl;
  const size_t nb = ((size_t)p->n_pieces + 1) * sizeof(int32_t);
  const size_t ni = (size_t)g->begin[p->n_pieces] * sizeof(int32_t);
  p->lamb_begin = malloc(nb);
  p->lamb_index = malloc(ni);
  if (!p->lamb_begin || !p->lamb_index) {
    free(p->lamb_begin), free(p->lamb_index);
    p->lamb_begin = p->lamb_index = NULL;
    DDP_FAIL(DDP_ERR_OOM, "optim lamb groups: out of host memory");
  }
  memcpy(p->lamb_begin, g->begin, nb);
  memcpy(p->lamb_index, g->index, ni);
  return DDP_OK;
}

static ddp_status_t cpu_lamb_sums(ddp_backend_t *be, void *impl, const ddp_optim_step_args_t *args,
                                  double *sums, ddp_stream_t s) {
  (void)be, (void)impl, (void)s;
  if (args->skip_nonfinite && !isfinite(*args->grad_sumsq)) return DDP_OK;
  const step_coef_t c = step_coef(args);
  float *m = args->state, *v = args->state + args->n;
  for (int k = 0; k < args->n_tensors; ++k) {
    const ddp_param_t *sg = &args->tensors[k];
    const float wd = sg->decay ? args->cfg->weight_decay : 0.0f;
    lamb_segment_sums(args->params + sg->offset, args->grads + sg->offset, m + sg->offset,
                      v + sg->offset, sg->count, &c, wd, &sums[2 * (size_t)k],
                      &sums[2 * (size_t)k + 1]);
  }
  return DDP_OK;
}

/* Each piece's tensor norms: its group's sums added in the group's
 * (ascending) order, starting from 0, as the CUDA kernel adds them. */
static ddp_status_t cpu_lamb_ratios(ddp_backend_t *be, void *impl, float lr, const double *all_sums,
                                    float *ratio, ddp_stream_t s) {
  (void)be, (void)s;
  const cpu_optim_plan_t *p = impl;
  for (int j = 0; j < p->n_pieces; ++j) {
    double pp = 0.0, rr = 0.0;
    for (int32_t k = p->lamb_begin[j]; k < p->lamb_begin[j + 1]; ++k) {
      pp += all_sums[2 * (size_t)p->lamb_index[k]];
      rr += all_sums[2 * (size_t)p->lamb_index[k] + 1];
    }
    ratio[j] = lamb_ratio(lr, pp, rr);
  }
  return DDP_OK;
}

static ddp_status_t cpu_lamb_apply(ddp_backend_t *be, void *impl, const ddp_optim_step_args_t *args,
                                   const float *ratio, ddp_stream_t s) {
  (void)be, (void)s;
  cpu_optim_plan_t *p = impl;
  if (args->skip_nonfinite && !isfinite(*args->grad_sumsq)) {
    p->skipped++;
    return DDP_OK;
  }
  const step_coef_t c = step_coef(args);
  const float *m = args->state, *v = args->state + args->n;
  for (int k = 0; k < args->n_tensors; ++k) {
    const ddp_param_t *sg = &args->tensors[k];
    const float wd = sg->decay ? args->cfg->weight_decay : 0.0f;
    const compute_out_t o = compute_out(args, sg);
    lamb_segment_apply(args->params + sg->offset, m + sg->offset, v + sg->offset, sg->count, &c, wd,
                       ratio[k], &o);
  }
  return DDP_OK;
}

const ddp_optim_ops_t ddp_optim_cpu_ops = {
    .plan_create = cpu_plan_create,
    .plan_destroy = cpu_plan_destroy,
    .step = cpu_plan_step,
    .skipped_steps = cpu_skipped_steps,
    .grad_sumsq = cpu_grad_sumsq,
    .grad_epilogue = ddp_cpu_optim_grad_epilogue,
    .sum_partials = ddp_cpu_optim_sum_partials,
    .lamb_groups = cpu_lamb_groups,
    .lamb_sums = cpu_lamb_sums,
    .lamb_ratios = cpu_lamb_ratios,
    .lamb_apply = cpu_lamb_apply,
};
