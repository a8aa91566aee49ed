/* GPU suite for the CUDA conv table (cuDNN through src/backend/cuda/
 * cuda_conv.c and cuda_conv_bn.c, our kernels in kernels/conv_ops.cu and
 * kernels/bn_reduce.cu)
 * against its CPU twin, the CPU backend's conv table, on the same inputs.
 *
 * The CPU table computes in fp32 only, so every input is drawn on the host,
 * rounded to the GPU op's dtype, and handed to the CPU in fp32 and to the
 * GPU in that dtype: both see the same numbers, and a bf16/fp16 GPU result
 * is compared with the fp32 CPU result. Outputs start as NaN on both
 * (0xFF bytes), accumulating ones from the same random values. Comparison
 * is normwise, max|gpu - cpu| / max|cpu| (tests/gpu_twin.h), with these
 * thresholds:
 *   - outputs stored in bf16/fp16: twin_tol(dt) (one rounding of a half
 *     value plus an fp32 difference it can amplify by one more ulp);
 *   - convolution outputs and weight gradients: conv_tol(dt), 5e-4 for
 *     fp32, 4e-3 for fp16, twin_tol for bf16. TF32 is off (the fixture's
 *     backend), but cuDNN may pick Winograd or FFT algorithms, whose
 *     transforms (kept in the storage type for half tensors) lose a few
 *     more bits than a direct sum over R*S*C <= 1152 terms; half weight
 *     gradients are rounded to dt by cuDNN before the fp32 fold;
 *   - batch norm in fp32 (out, dinp, statistics, dgamma, dbeta):
 *     TOL_BN_F32 = 1e-4, sums over M <= 600 positions in other orders and
 *     the backward's cancellation of two such sums;
 *   - ReLU and pooling in fp32: exact (0) or TOL_POOL_F32 = 1e-6 (a mean
 *     or a sum of at most a few overlapping windows).
 * Beyond the twins, on the GPU alone: the autotune cache (a prepared shape
 * runs no new cudnnFind*, an unprepared one searches once on first use),
 * no allocation once every shape is prepared (the backend's counters and
 * the caching allocator's raw calls), bit-identical repeats of the
 * backward ops under the deterministic default, a backend made with
 * conv_nondeterministic, max pooling's ties, and the refusals (nothing
 * written).
 *
 * Exit 77 (SKIP) without a usable CUDA device or in a build without cuDNN
 * (whose CUDA backend has no conv table). The twin cases need the
 * CPU backend's conv table and fail, naming it, where it is missing. */
#include <config.h>

#if !DDP_HAVE_CUDA || !DDP_HAVE_CUDNN
#include <stdio.h>

int main(void) {
  fprintf(stderr, "SKIP: built without %s, so there is no CUDA conv table\n",
          DDP_HAVE_CUDA ? "cuDNN" : "CUDA");
  return 77;
}
#else
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/conv_algos.h"
#include "backend/cuda/cuda_conv.h"
#include "ddptrain/conv.h"
#include "ddptrain/nn.h"
#include "gpu_twin.h"

#define TOL_CONV_F32 5e-4
#define TOL_BN_F32 1e-4
#define TOL_POOL_F32 1e-6

/* ---- fixture: fp32 on the CPU, dt on the GPU ------------------------------- */

typedef struct mixed {
  float *host; /* inputs: the values both hold (rounded to dt) */
  void *cpu;   /* fp32 */
  void *gpu;   /* dt */
  ddp_dtype_t dt;
  size_t n;
} mixed_t;

static const ddp_conv_ops_t *cpu_conv(void) {
  ck_assert_msg(twin_cpu->ops->conv != NULL,
                "the CPU backend has no conv table (ddptrain/conv.h), the twin of these ops");
  return twin_cpu->ops->conv;
}

static const ddp_conv_ops_t *gpu_conv(void) {
  ck_assert_ptr_nonnull(twin_gpu->ops->conv);
  return twin_gpu->ops->conv;
}

static mixed_t mixed_alloc(ddp_dtype_t dt, size_t n) {
  mixed_t t = {.dt = dt, .n = n};
  t.host = malloc((n ? n : 1) * sizeof(float));
  ck_assert_ptr_nonnull(t.host);
  t.cpu = twin_dev_alloc(twin_cpu, n * sizeof(float));
  t.gpu = twin_dev_alloc(twin_gpu, n * ddp_dtype_size(dt));
  return t;
}

/* host (rounded to dt in place) -> CPU in fp32, GPU in dt. */
static void mixed_set(mixed_t *t) {
  ck_assert_int_eq(ddp_round_host(t->host, t->host, t->dt, t->n), DDP_OK);
  void *bits = malloc(t->n * ddp_dtype_size(t->dt) + 1);
  ck_assert_ptr_nonnull(bits);
  ck_assert_int_eq(ddp_convert_host(bits, t->dt, t->host, DDP_DTYPE_F32, t->n), DDP_OK);
  twin_upload(twin_cpu, t->cpu, t->host, t->n * sizeof(float));
  twin_upload(twin_gpu, t->gpu, bits, t->n * ddp_dtype_size(t->dt));
  free(bits);
}

static mixed_t mixed_input(ddp_dtype_t dt, size_t n, float mean, float std) {
  mixed_t t = mixed_alloc(dt, n);
  ddp_rng_fill_normal(&twin_rng, twin_off, mean, std, t.host, n);
  twin_off += n;
  for (size_t i = 0; i < n; ++i)
    if (t.host[i] == 0.0f) t.host[i] = std > 0 ? std * 0.5f : 0.5f;
  mixed_set(&t);
  return t;
}

static void poison(ddp_backend_t *be, void *p, size_t bytes) {
  void *h = malloc(bytes + 1);
  ck_assert_ptr_nonnull(h);
  memset(h, 0xFF, bytes);
  twin_upload(be, p, h, bytes);
  free(h);
}

static mixed_t mixed_output(ddp_dtype_t dt, size_t n) {
  mixed_t t = mixed_alloc(dt, n);
  poison(twin_cpu, t.cpu, n * sizeof(float));
  poison(twin_gpu, t.gpu, n * ddp_dtype_size(dt));
  for (size_t i = 0; i < n; ++i) t.host[i] = NAN;
  return t;
}

static void mixed_free(mixed_t *t) {
  free(t->host);
  ddp_backend_free(twin_cpu, t->cpu);
  ddp_backend_free(twin_gpu, t->gpu);
  memset(t, 0, sizeof *t);
}

static float *fetch_gpu(const mixed_t *t) {
  const size_t esz = ddp_dtype_size(t->dt);
  void *bits = malloc(t->n * esz + 1);
  float *out = malloc((t->n ? t->n : 1) * sizeof(float));
  ck_assert(bits && out);
  twin_download(twin_gpu, bits, t->gpu, t->n * esz);
  ck_assert_int_eq(ddp_convert_host(out, DDP_DTYPE_F32, bits, t->dt, t->n), DDP_OK);
  free(bits);
  return out;
}

static float *fetch_cpu(const mixed_t *t) {
  float *out = malloc((t->n ? t->n : 1) * sizeof(float));
  ck_assert_ptr_nonnull(out);
  twin_download(twin_cpu, out, t->cpu, t->n * sizeof(float));
  return out;
}

/* Normwise error of g against c (n values); aborts past tol or on a
 * non-finite g where c is finite (an unwritten element). */
static double compare(const float *g, const float *c, size_t n, double tol, const char *what,
                      ddp_dtype_t dt) {
  double num = 0.0, den = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < n; ++i) {
    if (isfinite(c[i]) && !isfinite(g[i]))
      ck_abort_msg("%s (%s): element %zu is %g on the GPU, %g on the CPU (unwritten?)", what,
                   ddp_dtype_name(dt), i, (double)g[i], (double)c[i]);
    const double d = fabs((double)g[i] - (double)c[i]);
    if (d > num) num = d, worst = i;
    if (fabs((double)c[i]) > den) den = fabs((double)c[i]);
  }
  const double err = den > 0 ? num / den : num;
  if (!(err <= tol))
    ck_abort_msg("%s (%s): normwise relative error %.3g > %.3g (element %zu: gpu %.8g cpu %.8g)",
                 what, ddp_dtype_name(dt), err, tol, worst, n ? (double)g[worst] : 0.0,
                 n ? (double)c[worst] : 0.0);
  return err;
}

static double mixed_expect(const mixed_t *t, double tol, const char *what) {
  float *g = fetch_gpu(t), *c = fetch_cpu(t);
  const double err = compare(g, c, t->n, tol, what, t->dt);
  free(g);
  free(c);
  return err;
}

/* The GPU copies of a and b hold the same bytes. */
static void expect_gpu_bits_equal(const void *a, const void *b, size_t bytes, const char *what) {
  unsigned char *ha = malloc(bytes + 1), *hb = malloc(bytes + 1);
  ck_assert(ha && hb);
  twin_download(twin_gpu, ha, a, bytes);
  twin_download(twin_gpu, hb, b, bytes);
  size_t first = bytes;
  for (size_t i = 0; i < bytes && first == bytes; ++i)
    if (ha[i] != hb[i]) first = i;
  free(ha);
  free(hb);
  ck_assert_msg(first == bytes, "%s: GPU results differ at byte %zu", what, first);
}

static double out_tol(ddp_dtype_t dt, double f32_tol) {
  return dt == DDP_DTYPE_F32 ? f32_tol : twin_tol(dt);
}

static double conv_tol(ddp_dtype_t dt) {
  return dt == DDP_DTYPE_F16 ? 4e-3 : out_tol(dt, TOL_CONV_F32);
}

/* ---- convolution -------------------------------------------------------------- */

static const ddp_conv_shape_t k_conv_shapes[] = {
    {.N = 2, .H = 9, .W = 9, .C = 8, .K = 16, .R = 3, .S = 3, .stride = 1, .pad = 1},
    {.N = 2, .H = 10, .W = 10, .C = 16, .K = 8, .R = 3, .S = 3, .stride = 2, .pad = 1},
    {.N = 3, .H = 7, .W = 7, .C = 32, .K = 24, .R = 1, .S = 1, .stride = 1, .pad = 0},
    {.N = 2, .H = 8, .W = 8, .C = 16, .K = 32, .R = 1, .S = 1, .stride = 2, .pad = 0},
    {.N = 2, .H = 16, .W = 16, .C = 3, .K = 16, .R = 7, .S = 7, .stride = 2, .pad = 3},
    {.N = 2, .H = 6, .W = 6, .C = 128, .K = 64, .R = 3, .S = 3, .stride = 1, .pad = 1},
};
#define N_CONV_SHAPES ((int)(sizeof k_conv_shapes / sizeof k_conv_shapes[0]))

static size_t conv_in_n(const ddp_conv_shape_t *s) {
  return (size_t)s->N * s->H * s->W * s->C;
}
static size_t conv_out_n(const ddp_conv_shape_t *s) {
  return (size_t)s->N * ddp_conv_out_h(s) * ddp_conv_out_w(s) * s->K;
}
static size_t conv_w_n(const ddp_conv_shape_t *s) {
  return (size_t)s->K * s->R * s->S * s->C;
}

