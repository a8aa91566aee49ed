/* The optimizer's backend-neutral part (see optim/optim.h): kind names,
 * floats of state per parameter, the learning-rate schedule, the checks of
 * every argument, and the entry points that dispatch to the backend's
 * optimizer table (backend/optim_ops.h).
 *
 * The checks live here, and run before any dispatch, so every backend
 * rejects the same input with the same message; the public CPU twins
 * (src/backend/cpu/) run them too. The arithmetic lives with each backend:
 * src/backend/cpu/cpu_optim.c and cpu_grad_epilogue.c on the CPU,
 * src/backend/cuda/cuda_optim.c and cuda_grad_epilogue.c (kernels/optim.cu,
 * kernels/grad_epilogue.cu) on CUDA. Nothing here depends on which backends
 * are built: a backend is reached only through its table. */
#include <config.h>

#include "optim/optim.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "core/ascii.h"
#include "optim/optim_ops.h"

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

/* ---- validation -------------------------------------------------------- */

static int ranges_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}

static ddp_status_t check_config(const ddp_optim_config_t *cfg) {
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

/* The optimizer's view of the parameter table: offset, count and decay of
 * each tensor (names and shapes are not its business, so tables built
 * without them pass), sorted, disjoint and covering [0, n); empty tensors
 * are allowed. The messages call the tensors segments: segments of the flat
 * buffers are what the optimizer sees of them. */
static ddp_status_t check_tensors(const char *who, const ddp_param_t *t, int n_tensors, size_t n) {
  if (n_tensors < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: n_segments = %d (need >= 1)", who, n_tensors);
  size_t end = 0;
  for (int i = 0; i < n_tensors; ++i) {
    if (t[i].offset != end || t[i].count > n - end)
      DDP_FAIL(DDP_ERR_INVALID_ARG,
               "%s: segment %d [%zu, +%zu) does not continue at %zu within n = %zu "
               "(segments must be sorted, disjoint and cover [0, n))",
               who, i, t[i].offset, t[i].count, end, n);
    end += t[i].count;
  }
  if (end != n)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: segments cover [0, %zu) but n = %zu", who, end, n);
  return DDP_OK;
}

ddp_status_t ddp_optim_check_step(const ddp_optim_step_args_t *a) {
  if (!a) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: NULL arguments");
  if (!a->cfg || !a->params || !a->grads || !a->tensors)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: NULL %s",
             !a->cfg      ? "cfg"
             : !a->params ? "params"
             : !a->grads  ? "grads"
                          : "segments");
  DDP_CHECK(check_config(a->cfg));
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
  DDP_CHECK(check_tensors("optim_step", a->tensors, a->n_tensors, a->n));
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

ddp_status_t ddp_optim_check_grad_sumsq(const float *sumsq, const float *grads, float scale) {
  if (!sumsq || !grads)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_grad_sumsq: NULL %s", !sumsq ? "sumsq" : "grads");
  if (!isfinite(scale)) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_grad_sumsq: scale %g", (double)scale);
  return DDP_OK;
}

ddp_status_t ddp_optim_check_grad_epilogue(const float *dst, const void *src, ddp_dtype_t src_dtype,
                                           size_t n, float scale, const double *partial) {
  if (!dst || !src || !partial)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_grad_epilogue: NULL %s",
             !dst   ? "dst"
             : !src ? "src"
                    : "partial");
  if (src_dtype != DDP_DTYPE_BF16 && src_dtype != DDP_DTYPE_F16 && src_dtype != DDP_DTYPE_F32)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "optim_grad_epilogue: the reduced gradients are %s; the epilogue reads bf16, fp16 "
             "or fp32",
             ddp_dtype_name(src_dtype));
  if (!isfinite(scale))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_grad_epilogue: scale %g", (double)scale);
  /* fp32 may run in place (each element is read before it is written);
   * a widening may not, and neither may a partial overlap */
  const int in_place = src_dtype == DDP_DTYPE_F32 && (const void *)dst == src;
  if (!in_place && ranges_overlap(dst, n * sizeof(float), src, n * ddp_dtype_size(src_dtype)))
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "optim_grad_epilogue: dst and src overlap (only fp32 runs in place, with dst == "
             "src)");
  return DDP_OK;
}

ddp_status_t ddp_optim_check_sum_partials(const float *sumsq, const double *partials, int n) {
  if (!sumsq || !partials)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_sum_partials: NULL %s", !sumsq ? "sumsq" : "partials");
  if (n < 1) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_sum_partials: n = %d (need >= 1)", n);
  return DDP_OK;
}

/* ---- backend-neutral entry points -------------------------------------- */

struct ddp_optim_plan {
  ddp_backend_t *be;
  const ddp_optim_ops_t *ops; /* be's optimizer table */
  size_t n;
  int n_tensors;
  void *impl;       /* the backend's part */
  int lamb_n_ranks; /* LAMB groups given (ddp_optim_plan_set_lamb_groups): > 0 */
  int lamb_stride;
};

