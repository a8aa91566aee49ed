/* GPU suite for the decode-step attention (kernels/attention_decode.cu via
 * src/backend/cuda/cuda_nn_decode.c) against its CPU twin,
 * ddp_nn_cpu_ops.attention_decode on the one-thread CPU backend, under
 * fp32, bf16 and fp16.
 *
 * Shapes: B=3, Tc=40, C=60, NH=5 (hs 12) at t = 0, 1, 17 and 39 (the last
 * row of the cache); B=1, Tc=1100 at t = 1099 (more keys than one shared
 * chunk of 1024); hs 256 (the kernel's largest: two channels per thread)
 * and hs 3. Inputs are random (gpu_twin.h prints the seed), outputs
 * NaN-poisoned first, so an element never written shows up; rows of the
 * cache after t are NaN too, so a kernel that reads past t fails.
 *
 * Checked: out against the CPU within twin_tol (fp32: summation order
 * only; half: one rounding); a second call gives the same bits; bad
 * arguments (t outside the cache, NH not dividing C, an unknown dtype, a
 * head size over 256) are refused before anything is written.
 *
 * Exit 77 (SKIP) without a usable CUDA device. */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_nn.h"
#include "ddptrain/nn.h"
#include "gpu_twin.h"

typedef struct shape {
  int B, Tc, C, NH, t;
} shape_t;

static const shape_t k_shapes[] = {
    {3, 40, 60, 5, 0},      {3, 40, 60, 5, 1}, {3, 40, 60, 5, 17}, {3, 40, 60, 5, 39},
    {1, 1100, 32, 2, 1099}, {2, 9, 512, 2, 8}, {2, 23, 21, 7, 11},
};
#define NSHAPES (sizeof k_shapes / sizeof k_shapes[0])

/* The cache: random rows 0..t, NaN rows after t (never to be read). */
static twin_t cache(ddp_dtype_t dt, const shape_t *sh) {
  const size_t row = 3 * (size_t)sh->C, n = (size_t)sh->B * sh->Tc * row;
  twin_t q = twin_input(dt, n, 0.0f, 1.0f);
  for (int b = 0; b < sh->B; ++b)
    for (size_t i = ((size_t)b * sh->Tc + sh->t + 1) * row; i < ((size_t)b + 1) * sh->Tc * row; ++i)
      q.host[i] = NAN;
  twin_set(&q);
  return q;
}

START_TEST(test_attention_decode_matches_cpu) {
  const ddp_dtype_t dt = twin_dtypes[_i];
  for (size_t k = 0; k < NSHAPES; ++k) {
    const shape_t *sh = &k_shapes[k];
    twin_t qkv = cache(dt, sh), out = twin_output(dt, (size_t)sh->B * sh->C);
    ck_assert_int_eq(ddp_nn_cpu_ops.attention_decode(twin_cpu, dt, out.cpu, qkv.cpu, sh->B, sh->Tc,
                                                     sh->t, sh->C, sh->NH, NULL),
                     DDP_OK);
    ck_assert_int_eq(ddp_cuda_nn_attention_decode(twin_gpu, dt, out.gpu, qkv.gpu, sh->B, sh->Tc,
                                                  sh->t, sh->C, sh->NH, NULL),
                     DDP_OK);
    char what[96];
    snprintf(what, sizeof what, "attention_decode B=%d Tc=%d C=%d NH=%d t=%d", sh->B, sh->Tc, sh->C,
             sh->NH, sh->t);
    const double err = twin_expect(&out, twin_tol(dt), what);
    fprintf(stderr, "%s %s: error %.3g\n", what, ddp_dtype_name(dt), err);
    /* determinism: the same bits again */
    float *first = twin_fetch(&out, twin_gpu);
    ck_assert_int_eq(ddp_cuda_nn_attention_decode(twin_gpu, dt, out.gpu, qkv.gpu, sh->B, sh->Tc,
                                                  sh->t, sh->C, sh->NH, NULL),
                     DDP_OK);
    float *second = twin_fetch(&out, twin_gpu);
    ck_assert_mem_eq(first, second, out.n * sizeof(float));
    free(first);
    free(second);
    twin_free(&qkv);
    twin_free(&out);
  }
}
END_TEST

START_TEST(test_attention_decode_rejects_bad_input) {
  const shape_t sh = {2, 8, 16, 2, 3};
  twin_t qkv = cache(DDP_DTYPE_F32, &sh), out = twin_output(DDP_DTYPE_F32, 2 * 16);
  const struct {
    ddp_dtype_t dt;
    int Tc, t, C, NH;
    ddp_status_t want;
  } bad[] = {
      {DDP_DTYPE_F32, 8, 8, 16, 2, DDP_ERR_INVALID_ARG},   /* t past the cache */
      {DDP_DTYPE_F32, 8, -1, 16, 2, DDP_ERR_INVALID_ARG},  /* negative t */
      {DDP_DTYPE_F32, 8, 3, 16, 3, DDP_ERR_INVALID_ARG},   /* 3 does not divide 16 */
      {DDP_DTYPE_I32, 8, 3, 16, 2, DDP_ERR_INVALID_ARG},   /* not a float type */
      {DDP_DTYPE_F32, 1, 0, 1028, 2, DDP_ERR_UNSUPPORTED}, /* hs 514 */
  };
  ddp_test_log_start();
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i)
    ck_assert_int_eq(ddp_cuda_nn_attention_decode(twin_gpu, bad[i].dt, out.gpu, qkv.gpu, 2,
                                                  bad[i].Tc, bad[i].t, bad[i].C, bad[i].NH, NULL),
                     bad[i].want);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "attention_decode: sizes B=2 Tc=8 t=8");
  ddp_assert_contains(log, "head size 514 > 256");
  free(log);
  float *o = twin_fetch(&out, twin_gpu);
  for (size_t i = 0; i < out.n; ++i) ck_assert_msg(isnan(o[i]), "out[%zu] was written", i);
  free(o);
  twin_free(&qkv);
  twin_free(&out);
}
END_TEST

static Suite *gpu_attention_decode_suite(void) {
  Suite *s = suite_create("gpu_attention_decode");
  TCase *tc = tcase_create("attention_decode");
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_attention_decode_matches_cpu, 0, 3);
  tcase_add_test(tc, test_attention_decode_rejects_bad_input);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  twin_start();
  fprintf(stderr, "check_gpu_attention_decode: %s against %s\n", twin_gpu->description,
          twin_cpu->description);
  return twin_run_suite(gpu_attention_decode_suite());
}