static void conv_case(ddp_dtype_t dt, const ddp_conv_shape_t *sh) {
  const ddp_conv_ops_t *cc = cpu_conv(), *gc = gpu_conv();
  ck_assert_int_eq(cc->conv_prepare(twin_cpu, DDP_DTYPE_F32, sh), DDP_OK);
  ck_assert_int_eq(gc->conv_prepare(twin_gpu, dt, sh), DDP_OK);
  /* Weights ~ N(0, 1 / fan-in) keep outputs O(1). */
  const float wstd = 1.0f / sqrtf((float)(sh->R * sh->S * sh->C));
  mixed_t x = mixed_input(dt, conv_in_n(sh), 0.1f, 1.0f);
  mixed_t w = mixed_input(dt, conv_w_n(sh), 0.0f, wstd);
  mixed_t dy = mixed_input(dt, conv_out_n(sh), 0.0f, 1.0f);
  mixed_t y = mixed_output(dt, conv_out_n(sh)), dx = mixed_output(dt, conv_in_n(sh));
  ck_assert_int_eq(cc->conv_fwd(twin_cpu, DDP_DTYPE_F32, y.cpu, x.cpu, w.cpu, sh, NULL), DDP_OK);
  ck_assert_int_eq(gc->conv_fwd(twin_gpu, dt, y.gpu, x.gpu, w.gpu, sh, NULL), DDP_OK);
  ck_assert_int_eq(cc->conv_bwd_data(twin_cpu, DDP_DTYPE_F32, dx.cpu, dy.cpu, w.cpu, sh, NULL),
                   DDP_OK);
  ck_assert_int_eq(gc->conv_bwd_data(twin_gpu, dt, dx.gpu, dy.gpu, w.gpu, sh, NULL), DDP_OK);
  const double e_y = mixed_expect(&y, conv_tol(dt), "conv_fwd out");
  const double e_dx = mixed_expect(&dx, conv_tol(dt), "conv_bwd_data dinp");
  double e_dw[2];
  for (int acc = 0; acc < 2; ++acc) {
    mixed_t dw = acc ? mixed_input(DDP_DTYPE_F32, conv_w_n(sh), 0.0f, 1.0f)
                     : mixed_output(DDP_DTYPE_F32, conv_w_n(sh));
    ck_assert_int_eq(cc->conv_bwd_weights(twin_cpu, DDP_DTYPE_F32, (float *)dw.cpu, dy.cpu, x.cpu,
                                          sh, acc, NULL),
                     DDP_OK);
    ck_assert_int_eq(
        gc->conv_bwd_weights(twin_gpu, dt, (float *)dw.gpu, dy.gpu, x.gpu, sh, acc, NULL), DDP_OK);
    e_dw[acc] = mixed_expect(&dw, conv_tol(dt), "conv_bwd_weights dw");
    mixed_free(&dw);
  }
  fprintf(stderr,
          "conv %-4s N=%d %dx%dx%d -> K=%d %dx%d/%d pad %d: err out %.2g dinp %.2g dw %.2g "
          "(+= %.2g)\n",
          ddp_dtype_name(dt), sh->N, sh->H, sh->W, sh->C, sh->K, sh->R, sh->S, sh->stride, sh->pad,
          e_y, e_dx, e_dw[0], e_dw[1]);
  mixed_t *all[] = {&x, &w, &dy, &y, &dx};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) mixed_free(all[i]);
}

/* conv_bwd_data_add: dinp += the input gradient, cuDNN's beta = 1 (the sum
 * in fp32, rounded once), against the CPU twin's conv_bwd_data then add in
 * fp32. A dropped prior value would be an error of its own size. The last
 * shape is called unprepared: its first call searches on the prepare's
 * scratch tensors, never on dinp, whose values it must keep. */
static void conv_bwd_data_add_case(ddp_dtype_t dt, const ddp_conv_shape_t *sh, int prepared) {
  const ddp_conv_ops_t *cc = cpu_conv(), *gc = gpu_conv();
  ck_assert_ptr_nonnull(gc->conv_bwd_data_add);
  ck_assert_int_eq(cc->conv_prepare(twin_cpu, DDP_DTYPE_F32, sh), DDP_OK);
  if (prepared) ck_assert_int_eq(gc->conv_prepare(twin_gpu, dt, sh), DDP_OK);
  const float wstd = 1.0f / sqrtf((float)(sh->R * sh->S * sh->C));
  mixed_t w = mixed_input(dt, conv_w_n(sh), 0.0f, wstd);
  mixed_t dy = mixed_input(dt, conv_out_n(sh), 0.0f, 1.0f);
  mixed_t dx = mixed_input(dt, conv_in_n(sh), 0.0f, 1.0f), part = mixed_output(dt, conv_in_n(sh));
  ck_assert_int_eq(cc->conv_bwd_data(twin_cpu, DDP_DTYPE_F32, part.cpu, dy.cpu, w.cpu, sh, NULL),
                   DDP_OK);
  ck_assert_int_eq(twin_cpu->ops->nn->add(twin_cpu, DDP_DTYPE_F32, dx.cpu, dx.cpu, part.cpu,
                                          conv_in_n(sh), NULL),
                   DDP_OK);
  ck_assert_int_eq(gc->conv_bwd_data_add(twin_gpu, dt, dx.gpu, dy.gpu, w.gpu, sh, NULL), DDP_OK);
  const double e = mixed_expect(&dx, conv_tol(dt), "conv_bwd_data_add dinp");
  fprintf(stderr, "conv_bwd_data_add %-4s N=%d %dx%dx%d -> K=%d %dx%d/%d%s: err %.2g\n",
          ddp_dtype_name(dt), sh->N, sh->H, sh->W, sh->C, sh->K, sh->R, sh->S, sh->stride,
          prepared ? "" : " (unprepared)", e);
  mixed_t *all[] = {&w, &dy, &dx, &part};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) mixed_free(all[i]);
}

START_TEST(test_gpu_conv_bwd_data_add_matches_cpu) {
  for (int d = 0; d < 3; ++d) {
    for (int k = 0; k < N_CONV_SHAPES; ++k)
      conv_bwd_data_add_case(twin_dtypes[d], &k_conv_shapes[k], 1);
    const ddp_conv_shape_t fresh = {
        .N = 2, .H = 9, .W = 9, .C = 12 + 4 * d, .K = 20, .R = 3, .S = 3, .stride = 2, .pad = 1};
    conv_bwd_data_add_case(twin_dtypes[d], &fresh, 0);
  }
}
END_TEST

START_TEST(test_gpu_conv_matches_cpu) {
  for (int d = 0; d < 3; ++d)
    for (int k = 0; k < N_CONV_SHAPES; ++k) conv_case(twin_dtypes[d], &k_conv_shapes[k]);
}
END_TEST

/* ---- batch normalization through cuDNN --------------------------------------- */

static const ddp_bn_shape_t k_bn_shapes[] = {
    {.N = 4, .H = 5, .W = 5, .C = 24, .eps = 1e-5f, .momentum = 0.1f},
    {.N = 2, .H = 7, .W = 3, .C = 67, .eps = 1e-3f, .momentum = 0.25f},
    {.N = 6, .H = 10, .W = 10, .C = 8, .eps = 1e-5f, .momentum = 0.1f},
    /* more positions than the apply kernels' grid has threads (4096 x
     * 256), so each thread's channel walk wraps: in groups of four
     * channels (72) and one by one (35, not a multiple of 4) */
    {.N = 4, .H = 128, .W = 128, .C = 72, .eps = 1e-5f, .momentum = 0.1f},
    {.N = 2, .H = 128, .W = 128, .C = 35, .eps = 1e-5f, .momentum = 0.1f},
    /* the reductions' widest blocks (128 bf16 channels: C >= 128 and a
     * multiple of 8), a second column of 8 channels, 18 slices in two
     * groups, the last slice two rows short of a step of 32 */
    {.N = 2, .H = 47, .W = 49, .C = 136, .eps = 1e-5f, .momentum = 0.1f},
};
#define N_BN_SHAPES ((int)(sizeof k_bn_shapes / sizeof k_bn_shapes[0]))

static size_t bn_n(const ddp_bn_shape_t *s) {
  return (size_t)s->N * s->H * s->W * s->C;
}

/* One batch norm's data for the GPU against the CPU: input x and
 * gradient dy (dt), gamma, beta and running statistics (fp32), and the
 * saves the training forward fills. */
typedef struct bn_data {
  mixed_t x, dy, gamma, beta, rm, rv, sa, sb;
} bn_data_t;

static bn_data_t bn_data_make(ddp_dtype_t dt, const ddp_bn_shape_t *sh) {
  const size_t n = bn_n(sh), C = (size_t)sh->C;
  bn_data_t d;
  d.x = mixed_input(dt, n, 0.7f, 2.0f);
  d.dy = mixed_input(dt, n, 0.0f, 1.0f);
  d.gamma = mixed_input(DDP_DTYPE_F32, C, 1.0f, 0.3f);
  d.beta = mixed_input(DDP_DTYPE_F32, C, 0.0f, 0.5f);
  d.rm = mixed_input(DDP_DTYPE_F32, C, 0.0f, 0.5f);
  d.rv = mixed_input(DDP_DTYPE_F32, C, 2.0f, 0.1f);
  d.sa = mixed_output(DDP_DTYPE_F32, C);
  d.sb = mixed_output(DDP_DTYPE_F32, C);
  return d;
}

static void bn_data_free(bn_data_t *d) {
  mixed_t *all[] = {&d->x, &d->dy, &d->gamma, &d->beta, &d->rm, &d->rv, &d->sa, &d->sb};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) mixed_free(all[i]);
}

static void bn_case(ddp_dtype_t dt, const ddp_bn_shape_t *sh) {
  const ddp_conv_ops_t *cc = cpu_conv(), *gc = gpu_conv();
  const size_t n = bn_n(sh), C = (size_t)sh->C;
  ck_assert_int_eq(cc->bn_prepare(twin_cpu, DDP_DTYPE_F32, sh), DDP_OK);
  ck_assert_int_eq(gc->bn_prepare(twin_gpu, dt, sh), DDP_OK);
  bn_data_t d = bn_data_make(dt, sh);
  mixed_t y = mixed_output(dt, n), ye = mixed_output(dt, n);
  /* Inference first, by the initial running statistics. */
  ck_assert_int_eq(cc->bn_fwd(twin_cpu, DDP_DTYPE_F32, ye.cpu, NULL, NULL, (float *)d.rm.cpu,
                              (float *)d.rv.cpu, d.x.cpu, d.gamma.cpu, d.beta.cpu, sh, 0, NULL),
                   DDP_OK);
  ck_assert_int_eq(gc->bn_fwd(twin_gpu, dt, ye.gpu, NULL, NULL, (float *)d.rm.gpu,
                              (float *)d.rv.gpu, d.x.gpu, d.gamma.gpu, d.beta.gpu, sh, 0, NULL),
                   DDP_OK);
  ck_assert_int_eq(cc->bn_fwd(twin_cpu, DDP_DTYPE_F32, y.cpu, (float *)d.sa.cpu, (float *)d.sb.cpu,
                              (float *)d.rm.cpu, (float *)d.rv.cpu, d.x.cpu, d.gamma.cpu,
                              d.beta.cpu, sh, 1, NULL),
                   DDP_OK);
  ck_assert_int_eq(
      gc->bn_fwd(twin_gpu, dt, y.gpu, (float *)d.sa.gpu, (float *)d.sb.gpu, (float *)d.rm.gpu,
                 (float *)d.rv.gpu, d.x.gpu, d.gamma.gpu, d.beta.gpu, sh, 1, NULL),
      DDP_OK);
  const double e_ye = mixed_expect(&ye, out_tol(dt, TOL_BN_F32), "bn_fwd inference out");
  const double e_y = mixed_expect(&y, out_tol(dt, TOL_BN_F32), "bn_fwd training out");
  const double e_rm = mixed_expect(&d.rm, TOL_BN_F32, "bn_fwd running_mean");
  const double e_rv = mixed_expect(&d.rv, TOL_BN_F32, "bn_fwd running_var (unbiased)");
  mixed_expect(&d.sa, TOL_BN_F32, "bn_fwd save_a (the mean on both)");
  /* save_b: the CPU keeps the variance, cuDNN the inverse std. */
  float *cvar = fetch_cpu(&d.sb), *gistd = fetch_gpu(&d.sb);
  for (size_t c = 0; c < C; ++c) cvar[c] = 1.0f / sqrtf(cvar[c] + sh->eps);
  compare(gistd, cvar, C, TOL_BN_F32, "bn_fwd save_b (1 / sqrt(var + eps))", DDP_DTYPE_F32);
  free(cvar);
  free(gistd);
  double e_dx[2] = {0, 0}, e_dg[2] = {0, 0};
  for (int acc = 0; acc < 2; ++acc) {
    mixed_t dx = mixed_output(dt, n);
    mixed_t dg = acc ? mixed_input(DDP_DTYPE_F32, C, 0.0f, 1.0f) : mixed_output(DDP_DTYPE_F32, C);
    mixed_t db = acc ? mixed_input(DDP_DTYPE_F32, C, 0.0f, 1.0f) : mixed_output(DDP_DTYPE_F32, C);
    ck_assert_int_eq(cc->bn_bwd(twin_cpu, DDP_DTYPE_F32, dx.cpu, (float *)dg.cpu, (float *)db.cpu,
                                d.dy.cpu, d.x.cpu, d.gamma.cpu, d.sa.cpu, d.sb.cpu, sh, acc, NULL),
                     DDP_OK);
    ck_assert_int_eq(gc->bn_bwd(twin_gpu, dt, dx.gpu, (float *)dg.gpu, (float *)db.gpu, d.dy.gpu,
                                d.x.gpu, d.gamma.gpu, d.sa.gpu, d.sb.gpu, sh, acc, NULL),
                     DDP_OK);
    e_dx[acc] = mixed_expect(&dx, out_tol(dt, TOL_BN_F32), "bn_bwd dinp");
    e_dg[acc] = mixed_expect(&dg, TOL_BN_F32, "bn_bwd dgamma");
    mixed_expect(&db, TOL_BN_F32, "bn_bwd dbeta");
    if (!acc) {
      /* The backward repeats bit for bit. */
      mixed_t dx2 = mixed_output(dt, n), dg2 = mixed_output(DDP_DTYPE_F32, C);
      mixed_t db2 = mixed_output(DDP_DTYPE_F32, C);
      ck_assert_int_eq(gc->bn_bwd(twin_gpu, dt, dx2.gpu, (float *)dg2.gpu, (float *)db2.gpu,
                                  d.dy.gpu, d.x.gpu, d.gamma.gpu, d.sa.gpu, d.sb.gpu, sh, 0, NULL),
                       DDP_OK);
      expect_gpu_bits_equal(dx.gpu, dx2.gpu, n * ddp_dtype_size(dt), "bn_bwd dinp, two runs");
      expect_gpu_bits_equal(dg.gpu, dg2.gpu, C * sizeof(float), "bn_bwd dgamma, two runs");
      expect_gpu_bits_equal(db.gpu, db2.gpu, C * sizeof(float), "bn_bwd dbeta, two runs");
      mixed_free(&dx2);
      mixed_free(&dg2);
      mixed_free(&db2);
    }
    mixed_free(&dx);
    mixed_free(&dg);
    mixed_free(&db);
  }
  fprintf(stderr,
          "bn %-4s %dx%dx%dx%d: err eval %.2g out %.2g running %.2g/%.2g dinp %.2g (+= %.2g) "
          "dgamma %.2g (+= %.2g)\n",
          ddp_dtype_name(dt), sh->N, sh->H, sh->W, sh->C, e_ye, e_y, e_rm, e_rv, e_dx[0], e_dx[1],
          e_dg[0], e_dg[1]);
  mixed_free(&y);
  mixed_free(&ye);
  bn_data_free(&d);
}

