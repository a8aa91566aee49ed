/* Sampling and generation (model/gpt_generate.h): the pick rule (greedy,
 * temperature, top-k, top-p, ties, the draw's position in the kept mass),
 * option checks naming the flag, and the loop over the decoder: the same
 * rng gives the same tokens, another seed others, and a sequence stops at
 * the end-of-text token (forced through the LM head) without emitting it;
 * --sample-every refuses a model that is not a GPT and is off at 0. */
#include <math.h>

#include "check_util.h"
#include "model/gpt.h"
#include "model/gpt_generate.h"
#include "train/sample_every.h"

static ddp_backend_t *g_be;

static void setup(void) {
  g_be = ddp_test_cpu_backend();
}
static void teardown(void) {
  ddp_backend_destroy(g_be);
}

static ddp_generate_opts_t opts(float temperature, int top_k, float top_p) {
  return (ddp_generate_opts_t){
      .max_new_tokens = 1, .temperature = temperature, .top_k = top_k, .top_p = top_p, .eot = -1};
}

START_TEST(test_pick_rules) {
  /* probabilities at temperature 1: 0.1, 0.2, 0.3, 0.4 */
  const float l[4] = {logf(0.1f), logf(0.2f), logf(0.3f), logf(0.4f)};
  float scratch[8];
  ddp_generate_opts_t o = opts(0.0f, 0, 1.0f);
  ck_assert_int_eq(ddp_generate_pick(l, 4, &o, 0.99f, scratch), 3); /* greedy */
  o = opts(1.0f, 0, 1.0f);
  /* sorted 3 (0.4), 2 (0.3), 1 (0.2), 0 (0.1): cumulative 0.4 0.7 0.9 1 */
  ck_assert_int_eq(ddp_generate_pick(l, 4, &o, 0.0f, scratch), 3);
  ck_assert_int_eq(ddp_generate_pick(l, 4, &o, 0.5f, scratch), 2);
  ck_assert_int_eq(ddp_generate_pick(l, 4, &o, 0.8f, scratch), 1);
  ck_assert_int_eq(ddp_generate_pick(l, 4, &o, 0.95f, scratch), 0);
  o = opts(1.0f, 2, 1.0f); /* top-2: 3 and 2, renormalised 4/7, 3/7 */
  ck_assert_int_eq(ddp_generate_pick(l, 4, &o, 0.55f, scratch), 3);
  ck_assert_int_eq(ddp_generate_pick(l, 4, &o, 0.6f, scratch), 2);
  ck_assert_int_eq(ddp_generate_pick(l, 4, &o, 0.999f, scratch), 2);
  o = opts(1.0f, 0, 0.65f); /* nucleus: 0.4 + 0.3 reaches 0.65 */
  ck_assert_int_eq(ddp_generate_pick(l, 4, &o, 0.999f, scratch), 2);
  o = opts(1.0f, 0, 0.3f); /* 0.4 alone reaches it */
  ck_assert_int_eq(ddp_generate_pick(l, 4, &o, 0.999f, scratch), 3);
  o = opts(1.0f, 1, 1.0f);
  ck_assert_int_eq(ddp_generate_pick(l, 4, &o, 0.999f, scratch), 3);
  /* a high temperature flattens: u = 0.95 now falls on the least likely */
  o = opts(100.0f, 0, 1.0f);
  ck_assert_int_eq(ddp_generate_pick(l, 4, &o, 0.99f, scratch), 0);
  /* ties: the lower token first */
  const float tie[3] = {1.0f, 1.0f, 1.0f};
  o = opts(1.0f, 0, 1.0f);
  ck_assert_int_eq(ddp_generate_pick(tie, 3, &o, 0.1f, scratch), 0);
  ck_assert_int_eq(ddp_generate_pick(tie, 3, &o, 0.5f, scratch), 1);
  o = opts(0.0f, 0, 1.0f);
  ck_assert_int_eq(ddp_generate_pick(tie, 3, &o, 0.5f, scratch), 0);
}
END_TEST

