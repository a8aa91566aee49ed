/* GPU suite for CUDA causal self-attention (src/backend/cuda/cuda_nn_attention.c,
 * kernels/attention.cu) against its CPU twin, ddp_nn_cpu_ops.attention_fwd /
 * attention_bwd on the one-thread CPU backend, under fp32, bf16 and fp16.
 *
 * Shapes are odd: B=3, T=37, C=60, NH=5 (hs 12); T=1; B=2, T=129, C=48,
 * NH=3 (hs 16, past the CPU's 64-row blocks, so its att rows hold unwritten
 * poison past each block); and hs=3 with NH=7. Inputs are fresh random
 * values (gpu_twin.h prints the seed), outputs and the backward scratch are
 * NaN-poisoned first, so an element the GPU never writes, or a poisoned
 * one it reads, shows up.
 *
 * Checked, per precision:
 *   - out against the CPU; att (fp32) against the CPU on the causal part,
 *     and exactly 0 above the diagonal on the GPU (the GPU promises zeros
 *     there so whole rows can feed a GEMM);
 *   - eval (att NULL) against the CPU's eval, and against the GPU's own
 *     training output; once with the row blocks reserve() gives (several
 *     blocks at these shapes) and once with the minimum scratch (one row
 *     per block);
 *   - backward: both backends get the SAME att, the CPU's with every entry
 *     above the diagonal set to NaN (the contract says they are never read);
 *     dqkv against the CPU;
 *   - determinism: a second forward and backward on the GPU give
 *     bit-identical out, att and dqkv;
 *   - invalid arguments and missing scratch are rejected before anything is
 *     written.
 *
 * Thresholds (normwise relative error, max|gpu - cpu| / max|cpu|):
 *   - fp32 out 2e-5 and att 2e-5 (both backends do the same fp32 math on
 *     the same fp32 operands, differing in summation order over hs- and
 *     T-term dot products); att gets 2e-5 under every dt, because the
 *     probabilities are computed in fp32 from exactly widened operands;
 *   - fp32 dqkv 5e-5: on top of GEMM summation order the softmax backward
 *     subtracts the row dot product (a cancellation that scales absolute
 *     errors up relative to small entries);
 *   - bf16/fp16 outputs: twin_tol() (one rounding of the stored half value
 *     plus a possible extra ulp from the fp32 difference: 1.6e-2, 2e-3);
 *   - GPU eval vs GPU training: the same fp32 math in other GEMM shapes,
 *     so fp32 1e-5, and under half types one ulp of the largest element
 *     (bf16 2^-7 -> 8e-3, fp16 2^-10 -> 1e-3).
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

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"
#include "ddptrain/nn.h"
#include "gpu_twin.h"

typedef struct shape {
  int B, T, C, NH;
} shape_t;

static const shape_t k_shapes[] = {
    {3, 37, 60, 5},  /* odd everything, hs 12 */
    {2, 1, 60, 5},   /* one position: softmax of one score */
    {2, 129, 48, 3}, /* T past the CPU's 64-row blocks, hs 16 */
    {2, 23, 21, 7},  /* hs 3 */
};
#define NSHAPES (sizeof k_shapes / sizeof k_shapes[0])

static const ddp_nn_ops_t *const cpu_nn = &ddp_nn_cpu_ops;

static double tol_out(ddp_dtype_t dt) {
  return twin_tol(dt);
}
static double tol_grad(ddp_dtype_t dt) {
  return dt == DDP_DTYPE_F32 ? 5e-5 : twin_tol(dt);
}
#define TOL_ATT 2e-5
static double tol_eval_vs_train(ddp_dtype_t dt) {
  return dt == DDP_DTYPE_BF16 ? 8e-3 : dt == DDP_DTYPE_F16 ? 1e-3 : 1e-5;
}

/* Holds on both backends' scratch for one shape, released by unreserve. */
static void reserve(ddp_dtype_t dt, const shape_t *sh) {
  const int64_t N = (int64_t)sh->B * sh->T;
  ck_assert_int_eq(
      ddp_cuda_scratch_reserve(twin_gpu, ddp_cuda_attention_scratch_bytes(dt, N, sh->C, 1)),
      DDP_OK);
  ck_assert_int_eq(cpu_nn->reserve(twin_cpu, dt, N, sh->C, 1), DDP_OK);
}

