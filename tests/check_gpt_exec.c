/* The GPT model's execution options (ddp_gpt_exec_t) change how it runs,
 * never what it computes: --recompute gives bit-identical losses and
 * gradients with a smaller arena; the fused forward-backward equals the
 * separate calls (bit for bit with one chunk of logits, within fp32 summation
 * order with several) and keeps only a chunk of logits; flash attention
 * matches matrix attention on ragged rows; bad options and a
 * full-logits forward on a fused model are refused. */
#include <math.h>

#include "check_util.h"
#include "model/gpt.h"

static ddp_backend_t *g_be;

static void setup(void) {
  g_be = ddp_test_cpu_backend();
}
static void teardown(void) {
  ddp_backend_destroy(g_be);
}

static ddp_gpt_t *make(const ddp_gpt_config_t *c, int64_t budget, ddp_dtype_t dt,
                       const ddp_gpt_exec_t *x) {
  ddp_gpt_t *m = NULL;
  ck_assert_int_eq(ddp_gpt_create(&m, g_be, c, budget), DDP_OK);
  ck_assert_int_eq(ddp_gpt_init_weights(m, 11), DDP_OK);
  ck_assert_int_eq(ddp_gpt_set_precision(m, dt), DDP_OK);
  if (x) ck_assert_int_eq(ddp_gpt_set_exec(m, x), DDP_OK);
  return m;
}

/* Ragged rows: row b ends b positions early (targets -1 there). */
static void batch(int32_t *in, int32_t *tg, int B, int T, int V, int salt) {
  for (int i = 0; i < B * T; ++i) {
    in[i] = (i * 7 + 3 + salt) % V;
    tg[i] = (i % T) < T - 1 - (i / T) % T ? (i * 5 + 1 + salt) % V : -1;
  }
}

/* Two micro-steps (overwrite, then accumulate with notify), through the
 * separate calls or the fused one; returns the loss sum, fills grads. */
static double two_steps(ddp_gpt_t *m, int fused, const int32_t *in, const int32_t *tg, int B, int T,
                        float *grads) {
  for (int k = 0; k < 2; ++k) {
    const int32_t *i = in + (size_t)k * B * T, *t = tg + (size_t)k * B * T;
    if (fused) {
      ck_assert_int_eq(ddp_gpt_forward_backward(m, i, t, B, T, 0.01f, k, k), DDP_OK);
    } else {
      ck_assert_int_eq(ddp_gpt_forward(m, i, t, B, T, 1, 0.01f), DDP_OK);
      ck_assert_int_eq(ddp_gpt_backward(m, k, k), DDP_OK);
    }
  }
  double loss = 0;
  ck_assert_int_eq(ddp_gpt_take_loss(m, &loss), DDP_OK);
  memcpy(grads, ddp_gpt_grads(m), ddp_gpt_num_params(m) * sizeof *grads); /* CPU memory */
  return loss;
}

/* Per tensor of m's layout, |ga - gb| <= tol x the tensor's largest |ga|
 * (a nonzero one: every tensor gets a gradient). */
static void assert_grads_close(const ddp_gpt_t *m, const float *ga, const float *gb, float tol) {
  for (int t = 0; t < ddp_gpt_num_tensors(m); ++t) {
    const ddp_param_t *d = ddp_gpt_tensor(m, t);
    float scale = 0;
    for (size_t i = d->offset; i < d->offset + d->count; ++i) scale = fmaxf(scale, fabsf(ga[i]));
    ck_assert_msg(scale > 0, "%s has no gradient", d->name);
    for (size_t i = d->offset; i < d->offset + d->count; ++i)
      ck_assert_msg(fabsf(ga[i] - gb[i]) <= tol * scale, "%s[%zu]: %g vs %g", d->name,
                    i - d->offset, ga[i], gb[i]);
  }
}

/* Two micro-steps on a (separate calls) and b (the fused call): losses
 * within 1e-6 and gradients within tol (assert_grads_close). */
static void assert_same_training(ddp_gpt_t *a, ddp_gpt_t *b, const int32_t *in, const int32_t *tg,
                                 int B, int T, float tol) {
  const size_t n = ddp_gpt_num_params(a);
  float *ga = malloc(n * sizeof *ga), *gb = malloc(n * sizeof *gb);
  const double la = two_steps(a, 0, in, tg, B, T, ga);
  const double lb = two_steps(b, 1, in, tg, B, T, gb);
  ck_assert_msg(fabs(la - lb) <= 1e-6 * fabs(la), "loss %.9g vs %.9g", la, lb);
  assert_grads_close(a, ga, gb, tol);
  free(ga);
  free(gb);
}

/* The eval forward's loss of a batch equals the fused training call's. */
static void assert_eval_equals_train(ddp_gpt_t *m, const int32_t *in, const int32_t *tg, int B,
                                     int T) {
  double train = 0, eval = 0;
  ck_assert_int_eq(ddp_gpt_forward_backward(m, in, tg, B, T, 1.0f, 0, 0), DDP_OK);
  ck_assert_int_eq(ddp_gpt_take_loss(m, &train), DDP_OK);
  ck_assert_int_eq(ddp_gpt_forward(m, in, tg, B, T, 0, 0.0f), DDP_OK);
  ck_assert_int_eq(ddp_gpt_take_loss(m, &eval), DDP_OK);
  ck_assert_msg(fabs(train - eval) <= 1e-6 * fabs(train), "%.9g vs %.9g", train, eval);
}

