/* Element types and conversions between fp32 and the two 16-bit formats.
 *
 * bf16 and fp16 values are carried as uint16_t bit patterns in host code, so
 * public headers do not depend on a compiler's half type. Conversions from
 * fp32 round to nearest, ties to even, and handle subnormals, infinities and
 * overflow exactly as IEEE 754 requires. NaN policy (the same on CPU and GPU,
 * so results compare bit for bit): a NaN input becomes the canonical quiet NaN
 * with the input's sign: bf16 sign|0x7FC0, fp16 sign|0x7E00. Widening
 * conversions to fp32 are exact (NaN payloads are kept). */
#ifndef DDPTRAIN_DTYPE_H
#define DDPTRAIN_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ddp_dtype {
  DDP_DTYPE_F32 = 0,
  DDP_DTYPE_BF16 = 1,
  DDP_DTYPE_F16 = 2,
  DDP_DTYPE_I32 = 3,
  DDP_DTYPE_COUNT_ = 4
} ddp_dtype_t;

/* Bytes per element; 0 for an invalid value. */
size_t ddp_dtype_size(ddp_dtype_t dtype);

/* "fp32", "bf16", "fp16", "int32"; "invalid" otherwise. */
const char *ddp_dtype_name(ddp_dtype_t dtype);

/* Accepts fp32|f32|float32|float, bf16|bfloat16, fp16|f16|float16|half,
 * int32|i32 (case-insensitive). */
ddp_status_t ddp_dtype_parse(const char *text, ddp_dtype_t *dtype);

/* Nonzero for the floating-point types (fp32, bf16, fp16). */
int ddp_dtype_is_float(ddp_dtype_t dtype);

/* Scalar conversions. */
uint16_t ddp_f32_to_bf16(float x);
float ddp_bf16_to_f32(uint16_t h);
uint16_t ddp_f32_to_f16(float x);
float ddp_f16_to_f32(uint16_t h);

/* Host-memory bulk conversion between any two floating types (a same-type
 * call is a copy). n elements; dst and src must not overlap. */
ddp_status_t ddp_convert_host(void *dst, ddp_dtype_t dst_dtype, const void *src,
                              ddp_dtype_t src_dtype, size_t n);

/* dst[i] = src[i] rounded to dtype and widened back: the fp32 value of the
 * nearest bf16/fp16 (round to nearest even, overflow to inf, the NaN policy
 * above), i.e. what storing in dtype and loading again gives: the fp32
 * image of half storage (tests use it to state that values are, or would
 * be, half values). dst may equal src (in place); other overlaps are
 * rejected. fp32 is a copy. */
ddp_status_t ddp_round_host(float *dst, const float *src, ddp_dtype_t dtype, size_t n);

#ifdef __cplusplus
}
#endif
#endif
