/* ddptrain --plan-only --scale: the scaling model's report (docs/design.md
 * §6.8). Rank 0 prints, as text or one JSON object (--json), the predicted
 * step time, compute, exposed communication and scaling efficiency on
 * 1, 2, 4, ... 1024 GPUs of --cluster for --zero 0 and 1, the same at the
 * recommendation's world size for a few bucket sizes, and a line
 * "recommend --bucket-mb X --zero Y" with the reason. */
#ifndef DDPTRAIN_SCALE_REPORT_H
#define DDPTRAIN_SCALE_REPORT_H

#include <stdio.h>

#include "ddptrain/model.h"
#include "ddptrain/options.h"
#include "runtime/dist.h"
#include "train/train_data.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The parameter table comes from a model instance on the CPU backend
 * (weights and gradients are allocated, about 8 bytes a parameter, no
 * activations): the model interface gives the table only with one. */
ddp_status_t ddp_scale_report(const ddp_options_t *o, const ddp_dist_t *dist,
                              const ddp_model_ops_t *model, const ddp_train_data_t *d, FILE *out);

#ifdef __cplusplus
}
#endif
#endif