static const ddp_gpt_config_t k_small = {
    .n_layer = 2, .n_head = 2, .n_embd = 16, .max_seq_len = 12, .vocab = 29};

static void check_recompute_identical(ddp_dtype_t dt) {
  ddp_gpt_t *a = make(&k_small, 48, dt, NULL);
  ddp_gpt_exec_t rc = {.recompute = 1};
  ddp_gpt_t *b = make(&k_small, 48, dt, &rc);
  ck_assert_int_eq(ddp_gpt_exec(b)->recompute, 1);
  /* ln_1, ln_2 and GELU's output: 6 of 16 N x C buffers per block go */
  ck_assert(ddp_gpt_activation_bytes(b) < ddp_gpt_activation_bytes(a));
  const size_t n = ddp_gpt_num_params(a);
  float *ga = malloc(n * sizeof *ga), *gb = malloc(n * sizeof *gb);
  int32_t in[2 * 48], tg[2 * 48];
  batch(in, tg, 4, 12, 29, 0);
  batch(in + 48, tg + 48, 4, 12, 29, 5);
  const double la = two_steps(a, 0, in, tg, 4, 12, ga);
  const double lb = two_steps(b, 0, in, tg, 4, 12, gb);
  ck_assert(la == lb);
  ck_assert(isfinite(la) && la > 0);
  for (size_t i = 0; i < n; ++i)
    ck_assert_msg(ga[i] == gb[i], "grad %zu: %g vs %g", i, ga[i], gb[i]);
  free(ga);
  free(gb);
  ddp_gpt_destroy(a);
  ddp_gpt_destroy(b);
}

START_TEST(test_gpt_exec_recompute_is_bit_identical_fp32) {
  check_recompute_identical(DDP_DTYPE_F32);
}
END_TEST

START_TEST(test_gpt_exec_recompute_is_bit_identical_bf16) {
  check_recompute_identical(DDP_DTYPE_BF16);
}
END_TEST

/* One chunk of logits (a small vocabulary): the fused call runs the same
 * ops in the same order as forward + backward. */
START_TEST(test_gpt_exec_fused_one_chunk_is_bit_identical) {
  ddp_gpt_exec_t fx = {.fused_classifier = 1, .recompute = 1};
  ddp_gpt_t *a = make(&k_small, 48, DDP_DTYPE_F32, NULL);
  ddp_gpt_t *b = make(&k_small, 48, DDP_DTYPE_F32, &fx);
  const size_t n = ddp_gpt_num_params(a);
  float *ga = malloc(n * sizeof *ga), *gb = malloc(n * sizeof *gb);
  int32_t in[2 * 48], tg[2 * 48];
  batch(in, tg, 4, 12, 29, 1);
  batch(in + 48, tg + 48, 4, 12, 29, 2);
  ck_assert_int_eq(g_be->ops->fill(g_be, ddp_gpt_grads(b), DDP_DTYPE_F32, NAN, n, NULL), DDP_OK);
  const double la = two_steps(a, 0, in, tg, 4, 12, ga);
  const double lb = two_steps(b, 1, in, tg, 4, 12, gb);
  ck_assert(la == lb);
  for (size_t i = 0; i < n; ++i)
    ck_assert_msg(ga[i] == gb[i], "grad %zu: %g vs %g", i, ga[i], gb[i]);
  free(ga);
  free(gb);
  ddp_gpt_destroy(a);
  ddp_gpt_destroy(b);
}
END_TEST

/* A vocabulary much wider than 4C and more than 1024 rows: several chunks.
 * Losses are per row, so equal; wte's gradient sums over chunks in another
 * order (bounded per tensor), and the fused arena holds a chunk of logits. */
START_TEST(test_gpt_exec_fused_chunks_match_separate_calls) {
  const ddp_gpt_config_t c = {
      .n_layer = 1, .n_head = 2, .n_embd = 16, .max_seq_len = 64, .vocab = 300};
  const int B = 40, T = 64; /* 2560 rows: chunks of 1024, 1024, 512 */
  ddp_gpt_exec_t fx = {.fused_classifier = 1};
  ddp_gpt_t *a = make(&c, B * T, DDP_DTYPE_F32, NULL);
  ddp_gpt_t *b = make(&c, B * T, DDP_DTYPE_F32, &fx);
  ck_assert(ddp_gpt_activation_bytes(b) + (size_t)(B * T - 1024) * 300 * 4 <=
            ddp_gpt_activation_bytes(a) + 4096);
  int32_t *in = malloc(sizeof(int32_t) * 2 * B * T), *tg = malloc(sizeof(int32_t) * 2 * B * T);
  batch(in, tg, B, T, 300, 3);
  batch(in + B * T, tg + B * T, B, T, 300, 4);
  assert_same_training(a, b, in, tg, B, T, 2e-5f);
  /* eval still has its full logits on the fused model */
  assert_eval_equals_train(b, in, tg, B, T);
  free(in);
  free(tg);
  ddp_gpt_destroy(a);
  ddp_gpt_destroy(b);
}
END_TEST

