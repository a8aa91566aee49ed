/* GPU suite for the cuBLASLt epilogues of the linear layers
 * (src/backend/cuda/cuda_gemm.c's ddp_cuda_gemm_epilogue and
 * src/backend/cuda/cuda_nn_linear.c): linear_fwd with the bias epilogue,
 * linear_gelu_fwd (GELU_AUX_BIAS, GELU_BIAS in eval) and linear_dgelu_bwd
 * (DGELU_BGRAD), each against its CPU twin (ddp_nn_cpu_ops, the unfused
 * composition) with the fixture of tests/gpu_twin.h: fresh random inputs,
 * the seed printed; NaN-poisoned outputs; accumulating dbias starting from
 * the same random values on both backends.
 *
 * Both paths run: widths that are multiples of 8 take the fused path where
 * Lt has an algorithm (bf16 with aligned widths must: that is the
 * configuration cuBLASLt's GELU epilogues are made for), and odd widths
 * (OC or K = 131) break the aux pitch Lt needs, so the op composes the
 * unfused kernels (asserted through the epilogue counters). Each case
 * prints which path it took. A second run of every op must give the same
 * bits (a shape always takes one path; Lt's algorithms are fixed per plan).
 *
 * Thresholds (normwise, gpu_twin.h), TF32 off (the fixture's config):
 *   - products and pre-activations: fp32 1e-5 (summation order over at
 *     most 3072 terms), half outputs twin_tol(dt) (one rounding flip);
 *   - unfused GELU outputs: twin_tol(dt) as the gelu kernels' own suite;
 *   - fused GELU / GELU' outputs: cuBLASLt may evaluate tanh with the
 *     hardware approximation (relative error up to 2^-11), which moves
 *     GELU by up to 0.5 |x| 2^-11: TOL_LT_F32 = 1e-3 for fp32, 3e-3 for
 *     fp16 (its own rounding 2^-11 on top), twin_tol for bf16;
 *   - dbias: unfused, the column-sum kernel repeats the CPU's order on
 *     values that differ by the dpre tolerance: 2e-5 fp32, twin_tol(dt)
 *     half. Fused, Lt sums in its own order, from the unrounded fp32 GELU'
 *     products (the CPU sums the stored dpre), with the approximate tanh:
 *     TOL_LT_DBIAS = 4e-3 fp32 and fp16, twin_tol (1.6e-2) bf16.
 *
 * Exit 77 (SKIP) without a usable CUDA device. In process (CK_NOFORK). */
#include <config.h>

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"
#include "ddptrain/nn.h"
#include "gpu_twin.h"
#include "linear.h"

#define TOL_F32 1e-5
#define TOL_LT_F32 1e-3
#define TOL_LT_F16 3e-3
#define TOL_LT_DBIAS 4e-3

static const ddp_nn_ops_t *const cpu_nn = &ddp_nn_cpu_ops;

typedef struct shape {
  int N, IC, K, OC; /* x (N,IC) -> pre (N,K) -> y (N,OC) */
} shape_t;
/* GPT-2 124M's MLP with an odd row count; a small aligned one; odd widths */
static const shape_t k_shapes[] = {{257, 768, 3072, 768}, {37, 40, 64, 24}, {111, 67, 131, 67}};

static int aligned_k(shape_t s) {
  return s.K % 8 == 0;
}

static void reserve_both(ddp_dtype_t dt, shape_t s) {
  int c = s.K > s.IC ? s.K : s.IC;
  if (s.OC > c) c = s.OC;
  ck_assert_int_eq(cpu_nn->reserve(twin_cpu, dt, s.N, c, c), DDP_OK);
  ck_assert_int_eq(ddp_cuda_scratch_reserve(twin_gpu, ddp_cuda_linear_scratch_bytes(dt, s.N, c, c)),
                   DDP_OK);
}