static void unreserve(void) {
  ddp_cuda_scratch_release(twin_gpu);
  cpu_nn->release(twin_cpu);
}

static size_t att_elems(const shape_t *sh) {
  return (size_t)sh->B * sh->NH * sh->T * sh->T;
}

static ddp_status_t gpu_fwd(ddp_dtype_t dt, void *out, float *att, const void *qkv,
                            const shape_t *sh) {
  return ddp_cuda_nn_attention_fwd(twin_gpu, dt, out, att, qkv, sh->B, sh->T, sh->C, sh->NH, NULL);
}

static ddp_status_t gpu_bwd(ddp_dtype_t dt, void *dqkv, float *scratch, const void *dout,
                            const void *qkv, const float *att, const shape_t *sh) {
  return ddp_cuda_nn_attention_bwd(twin_gpu, dt, dqkv, scratch, dout, qkv, att, sh->B, sh->T, sh->C,
                                   sh->NH, NULL);
}

/* Normwise relative difference of two GPU buffers of the same twin kind,
 * failing on any non-finite element of either. */
static double gpu_vs_gpu(const twin_t *a, const twin_t *b, const char *what) {
  float *x = twin_fetch(a, twin_gpu), *y = twin_fetch(b, twin_gpu);
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a->n; ++i) {
    ck_assert_msg(isfinite(x[i]) && isfinite(y[i]), "%s (%s): element %zu is %g / %g", what,
                  ddp_dtype_name(a->dt), i, (double)x[i], (double)y[i]);
    const double d = fabs((double)x[i] - (double)y[i]);
    if (d > num) num = d;
    if (fabs((double)y[i]) > den) den = fabs((double)y[i]);
  }
  free(x);
  free(y);
  return den > 0 ? num / den : num;
}

/* The GPU's and the CPU's att: relative error on the causal part, exact
 * zeros above the diagonal on the GPU. */
static void expect_att(const twin_t *att, const shape_t *sh) {
  float *g = twin_fetch(att, twin_gpu), *c = twin_fetch(att, twin_cpu);
  const size_t T = (size_t)sh->T, nrows = att->n / T;
  double num = 0.0, den = 0.0;
  for (size_t r = 0; r < nrows; ++r) {
    const size_t t = r % T;
    for (size_t j = 0; j < T; ++j) {
      const size_t i = r * T + j;
      if (j > t) {
        ck_assert_msg(g[i] == 0.0f && !signbit(g[i]),
                      "att row %zu (t=%zu) column %zu above the diagonal is %g, not 0", r, t, j,
                      (double)g[i]);
        continue;
      }
      ck_assert_msg(isfinite(c[i]) && isfinite(g[i]), "att row %zu column %zu: gpu %g cpu %g", r, j,
                    (double)g[i], (double)c[i]);
      const double d = fabs((double)g[i] - (double)c[i]);
      if (d > num) num = d;
      if (fabs((double)c[i]) > den) den = fabs((double)c[i]);
    }
  }
  const double err = num / den;
  ck_assert_msg(err <= TOL_ATT, "att (causal part): normwise relative error %.3g > %.3g", err,
                TOL_ATT);
  free(g);
  free(c);
}

/* Uploads the CPU's att with every entry above the diagonal set to NaN to
 * both backends' copies of `dst` (a F32 twin of the same size). */
static void share_att_with_poisoned_mask(twin_t *dst, const twin_t *src, const shape_t *sh) {
  float *c = twin_fetch(src, twin_cpu);
  const size_t T = (size_t)sh->T;
  for (size_t i = 0; i < src->n; ++i)
    if (i % T > (i / T) % T) c[i] = NAN;
  twin_upload(twin_cpu, dst->cpu, c, src->n * sizeof(float));
  twin_upload(twin_gpu, dst->gpu, c, src->n * sizeof(float));
  free(c);
}

static int same_gpu_bytes(const void *a, const void *b, size_t bytes) {
  void *x = malloc(bytes + 1), *y = malloc(bytes + 1);
  ck_assert(x && y);
  twin_download(twin_gpu, x, a, bytes);
  twin_download(twin_gpu, y, b, bytes);
  const int same = memcmp(x, y, bytes) == 0;
  free(x);
  free(y);
  return same;
}

