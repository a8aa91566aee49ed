/* The CPU ops table (ddptrain/nn.h) over fp32, bf16 and fp16 activations.
 *
 * fp32 calls go straight to the fp32 kernels (cpu_nn.c, cpu_attention.c),
 * so fp32 results are exactly those kernels'. Under bf16/fp16 each op
 * widens its half operands to fp32 (exact), runs the same fp32 kernel, and
 * narrows each output once with round to nearest even (src/core/dtype.c's
 * converters, the project's definition of the conversion). That makes every
 * half op equal, bit for bit, to "compute in fp32, round the stored result"
 * on half-representable inputs, and gives the CUDA kernels a precise oracle.
 *
 * Where the work is per row (embedding, layernorm) or per element (GELU,
 * add), rows or fixed blocks go through small fp32 buffers; GEMM operands,
 * attention and cross-entropy are widened whole into the backend's fp32
 * workspace (cpu_nn_workspace.c), reserved before the step loop, so the
 * products are single sgemm calls with fp32 accumulation, the same calls as
 * under fp32. */
#include <stdint.h>

#include "ddptrain/check.h"
#include "ddptrain/dtype.h"
#include "ddptrain/nn.h"
#include "backend/cpu/cpu_nn_impl.h"

#define NN_REQUIRE(cond, ...)                                       \
  do {                                                              \
    if (!(cond)) DDP_FAIL(DDP_ERR_INVALID_ARG, "nn: " __VA_ARGS__); \
  } while (0)

/* Elements per block of the element-wise ops (at most three fp32 blocks on
 * the stack: 24 KiB). */
#define EW_BLOCK 2048

static ddp_status_t check_dt(ddp_dtype_t dt, const char *op) {
  NN_REQUIRE(dt == DDP_DTYPE_F32 || dt == DDP_DTYPE_BF16 || dt == DDP_DTYPE_F16,
             "%s: activation dtype %s (%d) is not fp32, bf16 or fp16", op, ddp_dtype_name(dt),
             (int)dt);
  return DDP_OK;
}

/* Half element i of a bf16/fp16 buffer. */
static inline const uint16_t *hat(const void *p, size_t i) {
  return (const uint16_t *)p + i;
}
static inline uint16_t *hat_mut(void *p, size_t i) {
  return (uint16_t *)p + i;
}

/* Arguments are validated before these run, so the conversions cannot fail
 * (non-NULL, non-overlapping: the workspace is never a caller's buffer). */
static void widen(float *dst, const void *src, ddp_dtype_t dt, size_t n) {
  (void)ddp_convert_host(dst, DDP_DTYPE_F32, src, dt, n);
}

static void narrow(void *dst, const float *src, ddp_dtype_t dt, size_t n) {
  (void)ddp_convert_host(dst, dt, src, DDP_DTYPE_F32, n);
}

/* ---- embedding ------------------------------------------------------------ */

static ddp_status_t embed_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const int32_t *tokens,
                              const void *wte, const void *wpe, int B, int T, int C,
                              ddp_stream_t s) {
  DDP_CHECK(check_dt(dt, "embed_fwd"));
  if (dt == DDP_DTYPE_F32) return ddp_cpu_embed_fwd_f32(be, out, tokens, wte, wpe, B, T, C, s);
  NN_REQUIRE(B > 0 && T > 0 && C > 0, "embed_fwd: sizes B=%d T=%d C=%d must be positive", B, T, C);
  NN_REQUIRE(out && tokens && wte && wpe, "embed_fwd: NULL pointer");
  const size_t c = (size_t)C, n = (size_t)B * (size_t)T;
  for (size_t i = 0; i < n; ++i)
    NN_REQUIRE(tokens[i] >= 0, "embed_fwd: token %d at (b=%zu, t=%zu) is negative", (int)tokens[i],
               i / (size_t)T, i % (size_t)T);
  float *ws;
  DDP_CHECK(ddp_cpu_nn_workspace(be, 2 * c, "embed_fwd", &ws));
  float *e = ws, *p = ws + c;
  for (size_t i = 0; i < n; ++i) {
    widen(e, hat(wte, (size_t)tokens[i] * c), dt, c);
    widen(p, hat(wpe, (i % (size_t)T) * c), dt, c);
    for (size_t j = 0; j < c; ++j) e[j] += p[j];
    narrow(hat_mut(out, i * c), e, dt, c);
  }
  return DDP_OK;
}

