/* ddpsample's model: a GPT created on a backend with the weights of an
 * export (--export FILE, read by the --init-from loader,
 * model/gpt_init_from.h) or of a training checkpoint (--checkpoint FILE, or
 * DIR for its newest), its architecture taken from the file. */
#ifndef DDPTRAIN_TOOLS_SAMPLE_LOAD_H
#define DDPTRAIN_TOOLS_SAMPLE_LOAD_H

#include "ddptrain/backend.h"
#include "ddptrain/model.h"
#include "ddptrain/options.h"
#include "model/gpt.h"

typedef struct sample_model {
  ddp_options_t opts; /* the flags the model was created with (it borrows them) */
  ddp_model_t *model;
  char path[1024]; /* the file read */
} sample_model_t;

/* Exactly one of export_path, ckpt_path is non-NULL. */
ddp_status_t sample_model_load(sample_model_t *sm, ddp_backend_t *be, const char *export_path,
                               const char *ckpt_path);
void sample_model_close(sample_model_t *sm);
ddp_gpt_t *sample_model_gpt(const sample_model_t *sm);

#endif
