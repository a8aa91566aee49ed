/* The CPU backend's convolutional-network op table (ddptrain/conv.h,
 * be->ops->conv) over fp32, bf16 and fp16 storage: convolution, library
 * batch norm and max pooling through oneDNN (cpu_conv.c, cpu_conv_bn.c,
 * cpu_conv_pool.c), the rest on kernels of ours (cpu_conv_ops.c,
 * cpu_conv_bn_parts.c). Without oneDNN in the build the table still exists:
 * its oneDNN slots refuse with DDP_ERR_UNSUPPORTED naming what is missing,
 * and the kernels of ours work regardless, so a model can tell an absent op
 * from an absent table.
 *
 * fp32 calls go straight to those fp32 ops, so fp32 results are exactly
 * theirs. Under bf16/fp16 each op widens its half operands to fp32 (exact),
 * runs the same fp32 op, and narrows each half output once, round to
 * nearest even (src/core/dtype.c's converters): every half op is by
 * definition "the fp32 op on the stored inputs, its result rounded once",
 * a bit-exact oracle for the CUDA twins, which read the same storage and
 * accumulate in fp32. Statistics, gamma/beta and parameter gradients are
 * fp32 under every dt and pass through untouched, so `accumulate` means
 * what it means in fp32. Other types are refused (DDP_ERR_UNSUPPORTED).
 *
 * The element-wise ops and the average pool go through fixed blocks on
 * the stack. The library ops and the batch-norm parts widen whole tensors
 * into one fp32 staging buffer, which the prepares size before the step
 * loop (conv_prepare: input + output + weights of the shape, the most any
 * of its three ops stages; bn_prepare: three activations, for bn_bwd and
 * bn_apply_bwd; maxpool_workspace_bytes: input + output) and only ever
 * grow: the buffer holds the largest prepared call. An op that finds it
 * too small fails, naming the prepare it needs, instead of allocating in
 * the step loop. Like oneDNN's primitive cache (cpu_dnnl.h) the buffer is
 * process-wide, one mutex guards it for the whole of an op, and the table's
 * release frees it. */
#include <config.h>

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "backend/conv_check.h"
#include "backend/cpu/cpu_conv.h"
#include "backend/cpu/cpu_dnnl.h"
#include "ddptrain/check.h"

/* Elements per block of the element-wise ops: two fp32 blocks on the
 * stack (16 KiB). */
#define EW_BLOCK 2048
/* Channels per block of the average pool, as in cpu_conv_ops.c. */
#define CHANNEL_BLOCK 256

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static float *g_buf;
static size_t g_floats;

static int is_half(ddp_dtype_t dt) {
  return dt == DDP_DTYPE_BF16 || dt == DDP_DTYPE_F16;
}

/* fp32 goes to the fp32 op (1 returned in *direct); bf16/fp16 continue here;
 * any other type is refused, naming the op. */
static ddp_status_t admit(const ddp_backend_t *be, ddp_dtype_t dt, const char *op, int *direct) {
  if (!be || be->device != -1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: the CPU conv ops need the CPU backend (got %s)", op,
             be ? "a GPU backend" : "no backend");
  if (dt != DDP_DTYPE_F32 && !is_half(dt))
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "%s: the CPU conv ops take fp32, bf16 or fp16, not %s (%d)", op,
             ddp_dtype_name(dt), (int)dt);
  *direct = dt == DDP_DTYPE_F32;
  return DDP_OK;
}

/* Grows the staging buffer to at least `floats` (prepares only). */
static ddp_status_t reserve(size_t floats, const char *op) {
  ddp_status_t st = DDP_OK;
  pthread_mutex_lock(&g_lock);
  if (floats > g_floats) {
    float *grown = floats <= SIZE_MAX / sizeof(float) ? malloc(floats * sizeof(float)) : NULL;
    if (grown) {
      free(g_buf);
      g_buf = grown, g_floats = floats;
    } else {
      pthread_mutex_unlock(&g_lock);
      DDP_FAIL(DDP_ERR_OOM, "%s: cannot allocate %zu bytes of half-precision staging", op,
               floats * sizeof(float));
    }
  }
  pthread_mutex_unlock(&g_lock);
  return st;
}

