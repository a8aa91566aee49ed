/* GPU suite for the CUDA LayerNorm ops (kernels/layernorm.cu through
 * src/backend/cuda/cuda_nn_layernorm.c) against their CPU twins, the CPU
 * backend's ops (ddp_nn_cpu_ops), with the fixture of tests/gpu_twin.h:
 * fresh random inputs (the seed is printed), NaN-poisoned outputs,
 * accumulating outputs starting from the same random values on both.
 *
 * Shapes: N = 3*37 rows and C in {67, 773, 1603} (odd: a warp's last pass
 * over a row is partial), fp32, bf16 and fp16 activations; layernorm_fwd in
 * training and eval, the fused residual add + LayerNorm (also in place,
 * resid == a), layernorm_bwd with accumulate 0 (dw, db poisoned) and 1, dinp
 * always adding to random initial values. A larger N = 2503 runs the
 * backward with several rows per group (the partial sums' "first row
 * writes, later rows add" path) and checks that two runs are bit-identical.
 *
 * Thresholds (normwise: max|gpu - cpu| / max|cpu|, see gpu_twin.h):
 *   - outputs stored in dt (out, dinp): twin_tol(dt): 2e-5 fp32; bf16 1.6e-2
 *     and fp16 2e-3, one rounding flip of a half value caused by an fp32
 *     difference of a few ulps. The GPU takes row statistics in fp32 over
 *     at most a few thousand terms (relative error ~1e-6), the CPU in double.
 *   - mean, rstd (fp32): TOL_STATS = 1e-5, the same fp32 summation error
 *     (~(C/32 + 5) ulps worst case for C = 1603, typically far less).
 *   - dw, db (fp32): TOL_PGRAD = 2e-5, sums over N rows in a different order
 *     (CPU: row after row; GPU: per group, then groups in 16 slices).
 *   - resid of the fused op: 0, exactly. a + b is one correctly rounded fp32
 *     addition and one rounding to dt on both backends.
 * And on the GPU alone, bit for bit: eval == training output, the fused
 * op's out == layernorm_fwd of its own resid (the same arithmetic), in place
 * == out of place, and two backward runs.
 *
 * Exit 77 (SKIP) without a usable CUDA device. Tests run in process
 * (CK_NOFORK): a CUDA context does not survive fork. */
#include <config.h>

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"
#include "ddptrain/nn.h"
#include "gpu_twin.h"

#define TOL_STATS 1e-5
#define TOL_PGRAD 2e-5

static const ddp_nn_ops_t *const cpu_nn = &ddp_nn_cpu_ops;

enum { LN_N = 3 * 37, LN_BIG_N = 2503 };
static const int k_channels[] = {67, 768 + 5, 1600 + 3};
#define N_CHANNELS ((int)(sizeof k_channels / sizeof k_channels[0]))

/* The CPU workspace (half types) and the GPU scratch for N x C. */
static void reserve_both(ddp_dtype_t dt, int N, int C) {
  ck_assert_int_eq(cpu_nn->reserve(twin_cpu, dt, N, C, 1), DDP_OK);
  ck_assert_int_eq(
      ddp_cuda_scratch_reserve(twin_gpu, ddp_cuda_layernorm_scratch_bytes(dt, N, C, 1)), DDP_OK);
}

static void release_both(void) {
  cpu_nn->release(twin_cpu);
  ddp_cuda_scratch_release(twin_gpu);
}

/* Copies the CPU backend's copy of t to the GPU's (fp32 statistics the CPU
 * forward produced, so the backward is compared on identical inputs). */
static void twin_cpu_to_gpu(const twin_t *t) {
  const size_t bytes = t->n * ddp_dtype_size(t->dt);
  void *h = malloc(bytes + 1);
  ck_assert_ptr_nonnull(h);
  twin_download(twin_cpu, h, t->cpu, bytes);
  twin_upload(twin_gpu, t->gpu, h, bytes);
  free(h);
}