static void release_both(void) {
  cpu_nn->release(twin_cpu);
  ddp_cuda_scratch_release(twin_gpu);
}

typedef struct counts {
  uint64_t fused, declined;
} counts_t;

static counts_t counts_now(void) {
  counts_t c;
  ddp_cuda_gemm_epilogue_counts(twin_gpu, &c.fused, &c.declined);
  return c;
}

static double tol_plain(ddp_dtype_t dt) {
  return dt == DDP_DTYPE_F32 ? TOL_F32 : twin_tol(dt);
}

static double tol_gelu(ddp_dtype_t dt, int fused) {
  if (!fused) return twin_tol(dt);
  return dt == DDP_DTYPE_F32 ? TOL_LT_F32 : dt == DDP_DTYPE_F16 ? TOL_LT_F16 : twin_tol(dt);
}

static double tol_dbias(ddp_dtype_t dt, int fused) {
  if (dt == DDP_DTYPE_BF16) return twin_tol(dt);
  if (fused) return TOL_LT_DBIAS;
  return dt == DDP_DTYPE_F32 ? 2e-5 : twin_tol(dt);
}

/* The GPU copy of a twin, raw bytes. */
static void *gpu_bytes(const twin_t *t) {
  const size_t bytes = t->n * ddp_dtype_size(t->dt);
  void *h = malloc(bytes + 1);
  ck_assert_ptr_nonnull(h);
  twin_download(twin_gpu, h, t->gpu, bytes);
  return h;
}

static void expect_same_gpu_bits(const void *a, const twin_t *t, const char *what) {
  void *b = gpu_bytes(t);
  ck_assert_msg(memcmp(a, b, t->n * ddp_dtype_size(t->dt)) == 0, "%s (%s): runs differ", what,
                ddp_dtype_name(t->dt));
  free(b);
}

/* ---- linear_fwd with the bias epilogue --------------------------------------- */

static void fwd_bias_case(ddp_dtype_t dt, shape_t s) {
  reserve_both(dt, s);
  twin_t x = twin_input(dt, (size_t)s.N * s.IC, 0.0f, 1.0f);
  twin_t w = twin_input(dt, (size_t)s.K * s.IC, 0.0f, 0.05f);
  twin_t b = twin_input(dt, (size_t)s.K, 0.1f, 0.5f);
  twin_t out = twin_output(dt, (size_t)s.N * s.K);
  ck_assert_int_eq(
      cpu_nn->linear_fwd(twin_cpu, dt, out.cpu, x.cpu, w.cpu, b.cpu, s.N, s.IC, s.K, NULL), DDP_OK);
  const counts_t c0 = counts_now();
  ck_assert_int_eq(
      ddp_cuda_nn_linear_fwd(twin_gpu, dt, out.gpu, x.gpu, w.gpu, b.gpu, s.N, s.IC, s.K, NULL),
      DDP_OK);
  const counts_t c1 = counts_now();
  const int fused = c1.fused > c0.fused;
  ck_assert_uint_eq((c1.fused - c0.fused) + (c1.declined - c0.declined), 1);
  /* bf16 with a bias whose width is a multiple of 8: Lt's bread and butter */
  if (dt == DDP_DTYPE_BF16 && aligned_k(s))
    ck_assert_msg(fused, "linear_fwd bf16 %dx%d->%d: the bias epilogue was declined", s.N, s.IC,
                  s.K);
  const double e = twin_expect(&out, tol_plain(dt), "linear_fwd (bias epilogue)");
  void *first = gpu_bytes(&out);
  ck_assert_int_eq(
      ddp_cuda_nn_linear_fwd(twin_gpu, dt, out.gpu, x.gpu, w.gpu, b.gpu, s.N, s.IC, s.K, NULL),
      DDP_OK);
  expect_same_gpu_bits(first, &out, "linear_fwd");
  free(first);
  fprintf(stderr, "linear_fwd %-4s %dx%d->%d bias: %s, err %.2g\n", ddp_dtype_name(dt), s.N, s.IC,
          s.K, fused ? "fused" : "seeded", e);
  twin_t *all[] = {&x, &w, &b, &out};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) twin_free(all[i]);
  release_both();
}

