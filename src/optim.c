/* Optimizers (AdamW, SGD, LAMB), the learning-rate schedule and the global
 * gradient norm on the CPU backend (see ddptrain/optim.h).
 *
 * This is the CPU twin of the fused optimizer kernel: the CUDA kernel will
 * implement the same contract and is tested against these functions. The CPU
 * backend's "device" memory is host memory, so the step dereferences its
 * buffers directly instead of going through copy(); it refuses any other
 * backend. Work runs at once on the calling thread, in a fixed order, so
 * results are bit-identical from run to run.
 *
 * State layout (the CUDA kernel uses the same, so state is portable between
 * backends and checkpoints): AdamW/LAMB keep m in state[0, n) and v in
 * state[n, 2n); SGD keeps its momentum buffer in state[0, n).
 *
 * Loop shape. Every element is read and written once per step (LAMB: twice,
 * norms then update), in blocks of BLOCK elements that stay in L1 between the
 * loops of a block. gcc's -O2 vectoriser ("very cheap" cost model) only takes
 * loops whose trip count is a multiple of the vector width, hence the
 * fixed-length inner loops and a scalar tail per segment. sqrtf is kept in a
 * loop of its own: under the default -fmath-errno it is a call with a branch
 * that stops vectorisation of any loop containing it, so isolating it keeps
 * everything else vectorised (with -fno-math-errno it vectorises too).
 * Per-element branches are avoided: weight decay is a per-segment factor
 * (1 or 0 where it does not apply), and per-step choices (first SGD step,
 * Nesterov) are loop-invariant selects. */
#include <config.h>

#include "ddptrain/optim.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ascii.h"
#if DDP_HAVE_CUDA
#include "backend/cuda/cuda_grad_epilogue.h"
#include "backend/cuda/cuda_optim.h"
#endif

#define BLOCK 64 /* elements per inner loop: a multiple of every vector width */
#define LANES 8  /* partial sums of a double-precision sum of squares */

/* ---- names ------------------------------------------------------------- */

static const struct {
  const char *name;
  ddp_optim_kind_t kind;
} k_kinds[] = {
    {"adamw", DDP_OPTIM_KIND_ADAMW},
    {"sgd", DDP_OPTIM_KIND_SGD},
    {"lamb", DDP_OPTIM_KIND_LAMB},
};

/* Silent: the caller knows which option was wrong and reports that. */
ddp_status_t ddp_optim_kind_parse(const char *text, ddp_optim_kind_t *kind) {
  if (!text || !kind) return DDP_ERR_INVALID_ARG;
  for (size_t i = 0; i < sizeof k_kinds / sizeof k_kinds[0]; ++i) {
    if (ddp_ascii_ieq(text, k_kinds[i].name)) {
      *kind = k_kinds[i].kind;
      return DDP_OK;
    }
  }
  return DDP_ERR_INVALID_ARG;
}

const char *ddp_optim_kind_name(ddp_optim_kind_t kind) {
  for (size_t i = 0; i < sizeof k_kinds / sizeof k_kinds[0]; ++i)
    if (k_kinds[i].kind == kind) return k_kinds[i].name;
  return "invalid";
}

size_t ddp_optim_state_per_param(const ddp_optim_config_t *cfg) {
  if (!cfg) return 0;
  switch (cfg->kind) {
    case DDP_OPTIM_KIND_ADAMW:
    case DDP_OPTIM_KIND_LAMB:
      return 2;
    case DDP_OPTIM_KIND_SGD:
      return cfg->momentum != 0.0f ? 1 : 0;
    default:
      return 0;
  }
}

/* ---- schedule ---------------------------------------------------------- */

float ddp_lr_schedule(int64_t step, float lr, float min_lr, int64_t warmup, int64_t total_steps) {
  if (step < 0) step = 0;
  if (warmup < 0) warmup = 0;
  if (step < warmup) return (float)((double)lr * (double)(step + 1) / (double)warmup);
  if (step >= total_steps) return min_lr;
  int64_t span = total_steps - warmup;
  double progress = (double)(step - warmup) / (double)(span > 1 ? span : 1);
  if (progress < 0.0) progress = 0.0;
  if (progress > 1.0) progress = 1.0;
  const double pi = 3.14159265358979323846;
  return (float)((double)min_lr + 0.5 * ((double)lr - (double)min_lr) * (1.0 + cos(pi * progress)));
}

/* ---- shared helpers ---------------------------------------------------- */