static ddp_status_t embed_bwd(ddp_backend_t *be, ddp_dtype_t dt, float *dwte, float *dwpe,
                              const void *dout, const int32_t *tokens, int B, int T, int C,
                              int accumulate, ddp_stream_t s) {
  DDP_CHECK(check_dt(dt, "embed_bwd"));
  if (dt == DDP_DTYPE_F32)
    return ddp_cpu_embed_bwd_f32(be, dwte, dwpe, dout, tokens, B, T, C, accumulate, s);
  NN_REQUIRE(B > 0 && T > 0 && C > 0, "embed_bwd: sizes B=%d T=%d C=%d must be positive", B, T, C);
  NN_REQUIRE(dwte && dwpe && dout && tokens, "embed_bwd: NULL pointer");
  const size_t n = (size_t)B * (size_t)T * (size_t)C;
  float *ws;
  DDP_CHECK(ddp_cpu_nn_workspace(be, n, "embed_bwd", &ws));
  widen(ws, dout, dt, n);
  return ddp_cpu_embed_bwd_f32(be, dwte, dwpe, ws, tokens, B, T, C, accumulate, s);
}

/* ---- layernorm: one row at a time through the fp32 kernel ------------------ */

/* Row r of a layernorm under dt (any dt, also fp32 where out is a float
 * buffer): x (C, fp32) through the fp32 kernel into y, stored once into
 * out's row r. Rows are independent in the kernel: row by row is the same
 * arithmetic as one call over all rows. */
static ddp_status_t layernorm_fwd_row(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *mean,
                                      float *rstd, const float *x, const float *wf, const float *bf,
                                      float *y, size_t r, int C, ddp_stream_t s) {
  const size_t c = (size_t)C;
  DDP_CHECK(ddp_cpu_layernorm_fwd_f32(be, y, mean ? mean + r : NULL, rstd ? rstd + r : NULL, x, wf,
                                      bf, 1, C, s));
  if (dt != DDP_DTYPE_F32) narrow(hat_mut(out, r * c), y, dt, c);
  return DDP_OK;
}

static ddp_status_t layernorm_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *mean,
                                  float *rstd, const void *inp, const void *w, const void *b, int N,
                                  int C, ddp_stream_t s) {
  DDP_CHECK(check_dt(dt, "layernorm_fwd"));
  if (dt == DDP_DTYPE_F32)
    return ddp_cpu_layernorm_fwd_f32(be, out, mean, rstd, inp, w, b, N, C, s);
  NN_REQUIRE(N > 0 && C > 0, "layernorm_fwd: sizes N=%d C=%d must be positive", N, C);
  NN_REQUIRE(out && inp && w && b, "layernorm_fwd: NULL pointer");
  const size_t c = (size_t)C;
  float *ws;
  DDP_CHECK(ddp_cpu_nn_workspace(be, 4 * c, "layernorm_fwd", &ws));
  float *wf = ws, *bf = ws + c, *x = ws + 2 * c, *y = ws + 3 * c;
  widen(wf, w, dt, c);
  widen(bf, b, dt, c);
  for (size_t r = 0; r < (size_t)N; ++r) {
    widen(x, hat(inp, r * c), dt, c);
    DDP_CHECK(layernorm_fwd_row(be, dt, out, mean, rstd, x, wf, bf, y, r, C, s));
  }
  return DDP_OK;
}