START_TEST(test_gpu_linear_fwd_bias_epilogue_matches_cpu) {
  for (int d = 0; d < 3; ++d)
    for (size_t k = 0; k < sizeof k_shapes / sizeof k_shapes[0]; ++k)
      fwd_bias_case(twin_dtypes[d], k_shapes[k]);
}
END_TEST

/* ---- linear_gelu_fwd -------------------------------------------------------- */

static void gelu_fwd_case(ddp_dtype_t dt, shape_t s) {
  reserve_both(dt, s);
  const size_t np = (size_t)s.N * s.K;
  twin_t x = twin_input(dt, (size_t)s.N * s.IC, 0.0f, 1.0f);
  twin_t w = twin_input(dt, (size_t)s.K * s.IC, 0.0f, 0.05f);
  twin_t b = twin_input(dt, (size_t)s.K, 0.1f, 0.5f);
  twin_t out = twin_output(dt, np), pre = twin_output(dt, np), ev = twin_output(dt, np);
  ck_assert_int_eq(cpu_nn->linear_gelu_fwd(twin_cpu, dt, out.cpu, pre.cpu, x.cpu, w.cpu, b.cpu, s.N,
                                           s.IC, s.K, NULL),
                   DDP_OK);
  ck_assert_int_eq(cpu_nn->linear_gelu_fwd(twin_cpu, dt, ev.cpu, NULL, x.cpu, w.cpu, b.cpu, s.N,
                                           s.IC, s.K, NULL),
                   DDP_OK);
  /* training: the GELU epilogue is the op's first; declined means the
   * unfused linear_fwd (which tries the bias epilogue itself) + gelu_fwd */
  const counts_t c0 = counts_now();
  ck_assert_int_eq(ddp_cuda_nn_linear_gelu_fwd(twin_gpu, dt, out.gpu, pre.gpu, x.gpu, w.gpu, b.gpu,
                                               s.N, s.IC, s.K, NULL),
                   DDP_OK);
  const counts_t c1 = counts_now();
  const int fused = c1.declined == c0.declined;
  if (!aligned_k(s)) ck_assert_msg(!fused, "linear_gelu_fwd: K=%d cannot be an aux pitch", s.K);
  if (dt == DDP_DTYPE_BF16 && aligned_k(s))
    ck_assert_msg(fused, "linear_gelu_fwd bf16 %dx%d->%d: GELU_AUX_BIAS was declined", s.N, s.IC,
                  s.K);
  ck_assert_int_eq(ddp_cuda_nn_linear_gelu_fwd(twin_gpu, dt, ev.gpu, NULL, x.gpu, w.gpu, b.gpu, s.N,
                                               s.IC, s.K, NULL),
                   DDP_OK);
  const counts_t c2 = counts_now();
  const int fused_eval = c2.declined == c1.declined;
  const double e_pre = twin_expect(&pre, tol_plain(dt), "linear_gelu_fwd pre");
  const double e_out = twin_expect(&out, tol_gelu(dt, fused), "linear_gelu_fwd out");
  const double e_ev = twin_expect(&ev, tol_gelu(dt, fused_eval), "linear_gelu_fwd out (eval)");
  /* the same calls again: the same bits */
  void *out1 = gpu_bytes(&out), *pre1 = gpu_bytes(&pre), *ev1 = gpu_bytes(&ev);
  ck_assert_int_eq(ddp_cuda_nn_linear_gelu_fwd(twin_gpu, dt, out.gpu, pre.gpu, x.gpu, w.gpu, b.gpu,
                                               s.N, s.IC, s.K, NULL),
                   DDP_OK);
  ck_assert_int_eq(ddp_cuda_nn_linear_gelu_fwd(twin_gpu, dt, ev.gpu, NULL, x.gpu, w.gpu, b.gpu, s.N,
                                               s.IC, s.K, NULL),
                   DDP_OK);
  expect_same_gpu_bits(out1, &out, "linear_gelu_fwd out");
  expect_same_gpu_bits(pre1, &pre, "linear_gelu_fwd pre");
  expect_same_gpu_bits(ev1, &ev, "linear_gelu_fwd out (eval)");
  free(out1), free(pre1), free(ev1);
  fprintf(stderr,
          "linear_gelu_fwd %-4s %dx%d->%d: train %s (err out %.2g pre %.2g), eval %s (err "
          "%.2g)\n",
          ddp_dtype_name(dt), s.N, s.IC, s.K, fused ? "fused" : "unfused", e_out, e_pre,
          fused_eval ? "fused" : "unfused", e_ev);
  twin_t *all[] = {&x, &w, &b, &out, &pre, &ev};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) twin_free(all[i]);
  release_both();
}