/* A copy of t (host values, CPU and GPU copies alike). */
static mixed_t mixed_clone(const mixed_t *t) {
  mixed_t c = mixed_alloc(t->dt, t->n);
  memcpy(c.host, t->host, t->n * sizeof(float));
  mixed_set(&c);
  return c;
}

/* bn_relu_fwd, with and without a residual, training and inference: on the
 * GPU it equals bn_fwd then relu_fwd / add_relu_fwd on the GPU bit for bit
 * (in bf16 it is one pass, the apply's epilogue, which rounds the
 * normalised value before the add as the separate ops store it), and it
 * follows the CPU twin (the ops in sequence, fp32). */
static void bn_relu_case(ddp_dtype_t dt, const ddp_bn_shape_t *sh) {
  const ddp_conv_ops_t *cc = cpu_conv(), *gc = gpu_conv();
  const size_t n = bn_n(sh), C = (size_t)sh->C;
  ck_assert_int_eq(cc->bn_prepare(twin_cpu, DDP_DTYPE_F32, sh), DDP_OK);
  ck_assert_int_eq(gc->bn_prepare(twin_gpu, dt, sh), DDP_OK);
  mixed_t x = mixed_input(dt, n, 0.7f, 2.0f), res = mixed_input(dt, n, 0.0f, 1.0f);
  mixed_t gamma = mixed_input(DDP_DTYPE_F32, C, 1.0f, 0.3f);
  mixed_t beta = mixed_input(DDP_DTYPE_F32, C, 0.0f, 0.5f);
  for (int training = 0; training <= 1; ++training)
    for (int with_res = 0; with_res <= 1; ++with_res) {
      mixed_t rm = mixed_input(DDP_DTYPE_F32, C, 0.0f, 0.5f);
      mixed_t rv = mixed_input(DDP_DTYPE_F32, C, 2.0f, 0.1f);
      mixed_t rm2 = mixed_clone(&rm), rv2 = mixed_clone(&rv);
      mixed_t sa = mixed_output(DDP_DTYPE_F32, C), sb = mixed_output(DDP_DTYPE_F32, C);
      mixed_t sa2 = mixed_output(DDP_DTYPE_F32, C), sb2 = mixed_output(DDP_DTYPE_F32, C);
      mixed_t out = mixed_output(dt, n), seq = mixed_output(dt, n);
      const void *r_cpu = with_res ? res.cpu : NULL, *r_gpu = with_res ? res.gpu : NULL;
      ck_assert_int_eq(
          cc->bn_relu_fwd(twin_cpu, DDP_DTYPE_F32, out.cpu, training ? (float *)sa.cpu : NULL,
                          training ? (float *)sb.cpu : NULL, (float *)rm.cpu, (float *)rv.cpu,
                          x.cpu, gamma.cpu, beta.cpu, r_cpu, sh, training, NULL),
          DDP_OK);
      ck_assert_int_eq(
          gc->bn_relu_fwd(twin_gpu, dt, out.gpu, training ? (float *)sa.gpu : NULL,
                          training ? (float *)sb.gpu : NULL, (float *)rm.gpu, (float *)rv.gpu,
                          x.gpu, gamma.gpu, beta.gpu, r_gpu, sh, training, NULL),
          DDP_OK);
      ck_assert_int_eq(gc->bn_fwd(twin_gpu, dt, seq.gpu, training ? (float *)sa2.gpu : NULL,
                                  training ? (float *)sb2.gpu : NULL, (float *)rm2.gpu,
                                  (float *)rv2.gpu, x.gpu, gamma.gpu, beta.gpu, sh, training, NULL),
                       DDP_OK);
      if (with_res)
        ck_assert_int_eq(gc->add_relu_fwd(twin_gpu, dt, seq.gpu, seq.gpu, res.gpu, n, NULL),
                         DDP_OK);
      else
        ck_assert_int_eq(gc->relu_fwd(twin_gpu, dt, seq.gpu, seq.gpu, n, NULL), DDP_OK);
      const char *what = with_res ? "bn_relu_fwd with a residual" : "bn_relu_fwd";
      expect_gpu_bits_equal(out.gpu, seq.gpu, n * ddp_dtype_size(dt), what);
      expect_gpu_bits_equal(rm.gpu, rm2.gpu, C * sizeof(float), "bn_relu_fwd running_mean");
      expect_gpu_bits_equal(rv.gpu, rv2.gpu, C * sizeof(float), "bn_relu_fwd running_var");
      if (training) {
        expect_gpu_bits_equal(sa.gpu, sa2.gpu, C * sizeof(float), "bn_relu_fwd save_a");
        expect_gpu_bits_equal(sb.gpu, sb2.gpu, C * sizeof(float), "bn_relu_fwd save_b");
      }
      const double e = mixed_expect(&out, out_tol(dt, TOL_BN_F32), what);
      mixed_expect(&rm, TOL_BN_F32, "bn_relu_fwd running_mean against the CPU");
      if (training && with_res)
        fprintf(stderr, "bn_relu %-4s %dx%dx%dx%d: err out %.2g\n", ddp_dtype_name(dt), sh->N,
                sh->H, sh->W, sh->C, e);
      mixed_t *all[] = {&rm, &rv, &rm2, &rv2, &sa, &sb, &sa2, &sb2, &out, &seq};
      for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) mixed_free(all[i]);
    }
  mixed_t *all[] = {&x, &res, &gamma, &beta};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) mixed_free(all[i]);
}

/* bn_relu_bwd after a training bn_relu_fwd: on the GPU it equals relu_bwd
 * then bn_bwd on the GPU bit for bit (in bf16 without a residual it
 * recomputes the ReLU's mask from the input and the saves instead of
 * reading the output, so this is what shows the two masks agree; with a
 * residual it writes relu_bwd's result over dout in its first pass, which
 * must equal relu_bwd's), overwriting and accumulating the parameter
 * gradients; and it follows the CPU twin given the GPU's
 * output as the mask (a value near 0 may fall on either side of it in
 * the two forwards, which would flip a whole element of the gradient). */
static void bn_relu_bwd_case(ddp_dtype_t dt, const ddp_bn_shape_t *sh) {
  const ddp_conv_ops_t *cc = cpu_conv(), *gc = gpu_conv();
  const size_t n = bn_n(sh), C = (size_t)sh->C;
  ck_assert_int_eq(cc->bn_prepare(twin_cpu, DDP_DTYPE_F32, sh), DDP_OK);
  ck_assert_int_eq(gc->bn_prepare(twin_gpu, dt, sh), DDP_OK);
  bn_data_t d = bn_data_make(dt, sh);
  mixed_t y = mixed_output(dt, n);
  ck_assert_int_eq(cc->bn_relu_fwd(twin_cpu, DDP_DTYPE_F32, y.cpu, (float *)d.sa.cpu,
                                   (float *)d.sb.cpu, (float *)d.rm.cpu, (float *)d.rv.cpu, d.x.cpu,
                                   d.gamma.cpu, d.beta.cpu, NULL, sh, 1, NULL),
                   DDP_OK);
  ck_assert_int_eq(
      gc->bn_relu_fwd(twin_gpu, dt, y.gpu, (float *)d.sa.gpu, (float *)d.sb.gpu, (float *)d.rm.gpu,
                      (float *)d.rv.gpu, d.x.gpu, d.gamma.gpu, d.beta.gpu, NULL, sh, 1, NULL),
      DDP_OK);
  /* with a residual, the mask is the block output's: a forward with one,
   * whose saves equal the first's (same input) */
  mixed_t res = mixed_input(dt, n, 0.0f, 1.0f), yr = mixed_output(dt, n);
  mixed_t sa2 = mixed_output(DDP_DTYPE_F32, C), sb2 = mixed_output(DDP_DTYPE_F32, C);
  ck_assert_int_eq(
      gc->bn_relu_fwd(twin_gpu, dt, yr.gpu, (float *)sa2.gpu, (float *)sb2.gpu, (float *)d.rm.gpu,
                      (float *)d.rv.gpu, d.x.gpu, d.gamma.gpu, d.beta.gpu, res.gpu, sh, 1, NULL),
      DDP_OK);
  /* the CPU twin masks by the GPU's outputs */
  size_t cut = 0;
  mixed_t *outs[] = {&y, &yr};
  for (int r = 0; r < 2; ++r) {
    float *gy = fetch_gpu(outs[r]);
    size_t z = 0;
    for (size_t i = 0; i < n; ++i) z += gy[i] == 0.0f;
    ck_assert_msg(z > n / 10 && z < n - n / 10, "%zu of %zu cut: not a test", z, n);
    if (r == 0) cut = z;
    twin_upload(twin_cpu, outs[r]->cpu, gy, n * sizeof(float));
    free(gy);
  }
  double e[2] = {0, 0};
  for (int acc = 0; acc <= 1; ++acc)
    for (int residual = 0; residual <= 1; ++residual) {
      const mixed_t *o = residual ? &yr : &y;
      mixed_t dx = mixed_output(dt, n), want = mixed_output(dt, n);
      mixed_t d1 = mixed_clone(&d.dy), d2 = mixed_clone(&d.dy);
      mixed_t dg = acc ? mixed_input(DDP_DTYPE_F32, C, 0.0f, 1.0f) : mixed_output(DDP_DTYPE_F32, C);
      mixed_t db = acc ? mixed_input(DDP_DTYPE_F32, C, 0.0f, 1.0f) : mixed_output(DDP_DTYPE_F32, C);
      mixed_t dg2 = mixed_clone(&dg), db2 = mixed_clone(&db);
      ck_assert_int_eq(gc->bn_relu_bwd(twin_gpu, dt, dx.gpu, (float *)dg.gpu, (float *)db.gpu,
                                       d1.gpu, d.x.gpu, o->gpu, d.gamma.gpu, d.beta.gpu, d.sa.gpu,
                                       d.sb.gpu, residual, sh, acc, NULL),
                       DDP_OK);
      ck_assert_int_eq(gc->relu_bwd(twin_gpu, dt, d2.gpu, d2.gpu, o->gpu, n, NULL), DDP_OK);
      ck_assert_int_eq(gc->bn_bwd(twin_gpu, dt, want.gpu, (float *)dg2.gpu, (float *)db2.gpu,
                                  d2.gpu, d.x.gpu, d.gamma.gpu, d.sa.gpu, d.sb.gpu, sh, acc, NULL),
                       DDP_OK);
      expect_gpu_bits_equal(dx.gpu, want.gpu, n * ddp_dtype_size(dt), "bn_relu_bwd dinp");
      expect_gpu_bits_equal(dg.gpu, dg2.gpu, C * sizeof(float), "bn_relu_bwd dgamma");
      expect_gpu_bits_equal(db.gpu, db2.gpu, C * sizeof(float), "bn_relu_bwd dbeta");
      if (residual)
        expect_gpu_bits_equal(d1.gpu, d2.gpu, n * ddp_dtype_size(dt),
                              "bn_relu_bwd's dout with a residual (relu_bwd's result)");
      ck_assert_int_eq(cc->bn_relu_bwd(twin_cpu, DDP_DTYPE_F32, dx.cpu, (float *)dg.cpu,
                                       (float *)db.cpu, d1.cpu, d.x.cpu, o->cpu, d.gamma.cpu,
                                       d.beta.cpu, d.sa.cpu, d.sb.cpu, residual, sh, acc, NULL),
                       DDP_OK);
      const double err =
          mixed_expect(&dx, out_tol(dt, TOL_BN_F32), "bn_relu_bwd dinp against the CPU");
      if (!residual) e[acc] = err;
      mixed_expect(&dg, TOL_BN_F32, "bn_relu_bwd dgamma against the CPU");
      mixed_expect(&db, TOL_BN_F32, "bn_relu_bwd dbeta against the CPU");
      mixed_t *tmp[] = {&dx, &want, &d1, &d2, &dg, &db, &dg2, &db2};
      for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; ++i) mixed_free(tmp[i]);
    }
  fprintf(stderr, "bn_relu_bwd %-4s %dx%dx%dx%d: %zu of %zu cut, err dinp %.2g (+= %.2g)\n",
          ddp_dtype_name(dt), sh->N, sh->H, sh->W, sh->C, cut, n, e[0], e[1]);
  mixed_t *all[] = {&y, &res, &yr, &sa2, &sb2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) mixed_free(all[i]);
  bn_data_free(&d);
}