static ddp_status_t require_cpu(const ddp_backend_t *be, const char *what) {
  if (!be || !be->ops) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: NULL backend", what);
  if (be->ops->kind != DDP_DEVICE_KIND_CPU)
    DDP_FAIL(DDP_ERR_UNSUPPORTED,
             "%s: the CPU implementation needs host memory; backend '%s' has its own", what,
             be->ops->name ? be->ops->name : "?");
  return DDP_OK;
}

/* Sum of squares over len elements into LANES partial sums; element k of a
 * block always lands in lane k % LANES (blocks start at multiples of BLOCK),
 * so the order of additions is fixed for a given layout. */
static inline void sumsq_lanes(double acc[LANES], const float *restrict x, size_t len) {
  size_t k = 0;
  for (; k + LANES <= len; k += LANES)
    for (size_t j = 0; j < LANES; ++j) acc[j] += (double)x[k + j] * (double)x[k + j];
  for (size_t j = 0; k + j < len; ++j) acc[j] += (double)x[k + j] * (double)x[k + j];
}

static inline double lanes_total(const double acc[LANES]) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

static inline void scale_block(float *restrict out, const float *restrict g, float scale,
                               size_t len) {
  for (size_t i = 0; i < len; ++i) out[i] = scale * g[i];
}

ddp_status_t ddp_optim_grad_sumsq_cpu(ddp_backend_t *be, float *sumsq, const float *grads, size_t n,
                                      float scale, ddp_stream_t s) {
  (void)s; /* CPU: work runs at once */
  DDP_CHECK(require_cpu(be, "optim_grad_sumsq"));
  if (!sumsq || !grads)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_grad_sumsq: NULL %s", !sumsq ? "sumsq" : "grads");
  if (!isfinite(scale)) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_grad_sumsq: scale %g", (double)scale);
  double acc[LANES] = {0};
  float t[BLOCK];
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK) {
    scale_block(t, grads + i, scale, BLOCK);
    sumsq_lanes(acc, t, BLOCK);
  }
  scale_block(t, grads + i, scale, n - i);
  sumsq_lanes(acc, t, n - i);
  *sumsq = (float)lanes_total(acc);
  return DDP_OK;
}

/* ---- the half all-reduce's epilogue ------------------------------------ */

static int ranges_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes);

/* Shared by the CPU function and the backend-neutral entry point. */
static ddp_status_t validate_epilogue(const float *dst, const void *src, ddp_dtype_t src_dtype,
                                      size_t n, float scale, const double *partial) {
  if (!dst || !src || !partial)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_grad_epilogue: NULL %s",
             !dst   ? "dst"
             : !src ? "src"
                    : "partial");
  if (src_dtype != DDP_DTYPE_BF16 && src_dtype != DDP_DTYPE_F16)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "optim_grad_epilogue: the reduced gradients are %s; the epilogue widens bf16 or fp16",
             ddp_dtype_name(src_dtype));
  if (!isfinite(scale))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_grad_epilogue: scale %g", (double)scale);
  if (ranges_overlap(dst, n * sizeof(float), src, n * ddp_dtype_size(src_dtype)))
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "optim_grad_epilogue: dst and src overlap (the widening cannot run in place)");
  return DDP_OK;
}

ddp_status_t ddp_optim_grad_epilogue_cpu(ddp_backend_t *be, float *dst, const void *src,
                                         ddp_dtype_t src_dtype, size_t n, float scale,
                                         double *partial, ddp_stream_t s) {
  (void)s; /* CPU: work runs at once */
  DDP_CHECK(require_cpu(be, "optim_grad_epilogue"));
  DDP_CHECK(validate_epilogue(dst, src, src_dtype, n, scale, partial));
  const unsigned char *h = src;
  const size_t esz = ddp_dtype_size(src_dtype);
  /* Block by block while the block is in L1: widen into t, scale into dst,
   * square dst, with the block and lane layout of ddp_optim_grad_sumsq_cpu
   * so one bucket's sum is that function's bit for bit. */
  double acc[LANES] = {0};
  float t[BLOCK];
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK) {
    (void)ddp_convert_host(t, DDP_DTYPE_F32, h + i * esz, src_dtype, BLOCK); /* checked above */
    scale_block(dst + i, t, scale, BLOCK);
    sumsq_lanes(acc, dst + i, BLOCK);
  }
  if (i < n) {
    (void)ddp_convert_host(t, DDP_DTYPE_F32, h + i * esz, src_dtype, n - i);
    scale_block(dst + i, t, scale, n - i);
    sumsq_lanes(acc, dst + i, n - i);
  }
  *partial = lanes_total(acc);
  return DDP_OK;
}

