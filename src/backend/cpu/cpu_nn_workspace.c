/* The fp32 workspace of the CPU half-precision ops (cpu_nn_dtype.c).
 *
 * Under bf16/fp16 the ops widen their half operands into fp32 so that the
 * fp32 kernels (and OpenBLAS's sgemm) do the arithmetic. That space is
 * reserved once per backend, before the step loop (nn.h's reserve()), and
 * the ops only look it up: the training step never allocates. It hangs off
 * the CPU backend's private state (be->impl, which the CPU backend has no
 * other use for); reserve/release pairs count holders so two models on one
 * backend share it and the last release frees it, and the backend's
 * shutdown frees what is left. Like the backend itself, reserve and release
 * are not thread-safe; they run at set-up and tear-down. */
#include <stdlib.h>

#include "backend/cpu/cpu_nn_impl.h"
#include "ddptrain/check.h"

typedef struct cpu_workspace {
  float *buf;
  size_t floats;
  int holders;
} cpu_workspace_t;

ddp_status_t ddp_cpu_nn_reserve_floats(ddp_backend_t *be, size_t floats) {
  if (be->device != -1) /* be->impl is another backend's state there */
    DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: the CPU ops need the CPU backend, not device %d",
             be->device);
  cpu_workspace_t *w = be->impl;
  if (!w) {
    w = calloc(1, sizeof *w);
    if (!w) DDP_FAIL(DDP_ERR_OOM, "nn: cannot allocate the half-precision workspace record");
    be->impl = w;
  }
  if (floats > w->floats) {
    float *grown = floats <= SIZE_MAX / sizeof(float) ? malloc(floats * sizeof(float)) : NULL;
    if (!grown)
      DDP_FAIL(DDP_ERR_OOM, "nn: cannot allocate %zu bytes of half-precision workspace",
               floats * sizeof(float));
    free(w->buf);
    w->buf = grown;
    w->floats = floats;
  }
  w->holders++;
  return DDP_OK;
}

ddp_status_t ddp_cpu_nn_workspace(ddp_backend_t *be, size_t floats, const char *op, float **ws) {
  const cpu_workspace_t *w = be->impl;
  const size_t have = w ? w->floats : 0;
  *ws = w ? w->buf : NULL;
  if (have < floats)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "nn: %s in half precision needs %zu floats of workspace, %zu reserved (reserve() "
             "before the step loop)",
             op, floats, have);
  return DDP_OK;
}

void ddp_cpu_nn_workspace_free(ddp_backend_t *be) {
  cpu_workspace_t *w = be->impl;
  if (!w) return;
  free(w->buf);
  free(w);
  be->impl = NULL;
}

void ddp_cpu_nn_release(ddp_backend_t *be) {
  cpu_workspace_t *w = be->impl;
  if (w && --w->holders <= 0) ddp_cpu_nn_workspace_free(be);
}