START_TEST(test_gpu_bn_relu_bwd_matches_composition_and_cpu) {
  for (int d = 0; d < 3; ++d)
    for (int k = 0; k < N_BN_SHAPES; ++k) bn_relu_bwd_case(twin_dtypes[d], &k_bn_shapes[k]);
}
END_TEST

/* Our batch-norm kernels pick their access width by alignment: the sums
 * read two channels per thread where the activations are aligned to two
 * elements, the apply kernels four elements per access where they are
 * aligned to four, and each channel's parameters in 16-byte loads where
 * gamma, beta, the saves and the sums are aligned to 16 bytes (a model's
 * gamma and beta sit at any float offset of its parameter buffer). Every
 * width gives the same bits. bf16, our own batch norm: bn_relu_fwd,
 * bn_relu_bwd and bn_bwd with everything aligned, then the parameters one
 * float off, then the activations one element off. */
typedef struct bn_layout_run {
  void *out, *dx, *dx2;
  float *grads;
} bn_layout_run_t;

static bn_layout_run_t bn_layout_run(const ddp_bn_shape_t *sh, const void *x_src,
                                     const void *dy_src, const float *gb_src, size_t param_off,
                                     size_t act_off) {
  const ddp_conv_ops_t *gc = gpu_conv();
  const ddp_dtype_t dt = DDP_DTYPE_BF16;
  const size_t n = bn_n(sh), C = (size_t)sh->C, es = ddp_dtype_size(dt);
  const size_t act_bytes = n * es;
  /* every buffer one element or float longer, so that an offset fits */
  char *x = twin_dev_alloc(twin_gpu, act_bytes + es),
       *dy = twin_dev_alloc(twin_gpu, act_bytes + es);
  char *out = twin_dev_alloc(twin_gpu, act_bytes + es),
       *dx = twin_dev_alloc(twin_gpu, act_bytes + es);
  char *dx2 = twin_dev_alloc(twin_gpu, act_bytes + es);
  float *params = twin_dev_alloc(twin_gpu, (6 * C + 1) * sizeof(float));
  float *grads = twin_dev_alloc(twin_gpu, (4 * C + 1) * sizeof(float));
  x += act_off * es, dy += act_off * es, out += act_off * es, dx += act_off * es,
      dx2 += act_off * es;
  float *gamma = params + param_off, *beta = gamma + C, *rm = gamma + 2 * C, *rv = gamma + 3 * C;
  float *sa = gamma + 4 * C, *sb = gamma + 5 * C;
  float *dg = grads + param_off, *db = dg + C, *dg2 = dg + 2 * C, *db2 = dg + 3 * C;
  const ddp_copy_kind_t d2d = DDP_COPY_KIND_DEVICE_TO_DEVICE;
  ck_assert_int_eq(ddp_backend_copy(twin_gpu, x, x_src, act_bytes, d2d, NULL), DDP_OK);
  ck_assert_int_eq(ddp_backend_copy(twin_gpu, dy, dy_src, act_bytes, d2d, NULL), DDP_OK);
  ck_assert_int_eq(ddp_backend_copy(twin_gpu, gamma, gb_src, 2 * C * sizeof(float), d2d, NULL),
                   DDP_OK);
  ck_assert_int_eq(twin_gpu->ops->fill(twin_gpu, rv, DDP_DTYPE_F32, 1.0f, C, NULL), DDP_OK);
  ck_assert_int_eq(twin_gpu->ops->fill(twin_gpu, rm, DDP_DTYPE_F32, 0.0f, C, NULL), DDP_OK);
  ck_assert_int_eq(
      gc->bn_relu_fwd(twin_gpu, dt, out, sa, sb, rm, rv, x, gamma, beta, NULL, sh, 1, NULL),
      DDP_OK);
  ck_assert_int_eq(gc->bn_bwd(twin_gpu, dt, dx2, dg2, db2, dy, x, gamma, sa, sb, sh, 0, NULL),
                   DDP_OK);
  ck_assert_int_eq(
      gc->bn_relu_bwd(twin_gpu, dt, dx, dg, db, dy, x, out, gamma, beta, sa, sb, 0, sh, 0, NULL),
      DDP_OK);
  /* what the comparison reads, packed at offset 0 of fresh buffers */
  bn_layout_run_t r = {twin_dev_alloc(twin_gpu, act_bytes), twin_dev_alloc(twin_gpu, act_bytes),
                       twin_dev_alloc(twin_gpu, act_bytes),
                       twin_dev_alloc(twin_gpu, 4 * C * sizeof(float))};
  ck_assert_int_eq(ddp_backend_copy(twin_gpu, r.out, out, act_bytes, d2d, NULL), DDP_OK);
  ck_assert_int_eq(ddp_backend_copy(twin_gpu, r.dx, dx, act_bytes, d2d, NULL), DDP_OK);
  ck_assert_int_eq(ddp_backend_copy(twin_gpu, r.dx2, dx2, act_bytes, d2d, NULL), DDP_OK);
  ck_assert_int_eq(ddp_backend_copy(twin_gpu, r.grads, dg, 4 * C * sizeof(float), d2d, NULL),
                   DDP_OK);
  ck_assert_int_eq(ddp_backend_sync(twin_gpu, NULL), DDP_OK);
  void *all[] = {x - act_off * es,
                 dy - act_off * es,
                 out - act_off * es,
                 dx - act_off * es,
                 dx2 - act_off * es,
                 params,
                 grads};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ddp_backend_free(twin_gpu, all[i]);
  return r;
}

START_TEST(test_gpu_bn_alignment_gives_the_same_bits) {
  const ddp_dtype_t dt = DDP_DTYPE_BF16;
  const size_t offsets[3][2] = {{0, 0}, {1, 0}, {0, 1}}; /* parameters, activations */
  /* 24, 72 and 136 channels: the reductions' 16-byte accesses against
   * one-element ones (activations one element off) */
  const ddp_bn_shape_t shapes[] = {k_bn_shapes[0], k_bn_shapes[3], k_bn_shapes[5]};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; ++k) {
    const ddp_bn_shape_t *sh = &shapes[k];
    const size_t n = bn_n(sh), C = (size_t)sh->C, es = ddp_dtype_size(dt);
    ck_assert_int_eq(gpu_conv()->bn_prepare(twin_gpu, dt, sh), DDP_OK);
    mixed_t x = mixed_input(dt, n, 0.7f, 2.0f), dy = mixed_input(dt, n, 0.0f, 1.0f);
    mixed_t gb = mixed_input(DDP_DTYPE_F32, 2 * C, 0.5f, 0.3f); /* gamma, then beta */
    bn_layout_run_t run[3];
    for (int j = 0; j < 3; ++j)
      run[j] = bn_layout_run(sh, x.gpu, dy.gpu, gb.gpu, offsets[j][0], offsets[j][1]);
    for (int j = 1; j < 3; ++j) {
      const char *what = j == 1 ? "parameters one float off" : "activations one element off";
      char msg[160];
      snprintf(msg, sizeof msg, "bn_relu_fwd out, %s, C=%zu", what, C);
      expect_gpu_bits_equal(run[0].out, run[j].out, n * es, msg);
      snprintf(msg, sizeof msg, "bn_relu_bwd dinp, %s, C=%zu", what, C);
      expect_gpu_bits_equal(run[0].dx, run[j].dx, n * es, msg);
      snprintf(msg, sizeof msg, "bn_bwd dinp, %s, C=%zu", what, C);
      expect_gpu_bits_equal(run[0].dx2, run[j].dx2, n * es, msg);
      snprintf(msg, sizeof msg, "parameter gradients, %s, C=%zu", what, C);
      expect_gpu_bits_equal(run[0].grads, run[j].grads, 4 * C * sizeof(float), msg);
    }
    for (int j = 0; j < 3; ++j) {
      void *all[] = {run[j].out, run[j].dx, run[j].dx2, run[j].grads};
      for (int i = 0; i < 4; ++i) ddp_backend_free(twin_gpu, all[i]);
    }
    mixed_free(&x);
    mixed_free(&dy);
    mixed_free(&gb);
  }
}
END_TEST

START_TEST(test_gpu_bn_relu_matches_composition_and_cpu) {
  for (int d = 0; d < 3; ++d)
    for (int k = 0; k < N_BN_SHAPES; ++k) bn_relu_case(twin_dtypes[d], &k_bn_shapes[k]);
}
END_TEST

START_TEST(test_gpu_bn_matches_cpu) {
  for (int d = 0; d < 3; ++d)
    for (int k = 0; k < N_BN_SHAPES; ++k) bn_case(twin_dtypes[d], &k_bn_shapes[k]);
}
END_TEST

/* ---- batch normalization in parts (--sync-bn), one rank ----------------------- */

/* Runs the four parts on one backend as a rank of one: sums -> mean -> sums
 * of squares -> var (the divisions on the host, as the caller between the
 * ranks' sums would), apply; then the backward with g = l. */
static void parts_run(ddp_backend_t *be, const ddp_conv_ops_t *ops, ddp_dtype_t dt,
                      const ddp_bn_shape_t *sh, void *y, float *rm, float *rv, const void *x,
                      const void *gamma, const void *beta, void *dx, float *dg, float *db,
                      const void *dy, float *mean, float *var, float *sums, int acc) {
  const int C = sh->C;
  const int64_t M = (int64_t)sh->N * sh->H * sh->W;
  float *h = malloc(2 * (size_t)C * sizeof(float));
  ck_assert_ptr_nonnull(h);
  ck_assert_int_eq(ops->bn_reduce_fwd(be, dt, sums, x, NULL, sh, NULL), DDP_OK);
  twin_download(be, h, sums, (size_t)C * sizeof(float));
  for (int c = 0; c < C; ++c) h[c] /= (float)M;
  twin_upload(be, mean, h, (size_t)C * sizeof(float));
  ck_assert_int_eq(ops->bn_reduce_fwd(be, dt, sums, x, mean, sh, NULL), DDP_OK);
  twin_download(be, h, sums, (size_t)C * sizeof(float));
  for (int c = 0; c < C; ++c) h[c] /= (float)M;
  twin_upload(be, var, h, (size_t)C * sizeof(float));
  ck_assert_int_eq(ops->bn_apply_fwd(be, dt, y, rm, rv, x, mean, var, gamma, beta, M, sh, NULL),
                   DDP_OK);
  ck_assert_int_eq(ops->bn_reduce_bwd(be, dt, sums, dy, x, mean, sh, NULL), DDP_OK);
  ck_assert_int_eq(
      ops->bn_apply_bwd(be, dt, dx, dg, db, dy, x, mean, var, gamma, sums, sums, M, sh, acc, NULL),
      DDP_OK);
  free(h);
}

