/* Launcher for the decode-step attention kernel (kernels/attention_decode.cu):
 * one query row per sequence against a KV cache of qkv rows, nn.h's
 * attention_decode. C header (extern "C", outputs first, the stream last,
 * enqueue only). The CPU twin is src/backend/cpu/cpu_attention_decode.c. */
#ifndef DDPTRAIN_KERNELS_ATTENTION_DECODE_H
#define DDPTRAIN_KERNELS_ATTENTION_DECODE_H

#include <cuda_runtime_api.h>

#include "ddptrain/dtype.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Head sizes the kernel takes (the per-thread accumulators are fixed). */
#define DDP_CUDA_DECODE_MAX_HS 256

/* out (B,C) = per head softmax(q_t k_j / sqrt(hs), j <= t) v_j from qkv
 * (B,Tc,3C) of dtype dt (rows as attention_fwd's). */
ddp_status_t ddp_cuda_attention_decode(ddp_dtype_t dt, void *out, const void *qkv, int B, int Tc,
                                       int t, int C, int NH, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