START_TEST(test_gpu_linear_gelu_fwd_matches_cpu) {
  for (int d = 0; d < 3; ++d)
    for (size_t k = 0; k < sizeof k_shapes / sizeof k_shapes[0]; ++k)
      gelu_fwd_case(twin_dtypes[d], k_shapes[k]);
}
END_TEST

/* ---- linear_dgelu_bwd --------------------------------------------------------- */

static void dgelu_bwd_case(ddp_dtype_t dt, shape_t s, int accumulate) {
  reserve_both(dt, s);
  const size_t np = (size_t)s.N * s.K;
  twin_t dout = twin_input(dt, (size_t)s.N * s.OC, 0.0f, 1.0f);
  twin_t w = twin_input(dt, (size_t)s.OC * s.K, 0.0f, 0.05f);
  twin_t pre = twin_input(dt, np, 0.0f, 1.5f);
  twin_t dpre = twin_output(dt, np);
  twin_t db = accumulate ? twin_input(DDP_DTYPE_F32, (size_t)s.K, 0.0f, 1.0f)
                         : twin_output(DDP_DTYPE_F32, (size_t)s.K);
  void *db0 = gpu_bytes(&db);
  ck_assert_int_eq(cpu_nn->linear_dgelu_bwd(twin_cpu, dt, dpre.cpu, db.cpu, dout.cpu, w.cpu,
                                            pre.cpu, s.N, s.K, s.OC, accumulate, NULL),
                   DDP_OK);
  const counts_t c0 = counts_now();
  ck_assert_int_eq(ddp_cuda_nn_linear_dgelu_bwd(twin_gpu, dt, dpre.gpu, db.gpu, dout.gpu, w.gpu,
                                                pre.gpu, s.N, s.K, s.OC, accumulate, NULL),
                   DDP_OK);
  const counts_t c1 = counts_now();
  const int fused = c1.fused > c0.fused;
  ck_assert_uint_eq((c1.fused - c0.fused) + (c1.declined - c0.declined), 1);
  if (!aligned_k(s)) ck_assert_msg(!fused, "linear_dgelu_bwd: K=%d cannot be an aux pitch", s.K);
  const double e_d = twin_expect(&dpre, tol_gelu(dt, fused), "linear_dgelu_bwd dpre");
  const double e_b = twin_expect(&db, tol_dbias(dt, fused), "linear_dgelu_bwd dbias");
  /* again from the same dbias: the same bits */
  void *dpre1 = gpu_bytes(&dpre), *db1 = gpu_bytes(&db);
  twin_upload(twin_gpu, db.gpu, db0, (size_t)s.K * sizeof(float));
  ck_assert_int_eq(ddp_cuda_nn_linear_dgelu_bwd(twin_gpu, dt, dpre.gpu, db.gpu, dout.gpu, w.gpu,
                                                pre.gpu, s.N, s.K, s.OC, accumulate, NULL),
                   DDP_OK);
  expect_same_gpu_bits(dpre1, &dpre, "linear_dgelu_bwd dpre");
  expect_same_gpu_bits(db1, &db, "linear_dgelu_bwd dbias");
  free(db0), free(dpre1), free(db1);
  fprintf(stderr, "linear_dgelu_bwd %-4s N=%d K=%d OC=%d acc %d: %s, err dpre %.2g dbias %.2g\n",
          ddp_dtype_name(dt), s.N, s.K, s.OC, accumulate, fused ? "fused" : "unfused", e_d, e_b);
  twin_t *all[] = {&dout, &w, &pre, &dpre, &db};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) twin_free(all[i]);
  release_both();
}

