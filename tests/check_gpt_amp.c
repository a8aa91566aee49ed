/* The GPT model under bf16/fp16 (ddp_gpt_set_precision): the master weights
 * are untouched and the compute copy is their rounding; every logit is a
 * value of the half type (activations really are stored in it, at half the
 * activation memory); the loss
 * and the parameter gradients stay within the precision's error of fp32;
 * fp32 keeps no compute copy.
 *
 * Tolerances, from the unit roundoff u of the storage type (bf16 2^-9 =
 * 2.0e-3, fp16 2^-12 = 2.4e-4): one forward + backward of this 2-layer model
 * stores about 30 activations in sequence, each rounding once (relative
 * error <= u), but the errors are independent and mostly average out: the
 * loss (a mean over tokens) must be within u, the gradients normwise
 * (|g - g32| / |g32|) within 10u. Measured: bf16 loss 2.1e-5 (0.01u),
 * gradients 6.1e-3 (3.1u); fp16 loss 1.7e-6, gradients 6.9e-4 (2.8u). */
#include <math.h>
#include <string.h>

#include "check_util.h"
#include "model/gpt.h"

static ddp_backend_t *g_be;
static const ddp_gpt_config_t k_cfg = {
    .n_layer = 2, .n_head = 2, .n_embd = 16, .max_seq_len = 12, .vocab = 29};
enum { B = 3, T = 12 };

static void setup(void) {
  g_be = ddp_test_cpu_backend();
}
static void teardown(void) {
  ddp_backend_destroy(g_be);
}

static ddp_gpt_t *make(ddp_dtype_t dtype) {
  ddp_gpt_t *m = NULL;
  ck_assert_int_eq(ddp_gpt_create(&m, g_be, &k_cfg, B * T), DDP_OK);
  ck_assert_int_eq(ddp_gpt_set_precision(m, dtype), DDP_OK);
  ck_assert_int_eq(ddp_gpt_init_weights(m, 5), DDP_OK);
  return m;
}

static void batch(int32_t *in, int32_t *tg) {
  for (int i = 0; i < B * T; ++i) {
    in[i] = (i * 7 + 3) % k_cfg.vocab;
    tg[i] = (i * 5 + 1) % k_cfg.vocab;
  }
}

/* One training step's loss and gradients (host copies). */
static double train_once(ddp_gpt_t *m, float *grads) {
  int32_t in[B * T], tg[B * T];
  batch(in, tg);
  ck_assert_int_eq(ddp_gpt_forward(m, in, tg, B, T, 1, 1.0f / (B * T)), DDP_OK);
  ck_assert_int_eq(ddp_gpt_backward(m, 0, 0), DDP_OK);
  double loss;
  ck_assert_int_eq(ddp_gpt_take_loss(m, &loss), DDP_OK);
  memcpy(grads, ddp_gpt_grads(m), ddp_gpt_num_params(m) * sizeof *grads); /* CPU memory */
  return loss / (B * T);
}

static double rel_norm_diff(const float *a, const float *ref, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; ++i) {
    d += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
    r += (double)ref[i] * ref[i];
  }
  return sqrt(d / r);
}

START_TEST(test_gpt_amp_compute_copy_is_rounded_master) {
  const ddp_dtype_t dts[] = {DDP_DTYPE_BF16, DDP_DTYPE_F16};
  ddp_gpt_t *ref = make(DDP_DTYPE_F32);
  ck_assert_ptr_null(ddp_gpt_compute_params(ref));
  const size_t n = ddp_gpt_num_params(ref);
  uint16_t *want = malloc(n * sizeof *want);
  for (int d = 0; d < 2; ++d) {
    ddp_gpt_t *m = make(dts[d]);
    ck_assert_int_eq(ddp_gpt_precision(m), dts[d]);
    ck_assert_mem_eq(ddp_gpt_params(m), ddp_gpt_params(ref), n * sizeof(float));
    ck_assert_int_eq(ddp_convert_host(want, dts[d], ddp_gpt_params(m), DDP_DTYPE_F32, n), DDP_OK);
    ck_assert_ptr_nonnull(ddp_gpt_compute_params(m));
    ck_assert_mem_eq(ddp_gpt_compute_params(m), want, n * sizeof *want);
    ddp_test_log_start();
    ck_assert_int_eq(ddp_gpt_set_precision(m, dts[1 - d]), DDP_ERR_INVALID_ARG);
    ck_assert_int_eq(ddp_gpt_set_precision(m, DDP_DTYPE_I32), DDP_ERR_INVALID_ARG);
    free(ddp_test_log_stop());
    ddp_gpt_destroy(m);
  }
  free(want);
  ddp_gpt_destroy(ref);
}
END_TEST

