/* GPU suite for the CUDA linear ops (src/backend/cuda/cuda_nn_linear.c, the
 * bias kernels of kernels/linear.cu and the backend GEMM) against their CPU
 * twins, ddp_nn_cpu_ops.linear_fwd / linear_bwd, with the fixture of
 * tests/gpu_twin.h (fresh random inputs, the seed printed; NaN-poisoned
 * outputs; accumulating outputs start from the same random values).
 *
 * Shapes: N = 3*37, IC = 67, OC = 131 (odd everywhere) and a GPT-like
 * N = 257, IC = 768, OC = 2304; fp32, bf16, fp16 activations; bias and no
 * bias; backward with accumulate 0 and 1, accumulate_dinp 0 and 1, dinp
 * NULL, dbias NULL. A second backward run must be bit-identical (cuBLAS with
 * fixed shapes and the two-pass column sums are deterministic).
 *
 * Thresholds (normwise, gpu_twin.h): fp32 runs with TF32 off (the fixture's
 * zeroed backend config), so products differ only in summation order over
 * K <= 768 terms: TOL_F32 = 1e-5 for out, dinp, dw. Outputs stored in a half
 * type: twin_tol(dt) (one rounding flip). dw in fp32 from half operands:
 * the operands are identical on both backends and accumulation is fp32 on
 * both, so TOL_F32 as well. dbias: the column sums use the CPU twin's exact
 * order (fp32 blocks of 32 rows, blocks in double), TOL_DBIAS = 1e-6.
 *
 * Exit 77 (SKIP) without a usable CUDA device. In process (CK_NOFORK). */
#include <config.h>

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"
#include "ddptrain/nn.h"
#include "gpu_twin.h"

#define TOL_F32 1e-5
#define TOL_DBIAS 1e-6

static const ddp_nn_ops_t *const cpu_nn = &ddp_nn_cpu_ops;

typedef struct shape {
  int N, IC, OC;
} shape_t;
static const shape_t k_shapes[] = {{3 * 37, 67, 131}, {257, 768, 2304}};

static void reserve_both(ddp_dtype_t dt, int N, int IC, int OC) {
  const int C = IC > OC ? IC : OC;
  ck_assert_int_eq(cpu_nn->reserve(twin_cpu, dt, N, C, C), DDP_OK);
  ck_assert_int_eq(ddp_cuda_scratch_reserve(twin_gpu, ddp_cuda_linear_scratch_bytes(dt, N, C, C)),
                   DDP_OK);
}

static void release_both(void) {
  cpu_nn->release(twin_cpu);
  ddp_cuda_scratch_release(twin_gpu);
}

static double tol_out(ddp_dtype_t dt) {
  return dt == DDP_DTYPE_F32 ? TOL_F32 : twin_tol(dt);
}

static void fwd_case(ddp_dtype_t dt, shape_t s, int with_bias) {
  reserve_both(dt, s.N, s.IC, s.OC);
  twin_t x = twin_input(dt, (size_t)s.N * s.IC, 0.0f, 1.0f);
  twin_t w = twin_input(dt, (size_t)s.OC * s.IC, 0.0f, 0.05f);
  twin_t b = twin_input(dt, (size_t)s.OC, 0.1f, 0.5f);
  twin_t out = twin_output(dt, (size_t)s.N * s.OC);
  ck_assert_int_eq(cpu_nn->linear_fwd(twin_cpu, dt, out.cpu, x.cpu, w.cpu,
                                      with_bias ? b.cpu : NULL, s.N, s.IC, s.OC, NULL),
                   DDP_OK);
  ck_assert_int_eq(ddp_cuda_nn_linear_fwd(twin_gpu, dt, out.gpu, x.gpu, w.gpu,
                                          with_bias ? b.gpu : NULL, s.N, s.IC, s.OC, NULL),
                   DDP_OK);
  const double e = twin_expect(&out, tol_out(dt), "linear_fwd");
  fprintf(stderr, "linear_fwd %-4s %dx%d->%d bias %d: err %.2g\n", ddp_dtype_name(dt), s.N, s.IC,
          s.OC, with_bias, e);
  twin_t *all[] = {&x, &w, &b, &out};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) twin_free(all[i]);
  release_both();
}

START_TEST(test_gpu_linear_fwd_matches_cpu) {
  for (int d = 0; d < 3; ++d)
    for (size_t k = 0; k < sizeof k_shapes / sizeof k_shapes[0]; ++k)
      for (int bias = 0; bias < 2; ++bias) fwd_case(twin_dtypes[d], k_shapes[k], bias);
}
END_TEST

/* Reads the GPU copy of an fp32 buffer. */
static float *gpu_f32(const void *dev, size_t n) {
  float *h = malloc(n * sizeof *h + 1);
  ck_assert_ptr_nonnull(h);
  twin_download(twin_gpu, h, dev, n * sizeof *h);
  return h;
}

