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

/* cuBLASLt epilogues for the linear layers. In ddp_gemm_t's row-major terms
 * C is m x n; a bias has n elements (one per column of C, added to every
 * row) and aux is an m x n matrix of C's type with row pitch aux_ld. (Lt
 * sees the column-major transpose, so our columns are its "rows": its bias
 * runs along D's rows and DGELU_BGRAD reduces over D's columns, our rows.)
 * GELU is the tanh approximation, as the gelu_fwd/gelu_bwd kernels. */
typedef enum ddp_cuda_epilogue {
  DDP_CUDA_EPILOGUE_NONE = 0,
  DDP_CUDA_EPILOGUE_BIAS = 1,          /* C = A B + bias */
  DDP_CUDA_EPILOGUE_GELU_BIAS = 2,     /* C = GELU(A B + bias) */
  DDP_CUDA_EPILOGUE_GELU_AUX_BIAS = 3, /* aux = A B + bias, C = GELU(of it, unrounded) */
  DDP_CUDA_EPILOGUE_DGELU_BGRAD = 4    /* C = (A B) * GELU'(aux), bgrad = column sums of C */
} ddp_cuda_epilogue_t;

typedef struct ddp_cuda_epilogue_args {
  ddp_cuda_epilogue_t kind;
  const void *bias; /* BIAS, GELU_BIAS, GELU_AUX_BIAS: n elements of C's type */
  void *aux;        /* GELU_AUX_BIAS (written), DGELU_BGRAD (read): m x n, C's type */
  int64_t aux_ld;   /* >= n; Lt needs a multiple of 8, else the GEMM is declined */
  float *bgrad;     /* DGELU_BGRAD: n fp32, overwritten */
} ddp_cuda_epilogue_args_t;

/* g (batch 1, alpha 1, beta 0, k > 0) with the epilogue fused into one
 * cublasLtMatmul. *fused = 1 when it ran; *fused = 0 when Lt declined it
 * (no algorithm for the shape, pitch, alignment or types, or a layout
 * outside the above): nothing was written and the caller composes the
 * result from unfused ops. The decision is cached with the plan, whose key
 * includes the epilogue, aux pitch and the epilogue pointers' alignment, so
 * a given GEMM always takes the same path. Bad arguments (a missing
 * pointer, aux_ld < n) fail with DDP_ERR_INVALID_ARG. */
ddp_status_t ddp_cuda_gemm_epilogue(ddp_backend_t *be, const ddp_gemm_t *g,
                                    const ddp_cuda_epilogue_args_t *e, ddp_stream_t stream,
                                    int *fused);
/* Epilogue GEMMs that ran fused / were declined since init (tests). */
void ddp_cuda_gemm_epilogue_counts(ddp_backend_t *be, uint64_t *fused, uint64_t *declined);

#endif
