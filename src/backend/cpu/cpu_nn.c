/* The CPU layer ops of the GPT-2 model (ddptrain/nn.h): token + position
 * embedding, layernorm, linear, GELU, residual add and fused softmax
 * cross-entropy, on fp32 buffers (attention is in cpu_attention.c; the
 * dtype-aware ddp_nn_cpu_ops table over them is cpu_nn_dtype.c).
 *
 * These are also the oracle every CUDA kernel is tested against, so the
 * numerics follow PyTorch (eps, biased variance, tanh-GELU) and every
 * reduction runs in a fixed order: results are bit-reproducible for a given
 * build. Matrix products go through the backend's GEMM (OpenBLAS); the rest
 * are single passes over rows written so that -O2 emits vector code (see
 * cpu_nn_impl.h). Training-mode ops never allocate: the step loop must not
 * touch the heap.
 *
 * Every op validates its sizes and pointers before writing anything, so a
 * rejected call leaves all outputs as they were. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_nn_impl.h"
#include "ddptrain/check.h"
#include "ddptrain/nn.h"

#define NN_REQUIRE(cond, ...)                                       \
  do {                                                              \
    if (!(cond)) DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: " __VA_ARGS__); \
  } while (0)

/* Plain loops over rows: GCC -O2 vectorises a loop only when its trip count
 * is a known multiple of the vector width, so each body runs in fixed chunks
 * of 8 (vectorised, needs the restrict qualifiers) and a scalar tail. */
#define CHUNK 8

/* dst[i] += src[i] */
static void row_add_into(float *restrict dst, const float *restrict src, size_t n) {
  size_t i = 0;
  for (; i + CHUNK <= n; i += CHUNK)
    for (size_t j = 0; j < CHUNK; ++j) dst[i + j] += src[i + j];
  for (; i < n; ++i) dst[i] += src[i];
}

/* dst[i] = a[i] + b[i] with dst distinct from a and b. */
static void row_add(float *restrict dst, const float *restrict a, const float *restrict b,
                    size_t n) {
  size_t i = 0;
  for (; i + CHUNK <= n; i += CHUNK)
    for (size_t j = 0; j < CHUNK; ++j) dst[i + j] = a[i + j] + b[i + j];
  for (; i < n; ++i) dst[i] = a[i] + b[i];
}

static void row_zero(float *dst, size_t n) {
  memset(dst, 0, n * sizeof *dst);
}

/* ---- embedding ------------------------------------------------------------ */

/* nn.h passes no vocabulary size to the embedding, so only the lower bound of
 * a token id can be checked here (the data loader checks token < vocab). */
static ddp_status_t check_tokens(const char *op, const int32_t *tokens, int B, int T) {
  const size_t n = (size_t)B * (size_t)T;
  for (size_t i = 0; i < n; ++i)
    NN_REQUIRE(tokens[i] >= 0, "%s: token %d at (b=%zu, t=%zu) is negative", op, (int)tokens[i],
               i / (size_t)T, i % (size_t)T);
  return DDP_OK;
}

// out (B,T,C), tokens (B,T), wte (V,C), wpe (>=T,C)
ddp_status_t ddp_cpu_embed_fwd_f32(ddp_backend_t *be, float *out, const int32_t *tokens,
                                   const float *wte, const float *wpe, int B, int T, int C,
                                   ddp_stream_t s) {
  NN_REQUIRE(B > 0 && T > 0 && C > 0, "embed_fwd: sizes B=%d T=%d C=%d must be positive", B, T, C);
  NN_REQUIRE(out && tokens && wte && wpe, "embed_fwd: NULL pointer");
  DDP_CHECK(check_tokens("embed_fwd", tokens, B, T));
  const size_t c = (size_t)C;
  for (size_t b = 0; b < (size_t)B; ++b)
    for (size_t t = 0; t < (size_t)T; ++t) {
      const size_t bt = b * (size_t)T + t;
      row_add(out + bt * c, wte + (size_t)tokens[bt] * c, wpe + t * c, c);
    }
  return DDP_OK;
}

