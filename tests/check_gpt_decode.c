/* The decode path (model/gpt_decode.h) against the full forward: for a
 * random small GPT, the logits of every position from incremental decoding
 * (a prefill, then one token at a time through the KV cache) equal the eval
 * forward's logits at that position (fp32: within 1e-5 of the row's scale);
 * the attention_decode op equals row t of attention_fwd under fp32 and
 * bf16; misuse (a step before a prefill, a full cache, bad tokens and
 * sizes) is refused with a message naming the cause. */
#include <math.h>

#include "check_util.h"
#include "model/gpt.h"
#include "model/gpt_decode.h"

static ddp_backend_t *g_be;

static void setup(void) {
  g_be = ddp_test_cpu_backend();
}
static void teardown(void) {
  ddp_backend_destroy(g_be);
}

static const ddp_gpt_config_t k_cfg = {
    .n_layer = 2, .n_head = 4, .n_embd = 32, .max_seq_len = 12, .vocab = 37};

static ddp_gpt_t *make(void) {
  ddp_gpt_t *m = NULL;
  ck_assert_int_eq(ddp_gpt_create(&m, g_be, &k_cfg, 64), DDP_OK);
  ck_assert_int_eq(ddp_gpt_init_weights(m, 5), DDP_OK);
  /* larger weights than GPT-2's init, so attention is far from uniform
   * and a wrong position or key would show */
  float *p = ddp_gpt_params(m); /* CPU memory */
  for (size_t i = 0; i < ddp_gpt_num_params(m); ++i) p[i] *= 8.0f;
  return m;
}

static void assert_rows_close(const float *want, const float *got, int V, float tol,
                              const char *what, int b, int t) {
  float scale = 0;
  for (int v = 0; v < V; ++v) scale = fmaxf(scale, fabsf(want[v]));
  ck_assert_msg(scale > 0, "%s: zero logits", what);
  for (int v = 0; v < V; ++v)
    ck_assert_msg(fabsf(want[v] - got[v]) <= tol * scale, "%s b=%d t=%d v=%d: %.9g vs %.9g", what,
                  b, t, v, want[v], got[v]);
}

/* Prefill of `prompt` tokens, then steps to the end of T: every position's
 * logits against the full forward's. */
static void check_decode(int prompt) {
  enum { B = 2, T = 12 };
  const int V = k_cfg.vocab;
  ddp_gpt_t *m = make();
  int32_t tok[B * T];
  for (int i = 0; i < B * T; ++i) tok[i] = (i * 11 + 3 + i / T) % V;
  ck_assert_int_eq(ddp_gpt_forward(m, tok, NULL, B, T, 0, 0.0f), DDP_OK);
  float *full = malloc(sizeof(float) * B * T * V), *got = malloc(sizeof(float) * B * V);
  ck_assert_int_eq(ddp_gpt_copy_logits_to_host(m, full, B * T), DDP_OK);

  ddp_gpt_decoder_t *d = NULL;
  ck_assert_int_eq(ddp_gpt_decoder_create(&d, m, g_be, B), DDP_OK);
  int32_t prompt_tok[B * T], step_tok[B];
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < prompt; ++t) prompt_tok[b * prompt + t] = tok[b * T + t];
  ck_assert_int_eq(ddp_gpt_decoder_prefill(d, prompt_tok, prompt, got), DDP_OK);
  for (int t = prompt - 1; t < T; ++t) {
    if (t >= prompt) {
      for (int b = 0; b < B; ++b) step_tok[b] = tok[b * T + t];
      ck_assert_int_eq(ddp_gpt_decoder_step(d, step_tok, got), DDP_OK);
    }
    ck_assert_int_eq(ddp_gpt_decoder_length(d), t + 1);
    for (int b = 0; b < B; ++b)
      assert_rows_close(full + ((size_t)b * T + t) * V, got + (size_t)b * V, V, 1e-5f, "decode", b,
                        t);
  }
  /* the cache is full: one more step is refused */
  ddp_test_log_start();
  ck_assert_int_eq(ddp_gpt_decoder_step(d, step_tok, got), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "the cache is full");
  free(log);
  ddp_gpt_decoder_destroy(d);
  free(full);
  free(got);
  ddp_gpt_destroy(m);
}

START_TEST(test_decode_one_token_prompt_matches_forward) {
  check_decode(1);
}
END_TEST

START_TEST(test_decode_after_prefill_matches_forward) {
  check_decode(5);
  check_decode(12); /* the prefill alone covers the whole context */
}
END_TEST

/* A second prefill starts over: the same logits as a fresh decoder. */
START_TEST(test_decode_prefill_restarts) {
  ddp_gpt_t *m = make();
  const int V = k_cfg.vocab;
  float a[37], b[37];
  const int32_t p1[3] = {1, 2, 3}, p2[2] = {7, 8}, next = 9;
  ddp_gpt_decoder_t *d = NULL;
  ck_assert_int_eq(ddp_gpt_decoder_create(&d, m, g_be, 1), DDP_OK);
  ck_assert_int_eq(ddp_gpt_decoder_prefill(d, p2, 2, a), DDP_OK);
  ck_assert_int_eq(ddp_gpt_decoder_step(d, &next, a), DDP_OK);
  ck_assert_int_eq(ddp_gpt_decoder_prefill(d, p1, 3, b), DDP_OK);
  ck_assert_int_eq(ddp_gpt_decoder_prefill(d, p2, 2, b), DDP_OK);
  ck_assert_int_eq(ddp_gpt_decoder_step(d, &next, b), DDP_OK);
  ck_assert_int_eq(ddp_gpt_decoder_length(d), 3);
  ck_assert_mem_eq(a, b, sizeof(float) * V);
  ddp_gpt_decoder_destroy(d);
  ddp_gpt_destroy(m);
}
END_TEST