static ddp_status_t layernorm_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dw,
                                  float *db, const void *dout, const void *inp, const void *w,
                                  const float *mean, const float *rstd, int N, int C,
                                  int accumulate, ddp_stream_t s) {
  DDP_CHECK(check_dt(dt, "layernorm_bwd"));
  if (dt == DDP_DTYPE_F32)
    return ddp_cpu_layernorm_bwd_f32(be, dinp, dw, db, dout, inp, w, mean, rstd, N, C, accumulate,
                                     s);
  NN_REQUIRE(N > 0 && C > 0, "layernorm_bwd: sizes N=%d C=%d must be positive", N, C);
  NN_REQUIRE(dinp && dw && db && dout && inp && w && mean && rstd, "layernorm_bwd: NULL pointer");
  const size_t c = (size_t)C;
  float *ws;
  DDP_CHECK(ddp_cpu_nn_workspace(be, 4 * c, "layernorm_bwd", &ws));
  float *wf = ws, *dx = ws + c, *g = ws + 2 * c, *x = ws + 3 * c;
  widen(wf, w, dt, c);
  for (size_t r = 0; r < (size_t)N; ++r) {
    widen(dx, hat(dinp, r * c), dt, c);
    widen(g, hat(dout, r * c), dt, c);
    widen(x, hat(inp, r * c), dt, c);
    /* The kernel zeroes dw, db first (accumulate 0) and then adds row after
     * row; the first row here does the zeroing, later rows add: the same
     * sums in the same order. */
    DDP_CHECK(ddp_cpu_layernorm_bwd_f32(be, dx, dw, db, g, x, wf, mean + r, rstd + r, 1, C,
                                        accumulate || r > 0, s));
    narrow(hat_mut(dinp, r * c), dx, dt, c);
  }
  return DDP_OK;
}

/* ---- linear: whole operands widened, one sgemm each ------------------------- */

static size_t linear_fwd_floats(size_t n, size_t ic, size_t oc) {
  return n * ic + oc * ic + oc + n * oc;
}

static size_t linear_bwd_floats(size_t n, size_t ic, size_t oc) {
  return n * oc + 2 * n * ic + oc * ic;
}

static ddp_status_t linear_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                               const void *w, const void *bias, int N, int IC, int OC,
                               ddp_stream_t s) {
  DDP_CHECK(check_dt(dt, "linear_fwd"));
  if (dt == DDP_DTYPE_F32) return ddp_cpu_linear_fwd_f32(be, out, inp, w, bias, N, IC, OC, s);
  NN_REQUIRE(N > 0 && IC > 0 && OC > 0, "linear_fwd: sizes N=%d IC=%d OC=%d must be positive", N,
             IC, OC);
  NN_REQUIRE(out && inp && w, "linear_fwd: NULL pointer");
  const size_t n = (size_t)N, ic = (size_t)IC, oc = (size_t)OC;
  float *ws;
  DDP_CHECK(ddp_cpu_nn_workspace(be, linear_fwd_floats(n, ic, oc), "linear_fwd", &ws));
  float *x = ws, *wf = x + n * ic, *bf = wf + oc * ic, *y = bf + oc;
  widen(x, inp, dt, n * ic);
  widen(wf, w, dt, oc * ic);
  if (bias) widen(bf, bias, dt, oc);
  DDP_CHECK(ddp_cpu_linear_fwd_f32(be, y, x, wf, bias ? bf : NULL, N, IC, OC, s));
  narrow(out, y, dt, n * oc);
  return DDP_OK;
}

static ddp_status_t linear_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dw,
                               float *dbias, const void *dout, const void *inp, const void *w,
                               int N, int IC, int OC, int accumulate, int accumulate_dinp,
                               ddp_stream_t s) {
  DDP_CHECK(check_dt(dt, "linear_bwd"));
  if (dt == DDP_DTYPE_F32)
    return ddp_cpu_linear_bwd_f32(be, dinp, dw, dbias, dout, inp, w, N, IC, OC, accumulate,
                                  accumulate_dinp, s);
  NN_REQUIRE(N > 0 && IC > 0 && OC > 0, "linear_bwd: sizes N=%d IC=%d OC=%d must be positive", N,
             IC, OC);
  NN_REQUIRE(dw && dout && inp && w, "linear_bwd: NULL pointer");
  const size_t n = (size_t)N, ic = (size_t)IC, oc = (size_t)OC;
  float *ws;
  DDP_CHECK(ddp_cpu_nn_workspace(be, linear_bwd_floats(n, ic, oc), "linear_bwd", &ws));
  float *g = ws, *x = g + n * oc, *dx = x + n * ic, *wf = dx + n * ic;
  widen(g, dout, dt, n * oc);
  widen(x, inp, dt, n * ic);
  widen(wf, w, dt, oc * ic);
  if (dinp && accumulate_dinp) widen(dx, dinp, dt, n * ic);
  DDP_CHECK(ddp_cpu_linear_bwd_f32(be, dinp ? dx : NULL, dw, dbias, g, x, wf, N, IC, OC, accumulate,
                                   accumulate_dinp, s));
  if (dinp) narrow(dinp, dx, dt, n * ic);
  return DDP_OK;
}