// dwte (V,C) +=, dwpe (>=T,C) = / +=, dout (B,T,C), tokens (B,T)
ddp_status_t ddp_cpu_embed_bwd_f32(ddp_backend_t *be, float *dwte, float *dwpe, const float *dout,
                                   const int32_t *tokens, int B, int T, int C, int accumulate,
                                   ddp_stream_t s) {
  NN_REQUIRE(B > 0 && T > 0 && C > 0, "embed_bwd: sizes B=%d T=%d C=%d must be positive", B, T, C);
  NN_REQUIRE(dwte && dwpe && dout && tokens, "embed_bwd: NULL pointer");
  DDP_CHECK(check_tokens("embed_bwd", tokens, B, T));
  const size_t c = (size_t)C;
  /* t outer, b inner: each dout row is read once for both gradients, and a
   * token seen several times is summed in a fixed (t, b) order. */
  for (size_t t = 0; t < (size_t)T; ++t) {
    float *pe = dwpe + t * c;
    for (size_t b = 0; b < (size_t)B; ++b) {
      const size_t bt = b * (size_t)T + t;
      const float *g = dout + bt * c;
      row_add_into(dwte + (size_t)tokens[bt] * c, g, c);
      if (b == 0 && !accumulate)
        memcpy(pe, g, c * sizeof *pe);
      else
        row_add_into(pe, g, c);
    }
  }
  return DDP_OK;
}

/* ---- layernorm ------------------------------------------------------------ */

#define LN_EPS 1e-5

// out (N,C), mean, rstd (N) or NULL, inp (N,C), w, b (C)
DDP_CPU_CLONES ddp_status_t ddp_cpu_layernorm_fwd_f32(ddp_backend_t *be, float *out, float *mean,
                                                      float *rstd, const float *inp, const float *w,
                                                      const float *b, int N, int C,
                                                      ddp_stream_t s) {
  NN_REQUIRE(N > 0 && C > 0, "layernorm_fwd: sizes N=%d C=%d must be positive", N, C);
  NN_REQUIRE(out && inp && w && b, "layernorm_fwd: NULL pointer");
  const size_t c = (size_t)C;
  for (size_t r = 0; r < (size_t)N; ++r) {
    const float *restrict x = inp + r * c;
    float *restrict y = out + r * c;
    /* Two passes in double: the mean of a row is exact to fp32 rounding even
     * for long rows or a large offset, and the variance is taken about that
     * mean, so a row like 1e4 + N(0,1) (variance 1e-8 of the mean's square,
     * below fp32 resolution) keeps its variance instead of cancelling it away
     * as E[x^2] - E[x]^2 would. Eight partial sums let -O2 vectorise. */
    double acc[CHUNK] = {0};
    size_t i = 0;
    for (; i + CHUNK <= c; i += CHUNK)
      for (size_t j = 0; j < CHUNK; ++j) acc[j] += x[i + j];
    double sum = 0;
    for (; i < c; ++i) sum += x[i];
    for (size_t j = 0; j < CHUNK; ++j) sum += acc[j];
    const double m = sum / (double)C;
    double vacc[CHUNK] = {0};
    i = 0;
    for (; i + CHUNK <= c; i += CHUNK)
      for (size_t j = 0; j < CHUNK; ++j) {
        const double d = (double)x[i + j] - m;
        vacc[j] += d * d;
      }
    double var = 0;
    for (; i < c; ++i) var += ((double)x[i] - m) * ((double)x[i] - m);
    for (size_t j = 0; j < CHUNK; ++j) var += vacc[j];
    var /= (double)C;
    /* The output uses the fp32 mean and rstd that are saved, so backward
     * recomputes exactly the normalised values forward produced. */
    const float mf = (float)m;
    const float rf = (float)(1.0 / sqrt(var + LN_EPS));
    for (i = 0; i + CPU_VW <= c; i += CPU_VW)
      cpu_vstore(y + i, (cpu_vload(x + i) - mf) * rf * cpu_vload(w + i) + cpu_vload(b + i));
    for (; i < c; ++i) y[i] = (x[i] - mf) * rf * w[i] + b[i];
    if (mean) mean[r] = mf;
    if (rstd) rstd[r] = rf;
  }
  return DDP_OK;
}