/* A second input with the same values as src (host, CPU and GPU). */
static twin_t twin_clone(const twin_t *src) {
  twin_t t = twin_alloc(src->dt, src->n);
  memcpy(t.host, src->host, src->n * sizeof(float));
  twin_set(&t);
  return t;
}

/* The GPU's copies of a and b hold the same bits. */
static void expect_gpu_bits_equal(const twin_t *a, const twin_t *b, const char *what) {
  const size_t bytes = a->n * ddp_dtype_size(a->dt);
  ck_assert_uint_eq(a->n, b->n);
  unsigned char *ha = malloc(bytes + 1), *hb = malloc(bytes + 1);
  ck_assert(ha && hb);
  twin_download(twin_gpu, ha, a->gpu, bytes);
  twin_download(twin_gpu, hb, b->gpu, bytes);
  size_t first = bytes;
  for (size_t i = 0; i < bytes && first == bytes; ++i)
    if (ha[i] != hb[i]) first = i;
  free(ha);
  free(hb);
  ck_assert_msg(first == bytes, "%s (%s): GPU results differ at byte %zu", what,
                ddp_dtype_name(a->dt), first);
}

/* ---- forward ---------------------------------------------------------------- */

static void fwd_case(ddp_dtype_t dt, int N, int C, float offset) {
  const size_t n = (size_t)N * C;
  reserve_both(dt, N, C);
  twin_t x = twin_input(dt, n, offset, 2.0f), w = twin_input(dt, C, 1.0f, 0.3f);
  twin_t b = twin_input(dt, C, 0.0f, 1.0f);
  twin_t out = twin_output(dt, n), mean = twin_output(DDP_DTYPE_F32, N);
  twin_t rstd = twin_output(DDP_DTYPE_F32, N), eval = twin_output(dt, n);
  ck_assert_int_eq(cpu_nn->layernorm_fwd(twin_cpu, dt, out.cpu, mean.cpu, rstd.cpu, x.cpu, w.cpu,
                                         b.cpu, N, C, NULL),
                   DDP_OK);
  ck_assert_int_eq(ddp_cuda_nn_layernorm_fwd(twin_gpu, dt, out.gpu, mean.gpu, rstd.gpu, x.gpu,
                                             w.gpu, b.gpu, N, C, NULL),
                   DDP_OK);
  ck_assert_int_eq(
      cpu_nn->layernorm_fwd(twin_cpu, dt, eval.cpu, NULL, NULL, x.cpu, w.cpu, b.cpu, N, C, NULL),
      DDP_OK);
  ck_assert_int_eq(ddp_cuda_nn_layernorm_fwd(twin_gpu, dt, eval.gpu, NULL, NULL, x.gpu, w.gpu,
                                             b.gpu, N, C, NULL),
                   DDP_OK);
  const double e_out = twin_expect(&out, twin_tol(dt), "layernorm_fwd out");
  const double e_mean = twin_expect(&mean, TOL_STATS, "layernorm_fwd mean");
  const double e_rstd = twin_expect(&rstd, TOL_STATS, "layernorm_fwd rstd");
  twin_expect(&eval, twin_tol(dt), "layernorm_fwd eval");
  expect_gpu_bits_equal(&eval, &out, "layernorm_fwd eval == training");
  fprintf(stderr, "layernorm_fwd %-4s N=%d C=%d offset %g: err out %.2g mean %.2g rstd %.2g\n",
          ddp_dtype_name(dt), N, C, (double)offset, e_out, e_mean, e_rstd);
  twin_t *all[] = {&x, &w, &b, &out, &mean, &rstd, &eval};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) twin_free(all[i]);
  release_both();
}

START_TEST(test_gpu_layernorm_fwd_matches_cpu) {
  for (int d = 0; d < 3; ++d)
    for (int k = 0; k < N_CHANNELS; ++k) fwd_case(twin_dtypes[d], LN_N, k_channels[k], 0.5f);
}
END_TEST

/* Rows 100 + N(0, 2^2): the mean is taken about the row's first value, so
 * fp32 sums carry the rounding of the spread, not of the offset. */