static ddp_status_t validate_partials(const float *sumsq, const double *partials, int n) {
  if (!sumsq || !partials)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_sum_partials: NULL %s", !sumsq ? "sumsq" : "partials");
  if (n < 1) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_sum_partials: n = %d (need >= 1)", n);
  return DDP_OK;
}

ddp_status_t ddp_optim_sum_partials_cpu(ddp_backend_t *be, float *sumsq, const double *partials,
                                        int n, ddp_stream_t s) {
  (void)s;
  DDP_CHECK(require_cpu(be, "optim_sum_partials"));
  DDP_CHECK(validate_partials(sumsq, partials, n));
  double total = 0.0;
  for (int b = 0; b < n; ++b) total += partials[b];
  *sumsq = (float)total;
  return DDP_OK;
}

/* ---- validation -------------------------------------------------------- */

static int ranges_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}

static ddp_status_t validate_config(const ddp_optim_config_t *cfg) {
  const char *name = ddp_optim_kind_name(cfg->kind);
  if (strcmp(name, "invalid") == 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: unknown optimizer kind %d", (int)cfg->kind);
  if (!(cfg->weight_decay >= 0.0f) || !isfinite(cfg->weight_decay))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: weight_decay %g must be finite and >= 0",
             (double)cfg->weight_decay);
  if (isnan(cfg->max_grad_norm))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: max_grad_norm is NaN (<= 0 disables clipping)");
  if (cfg->kind == DDP_OPTIM_KIND_SGD) {
    if (!(cfg->momentum >= 0.0f) || !isfinite(cfg->momentum))
      DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: sgd momentum %g must be finite and >= 0",
               (double)cfg->momentum);
    if (cfg->nesterov && cfg->momentum == 0.0f)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: sgd nesterov needs momentum > 0");
    return DDP_OK;
  }
  if (!(cfg->beta1 >= 0.0f && cfg->beta1 < 1.0f) || !(cfg->beta2 >= 0.0f && cfg->beta2 < 1.0f))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: %s betas (%g, %g) must lie in [0, 1)", name,
             (double)cfg->beta1, (double)cfg->beta2);
  if (!(cfg->eps > 0.0f) || !isfinite(cfg->eps))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: %s eps %g must be finite and > 0", name,
             (double)cfg->eps);
  return DDP_OK;
}

static ddp_status_t validate_step(const ddp_optim_step_args_t *a) {
  if (!a) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: NULL arguments");
  if (!a->cfg || !a->params || !a->grads || !a->tensors)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: NULL %s",
             !a->cfg      ? "cfg"
             : !a->params ? "params"
             : !a->grads  ? "grads"
                          : "segments");
  DDP_CHECK(validate_config(a->cfg));
  size_t per = ddp_optim_state_per_param(a->cfg);
  if (per && !a->state) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: NULL state");
  if (a->n > SIZE_MAX / sizeof(float) / 2)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: n = %zu is too large", a->n);
  if (a->t < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: step count t = %lld (1-based)", (long long)a->t);
  if (!isfinite(a->lr) || a->lr < 0.0f)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: lr %g must be finite and >= 0", (double)a->lr);
  if (!isfinite(a->grad_scale))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: grad_scale %g is not finite", (double)a->grad_scale);
  if (a->n_tensors < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: n_segments = %d (need >= 1)", a->n_tensors);
  size_t end = 0;
  for (int i = 0; i < a->n_tensors; ++i) {
    const ddp_param_t *sg = &a->tensors[i];
    if (sg->offset != end || sg->count > a->n - end)
      DDP_FAIL(DDP_ERR_INVALID_ARG,
               "optim_step: segment %d [%zu, +%zu) does not continue at %zu within n = %zu "
               "(segments must be sorted, disjoint and cover [0, n))",
               i, sg->offset, sg->count, end, a->n);
    end += sg->count;
  }
  if (end != a->n)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: segments cover [0, %zu) but n = %zu", end, a->n);
  size_t bytes = a->n * sizeof(float);
  if (ranges_overlap(a->params, bytes, a->grads, bytes) ||
      ranges_overlap(a->params, bytes, a->state, per * bytes) ||
      ranges_overlap(a->grads, bytes, a->state, per * bytes))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: params, grads and state must not overlap");
  if (a->skip_nonfinite && !a->grad_sumsq)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: skip_nonfinite needs grad_sumsq");
  if (a->compute_params) {
    if (!ddp_dtype_is_float(a->compute_dtype))
      DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: compute_dtype %s is not a float type",
               ddp_dtype_name(a->compute_dtype));
    const size_t cbytes = a->n * ddp_dtype_size(a->compute_dtype);
    if (ranges_overlap(a->compute_params, cbytes, a->params, bytes) ||
        ranges_overlap(a->compute_params, cbytes, a->grads, bytes) ||
        ranges_overlap(a->compute_params, cbytes, a->state, per * bytes))
      DDP_FAIL(DDP_ERR_INVALID_ARG,
               "optim_step: compute_params must not overlap params, grads or state");
  }
  return DDP_OK;
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
  sumsq_lanes(pacc, p, len);
  sumsq_lanes(racc, r, len);
}

