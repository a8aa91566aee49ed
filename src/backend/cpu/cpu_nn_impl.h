/* Private to the CPU layer ops (cpu_nn.c, cpu_attention.c): short-vector
 * helpers, a vectorisable exp(), and the attention entry points that the ops
 * table in cpu_nn.c refers to.
 *
 * Why GNU vector extensions: the project builds with plain -O2, where GCC's
 * "very cheap" vectoriser leaves a loop scalar unless its trip count is a
 * known multiple of the vector width, and never vectorises calls into libm
 * (expf, tanhf). Four-lane vector types (16 bytes: SSE2 on x86-64, NEON on
 * aarch64, so no -m flags are needed) make the exp-heavy loops — softmax,
 * cross-entropy, GELU — vector code regardless of the optimiser's mood, and
 * are plain GNU C (gcc and clang), not intrinsics. Loads and stores go through
 * memcpy, which compiles to one unaligned move, so no pointer needs any
 * alignment and an output may alias an input element for element. */
#ifndef DDPTRAIN_CPU_NN_IMPL_H
#define DDPTRAIN_CPU_NN_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ddptrain/nn.h"

#define CPU_VW 8 /* lanes per vector */

/* 32-byte vectors are passed differently with and without AVX (GCC's -Wpsabi,
 * silenced in configure.ac): every helper taking or returning one is static
 * to these files, so no such value crosses a call boundary of another unit. */

/* 8 lanes: two SSE registers on the x86-64 baseline, one AVX register in the
 * AVX2/AVX-512 clones of the hot ops (DDP_CPU_CLONES), chosen at run time. */
typedef float cpu_vf __attribute__((vector_size(32)));
typedef int32_t cpu_vi __attribute__((vector_size(32)));

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define DDP_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DDP_CPU_CLONES
#endif

static inline cpu_vf cpu_vsplat(float x) {
  return (cpu_vf){0} + x;
}

