/* Non-finite detection and NaN fault injection (see anomaly.h). */
#include "train/anomaly.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "core/env.h"

/* n elements of dtype at x (backend memory) into a->host as fp32; half
 * values land in the upper part of the buffer first and are widened. */
static ddp_status_t to_host_typed(ddp_anomaly_t *a, const void *x, ddp_dtype_t dtype, size_t n) {
  const size_t need = dtype == DDP_DTYPE_F32 ? n : 2 * n;
  if (need > a->host_n) {
    float *p = realloc(a->host, need * sizeof *p);
    if (!p) DDP_FAIL(DDP_ERR_OOM, "anomaly check: out of host memory");
    a->host = p;
    a->host_n = need;
  }
  void *dst = dtype == DDP_DTYPE_F32 ? (void *)a->host : (void *)(a->host + n);
  DDP_CHECK(ddp_backend_copy(a->be, dst, x, n * ddp_dtype_size(dtype), DDP_COPY_KIND_DEVICE_TO_HOST,
                             NULL));
  DDP_CHECK(ddp_backend_sync(a->be, NULL));
  return dtype == DDP_DTYPE_F32 ? DDP_OK : ddp_convert_host(a->host, DDP_DTYPE_F32, dst, dtype, n);
}

static ddp_status_t to_host(ddp_anomaly_t *a, const float *x, size_t n) {
  return to_host_typed(a, x, DDP_DTYPE_F32, n);
}

/* Index of the first non-finite of the n values now in a->host, or -1. */
static int64_t first_bad(const ddp_anomaly_t *a, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!isfinite(a->host[i])) return (int64_t)i;
  return -1;
}

static ddp_status_t poison(ddp_anomaly_t *a, float *x, const char *what) {
  const float nan = NAN;
  DDP_CHECK(ddp_backend_copy(a->be, x, &nan, sizeof nan, DDP_COPY_KIND_HOST_TO_DEVICE, NULL));
  DDP_LOG_WARN("fault injection: NaN put into %s at step %lld", what, (long long)a->step + 1);
  return DDP_OK;
}

static ddp_status_t on_watch(void *ctx, const char *what, void *x, ddp_dtype_t dtype, size_t n) {
  ddp_anomaly_t *a = ctx;
  static const char k_grad[] = "backward: gradient of ";
  if (a->step == a->fault_step && a->fault_grad && strncmp(what, k_grad, sizeof k_grad - 1) == 0 &&
      strcmp(what + sizeof k_grad - 1, a->fault_name) == 0)
    DDP_CHECK(poison(a, x, what + 10));
  if (!a->detect) return DDP_OK;
  DDP_CHECK(to_host_typed(a, x, dtype, n));
  const int64_t i = first_bad(a, n);
  if (i >= 0)
    DDP_FAIL(DDP_ERR_NUMERIC,
             "step %lld: non-finite value (%g at element %lld of %zu) in %s: the first tensor "
             "that went non-finite (--detect-anomaly)",
             (long long)a->step + 1, (double)a->host[i], (long long)i, n, what);
  return DDP_OK;
}

ddp_status_t ddp_anomaly_init(ddp_anomaly_t *a, const ddp_options_t *o, ddp_backend_t *be,
                              ddp_model_t *model) {
  *a = (ddp_anomaly_t){.be = be, .model = model, .detect = o->detect_anomaly, .fault_step = -1};
  double step = 0;
  DDP_CHECK(ddp_env_get_double(DDP_ENV_FAULT_NAN_STEP, &step));
  if (step >= 1) {
    const char *spec = ddp_env_get(DDP_ENV_FAULT_NAN_TENSOR);
    const char *colon = strchr(spec, ':');
    a->fault_grad = colon && strncmp(spec, "grad:", 5) == 0;
    if (!colon || (!a->fault_grad && strncmp(spec, "weight:", 7) != 0))
      DDP_FAIL(DDP_ERR_INVALID_ARG, "%s='%s': expected grad:NAME or weight:NAME",
               ddp_env_name(DDP_ENV_FAULT_NAN_TENSOR), spec);
    snprintf(a->fault_name, sizeof a->fault_name, "%s", colon + 1);
    const int i = ddp_param_find(model->tensors, model->n_tensors, a->fault_name);
    if (i >= 0) a->fault_tensor = &model->tensors[i];
    if (!a->fault_tensor)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: the model has no parameter '%s'",
               ddp_env_name(DDP_ENV_FAULT_NAN_TENSOR), a->fault_name);
    a->fault_step = (int64_t)step - 1;
  }
  if (a->detect || a->fault_step >= 0) {
    model->watch_fn = on_watch;
    model->watch_ctx = a;
  }
  if (a->detect)
    DDP_LOG_INFO("--detect-anomaly: every activation and gradient is checked for NaN/inf (slow)");
  return DDP_OK;
}

void ddp_anomaly_destroy(ddp_anomaly_t *a) {
  free(a->host);
  a->host = NULL;
  a->host_n = 0;
}

ddp_status_t ddp_anomaly_begin_step(ddp_anomaly_t *a, int64_t step) {
  a->step = step;
  if (step == a->fault_step && !a->fault_grad)
    DDP_CHECK(poison(a, a->model->params + a->fault_tensor->offset, a->fault_name));
  return DDP_OK;
}

ddp_status_t ddp_anomaly_check_grads(ddp_anomaly_t *a, const float *grad_sumsq) {
  DDP_CHECK(to_host(a, grad_sumsq, 1));
  const float sumsq = a->host[0];
  if (isfinite(sumsq)) return DDP_OK;
  const char *name = "(none: the norm overflowed)";
  DDP_CHECK(to_host(a, a->model->grads, a->model->n_params));
  const int64_t bad = first_bad(a, a->model->n_params);
  const int at = bad >= 0 ? ddp_param_at(a->model->tensors, a->model->n_tensors, (size_t)bad) : -1;
  if (at >= 0) name = a->model->tensors[at].name;
  DDP_FAIL(DDP_ERR_NUMERIC,
           "step %lld: the gradient is not finite (squared norm %g); first non-finite tensor in "
           "backward order: %s. The weights of this step were not updated and no checkpoint of "
           "it is written; --detect-anomaly names the layer that produced it",
           (long long)a->step + 1, (double)sumsq, name);
}
