/* A model's buffers in an export (internal; src/model/model.c): for a
 * model's own export_weights, which writes its parameters under PyTorch
 * names and appends its buffers as the generic export does: MEAN buffers
 * as F32 under their table's shapes, COUNT buffers as I64 (PyTorch keeps
 * num_batches_tracked as an int64 scalar: an entry of one element is
 * written with shape [], a larger one with its shape). Use:
 *
 *   ddp_model_buffer_export_t bx;
 *   DDP_CHECK(ddp_model_buffer_export_prepare(m, &bx));
 *   ... tensors[n + i] = bx.tensors[i] for i < bx.n, then
 *       ddp_safetensors_write(path, tensors, n + bx.n, meta) ...
 *   ddp_model_buffer_export_free(&bx);
 *
 * (after the runtime has made the buffers consistent across ranks: the
 * trainer averages them before it calls ddp_model_export). */
#ifndef DDPTRAIN_MODEL_BUFFERS_H
#define DDPTRAIN_MODEL_BUFFERS_H

#include "ddptrain/model.h"
#include "ddptrain/safetensors.h"

typedef struct ddp_model_buffer_export {
  ddp_st_tensor_t *tensors; /* n entries, named as the buffer table; data in host memory
                               owned by this struct */
  int n;
  float *values;   /* the buffers, copied from backend memory */
  int64_t *counts; /* the COUNT entries as int64 */
} ddp_model_buffer_export_t;

/* Copies m's buffers to host memory and describes them for
 * ddp_safetensors_write (n = 0 for a model without buffers). A COUNT value
 * that is not a whole number >= 0 is an error naming the buffer. */
ddp_status_t ddp_model_buffer_export_prepare(ddp_model_t *m, ddp_model_buffer_export_t *out);
void ddp_model_buffer_export_free(ddp_model_buffer_export_t *bx);

#endif