static inline cpu_vf cpu_vload(const float *p) {
  cpu_vf v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline void cpu_vstore(float *p, cpu_vf v) {
  memcpy(p, &v, sizeof v);
}

/* The first n (< CPU_VW) lanes from p, the others `fill`: lets a row's tail
 * go through the same vector code as its body without reading past it. */
static inline cpu_vf cpu_vload_part(const float *p, size_t n, float fill) {
  cpu_vf v = cpu_vsplat(fill);
  memcpy(&v, p, n * sizeof(float));
  return v;
}

static inline void cpu_vstore_part(float *p, cpu_vf v, size_t n) {
  memcpy(p, &v, n * sizeof(float));
}

/* mask lanes (all ones / all zeros, as vector comparisons produce) pick a,
 * the others b. */
static inline cpu_vf cpu_vselect(cpu_vi mask, cpu_vf a, cpu_vf b) {
  return (cpu_vf)(((cpu_vi)a & mask) | ((cpu_vi)b & ~mask));
}

static inline cpu_vf cpu_vmax(cpu_vf a, cpu_vf b) {
  return cpu_vselect(a > b, a, b);
}

static inline float cpu_vhmax(cpu_vf v) {
  float m = v[0];
  for (int j = 1; j < CPU_VW; ++j) m = v[j] > m ? v[j] : m;
  return m;
}

static inline float cpu_vhsum(cpu_vf v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

/* exp(x) lane-wise for x <= 88: Cody-Waite reduction x = n ln2 + r,
 * |r| <= ln2/2, then Cephes' degree-5 minimax polynomial for e^r and 2^n
 * built in the exponent bits. Measured maximum relative error 8e-8 against
 * double exp over [-87.3, 88] (libm's expf: ~5e-8), about 3x faster than
 * scalar expf and 10x faster than tanhf on the build's baseline SSE2.
 * Inputs below -87.336 (where expf goes subnormal) give exactly 0: whatever
 * bits the exponent arithmetic produced there (even NaN) are masked off, so
 * no clamp is needed, and softmax terms that small vanish against a row sum
 * of at least 1 anyway. NaN stays NaN. There is no upper clamp (x > 88.7
 * would give garbage): every caller's argument is bounded — softmax and
 * cross-entropy pass x - max <= 0, GELU caps its argument at 80. */
static inline cpu_vf cpu_vexp(cpu_vf x) {
  const cpu_vi under = x < -87.33654f;
  /* Round to nearest by the 1.5 * 2^23 trick (valid for |x log2 e| < 2^22);
   * without -ffast-math the compiler may not fold the add and subtract. */
  cpu_vf fn = x * 1.44269504088896341f + 12582912.0f;
  fn -= 12582912.0f;
  cpu_vf r = x - fn * 0.693359375f; /* ln2 split: hi part exact in fp32 */
  r = r + fn * 2.12194440e-4f;
  cpu_vf p = cpu_vsplat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const cpu_vf y = p * r * r + r + 1.0f;
  const cpu_vi n = __builtin_convertvector(fn, cpu_vi);
  const cpu_vf scale = (cpu_vf)((n + 127) << 23);
  return (cpu_vf)((cpu_vi)(y * scale) & ~under);
}

/* Row softmax helpers shared by attention and cross-entropy. */

/* max of x[0..n), n >= 1. */
static inline float cpu_row_max(const float *x, size_t n) {
  cpu_vf m = cpu_vsplat(-__builtin_inff());
  size_t i = 0;
  for (; i + CPU_VW <= n; i += CPU_VW) m = cpu_vmax(m, cpu_vload(x + i));
  if (i < n) m = cpu_vmax(m, cpu_vload_part(x + i, n - i, -__builtin_inff()));
  return cpu_vhmax(m);
}

/* ---- the fp32 kernels ------------------------------------------------------ */

/* Each op of ddptrain/nn.h on fp32 buffers (cpu_nn.c, cpu_attention.c);
 * cpu_nn_dtype.c builds the dtype-aware table on top of them. Arguments and
 * contracts are those of nn.h with every activation pointer a float. */
ddp_status_t ddp_cpu_embed_fwd_f32(ddp_backend_t *be, float *out, const int32_t *tokens,
                                   const float *wte, const float *wpe, int B, int T, int C,
                                   ddp_stream_t s);
ddp_status_t ddp_cpu_embed_bwd_f32(ddp_backend_t *be, float *dwte, float *dwpe, const float *dout,
                                   const int32_t *tokens, int B, int T, int C, int accumulate,
                                   ddp_stream_t s);
ddp_status_t ddp_cpu_layernorm_fwd_f32(ddp_backend_t *be, float *out, float *mean, float *rstd,
                                       const float *inp, const float *w, const float *b, int N,
                                       int C, ddp_stream_t s);
ddp_status_t ddp_cpu_layernorm_bwd_f32(ddp_backend_t *be, float *dinp, float *dw, float *db,
                                       const float *dout, const float *inp, const float *w,
                                       const float *mean, const float *rstd, int N, int C,
                                       int accumulate, ddp_stream_t s);
ddp_status_t ddp_cpu_linear_fwd_f32(ddp_backend_t *be, float *out, const float *inp, const float *w,
                                    const float *bias, int N, int IC, int OC, ddp_stream_t s);
ddp_status_t ddp_cpu_linear_bwd_f32(ddp_backend_t *be, float *dinp, float *dw, float *dbias,
                                    const float *dout, const float *inp, const float *w, int N,
                                    int IC, int OC, int accumulate, int accumulate_dinp,
                                    ddp_stream_t s);
ddp_status_t ddp_cpu_gelu_fwd_f32(ddp_backend_t *be, float *out, const float *inp, size_t n,
                                  ddp_stream_t s);
ddp_status_t ddp_cpu_gelu_bwd_f32(ddp_backend_t *be, float *dinp, const float *inp,
                                  const float *dout, size_t n, ddp_stream_t s);
ddp_status_t ddp_cpu_add_f32(ddp_backend_t *be, float *out, const float *a, const float *b,
                             size_t n, ddp_stream_t s);
ddp_status_t ddp_cpu_attention_fwd_f32(ddp_backend_t *be, float *out, float *att, const float *qkv,
                                       int B, int T, int C, int NH, ddp_stream_t s);
ddp_status_t ddp_cpu_attention_bwd_f32(ddp_backend_t *be, float *dqkv, float *scratch,
                                       const float *dout, const float *qkv, const float *att, int B,
                                       int T, int C, int NH, ddp_stream_t s);
ddp_status_t ddp_cpu_xent_fused_f32(ddp_backend_t *be, float *losses, float *loss_sum,
                                    float *dlogits, const float *logits, const int32_t *targets,
                                    float dloss, float smoothing, int N, int V, int Vp,
                                    ddp_stream_t s);

/* ---- the fused MLP ops (cpu_nn_fused.c) ------------------------------------ */

/* nn.h's linear_gelu_fwd and linear_dgelu_bwd under any dt, as the
 * composition of the table's own ops (bit-identical to the unfused
 * sequence). */
ddp_status_t ddp_cpu_linear_gelu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, void *pre,
                                     const void *inp, const void *w, const void *bias, int N,
                                     int IC, int OC, ddp_stream_t s);
ddp_status_t ddp_cpu_linear_dgelu_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dpre, float *dbias,
                                      const void *dout, const void *w, const void *pre, int N,
                                      int K, int OC, int accumulate, ddp_stream_t s);