/* Takes the lock and the staging buffer when it holds `floats`; the caller
 * unlocks after its op. On a refusal nothing is held. */
static ddp_status_t stage(size_t floats, const char *op, const char *prepare, float **ws) {
  pthread_mutex_lock(&g_lock);
  if (g_floats < floats) {
    const size_t have = g_floats;
    pthread_mutex_unlock(&g_lock);
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "%s in half precision needs %zu floats of staging, %zu prepared (call %s for this "
             "shape before the step loop)",
             op, floats, have, prepare);
  }
  *ws = g_buf;
  return DDP_OK;
}

static void unstage(void) {
  pthread_mutex_unlock(&g_lock);
}

static void release_staging(void) {
  pthread_mutex_lock(&g_lock);
  free(g_buf);
  g_buf = NULL, g_floats = 0;
  pthread_mutex_unlock(&g_lock);
}

/* Widens n half elements of src into dst when src is given; returns what
 * the fp32 op reads in its place (NULL stays NULL, so the fp32 op's own
 * checks refuse a missing pointer with its own message). Arguments are
 * non-overlapping (the staging is never a caller's buffer), so the
 * conversions cannot fail. */
static const float *widen(float *dst, const void *src, ddp_dtype_t dt, size_t n) {
  if (!src) return NULL;
  (void)ddp_convert_host(dst, DDP_DTYPE_F32, src, dt, n);
  return dst;
}

static void narrow(void *dst, const float *src, ddp_dtype_t dt, size_t n) {
  (void)ddp_convert_host(dst, dt, src, DDP_DTYPE_F32, n);
}

/* An output slot in the staging: NULL when the caller gave none. */
static float *out_slot(float *slot, const void *caller) {
  return caller ? slot : NULL;
}

/* ---- sizes ---------------------------------------------------------------
 * Sizes the staging only when they are computable (every size positive);
 * otherwise the fp32 op gets the call as it came and refuses it with its own
 * message, having written nothing. */

typedef struct conv_sizes {
  size_t in, out, w;
} conv_sizes_t;

static int conv_sizes(const ddp_conv_shape_t *sh, conv_sizes_t *z) {
  if (!sh || sh->N < 1 || sh->H < 1 || sh->W < 1 || sh->C < 1 || sh->K < 1 || sh->R < 1 ||
      sh->S < 1)
    return 0;
  const int OH = ddp_conv_out_h(sh), OW = ddp_conv_out_w(sh);
  if (OH < 1 || OW < 1) return 0;
  z->in = (size_t)sh->N * sh->H * sh->W * sh->C;
  z->out = (size_t)sh->N * OH * OW * sh->K;
  z->w = (size_t)sh->K * sh->R * sh->S * sh->C;
  return 1;
}

static size_t bn_elems(const ddp_bn_shape_t *sh) {
  if (!sh || sh->N < 1 || sh->H < 1 || sh->W < 1 || sh->C < 1) return 0;
  return (size_t)sh->N * sh->H * sh->W * sh->C;
}

static int pool_sizes(const ddp_pool_shape_t *sh, size_t *in, size_t *out) {
  if (!sh || sh->N < 1 || sh->H < 1 || sh->W < 1 || sh->C < 1) return 0;
  const int OH = ddp_pool_out_h(sh), OW = ddp_pool_out_w(sh);
  if (OH < 1 || OW < 1) return 0;
  *in = (size_t)sh->N * sh->H * sh->W * sh->C;
  *out = (size_t)sh->N * OH * OW * sh->C;
  return 1;
}

/* ---- convolution -------------------------------------------------------- */