/* The backend's optimizer table, or an error naming what is missing. */
static ddp_status_t optim_ops(const ddp_backend_t *be, const char *what,
                              const ddp_optim_ops_t **ops) {
  if (!be || !be->ops) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: NULL backend", what);
  if (!be->ops->optim)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "%s: backend '%s' has no optimizer", what,
             be->ops->name ? be->ops->name : "?");
  *ops = be->ops->optim;
  return DDP_OK;
}

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
  DDP_CHECK(check_config(cfg));
  DDP_CHECK(check_tensors("optim plan", tensors, n_tensors, n));
  const ddp_optim_ops_t *ops;
  DDP_CHECK(optim_ops(be, "optim plan", &ops));
  ddp_optim_plan_t *p = calloc(1, sizeof *p);
  if (!p) DDP_FAIL(DDP_ERR_OOM, "optim plan: out of host memory");
  *p = (ddp_optim_plan_t){.be = be, .ops = ops, .n = n, .n_tensors = n_tensors};
  ddp_status_t st = ops->plan_create(be, tensors, n_tensors, n, &p->impl);
  if (st != DDP_OK) {
    free(p);
    return st;
  }
  *out = p;
  return DDP_OK;
}

void ddp_optim_plan_destroy(ddp_optim_plan_t *plan) {
  if (!plan) return;
  plan->ops->plan_destroy(plan->be, plan->impl);
  free(plan);
}

ddp_status_t ddp_optim_grad_sumsq(ddp_backend_t *be, float *sumsq, const float *grads, size_t n,
                                  float scale, ddp_stream_t s) {
  if (!be || !be->ops) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_grad_sumsq: NULL backend");
  DDP_CHECK(ddp_optim_check_grad_sumsq(sumsq, grads, scale));
  const ddp_optim_ops_t *ops;
  DDP_CHECK(optim_ops(be, "optim_grad_sumsq", &ops));
  return ops->grad_sumsq(be, sumsq, grads, n, scale, s);
}

ddp_status_t ddp_optim_grad_epilogue(ddp_backend_t *be, float *dst, const void *src,
                                     ddp_dtype_t src_dtype, size_t n, float scale, double *partial,
                                     ddp_stream_t s) {
  if (!be || !be->ops) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_grad_epilogue: NULL backend");
  DDP_CHECK(ddp_optim_check_grad_epilogue(dst, src, src_dtype, n, scale, partial));
  const ddp_optim_ops_t *ops;
  DDP_CHECK(optim_ops(be, "optim_grad_epilogue", &ops));
  return ops->grad_epilogue(be, dst, src, src_dtype, n, scale, partial, s);
}

ddp_status_t ddp_optim_sum_partials(ddp_backend_t *be, float *sumsq, const double *partials, int n,
                                    ddp_stream_t s) {
  if (!be || !be->ops) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_sum_partials: NULL backend");
  DDP_CHECK(ddp_optim_check_sum_partials(sumsq, partials, n));
  const ddp_optim_ops_t *ops;
  DDP_CHECK(optim_ops(be, "optim_sum_partials", &ops));
  return ops->sum_partials(be, sumsq, partials, n, s);
}

ddp_status_t ddp_optim_step(ddp_backend_t *be, ddp_optim_plan_t *plan,
                            const ddp_optim_step_args_t *args, ddp_stream_t s) {
  if (!plan) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: NULL plan");
  if (plan->be != be)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_step: the plan was made for another backend");
  DDP_CHECK(ddp_optim_check_step(args));
  if (args->n != plan->n || args->n_tensors != plan->n_tensors)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "optim_step: the plan was made for %zu parameters in %d tensors, the step has %zu "
             "in %d",
             plan->n, plan->n_tensors, args->n, args->n_tensors);
  /* the plan holds the table it was made with: the backend had one */
  return plan->ops->step(be, plan->impl, args, s);
}

ddp_status_t ddp_optim_plan_skipped_steps(ddp_optim_plan_t *plan, int64_t *count) {
  if (!plan || !count) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim plan: NULL argument");
  return plan->ops->skipped_steps(plan->be, plan->impl, count);
}

/* ---- LAMB over a shard --------------------------------------------------- */

