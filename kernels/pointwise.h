/* Launchers for the element-wise nn kernels in kernels/pointwise.cu (C
 * header; conventions as kernels/kernels.h: extern "C", outputs first, the
 * stream last, a ddp_status_t, enqueue only).
 *
 * dt is the storage type of every buffer (DDP_DTYPE_F32, BF16 or F16; half
 * buffers hold uint16 bit patterns); math is fp32 and each output is rounded
 * once to nearest even. Pointers are device memory aligned to their element
 * size; buffers that are all aligned to four elements take a vectorised
 * path. n == 0 is a no-op. The CPU twins are the ops of the same name in
 * ddp_nn_cpu_ops (src/backend/cpu/cpu_nn.c, cpu_nn_dtype.c). */
#ifndef DDPTRAIN_KERNELS_POINTWISE_H
#define DDPTRAIN_KERNELS_POINTWISE_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "ddptrain/dtype.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] = GELU(inp[i]) (tanh approximation), i < n. */
ddp_status_t ddp_cuda_gelu_fwd(ddp_dtype_t dt, void *out, const void *inp, size_t n,
                               cudaStream_t stream);
/* dinp[i] = dout[i] * GELU'(inp[i]); dinp may be dout (the same buffer). */
ddp_status_t ddp_cuda_gelu_bwd(ddp_dtype_t dt, void *dinp, const void *inp, const void *dout,
                               size_t n, cudaStream_t stream);
/* out[i] = a[i] + b[i]; out may be a or b (the same buffer). */
ddp_status_t ddp_cuda_add(ddp_dtype_t dt, void *out, const void *a, const void *b, size_t n,
                          cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