/* attention_decode at t over a cache of Tc > T rows equals row t of
 * attention_fwd over the first T rows. */
static void check_op(ddp_dtype_t dt, float tol) {
  enum { B = 2, T = 9, Tc = 11, C = 24, NH = 3 };
  const ddp_nn_ops_t *nn = &ddp_nn_cpu_ops;
  const size_t es = ddp_dtype_size(dt);
  float *qkv32 = malloc(sizeof(float) * B * Tc * 3 * C);
  for (int i = 0; i < B * Tc * 3 * C; ++i) qkv32[i] = sinf(0.37f * (float)i) * 2.0f;
  void *cache = malloc(es * B * Tc * 3 * C), *dense = malloc(es * B * T * 3 * C);
  ck_assert_int_eq(ddp_convert_host(cache, dt, qkv32, DDP_DTYPE_F32, (size_t)B * Tc * 3 * C),
                   DDP_OK);
  for (int b = 0; b < B; ++b)
    memcpy((char *)dense + es * b * T * 3 * C, (char *)cache + es * b * Tc * 3 * C, es * T * 3 * C);
  ck_assert_int_eq(nn->reserve(g_be, dt, B * T, C, 64), DDP_OK);
  void *full = malloc(es * B * T * C), *row = malloc(es * B * C);
  ck_assert_int_eq(nn->attention_fwd(g_be, dt, full, NULL, dense, B, T, C, NH, NULL), DDP_OK);
  float want[C], got[C];
  for (int t = 0; t < T; ++t) {
    ck_assert_int_eq(nn->attention_decode(g_be, dt, row, cache, B, Tc, t, C, NH, NULL), DDP_OK);
    for (int b = 0; b < B; ++b) {
      ck_assert_int_eq(
          ddp_convert_host(want, DDP_DTYPE_F32, (char *)full + es * (b * T + t) * C, dt, C),
          DDP_OK);
      ck_assert_int_eq(ddp_convert_host(got, DDP_DTYPE_F32, (char *)row + es * b * C, dt, C),
                       DDP_OK);
      assert_rows_close(want, got, C, tol, ddp_dtype_name(dt), b, t);
    }
  }
  nn->release(g_be);
  free(qkv32);
  free(cache);
  free(dense);
  free(full);
  free(row);
}

START_TEST(test_attention_decode_op_matches_attention_fwd) {
  check_op(DDP_DTYPE_F32, 1e-5f);
  /* half: both round one fp32 result; the sums' order may differ by an ulp */
  check_op(DDP_DTYPE_BF16, 1.0f / 64);
  check_op(DDP_DTYPE_F16, 1.0f / 512);
}
END_TEST

START_TEST(test_decode_rejects_misuse) {
  ddp_gpt_t *m = make();
  float logits[37];
  const int32_t bad = 37, ok[13] = {0};
  ddp_gpt_decoder_t *d = NULL;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_gpt_decoder_create(&d, m, g_be, 0), DDP_ERR_INVALID_ARG);
  ck_assert_ptr_null(d);
  ck_assert_int_eq(ddp_gpt_decoder_create(&d, m, g_be, 1), DDP_OK);
  ck_assert_int_eq(ddp_gpt_decoder_step(d, ok, logits), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_gpt_decoder_prefill(d, &bad, 1, logits), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_gpt_decoder_prefill(d, ok, 13, logits), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_gpt_decoder_prefill(d, ok, 0, logits), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(
      ddp_nn_cpu_ops.attention_decode(g_be, DDP_DTYPE_F32, logits, logits, 1, 2, 2, 4, 2, NULL),
      DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "0 sequences");
  ddp_assert_contains(log, "a step before any prefill");
  ddp_assert_contains(log, "token 37 is outside the vocabulary [0, 37)");
  ddp_assert_contains(log, "a prompt of 13 tokens (the model takes 1..12)");
  ddp_assert_contains(log, "a prompt of 0 tokens");
  ddp_assert_contains(log, "attention_decode: sizes B=1 Tc=2 t=2");
  free(log);
  ddp_gpt_decoder_destroy(d);
  ddp_gpt_destroy(m);
}
END_TEST

static Suite *gpt_decode_suite(void) {
  Suite *s = suite_create("gpt_decode");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_decode_one_token_prompt_matches_forward);
  tcase_add_test(tc, test_decode_after_prefill_matches_forward);
  tcase_add_test(tc, test_decode_prefill_restarts);
  tcase_add_test(tc, test_attention_decode_op_matches_attention_fwd);
  tcase_add_test(tc, test_decode_rejects_misuse);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(gpt_decode_suite());
}