static ddp_status_t conv_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                             const void *w, const ddp_conv_shape_t *sh, ddp_stream_t s) {
  int direct = 0;
  conv_sizes_t z;
  DDP_CHECK(admit(be, dt, "conv_fwd", &direct));
  if (direct || !conv_sizes(sh, &z)) return ddp_cpu_conv_fwd(be, DDP_DTYPE_F32, out, inp, w, sh, s);
  DDP_CHECK(ddp_cpu_dnnl_admit(be, DDP_DTYPE_F32, "conv_fwd"));
  float *ws;
  DDP_CHECK(stage(z.in + z.out + z.w, "conv_fwd", "conv_prepare", &ws));
  float *y = ws + z.in + z.w;
  ddp_status_t st = ddp_cpu_conv_fwd(be, DDP_DTYPE_F32, out_slot(y, out), widen(ws, inp, dt, z.in),
                                     widen(ws + z.in, w, dt, z.w), sh, s);
  if (st == DDP_OK) narrow(out, y, dt, z.out);
  unstage();
  return st;
}

static ddp_status_t conv_bwd_data(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                  const void *w, const ddp_conv_shape_t *sh, ddp_stream_t s) {
  int direct = 0;
  conv_sizes_t z;
  DDP_CHECK(admit(be, dt, "conv_bwd_data", &direct));
  if (direct || !conv_sizes(sh, &z))
    return ddp_cpu_conv_bwd_data(be, DDP_DTYPE_F32, dinp, dout, w, sh, s);
  DDP_CHECK(ddp_cpu_dnnl_admit(be, DDP_DTYPE_F32, "conv_bwd_data"));
  float *ws;
  DDP_CHECK(stage(z.in + z.out + z.w, "conv_bwd_data", "conv_prepare", &ws));
  float *dx = ws + z.out + z.w;
  ddp_status_t st =
      ddp_cpu_conv_bwd_data(be, DDP_DTYPE_F32, out_slot(dx, dinp), widen(ws, dout, dt, z.out),
                            widen(ws + z.out, w, dt, z.w), sh, s);
  if (st == DDP_OK) narrow(dinp, dx, dt, z.in);
  unstage();
  return st;
}

static ddp_status_t conv_bwd_weights(ddp_backend_t *be, ddp_dtype_t dt, float *dw, const void *dout,
                                     const void *inp, const ddp_conv_shape_t *sh, int accumulate,
                                     ddp_stream_t s) {
  int direct = 0;
  conv_sizes_t z;
  DDP_CHECK(admit(be, dt, "conv_bwd_weights", &direct));
  if (direct || !conv_sizes(sh, &z))
    return ddp_cpu_conv_bwd_weights(be, DDP_DTYPE_F32, dw, dout, inp, sh, accumulate, s);
  DDP_CHECK(ddp_cpu_dnnl_admit(be, DDP_DTYPE_F32, "conv_bwd_weights"));
  float *ws;
  DDP_CHECK(stage(z.in + z.out, "conv_bwd_weights", "conv_prepare", &ws));
  /* dw is fp32 under every dt: the fp32 op writes or adds to it itself. */
  const ddp_status_t st =
      ddp_cpu_conv_bwd_weights(be, DDP_DTYPE_F32, dw, widen(ws, dout, dt, z.out),
                               widen(ws + z.out, inp, dt, z.in), sh, accumulate, s);
  unstage();
  return st;
}

static ddp_status_t conv_prepare(ddp_backend_t *be, ddp_dtype_t dt, const ddp_conv_shape_t *sh) {
  int direct = 0;
  conv_sizes_t z;
  DDP_CHECK(admit(be, dt, "conv_prepare", &direct));
  DDP_CHECK(ddp_cpu_conv_prepare(be, DDP_DTYPE_F32, sh));
  /* The shape passed the fp32 checks, so its sizes are computable. */
  if (!direct && conv_sizes(sh, &z)) DDP_CHECK(reserve(z.in + z.out + z.w, "conv_prepare"));
  return DDP_OK;
}

/* ---- batch normalization, one rank's statistics ------------------------- */

