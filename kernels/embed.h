/* Launchers for the token + position embedding kernels in kernels/embed.cu
 * (C header; conventions as kernels/kernels.h: extern "C", outputs first,
 * the stream last, a ddp_status_t, enqueue only). The CPU twins are
 * ddp_nn_cpu_ops.embed_fwd / embed_bwd (src/backend/cpu/cpu_nn.c,
 * cpu_nn_dtype.c).
 *
 * tokens (B,T) int32 live on the device, and the op does not know V: the
 * model validates tokens on the host before uploading them. The kernels
 * never read outside wte for a negative token (the one kind they can see):
 * forward writes NaN to that token's output row, backward skips it for
 * dwte and writes NaN to dwpe[t], so the loss or the gradient norm turns
 * non-finite and the run's checks stop it. A token >= V cannot be detected
 * (as on the CPU). */
#ifndef DDPTRAIN_KERNELS_EMBED_H
#define DDPTRAIN_KERNELS_EMBED_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "ddptrain/dtype.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (B,T,C) = wte[tokens[b,t]] + wpe[t]; out, wte (V,C), wpe (>=T,C) in
 * dt (fp32, bf16, fp16), the sum in fp32 rounded once. */
ddp_status_t ddp_cuda_embed_fwd(ddp_dtype_t dt, void *out, const int32_t *tokens, const void *wte,
                                const void *wpe, int B, int T, int C, cudaStream_t stream);

/* Scratch bytes ddp_cuda_embed_bwd needs for n = B*T tokens: the (token,
 * position) pairs before and after a stable radix sort (CUB), the sort's
 * own temporary storage, and alignment slack. Host-only query (CUB sizes
 * its storage without touching the device); n in [1, INT_MAX]. */
ddp_status_t ddp_cuda_embed_bwd_scratch_bytes(int64_t n, size_t *bytes);

/* dwte (V,C, fp32) += dout rows of each token; dwpe (>=T,C, fp32) = / +=
 * sum_b dout[b,t] per `accumulate`; dout (B,T,C) in dt. Deterministic, and
 * summed in the CPU twin's order: dwpe[t] over b ascending, dwte[v] over
 * its positions (t, b) in lexicographic order, starting from the value in
 * dwte, so fp32 results are bit-identical to the twin. The positions are
 * grouped by token with a stable sort, then one block per run of equal
 * tokens (and per 128 columns) adds its rows in order: no atomics. scratch
 * holds scratch_bytes bytes, at least ddp_cuda_embed_bwd_scratch_bytes(B*T)
 * (DDP_ERR_INVALID_ARG otherwise). */
ddp_status_t ddp_cuda_embed_bwd(ddp_dtype_t dt, float *dwte, float *dwpe, const void *dout,
                                const int32_t *tokens, int B, int T, int C, int accumulate,
                                void *scratch, size_t scratch_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