START_TEST(test_gpu_layernorm_fwd_offset_rows) {
  for (int k = 0; k < N_CHANNELS; ++k) fwd_case(DDP_DTYPE_F32, LN_N, k_channels[k], 100.0f);
}
END_TEST

/* ---- fused residual add + layernorm ----------------------------------------- */

static void residual_case(ddp_dtype_t dt, int N, int C) {
  const size_t n = (size_t)N * C;
  reserve_both(dt, N, C);
  twin_t a = twin_input(dt, n, 0.3f, 2.0f), b = twin_input(dt, n, 0.2f, 1.0f);
  twin_t w = twin_input(dt, C, 1.0f, 0.3f), bias = twin_input(dt, C, 0.0f, 1.0f);
  twin_t resid = twin_output(dt, n), out = twin_output(dt, n);
  twin_t mean = twin_output(DDP_DTYPE_F32, N), rstd = twin_output(DDP_DTYPE_F32, N);
  ck_assert_int_eq(
      cpu_nn->residual_layernorm_fwd(twin_cpu, dt, resid.cpu, out.cpu, mean.cpu, rstd.cpu, a.cpu,
                                     b.cpu, w.cpu, bias.cpu, N, C, NULL),
      DDP_OK);
  ck_assert_int_eq(
      ddp_cuda_nn_residual_layernorm_fwd(twin_gpu, dt, resid.gpu, out.gpu, mean.gpu, rstd.gpu,
                                         a.gpu, b.gpu, w.gpu, bias.gpu, N, C, NULL),
      DDP_OK);
  twin_expect(&resid, 0.0, "residual_layernorm_fwd resid");
  const double e_out = twin_expect(&out, twin_tol(dt), "residual_layernorm_fwd out");
  twin_expect(&mean, TOL_STATS, "residual_layernorm_fwd mean");
  twin_expect(&rstd, TOL_STATS, "residual_layernorm_fwd rstd");
  fprintf(stderr, "residual_layernorm_fwd %-4s N=%d C=%d: err out %.2g\n", ddp_dtype_name(dt), N, C,
          e_out);

  /* On the GPU: the fused out is layernorm_fwd of its own stored resid. */
  twin_t ln = twin_output(dt, n), ln_mean = twin_output(DDP_DTYPE_F32, N);
  twin_t ln_rstd = twin_output(DDP_DTYPE_F32, N);
  ck_assert_int_eq(ddp_cuda_nn_layernorm_fwd(twin_gpu, dt, ln.gpu, ln_mean.gpu, ln_rstd.gpu,
                                             resid.gpu, w.gpu, bias.gpu, N, C, NULL),
                   DDP_OK);
  expect_gpu_bits_equal(&out, &ln, "fused out == layernorm_fwd(resid)");
  expect_gpu_bits_equal(&mean, &ln_mean, "fused mean == layernorm_fwd(resid) mean");
  expect_gpu_bits_equal(&rstd, &ln_rstd, "fused rstd == layernorm_fwd(resid) rstd");

  /* In place (resid == a), in eval, on both backends. */
  twin_t a2 = twin_clone(&a), out2 = twin_output(dt, n);
  ck_assert_int_eq(cpu_nn->residual_layernorm_fwd(twin_cpu, dt, a2.cpu, out2.cpu, NULL, NULL,
                                                  a2.cpu, b.cpu, w.cpu, bias.cpu, N, C, NULL),
                   DDP_OK);
  ck_assert_int_eq(ddp_cuda_nn_residual_layernorm_fwd(twin_gpu, dt, a2.gpu, out2.gpu, NULL, NULL,
                                                      a2.gpu, b.gpu, w.gpu, bias.gpu, N, C, NULL),
                   DDP_OK);
  twin_expect(&a2, 0.0, "residual_layernorm_fwd in place resid");
  twin_expect(&out2, twin_tol(dt), "residual_layernorm_fwd in place out");
  expect_gpu_bits_equal(&a2, &resid, "in place resid == out of place resid");
  expect_gpu_bits_equal(&out2, &out, "in place out == out of place out");
  twin_t *all[] = {&a,    &b,  &w,       &bias,    &resid, &out, &mean,
                   &rstd, &ln, &ln_mean, &ln_rstd, &a2,    &out2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) twin_free(all[i]);
  release_both();
}