static ddp_status_t bn_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_a,
                           float *save_b, float *running_mean, float *running_var, const void *inp,
                           const float *gamma, const float *beta, const ddp_bn_shape_t *sh,
                           int training, ddp_stream_t s) {
  int direct = 0;
  DDP_CHECK(admit(be, dt, "batch_norm_fwd", &direct));
  const size_t n = bn_elems(sh);
  if (direct || !n)
    return ddp_cpu_bn_fwd_exact(be, DDP_DTYPE_F32, out, save_a, save_b, running_mean, running_var,
                                inp, gamma, beta, sh, training, s);
  float *ws;
  DDP_CHECK(stage(2 * n, "batch_norm_fwd", "bn_prepare", &ws));
  ddp_status_t st =
      ddp_cpu_bn_fwd_exact(be, DDP_DTYPE_F32, out_slot(ws + n, out), save_a, save_b, running_mean,
                           running_var, widen(ws, inp, dt, n), gamma, beta, sh, training, s);
  if (st == DDP_OK) narrow(out, ws + n, dt, n);
  unstage();
  return st;
}

static ddp_status_t bn_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                           float *dbeta, const void *dout, const void *inp, const float *gamma,
                           const float *save_a, const float *save_b, const ddp_bn_shape_t *sh,
                           int accumulate, ddp_stream_t s) {
  int direct = 0;
  DDP_CHECK(admit(be, dt, "batch_norm_bwd", &direct));
  const size_t n = bn_elems(sh);
  if (direct || !n)
    return ddp_cpu_bn_bwd_exact(be, DDP_DTYPE_F32, dinp, dgamma, dbeta, dout, inp, gamma, save_a,
                                save_b, sh, accumulate, s);
  float *ws;
  DDP_CHECK(stage(3 * n, "batch_norm_bwd", "bn_prepare", &ws));
  ddp_status_t st = ddp_cpu_bn_bwd_exact(be, DDP_DTYPE_F32, out_slot(ws + 2 * n, dinp), dgamma,
                                         dbeta, widen(ws, dout, dt, n), widen(ws + n, inp, dt, n),
                                         gamma, save_a, save_b, sh, accumulate, s);
  if (st == DDP_OK) narrow(dinp, ws + 2 * n, dt, n);
  unstage();
  return st;
}

static ddp_status_t bn_prepare(ddp_backend_t *be, ddp_dtype_t dt, const ddp_bn_shape_t *sh) {
  int direct = 0;
  DDP_CHECK(admit(be, dt, "batch_norm_prepare", &direct));
  DDP_CHECK(ddp_bn_check_shape("batch_norm_prepare", sh, 0));
  /* Three activations: what bn_bwd and bn_apply_bwd stage, the most of any
   * batch-norm op (library or parts) of this shape. */
  if (!direct) DDP_CHECK(reserve(3 * bn_elems(sh), "batch_norm_prepare"));
  return DDP_OK;
}

/* ---- batch normalization in parts --------------------------------------- */

static ddp_status_t bn_reduce_fwd(ddp_backend_t *be, ddp_dtype_t dt, float *sums, const void *inp,
                                  const float *mean, const ddp_bn_shape_t *sh, ddp_stream_t s) {
  int direct = 0;
  DDP_CHECK(admit(be, dt, "bn_reduce_fwd", &direct));
  const size_t n = bn_elems(sh);
  if (direct || !n) return ddp_cpu_bn_reduce_fwd(be, DDP_DTYPE_F32, sums, inp, mean, sh, s);
  float *ws;
  DDP_CHECK(stage(n, "bn_reduce_fwd", "bn_prepare", &ws));
  const ddp_status_t st =
      ddp_cpu_bn_reduce_fwd(be, DDP_DTYPE_F32, sums, widen(ws, inp, dt, n), mean, sh, s);
  unstage();
  return st;
}