START_TEST(test_opts_validate_names_the_flag) {
  const struct {
    ddp_generate_opts_t o;
    const char *text;
  } bad[] = {
      {{.max_new_tokens = 0, .temperature = 1, .top_p = 1}, "--max-new-tokens 0"},
      {{.max_new_tokens = 1, .temperature = -0.5f, .top_p = 1}, "--temperature -0.5"},
      {{.max_new_tokens = 1, .temperature = NAN, .top_p = 1}, "--temperature nan"},
      {{.max_new_tokens = 1, .temperature = 1, .top_k = -1, .top_p = 1}, "--top-k -1"},
      {{.max_new_tokens = 1, .temperature = 1, .top_p = 0}, "--top-p 0: must be in (0, 1]"},
      {{.max_new_tokens = 1, .temperature = 1, .top_p = 1.5f}, "--top-p 1.5"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    ddp_test_log_start();
    ck_assert_int_eq(ddp_generate_opts_validate(&bad[i].o), DDP_ERR_INVALID_ARG);
    char *log = ddp_test_log_stop();
    ddp_assert_contains(log, bad[i].text);
    free(log);
  }
  const ddp_generate_opts_t ok = {.max_new_tokens = 1, .temperature = 0, .top_p = 1};
  ck_assert_int_eq(ddp_generate_opts_validate(&ok), DDP_OK);
}
END_TEST

static const ddp_gpt_config_t k_cfg = {
    .n_layer = 1, .n_head = 2, .n_embd = 16, .max_seq_len = 24, .vocab = 20};

static ddp_gpt_t *make(void) {
  ddp_gpt_t *m = NULL;
  ck_assert_int_eq(ddp_gpt_create(&m, g_be, &k_cfg, 64), DDP_OK);
  ck_assert_int_eq(ddp_gpt_init_weights(m, 3), DDP_OK);
  float *p = ddp_gpt_params(m); /* CPU memory */
  for (size_t i = 0; i < ddp_gpt_num_params(m); ++i)
    p[i] *= 3.0f; /* logits from a few units apart */
  return m;
}

/* Tokens of B = 3 sequences, 10 new tokens at most each. */
static void generate(ddp_gpt_t *m, uint64_t seed, int32_t eot, int32_t *out, int *n) {
  const int32_t prompt[2] = {4, 5};
  const ddp_generate_opts_t o = {
      .max_new_tokens = 10, .temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .eot = eot};
  ddp_rng_t rng;
  ddp_rng_init(&rng, seed, 7);
  ddp_gpt_decoder_t *d = NULL;
  ck_assert_int_eq(ddp_gpt_decoder_create(&d, m, g_be, 3), DDP_OK);
  ck_assert_int_eq(ddp_gpt_generate(d, prompt, 2, &o, &rng, out, n), DDP_OK);
  ddp_gpt_decoder_destroy(d);
}

START_TEST(test_generate_is_a_function_of_the_seed) {
  ddp_gpt_t *m = make();
  int32_t a[30] = {0}, b[30] = {0}, c[30] = {0};
  int na[3], nb[3], nc[3];
  generate(m, 1, -1, a, na);
  generate(m, 1, -1, b, nb);
  generate(m, 2, -1, c, nc);
  for (int i = 0; i < 3; ++i) ck_assert_int_eq(na[i], 10);
  ck_assert_mem_eq(a, b, sizeof a);
  ck_assert_msg(memcmp(a, c, sizeof a) != 0, "seeds 1 and 2 drew the same tokens");
  /* the three sequences draw from different positions of the stream */
  ck_assert_msg(
      memcmp(a, a + 10, sizeof(int32_t) * 10) != 0 || memcmp(a, a + 20, sizeof(int32_t) * 10) != 0,
      "every sequence drew the same tokens");
  ddp_gpt_destroy(m);
}
END_TEST

START_TEST(test_generate_stops_at_eot) {
  ddp_gpt_t *m = make();
  int32_t free_run[30], out[30];
  int n_free[3], n[3];
  generate(m, 1, -1, free_run, n_free);
  /* the token sequence 0 drew third becomes end-of-text: it stops there */
  const int32_t eot = free_run[2];
  generate(m, 1, eot, out, n);
  int first = 0;
  while (first < 10 && free_run[first] != eot) ++first;
  ck_assert_int_gt(first, 0); /* it stops mid-way, not at once */
  ck_assert_int_eq(n[0], first);
  ck_assert_mem_eq(out, free_run, sizeof(int32_t) * (size_t)first);

  /* an LM head that always prefers token 19: with it as EOT nothing is emitted */
  const int C = k_cfg.n_embd;
  float *p = ddp_gpt_params(m);
  for (int t = 0; t < ddp_gpt_num_tensors(m); ++t) {
    const ddp_param_t *d = ddp_gpt_tensor(m, t);
    if (!strcmp(d->name, "transformer.ln_f.weight")) memset(p + d->offset, 0, sizeof(float) * C);
    if (!strcmp(d->name, "transformer.ln_f.bias"))
      for (int i = 0; i < C; ++i) p[d->offset + i] = 1.0f;
    if (!strcmp(d->name, "transformer.wte.weight"))
      for (int i = 0; i < C; ++i) p[d->offset + (size_t)19 * C + i] = 5.0f;
  }
  generate(m, 1, 19, out, n);
  for (int b = 0; b < 3; ++b) ck_assert_int_eq(n[b], 0);
  ddp_gpt_destroy(m);
}
END_TEST

START_TEST(test_generate_stops_at_full_context) {
  ddp_gpt_t *m = make();
  int32_t prompt[24] = {0}, out[10];
  int n;
  const ddp_generate_opts_t o = {.max_new_tokens = 10, .temperature = 0, .top_p = 1.0f, .eot = -1};
  ddp_rng_t rng;
  ddp_rng_init(&rng, 1, 7);
  ddp_gpt_decoder_t *d = NULL;
  ck_assert_int_eq(ddp_gpt_decoder_create(&d, m, g_be, 1), DDP_OK);
  /* 20 prompt tokens: 4 more fill the context, the last from its logits */
  ck_assert_int_eq(ddp_gpt_generate(d, prompt, 20, &o, &rng, out, &n), DDP_OK);
  ck_assert_int_eq(n, 5);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_gpt_generate(d, prompt, 25, &o, &rng, out, &n), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "the prompt is 25 tokens; the model's context holds 1..24");
  free(log);
  ddp_gpt_decoder_destroy(d);
  ddp_gpt_destroy(m);
}
END_TEST

