/* CUDA fused softmax cross-entropy (cuda_nn.h; contract in ddptrain/nn.h,
 * kernels in kernels/xent.cu, CPU twin ddp_nn_cpu_ops.xent_fused).
 *
 * The launcher validates sizes (N, V > 0, Vp >= V), the label smoothing
 * (in [0, 1)), dtype and pointers on the host. One difference from the CPU
 * twin: targets are device memory, so a target outside [-1, V) cannot be
 * rejected before anything is written (that would need a host sync); the
 * model validates targets on the host before upload, and the kernel writes
 * NaN as such a row's loss (and zeros as its gradient) instead of reading
 * out of bounds (kernels/xent.h). */
#include <config.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"
#include "xent.h"

/* None: the loss sum reduces the per-row losses, which are the op's output. */
size_t ddp_cuda_xent_scratch_bytes(ddp_dtype_t dt, int64_t N, int C, int V) {
  return 0;
}

// losses (N), loss_sum (1) +=, dlogits (N,Vp) or NULL (may alias logits),
// logits (N,Vp), targets (N) in [-1, V), smoothing in [0, 1)
ddp_status_t ddp_cuda_nn_xent_fused(ddp_backend_t *be, ddp_dtype_t dt, float *losses,
                                    float *loss_sum, void *dlogits, const void *logits,
                                    const int32_t *targets, float dloss, float smoothing, int N,
                                    int V, int Vp, ddp_stream_t s) {
  return ddp_cuda_xent_fused(dt, losses, loss_sum, dlogits, logits, targets, dloss, smoothing, N, V,
                             Vp, ddp_cuda_stream(be, s));
}