/* ---- forward, eval and backward against the CPU ----------------------------- */

static void run_shape(ddp_dtype_t dt, const shape_t *sh) {
  const int B = sh->B, T = sh->T, C = sh->C, NH = sh->NH;
  const size_t nc = (size_t)B * T * C, na = att_elems(sh);
  reserve(dt, sh);

  twin_t qkv = twin_input(dt, 3 * nc, 0.0f, 1.5f);
  twin_t out = twin_output(dt, nc), att = twin_output(DDP_DTYPE_F32, na);
  ck_assert_int_eq(
      cpu_nn->attention_fwd(twin_cpu, dt, out.cpu, att.cpu, qkv.cpu, B, T, C, NH, NULL), DDP_OK);
  ck_assert_int_eq(gpu_fwd(dt, out.gpu, att.gpu, qkv.gpu, sh), DDP_OK);
  const double e_out = twin_expect(&out, tol_out(dt), "attention_fwd out");
  expect_att(&att, sh);

  /* eval, both backends, and the GPU's eval against its training output */
  twin_t ev = twin_output(dt, nc);
  ck_assert_int_eq(cpu_nn->attention_fwd(twin_cpu, dt, ev.cpu, NULL, qkv.cpu, B, T, C, NH, NULL),
                   DDP_OK);
  ck_assert_int_eq(gpu_fwd(dt, ev.gpu, NULL, qkv.gpu, sh), DDP_OK);
  twin_expect(&ev, tol_out(dt), "attention_fwd eval out");
  const double e_ev = gpu_vs_gpu(&ev, &out, "eval vs training out");
  ck_assert_msg(e_ev <= tol_eval_vs_train(dt), "%s: eval vs training out %.3g > %.3g",
                ddp_dtype_name(dt), e_ev, tol_eval_vs_train(dt));

  /* backward from the same att on both backends, its mask poisoned */
  twin_t att_in = twin_output(DDP_DTYPE_F32, na);
  share_att_with_poisoned_mask(&att_in, &att, sh);
  twin_t dout = twin_input(dt, nc, 0.0f, 1.0f);
  twin_t dqkv = twin_output(dt, 3 * nc), scratch = twin_output(DDP_DTYPE_F32, na);
  ck_assert_int_eq(cpu_nn->attention_bwd(twin_cpu, dt, dqkv.cpu, scratch.cpu, dout.cpu, qkv.cpu,
                                         att_in.cpu, B, T, C, NH, NULL),
                   DDP_OK);
  ck_assert_int_eq(gpu_bwd(dt, dqkv.gpu, scratch.gpu, dout.gpu, qkv.gpu, att_in.gpu, sh), DDP_OK);
  const double e_dqkv = twin_expect(&dqkv, tol_grad(dt), "attention_bwd dqkv");

  /* determinism: everything again into fresh poisoned buffers */
  twin_t out2 = twin_output(dt, nc), att2 = twin_output(DDP_DTYPE_F32, na);
  twin_t ev2 = twin_output(dt, nc), dqkv2 = twin_output(dt, 3 * nc);
  twin_t scratch2 = twin_output(DDP_DTYPE_F32, na);
  ck_assert_int_eq(gpu_fwd(dt, out2.gpu, att2.gpu, qkv.gpu, sh), DDP_OK);
  ck_assert_int_eq(gpu_fwd(dt, ev2.gpu, NULL, qkv.gpu, sh), DDP_OK);
  ck_assert_int_eq(gpu_bwd(dt, dqkv2.gpu, scratch2.gpu, dout.gpu, qkv.gpu, att_in.gpu, sh), DDP_OK);
  const size_t esz = ddp_dtype_size(dt);
  ck_assert_msg(same_gpu_bytes(out.gpu, out2.gpu, nc * esz), "out differs between two runs");
  ck_assert_msg(same_gpu_bytes(att.gpu, att2.gpu, na * sizeof(float)),
                "att differs between two runs");
  ck_assert_msg(same_gpu_bytes(ev.gpu, ev2.gpu, nc * esz), "eval out differs between two runs");
  ck_assert_msg(same_gpu_bytes(dqkv.gpu, dqkv2.gpu, 3 * nc * esz), "dqkv differs between two runs");

  fprintf(stderr,
          "attention %s B=%d T=%d C=%d NH=%d: out err %.3g, eval-vs-train %.3g, dqkv err %.3g\n",
          ddp_dtype_name(dt), B, T, C, NH, e_out, e_ev, e_dqkv);
  twin_t *all[] = {&qkv,     &out,  &att,  &ev,  &att_in, &dout,    &dqkv,
                   &scratch, &out2, &att2, &ev2, &dqkv2,  &scratch2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) twin_free(all[i]);
  unreserve();
}

