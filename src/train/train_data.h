/* The trainer's data (internal): the corpora named by the options (shard
 * globs or the built-in task set) and the sampler configuration derived from
 * the options and the model, shared by training and --plan-only. */
#ifndef DDPTRAIN_TRAIN_DATA_H
#define DDPTRAIN_TRAIN_DATA_H

#include "ddptrain/data.h"
#include "ddptrain/gpt.h"
#include "ddptrain/options.h"
#include "ddptrain/sampler.h"

typedef struct ddp_train_data {
  ddp_corpus_t train, val;
  int have_val;
} ddp_train_data_t;

/* Loads --data/--val-data (or the built-in splits) indexed for --seq-len. */
ddp_status_t ddp_train_data_load(const ddp_options_t *o, ddp_train_data_t *d);
void ddp_train_data_destroy(ddp_train_data_t *d);

/* The model configuration of the options with the data's vocabulary. */
ddp_status_t ddp_train_model_config(const ddp_options_t *o, int vocab, ddp_gpt_config_t *mc);

/* The training sampler of the options for `world` ranks, costed with the
 * model's FLOP model. */
ddp_status_t ddp_train_sampler_config(const ddp_options_t *o, const ddp_gpt_config_t *mc, int world,
                                      ddp_sampler_config_t *cfg);

#endif