// dinp (N,C) +=, dw, db (C) = / +=, dout, inp (N,C), w (C), mean, rstd (N)
DDP_CPU_CLONES ddp_status_t ddp_cpu_layernorm_bwd_f32(ddp_backend_t *be, float *dinp, float *dw,
                                                      float *db, const float *dout,
                                                      const float *inp, const float *w,
                                                      const float *mean, const float *rstd, int N,
                                                      int C, int accumulate, ddp_stream_t s) {
  NN_REQUIRE(N > 0 && C > 0, "layernorm_bwd: sizes N=%d C=%d must be positive", N, C);
  NN_REQUIRE(dinp && dw && db && dout && inp && w && mean && rstd, "layernorm_bwd: NULL pointer");
  const size_t c = (size_t)C;
  /* Zeroing once and then always adding keeps the row loop branch-free; it
   * also overwrites whatever (NaN included) the buffers held. */
  if (!accumulate) {
    row_zero(dw, c);
    row_zero(db, c);
  }
  for (size_t r = 0; r < (size_t)N; ++r) {
    const float *x = inp + r * c, *g = dout + r * c;
    float *dx = dinp + r * c;
    const float mf = mean[r], rf = rstd[r];
    /* The two row means of llm.c's layernorm_backward: dnorm = w * dout,
     * mean(dnorm) and mean(dnorm * norm). */
    cpu_vf a1 = cpu_vsplat(0.0f), a2 = cpu_vsplat(0.0f);
    size_t i = 0;
    for (; i + CPU_VW <= c; i += CPU_VW) {
      const cpu_vf norm = (cpu_vload(x + i) - mf) * rf;
      const cpu_vf dnorm = cpu_vload(w + i) * cpu_vload(g + i);
      a1 += dnorm;
      a2 += dnorm * norm;
    }
    float s1 = cpu_vhsum(a1), s2 = cpu_vhsum(a2);
    for (; i < c; ++i) {
      const float norm = (x[i] - mf) * rf;
      const float dnorm = w[i] * g[i];
      s1 += dnorm;
      s2 += dnorm * norm;
    }
    const float dnorm_mean = s1 / (float)C, dnorm_norm_mean = s2 / (float)C;
    for (i = 0; i + CPU_VW <= c; i += CPU_VW) {
      const cpu_vf gv = cpu_vload(g + i);
      const cpu_vf norm = (cpu_vload(x + i) - mf) * rf;
      const cpu_vf dnorm = cpu_vload(w + i) * gv;
      cpu_vstore(db + i, cpu_vload(db + i) + gv);
      cpu_vstore(dw + i, cpu_vload(dw + i) + norm * gv);
      cpu_vstore(dx + i, cpu_vload(dx + i) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rf);
    }
    for (; i < c; ++i) {
      const float norm = (x[i] - mf) * rf;
      const float dnorm = w[i] * g[i];
      db[i] += g[i];
      dw[i] += norm * g[i];
      dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rf;
    }
  }
  return DDP_OK;
}

/* ---- linear --------------------------------------------------------------- */

// out (N,OC), inp (N,IC), w (OC,IC), bias (OC) or NULL
ddp_status_t ddp_cpu_linear_fwd_f32(ddp_backend_t *be, float *out, const float *inp, const float *w,
                                    const float *bias, int N, int IC, int OC, ddp_stream_t s) {
  NN_REQUIRE(N > 0 && IC > 0 && OC > 0, "linear_fwd: sizes N=%d IC=%d OC=%d must be positive", N,
             IC, OC);
  NN_REQUIRE(out && inp && w, "linear_fwd: NULL pointer");
  const size_t oc = (size_t)OC;
  ddp_gemm_t g = ddp_gemm_packed_f32(N, OC, IC, inp, w, out);
  g.trans_b = DDP_TRANSPOSE_YES; /* w is (OC, IC): out = inp w^T */
  g.ldb = IC;
  if (bias) {
    /* Seed every row with the bias and let the GEMM add to it (beta 1)
     * rather than adding the bias in a second pass over out. On the QKV
     * shape 4096x256 -> 768, one thread, best of 40 (mean): GEMM alone
     * 15.1 ms (20.9), GEMM + bias pass 16.6 ms (22.2), seed + beta 1
     * 15.2 ms (21.8). The seed is nearly free because OpenBLAS with beta 0
     * makes its own pass over C to zero it, which beta 1 skips. */
    for (size_t r = 0; r < (size_t)N; ++r) memcpy(out + r * oc, bias, oc * sizeof *out);
    g.beta = 1.0f;
  }
  return ddp_backend_gemm(be, &g, s);
}

/* dst (n) = / += the column sums of src (rows, n). Rows are summed in fp32
 * in blocks of COLSUM_ROWS and the blocks in double, for a column strip of
 * COLSUM_COLS at a time (stack buffers, no allocation): a plain fp32 running
 * sum over N = 4096 rows loses accuracy in proportion to N (measured: 6x
 * PyTorch's error on dbias at N = 1024; with blocks it is below PyTorch's). */
