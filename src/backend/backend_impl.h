/* What backend implementations share (internal): their ops tables, for the
 * registry, and the allocation counters every alloc/free must update. */
#ifndef DDPTRAIN_BACKEND_IMPL_H
#define DDPTRAIN_BACKEND_IMPL_H

#include <config.h>

#include "ddptrain/backend.h"

extern const ddp_backend_ops_t ddp_backend_cpu_ops;
#if DDP_HAVE_CUDA
extern const ddp_backend_ops_t ddp_backend_cuda_ops;
#endif

void ddp_backend_count_alloc(ddp_backend_t *be, size_t bytes);
void ddp_backend_count_free(ddp_backend_t *be, size_t bytes);

/* Default CPU math threads: physical cores on this node / ranks on it. */
int ddp_cpu_default_threads(int local_size);

#endif
