/* The CUDA backend's GEMM on cuBLASLt (internal; see cuda_gemm.c). */
#ifndef DDPTRAIN_CUDA_GEMM_H
#define DDPTRAIN_CUDA_GEMM_H

#include <stdint.h>

#include "ddptrain/backend.h"

typedef struct ddp_cuda_gemm ddp_cuda_gemm_t;

/* The Lt handle, its workspace and the plan table; after the backend state
 * exists (cuda_init), undone by ddp_cuda_gemm_shutdown. */
ddp_status_t ddp_cuda_gemm_init(ddp_backend_t *be);
void ddp_cuda_gemm_shutdown(ddp_backend_t *be);
ddp_status_t ddp_cuda_gemm(ddp_backend_t *be, const ddp_gemm_t *g, ddp_stream_t stream);
/* GEMMs that needed new descriptors (tests: repeated shapes add none). */
uint64_t ddp_cuda_gemm_cache_misses(ddp_backend_t *be);

#endif