static ddp_status_t bn_apply_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *running_mean,
                                 float *running_var, const void *inp, const float *mean,
                                 const float *var, const float *gamma, const float *beta,
                                 int64_t M_total, const ddp_bn_shape_t *sh, ddp_stream_t s) {
  int direct = 0;
  DDP_CHECK(admit(be, dt, "bn_apply_fwd", &direct));
  const size_t n = bn_elems(sh);
  if (direct || !n)
    return ddp_cpu_bn_apply_fwd(be, DDP_DTYPE_F32, out, running_mean, running_var, inp, mean, var,
                                gamma, beta, M_total, sh, s);
  float *ws;
  DDP_CHECK(stage(2 * n, "bn_apply_fwd", "bn_prepare", &ws));
  ddp_status_t st =
      ddp_cpu_bn_apply_fwd(be, DDP_DTYPE_F32, out_slot(ws + n, out), running_mean, running_var,
                           widen(ws, inp, dt, n), mean, var, gamma, beta, M_total, sh, s);
  if (st == DDP_OK) narrow(out, ws + n, dt, n);
  unstage();
  return st;
}

static ddp_status_t bn_reduce_bwd(ddp_backend_t *be, ddp_dtype_t dt, float *sums, const void *dout,
                                  const void *inp, const float *mean, const ddp_bn_shape_t *sh,
                                  ddp_stream_t s) {
  int direct = 0;
  DDP_CHECK(admit(be, dt, "bn_reduce_bwd", &direct));
  const size_t n = bn_elems(sh);
  if (direct || !n) return ddp_cpu_bn_reduce_bwd(be, DDP_DTYPE_F32, sums, dout, inp, mean, sh, s);
  float *ws;
  DDP_CHECK(stage(2 * n, "bn_reduce_bwd", "bn_prepare", &ws));
  const ddp_status_t st = ddp_cpu_bn_reduce_bwd(be, DDP_DTYPE_F32, sums, widen(ws, dout, dt, n),
                                                widen(ws + n, inp, dt, n), mean, sh, s);
  unstage();
  return st;
}

static ddp_status_t bn_apply_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                                 float *dbeta, const void *dout, const void *inp, const float *mean,
                                 const float *var, const float *gamma, const float *g,
                                 const float *l, int64_t M_total, const ddp_bn_shape_t *sh,
                                 int accumulate, ddp_stream_t s) {
  int direct = 0;
  DDP_CHECK(admit(be, dt, "bn_apply_bwd", &direct));
  const size_t n = bn_elems(sh);
  if (direct || !n)
    return ddp_cpu_bn_apply_bwd(be, DDP_DTYPE_F32, dinp, dgamma, dbeta, dout, inp, mean, var, gamma,
                                g, l, M_total, sh, accumulate, s);
  float *ws;
  DDP_CHECK(stage(3 * n, "bn_apply_bwd", "bn_prepare", &ws));
  ddp_status_t st = ddp_cpu_bn_apply_bwd(be, DDP_DTYPE_F32, out_slot(ws + 2 * n, dinp), dgamma,
                                         dbeta, widen(ws, dout, dt, n), widen(ws + n, inp, dt, n),
                                         mean, var, gamma, g, l, M_total, sh, accumulate, s);
  if (st == DDP_OK) narrow(dinp, ws + 2 * n, dt, n);
  unstage();
  return st;
}

/* ---- max pooling ---------------------------------------------------------- */

static ddp_status_t maxpool_workspace_bytes(ddp_backend_t *be, ddp_dtype_t dt,
                                            const ddp_pool_shape_t *sh, size_t *bytes) {
  int direct = 0;
  size_t in = 0, out = 0;
  DDP_CHECK(admit(be, dt, "maxpool_workspace_bytes", &direct));
  /* The winners' record is the fp32 primitive's, whatever dt stores. */
  DDP_CHECK(ddp_cpu_maxpool_workspace_bytes(be, DDP_DTYPE_F32, sh, bytes));
  if (!direct && pool_sizes(sh, &in, &out)) DDP_CHECK(reserve(in + out, "maxpool_workspace_bytes"));
  return DDP_OK;
}