START_TEST(test_attention_matches_cpu) {
  const ddp_dtype_t dt = twin_dtypes[_i];
  for (size_t s = 0; s < NSHAPES; ++s) run_shape(dt, &k_shapes[s]);
}
END_TEST

/* Eval with the least scratch it accepts (q, k, v and one row of scores
 * per head: row blocks of one row) still equals training. */
START_TEST(test_attention_eval_minimum_scratch) {
  const ddp_dtype_t dt = twin_dtypes[_i];
  const shape_t *sh = &k_shapes[0];
  const int B = sh->B, T = sh->T, C = sh->C, NH = sh->NH;
  const size_t nc = (size_t)B * T * C;
  /* three fp32 slots of nc, each rounded up to 64 floats, then B*NH*T */
  const size_t slot = (nc + 63) / 64 * 64;
  const size_t min_bytes = (3 * slot + (size_t)B * NH * T) * sizeof(float);
  twin_t qkv = twin_input(dt, 3 * nc, 0.0f, 1.5f);
  twin_t out = twin_output(dt, nc), ev = twin_output(dt, nc);
  twin_t att = twin_output(DDP_DTYPE_F32, att_elems(sh));

  ck_assert_int_eq(ddp_cuda_scratch_reserve(twin_gpu, min_bytes - sizeof(float)), DDP_OK);
  ck_assert_int_eq(gpu_fwd(dt, ev.gpu, NULL, qkv.gpu, sh), DDP_ERR_INVALID_ARG);
  ddp_cuda_scratch_release(twin_gpu);

  ck_assert_int_eq(ddp_cuda_scratch_reserve(twin_gpu, min_bytes), DDP_OK);
  ck_assert_int_eq(gpu_fwd(dt, ev.gpu, NULL, qkv.gpu, sh), DDP_OK);
  ck_assert_int_eq(gpu_fwd(dt, out.gpu, att.gpu, qkv.gpu, sh), DDP_OK);
  const double e = gpu_vs_gpu(&ev, &out, "eval (one-row blocks) vs training out");
  ck_assert_msg(e <= tol_eval_vs_train(dt), "%s: eval (one-row blocks) vs training %.3g > %.3g",
                ddp_dtype_name(dt), e, tol_eval_vs_train(dt));
  ddp_cuda_scratch_release(twin_gpu);
  twin_free(&qkv);
  twin_free(&out);
  twin_free(&ev);
  twin_free(&att);
}
END_TEST

/* Bad sizes, NULL pointers, an unsupported dtype and missing scratch fail
 * with DDP_ERR_INVALID_ARG and leave the outputs untouched (still NaN). */