static void parts_case(ddp_dtype_t dt, const ddp_bn_shape_t *sh) {
  const ddp_conv_ops_t *cc = cpu_conv(), *gc = gpu_conv();
  const size_t n = bn_n(sh), C = (size_t)sh->C;
  ck_assert_int_eq(cc->bn_prepare(twin_cpu, DDP_DTYPE_F32, sh), DDP_OK);
  ck_assert_int_eq(gc->bn_prepare(twin_gpu, dt, sh), DDP_OK);
  mixed_t x = mixed_input(dt, n, 3.0f, 2.0f), dy = mixed_input(dt, n, 0.0f, 1.0f);
  mixed_t gamma = mixed_input(DDP_DTYPE_F32, C, 1.0f, 0.3f);
  mixed_t beta = mixed_input(DDP_DTYPE_F32, C, 0.0f, 0.5f);
  mixed_t rm = mixed_input(DDP_DTYPE_F32, C, 0.0f, 0.5f);
  mixed_t rv = mixed_input(DDP_DTYPE_F32, C, 2.0f, 0.1f);
  mixed_t dg = mixed_input(DDP_DTYPE_F32, C, 0.0f, 1.0f), db = mixed_input(DDP_DTYPE_F32, C, 0, 1);
  mixed_t y = mixed_output(dt, n), dx = mixed_output(dt, n);
  mixed_t mean = mixed_output(DDP_DTYPE_F32, C), var = mixed_output(DDP_DTYPE_F32, C);
  mixed_t sums = mixed_output(DDP_DTYPE_F32, 2 * C);
  parts_run(twin_cpu, cc, DDP_DTYPE_F32, sh, y.cpu, rm.cpu, rv.cpu, x.cpu, gamma.cpu, beta.cpu,
            dx.cpu, dg.cpu, db.cpu, dy.cpu, mean.cpu, var.cpu, sums.cpu, 1);
  parts_run(twin_gpu, gc, dt, sh, y.gpu, rm.gpu, rv.gpu, x.gpu, gamma.gpu, beta.gpu, dx.gpu, dg.gpu,
            db.gpu, dy.gpu, mean.gpu, var.gpu, sums.gpu, 1);
  const double e_y = mixed_expect(&y, out_tol(dt, TOL_BN_F32), "bn parts out");
  mixed_expect(&mean, TOL_BN_F32, "bn_reduce_fwd mean");
  mixed_expect(&var, TOL_BN_F32, "bn_reduce_fwd var (about the mean)");
  mixed_expect(&rm, TOL_BN_F32, "bn_apply_fwd running_mean");
  mixed_expect(&rv, TOL_BN_F32, "bn_apply_fwd running_var");
  mixed_expect(&sums, TOL_BN_F32, "bn_reduce_bwd sums");
  const double e_dx = mixed_expect(&dx, out_tol(dt, TOL_BN_F32), "bn parts dinp");
  mixed_expect(&dg, TOL_BN_F32, "bn_apply_bwd dgamma (+=)");
  mixed_expect(&db, TOL_BN_F32, "bn_apply_bwd dbeta (+=)");

  /* With one rank the parts equal bn_fwd / bn_bwd up to rounding: the GPU
   * parts against the GPU's cuDNN ops. */
  mixed_t y2 = mixed_output(dt, n), dx2 = mixed_output(dt, n);
  mixed_t sa = mixed_output(DDP_DTYPE_F32, C), sb = mixed_output(DDP_DTYPE_F32, C);
  mixed_t g2 = mixed_output(DDP_DTYPE_F32, C), b2 = mixed_output(DDP_DTYPE_F32, C);
  ck_assert_int_eq(
      gc->bn_fwd(twin_gpu, dt, y2.gpu, (float *)sa.gpu, (float *)sb.gpu, (float *)rm.gpu,
                 (float *)rv.gpu, x.gpu, gamma.gpu, beta.gpu, sh, 1, NULL),
      DDP_OK);
  ck_assert_int_eq(gc->bn_bwd(twin_gpu, dt, dx2.gpu, (float *)g2.gpu, (float *)b2.gpu, dy.gpu,
                              x.gpu, gamma.gpu, sa.gpu, sb.gpu, sh, 0, NULL),
                   DDP_OK);
  float *a = fetch_gpu(&y), *b = fetch_gpu(&y2);
  compare(a, b, n, out_tol(dt, TOL_BN_F32), "bn parts out == bn_fwd out", dt);
  free(a);
  free(b);
  a = fetch_gpu(&dx), b = fetch_gpu(&dx2);
  compare(a, b, n, out_tol(dt, TOL_BN_F32), "bn parts dinp == bn_bwd dinp", dt);
  free(a);
  free(b);

  /* The reductions repeat bit for bit. */
  mixed_t s2 = mixed_output(DDP_DTYPE_F32, 2 * C);
  ck_assert_int_eq(gc->bn_reduce_bwd(twin_gpu, dt, (float *)s2.gpu, dy.gpu, x.gpu,
                                     (const float *)mean.gpu, sh, NULL),
                   DDP_OK);
  expect_gpu_bits_equal(sums.gpu, s2.gpu, 2 * C * sizeof(float), "bn_reduce_bwd, two runs");
  fprintf(stderr, "bn parts %-4s %dx%dx%dx%d: err out %.2g dinp %.2g\n", ddp_dtype_name(dt), sh->N,
          sh->H, sh->W, sh->C, e_y, e_dx);
  mixed_t *all[] = {&x,    &dy,  &gamma, &beta, &rm,  &rv, &dg, &db, &y,  &dx,
                    &mean, &var, &sums,  &y2,   &dx2, &sa, &sb, &g2, &b2, &s2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) mixed_free(all[i]);
}

START_TEST(test_gpu_bn_parts_match_cpu) {
  for (int d = 0; d < 3; ++d)
    for (int k = 0; k < N_BN_SHAPES; ++k) parts_case(twin_dtypes[d], &k_bn_shapes[k]);
}
END_TEST

/* ---- pooling and activations ------------------------------------------------- */

static const ddp_pool_shape_t k_pool_shapes[] = {
    {.N = 2, .H = 9, .W = 9, .C = 16, .kernel = 3, .stride = 2, .pad = 1},
    {.N = 2, .H = 8, .W = 8, .C = 5, .kernel = 2, .stride = 2, .pad = 0},
    {.N = 1, .H = 7, .W = 6, .C = 3, .kernel = 3, .stride = 1, .pad = 1},
};
#define N_POOL_SHAPES ((int)(sizeof k_pool_shapes / sizeof k_pool_shapes[0]))

/* Values j/16 for distinct integers j in [-254, 254] along 509 consecutive
 * elements (exact in bf16 and fp16), so windows rarely hold ties and both
 * backends agree on every winner whatever their tie rule. */
static mixed_t distinct_input(ddp_dtype_t dt, size_t n) {
  mixed_t t = mixed_alloc(dt, n);
  const uint64_t shift = ddp_rng_below(&twin_rng, twin_off++, 509);
  for (size_t i = 0; i < n; ++i) t.host[i] = (float)((int)((i * 7919 + shift) % 509) - 254) / 16.0f;
  mixed_set(&t);
  return t;
}

static void pool_case(ddp_dtype_t dt, const ddp_pool_shape_t *sh) {
  const ddp_conv_ops_t *cc = cpu_conv(), *gc = gpu_conv();
  const size_t n_in = (size_t)sh->N * sh->H * sh->W * sh->C;
  const size_t n_out = (size_t)sh->N * ddp_pool_out_h(sh) * ddp_pool_out_w(sh) * sh->C;
  size_t cb = 0, gb = 0;
  ck_assert_int_eq(cc->maxpool_workspace_bytes(twin_cpu, DDP_DTYPE_F32, sh, &cb), DDP_OK);
  ck_assert_int_eq(gc->maxpool_workspace_bytes(twin_gpu, dt, sh, &gb), DDP_OK);
  void *cws = twin_dev_alloc(twin_cpu, cb), *gws = twin_dev_alloc(twin_gpu, gb);
  mixed_t x = distinct_input(dt, n_in), dy = mixed_input(dt, n_out, 0.0f, 1.0f);
  mixed_t y = mixed_output(dt, n_out), ye = mixed_output(dt, n_out), dx = mixed_output(dt, n_in);
  ck_assert_int_eq(cc->maxpool_fwd(twin_cpu, DDP_DTYPE_F32, y.cpu, cws, x.cpu, sh, NULL), DDP_OK);
  ck_assert_int_eq(gc->maxpool_fwd(twin_gpu, dt, y.gpu, gws, x.gpu, sh, NULL), DDP_OK);
  ck_assert_int_eq(cc->maxpool_fwd(twin_cpu, DDP_DTYPE_F32, ye.cpu, NULL, x.cpu, sh, NULL), DDP_OK);
  ck_assert_int_eq(gc->maxpool_fwd(twin_gpu, dt, ye.gpu, NULL, x.gpu, sh, NULL), DDP_OK);
  ck_assert_int_eq(cc->maxpool_bwd(twin_cpu, DDP_DTYPE_F32, dx.cpu, dy.cpu, cws, sh, NULL), DDP_OK);
  ck_assert_int_eq(gc->maxpool_bwd(twin_gpu, dt, dx.gpu, dy.gpu, gws, sh, NULL), DDP_OK);
  /* A maximum is one of the inputs: exact in every dtype. */
  mixed_expect(&y, 0.0, "maxpool_fwd out");
  mixed_expect(&ye, 0.0, "maxpool_fwd inference out");
  const double e_dx = mixed_expect(&dx, out_tol(dt, TOL_POOL_F32), "maxpool_bwd dinp");
  fprintf(stderr, "maxpool %-4s %dx%dx%dx%d k%d/%d pad %d: err dinp %.2g\n", ddp_dtype_name(dt),
          sh->N, sh->H, sh->W, sh->C, sh->kernel, sh->stride, sh->pad, e_dx);
  ddp_backend_free(twin_cpu, cws);
  ddp_backend_free(twin_gpu, gws);
  mixed_t *all[] = {&x, &dy, &y, &ye, &dx};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) mixed_free(all[i]);
}

static void avgpool_case(ddp_dtype_t dt, int N, int HW, int C) {
  const ddp_conv_ops_t *cc = cpu_conv(), *gc = gpu_conv();
  const size_t n_in = (size_t)N * HW * C, n_out = (size_t)N * C;
  mixed_t x = mixed_input(dt, n_in, 0.5f, 1.0f), dy = mixed_input(dt, n_out, 0.0f, 1.0f);
  mixed_t y = mixed_output(dt, n_out), dx = mixed_output(dt, n_in);
  ck_assert_int_eq(cc->avgpool_fwd(twin_cpu, DDP_DTYPE_F32, y.cpu, x.cpu, N, HW, C, NULL), DDP_OK);
  ck_assert_int_eq(gc->avgpool_fwd(twin_gpu, dt, y.gpu, x.gpu, N, HW, C, NULL), DDP_OK);
  ck_assert_int_eq(cc->avgpool_bwd(twin_cpu, DDP_DTYPE_F32, dx.cpu, dy.cpu, N, HW, C, NULL),
                   DDP_OK);
  ck_assert_int_eq(gc->avgpool_bwd(twin_gpu, dt, dx.gpu, dy.gpu, N, HW, C, NULL), DDP_OK);
  mixed_expect(&y, out_tol(dt, TOL_POOL_F32), "avgpool_fwd out");
  mixed_expect(&dx, out_tol(dt, TOL_POOL_F32), "avgpool_bwd dinp");
  mixed_t *all[] = {&x, &dy, &y, &dx};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) mixed_free(all[i]);
}

START_TEST(test_gpu_pool_matches_cpu) {
  for (int d = 0; d < 3; ++d) {
    for (int k = 0; k < N_POOL_SHAPES; ++k) pool_case(twin_dtypes[d], &k_pool_shapes[k]);
    avgpool_case(twin_dtypes[d], 3, 49, 37);
    avgpool_case(twin_dtypes[d], 2, 1, 2048);
  }
}
END_TEST