static void bwd_case(ddp_dtype_t dt, shape_t s, int accumulate, int acc_dinp, int with_dinp,
                     int with_dbias) {
  reserve_both(dt, s.N, s.IC, s.OC);
  const size_t nin = (size_t)s.N * s.IC, nout = (size_t)s.N * s.OC, nw = (size_t)s.OC * s.IC;
  twin_t dout = twin_input(dt, nout, 0.0f, 1.0f), x = twin_input(dt, nin, 0.0f, 1.0f);
  twin_t w = twin_input(dt, nw, 0.0f, 0.05f);
  twin_t dinp = acc_dinp ? twin_input(dt, nin, 0.0f, 1.0f) : twin_output(dt, nin);
  twin_t dw = accumulate ? twin_input(DDP_DTYPE_F32, nw, 0.0f, 1.0f)
                         : twin_output(DDP_DTYPE_F32, nw);
  twin_t db = accumulate ? twin_input(DDP_DTYPE_F32, (size_t)s.OC, 0.0f, 1.0f)
                         : twin_output(DDP_DTYPE_F32, (size_t)s.OC);
  /* keep the GPU's starting values for the determinism re-run */
  float *dw0 = gpu_f32(dw.gpu, nw), *db0 = gpu_f32(db.gpu, (size_t)s.OC);
  ck_assert_int_eq(cpu_nn->linear_bwd(twin_cpu, dt, with_dinp ? dinp.cpu : NULL, dw.cpu,
                                      with_dbias ? db.cpu : NULL, dout.cpu, x.cpu, w.cpu, s.N,
                                      s.IC, s.OC, accumulate, acc_dinp, NULL),
                   DDP_OK);
  ck_assert_int_eq(ddp_cuda_nn_linear_bwd(twin_gpu, dt, with_dinp ? dinp.gpu : NULL, dw.gpu,
                                          with_dbias ? db.gpu : NULL, dout.gpu, x.gpu, w.gpu, s.N,
                                          s.IC, s.OC, accumulate, acc_dinp, NULL),
                   DDP_OK);
  const double e_w = twin_expect(&dw, TOL_F32, "linear_bwd dw");
  double e_in = 0.0, e_b = 0.0;
  if (with_dinp) e_in = twin_expect(&dinp, tol_out(dt), "linear_bwd dinp");
  if (with_dbias) e_b = twin_expect(&db, TOL_DBIAS, "linear_bwd dbias");
  fprintf(stderr, "linear_bwd %-4s %dx%d->%d acc %d/%d: err dw %.2g dinp %.2g db %.2g\n",
          ddp_dtype_name(dt), s.N, s.IC, s.OC, accumulate, acc_dinp, e_w, e_in, e_b);
  /* the same call again from the same starting values: the same bits */
  float *dw1 = gpu_f32(dw.gpu, nw), *db1 = gpu_f32(db.gpu, (size_t)s.OC);
  twin_upload(twin_gpu, dw.gpu, dw0, nw * sizeof(float));
  twin_upload(twin_gpu, db.gpu, db0, (size_t)s.OC * sizeof(float));
  ck_assert_int_eq(ddp_cuda_nn_linear_bwd(twin_gpu, dt, NULL, dw.gpu, with_dbias ? db.gpu : NULL,
                                          dout.gpu, x.gpu, w.gpu, s.N, s.IC, s.OC, accumulate,
                                          acc_dinp, NULL),
                   DDP_OK);
  float *dw2 = gpu_f32(dw.gpu, nw), *db2 = gpu_f32(db.gpu, (size_t)s.OC);
  ck_assert_msg(memcmp(dw1, dw2, nw * sizeof(float)) == 0, "linear_bwd dw (%s): runs differ",
                ddp_dtype_name(dt));
  ck_assert_msg(memcmp(db1, db2, (size_t)s.OC * sizeof(float)) == 0,
                "linear_bwd dbias (%s): runs differ", ddp_dtype_name(dt));
  free(dw0), free(db0), free(dw1), free(db1), free(dw2), free(db2);
  twin_t *all[] = {&dout, &x, &w, &dinp, &dw, &db};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) twin_free(all[i]);
  release_both();
}

START_TEST(test_gpu_linear_bwd_matches_cpu) {
  for (int d = 0; d < 3; ++d)
    for (size_t k = 0; k < sizeof k_shapes / sizeof k_shapes[0]; ++k) {
      bwd_case(twin_dtypes[d], k_shapes[k], 0, 0, 1, 1);
      bwd_case(twin_dtypes[d], k_shapes[k], 1, 1, 1, 1);
    }
  /* dinp not wanted (the first layer), no bias (the LM head) */
  bwd_case(DDP_DTYPE_BF16, k_shapes[0], 1, 0, 0, 0);
  bwd_case(DDP_DTYPE_F32, k_shapes[0], 0, 1, 1, 0);
}
END_TEST

START_TEST(test_gpu_linear_rejects_bad_input) {
  ddp_test_log_start();
  char *dummy = twin_dev_alloc(twin_gpu, 64);
  ck_assert_int_eq(ddp_cuda_nn_linear_fwd(twin_gpu, DDP_DTYPE_F32, dummy, dummy, dummy, NULL, 0, 3,
                                          3, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_linear_fwd(twin_gpu, DDP_DTYPE_I32, dummy, dummy, dummy, NULL, 1, 3,
                                          3, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(
      ddp_cuda_nn_linear_bwd(twin_gpu, DDP_DTYPE_F32, NULL, NULL, NULL, dummy, dummy, dummy, 1, 3,
                             3, 0, 0, NULL),
      DDP_ERR_INVALID_ARG);
  /* a bias gradient without reserved scratch fails instead of allocating */
  ck_assert_int_eq(ddp_cuda_nn_linear_bwd(twin_gpu, DDP_DTYPE_F32, NULL, (float *)dummy,
                                          (float *)dummy, dummy, dummy, dummy, 100000, 3, 3, 0, 0,
                                          NULL),
                   DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ck_assert_ptr_nonnull(strstr(log, "scratch"));
  free(log);
  ddp_backend_free(twin_gpu, dummy);
}
END_TEST

int main(void) {
  twin_start(); /* exits 77 without a usable CUDA device */
  Suite *s = suite_create("gpu_linear");
  TCase *tc = tcase_create("twin");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_gpu_linear_fwd_matches_cpu);
  tcase_add_test(tc, test_gpu_linear_bwd_matches_cpu);
  tcase_add_test(tc, test_gpu_linear_rejects_bad_input);
  suite_add_tcase(s, tc);
  return twin_run_suite(s);
}