#define COLSUM_COLS 256
#define COLSUM_ROWS 32

void ddp_cpu_column_sums(float *dst, const float *src, size_t rows, size_t n, int accumulate) {
  for (size_t c0 = 0; c0 < n; c0 += COLSUM_COLS) {
    const size_t nc = n - c0 < COLSUM_COLS ? n - c0 : COLSUM_COLS;
    double total[COLSUM_COLS];
    for (size_t j = 0; j < nc; ++j) total[j] = accumulate ? (double)dst[c0 + j] : 0.0;
    for (size_t r0 = 0; r0 < rows; r0 += COLSUM_ROWS) {
      const size_t r1 = rows - r0 < COLSUM_ROWS ? rows : r0 + COLSUM_ROWS;
      float part[COLSUM_COLS];
      memcpy(part, src + r0 * n + c0, nc * sizeof *part);
      for (size_t r = r0 + 1; r < r1; ++r) row_add_into(part, src + r * n + c0, nc);
      size_t j = 0;
      for (; j + CHUNK <= nc; j += CHUNK)
        for (size_t k = 0; k < CHUNK; ++k) total[j + k] += part[j + k];
      for (; j < nc; ++j) total[j] += part[j];
    }
    for (size_t j = 0; j < nc; ++j) dst[c0 + j] = (float)total[j];
  }
}

// dinp (N,IC) = / += or NULL, dw (OC,IC) = / +=, dbias (OC) = / += or NULL,
// dout (N,OC), inp (N,IC), w (OC,IC)
ddp_status_t ddp_cpu_linear_bwd_f32(ddp_backend_t *be, float *dinp, float *dw, float *dbias,
                                    const float *dout, const float *inp, const float *w, int N,
                                    int IC, int OC, int accumulate, int accumulate_dinp,
                                    ddp_stream_t s) {
  NN_REQUIRE(N > 0 && IC > 0 && OC > 0, "linear_bwd: sizes N=%d IC=%d OC=%d must be positive", N,
             IC, OC);
  NN_REQUIRE(dw && dout && inp && w, "linear_bwd: NULL pointer");
  if (dinp) {
    /* dinp (N,IC) = dout (N,OC) @ w (OC,IC) */
    ddp_gemm_t g = ddp_gemm_packed_f32(N, IC, OC, dout, w, dinp);
    g.beta = accumulate_dinp ? 1.0f : 0.0f;
    DDP_CHECK(ddp_backend_gemm(be, &g, s));
  }
  /* dw (OC,IC) = dout^T (OC,N) @ inp (N,IC) */
  ddp_gemm_t g = ddp_gemm_packed_f32(OC, IC, N, dout, inp, dw);
  g.trans_a = DDP_TRANSPOSE_YES;
  g.lda = OC;
  g.beta = accumulate ? 1.0f : 0.0f;
  DDP_CHECK(ddp_backend_gemm(be, &g, s));
  if (dbias) ddp_cpu_column_sums(dbias, dout, (size_t)N, (size_t)OC, accumulate);
  return DDP_OK;
}

/* ---- GELU ----------------------------------------------------------------- */

/* GELU, tanh form: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
 * Computed as x * sigmoid(2u) = x / (1 + e), e = exp(-2u), which is the
 * same function (0.5 (1 + tanh u) = sigmoid(2u)) but needs only exp, which
 * vectorises, and stays accurate where 1 + tanh(u) cancels (x << 0).
 * -2u is capped at 80 so 1 / (1 + e) never goes subnormal (GELU there is
 * below 1e-33 in magnitude either way). */
#define GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K1 0.044715f

static inline cpu_vf gelu_exp_neg2u(cpu_vf x, cpu_vf *du) {
  const cpu_vf x2 = x * x;
  const cpu_vf u = GELU_K0 * (x + GELU_K1 * x2 * x);
  if (du) *du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * x2);
  cpu_vf t = -2.0f * u;
  t = cpu_vselect(t > 80.0f, cpu_vsplat(80.0f), t);
  return cpu_vexp(t);
}

static inline cpu_vf gelu_fwd_v(cpu_vf x) {
  const cpu_vf e = gelu_exp_neg2u(x, NULL);
  return x / (1.0f + e);
}

/* d/dx [x sigmoid(2u)] = s + 2 x s (1 - s) u' with s = 1/(1+e) and
 * 1 - s = e s (again no cancellation). */
