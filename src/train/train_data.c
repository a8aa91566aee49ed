/* Data sources and sampler settings of a training run (see train_data.h). */
#include "train/train_data.h"

#include <string.h>

#include "ddptrain/check.h"

ddp_status_t ddp_train_data_load(const ddp_options_t *o, ddp_train_data_t *d) {
  memset(d, 0, sizeof *d);
  const int T = (int)o->seq_len;
  if (o->data[0]) {
    DDP_CHECK(ddp_corpus_open(&d->train, o->data, T));
    if (o->val_data[0]) {
      DDP_CHECK(ddp_corpus_open(&d->val, o->val_data, T));
      if (d->val.vocab != d->train.vocab || d->val.eot != d->train.eot)
        DDP_FAIL(DDP_ERR_FORMAT, "--val-data has vocabulary %d / EOT %d but --data has %d / %d",
                 d->val.vocab, d->val.eot, d->train.vocab, d->train.eot);
      d->have_val = 1;
    }
    return DDP_OK;
  }
  if (o->val_data[0])
    DDP_FAIL(DDP_ERR_INVALID_ARG, "--val-data needs --data (the built-in set has its own split)");
  DDP_CHECK(ddp_builtin_corpus(&d->train, (uint64_t)o->seed, DDP_SPLIT_TRAIN,
                               DDP_BUILTIN_TRAIN_DOCS, T, T));
  DDP_CHECK(
      ddp_builtin_corpus(&d->val, (uint64_t)o->seed, DDP_SPLIT_VAL, DDP_BUILTIN_VAL_DOCS, T, T));
  d->have_val = 1;
  return DDP_OK;
}

void ddp_train_data_destroy(ddp_train_data_t *d) {
  ddp_corpus_destroy(&d->val);
  ddp_corpus_destroy(&d->train);
  d->have_val = 0;
}

ddp_status_t ddp_train_model_config(const ddp_options_t *o, int vocab, ddp_gpt_config_t *mc) {
  *mc = (ddp_gpt_config_t){.n_layer = (int)o->n_layer,
                           .n_head = (int)o->n_head,
                           .n_embd = (int)o->n_embd,
                           .max_seq_len = (int)o->seq_len,
                           .vocab = vocab};
  return ddp_gpt_config_validate(mc);
}

ddp_status_t ddp_train_sampler_config(const ddp_options_t *o, const ddp_gpt_config_t *mc, int world,
                                      ddp_sampler_config_t *cfg) {
  if (o->tokens_per_batch < o->seq_len)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "--tokens-per-batch %lld is smaller than --seq-len %lld: a full "
             "sequence would not fit in a micro-batch",
             (long long)o->tokens_per_batch, (long long)o->seq_len);
  memset(cfg, 0, sizeof *cfg);
  DDP_CHECK(ddp_sampler_kind_parse(o->sampler, &cfg->kind));
  cfg->seed = (uint64_t)o->seed;
  cfg->world = world;
  cfg->accum = (int)o->accum;
  cfg->tokens_per_batch = o->tokens_per_batch;
  /* Rows of one token are possible but useless; half the budget bounds the
   * activation arena's per-row tables without limiting real batches. */
  cfg->max_rows = (int)(o->tokens_per_batch / 2);
  cfg->chunk = o->bucket_chunk;
  ddp_gpt_cost_model(mc, &cfg->cost_a, &cfg->cost_b);
  return DDP_OK;
}