static ddp_status_t maxpool_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, void *pws,
                                const void *inp, const ddp_pool_shape_t *sh, ddp_stream_t s) {
  int direct = 0;
  size_t in = 0, on = 0;
  DDP_CHECK(admit(be, dt, "maxpool_fwd", &direct));
  if (direct || !pool_sizes(sh, &in, &on))
    return ddp_cpu_maxpool_fwd(be, DDP_DTYPE_F32, out, pws, inp, sh, s);
  DDP_CHECK(ddp_cpu_dnnl_admit(be, DDP_DTYPE_F32, "maxpool_fwd"));
  float *ws;
  DDP_CHECK(stage(in + on, "maxpool_fwd", "maxpool_workspace_bytes", &ws));
  ddp_status_t st = ddp_cpu_maxpool_fwd(be, DDP_DTYPE_F32, out_slot(ws + in, out), pws,
                                        widen(ws, inp, dt, in), sh, s);
  if (st == DDP_OK) narrow(out, ws + in, dt, on);
  unstage();
  return st;
}

static ddp_status_t maxpool_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                const void *pws, const ddp_pool_shape_t *sh, ddp_stream_t s) {
  int direct = 0;
  size_t in = 0, on = 0;
  DDP_CHECK(admit(be, dt, "maxpool_bwd", &direct));
  if (direct || !pool_sizes(sh, &in, &on))
    return ddp_cpu_maxpool_bwd(be, DDP_DTYPE_F32, dinp, dout, pws, sh, s);
  DDP_CHECK(ddp_cpu_dnnl_admit(be, DDP_DTYPE_F32, "maxpool_bwd"));
  float *ws;
  DDP_CHECK(stage(in + on, "maxpool_bwd", "maxpool_workspace_bytes", &ws));
  ddp_status_t st = ddp_cpu_maxpool_bwd(be, DDP_DTYPE_F32, out_slot(ws + on, dinp),
                                        widen(ws, dout, dt, on), pws, sh, s);
  if (st == DDP_OK) narrow(dinp, ws + on, dt, in);
  unstage();
  return st;
}

/* ---- element-wise: fixed blocks through the fp32 op ----------------------
 * Element-wise, so a block's call computes what one call over all n
 * would. Each block is read before it is written: outputs may alias
 * inputs as the fp32 ops allow. */

static ddp_status_t relu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                             size_t n, ddp_stream_t s) {
  int direct = 0;
  DDP_CHECK(admit(be, dt, "relu_fwd", &direct));
  if (direct || n == 0 || !out || !inp) return ddp_cpu_relu_fwd(be, DDP_DTYPE_F32, out, inp, n, s);
  const size_t es = ddp_dtype_size(dt);
  float x[EW_BLOCK];
  for (size_t i = 0; i < n; i += EW_BLOCK) {
    const size_t m = n - i < EW_BLOCK ? n - i : EW_BLOCK;
    widen(x, (const char *)inp + i * es, dt, m);
    DDP_CHECK(ddp_cpu_relu_fwd(be, DDP_DTYPE_F32, x, x, m, s));
    narrow((char *)out + i * es, x, dt, m);
  }
  return DDP_OK;
}

static ddp_status_t add_relu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *a,
                                 const void *b, size_t n, ddp_stream_t s) {
  int direct = 0;
  DDP_CHECK(admit(be, dt, "add_relu_fwd", &direct));
  if (direct || n == 0 || !out || !a || !b)
    return ddp_cpu_add_relu_fwd(be, DDP_DTYPE_F32, out, a, b, n, s);
  const size_t es = ddp_dtype_size(dt);
  float x[EW_BLOCK], y[EW_BLOCK];
  for (size_t i = 0; i < n; i += EW_BLOCK) {
    const size_t m = n - i < EW_BLOCK ? n - i : EW_BLOCK;
    widen(x, (const char *)a + i * es, dt, m);
    widen(y, (const char *)b + i * es, dt, m);
    /* The sum is rounded to fp32 first, then to dt: exact for half
     * operands unless their exponents are far apart, and the definition
     * either way. */
    DDP_CHECK(ddp_cpu_add_relu_fwd(be, DDP_DTYPE_F32, x, x, y, m, s));
    narrow((char *)out + i * es, x, dt, m);
  }
  return DDP_OK;
}

