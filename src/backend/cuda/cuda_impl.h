/* Private state of the CUDA backend, shared by its files (internal).
 *
 * cuda_backend.c owns the state (created in init, destroyed in shutdown);
 * the GEMM, nn and optimizer glue in src/backend/cuda/ reach it through
 * these helpers. C only: nvcc never sees this header, the kernels in
 * kernels/ take plain device pointers and a cudaStream_t. */
#ifndef DDPTRAIN_CUDA_IMPL_H
#define DDPTRAIN_CUDA_IMPL_H

#include <config.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stddef.h>

#include "ddptrain/backend.h"
#include "backend/caching_alloc.h"

typedef struct ddp_cuda_state {
  cudaStream_t compute;
  cublasHandle_t blas;
  struct ddp_cuda_gemm *gemm; /* cuBLASLt handle, workspace, plans (cuda_gemm.c) */
  struct ddp_cuda_conv *conv; /* cuDNN handle, plans, workspace (cuda_conv.c); NULL until used */
  int conv_nondeterministic;  /* convolution algorithms need not be deterministic */
  int allow_tf32;             /* fp32 GEMMs on TF32 tensor cores */
  ddp_caching_alloc_t *cache;
  /* Scratch shared by the nn and optimizer ops. They all run in order on
   * the compute stream and none keeps scratch across calls, so one buffer
   * sized for the largest need serves every op. It is sized by the nn
   * reserve() (and the optimizer's prepare) before the step loop, never
   * inside it: an op that finds too little fails instead of allocating. */
  void *scratch;
  size_t scratch_bytes;
  int scratch_holds; /* reserve() calls not yet released */
} ddp_cuda_state_t;

static inline ddp_cuda_state_t *ddp_cuda_state(ddp_backend_t *be) {
  return (ddp_cuda_state_t *)be->impl;
}

/* The CUDA stream behind a ddp_stream_t (NULL = the compute stream). */
static inline cudaStream_t ddp_cuda_stream(ddp_backend_t *be, ddp_stream_t s) {
  return s ? (cudaStream_t)(void *)s : ddp_cuda_state(be)->compute;
}

/* Grows the shared scratch to at least `bytes` (never shrinks) and takes
 * one hold on it. Outside the step loop only: growing frees and allocates. */
ddp_status_t ddp_cuda_scratch_reserve(ddp_backend_t *be, size_t bytes);
/* Drops one hold; the last frees the scratch. */
void ddp_cuda_scratch_release(ddp_backend_t *be);
/* The scratch for an op that needs `bytes` of it; DDP_ERR_INVALID_ARG naming
 * `op` and both sizes when reserve() provided less. */
ddp_status_t ddp_cuda_scratch_get(ddp_backend_t *be, size_t bytes, const char *op, void **out);

/* The backend's graph ops (cuda_graph.c, ddptrain/backend.h). */
ddp_status_t ddp_cuda_graph_begin(ddp_backend_t *be);
ddp_status_t ddp_cuda_graph_end(ddp_backend_t *be, ddp_graph_t *out);
ddp_status_t ddp_cuda_graph_launch(ddp_backend_t *be, ddp_graph_t graph);
void ddp_cuda_graph_destroy(ddp_backend_t *be, ddp_graph_t graph);

#endif
