/* nn.h's attention_decode on the CPU: one query row per sequence against
 * the cached qkv rows 0..t (the oracle of the CUDA kernel,
 * kernels/attention_decode.cu).
 *
 * Decoding is one row per sequence, so there is no GEMM to batch: per
 * (sequence, head) two passes over the cached keys, the first for the
 * maximum score (a stable softmax), the second for the weights and the
 * weighted sum of values. Scores are recomputed in the second pass instead
 * of kept, so the op needs no scratch whatever the cache length; the head's
 * output is accumulated in fp32 in blocks of DEC_BLOCK channels on the
 * stack (one block for every head size up to 256). Half inputs are widened
 * element by element (exact), the output rounded once. */
#include <math.h>
#include <stdint.h>

#include "ddptrain/check.h"
#include "ddptrain/dtype.h"
#include "backend/cpu/cpu_nn_impl.h"

#define DEC_BLOCK 256

static inline float load(const void *p, ddp_dtype_t dt, size_t i) {
  if (dt == DDP_DTYPE_BF16) return ddp_bf16_to_f32(((const uint16_t *)p)[i]);
  if (dt == DDP_DTYPE_F16) return ddp_f16_to_f32(((const uint16_t *)p)[i]);
  return ((const float *)p)[i];
}

static inline void store(void *p, ddp_dtype_t dt, size_t i, float x) {
  if (dt == DDP_DTYPE_BF16)
    ((uint16_t *)p)[i] = ddp_f32_to_bf16(x);
  else if (dt == DDP_DTYPE_F16)
    ((uint16_t *)p)[i] = ddp_f32_to_f16(x);
  else
    ((float *)p)[i] = x;
}

/* q . k over hs channels, both widened from dt. */
static float dot(const void *qkv, ddp_dtype_t dt, size_t q, size_t k, int hs) {
  float acc = 0.0f;
  for (int i = 0; i < hs; ++i) acc += load(qkv, dt, q + (size_t)i) * load(qkv, dt, k + (size_t)i);
  return acc;
}

ddp_status_t ddp_cpu_attention_decode(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *qkv,
                                      int B, int Tc, int t, int C, int NH, ddp_stream_t s) {
  (void)be;
  (void)s;
  if (dt != DDP_DTYPE_F32 && dt != DDP_DTYPE_BF16 && dt != DDP_DTYPE_F16)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: attention_decode: activation dtype %d is not fp32/bf16/fp16",
             (int)dt);
  if (!out || !qkv) DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: attention_decode: NULL pointer");
  if (B <= 0 || Tc <= 0 || C <= 0 || NH <= 0 || C % NH != 0 || t < 0 || t >= Tc)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "nn: attention_decode: sizes B=%d Tc=%d t=%d C=%d NH=%d (need t < Tc, NH | C)", B, Tc,
             t, C, NH);
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  const size_t row = 3 * (size_t)C;
  for (int b = 0; b < B; ++b) {
    const size_t base = (size_t)b * (size_t)Tc * row;
    const size_t qrow = base + (size_t)t * row;
    for (int h = 0; h < NH; ++h) {
      const size_t qo = qrow + (size_t)h * hs, ko = (size_t)C + (size_t)h * hs;
      float mx = -INFINITY;
      for (int j = 0; j <= t; ++j) {
        const float sc = dot(qkv, dt, qo, base + (size_t)j * row + ko, hs) * scale;
        if (sc > mx) mx = sc;
      }
      for (int d0 = 0; d0 < hs; d0 += DEC_BLOCK) {
        const int nd = hs - d0 < DEC_BLOCK ? hs - d0 : DEC_BLOCK;
        float acc[DEC_BLOCK] = {0};
        float sum = 0.0f;
        for (int j = 0; j <= t; ++j) {
          const size_t kj = base + (size_t)j * row + ko;
          const float w = expf(dot(qkv, dt, qo, kj, hs) * scale - mx);
          sum += w;
          const size_t vj = kj + (size_t)C + (size_t)d0;
          for (int i = 0; i < nd; ++i) acc[i] += w * load(qkv, dt, vj + (size_t)i);
        }
        /* the maximum contributes exp(0) = 1: sum >= 1 */
        const float inv = 1.0f / sum;
        const size_t o = (size_t)b * C + (size_t)h * hs + (size_t)d0;
        for (int i = 0; i < nd; ++i) store(out, dt, o + (size_t)i, acc[i] * inv);
      }
    }
  }
  return DDP_OK;
}
