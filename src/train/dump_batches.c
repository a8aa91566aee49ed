/* --dump-batches (see dump_batches.h). */
#include "train/dump_batches.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/safetensors.h"

enum { NAME_LEN = 48 };

/* The two tensors of micro-batch b as entries k0, k0 + 1, with copies of
 * its data (the batch buffer is refilled for the next one). */
static ddp_status_t add_batch(const ddp_train_batch_t *b, const ddp_train_data_t *d, int64_t index,
                              ddp_st_tensor_t *t, char *names, void **data) {
  const int tokens = b->kind == DDP_BATCH_TOKENS;
  const int rows = tokens ? b->tokens.B : b->records.B;
  for (int k = 0; k < 2; ++k) {
    ddp_st_tensor_t e = {.name = names + (size_t)NAME_LEN * (size_t)k, .ndim = 1, .shape = {rows}};
    const void *src;
    if (tokens) {
      e.dtype = DDP_DTYPE_I32;
      e.ndim = 2;
      e.shape[1] = b->tokens.T;
      src = k ? (const void *)b->tokens.targets : (const void *)b->tokens.inputs;
    } else if (k == 0) {
      e.dtype = DDP_DTYPE_F32;
      e.ndim = 1 + d->shape.record_ndim;
      for (int i = 0; i < d->shape.record_ndim; ++i) e.shape[1 + i] = d->shape.record_shape[i];
      src = b->records.inputs;
    } else {
      e.dtype = DDP_DTYPE_I32;
      src = b->records.labels;
    }
    size_t bytes = ddp_dtype_size(e.dtype);
    for (int i = 0; i < e.ndim; ++i) bytes *= (size_t)e.shape[i];
    if (!(data[k] = malloc(bytes ? bytes : 1)))
      DDP_FAIL(DDP_ERR_OOM, "--dump-batches: out of memory");
    memcpy(data[k], src, bytes);
    e.data = data[k];
    snprintf(names + (size_t)NAME_LEN * (size_t)k, NAME_LEN, "batch.%lld.%s", (long long)index,
             k == 0   ? "inputs"
             : tokens ? "targets"
                      : "labels");
    t[k] = e;
  }
  return DDP_OK;
}

ddp_status_t ddp_train_dump_batches(const char *path, const ddp_dist_t *dist, int64_t accum,
                                    int64_t n, const ddp_train_data_t *d, ddp_sampler_t *s,
                                    const ddp_options_t *o) {
  ddp_st_tensor_t *t = calloc((size_t)(2 * n), sizeof *t);
  char *names = calloc((size_t)(2 * n), NAME_LEN);
  void **data = calloc((size_t)(2 * n), sizeof *data);
  char file[1100];
  if (dist->world > 1)
    snprintf(file, sizeof file, "%s.rank%d", path, dist->rank);
  else
    snprintf(file, sizeof file, "%s", path);
  ddp_train_batch_t b = {.kind = d->kind};
  ddp_status_t st = DDP_OK;
  if (!t || !names || !data) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "--dump-batches: out of memory");
  DDP_CHECK_GOTO(ddp_train_batch_init(&b, d, NULL, o, s), st, out);
  for (int64_t i = 0; i < n; ++i) {
    DDP_CHECK_GOTO(
        ddp_train_batch_fill(&b, d, DDP_SPLIT_TRAIN, s, i / accum, dist->rank, (int)(i % accum)),
        st, out);
    DDP_CHECK_GOTO(
        add_batch(&b, d, i, t + 2 * i, names + (size_t)NAME_LEN * (size_t)(2 * i), data + 2 * i),
        st, out);
  }
  char accum_text[24];
  snprintf(accum_text, sizeof accum_text, "%lld", (long long)accum);
  const char *meta[] = {"accum", accum_text, NULL};
  DDP_CHECK_GOTO(ddp_safetensors_write(file, t, (int)(2 * n), meta), st, out);
  DDP_LOG_INFO("wrote %lld micro-batches to %s", (long long)n, file);
out:
  ddp_train_batch_destroy(&b);
  for (int64_t j = 0; data && j < 2 * n; ++j) free(data[j]);
  free(data);
  free(names);
  free(t);
  return st;
}
