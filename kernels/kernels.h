/* Launchers for the conversion and fill kernels (kernels/convert.cu).
 *
 * Each kernel family has its own launcher header beside its .cu (embed.h,
 * layernorm.h, linear.h, attention.h, xent.h, pointwise.h, optim.h); this
 * one is convert.cu's. These are C headers: the kernels are compiled by
 * nvcc, the callers (the CUDA backend and the GPU test suites) are C.
 * Launchers follow the conventions of docs/design.md §9: extern "C",
 * outputs first, then inputs, then sizes, the stream last; they return a
 * ddp_status_t, validate their arguments (logging an invalid one once),
 * and only enqueue work: nothing here synchronises, so a fault inside a
 * kernel surfaces at the caller's next synchronising call. Each kernel's
 * CPU twin (its test oracle) is named beside its launcher. */
#ifndef DDPTRAIN_KERNELS_H
#define DDPTRAIN_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include "ddptrain/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- kernels/convert.cu ------------------------------------------------ */

/* dst[i] = src[i] converted, i < n, between any two of F32/BF16/F16; device
 * pointers, not overlapping (same type: a device-to-device copy). Results are
 * bit-identical to ddp_convert_host (the CPU twin), NaN policy included.
 * Each pointer must be aligned to its element size (DDP_ERR_INVALID_ARG
 * otherwise: a misaligned access would fault on the device); buffers aligned
 * to four elements take a vectorised path. n == 0 is a no-op that accepts
 * NULL pointers (the dtypes are still checked). */
ddp_status_t ddp_cuda_convert(void *dst, ddp_dtype_t dst_dtype, const void *src,
                              ddp_dtype_t src_dtype, size_t n, cudaStream_t stream);

/* dst[i] = value for i < n, dtype F32, BF16, F16 or I32. The value is
 * converted once on the host (ddp_f32_to_bf16 / ddp_f32_to_f16, the CPU
 * twins); for I32 it is truncated toward zero like a C cast, and a NaN or a
 * value outside the int32 range is DDP_ERR_INVALID_ARG. dst must be aligned
 * to its element size; a 16-byte aligned dst is written 16 bytes at a time. */
ddp_status_t ddp_cuda_fill(void *dst, ddp_dtype_t dtype, float value, size_t n,
                           cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
