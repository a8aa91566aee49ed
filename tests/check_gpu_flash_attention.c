/* GPU suite for CUDA flash attention (src/backend/cuda/cuda_nn_flash.c,
 * kernels/flash_attention.cu) against its CPU twin, ddp_nn_cpu_ops'
 * flash_attention_fwd / flash_attention_bwd on the one-thread CPU backend,
 * under fp32, bf16 and fp16.
 *
 * Shapes: hs 16, 32, 64, 128 (the tensor-core path under bf16/fp16; the
 * suite asserts that path is taken) and hs 12, 48 (the CUDA-core path
 * under every dt), odd T (37, 77, 130, 200) and T = 1024 (GPT-2's shape,
 * C 768, NH 12). Every shape runs with lens: one full row, one cut
 * mid-tile, and for B >= 3 an empty one. Inputs are fresh random values
 * (gpu_twin.h prints the seed); qkv and dout rows at padding positions are
 * NaN on both backends (the op must not read them), outputs and the
 * backward scratch are NaN-poisoned first.
 *
 * Checked, per precision:
 *   - out and lse against the CPU; out and lse exactly +0 at padding rows;
 *   - backward with both backends given the CPU's out and lse: dqkv and the
 *     scratch's D = rowsum(dout * out) against the CPU, dqkv exactly +0 at
 *     padding rows;
 *   - determinism: a second forward and backward on the GPU give the same
 *     bits;
 *   - hs 192 is DDP_ERR_UNSUPPORTED naming the head size; bad arguments are
 *     DDP_ERR_INVALID_ARG.
 *
 * Thresholds (normwise relative error, max|gpu - cpu| / max|cpu|):
 *   - fp32: out 2e-5, lse 2e-5, D 2e-5 (the same fp32 math in another
 *     summation order); dqkv 5e-5 (the softmax backward's cancellation
 *     dP - D scales absolute errors up against small gradients);
 *   - bf16/fp16 out: the CPU computes in fp32 and rounds once, the GPU
 *     rounds P to the half type for the P V product (relative 2^-9 / 2^-12
 *     per term) and then rounds the output: bf16 2e-2, fp16 3e-3 (one
 *     output ulp, 2^-8 / 2^-11 of the largest element, plus the P rounding);
 *   - bf16/fp16 dqkv: P and dS are rounded for the four backward products
 *     and the result once more: bf16 3e-2, fp16 5e-3;
 *   - half lse and D: fp32 statistics of exactly widened operands (the
 *     tensor cores multiply half values exactly and accumulate in fp32);
 *     the GPU's fast exp (ex2.approx, ~2 ulp) adds a little: 1e-4.
 * The measured errors are printed (stderr) so these can be tightened after
 * the first runs.
 *
 * Exit 77 (SKIP) without a usable CUDA device; tests run in process
 * (CK_NOFORK): a CUDA context does not survive fork. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_nn.h"
#include "ddptrain/nn.h"
#include "flash_attention.h"
#include "gpu_twin.h"

typedef struct shape {
  int B, T, C, NH;
} shape_t;

static const shape_t k_shapes[] = {
    {3, 37, 96, 3},    /* hs 32 (the built-in model's head size), one tile */
    {2, 130, 128, 2},  /* hs 64, three tiles, T past two */
    {2, 200, 256, 2},  /* hs 128 */
    {3, 77, 64, 4},    /* hs 16 */
    {3, 45, 60, 5},    /* hs 12: CUDA-core path */
    {2, 33, 144, 3},   /* hs 48: CUDA-core path */
    {1, 1024, 768, 12} /* GPT-2 124M's attention, one sequence */
};
#define NSHAPES (sizeof k_shapes / sizeof k_shapes[0])

static const ddp_nn_ops_t *const cpu_nn = &ddp_nn_cpu_ops;
static const ddp_nn_ops_t *const gpu_nn = &ddp_nn_cuda_ops;

static double tol_out(ddp_dtype_t dt) {
  return dt == DDP_DTYPE_BF16 ? 2e-2 : dt == DDP_DTYPE_F16 ? 3e-3 : 2e-5;
}
static double tol_grad(ddp_dtype_t dt) {
  return dt == DDP_DTYPE_BF16 ? 3e-2 : dt == DDP_DTYPE_F16 ? 5e-3 : 5e-5;
}
static double tol_stat(ddp_dtype_t dt) {
  return dt == DDP_DTYPE_F32 ? 2e-5 : 1e-4;
}