static ddp_status_t relu_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                             const void *out, size_t n, ddp_stream_t s) {
  int direct = 0;
  DDP_CHECK(admit(be, dt, "relu_bwd", &direct));
  if (direct || n == 0 || !dinp || !dout || !out)
    return ddp_cpu_relu_bwd(be, DDP_DTYPE_F32, dinp, dout, out, n, s);
  const size_t es = ddp_dtype_size(dt);
  float dy[EW_BLOCK], y[EW_BLOCK];
  for (size_t i = 0; i < n; i += EW_BLOCK) {
    const size_t m = n - i < EW_BLOCK ? n - i : EW_BLOCK;
    widen(dy, (const char *)dout + i * es, dt, m);
    widen(y, (const char *)out + i * es, dt, m);
    DDP_CHECK(ddp_cpu_relu_bwd(be, DDP_DTYPE_F32, dy, dy, y, m, s));
    narrow((char *)dinp + i * es, dy, dt, m);
  }
  return DDP_OK;
}

/* ---- global average pooling ------------------------------------------------
 * The fp32 op's arithmetic (cpu_conv_ops.c) on rows widened a channel
 * block at a time: per sample and channel, the positions summed in order in
 * double, the mean rounded to fp32, then once to dt. */

static ddp_status_t avgpool_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                                int N, int HW, int C, ddp_stream_t s) {
  int direct = 0;
  DDP_CHECK(admit(be, dt, "avgpool_fwd", &direct));
  if (direct || N < 1 || HW < 1 || C < 1 || !out || !inp)
    return ddp_cpu_avgpool_fwd(be, DDP_DTYPE_F32, out, inp, N, HW, C, s);
  const size_t es = ddp_dtype_size(dt), c = (size_t)C, hw = (size_t)HW;
  double acc[CHANNEL_BLOCK];
  float row[CHANNEL_BLOCK], mean[CHANNEL_BLOCK];
  for (size_t n = 0; n < (size_t)N; ++n)
    for (size_t c0 = 0; c0 < c; c0 += CHANNEL_BLOCK) {
      const size_t nc = c - c0 < CHANNEL_BLOCK ? c - c0 : CHANNEL_BLOCK;
      for (size_t j = 0; j < nc; ++j) acc[j] = 0.0;
      for (size_t p = 0; p < hw; ++p) {
        widen(row, (const char *)inp + ((n * hw + p) * c + c0) * es, dt, nc);
        ddp_cpu_add_row_f64(acc, row, nc);
      }
      for (size_t j = 0; j < nc; ++j) mean[j] = (float)(acc[j] / (double)HW);
      narrow((char *)out + (n * c + c0) * es, mean, dt, nc);
    }
  return DDP_OK;
}

static ddp_status_t avgpool_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                int N, int HW, int C, ddp_stream_t s) {
  int direct = 0;
  DDP_CHECK(admit(be, dt, "avgpool_bwd", &direct));
  if (direct || N < 1 || HW < 1 || C < 1 || !dinp || !dout)
    return ddp_cpu_avgpool_bwd(be, DDP_DTYPE_F32, dinp, dout, N, HW, C, s);
  const size_t es = ddp_dtype_size(dt), c = (size_t)C, hw = (size_t)HW;
  float g[CHANNEL_BLOCK];
  for (size_t n = 0; n < (size_t)N; ++n)
    for (size_t c0 = 0; c0 < c; c0 += CHANNEL_BLOCK) {
      const size_t nc = c - c0 < CHANNEL_BLOCK ? c - c0 : CHANNEL_BLOCK;
      widen(g, (const char *)dout + (n * c + c0) * es, dt, nc);
      for (size_t j = 0; j < nc; ++j) g[j] = g[j] / (float)HW;
      for (size_t p = 0; p < hw; ++p)
        narrow((char *)dinp + ((n * hw + p) * c + c0) * es, g, dt, nc);
    }
  return DDP_OK;
}