/* ---- element-wise: fixed blocks on the stack -------------------------------- */

static ddp_status_t gelu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                             size_t n, ddp_stream_t s) {
  DDP_CHECK(check_dt(dt, "gelu_fwd"));
  if (dt == DDP_DTYPE_F32) return ddp_cpu_gelu_fwd_f32(be, out, inp, n, s);
  if (n == 0) return DDP_OK;
  NN_REQUIRE(out && inp, "gelu_fwd: NULL pointer");
  float x[EW_BLOCK];
  for (size_t i = 0; i < n; i += EW_BLOCK) {
    const size_t k = n - i < EW_BLOCK ? n - i : EW_BLOCK;
    widen(x, hat(inp, i), dt, k);
    DDP_CHECK(ddp_cpu_gelu_fwd_f32(be, x, x, k, s));
    narrow(hat_mut(out, i), x, dt, k);
  }
  return DDP_OK;
}

/* The fp32 kernels of the two-input element-wise ops: out = f(x, y). */
typedef ddp_status_t (*binary_f32_fn)(ddp_backend_t *be, float *out, const float *x, const float *y,
                                      size_t n, ddp_stream_t s);

/* out = f(x, y) on half buffers, block by block; both inputs of a block are
 * read before its output (which may alias either) is written. */
static ddp_status_t binary_blocks(ddp_backend_t *be, ddp_dtype_t dt, binary_f32_fn f, void *out,
                                  const void *x, const void *y, size_t n, ddp_stream_t s) {
  float xf[EW_BLOCK], yf[EW_BLOCK], of[EW_BLOCK];
  for (size_t i = 0; i < n; i += EW_BLOCK) {
    const size_t k = n - i < EW_BLOCK ? n - i : EW_BLOCK;
    widen(xf, hat(x, i), dt, k);
    widen(yf, hat(y, i), dt, k);
    DDP_CHECK(f(be, of, xf, yf, k, s));
    narrow(hat_mut(out, i), of, dt, k);
  }
  return DDP_OK;
}

static ddp_status_t gelu_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *inp,
                             const void *dout, size_t n, ddp_stream_t s) {
  DDP_CHECK(check_dt(dt, "gelu_bwd"));
  if (dt == DDP_DTYPE_F32) return ddp_cpu_gelu_bwd_f32(be, dinp, inp, dout, n, s);
  if (n == 0) return DDP_OK;
  NN_REQUIRE(dinp && inp && dout, "gelu_bwd: NULL pointer");
  return binary_blocks(be, dt, ddp_cpu_gelu_bwd_f32, dinp, inp, dout, n, s);
}

static ddp_status_t add(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *a, const void *b,
                        size_t n, ddp_stream_t s) {
  DDP_CHECK(check_dt(dt, "add"));
  if (dt == DDP_DTYPE_F32) return ddp_cpu_add_f32(be, out, a, b, n, s);
  if (n == 0) return DDP_OK;
  NN_REQUIRE(out && a && b, "add: NULL pointer");
  return binary_blocks(be, dt, ddp_cpu_add_f32, out, a, b, n, s);
}

/* ---- residual add + layernorm: add's and layernorm_fwd's paths, row by row -- */