START_TEST(test_gpu_linear_dgelu_bwd_matches_cpu) {
  for (int d = 0; d < 3; ++d)
    for (size_t k = 0; k < sizeof k_shapes / sizeof k_shapes[0]; ++k)
      for (int acc = 0; acc < 2; ++acc) dgelu_bwd_case(twin_dtypes[d], k_shapes[k], acc);
}
END_TEST

/* ---- the bias-gradient store / add kernel -------------------------------------- */

/* ddp_cuda_bias_grad_update on its own (the fused path runs it only where
 * Lt takes DGELU_BGRAD): dst = src, then dst += src, against the host's
 * fp32 arithmetic bit for bit (one fp32 store or addition per element);
 * n = 1000 spans several blocks with a partial last one. */
START_TEST(test_gpu_linear_bias_grad_update) {
  enum { NB = 1000 };
  twin_t dst = twin_output(DDP_DTYPE_F32, NB), src = twin_input(DDP_DTYPE_F32, NB, 0.0f, 1.0f);
  const cudaStream_t s = ddp_cuda_stream(twin_gpu, NULL);
  ck_assert_int_eq(ddp_cuda_bias_grad_update(dst.gpu, src.gpu, NB, 0, s), DDP_OK);
  float *once = gpu_bytes(&dst);
  ck_assert_int_eq(ddp_cuda_bias_grad_update(dst.gpu, src.gpu, NB, 1, s), DDP_OK);
  float *twice = gpu_bytes(&dst);
  for (int i = 0; i < NB; ++i) {
    ck_assert_msg(memcmp(&once[i], &src.host[i], sizeof(float)) == 0, "store: element %d", i);
    const float want = src.host[i] + src.host[i];
    ck_assert_msg(memcmp(&twice[i], &want, sizeof(float)) == 0, "add: element %d", i);
  }
  free(once), free(twice);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_cuda_bias_grad_update((float *)dst.gpu + 1, dst.gpu, 8, 1, s),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_bias_grad_update(dst.gpu, src.gpu, 0, 1, s), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_bias_grad_update(NULL, src.gpu, 8, 1, s), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ck_assert_ptr_nonnull(strstr(log, "overlap"));
  free(log);
  twin_free(&dst), twin_free(&src);
}
END_TEST

/* ---- plans -------------------------------------------------------------------- */

/* An epilogue is part of a plan's key: the same shape with and without it
 * are two plans, each built once; a pitch Lt cannot take is declined
 * without a plan. */
