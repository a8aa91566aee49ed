/* Mixed precision: the precision policy and the dynamic loss scaler.
 *
 * Policy (--precision): fp32 trains in fp32 throughout. bf16 and fp16 keep
 * the master weights, the optimizer state and the parameter gradients in
 * fp32; activations, activation gradients and the compute copy of the
 * weights (written by the optimizer pass) are stored in the half type;
 * matrix products take those half operands and accumulate in fp32;
 * LayerNorm statistics, softmax, the loss and all reductions run in fp32.
 *
 * The loss scaler follows PyTorch's GradScaler: the loss (and so every
 * gradient) is multiplied by `scale`; a step whose reduced gradients hold an
 * inf or NaN is skipped and the scale multiplied by backoff_factor; after
 * growth_interval consecutive clean steps the scale is multiplied by
 * growth_factor. Unlike GradScaler, a scale below min_scale stops training
 * with an error rather than letting a diverging run go on silently.
 *
 * The scaler's state is a small struct with get/set functions and a text
 * form, so a checkpoint can store it (one metadata entry) and restore it. */
#ifndef DDPTRAIN_AMP_H
#define DDPTRAIN_AMP_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/dtype.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ddp_precision {
  DDP_PRECISION_FP32 = 0,
  DDP_PRECISION_BF16 = 1,
  DDP_PRECISION_FP16 = 2
} ddp_precision_t;

/* "fp32" | "bf16" | "fp16" (case-insensitive; silent on bad input). */
ddp_status_t ddp_precision_parse(const char *text, ddp_precision_t *precision);
const char *ddp_precision_name(ddp_precision_t precision);
/* The storage type of activations and compute weights: F32, BF16 or F16. */
ddp_dtype_t ddp_precision_dtype(ddp_precision_t precision);

typedef struct ddp_loss_scaler_config {
  float init_scale;        /* GradScaler: 65536 (2^16) */
  float growth_factor;     /* 2 */
  float backoff_factor;    /* 0.5 */
  int64_t growth_interval; /* 2000 clean steps */
  float min_scale;         /* a backoff below this is an error; 0 = never */
} ddp_loss_scaler_config_t;

/* The defaults above. */
ddp_loss_scaler_config_t ddp_loss_scaler_defaults(void);

/* What a checkpoint saves (metadata key "loss_scaler"). */
typedef struct ddp_loss_scaler_state {
  float scale;            /* the current loss scale */
  int64_t growth_tracker; /* clean steps since the scale last changed, < growth_interval */
  int64_t skipped_steps;  /* steps skipped for inf/NaN gradients since the run began */
} ddp_loss_scaler_state_t;

typedef struct ddp_loss_scaler {
  ddp_loss_scaler_config_t cfg;
  ddp_loss_scaler_state_t state;
  int enabled; /* 0: scale stays 1, no step is ever skipped */
} ddp_loss_scaler_t;

/* Validates cfg (init_scale finite and > 0, growth_factor > 1, backoff_factor
 * in (0, 1), growth_interval >= 1, 0 <= min_scale <= init_scale) and starts at
 * init_scale; a disabled scaler ignores cfg and keeps scale 1. */
ddp_status_t ddp_loss_scaler_init(ddp_loss_scaler_t *s, const ddp_loss_scaler_config_t *cfg,
                                  int enabled);

/* The factor the loss is multiplied by (1 when disabled). */
float ddp_loss_scaler_scale(const ddp_loss_scaler_t *s);

/* After a step's gradients are reduced: found_inf says whether any reduced
 * gradient is inf or NaN (the same on every rank). Sets *skip when the step
 * must not be applied, then moves the state machine. A backoff that takes
 * the scale below min_scale returns DDP_ERR_NUMERIC with a logged message
 * naming the scale and the remedies. Disabled: *skip = 0, nothing changes. */
ddp_status_t ddp_loss_scaler_update(ddp_loss_scaler_t *s, int found_inf, int *skip);

void ddp_loss_scaler_get_state(const ddp_loss_scaler_t *s, ddp_loss_scaler_state_t *state);
/* Rejects (DDP_ERR_INVALID_ARG, nothing changed) a scale that is not finite
 * and > 0, a growth_tracker outside [0, growth_interval), a negative
 * skipped_steps. */
ddp_status_t ddp_loss_scaler_set_state(ddp_loss_scaler_t *s, const ddp_loss_scaler_state_t *state);

/* Text form for checkpoint metadata, exact for every float scale:
 * "scale=65536 growth_tracker=12 skipped_steps=3". Returns DDP_ERR_INVALID_ARG
 * when buf is too small (64 bytes always suffice). */
ddp_status_t ddp_loss_scaler_state_format(const ddp_loss_scaler_state_t *state, char *buf,
                                          size_t len);
/* Parses that form (all three fields, in that order; silent on bad input:
 * the caller names the file). Values are not range-checked here: set_state
 * does that against the configuration. */
ddp_status_t ddp_loss_scaler_state_parse(const char *text, ddp_loss_scaler_state_t *state);

#ifdef __cplusplus
}
#endif
#endif