/* Pass 2: p -= lr * trust * r. */
static inline void lamb_apply_block(float *restrict p, const float *restrict m,
                                    const float *restrict v, size_t len, const step_coef_t *c,
                                    float wd, float ratio) {
  float r[BLOCK];
  lamb_r_block(r, p, m, v, len, c, wd);
  for (size_t i = 0; i < len; ++i) p[i] = p[i] - ratio * r[i];
}

static void lamb_segment(float *restrict p, const float *restrict g, float *restrict m,
                         float *restrict v, size_t n, const step_coef_t *c, float wd,
                         const compute_out_t *o) {
  double pacc[LANES] = {0}, racc[LANES] = {0};
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    lamb_norms_block(pacc, racc, p + i, g + i, m + i, v + i, BLOCK, c, wd);
  lamb_norms_block(pacc, racc, p + i, g + i, m + i, v + i, n - i, c, wd);
  double p_norm = sqrt(lanes_total(pacc)), r_norm = sqrt(lanes_total(racc));
  double trust = p_norm > 0.0 && r_norm > 0.0 ? p_norm / r_norm : 1.0;
  float ratio = (float)((double)c->lr * trust);
  for (i = 0; i + BLOCK <= n; i += BLOCK) {
    lamb_apply_block(p + i, m + i, v + i, BLOCK, c, wd, ratio);
    emit(o, i, p + i, BLOCK);
  }
  lamb_apply_block(p + i, m + i, v + i, n - i, c, wd, ratio);
  emit(o, i, p + i, n - i);
}

/* ---- the step ---------------------------------------------------------- */

ddp_status_t ddp_optim_step_cpu(ddp_backend_t *be, const ddp_optim_step_args_t *args,
                                ddp_stream_t s) {
  (void)s; /* CPU: work runs at once */
  DDP_CHECK(require_cpu(be, "optim_step"));
  DDP_CHECK(validate_step(args));
  /* The loss scaler's skip: an inf/NaN gradient makes the sum of squares
   * non-finite (squares accumulate in double, so finite gradients cannot
   * overflow it), and the step leaves everything as it was. */
  if (args->skip_nonfinite && !isfinite(*args->grad_sumsq)) return DDP_OK;
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
    const compute_out_t o = {.dst = args->compute_params
                                        ? (unsigned char *)args->compute_params +
                                              sg->offset * ddp_dtype_size(args->compute_dtype)
                                        : NULL,
                             .dtype = args->compute_dtype};
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
  return DDP_OK;
}

/* ---- backend-neutral entry points -------------------------------------- */

struct ddp_optim_plan {
  ddp_backend_t *be;
  size_t n;
  int n_tensors;
  void *device;    /* the CUDA plan; NULL on the CPU */
  int64_t skipped; /* CPU: steps skip_nonfinite skipped */
};

#if DDP_HAVE_CUDA
static int on_cuda(const ddp_backend_t *be) {
  return be && be->ops && be->ops->kind == DDP_DEVICE_KIND_CUDA;
}
#endif

