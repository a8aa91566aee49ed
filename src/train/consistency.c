/* Start-up agreement and replica hashes (see consistency.h). */
#include "train/consistency.h"

#include <stdio.h>
#include <string.h>

#include "ddptrain/check.h"
#include "core/hash.h"

static uint64_t layout_hash(const ddp_model_t *m) {
  uint64_t h = DDP_FNV1A64_INIT;
  for (int i = 0; i < m->n_tensors; ++i) {
    const ddp_param_t *t = &m->tensors[i];
    h = ddp_fnv1a64(h, t->name, strlen(t->name) + 1);
    h = ddp_fnv1a64(h, &t->ndim, sizeof t->ndim);
    h = ddp_fnv1a64(h, t->shape, sizeof t->shape);
    h = ddp_fnv1a64(h, &t->offset, sizeof t->offset);
  }
  return h;
}

ddp_status_t ddp_train_check_agreement(const ddp_dist_t *dist, const ddp_options_t *o,
                                       const ddp_model_t *model, const ddp_train_data_t *data) {
  if (dist->world == 1) return DDP_OK;
  ddp_status_t st = DDP_OK;
  char what[96];
  for (int i = 0; i < ddp_options_count(); ++i) {
    if (!ddp_options_must_agree(i)) continue;
    snprintf(what, sizeof what, "flag --%s (hash of its value)", ddp_options_name(i));
    if (ddp_dist_agree_u64(dist, what, ddp_options_value_hash(o, i)) != DDP_OK)
      st = DDP_ERR_MISMATCH;
  }
  if (ddp_dist_agree_u64(dist, "the parameter layout (tensor names, shapes, order)",
                         layout_hash(model)) != DDP_OK)
    st = DDP_ERR_MISMATCH;
  const int tokens = data->kind == DDP_BATCH_TOKENS;
  if (ddp_dist_agree_u64(dist,
                         tokens ? "the training data (shard names, sizes, token counts)"
                                : "the training records (shape, classes, contents)",
                         ddp_train_data_fingerprint(data, DDP_SPLIT_TRAIN)) != DDP_OK)
    st = DDP_ERR_MISMATCH;
  if (data->have_val &&
      ddp_dist_agree_u64(dist,
                         tokens ? "the validation data (shard names, sizes, token counts)"
                                : "the validation records (shape, classes, contents)",
                         ddp_train_data_fingerprint(data, DDP_SPLIT_VAL)) != DDP_OK)
    st = DDP_ERR_MISMATCH;
  if (st != DDP_OK)
    DDP_FAIL(st,
             "ranks were started with different settings or data (see above); every rank "
             "of a data-parallel job must run the same command on the same files");
  return DDP_OK;
}

ddp_status_t ddp_train_params_hash(ddp_model_t *model, float *host, uint64_t *hash) {
  DDP_CHECK(ddp_model_params_to_host(model, host));
  *hash = ddp_fnv1a64(DDP_FNV1A64_INIT, host, model->n_params * sizeof *host);
  return DDP_OK;
}
