/* Mixed precision in the training loop (see train/amp_train.h). */
#include "amp/amp_train.h"

#include <math.h>

#include "ddptrain/check.h"
#include "core/ascii.h"
#include "core/env.h"

ddp_status_t ddp_amp_setup(ddp_amp_train_t *a, const ddp_options_t *o, int rank) {
  *a = (ddp_amp_train_t){.fault_rank = -1};
  if (ddp_precision_parse(o->precision, &a->precision) != DDP_OK)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "unknown --precision '%s'", o->precision);
  ddp_precision_t reduce;
  if (ddp_precision_parse(o->grad_reduce_dtype, &reduce) != DDP_OK)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "unknown --grad-reduce-dtype '%s'", o->grad_reduce_dtype);
  a->reduce_dtype = ddp_precision_dtype(reduce);
  const int dynamic =
      ddp_ascii_ieq(o->loss_scaling, "dynamic") ||
      (ddp_ascii_ieq(o->loss_scaling, "auto") && a->precision == DDP_PRECISION_FP16);
  const ddp_loss_scaler_config_t sc = {.init_scale = (float)o->loss_scale_init,
                                       .growth_factor = (float)o->loss_scale_growth,
                                       .backoff_factor = (float)o->loss_scale_backoff,
                                       .growth_interval = o->loss_scale_window,
                                       .min_scale = (float)o->loss_scale_min};
  DDP_CHECK(ddp_loss_scaler_init(&a->scaler, &sc, dynamic));
  double fault_rank = -1, fault_step = 1;
  DDP_CHECK(ddp_env_get_double(DDP_ENV_FAULT_OVERFLOW_RANK, &fault_rank));
  DDP_CHECK(ddp_env_get_double(DDP_ENV_FAULT_OVERFLOW_STEP, &fault_step));
  a->fault_rank = (int)fault_rank;
  a->fault_step = (int64_t)fault_step;
  if (rank == 0 &&
      (a->precision != DDP_PRECISION_FP32 || dynamic || a->reduce_dtype != DDP_DTYPE_F32)) {
    if (dynamic)
      DDP_LOG_INFO(
          "precision: %s, gradients all-reduced in %s; dynamic loss scaling from %g "
          "(x%g after %lld clean steps, x%g and skip on inf/NaN, stop below %g)",
          ddp_precision_name(a->precision), ddp_dtype_name(a->reduce_dtype), (double)sc.init_scale,
          (double)sc.growth_factor, (long long)sc.growth_interval, (double)sc.backoff_factor,
          (double)sc.min_scale);
    else
      DDP_LOG_INFO("precision: %s, gradients all-reduced in %s; no loss scaling",
                   ddp_precision_name(a->precision), ddp_dtype_name(a->reduce_dtype));
  }
  return DDP_OK;
}

float ddp_amp_loss_scale(const ddp_amp_train_t *a) {
  return ddp_loss_scaler_scale(&a->scaler);
}

float ddp_amp_unscale(const ddp_amp_train_t *a) {
  return 1.0f / ddp_loss_scaler_scale(&a->scaler);
}

int64_t ddp_amp_optim_t(const ddp_amp_train_t *a) {
  return a->applied + 1;
}

ddp_status_t ddp_amp_after_step(ddp_amp_train_t *a, ddp_backend_t *be, const float *grad_sumsq,
                                int64_t step) {
  if (!a->scaler.enabled) {
    a->applied++;
    return DDP_OK;
  }
  float sumsq = 0.0f;
  DDP_CHECK(
      ddp_backend_copy(be, &sumsq, grad_sumsq, sizeof sumsq, DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  DDP_CHECK(ddp_backend_sync(be, NULL));
  const float scale = ddp_loss_scaler_scale(&a->scaler);
  int skip = 0;
  DDP_CHECK(ddp_loss_scaler_update(&a->scaler, !isfinite(sumsq), &skip));
  /* Info: every rank decides, rank 0 says so (all ranks with
   * DDPTRAIN_LOG_ALL_RANKS=1, which the overflow test uses). */
  if (skip)
    DDP_LOG_INFO("step %lld: inf/NaN gradients at loss scale %g: step skipped, scale now %g",
                 (long long)step + 1, (double)scale, (double)ddp_loss_scaler_scale(&a->scaler));
  else
    a->applied++;
  return DDP_OK;
}

ddp_status_t ddp_amp_fault_inject(const ddp_amp_train_t *a, ddp_backend_t *be, int rank,
                                  int64_t step, float *grad) {
  if (a->fault_rank != rank || a->fault_step != step + 1) return DDP_OK;
  const float inf = INFINITY;
  DDP_CHECK(ddp_backend_copy(be, grad, &inf, sizeof inf, DDP_COPY_KIND_HOST_TO_DEVICE, NULL));
  DDP_LOG_WARN("fault injection: rank %d overflows a gradient at step %lld", rank,
               (long long)step + 1);
  return DDP_OK;
}