static inline cpu_vf gelu_bwd_v(cpu_vf x, cpu_vf g) {
  cpu_vf du;
  const cpu_vf e = gelu_exp_neg2u(x, &du);
  const cpu_vf sg = 1.0f / (1.0f + e);
  return g * sg * (1.0f + 2.0f * x * e * sg * du);
}

// out (n), inp (n)
DDP_CPU_CLONES ddp_status_t ddp_cpu_gelu_fwd_f32(ddp_backend_t *be, float *out, const float *inp,
                                                 size_t n, ddp_stream_t s) {
  if (n == 0) return DDP_OK;
  NN_REQUIRE(out && inp, "gelu_fwd: NULL pointer");
  size_t i = 0;
  for (; i + CPU_VW <= n; i += CPU_VW) cpu_vstore(out + i, gelu_fwd_v(cpu_vload(inp + i)));
  if (i < n) cpu_vstore_part(out + i, gelu_fwd_v(cpu_vload_part(inp + i, n - i, 0.0f)), n - i);
  return DDP_OK;
}

// dinp (n) (may alias dout), inp (n), dout (n)
DDP_CPU_CLONES ddp_status_t ddp_cpu_gelu_bwd_f32(ddp_backend_t *be, float *dinp, const float *inp,
                                                 const float *dout, size_t n, ddp_stream_t s) {
  if (n == 0) return DDP_OK;
  NN_REQUIRE(dinp && inp && dout, "gelu_bwd: NULL pointer");
  size_t i = 0;
  for (; i + CPU_VW <= n; i += CPU_VW)
    cpu_vstore(dinp + i, gelu_bwd_v(cpu_vload(inp + i), cpu_vload(dout + i)));
  if (i < n) {
    const size_t k = n - i;
    cpu_vstore_part(dinp + i,
                    gelu_bwd_v(cpu_vload_part(inp + i, k, 0.0f), cpu_vload_part(dout + i, k, 0.0f)),
                    k);
  }
  return DDP_OK;
}

/* ---- residual add --------------------------------------------------------- */

