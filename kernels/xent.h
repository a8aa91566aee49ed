/* Launchers for the fused softmax cross-entropy kernels in kernels/xent.cu
 * (C header; conventions as kernels/kernels.h: extern "C", outputs first,
 * the stream last, a ddp_status_t, enqueue only). The CPU twin is
 * ddp_nn_cpu_ops.xent_fused (src/backend/cpu/cpu_nn.c, cpu_nn_dtype.c). */
#ifndef DDPTRAIN_KERNELS_XENT_H
#define DDPTRAIN_KERNELS_XENT_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "ddptrain/dtype.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* losses (N, fp32) = -log softmax(logits row)[target], 0 where the target is
 * -1; loss_sum (1, fp32) += the sum of this call's losses, added in a fixed
 * order by one block (no atomics, no host sync). With dlogits non-NULL:
 * dlogits (N,Vp) = (softmax - onehot) * dloss, 0 at ignored rows and at the
 * padding columns [V, Vp); dlogits may be logits (the same buffer).
 * smoothing e in [0, 1) is label smoothing as ddptrain/nn.h states it: the
 * loss (1-e)(-log p_target) + e * mean_c(-log p_c), the gradient's target
 * (1-e) onehot + e/V; e = 0 is the unsmoothed op, unchanged.
 * logits and dlogits hold dt elements (fp32, bf16, fp16) with row pitch Vp.
 *
 * Targets live on the device, so a target outside [-1, V) cannot be
 * rejected here without a host sync (callers validate targets on the host
 * before uploading them). The kernel never reads outside the row for one:
 * it writes NaN as that row's loss (so loss_sum turns NaN and the run's
 * non-finite-loss check stops it) and zeros to its dlogits row.
 *
 * Host-side checks (DDP_ERR_INVALID_ARG): N, V > 0, Vp >= V, smoothing in
 * [0, 1), dt a float type, non-NULL losses, loss_sum, logits, targets, every pointer aligned to
 * its element size. */
ddp_status_t ddp_cuda_xent_fused(ddp_dtype_t dt, float *losses, float *loss_sum, void *dlogits,
                                 const void *logits, const int32_t *targets, float dloss,
                                 float smoothing, int N, int V, int Vp, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