/* ---- attention against a KV cache (cpu_attention_decode.c) ---------------- */

/* nn.h's attention_decode under every dt. */
ddp_status_t ddp_cpu_attention_decode(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *qkv,
                                      int B, int Tc, int t, int C, int NH, ddp_stream_t s);

/* ---- flash attention (cpu_flash_attention.c) ------------------------------ */

/* nn.h's flash_attention_fwd / flash_attention_bwd under every dt (the
 * table entries themselves). */
ddp_status_t ddp_cpu_flash_attention_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *lse,
                                         const void *qkv, const int32_t *lens, int B, int T, int C,
                                         int NH, ddp_stream_t s);
ddp_status_t ddp_cpu_flash_attention_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dqkv,
                                         float *scratch, const void *dout, const void *qkv,
                                         const void *out, const float *lse, const int32_t *lens,
                                         int B, int T, int C, int NH, ddp_stream_t s);
/* The fp32 workspace the two need under bf16/fp16 for up to n rows of C
 * channels (any T <= n). */
size_t ddp_cpu_flash_attention_workspace_floats(size_t n, size_t c);

/* ---- fp32 workspace of the half-precision ops (cpu_nn_workspace.c) ------- */

/* Grows be's workspace to at least `floats` and adds a holder (the only
 * place it allocates). */
ddp_status_t ddp_cpu_nn_reserve_floats(ddp_backend_t *be, size_t floats);
/* be's workspace when it holds at least `floats`; otherwise fails naming the
 * op, so an op never allocates inside the step loop. */
ddp_status_t ddp_cpu_nn_workspace(ddp_backend_t *be, size_t floats, const char *op, float **ws);
/* Drops a holder; the last one frees the workspace. */
void ddp_cpu_nn_release(ddp_backend_t *be);
/* Frees the workspace whatever its holders (the backend's shutdown). */
void ddp_cpu_nn_workspace_free(ddp_backend_t *be);

/* dst (n) = / += the column sums of src (rows, n), in the fixed order
 * linear_bwd's dbias uses (cpu_nn.c): the fused ops share it, so their bias
 * gradients are bit-identical to the unfused sequence. */
void ddp_cpu_column_sums(float *dst, const float *src, size_t rows, size_t n, int accumulate);

#endif
