/* Step arena (see core/arena.h). */
#include "core/arena.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ddptrain/check.h"
#include "core/env.h"

static void set_name(ddp_arena_t *arena, const char *name) {
  snprintf(arena->name, sizeof arena->name, "%s", name ? name : "arena");
}

size_t ddp_arena_round(size_t bytes) {
  return (bytes + (DDP_ARENA_ALIGN - 1)) & ~(size_t)(DDP_ARENA_ALIGN - 1);
}

ddp_status_t ddp_arena_init(ddp_arena_t *arena, ddp_backend_t *backend, const char *name,
                            size_t capacity) {
  if (!arena || !backend) DDP_FAIL(DDP_ERR_INVALID_ARG, "arena_init: NULL arena or backend");
  memset(arena, 0, sizeof *arena);
  set_name(arena, name);
  arena->backend = backend;
  capacity = ddp_arena_round(capacity);
  if (capacity > 0) {
    void *base = NULL;
    DDP_CHECK(ddp_backend_alloc(backend, capacity, &base));
    arena->base = base;
  }
  arena->capacity = capacity;
  int poison = 0;
  DDP_CHECK(ddp_env_get_bool(DDP_ENV_DEBUG_CHECKS, &poison));
  arena->poison = poison;
  return DDP_OK;
}

void ddp_arena_init_measure(ddp_arena_t *arena, const char *name) {
  memset(arena, 0, sizeof *arena);
  set_name(arena, name);
  arena->capacity = SIZE_MAX;
}

void ddp_arena_destroy(ddp_arena_t *arena) {
  if (!arena) return;
  if (arena->backend && arena->base) ddp_backend_free(arena->backend, arena->base);
  memset(arena, 0, sizeof *arena);
}

ddp_status_t ddp_arena_alloc(ddp_arena_t *arena, size_t bytes, void **ptr) {
  if (!arena || !ptr) DDP_FAIL(DDP_ERR_INVALID_ARG, "arena_alloc: NULL argument");
  size_t need = ddp_arena_round(bytes);
  if (need < bytes || need > arena->capacity - arena->offset) {
    *ptr = NULL;
    DDP_FAIL(DDP_ERR_OOM,
             "arena '%s': a request of %.2f MiB does not fit (%.2f of %.2f MiB in use); "
             "lower --tokens-per-batch",
             arena->name, bytes / 1048576.0, arena->offset / 1048576.0,
             arena->capacity / 1048576.0);
  }
  *ptr = arena->backend ? arena->base + arena->offset : NULL;
  arena->offset += need;
  if (arena->offset > arena->peak) arena->peak = arena->offset;
  if (arena->poison && arena->backend && need > 0)
    DDP_CHECK(arena->backend->ops->fill(arena->backend, *ptr, DDP_DTYPE_F32, NAN,
                                        need / sizeof(float), NULL));
  return DDP_OK;
}

size_t ddp_arena_mark(const ddp_arena_t *arena) {
  return arena->offset;
}

void ddp_arena_release(ddp_arena_t *arena, size_t mark) {
  if (mark <= arena->offset) arena->offset = mark;
}

void ddp_arena_reset(ddp_arena_t *arena) {
  arena->offset = 0;
}