static size_t n_qkv(const shape_t *s) {
  return (size_t)s->B * s->T * 3 * s->C;
}
static size_t n_out(const shape_t *s) {
  return (size_t)s->B * s->T * s->C;
}
static size_t n_row(const shape_t *s) {
  return (size_t)s->B * s->NH * s->T;
}

/* lens of a shape: row 0 full, row 1 cut mid-tile, row 2 empty, later rows
 * other cuts. */
static void make_lens(const shape_t *s, int32_t *lens) {
  for (int b = 0; b < s->B; ++b)
    lens[b] = b == 0 ? s->T : b == 1 ? (s->T * 2) / 3 + 1 : b == 2 ? 0 : s->T / (b + 1);
  if (s->B == 1) lens[0] = s->T - 5; /* a cut even with one row */
}

/* The same int32 lens on both backends. */
typedef struct lens_pair {
  int32_t host[8];
  int32_t *cpu, *gpu;
} lens_pair_t;

static lens_pair_t lens_upload(const shape_t *s) {
  lens_pair_t l;
  ck_assert_int_le(s->B, 8);
  make_lens(s, l.host);
  l.cpu = twin_dev_alloc(twin_cpu, (size_t)s->B * sizeof(int32_t));
  l.gpu = twin_dev_alloc(twin_gpu, (size_t)s->B * sizeof(int32_t));
  twin_upload(twin_cpu, l.cpu, l.host, (size_t)s->B * sizeof(int32_t));
  twin_upload(twin_gpu, l.gpu, l.host, (size_t)s->B * sizeof(int32_t));
  return l;
}

static void lens_free(lens_pair_t *l) {
  ddp_backend_free(twin_cpu, l->cpu);
  ddp_backend_free(twin_gpu, l->gpu);
}

/* Sets rows t >= lens[b] of a (B,T,width) twin to NaN on both backends. */
static void poison_padding(twin_t *x, const shape_t *s, const int32_t *lens, size_t width) {
  for (int b = 0; b < s->B; ++b)
    for (int t = lens[b]; t < s->T; ++t)
      for (size_t c = 0; c < width; ++c) x->host[((size_t)b * s->T + t) * width + c] = NAN;
  twin_set(x);
}

/* Every element of the GPU's copy at padding rows is +0. */
static void expect_zero_padding(const twin_t *x, const shape_t *s, const int32_t *lens,
                                size_t width, const char *what) {
  float *g = twin_fetch(x, twin_gpu);
  for (int b = 0; b < s->B; ++b)
    for (int t = lens[b]; t < s->T; ++t)
      for (size_t c = 0; c < width; ++c) {
        const float v = g[((size_t)b * s->T + t) * width + c];
        if (!(v == 0.0f && !signbit(v)))
          ck_abort_msg("%s (%s): padding element (b=%d, t=%d, %zu) is %g", what,
                       ddp_dtype_name(x->dt), b, t, c, (double)v);
      }
  free(g);
}

/* Raw bytes of the GPU's copy. */
static void *gpu_bits(const twin_t *x) {
  const size_t bytes = x->n * ddp_dtype_size(x->dt);
  void *p = malloc(bytes + 1);
  ck_assert_ptr_nonnull(p);
  twin_download(twin_gpu, p, x->gpu, bytes);
  return p;
}

static void expect_same_bits(const twin_t *x, const void *before, const char *what) {
  void *now = gpu_bits(x);
  ck_assert_msg(memcmp(now, before, x->n * ddp_dtype_size(x->dt)) == 0,
                "%s (%s): a second run gave other bits", what, ddp_dtype_name(x->dt));
  free(now);
}