/* The groups' rules (optim/optim.h), for a plan of n_pieces pieces. */
static ddp_status_t check_lamb_groups(const ddp_optim_lamb_groups_t *g, int n_pieces) {
  const char *who = "optim lamb groups";
  if (!g || !g->begin || !g->index)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: NULL %s", who,
             !g          ? "groups"
             : !g->begin ? "begin"
                         : "index");
  if (g->n_ranks < 1 || g->rank < 0 || g->rank >= g->n_ranks)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: rank %d of %d ranks", who, g->rank, g->n_ranks);
  if (g->first < 0 || g->stride - g->first < n_pieces ||
      (int64_t)g->stride * g->n_ranks > INT32_MAX / 2)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "%s: stride %d for %d pieces from %d on %d ranks (need >= %d pieces, "
             "and 2 x stride x ranks within int32)",
             who, g->stride, n_pieces, g->first, g->n_ranks, g->first + n_pieces);
  if (g->begin[0] != 0) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: begin[0] = %d, not 0", who, g->begin[0]);
  const int64_t total = (int64_t)g->stride * g->n_ranks;
  for (int j = 0; j < n_pieces; ++j) {
    if (g->begin[j + 1] <= g->begin[j])
      DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: piece %d has no group (begin %d, %d)", who, j, g->begin[j],
               g->begin[j + 1]);
    const int64_t self = (int64_t)g->rank * g->stride + g->first + j;
    int has_self = 0;
    for (int32_t k = g->begin[j]; k < g->begin[j + 1]; ++k) {
      const int32_t x = g->index[k];
      if (x < 0 || x >= total)
        DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: piece %d: index %d outside [0, %lld)", who, j, x,
                 (long long)total);
      if (k > g->begin[j] && x <= g->index[k - 1])
        DDP_FAIL(DDP_ERR_INVALID_ARG,
                 "%s: piece %d: indices %d, %d are not ascending (the order of the sums)", who, j,
                 g->index[k - 1], x);
      has_self |= x == self;
    }
    if (!has_self)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: piece %d: its group lacks the piece itself (%lld)", who, j,
               (long long)self);
  }
  return DDP_OK;
}

/* The backend's LAMB part, or why not. */
static ddp_status_t lamb_ready(const ddp_optim_plan_t *plan, const char *what, int need_groups) {
  if (!plan) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: NULL plan", what);
  if (!plan->ops->lamb_sums || !plan->ops->lamb_groups)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "%s: backend '%s' has no sharded LAMB", what,
             plan->be->ops->name ? plan->be->ops->name : "?");
  if (need_groups && plan->lamb_n_ranks < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "%s: the plan has no LAMB groups (ddp_optim_plan_set_lamb_groups first)", what);
  return DDP_OK;
}

ddp_status_t ddp_optim_plan_set_lamb_groups(ddp_optim_plan_t *plan,
                                            const ddp_optim_lamb_groups_t *groups) {
  DDP_CHECK(lamb_ready(plan, "optim lamb groups", 0));
  if (plan->lamb_n_ranks > 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim lamb groups: the plan has its groups already");
  DDP_CHECK(check_lamb_groups(groups, plan->n_tensors));
  DDP_CHECK(plan->ops->lamb_groups(plan->be, plan->impl, groups));
  plan->lamb_n_ranks = groups->n_ranks;
  plan->lamb_stride = groups->stride;
  return DDP_OK;
}

/* A part's common checks: the plan, the backend, the step's arguments. */
static ddp_status_t check_lamb_part(ddp_backend_t *be, const ddp_optim_plan_t *plan,
                                    const ddp_optim_step_args_t *args, const char *what) {
  DDP_CHECK(lamb_ready(plan, what, 1));
  if (plan->be != be)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: the plan was made for another backend", what);
  DDP_CHECK(ddp_optim_check_step(args));
  if (args->cfg->kind != DDP_OPTIM_KIND_LAMB)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: the optimizer is %s, not lamb", what,
             ddp_optim_kind_name(args->cfg->kind));
  if (args->n != plan->n || args->n_tensors != plan->n_tensors)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "%s: the plan was made for %zu parameters in %d tensors, the step has %zu in %d", what,
             plan->n, plan->n_tensors, args->n, args->n_tensors);
  return DDP_OK;
}

ddp_status_t ddp_optim_lamb_sums(ddp_backend_t *be, ddp_optim_plan_t *plan,
                                 const ddp_optim_step_args_t *args, double *sums, ddp_stream_t s) {
  DDP_CHECK(check_lamb_part(be, plan, args, "optim_lamb_sums"));
  if (!sums) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_lamb_sums: NULL sums");
  return plan->ops->lamb_sums(be, plan->impl, args, sums, s);
}

ddp_status_t ddp_optim_lamb_ratios(ddp_backend_t *be, ddp_optim_plan_t *plan, float lr,
                                   const double *all_sums, float *ratio, ddp_stream_t s) {
  DDP_CHECK(lamb_ready(plan, "optim_lamb_ratios", 1));
  if (plan->be != be)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_lamb_ratios: the plan was made for another backend");
  if (!all_sums || !ratio)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_lamb_ratios: NULL %s", !all_sums ? "all_sums" : "ratio");
  if (!isfinite(lr) || lr < 0.0f)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_lamb_ratios: lr %g must be finite and >= 0", (double)lr);
  return plan->ops->lamb_ratios(be, plan->impl, lr, all_sums, ratio, s);
}

ddp_status_t ddp_optim_lamb_apply(ddp_backend_t *be, ddp_optim_plan_t *plan,
                                  const ddp_optim_step_args_t *args, const float *ratio,
                                  ddp_stream_t s) {
  DDP_CHECK(check_lamb_part(be, plan, args, "optim_lamb_apply"));
  if (!ratio) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_lamb_apply: NULL ratio");
  return plan->ops->lamb_apply(be, plan->impl, args, ratio, s);
}