START_TEST(test_gpu_linear_epilogue_plans_are_keyed) {
  enum { M = 48, NC = 64, K = 40 };
  const ddp_dtype_t dt = DDP_DTYPE_BF16;
  twin_t a = twin_input(dt, M * K, 0.0f, 1.0f), b = twin_input(dt, K * NC, 0.0f, 1.0f);
  twin_t bias = twin_input(dt, NC, 0.0f, 1.0f), c = twin_output(dt, M * NC);
  twin_t aux = twin_output(dt, M * NC);
  ddp_gemm_t g = ddp_gemm_packed_f32(M, NC, K, a.gpu, b.gpu, c.gpu);
  g.ab_dtype = g.c_dtype = dt;
  ck_assert_int_eq(ddp_backend_gemm(twin_gpu, &g, NULL), DDP_OK);
  const uint64_t m0 = ddp_cuda_gemm_cache_misses(twin_gpu);
  ddp_cuda_epilogue_args_t e = {.kind = DDP_CUDA_EPILOGUE_BIAS, .bias = bias.gpu};
  int fused = -1;
  ck_assert_int_eq(ddp_cuda_gemm_epilogue(twin_gpu, &g, &e, NULL, &fused), DDP_OK);
  ck_assert_uint_eq(ddp_cuda_gemm_cache_misses(twin_gpu), m0 + 1);
  for (int i = 0; i < 5; ++i)
    ck_assert_int_eq(ddp_cuda_gemm_epilogue(twin_gpu, &g, &e, NULL, &fused), DDP_OK);
  ck_assert_int_eq(ddp_backend_gemm(twin_gpu, &g, NULL), DDP_OK);
  ck_assert_uint_eq(ddp_cuda_gemm_cache_misses(twin_gpu), m0 + 1);
  /* another epilogue on the same shape: a plan of its own */
  e = (ddp_cuda_epilogue_args_t){
      .kind = DDP_CUDA_EPILOGUE_GELU_AUX_BIAS, .bias = bias.gpu, .aux = aux.gpu, .aux_ld = NC};
  ck_assert_int_eq(ddp_cuda_gemm_epilogue(twin_gpu, &g, &e, NULL, &fused), DDP_OK);
  ck_assert_uint_eq(ddp_cuda_gemm_cache_misses(twin_gpu), m0 + 2);
  /* an aux pitch that is no multiple of 8: declined, no plan, nothing
   * written */
  const counts_t c0 = counts_now();
  e.aux_ld = NC + 1;
  g.ldc = NC + 1, g.m = M - 1;
  fused = -1;
  ck_assert_int_eq(ddp_cuda_gemm_epilogue(twin_gpu, &g, &e, NULL, &fused), DDP_OK);
  ck_assert_int_eq(fused, 0);
  ck_assert_uint_eq(ddp_cuda_gemm_cache_misses(twin_gpu), m0 + 2);
  ck_assert_uint_eq(counts_now().declined, c0.declined + 1);
  twin_t *all[] = {&a, &b, &bias, &c, &aux};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) twin_free(all[i]);
}
END_TEST

/* ---- bad input ---------------------------------------------------------------- */

