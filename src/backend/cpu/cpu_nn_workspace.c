/* The fp32 workspace of the CPU half-precision ops (cpu_nn_dtype.c).
 *
 * Under bf16/fp16 the ops widen their half operands into fp32 so that the
 * fp32 kernels (and OpenBLAS's sgemm) do the arithmetic. That space is
 * reserved once per backend, before the step loop (nn.h's reserve()), and
 * the ops only look it up: the training step never allocates. A backend's
 * workspace lives in a small table keyed by the backend, because the ops
 * table is shared by every CPU backend and the backend struct has no slot
 * for layer state; reserve/release pairs count holders so two models on one
 * backend share it and the last release frees it. */
#include <pthread.h>
#include <stdlib.h>

#include "backend/cpu/cpu_nn_impl.h"
#include "ddptrain/check.h"

#define WS_SLOTS 16

typedef struct ws_slot {
  ddp_backend_t *be;
  float *buf;
  size_t floats;
  int holders;
} ws_slot_t;

static ws_slot_t g_slots[WS_SLOTS];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static ws_slot_t *find(ddp_backend_t *be) {
  for (int i = 0; i < WS_SLOTS; ++i)
    if (g_slots[i].be == be) return &g_slots[i];
  return NULL;
}

ddp_status_t ddp_cpu_nn_reserve_floats(ddp_backend_t *be, size_t floats) {
  pthread_mutex_lock(&g_lock);
  ws_slot_t *w = find(be);
  if (!w) w = find(NULL);
  if (!w) {
    pthread_mutex_unlock(&g_lock);
    DDP_FAIL(DDP_ERR_INTERNAL, "nn: more than %d CPU backends hold half-precision workspace",
             WS_SLOTS);
  }
  if (floats > w->floats) {
    float *grown = floats <= SIZE_MAX / sizeof(float) ? malloc(floats * sizeof(float)) : NULL;
    if (!grown) {
      pthread_mutex_unlock(&g_lock);
      DDP_FAIL(DDP_ERR_OOM, "nn: cannot allocate %zu bytes of half-precision workspace",
               floats * sizeof(float));
    }
    free(w->buf);
    w->buf = grown;
    w->floats = floats;
  }
  w->be = be;
  w->holders++;
  pthread_mutex_unlock(&g_lock);
  return DDP_OK;
}

ddp_status_t ddp_cpu_nn_workspace(ddp_backend_t *be, size_t floats, const char *op, float **ws) {
  pthread_mutex_lock(&g_lock);
  const ws_slot_t *w = find(be);
  const size_t have = w ? w->floats : 0;
  *ws = w ? w->buf : NULL;
  pthread_mutex_unlock(&g_lock);
  if (have < floats)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "nn: %s in half precision needs %zu floats of workspace, %zu reserved (reserve() "
             "before the step loop)",
             op, floats, have);
  return DDP_OK;
}

void ddp_cpu_nn_release(ddp_backend_t *be) {
  pthread_mutex_lock(&g_lock);
  ws_slot_t *w = find(be);
  if (w && --w->holders <= 0) {
    free(w->buf);
    *w = (ws_slot_t){0};
  }
  pthread_mutex_unlock(&g_lock);
}