START_TEST(test_gpu_residual_layernorm_matches_cpu) {
  for (int d = 0; d < 3; ++d)
    for (int k = 0; k < N_CHANNELS; ++k) residual_case(twin_dtypes[d], LN_N, k_channels[k]);
}
END_TEST

/* ---- backward ----------------------------------------------------------------- */

/* Inputs of a backward: x, w, the CPU forward's statistics on both, dout. */
typedef struct bwd_in {
  twin_t x, w, b, out, mean, rstd, dout;
} bwd_in_t;

static bwd_in_t bwd_inputs(ddp_dtype_t dt, int N, int C) {
  const size_t n = (size_t)N * C;
  bwd_in_t in;
  in.x = twin_input(dt, n, 0.5f, 2.0f);
  in.w = twin_input(dt, C, 1.0f, 0.3f);
  in.b = twin_input(dt, C, 0.0f, 1.0f);
  in.out = twin_output(dt, n);
  in.mean = twin_output(DDP_DTYPE_F32, N);
  in.rstd = twin_output(DDP_DTYPE_F32, N);
  ck_assert_int_eq(cpu_nn->layernorm_fwd(twin_cpu, dt, in.out.cpu, in.mean.cpu, in.rstd.cpu,
                                         in.x.cpu, in.w.cpu, in.b.cpu, N, C, NULL),
                   DDP_OK);
  twin_cpu_to_gpu(&in.mean);
  twin_cpu_to_gpu(&in.rstd);
  in.dout = twin_input(dt, n, 0.0f, 1.0f);
  return in;
}

static void bwd_inputs_free(bwd_in_t *in) {
  twin_t *all[] = {&in->x, &in->w, &in->b, &in->out, &in->mean, &in->rstd, &in->dout};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) twin_free(all[i]);
}

/* Runs both backwards into dinp (random initial values) and dw, db (random
 * with accumulate 1, NaN with 0) and compares. */
static void bwd_compare(ddp_dtype_t dt, const bwd_in_t *in, int N, int C, int acc) {
  const size_t n = (size_t)N * C;
  twin_t dinp = twin_input(dt, n, 0.0f, 1.0f);
  twin_t dw = acc ? twin_input(DDP_DTYPE_F32, C, 0.0f, 1.0f) : twin_output(DDP_DTYPE_F32, C);
  twin_t db = acc ? twin_input(DDP_DTYPE_F32, C, 0.0f, 1.0f) : twin_output(DDP_DTYPE_F32, C);
  ck_assert_int_eq(
      cpu_nn->layernorm_bwd(twin_cpu, dt, dinp.cpu, (float *)dw.cpu, (float *)db.cpu, in->dout.cpu,
                            in->x.cpu, in->w.cpu, in->mean.cpu, in->rstd.cpu, N, C, acc, NULL),
      DDP_OK);
  ck_assert_int_eq(ddp_cuda_nn_layernorm_bwd(twin_gpu, dt, dinp.gpu, (float *)dw.gpu,
                                             (float *)db.gpu, in->dout.gpu, in->x.gpu, in->w.gpu,
                                             in->mean.gpu, in->rstd.gpu, N, C, acc, NULL),
                   DDP_OK);
  const double e_dinp = twin_expect(&dinp, twin_tol(dt), "layernorm_bwd dinp");
  const double e_dw = twin_expect(&dw, TOL_PGRAD, "layernorm_bwd dw");
  const double e_db = twin_expect(&db, TOL_PGRAD, "layernorm_bwd db");
  fprintf(stderr, "layernorm_bwd %-4s N=%d C=%d accumulate %d: err dinp %.2g dw %.2g db %.2g\n",
          ddp_dtype_name(dt), N, C, acc, e_dinp, e_dw, e_db);
  twin_free(&dinp);
  twin_free(&dw);
  twin_free(&db);
}