/* A non-finite weight makes non-finite logits: refused, not sampled. */
START_TEST(test_generate_refuses_non_finite_logits) {
  ddp_gpt_t *m = make();
  float *p = ddp_gpt_params(m);
  for (int t = 0; t < ddp_gpt_num_tensors(m); ++t)
    if (!strcmp(ddp_gpt_tensor(m, t)->name, "transformer.ln_f.bias"))
      p[ddp_gpt_tensor(m, t)->offset] = NAN;
  const int32_t prompt[1] = {3};
  int32_t out[4];
  int n;
  const ddp_generate_opts_t o = {
      .max_new_tokens = 4, .temperature = 1.0f, .top_p = 1.0f, .eot = -1};
  ddp_rng_t rng;
  ddp_rng_init(&rng, 1, 7);
  ddp_gpt_decoder_t *d = NULL;
  ck_assert_int_eq(ddp_gpt_decoder_create(&d, m, g_be, 1), DDP_OK);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_gpt_generate(d, prompt, 1, &o, &rng, out, &n), DDP_ERR_NUMERIC);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "generate: sequence 0, new token 0: the logit of token 0 is nan");
  free(log);
  ddp_gpt_decoder_destroy(d);
  ddp_gpt_destroy(m);
}
END_TEST

START_TEST(test_sample_every_needs_a_gpt) {
  ddp_options_t o;
  ck_assert_int_eq(ddp_options_defaults(&o), DDP_OK);
  const ddp_model_ops_t other = {.name = "mlp"};
  ddp_model_t m = {.ops = &other};
  ddp_sample_every_t s;
  /* off: nothing is looked at */
  ck_assert_int_eq(ddp_sample_every_init(&s, &o, 0, &m, g_be), DDP_OK);
  ck_assert_ptr_null(s.dec);
  ck_assert_int_eq(ddp_sample_every_run(&s, 1), DDP_OK);
  o.sample_every = 10;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_sample_every_init(&s, &o, 0, &m, g_be), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "--sample-every: --model mlp is not a GPT");
  free(log);
}
END_TEST

static Suite *generate_suite(void) {
  Suite *s = suite_create("generate");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_pick_rules);
  tcase_add_test(tc, test_opts_validate_names_the_flag);
  tcase_add_test(tc, test_generate_is_a_function_of_the_seed);
  tcase_add_test(tc, test_generate_stops_at_eot);
  tcase_add_test(tc, test_generate_stops_at_full_context);
  tcase_add_test(tc, test_generate_refuses_non_finite_logits);
  tcase_add_test(tc, test_sample_every_needs_a_gpt);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(generate_suite());
}
