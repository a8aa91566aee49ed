/* CUDA graphs behind the backend's graph_begin / graph_end / graph_launch
 * (ddptrain/backend.h): the work the calling thread enqueues on the compute
 * stream is recorded by stream capture, instantiated once, and launched
 * later as one unit.
 *
 * Why: a ResNet-50 step enqueues some 500 kernels and 160 cuDNN calls, and
 * cuDNN's legacy calls build an execution plan on the host every time; the
 * host then takes as long to issue a step as the GPU takes to run it.
 * Replayed, the same kernels cost one launch.
 *
 * The capture is thread-local: a call of this thread that cannot be
 * recorded (a synchronisation, an allocation from the driver) fails and
 * invalidates the capture, so graph_end reports it and nothing half-made
 * is kept; other threads (the loader's copies, a checkpoint writer) go on
 * unaffected. */
#include <config.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_impl.h"
#include "core/foreign_check.h"
#include "ddptrain/check.h"

ddp_status_t ddp_cuda_graph_begin(ddp_backend_t *be) {
  DDP_CUDA_CHECK(
      cudaStreamBeginCapture(ddp_cuda_state(be)->compute, cudaStreamCaptureModeThreadLocal));
  return DDP_OK;
}

ddp_status_t ddp_cuda_graph_end(ddp_backend_t *be, ddp_graph_t *out) {
  *out = NULL;
  cudaGraph_t g = NULL;
  cudaError_t err = cudaStreamEndCapture(ddp_cuda_state(be)->compute, &g);
  if (err != cudaSuccess || !g) {
    if (g) cudaGraphDestroy(g);
    cudaGetLastError(); /* a failed capture's error is not sticky: clear it */
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "CUDA graph: the recording failed: %s",
             err != cudaSuccess ? cudaGetErrorString(err) : "no graph");
  }
  cudaGraphExec_t exec = NULL;
  err = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  if (err != cudaSuccess) {
    cudaGetLastError();
    DDP_FAIL(err == cudaErrorMemoryAllocation ? DDP_ERR_OOM : DDP_ERR_UNSUPPORTED,
             "CUDA graph: instantiating the recording failed: %s", cudaGetErrorString(err));
  }
  *out = (ddp_graph_t)(void *)exec;
  return DDP_OK;
}

ddp_status_t ddp_cuda_graph_launch(ddp_backend_t *be, ddp_graph_t graph) {
  DDP_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)(void *)graph, ddp_cuda_state(be)->compute));
  return DDP_OK;
}

void ddp_cuda_graph_destroy(ddp_backend_t *be, ddp_graph_t graph) {
  (void)be;
  if (graph) cudaGraphExecDestroy((cudaGraphExec_t)(void *)graph);
}