/* Windows of equal values: the first position in window order wins, as in
 * PyTorch, so the backward routes each window's gradient there. 1x4x4x2
 * of ones, kernel 2 stride 2: each window's winner is its top-left. */
START_TEST(test_gpu_maxpool_ties_go_to_first) {
  const ddp_conv_ops_t *gc = gpu_conv();
  const ddp_pool_shape_t sh = {.N = 1, .H = 4, .W = 4, .C = 2, .kernel = 2, .stride = 2, .pad = 0};
  for (int d = 0; d < 3; ++d) {
    const ddp_dtype_t dt = twin_dtypes[d];
    mixed_t x = mixed_alloc(dt, 32), dy = mixed_alloc(dt, 8), dx = mixed_output(dt, 32);
    for (int i = 0; i < 32; ++i) x.host[i] = 1.0f;
    for (int i = 0; i < 8; ++i) dy.host[i] = (float)(i + 1);
    mixed_set(&x);
    mixed_set(&dy);
    size_t bytes = 0;
    ck_assert_int_eq(gc->maxpool_workspace_bytes(twin_gpu, dt, &sh, &bytes), DDP_OK);
    void *ws = twin_dev_alloc(twin_gpu, bytes);
    mixed_t y = mixed_output(dt, 8);
    ck_assert_int_eq(gc->maxpool_fwd(twin_gpu, dt, y.gpu, ws, x.gpu, &sh, NULL), DDP_OK);
    ck_assert_int_eq(gc->maxpool_bwd(twin_gpu, dt, dx.gpu, dy.gpu, ws, &sh, NULL), DDP_OK);
    float *g = fetch_gpu(&dx);
    for (int h = 0; h < 4; ++h)
      for (int w = 0; w < 4; ++w)
        for (int c = 0; c < 2; ++c) {
          const int first = h % 2 == 0 && w % 2 == 0;
          const float want = first ? (float)(((h / 2) * 2 + w / 2) * 2 + c + 1) : 0.0f;
          ck_assert_msg(g[(h * 4 + w) * 2 + c] == want, "%s: dinp at (%d,%d,%d) is %g, want %g",
                        ddp_dtype_name(dt), h, w, c, (double)g[(h * 4 + w) * 2 + c], (double)want);
        }
    free(g);
    ddp_backend_free(twin_gpu, ws);
    mixed_free(&x);
    mixed_free(&dy);
    mixed_free(&dx);
    mixed_free(&y);
  }
}
END_TEST

/* Elements [off, n) of t as a buffer of their own: an offset of one
 * element misaligns the four-element groups of the GPU's vector kernels,
 * so the scalar ones run. */
static mixed_t mixed_view(const mixed_t *t, size_t off) {
  mixed_t v = *t;
  v.host = t->host + off;
  v.cpu = (float *)t->cpu + off;
  v.gpu = (char *)t->gpu + off * ddp_dtype_size(t->dt);
  v.n = t->n - off;
  return v;
}

/* The three activation ops on n elements, each buffer starting `off`
 * elements into its allocation. */
static void act_case(ddp_dtype_t dt, size_t n_all, size_t off) {
  const ddp_conv_ops_t *cc = cpu_conv(), *gc = gpu_conv();
  mixed_t a0 = mixed_input(dt, n_all, 0.0f, 1.0f), b0 = mixed_input(dt, n_all, 0.0f, 1.0f);
  mixed_t dy0 = mixed_input(dt, n_all, 0.0f, 1.0f);
  mixed_t r0 = mixed_output(dt, n_all), s0 = mixed_output(dt, n_all), dx0 = mixed_output(dt, n_all);
  mixed_t a = mixed_view(&a0, off), b = mixed_view(&b0, off), dy = mixed_view(&dy0, off);
  mixed_t r = mixed_view(&r0, off), s = mixed_view(&s0, off), dx = mixed_view(&dx0, off);
  const size_t n = n_all - off;
  ck_assert_int_eq(cc->relu_fwd(twin_cpu, DDP_DTYPE_F32, r.cpu, a.cpu, n, NULL), DDP_OK);
  ck_assert_int_eq(gc->relu_fwd(twin_gpu, dt, r.gpu, a.gpu, n, NULL), DDP_OK);
  ck_assert_int_eq(cc->add_relu_fwd(twin_cpu, DDP_DTYPE_F32, s.cpu, a.cpu, b.cpu, n, NULL), DDP_OK);
  ck_assert_int_eq(gc->add_relu_fwd(twin_gpu, dt, s.gpu, a.gpu, b.gpu, n, NULL), DDP_OK);
  ck_assert_int_eq(cc->relu_bwd(twin_cpu, DDP_DTYPE_F32, dx.cpu, dy.cpu, s.cpu, n, NULL), DDP_OK);
  ck_assert_int_eq(gc->relu_bwd(twin_gpu, dt, dx.gpu, dy.gpu, s.gpu, n, NULL), DDP_OK);
  /* ReLU of a stored value and routing a stored gradient are exact; the
   * sum a + b is rounded once to dt on the GPU, not on the fp32 CPU. */
  mixed_expect(&r, 0.0, "relu_fwd");
  mixed_expect(&s, out_tol(dt, 0.0), "add_relu_fwd");
  mixed_expect(&dx, 0.0, "relu_bwd");
  /* In place: out aliases a, then dinp aliases dout; the same bits. */
  mixed_t a20 = mixed_alloc(dt, n_all), dy20 = mixed_alloc(dt, n_all);
  memcpy(a20.host, a0.host, n_all * sizeof(float));
  memcpy(dy20.host, dy0.host, n_all * sizeof(float));
  mixed_set(&a20);
  mixed_set(&dy20);
  mixed_t a2 = mixed_view(&a20, off), dy2 = mixed_view(&dy20, off);
  ck_assert_int_eq(gc->add_relu_fwd(twin_gpu, dt, a2.gpu, a2.gpu, b.gpu, n, NULL), DDP_OK);
  ck_assert_int_eq(gc->relu_bwd(twin_gpu, dt, dy2.gpu, dy2.gpu, a2.gpu, n, NULL), DDP_OK);
  expect_gpu_bits_equal(a2.gpu, s.gpu, n * ddp_dtype_size(dt), "add_relu_fwd in place");
  expect_gpu_bits_equal(dy2.gpu, dx.gpu, n * ddp_dtype_size(dt), "relu_bwd in place");
  mixed_t *all[] = {&a0, &b0, &dy0, &r0, &s0, &dx0, &a20, &dy20};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) mixed_free(all[i]);
}

START_TEST(test_gpu_activations_match_cpu) {
  for (int d = 0; d < 3; ++d) {
    act_case(twin_dtypes[d], 1000 + 3, 0);
    act_case(twin_dtypes[d], 1, 0);
    act_case(twin_dtypes[d], 1000 + 4, 1); /* misaligned: the scalar kernels */
    /* more groups of four than the grid has threads (4096 x 256): the
     * grid-stride loop wraps, and a tail of 3 */
    act_case(twin_dtypes[d], (size_t)4 * 4096 * 256 + 4 * 999 + 3, 0);
  }
}
END_TEST

/* ---- autotuning, workspace, determinism --------------------------------------- */

/* One "step" of every op on prepared shapes: conv (3 ops, both accumulate
 * settings), bn, the parts, pooling, activations. */
typedef struct step_bufs {
  ddp_conv_shape_t cs;
  ddp_bn_shape_t bs;
  ddp_pool_shape_t ps;
  void *x, *w, *y, *dy, *dx, *ws, *pool_out, *pool_dout;
  float *dw, *gamma, *beta, *rm, *rv, *sa, *sb, *dg, *db, *sums;
} step_bufs_t;

static void step_alloc(step_bufs_t *b, ddp_dtype_t dt) {
  const ddp_conv_ops_t *gc = gpu_conv();
  b->cs = (ddp_conv_shape_t){
      .N = 4, .H = 12, .W = 12, .C = 32, .K = 32, .R = 3, .S = 3, .stride = 1, .pad = 1};
  b->bs = (ddp_bn_shape_t){.N = 4, .H = 12, .W = 12, .C = 32, .eps = 1e-5f, .momentum = 0.1f};
  b->ps = (ddp_pool_shape_t){.N = 4, .H = 12, .W = 12, .C = 32, .kernel = 3, .stride = 2, .pad = 1};
  const size_t n = conv_in_n(&b->cs), esz = ddp_dtype_size(dt), C = 32;
  const size_t pn = (size_t)4 * ddp_pool_out_h(&b->ps) * ddp_pool_out_w(&b->ps) * C;
  size_t wsb = 0;
  ck_assert_int_eq(gc->maxpool_workspace_bytes(twin_gpu, dt, &b->ps, &wsb), DDP_OK);
  b->x = twin_dev_alloc(twin_gpu, n * esz);
  b->w = twin_dev_alloc(twin_gpu, conv_w_n(&b->cs) * esz);
  b->y = twin_dev_alloc(twin_gpu, n * esz);
  b->dy = twin_dev_alloc(twin_gpu, n * esz);
  b->dx = twin_dev_alloc(twin_gpu, n * esz);
  b->ws = twin_dev_alloc(twin_gpu, wsb);
  b->pool_out = twin_dev_alloc(twin_gpu, pn * esz);
  b->pool_dout = twin_dev_alloc(twin_gpu, pn * esz);
  b->dw = twin_dev_alloc(twin_gpu, conv_w_n(&b->cs) * sizeof(float));
  float **f[] = {&b->gamma, &b->beta, &b->rm, &b->rv, &b->sa, &b->sb, &b->dg, &b->db};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; ++i) {
    *f[i] = twin_dev_alloc(twin_gpu, C * sizeof(float));
    ck_assert_int_eq(twin_gpu->ops->fill(twin_gpu, *f[i], DDP_DTYPE_F32, 0.5f, C, NULL), DDP_OK);
  }
  b->sums = twin_dev_alloc(twin_gpu, 2 * C * sizeof(float));
  void *act[] = {b->x, b->w, b->dy, b->pool_dout};
  const size_t act_n[] = {n, conv_w_n(&b->cs), n, pn};
  for (int i = 0; i < 4; ++i)
    ck_assert_int_eq(twin_gpu->ops->fill(twin_gpu, act[i], dt, 0.25f, act_n[i], NULL), DDP_OK);
  ck_assert_int_eq(ddp_backend_sync(twin_gpu, NULL), DDP_OK);
}

static void step_free(step_bufs_t *b) {
  void *all[] = {b->x,     b->w,    b->y,  b->dy, b->dx, b->ws, b->pool_out, b->pool_dout, b->dw,
                 b->gamma, b->beta, b->rm, b->rv, b->sa, b->sb, b->dg,       b->db,        b->sums};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ddp_backend_free(twin_gpu, all[i]);
}