START_TEST(test_attention_rejects_bad_input) {
  const shape_t sh = {2, 5, 12, 3};
  const size_t nc = (size_t)sh.B * sh.T * sh.C, na = att_elems(&sh);
  const ddp_dtype_t dt = DDP_DTYPE_F32;
  twin_t qkv = twin_input(dt, 3 * nc, 0.0f, 1.0f), dout = twin_input(dt, nc, 0.0f, 1.0f);
  twin_t out = twin_output(dt, nc), att = twin_output(DDP_DTYPE_F32, na);
  twin_t dqkv = twin_output(dt, 3 * nc), scratch = twin_output(DDP_DTYPE_F32, na);
  ddp_backend_t *g = twin_gpu;

  /* no reserve(): the scratch is missing */
  ck_assert_int_eq(gpu_fwd(dt, out.gpu, att.gpu, qkv.gpu, &sh), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(gpu_bwd(dt, dqkv.gpu, scratch.gpu, dout.gpu, qkv.gpu, att.gpu, &sh),
                   DDP_ERR_INVALID_ARG);

  /* a forward's scratch (3 floats per element) is too little for backward */
  ck_assert_int_eq(ddp_cuda_scratch_reserve(g, 3 * nc * sizeof(float)), DDP_OK);
  ck_assert_int_eq(gpu_bwd(dt, dqkv.gpu, scratch.gpu, dout.gpu, qkv.gpu, att.gpu, &sh),
                   DDP_ERR_INVALID_ARG);
  ddp_cuda_scratch_release(g);

  ck_assert_int_eq(ddp_cuda_scratch_reserve(g, ddp_cuda_attention_scratch_bytes(dt, 10, 12, 1)),
                   DDP_OK);
  ck_assert_int_eq(ddp_cuda_nn_attention_fwd(g, dt, out.gpu, att.gpu, qkv.gpu, 2, 5, 12, 5, NULL),
                   DDP_ERR_INVALID_ARG); /* C % NH */
  ck_assert_int_eq(ddp_cuda_nn_attention_fwd(g, dt, out.gpu, att.gpu, qkv.gpu, 2, 0, 12, 3, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(
      ddp_cuda_nn_attention_fwd(g, DDP_DTYPE_I32, out.gpu, att.gpu, qkv.gpu, 2, 5, 12, 3, NULL),
      DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_attention_fwd(g, dt, NULL, att.gpu, qkv.gpu, 2, 5, 12, 3, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_attention_bwd(g, dt, dqkv.gpu, NULL, dout.gpu, qkv.gpu, att.gpu, 2,
                                             5, 12, 3, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_attention_bwd(g, dt, dqkv.gpu, scratch.gpu, dout.gpu, qkv.gpu,
                                             att.gpu, 2, 5, 12, 5, NULL),
                   DDP_ERR_INVALID_ARG);
  /* more rows than reserved: B = 4 needs 3 slots of 256 floats, 5 of 128 are there */
  ck_assert_int_eq(ddp_cuda_nn_attention_fwd(g, dt, out.gpu, att.gpu, qkv.gpu, 4, 5, 12, 3, NULL),
                   DDP_ERR_INVALID_ARG);
  ddp_cuda_scratch_release(g);

  float *o = twin_fetch(&out, twin_gpu), *d = twin_fetch(&dqkv, twin_gpu);
  for (size_t i = 0; i < nc; ++i) ck_assert_msg(isnan(o[i]), "out[%zu] was written", i);
  for (size_t i = 0; i < 3 * nc; ++i) ck_assert_msg(isnan(d[i]), "dqkv[%zu] was written", i);
  free(o);
  free(d);
  twin_t *all[] = {&qkv, &dout, &out, &att, &dqkv, &scratch};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) twin_free(all[i]);
}
END_TEST

/* The backward scratch bound: five fp32 slots of the (N, C) activation,
 * each rounded up to 64 floats, under every dt; it is also enough for the
 * forward and the eval of any T. */
START_TEST(test_attention_scratch_bytes) {
  for (size_t d = 0; d < 3; ++d) {
    ck_assert_uint_eq(ddp_cuda_attention_scratch_bytes(twin_dtypes[d], 64, 48, 50257),
                      5 * 64 * 48 * sizeof(float));
    ck_assert_uint_eq(ddp_cuda_attention_scratch_bytes(twin_dtypes[d], 3, 7, 1),
                      5 * 64 * sizeof(float));
    ck_assert_uint_eq(ddp_cuda_attention_scratch_bytes(twin_dtypes[d], 0, 48, 1), 0);
  }
}
END_TEST

static Suite *gpu_attention_suite(void) {
  Suite *s = suite_create("gpu_attention");
  TCase *tc = tcase_create("attention");
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_attention_matches_cpu, 0, 3);
  tcase_add_loop_test(tc, test_attention_eval_minimum_scratch, 0, 3);
  tcase_add_test(tc, test_attention_rejects_bad_input);
  tcase_add_test(tc, test_attention_scratch_bytes);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  twin_start();
  fprintf(stderr, "check_gpu_attention: %s against %s\n", twin_gpu->description,
          twin_cpu->description);
  return twin_run_suite(gpu_attention_suite());
}