static void run_shape(const shape_t *s, ddp_dtype_t dt) {
  const int64_t N = (int64_t)s->B * s->T;
  const int hs = s->C / s->NH;
  ck_assert_int_eq(cpu_nn->reserve(twin_cpu, dt, N, s->C, 1), DDP_OK);
  lens_pair_t lens = lens_upload(s);
  twin_t qkv = twin_input(dt, n_qkv(s), 0.0f, 1.0f);
  twin_t dout = twin_input(dt, n_out(s), 0.0f, 1.0f);
  poison_padding(&qkv, s, lens.host, 3 * (size_t)s->C);
  poison_padding(&dout, s, lens.host, (size_t)s->C);
  twin_t out = twin_output(dt, n_out(s)), lse = twin_output(DDP_DTYPE_F32, n_row(s));
  twin_t dqkv = twin_output(dt, n_qkv(s)), dsum = twin_output(DDP_DTYPE_F32, n_row(s));

  const int tc =
      ddp_cuda_flash_attention_tensor_cores(dt, s->C, s->NH, qkv.gpu, out.gpu, dout.gpu, dqkv.gpu);
  /* sm_86 / sm_89 lack the shared memory of the hs = 128 kernels */
  int dev = 0, major = 0, optin = 0;
  ck_assert_int_eq(cudaGetDevice(&dev), cudaSuccess);
  ck_assert_int_eq(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
                   cudaSuccess);
  ck_assert_int_eq(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
                   cudaSuccess);
  const int want_tc = dt != DDP_DTYPE_F32 && (hs == 16 || hs == 32 || hs == 64 || hs == 128) &&
                      major >= 8 && ddp_cuda_flash_attention_tc_smem_bytes(hs) <= (size_t)optin;
  ck_assert_msg(tc == want_tc, "hs %d %s: tensor-core path %d, expected %d", hs, ddp_dtype_name(dt),
                tc, want_tc);

  /* forward */
  ck_assert_int_eq(cpu_nn->flash_attention_fwd(twin_cpu, dt, out.cpu, lse.cpu, qkv.cpu, lens.cpu,
                                               s->B, s->T, s->C, s->NH, NULL),
                   DDP_OK);
  ck_assert_int_eq(gpu_nn->flash_attention_fwd(twin_gpu, dt, out.gpu, lse.gpu, qkv.gpu, lens.gpu,
                                               s->B, s->T, s->C, s->NH, NULL),
                   DDP_OK);
  ck_assert_int_eq(ddp_backend_sync(twin_gpu, NULL), DDP_OK);
  const double e_out = twin_expect(&out, tol_out(dt), "flash out");
  const double e_lse = twin_expect(&lse, tol_stat(dt), "flash lse");
  expect_zero_padding(&out, s, lens.host, (size_t)s->C, "flash out");
  {
    float *g = twin_fetch(&lse, twin_gpu);
    for (int b = 0; b < s->B; ++b)
      for (int h = 0; h < s->NH; ++h)
        for (int t = lens.host[b]; t < s->T; ++t) {
          const float v = g[((size_t)b * s->NH + h) * s->T + t];
          ck_assert_msg(v == 0.0f && !signbit(v), "lse (b=%d, h=%d, t=%d) is %g", b, h, t,
                        (double)v);
        }
    free(g);
  }
  void *out_bits = gpu_bits(&out), *lse_bits = gpu_bits(&lse);

  /* backward from the CPU's out and lse on both backends */
  {
    const size_t ob = out.n * ddp_dtype_size(dt), lb = lse.n * sizeof(float);
    void *tmp = malloc(ob > lb ? ob : lb);
    ck_assert_ptr_nonnull(tmp);
    twin_download(twin_cpu, tmp, out.cpu, ob);
    twin_upload(twin_gpu, out.gpu, tmp, ob);
    twin_download(twin_cpu, tmp, lse.cpu, lb);
    twin_upload(twin_gpu, lse.gpu, tmp, lb);
    free(tmp);
  }
  ck_assert_int_eq(
      cpu_nn->flash_attention_bwd(twin_cpu, dt, dqkv.cpu, dsum.cpu, dout.cpu, qkv.cpu, out.cpu,
                                  lse.cpu, lens.cpu, s->B, s->T, s->C, s->NH, NULL),
      DDP_OK);
  ck_assert_int_eq(
      gpu_nn->flash_attention_bwd(twin_gpu, dt, dqkv.gpu, dsum.gpu, dout.gpu, qkv.gpu, out.gpu,
                                  lse.gpu, lens.gpu, s->B, s->T, s->C, s->NH, NULL),
      DDP_OK);
  ck_assert_int_eq(ddp_backend_sync(twin_gpu, NULL), DDP_OK);
  const double e_dq = twin_expect(&dqkv, tol_grad(dt), "flash dqkv");
  const double e_d = twin_expect(&dsum, tol_stat(dt), "flash D");
  expect_zero_padding(&dqkv, s, lens.host, 3 * (size_t)s->C, "flash dqkv");
  void *dq_bits = gpu_bits(&dqkv);
  fprintf(stderr, "B=%d T=%d C=%d NH=%d (hs %d) %s%s: out %.3g lse %.3g dqkv %.3g D %.3g\n", s->B,
          s->T, s->C, s->NH, hs, ddp_dtype_name(dt), tc ? " tensor cores" : "", e_out, e_lse, e_dq,
          e_d);

  /* determinism: the backward again on the same inputs, then the forward
   * again (which overwrites out and lse with the GPU's own) */
  ck_assert_int_eq(
      gpu_nn->flash_attention_bwd(twin_gpu, dt, dqkv.gpu, dsum.gpu, dout.gpu, qkv.gpu, out.gpu,
                                  lse.gpu, lens.gpu, s->B, s->T, s->C, s->NH, NULL),
      DDP_OK);
  expect_same_bits(&dqkv, dq_bits, "flash dqkv");
  ck_assert_int_eq(gpu_nn->flash_attention_fwd(twin_gpu, dt, out.gpu, lse.gpu, qkv.gpu, lens.gpu,
                                               s->B, s->T, s->C, s->NH, NULL),
                   DDP_OK);
  expect_same_bits(&out, out_bits, "flash out");
  expect_same_bits(&lse, lse_bits, "flash lse");
  free(out_bits);
  free(lse_bits);
  free(dq_bits);

  twin_free(&qkv);
  twin_free(&dout);
  twin_free(&out);
  twin_free(&lse);
  twin_free(&dqkv);
  twin_free(&dsum);
  lens_free(&lens);
  cpu_nn->release(twin_cpu);
}

