/* A bump allocator over one backend buffer, reset every step.
 *
 * Activations and scratch space have step-shaped lifetimes: everything a step
 * allocates dies at the end of that step. So the arena takes one buffer from
 * the backend up front and hands out aligned slices by bumping an offset;
 * reset() makes the whole buffer free again. The step loop therefore never
 * calls the backend allocator (cudaMalloc synchronises the device), and a
 * request that does not fit fails with the sizes involved instead of growing.
 *
 * A measuring arena (no memory) runs the same allocation sequence to find the
 * capacity a step needs before the real arena is created. mark()/release()
 * free everything allocated after a mark, for scratch that dies mid-step.
 * With DDPTRAIN_DEBUG_CHECKS=1 fresh slices are filled with NaN so a kernel
 * that reads memory it never wrote produces NaN instead of plausible data. */
#ifndef DDPTRAIN_ARENA_H
#define DDPTRAIN_ARENA_H

#include <stddef.h>

#include "ddptrain/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Slices start on this boundary: cuBLAS and vectorised kernels want 256 B. */
#define DDP_ARENA_ALIGN 256

typedef struct ddp_arena {
  ddp_backend_t *backend; /* NULL for a measuring arena */
  char name[32];
  char *base;      /* device pointer; never dereferenced here */
  size_t capacity; /* bytes */
  size_t offset;   /* bytes in use */
  size_t peak;     /* high-water mark of offset */
  int poison;      /* fill fresh slices with NaN (debug checks) */
} ddp_arena_t;

/* Takes `capacity` bytes from the backend (the arena's only allocation). */
ddp_status_t ddp_arena_init(ddp_arena_t *arena, ddp_backend_t *backend, const char *name,
                            size_t capacity);

/* A measuring arena: alloc() records sizes and hands out NULL. */
void ddp_arena_init_measure(ddp_arena_t *arena, const char *name);

/* Returns the memory to the backend. Safe on a zeroed or measuring arena. */
void ddp_arena_destroy(ddp_arena_t *arena);

/* An aligned slice of `bytes`; DDP_ERR_OOM (logged with the sizes) if it
 * does not fit. A zero-byte request succeeds. */
ddp_status_t ddp_arena_alloc(ddp_arena_t *arena, size_t bytes, void **ptr);

size_t ddp_arena_mark(const ddp_arena_t *arena);
/* Frees every slice allocated after `mark` was taken. */
void ddp_arena_release(ddp_arena_t *arena, size_t mark);
/* Frees everything (start of a step). The peak is kept. */
void ddp_arena_reset(ddp_arena_t *arena);

/* Rounds bytes up to DDP_ARENA_ALIGN (what one alloc of `bytes` consumes). */
size_t ddp_arena_round(size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