ddp_status_t ddp_optim_plan_create(ddp_backend_t *be, const ddp_optim_config_t *cfg,
                                   const ddp_param_t *tensors, int n_tensors, size_t n,
                                   ddp_optim_plan_t **out) {
  if (!out) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim plan: NULL out");
  *out = NULL;
  if (!be || !cfg || !tensors)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim plan: NULL %s",
             !be    ? "backend"
             : !cfg ? "config"
                    : "segments");
  DDP_CHECK(validate_config(cfg));
  if (n_tensors < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim plan: n_segments = %d (need >= 1)", n_tensors);
  size_t end = 0;
  for (int i = 0; i < n_tensors; ++i) {
    if (tensors[i].offset != end || tensors[i].count > n - end)
      DDP_FAIL(DDP_ERR_INVALID_ARG,
               "optim plan: segment %d [%zu, +%zu) does not continue at %zu within n = %zu "
               "(segments must be sorted, disjoint and cover [0, n))",
               i, tensors[i].offset, tensors[i].count, end, n);
    end += tensors[i].count;
  }
  if (end != n)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim plan: segments cover [0, %zu) but n = %zu", end, n);
  ddp_optim_plan_t *p = calloc(1, sizeof *p);
  if (!p) DDP_FAIL(DDP_ERR_OOM, "optim plan: out of host memory");
  *p = (ddp_optim_plan_t){.be = be, .n = n, .n_tensors = n_tensors};
#if DDP_HAVE_CUDA
  if (on_cuda(be)) {
    ddp_status_t st =
        ddp_cuda_optim_plan_create(be, tensors, n_tensors, n, (ddp_cuda_optim_plan_t **)&p->device);
    if (st != DDP_OK) {
      free(p);
      return st;
    }
  }
#endif
  *out = p;
  return DDP_OK;
}

void ddp_optim_plan_destroy(ddp_optim_plan_t *plan) {
  if (!plan) return;
#if DDP_HAVE_CUDA
  if (plan->device) ddp_cuda_optim_plan_destroy(plan->be, plan->device);
#endif
  free(plan);
}

ddp_status_t ddp_optim_grad_sumsq(ddp_backend_t *be, float *sumsq, const float *grads, size_t n,
                                  float scale, ddp_stream_t s) {
#if DDP_HAVE_CUDA
  if (on_cuda(be)) {
    if (!sumsq || !grads)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_grad_sumsq: NULL %s", !sumsq ? "sumsq" : "grads");
    if (!isfinite(scale))
      DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_grad_sumsq: scale %g", (double)scale);
    return ddp_cuda_optim_grad_sumsq(be, sumsq, grads, n, scale, s);
  }
#endif
  return ddp_optim_grad_sumsq_cpu(be, sumsq, grads, n, scale, s);
}

ddp_status_t ddp_optim_grad_epilogue(ddp_backend_t *be, float *dst, const void *src,
                                     ddp_dtype_t src_dtype, size_t n, float scale, double *partial,
                                     ddp_stream_t s) {
#if DDP_HAVE_CUDA
  if (on_cuda(be)) {
    DDP_CHECK(validate_epilogue(dst, src, src_dtype, n, scale, partial));
    return ddp_cuda_optim_grad_epilogue(be, dst, src, src_dtype, n, scale, partial, s);
  }
#endif
  return ddp_optim_grad_epilogue_cpu(be, dst, src, src_dtype, n, scale, partial, s);
}

ddp_status_t ddp_optim_sum_partials(ddp_backend_t *be, float *sumsq, const double *partials, int n,
                                    ddp_stream_t s) {
#if DDP_HAVE_CUDA
  if (on_cuda(be)) {
    DDP_CHECK(validate_partials(sumsq, partials, n));
    return ddp_cuda_optim_sum_partials(be, sumsq, partials, n, s);
  }
#endif
  return ddp_optim_sum_partials_cpu(be, sumsq, partials, n, s);
}

ddp_status_t ddp_optim_step(ddp_backend_t *be, ddp_optim_plan_t *plan,
                            const ddp_optim_step_args_t *args, ddp_stream_t s) {
  if (!plan) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: NULL plan");
  if (plan->be != be)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: the plan was made for another backend");
  DDP_CHECK(validate_step(args));
  if (args->n != plan->n || args->n_tensors != plan->n_tensors)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "optim_step: the plan was made for %zu parameters in %d tensors, the step has %zu "
             "in %d",
             plan->n, plan->n_tensors, args->n, args->n_tensors);
#if DDP_HAVE_CUDA
  if (plan->device) return ddp_cuda_optim_step(be, plan->device, args, s);
#endif
  /* the CPU decides on the host, as ddp_optim_step_cpu does */
  if (args->skip_nonfinite && args->grad_sumsq && !isfinite(*args->grad_sumsq)) plan->skipped++;
  return ddp_optim_step_cpu(be, args, s);
}

ddp_status_t ddp_optim_plan_skipped_steps(ddp_optim_plan_t *plan, int64_t *count) {
  if (!plan || !count) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim plan: NULL argument");
#if DDP_HAVE_CUDA
  if (plan->device) return ddp_cuda_optim_skipped_steps(plan->be, plan->device, count);
#endif
  *count = plan->skipped;
  return DDP_OK;
}