START_TEST(test_gpu_flash_matches_cpu_twin) {
  const shape_t *s = &k_shapes[_i / 3];
  run_shape(s, twin_dtypes[_i % 3]);
}
END_TEST

START_TEST(test_gpu_flash_without_lens_matches_cpu) {
  /* lens NULL: every row is T tokens (no padding anywhere) */
  const shape_t s = {2, 150, 128, 2};
  for (int k = 0; k < 3; ++k) {
    const ddp_dtype_t dt = twin_dtypes[k];
    ck_assert_int_eq(cpu_nn->reserve(twin_cpu, dt, (int64_t)s.B * s.T, s.C, 1), DDP_OK);
    twin_t qkv = twin_input(dt, n_qkv(&s), 0.0f, 1.0f),
           dout = twin_input(dt, n_out(&s), 0.0f, 1.0f);
    twin_t out = twin_output(dt, n_out(&s)), lse = twin_output(DDP_DTYPE_F32, n_row(&s));
    twin_t dqkv = twin_output(dt, n_qkv(&s)), dsum = twin_output(DDP_DTYPE_F32, n_row(&s));
    ck_assert_int_eq(cpu_nn->flash_attention_fwd(twin_cpu, dt, out.cpu, lse.cpu, qkv.cpu, NULL, s.B,
                                                 s.T, s.C, s.NH, NULL),
                     DDP_OK);
    ck_assert_int_eq(gpu_nn->flash_attention_fwd(twin_gpu, dt, out.gpu, lse.gpu, qkv.gpu, NULL, s.B,
                                                 s.T, s.C, s.NH, NULL),
                     DDP_OK);
    twin_expect(&out, tol_out(dt), "flash out (no lens)");
    twin_expect(&lse, tol_stat(dt), "flash lse (no lens)");
    /* each backend's backward from its own forward: the training path */
    ck_assert_int_eq(
        cpu_nn->flash_attention_bwd(twin_cpu, dt, dqkv.cpu, dsum.cpu, dout.cpu, qkv.cpu, out.cpu,
                                    lse.cpu, NULL, s.B, s.T, s.C, s.NH, NULL),
        DDP_OK);
    ck_assert_int_eq(
        gpu_nn->flash_attention_bwd(twin_gpu, dt, dqkv.gpu, dsum.gpu, dout.gpu, qkv.gpu, out.gpu,
                                    lse.gpu, NULL, s.B, s.T, s.C, s.NH, NULL),
        DDP_OK);
    /* D now also sees the GPU's own rounding of out: one more output ulp */
    twin_expect(&dqkv, 2 * tol_grad(dt), "flash dqkv (no lens, own forward)");
    twin_free(&qkv);
    twin_free(&dout);
    twin_free(&out);
    twin_free(&lse);
    twin_free(&dqkv);
    twin_free(&dsum);
    cpu_nn->release(twin_cpu);
  }
}
END_TEST