START_TEST(test_gpu_linear_epilogue_rejects_bad_input) {
  ddp_test_log_start();
  char *d = twin_dev_alloc(twin_gpu, 4096);
  ddp_gemm_t g = ddp_gemm_packed_f32(4, 8, 4, d, d + 256, d + 512);
  int fused = -1;
  ddp_cuda_epilogue_args_t e = {.kind = DDP_CUDA_EPILOGUE_BIAS};
  ck_assert_int_eq(ddp_cuda_gemm_epilogue(twin_gpu, &g, &e, NULL, &fused), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(fused, 0);
  e = (ddp_cuda_epilogue_args_t){
      .kind = DDP_CUDA_EPILOGUE_GELU_AUX_BIAS, .bias = d + 1024, .aux = d + 2048, .aux_ld = 7};
  ck_assert_int_eq(ddp_cuda_gemm_epilogue(twin_gpu, &g, &e, NULL, &fused), DDP_ERR_INVALID_ARG);
  e = (ddp_cuda_epilogue_args_t){
      .kind = DDP_CUDA_EPILOGUE_DGELU_BGRAD, .aux = d + 2048, .aux_ld = 8, .bgrad = NULL};
  ck_assert_int_eq(ddp_cuda_gemm_epilogue(twin_gpu, &g, &e, NULL, &fused), DDP_ERR_INVALID_ARG);
  e.kind = DDP_CUDA_EPILOGUE_NONE;
  ck_assert_int_eq(ddp_cuda_gemm_epilogue(twin_gpu, &g, &e, NULL, &fused), DDP_ERR_INVALID_ARG);
  e = (ddp_cuda_epilogue_args_t){.kind = DDP_CUDA_EPILOGUE_BIAS, .bias = d + 1024};
  ck_assert_int_eq(ddp_cuda_gemm_epilogue(twin_gpu, &g, &e, NULL, NULL), DDP_ERR_INVALID_ARG);
  /* the ops: sizes, type, NULL bias / dbias, aliasing */
  ck_assert_int_eq(ddp_cuda_nn_linear_gelu_fwd(twin_gpu, DDP_DTYPE_F32, d, d + 512, d + 1024,
                                               d + 2048, d + 3072, 0, 4, 8, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_linear_gelu_fwd(twin_gpu, DDP_DTYPE_I32, d, d + 512, d + 1024,
                                               d + 2048, d + 3072, 4, 4, 8, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_linear_gelu_fwd(twin_gpu, DDP_DTYPE_F32, d, d + 512, d + 1024,
                                               d + 2048, NULL, 4, 4, 8, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_linear_gelu_fwd(twin_gpu, DDP_DTYPE_F32, d, d, d + 1024, d + 2048,
                                               d + 3072, 4, 4, 8, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_linear_dgelu_bwd(twin_gpu, DDP_DTYPE_F32, d, NULL, d + 512, d + 1024,
                                                d + 2048, 4, 8, 4, 0, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_linear_dgelu_bwd(twin_gpu, DDP_DTYPE_F32, d, (float *)(d + 3072),
                                                d + 512, d + 1024, d, 4, 8, 4, 0, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_linear_dgelu_bwd(twin_gpu, DDP_DTYPE_F32, d, (float *)(d + 3072),
                                                d + 512, d + 1024, d + 2048, 4, -8, 4, 0, NULL),
                   DDP_ERR_INVALID_ARG);
  /* no scratch reserved for these rows: fails instead of allocating */
  ck_assert_int_eq(
      ddp_cuda_nn_linear_dgelu_bwd(twin_gpu, DDP_DTYPE_F32, d, (float *)(d + 3072), d + 512,
                                   d + 1024, d + 2048, 1000000, 8, 4, 0, NULL),
      DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ck_assert_ptr_nonnull(strstr(log, "NULL bias"));
  ck_assert_ptr_nonnull(strstr(log, "NULL bias gradient"));
  ck_assert_ptr_nonnull(strstr(log, "unknown kind"));
  ck_assert_ptr_nonnull(strstr(log, "NULL result flag"));
  ck_assert_ptr_nonnull(strstr(log, "pitch must be >= columns"));
  ck_assert_ptr_nonnull(strstr(log, "must not alias"));
  ck_assert_ptr_nonnull(strstr(log, "must be distinct"));
  ck_assert_ptr_nonnull(strstr(log, "scratch"));
  free(log);
  ddp_backend_free(twin_gpu, d);
}
END_TEST

int main(void) {
  twin_start(); /* exits 77 without a usable CUDA device */
  Suite *s = suite_create("gpu_linear_epilogue");
  TCase *tc = tcase_create("twin");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_gpu_linear_fwd_bias_epilogue_matches_cpu);
  tcase_add_test(tc, test_gpu_linear_gelu_fwd_matches_cpu);
  tcase_add_test(tc, test_gpu_linear_dgelu_bwd_matches_cpu);
  tcase_add_test(tc, test_gpu_linear_bias_grad_update);
  tcase_add_test(tc, test_gpu_linear_epilogue_plans_are_keyed);
  tcase_add_test(tc, test_gpu_linear_epilogue_rejects_bad_input);
  suite_add_tcase(s, tc);
  return twin_run_suite(s);
}