// resid (N,C) (may alias a), out (N,C), mean, rstd (N) or NULL, a, b (N,C), w, bias (C)
static ddp_status_t residual_layernorm_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *resid,
                                           void *out, float *mean, float *rstd, const void *a,
                                           const void *b, const void *w, const void *bias, int N,
                                           int C, ddp_stream_t s) {
  DDP_CHECK(check_dt(dt, "residual_layernorm_fwd"));
  NN_REQUIRE(N > 0 && C > 0, "residual_layernorm_fwd: sizes N=%d C=%d must be positive", N, C);
  NN_REQUIRE(resid && out && a && b && w && bias, "residual_layernorm_fwd: NULL pointer");
  NN_REQUIRE(out != resid && out != a && out != b,
             "residual_layernorm_fwd: out must not alias resid, a or b");
  const size_t c = (size_t)C;
  /* Each row is added, stored, and normalised while it is still in cache:
   * the same kernels on the same values as `add` over all rows followed by
   * layernorm_fwd, so the results are bit-identical to that pair. */
  if (dt == DDP_DTYPE_F32) {
    for (size_t r = 0; r < (size_t)N; ++r) {
      float *x = (float *)resid + r * c;
      DDP_CHECK(ddp_cpu_add_f32(be, x, (const float *)a + r * c, (const float *)b + r * c, c, s));
      DDP_CHECK(
          layernorm_fwd_row(be, dt, out, mean, rstd, x, w, bias, (float *)out + r * c, r, C, s));
    }
    return DDP_OK;
  }
  float *ws;
  DDP_CHECK(ddp_cpu_nn_workspace(be, 4 * c, "residual_layernorm_fwd", &ws));
  float *wf = ws, *bf = ws + c, *x = ws + 2 * c, *y = ws + 3 * c;
  widen(wf, w, dt, c);
  widen(bf, bias, dt, c);
  for (size_t r = 0; r < (size_t)N; ++r) {
    widen(x, hat(a, r * c), dt, c);
    widen(y, hat(b, r * c), dt, c);
    DDP_CHECK(ddp_cpu_add_f32(be, x, x, y, c, s));
    narrow(hat_mut(resid, r * c), x, dt, c);
    /* LayerNorm sees the stored (rounded) sum, as after a separate `add`. */
    widen(x, hat(resid, r * c), dt, c);
    DDP_CHECK(layernorm_fwd_row(be, dt, out, mean, rstd, x, wf, bf, y, r, C, s));
  }
  return DDP_OK;
}

/* ---- attention and cross-entropy: whole tensors ----------------------------- */

static ddp_status_t attention_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *att,
                                  const void *qkv, int B, int T, int C, int NH, ddp_stream_t s) {
  DDP_CHECK(check_dt(dt, "attention_fwd"));
  if (dt == DDP_DTYPE_F32) return ddp_cpu_attention_fwd_f32(be, out, att, qkv, B, T, C, NH, s);
  NN_REQUIRE(B > 0 && T > 0 && C > 0 && NH > 0, "attention_fwd: sizes must be positive");
  NN_REQUIRE(out && qkv, "attention_fwd: NULL pointer");
  const size_t nc = (size_t)B * (size_t)T * (size_t)C;
  float *ws;
  DDP_CHECK(ddp_cpu_nn_workspace(be, 4 * nc, "attention_fwd", &ws));
  widen(ws, qkv, dt, 3 * nc);
  DDP_CHECK(ddp_cpu_attention_fwd_f32(be, ws + 3 * nc, att, ws, B, T, C, NH, s));
  narrow(out, ws + 3 * nc, dt, nc);
  return DDP_OK;
}

static ddp_status_t attention_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dqkv, float *scratch,
                                  const void *dout, const void *qkv, const float *att, int B, int T,
                                  int C, int NH, ddp_stream_t s) {
  DDP_CHECK(check_dt(dt, "attention_bwd"));
  if (dt == DDP_DTYPE_F32)
    return ddp_cpu_attention_bwd_f32(be, dqkv, scratch, dout, qkv, att, B, T, C, NH, s);
  NN_REQUIRE(B > 0 && T > 0 && C > 0 && NH > 0, "attention_bwd: sizes must be positive");
  NN_REQUIRE(dqkv && scratch && dout && qkv && att, "attention_bwd: NULL pointer");
  const size_t nc = (size_t)B * (size_t)T * (size_t)C;
  float *ws;
  DDP_CHECK(ddp_cpu_nn_workspace(be, 7 * nc, "attention_bwd", &ws));
  float *dq = ws, *g = ws + 3 * nc, *q = ws + 4 * nc;
  widen(g, dout, dt, nc);
  widen(q, qkv, dt, 3 * nc);
  DDP_CHECK(ddp_cpu_attention_bwd_f32(be, dq, scratch, g, q, att, B, T, C, NH, s));
  narrow(dqkv, dq, dt, 3 * nc);
  return DDP_OK;
}