#define EXPECT_STATUS(call, status, needle) \
  do {                                      \
    ddp_test_log_start();                   \
    const ddp_status_t st_ = (call);        \
    char *log_ = ddp_test_log_stop();       \
    ck_assert_int_eq(st_, status);          \
    ddp_assert_contains(log_, needle);      \
    free(log_);                             \
  } while (0)

START_TEST(test_gpu_flash_rejects_bad_arguments) {
  const shape_t s = {2, 16, 384, 2}; /* hs 192 */
  twin_t qkv = twin_input(DDP_DTYPE_BF16, n_qkv(&s), 0.0f, 1.0f);
  twin_t out = twin_output(DDP_DTYPE_BF16, n_out(&s)), lse = twin_output(DDP_DTYPE_F32, n_row(&s));
  twin_t dqkv = twin_output(DDP_DTYPE_BF16, n_qkv(&s));
  const ddp_dtype_t bf = DDP_DTYPE_BF16;
  EXPECT_STATUS(gpu_nn->flash_attention_fwd(twin_gpu, bf, out.gpu, lse.gpu, qkv.gpu, NULL, 2, 16,
                                            384, 2, NULL),
                DDP_ERR_UNSUPPORTED, "head size hs=192");
  EXPECT_STATUS(gpu_nn->flash_attention_bwd(twin_gpu, bf, dqkv.gpu, lse.gpu, out.gpu, qkv.gpu,
                                            out.gpu, lse.gpu, NULL, 2, 16, 384, 2, NULL),
                DDP_ERR_UNSUPPORTED, "head size hs=192");
  EXPECT_STATUS(gpu_nn->flash_attention_fwd(twin_gpu, bf, out.gpu, lse.gpu, qkv.gpu, NULL, 2, 16,
                                            384, 5, NULL),
                DDP_ERR_INVALID_ARG, "C=384 is not a multiple of NH=5");
  EXPECT_STATUS(
      gpu_nn->flash_attention_fwd(twin_gpu, bf, NULL, lse.gpu, qkv.gpu, NULL, 2, 16, 384, 4, NULL),
      DDP_ERR_INVALID_ARG, "NULL");
  EXPECT_STATUS(gpu_nn->flash_attention_bwd(twin_gpu, bf, dqkv.gpu, NULL, out.gpu, qkv.gpu, out.gpu,
                                            lse.gpu, NULL, 2, 16, 384, 4, NULL),
                DDP_ERR_INVALID_ARG, "NULL");
  EXPECT_STATUS(gpu_nn->flash_attention_fwd(twin_gpu, DDP_DTYPE_I32, out.gpu, lse.gpu, qkv.gpu,
                                            NULL, 2, 16, 384, 4, NULL),
                DDP_ERR_INVALID_ARG, "activation dtype");
  EXPECT_STATUS(gpu_nn->flash_attention_fwd(twin_gpu, bf, out.gpu, lse.gpu, qkv.gpu, NULL, 0, 16,
                                            384, 4, NULL),
                DDP_ERR_INVALID_ARG, "B=0");
  /* nothing was launched: the outputs still hold their poison */
  ck_assert_int_eq(ddp_backend_sync(twin_gpu, NULL), DDP_OK);
  float *g = twin_fetch(&out, twin_gpu);
  for (size_t i = 0; i < out.n; ++i) ck_assert(isnan(g[i]));
  free(g);
  twin_free(&qkv);
  twin_free(&out);
  twin_free(&lse);
  twin_free(&dqkv);
}
END_TEST

static Suite *gpu_flash_suite(void) {
  Suite *s = suite_create("gpu_flash_attention");
  TCase *tc = tcase_create("twin");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_gpu_flash_matches_cpu_twin, 0, (int)(3 * NSHAPES));
  tcase_add_test(tc, test_gpu_flash_without_lens_matches_cpu);
  tcase_add_test(tc, test_gpu_flash_rejects_bad_arguments);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  twin_start();
  return twin_run_suite(gpu_flash_suite());
}