START_TEST(test_gpu_layernorm_bwd_matches_cpu) {
  for (int d = 0; d < 3; ++d)
    for (int k = 0; k < N_CHANNELS; ++k) {
      const ddp_dtype_t dt = twin_dtypes[d];
      const int C = k_channels[k];
      reserve_both(dt, LN_N, C);
      bwd_in_t in = bwd_inputs(dt, LN_N, C);
      for (int acc = 0; acc < 2; ++acc) bwd_compare(dt, &in, LN_N, C, acc);
      bwd_inputs_free(&in);
      release_both();
    }
}
END_TEST

/* N = 2503 > DDP_CUDA_LN_BWD_GROUPS rows: groups of two and three rows.
 * Compared with the CPU (both accumulate settings), and two GPU runs from
 * the same initial values are bit-identical. */
START_TEST(test_gpu_layernorm_bwd_many_rows_deterministic) {
  const int N = LN_BIG_N, C = 768 + 5;
  const size_t n = (size_t)N * C;
  for (int d = 0; d < 3; ++d) {
    const ddp_dtype_t dt = twin_dtypes[d];
    reserve_both(dt, N, C);
    bwd_in_t in = bwd_inputs(dt, N, C);
    for (int acc = 0; acc < 2; ++acc) bwd_compare(dt, &in, N, C, acc);
    twin_t dinp1 = twin_input(dt, n, 0.0f, 1.0f), dinp2 = twin_clone(&dinp1);
    twin_t dw1 = twin_output(DDP_DTYPE_F32, C), db1 = twin_output(DDP_DTYPE_F32, C);
    twin_t dw2 = twin_output(DDP_DTYPE_F32, C), db2 = twin_output(DDP_DTYPE_F32, C);
    ck_assert_int_eq(ddp_cuda_nn_layernorm_bwd(twin_gpu, dt, dinp1.gpu, (float *)dw1.gpu,
                                               (float *)db1.gpu, in.dout.gpu, in.x.gpu, in.w.gpu,
                                               in.mean.gpu, in.rstd.gpu, N, C, 0, NULL),
                     DDP_OK);
    ck_assert_int_eq(ddp_cuda_nn_layernorm_bwd(twin_gpu, dt, dinp2.gpu, (float *)dw2.gpu,
                                               (float *)db2.gpu, in.dout.gpu, in.x.gpu, in.w.gpu,
                                               in.mean.gpu, in.rstd.gpu, N, C, 0, NULL),
                     DDP_OK);
    expect_gpu_bits_equal(&dinp1, &dinp2, "layernorm_bwd dinp, two runs");
    expect_gpu_bits_equal(&dw1, &dw2, "layernorm_bwd dw, two runs");
    expect_gpu_bits_equal(&db1, &db2, "layernorm_bwd db, two runs");
    twin_t *all[] = {&dinp1, &dinp2, &dw1, &db1, &dw2, &db2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) twin_free(all[i]);
    bwd_inputs_free(&in);
    release_both();
  }
}
END_TEST

/* ---- bad input -------------------------------------------------------------------- */

#define EXPECT_REJECT(call, needle)             \
  do {                                          \
    ddp_test_log_start();                       \
    const ddp_status_t st_ = (call);            \
    char *log_ = ddp_test_log_stop();           \
    ck_assert_int_eq(st_, DDP_ERR_INVALID_ARG); \
    ddp_assert_contains(log_, needle);          \
    free(log_);                                 \
  } while (0)

/* Rejected like the CPU ops (sizes, NULL, aliasing, dtype), the backward
 * without enough scratch too, and nothing is written. */