static ddp_status_t xent_fused(ddp_backend_t *be, ddp_dtype_t dt, float *losses, float *loss_sum,
                               void *dlogits, const void *logits, const int32_t *targets,
                               float dloss, float smoothing, int N, int V, int Vp, ddp_stream_t s) {
  DDP_CHECK(check_dt(dt, "xent_fused"));
  if (dt == DDP_DTYPE_F32)
    return ddp_cpu_xent_fused_f32(be, losses, loss_sum, dlogits, logits, targets, dloss, smoothing,
                                  N, V, Vp, s);
  NN_REQUIRE(N > 0 && V > 0 && Vp >= V,
             "xent_fused: sizes N=%d V=%d Vp=%d must be positive with Vp >= V", N, V, Vp);
  NN_REQUIRE(losses && loss_sum && logits && targets, "xent_fused: NULL pointer");
  NN_REQUIRE(smoothing >= 0.0f && smoothing < 1.0f,
             "xent_fused: label smoothing %g is outside [0, 1)", (double)smoothing);
  const size_t n = (size_t)N * (size_t)Vp;
  float *ws;
  DDP_CHECK(ddp_cpu_nn_workspace(be, n, "xent_fused", &ws));
  widen(ws, logits, dt, n);
  /* One kernel call over all rows: the loss sum is rounded to fp32 once, as
   * under fp32. The gradient overwrites the widened logits in place. */
  DDP_CHECK(ddp_cpu_xent_fused_f32(be, losses, loss_sum, dlogits ? ws : NULL, ws, targets, dloss,
                                   smoothing, N, V, Vp, s));
  if (dlogits) narrow(dlogits, ws, dt, n);
  return DDP_OK;
}

/* ---- workspace -------------------------------------------------------------- */

/* The largest workspace any op above takes for the shapes reserve() names. */
static size_t gpt_workspace_floats(size_t n, size_t c, size_t v) {
  const size_t pairs[][2] = {{c, c}, {c, 3 * c}, {c, 4 * c}, {4 * c, c}, {c, v}};
  size_t need = 7 * n * c; /* attention backward */
  if (ddp_cpu_flash_attention_workspace_floats(n, c) > need)
    need = ddp_cpu_flash_attention_workspace_floats(n, c);
  if (n * v > need) need = n * v;
  if (4 * c > need) need = 4 * c;
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; ++i) {
    const size_t f = linear_fwd_floats(n, pairs[i][0], pairs[i][1]);
    const size_t b = linear_bwd_floats(n, pairs[i][0], pairs[i][1]);
    if (f > need) need = f;
    if (b > need) need = b;
  }
  return need;
}

static ddp_status_t reserve(ddp_backend_t *be, ddp_dtype_t dt, int64_t N, int C, int V) {
  DDP_CHECK(check_dt(dt, "reserve"));
  NN_REQUIRE(be && N > 0 && C > 0 && V > 0, "reserve: N=%lld C=%d V=%d must be positive",
             (long long)N, C, V);
  const size_t floats =
      dt == DDP_DTYPE_F32 ? 0 : gpt_workspace_floats((size_t)N, (size_t)C, (size_t)V);
  return ddp_cpu_nn_reserve_floats(be, floats);
}

const ddp_nn_ops_t ddp_nn_cpu_ops = {
    .embed_fwd = embed_fwd,
    .embed_bwd = embed_bwd,
    .layernorm_fwd = layernorm_fwd,
    .layernorm_bwd = layernorm_bwd,
    .linear_fwd = linear_fwd,
    .linear_bwd = linear_bwd,
    .gelu_fwd = gelu_fwd,
    .gelu_bwd = gelu_bwd,
    .add = add,
    .attention_fwd = attention_fwd,
    .attention_bwd = attention_bwd,
    .xent_fused = xent_fused,
    .residual_layernorm_fwd = residual_layernorm_fwd,
    .reserve = reserve,
    .release = ddp_cpu_nn_release,
    .linear_gelu_fwd = ddp_cpu_linear_gelu_fwd,
    .linear_dgelu_bwd = ddp_cpu_linear_dgelu_bwd,
    .flash_attention_fwd = ddp_cpu_flash_attention_fwd,
    .flash_attention_bwd = ddp_cpu_flash_attention_bwd,
    .attention_decode = ddp_cpu_attention_decode,
};