/* The primitives are cached process-wide (cpu_dnnl.h), and so is the
 * staging; a backend's shutdown frees both. Another CPU backend of the same
 * process that still runs rebuilds primitives on its next call, and its
 * half ops ask for a prepare again. */
static void cpu_conv_release(ddp_backend_t *be) {
  (void)be;
  ddp_cpu_dnnl_cache_clear();
  release_staging();
}

/* bn_fwd, then relu_fwd or add_relu_fwd on its output: the contract's
 * definition, so a GPU that fuses them has this as its twin. */
static ddp_status_t bn_relu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_a,
                                float *save_b, float *running_mean, float *running_var,
                                const void *inp, const float *gamma, const float *beta,
                                const void *residual, const ddp_bn_shape_t *sh, int training,
                                ddp_stream_t s) {
  if (out && (out == inp || (residual && out == residual)))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "batch_norm_relu_fwd: out may not alias inp or residual");
  DDP_CHECK(bn_fwd(be, dt, out, save_a, save_b, running_mean, running_var, inp, gamma, beta, sh,
                   training, s));
  const size_t n = bn_elems(sh);
  return residual ? add_relu_fwd(be, dt, out, out, residual, n, s)
                  : relu_fwd(be, dt, out, out, n, s);
}

/* relu_bwd in place on dout, then bn_bwd: the contract's definition, so a
 * GPU that recomputes the mask has this as its twin. The arguments are
 * checked before dout is touched. */
static ddp_status_t bn_relu_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                                float *dbeta, void *dout, const void *inp, const void *out,
                                const float *gamma, const float *beta, const float *save_a,
                                const float *save_b, int residual, const ddp_bn_shape_t *sh,
                                int accumulate, ddp_stream_t s) {
  (void)residual; /* the composition masks dout in place either way */
  int direct = 0;
  DDP_CHECK(admit(be, dt, "batch_norm_relu_bwd", &direct));
  DDP_CHECK(
      ddp_bn_relu_bwd_check(dinp, dgamma, dbeta, dout, inp, out, gamma, beta, save_a, save_b, sh));
  if (!direct) { /* the staging bn_bwd will need, so that it cannot refuse later */
    float *ws;
    DDP_CHECK(stage(3 * bn_elems(sh), "batch_norm_relu_bwd", "bn_prepare", &ws));
    unstage();
  }
  DDP_CHECK(relu_bwd(be, dt, dout, dout, out, bn_elems(sh), s));
  return bn_bwd(be, dt, dinp, dgamma, dbeta, dout, inp, gamma, save_a, save_b, sh, accumulate, s);
}

const ddp_conv_ops_t ddp_conv_cpu_ops = {
    .conv_fwd = conv_fwd,
    .conv_bwd_data = conv_bwd_data,
    .conv_bwd_weights = conv_bwd_weights,
    .conv_prepare = conv_prepare,
    .bn_fwd = bn_fwd,
    .bn_relu_fwd = bn_relu_fwd,
    .bn_bwd = bn_bwd,
    .bn_relu_bwd = bn_relu_bwd,
    .bn_prepare = bn_prepare,
    .maxpool_workspace_bytes = maxpool_workspace_bytes,
    .maxpool_fwd = maxpool_fwd,
    .maxpool_bwd = maxpool_bwd,
    .bn_reduce_fwd = bn_reduce_fwd,
    .bn_apply_fwd = bn_apply_fwd,
    .bn_reduce_bwd = bn_reduce_bwd,
    .bn_apply_bwd = bn_apply_bwd,
    .avgpool_fwd = avgpool_fwd,
    .avgpool_bwd = avgpool_bwd,
    .relu_fwd = relu_fwd,
    .add_relu_fwd = add_relu_fwd,
    .relu_bwd = relu_bwd,
    .release = cpu_conv_release,
};
