/* Precision names and the dynamic loss scaler's state machine (see
 * amp/amp.h).
 *
 * The scaler runs on the host: its input is one flag per step, which the
 * trainer takes from the gradient-norm pass it runs anyway (an inf or NaN
 * anywhere makes the sum of squares non-finite), so the state machine costs
 * nothing on the data. Every rank feeds it the same flag (computed from the
 * reduced gradients), so every rank's scaler holds the same state. */
#include "amp/amp.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ddptrain/check.h"
#include "core/ascii.h"

static const struct {
  const char *name;
  ddp_precision_t precision;
  ddp_dtype_t dtype;
} k_precisions[] = {
    {"fp32", DDP_PRECISION_FP32, DDP_DTYPE_F32},
    {"bf16", DDP_PRECISION_BF16, DDP_DTYPE_BF16},
    {"fp16", DDP_PRECISION_FP16, DDP_DTYPE_F16},
};
#define N_PRECISIONS (sizeof k_precisions / sizeof k_precisions[0])

ddp_status_t ddp_precision_parse(const char *text, ddp_precision_t *precision) {
  if (!text || !precision) return DDP_ERR_INVALID_ARG;
  for (size_t i = 0; i < N_PRECISIONS; ++i)
    if (ddp_ascii_ieq(text, k_precisions[i].name)) {
      *precision = k_precisions[i].precision;
      return DDP_OK;
    }
  return DDP_ERR_INVALID_ARG;
}

const char *ddp_precision_name(ddp_precision_t precision) {
  for (size_t i = 0; i < N_PRECISIONS; ++i)
    if (k_precisions[i].precision == precision) return k_precisions[i].name;
  return "invalid";
}

ddp_dtype_t ddp_precision_dtype(ddp_precision_t precision) {
  for (size_t i = 0; i < N_PRECISIONS; ++i)
    if (k_precisions[i].precision == precision) return k_precisions[i].dtype;
  return DDP_DTYPE_F32;
}

ddp_loss_scaler_config_t ddp_loss_scaler_defaults(void) {
  return (ddp_loss_scaler_config_t){.init_scale = 65536.0f,
                                    .growth_factor = 2.0f,
                                    .backoff_factor = 0.5f,
                                    .growth_interval = 2000,
                                    .min_scale = 1.0f};
}

ddp_status_t ddp_loss_scaler_init(ddp_loss_scaler_t *s, const ddp_loss_scaler_config_t *cfg,
                                  int enabled) {
  if (!s || !cfg) DDP_FAIL(DDP_ERR_INVALID_ARG, "loss scaler: NULL argument");
  if (enabled) {
    if (!(cfg->init_scale > 0.0f) || !isfinite(cfg->init_scale))
      DDP_FAIL(DDP_ERR_INVALID_ARG, "--loss-scale-init %g must be finite and > 0",
               (double)cfg->init_scale);
    if (!(cfg->growth_factor > 1.0f) || !isfinite(cfg->growth_factor))
      DDP_FAIL(DDP_ERR_INVALID_ARG, "--loss-scale-growth %g must be finite and > 1",
               (double)cfg->growth_factor);
    if (!(cfg->backoff_factor > 0.0f && cfg->backoff_factor < 1.0f))
      DDP_FAIL(DDP_ERR_INVALID_ARG, "--loss-scale-backoff %g must lie in (0, 1)",
               (double)cfg->backoff_factor);
    if (cfg->growth_interval < 1)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "--loss-scale-window %" PRId64 " must be >= 1",
               cfg->growth_interval);
    if (!(cfg->min_scale >= 0.0f && cfg->min_scale <= cfg->init_scale))
      DDP_FAIL(DDP_ERR_INVALID_ARG, "--loss-scale-min %g must lie in [0, --loss-scale-init %g]",
               (double)cfg->min_scale, (double)cfg->init_scale);
  }
  s->cfg = *cfg;
  s->enabled = enabled != 0;
  s->state = (ddp_loss_scaler_state_t){.scale = enabled ? cfg->init_scale : 1.0f};
  return DDP_OK;
}

float ddp_loss_scaler_scale(const ddp_loss_scaler_t *s) {
  return s->enabled ? s->state.scale : 1.0f;
}

ddp_status_t ddp_loss_scaler_update(ddp_loss_scaler_t *s, int found_inf, int *skip) {
  *skip = 0;
  if (!s->enabled) return DDP_OK;
  ddp_loss_scaler_state_t *st = &s->state;
  if (found_inf) {
    *skip = 1;
    st->skipped_steps++;
    st->growth_tracker = 0;
    st->scale *= s->cfg.backoff_factor;
    if (st->scale < s->cfg.min_scale)
      DDP_FAIL(DDP_ERR_NUMERIC,
               "fp16 loss scale fell to %g, below --loss-scale-min %g, after %" PRId64
               " skipped steps: the gradients overflow even unscaled, so training is "
               "diverging; lower --lr, enable --grad-clip, or use --precision bf16",
               (double)st->scale, (double)s->cfg.min_scale, st->skipped_steps);
    return DDP_OK;
  }
  if (++st->growth_tracker == s->cfg.growth_interval) {
    const float grown = st->scale * s->cfg.growth_factor;
    if (isfinite(grown)) st->scale = grown; /* GradScaler keeps the scale when growth overflows */
    st->growth_tracker = 0;
  }
  return DDP_OK;
}

void ddp_loss_scaler_get_state(const ddp_loss_scaler_t *s, ddp_loss_scaler_state_t *state) {
  *state = s->state;
}

ddp_status_t ddp_loss_scaler_set_state(ddp_loss_scaler_t *s, const ddp_loss_scaler_state_t *state) {
  if (!s || !state) DDP_FAIL(DDP_ERR_INVALID_ARG, "loss scaler: NULL argument");
  if (!(state->scale > 0.0f) || !isfinite(state->scale))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "loss scaler state: scale %g must be finite and > 0",
             (double)state->scale);
  if (s->enabled && (state->growth_tracker < 0 || state->growth_tracker >= s->cfg.growth_interval))
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "loss scaler state: growth_tracker %" PRId64 " is outside [0, %" PRId64 ")",
             state->growth_tracker, s->cfg.growth_interval);
  if (state->skipped_steps < 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "loss scaler state: skipped_steps %" PRId64 " is negative",
             state->skipped_steps);
  s->state = *state;
  return DDP_OK;
}

ddp_status_t ddp_loss_scaler_state_format(const ddp_loss_scaler_state_t *state, char *buf,
                                          size_t len) {
  /* %.9g: nine significant digits give every float back exactly. */
  const int n = snprintf(buf, len, "scale=%.9g growth_tracker=%" PRId64 " skipped_steps=%" PRId64,
                         (double)state->scale, state->growth_tracker, state->skipped_steps);
  return n < 0 || (size_t)n >= len ? DDP_ERR_INVALID_ARG : DDP_OK;
}

ddp_status_t ddp_loss_scaler_state_parse(const char *text, ddp_loss_scaler_state_t *state) {
  if (!text || !state) return DDP_ERR_INVALID_ARG;
  double scale;
  int64_t tracker, skipped;
  int used = 0;
  if (sscanf(text, "scale=%lf growth_tracker=%" SCNd64 " skipped_steps=%" SCNd64 "%n", &scale,
             &tracker, &skipped, &used) != 3 ||
      text[used] != '\0')
    return DDP_ERR_INVALID_ARG;
  *state = (ddp_loss_scaler_state_t){
      .scale = (float)scale, .growth_tracker = tracker, .skipped_steps = skipped};
  return DDP_OK;
}