/* Flash attention against the matrix attention it replaces, on ragged rows
 * (flash skips each row's tail after its last target): the same losses and
 * gradients up to fp32 summation order, a smaller arena, and an eval loss
 * equal to the training loss. */
START_TEST(test_gpt_exec_flash_matches_matrix_attention) {
  const ddp_gpt_config_t c = {
      .n_layer = 2, .n_head = 2, .n_embd = 32, .max_seq_len = 40, .vocab = 61};
  enum { B = 6, T = 37 };
  ddp_gpt_exec_t mx = {.attention = DDP_GPT_ATTENTION_MATRIX};
  ddp_gpt_exec_t fx = {.attention = DDP_GPT_ATTENTION_FLASH, .fused_classifier = 1};
  ddp_gpt_t *a = make(&c, B * T, DDP_DTYPE_F32, &mx);
  ddp_gpt_t *b = make(&c, B * T, DDP_DTYPE_F32, &fx);
  ck_assert_str_eq(ddp_gpt_attention_name(a), "matrix");
  ck_assert_str_eq(ddp_gpt_attention_name(b), "flash");
  ck_assert(ddp_gpt_activation_bytes(b) < ddp_gpt_activation_bytes(a));
  int32_t in[2 * B * T], tg[2 * B * T];
  batch(in, tg, B, T, 61, 7);
  batch(in + B * T, tg + B * T, B, T, 61, 8);
  for (int i = 0; i < T; ++i) tg[2 * T + i] = -1; /* a row with no target at all */
  assert_same_training(a, b, in, tg, B, T, 1e-5f);
  assert_eval_equals_train(b, in, tg, B, T);
  ddp_gpt_destroy(a);
  ddp_gpt_destroy(b);
}
END_TEST

START_TEST(test_gpt_exec_rejects_bad_use) {
  const ddp_gpt_config_t c = {
      .n_layer = 1, .n_head = 2, .n_embd = 16, .max_seq_len = 64, .vocab = 300};
  ddp_gpt_exec_t fx = {.fused_classifier = 1};
  ddp_gpt_t *m = make(&c, 2048, DDP_DTYPE_F32, &fx);
  int32_t *in = malloc(sizeof(int32_t) * 2048), *tg = malloc(sizeof(int32_t) * 2048);
  batch(in, tg, 32, 64, 300, 0);
  ddp_test_log_start();
  ddp_gpt_exec_t bad = {.recompute = 2};
  ck_assert_int_eq(ddp_gpt_set_exec(m, &bad), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_gpt_exec(m)->fused_classifier, 1); /* unchanged */
  bad = (ddp_gpt_exec_t){.fused_classifier = -1};
  ck_assert_int_eq(ddp_gpt_set_exec(m, &bad), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_gpt_set_exec(NULL, &fx), DDP_ERR_INVALID_ARG);
  bad = (ddp_gpt_exec_t){.attention = (ddp_gpt_attention_t)7};
  ck_assert_int_eq(ddp_gpt_set_exec(m, &bad), DDP_ERR_INVALID_ARG);
  /* 2048 rows need their full logits; the fused layout holds 1024 */
  ck_assert_int_eq(ddp_gpt_forward(m, in, tg, 32, 64, 1, 1.0f), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_gpt_forward_backward(m, in, NULL, 32, 64, 1.0f, 0, 0), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "recompute must be 0 or 1, not 2");
  ddp_assert_contains(log, "fused_classifier must be 0 or 1, not -1");
  ddp_assert_contains(log, "needs their full logits");
  ddp_assert_contains(log, "unknown attention kind 7");
  ddp_assert_contains(log, "training needs targets");
  free(log);
  /* a small batch fits one chunk: the separate calls still work */
  ck_assert_int_eq(ddp_gpt_forward(m, in, tg, 8, 64, 1, 1.0f), DDP_OK);
  ck_assert_int_eq(ddp_gpt_backward(m, 0, 0), DDP_OK);
  free(in);
  free(tg);
  ddp_gpt_destroy(m);
}
END_TEST

static Suite *gpt_exec_suite(void) {
  Suite *s = suite_create("gpt_exec");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_gpt_exec_recompute_is_bit_identical_fp32);
  tcase_add_test(tc, test_gpt_exec_recompute_is_bit_identical_bf16);
  tcase_add_test(tc, test_gpt_exec_fused_one_chunk_is_bit_identical);
  tcase_add_test(tc, test_gpt_exec_fused_chunks_match_separate_calls);
  tcase_add_test(tc, test_gpt_exec_flash_matches_matrix_attention);
  tcase_add_test(tc, test_gpt_exec_rejects_bad_use);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(gpt_exec_suite());
}