START_TEST(test_gpu_layernorm_rejects_bad_input) {
  const ddp_dtype_t dt = DDP_DTYPE_BF16;
  const int N = 5, C = 67;
  const size_t n = (size_t)N * C;
  twin_t x = twin_input(dt, n, 0.0f, 1.0f), w = twin_input(dt, C, 1.0f, 0.3f);
  twin_t out = twin_output(dt, n), resid = twin_output(dt, n);
  twin_t dw = twin_output(DDP_DTYPE_F32, C), stat = twin_input(DDP_DTYPE_F32, N, 1.0f, 0.1f);
  float *f = (float *)dw.gpu, *st = (float *)stat.gpu;
  EXPECT_REJECT(
      ddp_cuda_nn_layernorm_fwd(twin_gpu, dt, out.gpu, NULL, NULL, x.gpu, w.gpu, w.gpu, N, 0, NULL),
      "C=0");
  EXPECT_REJECT(
      ddp_cuda_nn_layernorm_fwd(twin_gpu, dt, out.gpu, NULL, NULL, x.gpu, NULL, w.gpu, N, C, NULL),
      "NULL");
  EXPECT_REJECT(ddp_cuda_nn_layernorm_fwd(twin_gpu, DDP_DTYPE_I32, out.gpu, NULL, NULL, x.gpu,
                                          w.gpu, w.gpu, N, C, NULL),
                "activation dtype int32");
  EXPECT_REJECT(ddp_cuda_nn_residual_layernorm_fwd(twin_gpu, dt, resid.gpu, out.gpu, NULL, NULL,
                                                   x.gpu, x.gpu, w.gpu, w.gpu, -1, C, NULL),
                "N=-1");
  EXPECT_REJECT(ddp_cuda_nn_residual_layernorm_fwd(twin_gpu, dt, resid.gpu, out.gpu, NULL, NULL,
                                                   x.gpu, NULL, w.gpu, w.gpu, N, C, NULL),
                "NULL");
  EXPECT_REJECT(ddp_cuda_nn_residual_layernorm_fwd(twin_gpu, dt, resid.gpu, resid.gpu, NULL, NULL,
                                                   x.gpu, x.gpu, w.gpu, w.gpu, N, C, NULL),
                "out must not alias");
  EXPECT_REJECT(ddp_cuda_nn_layernorm_bwd(twin_gpu, dt, out.gpu, f, f, x.gpu, x.gpu, w.gpu, NULL,
                                          st, N, C, 0, NULL),
                "NULL");
  /* No reserve(): the backward's scratch is missing (or too small). */
  EXPECT_REJECT(ddp_cuda_nn_layernorm_bwd(twin_gpu, dt, out.gpu, f, f, x.gpu, x.gpu, w.gpu, st, st,
                                          N, C, 0, NULL),
                "scratch");
  ck_assert_int_eq(
      ddp_cuda_scratch_reserve(twin_gpu, ddp_cuda_layernorm_scratch_bytes(dt, 1, C, 1)), DDP_OK);
  EXPECT_REJECT(ddp_cuda_nn_layernorm_bwd(twin_gpu, dt, out.gpu, f, f, x.gpu, x.gpu, w.gpu, st, st,
                                          N, C, 0, NULL),
                "scratch");
  ddp_cuda_scratch_release(twin_gpu);
  /* Every output still holds its poison. */
  twin_t *poisoned[] = {&out, &resid, &dw};
  for (size_t i = 0; i < sizeof poisoned / sizeof poisoned[0]; ++i) {
    float *g = twin_fetch(poisoned[i], twin_gpu);
    for (size_t j = 0; j < poisoned[i]->n; ++j)
      ck_assert_msg(isnan(g[j]), "rejected call wrote element %zu", j);
    free(g);
  }
  twin_t *all[] = {&x, &w, &out, &resid, &dw, &stat};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) twin_free(all[i]);
}
END_TEST

static Suite *gpu_layernorm_suite(void) {
  Suite *s = suite_create("gpu_layernorm");
  TCase *tc = tcase_create("twin");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_gpu_layernorm_fwd_matches_cpu);
  tcase_add_test(tc, test_gpu_layernorm_fwd_offset_rows);
  tcase_add_test(tc, test_gpu_residual_layernorm_matches_cpu);
  tcase_add_test(tc, test_gpu_layernorm_bwd_matches_cpu);
  tcase_add_test(tc, test_gpu_layernorm_bwd_many_rows_deterministic);
  tcase_add_test(tc, test_gpu_layernorm_rejects_bad_input);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  twin_start(); /* exits 77 without a usable CUDA device */
  return twin_run_suite(gpu_layernorm_suite());
}
