/* The models built into the library, registered before any other (see
 * ddptrain/model.h). Each built-in model defines its ops table in its own
 * adapter file. */
#ifndef DDPTRAIN_MODEL_BUILTIN_H
#define DDPTRAIN_MODEL_BUILTIN_H

#include "ddptrain/model.h"

/* --model gpt (src/model/gpt_model.c) */
extern const ddp_model_ops_t ddp_gpt_model_ops;
/* --model resnet (src/model/resnet_model.c) */
extern const ddp_model_ops_t ddp_resnet_model_ops;

/* The built-in models, NULL-terminated. */
const ddp_model_ops_t *const *ddp_builtin_models(void);

#endif