static void step_run(step_bufs_t *b, ddp_dtype_t dt) {
  const ddp_conv_ops_t *g = gpu_conv();
  ddp_backend_t *be = twin_gpu;
  const size_t n = conv_in_n(&b->cs);
  const int64_t M = (int64_t)4 * 12 * 12;
  ck_assert_int_eq(g->conv_fwd(be, dt, b->y, b->x, b->w, &b->cs, NULL), DDP_OK);
  ck_assert_int_eq(g->bn_fwd(be, dt, b->dx, b->sa, b->sb, b->rm, b->rv, b->y, b->gamma, b->beta,
                             &b->bs, 1, NULL),
                   DDP_OK);
  ck_assert_int_eq(g->add_relu_fwd(be, dt, b->y, b->dx, b->x, n, NULL), DDP_OK);
  ck_assert_int_eq(g->relu_fwd(be, dt, b->y, b->y, n, NULL), DDP_OK);
  ck_assert_int_eq(g->maxpool_fwd(be, dt, b->pool_out, b->ws, b->y, &b->ps, NULL), DDP_OK);
  ck_assert_int_eq(g->maxpool_bwd(be, dt, b->dx, b->pool_dout, b->ws, &b->ps, NULL), DDP_OK);
  ck_assert_int_eq(g->avgpool_fwd(be, dt, b->pool_out, b->y, 4, 144, 32, NULL), DDP_OK);
  ck_assert_int_eq(g->avgpool_bwd(be, dt, b->dx, b->pool_dout, 4, 144, 32, NULL), DDP_OK);
  ck_assert_int_eq(g->relu_bwd(be, dt, b->dx, b->dy, b->y, n, NULL), DDP_OK);
  ck_assert_int_eq(
      g->bn_bwd(be, dt, b->dx, b->dg, b->db, b->dy, b->x, b->gamma, b->sa, b->sb, &b->bs, 1, NULL),
      DDP_OK);
  ck_assert_int_eq(g->bn_reduce_fwd(be, dt, b->sums, b->x, NULL, &b->bs, NULL), DDP_OK);
  ck_assert_int_eq(g->bn_reduce_fwd(be, dt, b->sums, b->x, b->rm, &b->bs, NULL), DDP_OK);
  ck_assert_int_eq(g->bn_apply_fwd(be, dt, b->y, b->rm, b->rv, b->x, b->rm, b->rv, b->gamma,
                                   b->beta, M, &b->bs, NULL),
                   DDP_OK);
  ck_assert_int_eq(g->bn_reduce_bwd(be, dt, b->sums, b->dy, b->x, b->rm, &b->bs, NULL), DDP_OK);
  ck_assert_int_eq(g->bn_apply_bwd(be, dt, b->dx, b->dg, b->db, b->dy, b->x, b->rm, b->rv, b->gamma,
                                   b->sums, b->sums, M, &b->bs, 1, NULL),
                   DDP_OK);
  ck_assert_int_eq(g->conv_bwd_data(be, dt, b->dx, b->dy, b->w, &b->cs, NULL), DDP_OK);
  ck_assert_int_eq(g->conv_bwd_weights(be, dt, b->dw, b->dy, b->x, &b->cs, 0, NULL), DDP_OK);
  ck_assert_int_eq(g->conv_bwd_weights(be, dt, b->dw, b->dy, b->x, &b->cs, 1, NULL), DDP_OK);
  ck_assert_int_eq(ddp_backend_sync(be, NULL), DDP_OK);
}

/* After conv_prepare and bn_prepare, steps run no cudnnFind and allocate
 * nothing: neither the backend's counters nor the caching allocator's raw
 * calls move. */
START_TEST(test_gpu_conv_prepared_steps_search_and_allocate_nothing) {
  const ddp_conv_ops_t *g = gpu_conv();
  for (int d = 0; d < 3; ++d) {
    const ddp_dtype_t dt = twin_dtypes[d];
    step_bufs_t b;
    step_alloc(&b, dt);
    const uint64_t finds0 = ddp_cuda_conv_find_calls(twin_gpu);
    ck_assert_int_eq(g->conv_prepare(twin_gpu, dt, &b.cs), DDP_OK);
    ck_assert_int_eq(g->bn_prepare(twin_gpu, dt, &b.bs), DDP_OK);
    /* Three searches the first time this shape and dtype are seen. */
    ck_assert_uint_eq(ddp_cuda_conv_find_calls(twin_gpu), finds0 + 3);
    const uint64_t finds = ddp_cuda_conv_find_calls(twin_gpu);
    ck_assert_int_eq(g->conv_prepare(twin_gpu, dt, &b.cs), DDP_OK);
    ck_assert_uint_eq(ddp_cuda_conv_find_calls(twin_gpu), finds);
    ddp_caching_alloc_stats_t s0, s1;
    ddp_backend_mem_stats(twin_gpu, &s0);
    const uint64_t allocs = twin_gpu->alloc_calls, frees = twin_gpu->free_calls;
    for (int rep = 0; rep < 3; ++rep) step_run(&b, dt);
    ddp_backend_mem_stats(twin_gpu, &s1);
    ck_assert_uint_eq(ddp_cuda_conv_find_calls(twin_gpu), finds);
    ck_assert_uint_eq(twin_gpu->alloc_calls, allocs);
    ck_assert_uint_eq(twin_gpu->free_calls, frees);
    ck_assert_uint_eq(s1.raw_alloc_calls, s0.raw_alloc_calls);
    fprintf(stderr, "%s: prepared steps: %llu searches in all, workspace %zu bytes\n",
            ddp_dtype_name(dt), (unsigned long long)finds, ddp_cuda_conv_workspace_size(twin_gpu));
    step_free(&b);
  }
}
END_TEST

/* A shape nobody prepared searches on first use, once per op. */
START_TEST(test_gpu_conv_unprepared_shape_searches_once) {
  const ddp_conv_ops_t *g = gpu_conv();
  const ddp_conv_shape_t sh = {
      .N = 2, .H = 11, .W = 11, .C = 24, .K = 40, .R = 3, .S = 3, .stride = 2, .pad = 1};
  const ddp_dtype_t dt = DDP_DTYPE_BF16;
  void *x = twin_dev_alloc(twin_gpu, conv_in_n(&sh) * 2),
       *w = twin_dev_alloc(twin_gpu, conv_w_n(&sh) * 2);
  void *y = twin_dev_alloc(twin_gpu, conv_out_n(&sh) * 2);
  float *dw = twin_dev_alloc(twin_gpu, conv_w_n(&sh) * sizeof(float));
  ck_assert_int_eq(twin_gpu->ops->fill(twin_gpu, x, dt, 0.5f, conv_in_n(&sh), NULL), DDP_OK);
  ck_assert_int_eq(twin_gpu->ops->fill(twin_gpu, w, dt, 0.5f, conv_w_n(&sh), NULL), DDP_OK);
  ck_assert_int_eq(twin_gpu->ops->fill(twin_gpu, y, dt, 0.5f, conv_out_n(&sh), NULL), DDP_OK);
  const uint64_t f0 = ddp_cuda_conv_find_calls(twin_gpu);
  ck_assert_int_eq(g->conv_fwd(twin_gpu, dt, y, x, w, &sh, NULL), DDP_OK);
  ck_assert_uint_eq(ddp_cuda_conv_find_calls(twin_gpu), f0 + 1);
  ck_assert_int_eq(g->conv_fwd(twin_gpu, dt, y, x, w, &sh, NULL), DDP_OK);
  ck_assert_uint_eq(ddp_cuda_conv_find_calls(twin_gpu), f0 + 1);
  ck_assert_int_eq(g->conv_bwd_weights(twin_gpu, dt, dw, y, x, &sh, 0, NULL), DDP_OK);
  ck_assert_int_eq(g->conv_bwd_weights(twin_gpu, dt, dw, y, x, &sh, 1, NULL), DDP_OK);
  ck_assert_uint_eq(ddp_cuda_conv_find_calls(twin_gpu), f0 + 2);
  /* Preparing it now searches only the op not yet seen (bwd-data). */
  ck_assert_int_eq(g->conv_prepare(twin_gpu, dt, &sh), DDP_OK);
  ck_assert_uint_eq(ddp_cuda_conv_find_calls(twin_gpu), f0 + 3);
  ck_assert_int_eq(ddp_backend_sync(twin_gpu, NULL), DDP_OK);
  void *all[] = {x, w, y, dw};
  for (int i = 0; i < 4; ++i) ddp_backend_free(twin_gpu, all[i]);
}
END_TEST

/* The algorithm record (backend/conv_algos.h, --conv-algos): searching a
 * shape records its three choices; with the plans dropped (release), the
 * same shape takes them from the record without a search; and after the
 * record changes, conv_algos_reload re-takes the new choice, which then
 * computes what the CPU twin does. fp32 without TF32, where cuDNN has
 * several forward algorithms for the shape. */
START_TEST(test_gpu_conv_record_is_used_and_reloaded) {
  const ddp_conv_ops_t *g = gpu_conv(), *cc = cpu_conv();
  const ddp_conv_shape_t sh = {
      .N = 2, .H = 9, .W = 9, .C = 8, .K = 16, .R = 3, .S = 3, .stride = 1, .pad = 1};
  const ddp_dtype_t dt = DDP_DTYPE_F32;
  ddp_conv_algos_t rec = {0};
  twin_gpu->conv_algos = &rec;
  g->release(twin_gpu);
  ck_assert_int_eq(g->conv_prepare(twin_gpu, dt, &sh), DDP_OK);
  ck_assert_uint_eq(ddp_cuda_conv_find_calls(twin_gpu), 3);
  ck_assert_uint_eq(rec.n, 3);
  ck_assert_int_eq(rec.dirty, 1);
  g->release(twin_gpu);
  ck_assert_int_eq(g->conv_prepare(twin_gpu, dt, &sh), DDP_OK);
  ck_assert_uint_eq(ddp_cuda_conv_find_calls(twin_gpu), 0); /* every op from the record */
  /* another forward algorithm into the record, then a reload */
  const ddp_conv_algo_key_t key = {
      .op = DDP_CONV_ALGO_FWD, .dt = dt, .sh = sh, .deterministic = 1, .tf32 = 0};
  const ddp_conv_algo_entry_t *e = ddp_conv_algos_find(&rec, &key);
  ck_assert_ptr_nonnull(e);
  const int first = e->algo, math = e->math;
  mixed_t x = mixed_input(dt, conv_in_n(&sh), 0.0f, 1.0f);
  mixed_t w = mixed_input(dt, conv_w_n(&sh), 0.0f, 0.3f);
  mixed_t y = mixed_output(dt, conv_out_n(&sh));
  ck_assert_int_eq(cc->conv_fwd(twin_cpu, DDP_DTYPE_F32, y.cpu, x.cpu, w.cpu, &sh, NULL), DDP_OK);
  /* the first other algorithm that cuDNN takes for the shape and runs */
  int taken = -1;
  for (int a = 0; a < 8 && taken < 0; ++a) {
    if (a == first) continue;
    ck_assert_int_eq(ddp_conv_algos_put(&rec, &key, a, math), DDP_OK);
    const ddp_log_level_t level = ddp_log_level();
    ddp_log_set_level(DDP_LOG_LEVEL_DEBUG);
    ddp_test_log_start();
    ddp_status_t st = g->conv_algos_reload(twin_gpu);
    char want[96];
    snprintf(want, sizeof want, "algorithm %d (recorded, not timed", a);
    if (st == DDP_OK) st = g->conv_fwd(twin_gpu, dt, y.gpu, x.gpu, w.gpu, &sh, NULL);
    char *log = ddp_test_log_stop();
    ddp_log_set_level(level);
    if (st == DDP_OK && strstr(log, want)) taken = a;
    free(log);
  }
  ck_assert_msg(taken >= 0, "no other forward algorithm applies to the shape (first: %d)", first);
  ck_assert_uint_eq(ddp_cuda_conv_find_calls(twin_gpu), 0);
  mixed_expect(&y, conv_tol(dt), "conv_fwd by the reloaded algorithm");
  fprintf(stderr, "record: forward algorithm %d searched, %d reloaded\n", first, taken);
  twin_gpu->conv_algos = NULL;
  ddp_conv_algos_clear(&rec);
  mixed_free(&x);
  mixed_free(&w);
  mixed_free(&y);
}
END_TEST

/* Under the deterministic default the backward ops repeat bit for bit, on
 * a shape large enough for cuDNN's split reductions. With
 * conv_nondeterministic a second backend may choose other algorithms; its
 * results agree with the first's within the dtype's tolerance. */