// out (n) (may alias a or b), a, b (n)
DDP_CPU_CLONES ddp_status_t ddp_cpu_add_f32(ddp_backend_t *be, float *out, const float *a,
                                            const float *b, size_t n, ddp_stream_t s) {
  if (n == 0) return DDP_OK;
  NN_REQUIRE(out && a && b, "add: NULL pointer");
  /* Vector loads precede the store of each chunk, so out == a (or == b) is
   * safe; restrict-qualified scalar loops could not promise that. */
  size_t i = 0;
  for (; i + 2 * CPU_VW <= n; i += 2 * CPU_VW) {
    const cpu_vf x0 = cpu_vload(a + i) + cpu_vload(b + i);
    const cpu_vf x1 = cpu_vload(a + i + CPU_VW) + cpu_vload(b + i + CPU_VW);
    cpu_vstore(out + i, x0);
    cpu_vstore(out + i + CPU_VW, x1);
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
  return DDP_OK;
}

/* ---- softmax cross-entropy ------------------------------------------------ */

/* sum_i exp(x[i] - mx) over n entries; with e non-NULL also stores the
 * fp32 exponentials there (e may alias x). Lanes accumulate in fp32 over
 * blocks of XENT_BLOCK entries, blocks in double: a 50257-entry vocabulary
 * summed in fp32 alone would lose up to ~1e-5 of the sum to rounding, while
 * converting every term to double would cost a third of the pass. */
#define XENT_BLOCK 128

static double exp_sum_row(float *e, const float *x, size_t n, float mx) {
  double total = 0;
  size_t i = 0;
  while (i + CPU_VW <= n) {
    const size_t end = n - i > XENT_BLOCK ? i + XENT_BLOCK : n;
    cpu_vf acc = cpu_vsplat(0.0f);
    for (; i + CPU_VW <= end; i += CPU_VW) {
      const cpu_vf v = cpu_vexp(cpu_vload(x + i) - mx);
      if (e) cpu_vstore(e + i, v);
      acc += v;
    }
    total += (double)cpu_vhsum(acc);
  }
  if (i < n) {
    /* -inf in the spare lanes gives exp() == 0 there. */
    const cpu_vf v = cpu_vexp(cpu_vload_part(x + i, n - i, -__builtin_inff()) - mx);
    if (e) cpu_vstore_part(e + i, v, n - i);
    total += (double)cpu_vhsum(v);
  }
  return total;
}

/* The mean of x[0..n), the smoothing term's uniform target: vector sums of
 * XENT_BLOCK entries added in double, as exp_sum_row's. */
static double row_mean(const float *x, size_t n) {
  double total = 0;
  size_t i = 0;
  while (i + CPU_VW <= n) {
    const size_t end = n - i > XENT_BLOCK ? i + XENT_BLOCK : n;
    cpu_vf acc = cpu_vsplat(0.0f);
    for (; i + CPU_VW <= end; i += CPU_VW) acc += cpu_vload(x + i);
    total += (double)cpu_vhsum(acc);
  }
  for (; i < n; ++i) total += (double)x[i];
  return total / (double)n;
}

// losses (N), loss_sum (1) +=, dlogits (N,Vp) or NULL (may alias logits),
// logits (N,Vp), targets (N) in [-1, V), smoothing in [0, 1)
DDP_CPU_CLONES ddp_status_t ddp_cpu_xent_fused_f32(ddp_backend_t *be, float *losses,
                                                   float *loss_sum, float *dlogits,
                                                   const float *logits, const int32_t *targets,
                                                   float dloss, float smoothing, int N, int V,
                                                   int Vp, ddp_stream_t s) {
  NN_REQUIRE(N > 0 && V > 0 && Vp >= V,
             "xent_fused: sizes N=%d V=%d Vp=%d must be positive with Vp >= V", N, V, Vp);
  NN_REQUIRE(losses && loss_sum && logits && targets, "xent_fused: NULL pointer");
  NN_REQUIRE(smoothing >= 0.0f && smoothing < 1.0f,
             "xent_fused: label smoothing %g is outside [0, 1)", (double)smoothing);
  for (int r = 0; r < N; ++r)
    NN_REQUIRE(targets[r] >= -1 && targets[r] < V,
               "xent_fused: target %d at row %d is outside [-1, %d) (-1 = ignore)", (int)targets[r],
               r, V);
  const size_t v = (size_t)V, vp = (size_t)Vp;
  double total = 0;
  for (size_t r = 0; r < (size_t)N; ++r) {
    const float *x = logits + r * vp;
    float *d = dlogits ? dlogits + r * vp : NULL;
    const int32_t t = targets[r];
    if (t < 0) {
      losses[r] = 0.0f;
      if (d) row_zero(d, vp);
      continue;
    }
    /* Everything read from the row (max, target logit, exponentials) is
     * read before d, which may be the same memory, is written. */
    const float mx = cpu_row_max(x, v);
    const float xt = x[t];
    const double mean = smoothing != 0.0f ? row_mean(x, v) : 0.0;
    const double sum = exp_sum_row(d, x, v, mx);
    /* (max - x_t) + log(sum) rather than lse - x_t: with logits near 1e4 the
     * lse would carry an fp32 rounding of ~1e-3 into a loss of order 1. */
    double loss = ((double)mx - (double)xt) + log(sum);
    /* Smoothing mixes in the mean of -log p_c over the V classes,
     * (max - mean x) + log(sum); without it the loss is computed exactly as
     * it always was, so an unsmoothed run is bit-identical. */
    if (smoothing != 0.0f)
      loss =
          (1.0 - (double)smoothing) * loss + (double)smoothing * (((double)mx - mean) + log(sum));
    losses[r] = (float)loss;
    total += loss;
    if (d) {
      const float scale = (float)((double)dloss / sum);
      size_t i = 0;
      if (smoothing == 0.0f) {
        for (; i + CPU_VW <= v; i += CPU_VW) cpu_vstore(d + i, cpu_vload(d + i) * scale);
        for (; i < v; ++i) d[i] *= scale;
        d[t] -= dloss;
      } else {
        /* the target distribution (1 - e) onehot + e / V */
        const float uniform = (float)((double)smoothing * (double)dloss / (double)v);
        const cpu_vf u = cpu_vsplat(uniform);
        for (; i + CPU_VW <= v; i += CPU_VW) cpu_vstore(d + i, cpu_vload(d + i) * scale - u);
        for (; i < v; ++i) d[i] = d[i] * scale - uniform;
        d[t] -= (float)((1.0 - (double)smoothing) * (double)dloss);
      }
      if (vp > v) row_zero(d + v, vp - v);
    }
  }
  *loss_sum = (float)((double)*loss_sum + total);
  return DDP_OK;
}
