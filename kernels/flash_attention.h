/* Launchers for the flash attention kernels (kernels/flash_attention.cu):
 * causal multi-head self-attention without the T x T matrix, forward and
 * backward, with per-sequence lengths. ddptrain/nn.h's flash_attention_fwd
 * and flash_attention_bwd give the contract; src/backend/cuda/cuda_nn_flash.c
 * validates the arguments and calls these; the CPU twin is
 * src/backend/cpu/cpu_flash_attention.c (same tiling and online softmax).
 *
 * Two paths, picked per call:
 *   - tensor cores (nvcuda::wmma, bf16/fp16 operands, fp32 accumulation) for
 *     dt bf16/fp16, hs in {16, 32, 64, 128}, 16-byte aligned buffers and a
 *     device of compute capability >= 8.0 whose opt-in shared memory per
 *     block holds the kernels' tiles (ddp_cuda_flash_attention_tc_smem_bytes);
 *   - CUDA cores (fp32 math, one warp per row) for fp32 and everything else
 *     with hs <= 128.
 * Larger head sizes return DDP_ERR_UNSUPPORTED. Nothing here uses atomics;
 * every sum runs in a fixed order, so results are bit-reproducible.
 *
 * A C header (the callers are C): extern "C" launchers returning
 * ddp_status_t, outputs first, the stream last. They validate their
 * arguments and only enqueue work; lens (device memory) cannot be checked
 * without a host sync, so the kernels clamp each lens[b] into [0, T]. */
#ifndef DDPTRAIN_KERNELS_FLASH_ATTENTION_H
#define DDPTRAIN_KERNELS_FLASH_ATTENTION_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "ddptrain/dtype.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest head size the kernels take. */
#define DDP_FLASH_MAX_HS 128

/* out (B,T,C) of dt, lse (B,NH,T) fp32 or NULL, qkv (B,T,3C) of dt, lens (B)
 * int32 or NULL. Every element of out (and lse) is written. */
ddp_status_t ddp_cuda_flash_attention_fwd(void *out, float *lse, const void *qkv,
                                          const int32_t *lens, ddp_dtype_t dt, int B, int T, int C,
                                          int NH, cudaStream_t stream);

/* dqkv (B,T,3C) of dt, overwritten (every element); dsum (B,NH,T) fp32
 * scratch, overwritten with D = rowsum(dout * out) (0 at padding rows);
 * dout, out (B,T,C) of dt; lse (B,NH,T) from the forward. */
ddp_status_t ddp_cuda_flash_attention_bwd(void *dqkv, float *dsum, const void *dout,
                                          const void *qkv, const void *out, const float *lse,
                                          const int32_t *lens, ddp_dtype_t dt, int B, int T, int C,
                                          int NH, cudaStream_t stream);

/* 1 when a call with these arguments takes the tensor-core path, 0 when the
 * CUDA-core one (for tests and benchmarks: which kernel a result came from).
 * Pointers are only inspected for alignment; NULL counts as aligned. */
int ddp_cuda_flash_attention_tensor_cores(ddp_dtype_t dt, int C, int NH, const void *a,
                                          const void *b, const void *c, const void *d);

/* Bytes of dynamic shared memory per block the tensor-core kernels of head
 * size hs need (the largest of forward, dQ and dK/dV), 0 for a head size
 * without them. A host computation (no device needed): the tensor-core
 * path is taken only where the device's opt-in limit per block
 * (cudaDevAttrMaxSharedMemoryPerBlockOptin) is at least this. */
size_t ddp_cuda_flash_attention_tc_smem_bytes(int hs);

#ifdef __cplusplus
}
#endif
#endif