START_TEST(test_gpt_amp_logits_are_half_values) {
  const ddp_dtype_t dts[] = {DDP_DTYPE_BF16, DDP_DTYPE_F16};
  int32_t in[B * T], tg[B * T];
  batch(in, tg);
  const size_t nl = (size_t)B * T * k_cfg.vocab;
  float *logits = malloc(nl * sizeof *logits), *r = malloc(nl * sizeof *r);
  for (int d = 0; d < 2; ++d) {
    ddp_gpt_t *m = make(dts[d]);
    ck_assert_int_eq(ddp_gpt_forward(m, in, NULL, B, T, 0, 0.0f), DDP_OK);
    ck_assert_int_eq(ddp_gpt_copy_logits_to_host(m, logits, B * T), DDP_OK);
    ck_assert_int_eq(ddp_round_host(r, logits, dts[d], nl), DDP_OK);
    ck_assert_mem_eq(r, logits, nl * sizeof *r);
    /* ...and not trivially: fp32 logits are not all half values. */
    ddp_gpt_t *ref = make(DDP_DTYPE_F32);
    ck_assert_int_eq(ddp_gpt_forward(ref, in, NULL, B, T, 0, 0.0f), DDP_OK);
    ck_assert_int_eq(ddp_gpt_copy_logits_to_host(ref, logits, B * T), DDP_OK);
    ck_assert_int_eq(ddp_round_host(r, logits, dts[d], nl), DDP_OK);
    ck_assert(memcmp(r, logits, nl * sizeof *r) != 0);
    ddp_gpt_destroy(ref);
    ddp_gpt_destroy(m);
  }
  free(logits);
  free(r);
}
END_TEST

START_TEST(test_gpt_amp_loss_and_grads_near_fp32) {
  const ddp_dtype_t dts[] = {DDP_DTYPE_BF16, DDP_DTYPE_F16};
  const double u[] = {0x1p-9, 0x1p-12};
  ddp_gpt_t *ref = make(DDP_DTYPE_F32);
  const size_t n = ddp_gpt_num_params(ref);
  float *g32 = malloc(n * sizeof *g32), *g = malloc(n * sizeof *g);
  const double loss32 = train_once(ref, g32);
  for (int d = 0; d < 2; ++d) {
    ddp_gpt_t *m = make(dts[d]);
    const double loss = train_once(m, g);
    const double dl = fabs(loss - loss32) / loss32, dg = rel_norm_diff(g, g32, n);
    fprintf(stderr, "check_gpt_amp: %s loss %.6f (fp32 %.6f, rel %.2g), grads rel %.2g\n",
            ddp_dtype_name(dts[d]), loss, loss32, dl, dg);
    ck_assert_msg(dl <= u[d], "%s loss rel error %g", ddp_dtype_name(dts[d]), dl);
    ck_assert_msg(dg <= 10 * u[d], "%s grad rel error %g", ddp_dtype_name(dts[d]), dg);
    ck_assert_msg(dg > 0, "%s gradients equal fp32: nothing was rounded", ddp_dtype_name(dts[d]));
    ddp_gpt_destroy(m);
  }
  free(g32);
  free(g);
  ddp_gpt_destroy(ref);
}
END_TEST

/* Activations are stored in the half type: the arena of a bf16/fp16 model
 * holds every activation and activation gradient at 2 bytes instead of 4,
 * while LayerNorm statistics, attention probabilities, losses and token ids
 * stay 4 bytes. Checked against that count (up to the arena's 256-byte
 * rounding of each of its allocations), and on a model whose activations
 * dominate (C = 64, T = 16) the ratio to fp32 is about a half. */
START_TEST(test_gpt_amp_activation_memory_halves) {
  const ddp_gpt_config_t cfg = {
      .n_layer = 2, .n_head = 2, .n_embd = 64, .max_seq_len = 16, .vocab = 64};
  const size_t N = 64, C = 64, V = 64, L = 2;
  /* per block: ln1, atty, res2, ln2, res3 (C), qkv (3C), fch, fch_gelu (4C);
   * then encoded, lnf (C), logits (V), dres, dtmp (C), dqkv (3C), dfch (4C) */
  const size_t half_elems = N * (L * 16 * C + 2 * C + V + 2 * C + 3 * C + 4 * C);
  const size_t slack = 256 * (L * 13 + 16); /* one rounding per allocation */
  size_t bytes[3];
  const ddp_dtype_t dts[] = {DDP_DTYPE_F32, DDP_DTYPE_BF16, DDP_DTYPE_F16};
  for (int d = 0; d < 3; ++d) {
    ddp_gpt_t *m = NULL;
    ck_assert_int_eq(ddp_gpt_create(&m, g_be, &cfg, (int64_t)N), DDP_OK);
    ck_assert_int_eq(ddp_gpt_set_precision(m, dts[d]), DDP_OK);
    bytes[d] = ddp_gpt_activation_bytes(m);
    ddp_gpt_destroy(m);
  }
  ck_assert_uint_eq(bytes[1], bytes[2]);
  const size_t want = bytes[0] - 2 * half_elems;
  ck_assert_msg(bytes[1] + slack >= want && bytes[1] <= want + slack,
                "bf16 activations %zu bytes, want %zu +- %zu (fp32: %zu)", bytes[1], want, slack,
                bytes[0]);
  const double ratio = (double)bytes[1] / (double)bytes[0];
  ck_assert_msg(ratio > 0.5 && ratio < 0.56, "bf16 / fp32 activation bytes = %.3f", ratio);
}
END_TEST

static Suite *gpt_amp_suite(void) {
  Suite *s = suite_create("gpt_amp");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_gpt_amp_compute_copy_is_rounded_master);
  tcase_add_test(tc, test_gpt_amp_logits_are_half_values);
  tcase_add_test(tc, test_gpt_amp_loss_and_grads_near_fp32);
  tcase_add_test(tc, test_gpt_amp_activation_memory_halves);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(gpt_amp_suite());
}