START_TEST(test_gpu_conv_deterministic_backward) {
  const ddp_conv_ops_t *g = gpu_conv();
  const ddp_conv_shape_t sh = {
      .N = 8, .H = 28, .W = 28, .C = 64, .K = 64, .R = 3, .S = 3, .stride = 1, .pad = 1};
  ddp_backend_config_t cfg = {.device = "cuda", .conv_nondeterministic = 1};
  ddp_backend_t *nd = NULL;
  ck_assert_int_eq(ddp_backend_create(&cfg, &nd), DDP_OK);
  for (int d = 0; d < 3; ++d) {
    const ddp_dtype_t dt = twin_dtypes[d];
    mixed_t x = mixed_input(dt, conv_in_n(&sh), 0.0f, 1.0f);
    mixed_t w = mixed_input(dt, conv_w_n(&sh), 0.0f, 0.05f);
    mixed_t dy = mixed_input(dt, conv_out_n(&sh), 0.0f, 1.0f);
    const size_t wb = conv_w_n(&sh) * sizeof(float), xb = conv_in_n(&sh) * ddp_dtype_size(dt);
    void *dw1 = twin_dev_alloc(twin_gpu, wb), *dw2 = twin_dev_alloc(twin_gpu, wb);
    void *dx1 = twin_dev_alloc(twin_gpu, xb), *dx2 = twin_dev_alloc(twin_gpu, xb);
    ck_assert_int_eq(g->conv_prepare(twin_gpu, dt, &sh), DDP_OK);
    ck_assert_int_eq(g->conv_bwd_weights(twin_gpu, dt, dw1, dy.gpu, x.gpu, &sh, 0, NULL), DDP_OK);
    ck_assert_int_eq(g->conv_bwd_weights(twin_gpu, dt, dw2, dy.gpu, x.gpu, &sh, 0, NULL), DDP_OK);
    ck_assert_int_eq(g->conv_bwd_data(twin_gpu, dt, dx1, dy.gpu, w.gpu, &sh, NULL), DDP_OK);
    ck_assert_int_eq(g->conv_bwd_data(twin_gpu, dt, dx2, dy.gpu, w.gpu, &sh, NULL), DDP_OK);
    expect_gpu_bits_equal(dw1, dw2, wb, "conv_bwd_weights, two runs");
    expect_gpu_bits_equal(dx1, dx2, xb, "conv_bwd_data, two runs");

    /* The nondeterministic backend, on copies of the same inputs. */
    void *nx = NULL, *ndy = NULL, *ndw = NULL;
    const size_t yb = conv_out_n(&sh) * ddp_dtype_size(dt);
    ck_assert_int_eq(ddp_backend_alloc(nd, xb, &nx), DDP_OK);
    ck_assert_int_eq(ddp_backend_alloc(nd, yb, &ndy), DDP_OK);
    ck_assert_int_eq(ddp_backend_alloc(nd, wb, &ndw), DDP_OK);
    void *h = malloc(xb > yb ? xb : yb);
    ck_assert_ptr_nonnull(h);
    twin_download(twin_gpu, h, x.gpu, xb);
    twin_upload(nd, nx, h, xb);
    twin_download(twin_gpu, h, dy.gpu, yb);
    twin_upload(nd, ndy, h, yb);
    free(h);
    ck_assert_int_eq(nd->ops->conv->conv_bwd_weights(nd, dt, ndw, ndy, nx, &sh, 0, NULL), DDP_OK);
    float *a = malloc(wb), *b = malloc(wb);
    ck_assert(a && b);
    twin_download(nd, a, ndw, wb);
    twin_download(twin_gpu, b, dw1, wb);
    compare(a, b, conv_w_n(&sh), conv_tol(dt),
            "conv_bwd_weights, nondeterministic vs deterministic", dt);
    free(a);
    free(b);
    ddp_backend_free(nd, nx);
    ddp_backend_free(nd, ndy);
    ddp_backend_free(nd, ndw);
    void *all[] = {dw1, dw2, dx1, dx2};
    for (int i = 0; i < 4; ++i) ddp_backend_free(twin_gpu, all[i]);
    mixed_free(&x);
    mixed_free(&w);
    mixed_free(&dy);
  }
  ddp_backend_destroy(nd);
}
END_TEST

/* ---- refusals ------------------------------------------------------------------ */

#define EXPECT_REJECT(call, status, needle) \
  do {                                      \
    ddp_test_log_start();                   \
    const ddp_status_t st_ = (call);        \
    char *log_ = ddp_test_log_stop();       \
    ck_assert_int_eq(st_, status);          \
    ddp_assert_contains(log_, needle);      \
    free(log_);                             \
  } while (0)

START_TEST(test_gpu_conv_rejects_bad_input) {
  const ddp_conv_ops_t *g = gpu_conv();
  ddp_backend_t *be = twin_gpu;
  const ddp_dtype_t dt = DDP_DTYPE_BF16;
  const ddp_conv_shape_t cs = {
      .N = 1, .H = 5, .W = 5, .C = 4, .K = 4, .R = 3, .S = 3, .stride = 1, .pad = 1};
  const ddp_bn_shape_t bs = {.N = 1, .H = 1, .W = 1, .C = 4, .eps = 1e-5f, .momentum = 0.1f};
  const ddp_pool_shape_t ps = {.N = 1, .H = 5, .W = 5, .C = 4, .kernel = 3, .stride = 2, .pad = 2};
  mixed_t x = mixed_input(dt, 100, 0.0f, 1.0f), out = mixed_output(dt, 100);
  mixed_t f = mixed_output(DDP_DTYPE_F32, 100), p = mixed_input(DDP_DTYPE_F32, 4, 1.0f, 0.1f);
  float *pf = p.gpu, *ff = f.gpu;
  ddp_conv_shape_t bad = cs;
  EXPECT_REJECT(g->conv_fwd(be, DDP_DTYPE_I32, out.gpu, x.gpu, x.gpu, &cs, NULL),
                DDP_ERR_UNSUPPORTED, "conv_fwd: activation dtype int32");
  bad.pad = 3;
  EXPECT_REJECT(g->conv_fwd(be, dt, out.gpu, x.gpu, x.gpu, &bad, NULL), DDP_ERR_INVALID_ARG,
                "padding 3");
  bad = cs, bad.H = 1, bad.pad = 0;
  EXPECT_REJECT(g->conv_bwd_data(be, dt, out.gpu, x.gpu, x.gpu, &bad, NULL), DDP_ERR_INVALID_ARG,
                "does not fit");
  bad = cs, bad.stride = 0;
  EXPECT_REJECT(g->conv_prepare(be, dt, &bad), DDP_ERR_INVALID_ARG, "stride 0");
  EXPECT_REJECT(g->conv_bwd_weights(be, dt, NULL, x.gpu, x.gpu, &cs, 0, NULL), DDP_ERR_INVALID_ARG,
                "NULL");
  /* One value per channel: no variance to train with. */
  EXPECT_REJECT(g->bn_fwd(be, dt, out.gpu, ff, ff, pf, pf, x.gpu, pf, pf, &bs, 1, NULL),
                DDP_ERR_INVALID_ARG, "at least 2 values per channel");
  ddp_bn_shape_t bb = bs;
  bb.N = 4, bb.momentum = 1.5f;
  EXPECT_REJECT(g->bn_fwd(be, dt, out.gpu, ff, ff, pf, pf, x.gpu, pf, pf, &bb, 1, NULL),
                DDP_ERR_INVALID_ARG, "momentum 1.5");
  bb.momentum = 0.1f;
  EXPECT_REJECT(g->bn_fwd(be, dt, out.gpu, NULL, ff, pf, pf, x.gpu, pf, pf, &bb, 1, NULL),
                DDP_ERR_INVALID_ARG, "training needs save_a and save_b");
  EXPECT_REJECT(g->bn_bwd(be, dt, out.gpu, ff, ff, x.gpu, x.gpu, pf, NULL, pf, &bb, 0, NULL),
                DDP_ERR_INVALID_ARG, "are required");
  /* bn_relu_fwd writing over its input or its residual (as the CPU twin) */
  EXPECT_REJECT(g->bn_relu_fwd(be, dt, x.gpu, ff, ff, pf, pf, x.gpu, pf, pf, NULL, &bb, 1, NULL),
                DDP_ERR_INVALID_ARG, "batch_norm_relu_fwd: out may not alias inp or residual");
  EXPECT_REJECT(
      g->bn_relu_fwd(be, dt, out.gpu, ff, ff, pf, pf, x.gpu, pf, pf, out.gpu, &bb, 1, NULL),
      DDP_ERR_INVALID_ARG, "batch_norm_relu_fwd: out may not alias inp or residual");
  /* conv_bwd_data_add: the plain op's checks, under its own name */
  EXPECT_REJECT(g->conv_bwd_data_add(be, dt, out.gpu, NULL, x.gpu, &cs, NULL), DDP_ERR_INVALID_ARG,
                "conv_bwd_data_add: NULL buffer");
  /* bn_relu_bwd: dinp over dout, or no output to mask by (the CPU's checks) */
  EXPECT_REJECT(g->bn_relu_bwd(be, dt, x.gpu, ff, ff, x.gpu, out.gpu, out.gpu, pf, pf, pf, pf, 0,
                               &bb, 0, NULL),
                DDP_ERR_INVALID_ARG, "batch_norm_relu_bwd: dinp may not alias dout, inp or out");
  EXPECT_REJECT(
      g->bn_relu_bwd(be, dt, out.gpu, ff, ff, x.gpu, x.gpu, NULL, pf, pf, pf, pf, 1, &bb, 0, NULL),
      DDP_ERR_INVALID_ARG, "batch_norm_relu_bwd: dinp, dgamma, dbeta, dout, inp, out");
  EXPECT_REJECT(g->bn_apply_fwd(be, dt, out.gpu, pf, NULL, x.gpu, pf, pf, pf, pf, 4, &bb, NULL),
                DDP_ERR_INVALID_ARG, "together");
  EXPECT_REJECT(g->bn_apply_fwd(be, dt, out.gpu, NULL, NULL, x.gpu, pf, pf, pf, pf, 3, &bb, NULL),
                DDP_ERR_INVALID_ARG, "M_total 3 is less than");
  EXPECT_REJECT(g->bn_reduce_bwd(be, dt, ff, x.gpu, x.gpu, NULL, &bb, NULL), DDP_ERR_INVALID_ARG,
                "are required");
  EXPECT_REJECT(g->maxpool_fwd(be, dt, out.gpu, NULL, x.gpu, &ps, NULL), DDP_ERR_INVALID_ARG,
                "padding 2 must be in [0, kernel / 2]");
  ddp_pool_shape_t pp = ps;
  pp.pad = 1;
  EXPECT_REJECT(g->maxpool_bwd(be, dt, out.gpu, x.gpu, NULL, &pp, NULL), DDP_ERR_INVALID_ARG,
                "ws (the training forward's)");
  EXPECT_REJECT(g->avgpool_fwd(be, dt, out.gpu, x.gpu, 1, 0, 4, NULL), DDP_ERR_INVALID_ARG, "HW=0");
  EXPECT_REJECT(g->relu_fwd(be, DDP_DTYPE_I32, out.gpu, x.gpu, 4, NULL), DDP_ERR_UNSUPPORTED,
                "relu_fwd: activation dtype");
  EXPECT_REJECT(g->add_relu_fwd(be, dt, out.gpu, x.gpu, NULL, 4, NULL), DDP_ERR_INVALID_ARG,
                "NULL buffer");
  EXPECT_REJECT(g->relu_bwd(be, dt, (char *)out.gpu + 1, x.gpu, x.gpu, 4, NULL),
                DDP_ERR_INVALID_ARG, "not aligned");
  /* Nothing was written. */
  ck_assert_int_eq(ddp_backend_sync(be, NULL), DDP_OK);
  float *o = fetch_gpu(&out), *fo = fetch_gpu(&f);
  for (int i = 0; i < 100; ++i) {
    ck_assert_msg(isnan(o[i]), "a rejected call wrote out[%d]", i);
    ck_assert_msg(isnan(fo[i]), "a rejected call wrote f[%d]", i);
  }
  free(o);
  free(fo);
  mixed_free(&x);
  mixed_free(&out);
  mixed_free(&f);
  mixed_free(&p);
}
END_TEST

static Suite *gpu_conv_suite(void) {
  Suite *s = suite_create("gpu_conv");
  TCase *tc = tcase_create("twin");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_gpu_conv_rejects_bad_input);
  tcase_add_test(tc, test_gpu_conv_prepared_steps_search_and_allocate_nothing);
  tcase_add_test(tc, test_gpu_conv_unprepared_shape_searches_once);
  tcase_add_test(tc, test_gpu_conv_record_is_used_and_reloaded);
  tcase_add_test(tc, test_gpu_conv_deterministic_backward);
  tcase_add_test(tc, test_gpu_maxpool_ties_go_to_first);
  tcase_add_test(tc, test_gpu_conv_matches_cpu);
  tcase_add_test(tc, test_gpu_bn_matches_cpu);
  tcase_add_test(tc, test_gpu_bn_relu_matches_composition_and_cpu);
  tcase_add_test(tc, test_gpu_bn_relu_bwd_matches_composition_and_cpu);
  tcase_add_test(tc, test_gpu_bn_alignment_gives_the_same_bits);
  tcase_add_test(tc, test_gpu_conv_bwd_data_add_matches_cpu);
  tcase_add_test(tc, test_gpu_bn_parts_match_cpu);
  tcase_add_test(tc, test_gpu_pool_matches_cpu);
  tcase_add_test(tc, test_gpu_activations_match_cpu);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  twin_start(); /* exits 77 without a usable CUDA device */
  return twin_run_suite(gpu_conv_suite());
}
#endif
