/* Sampling and generation (model/gpt_generate.h): the pick rule (greedy,
 * temperature, top-k, top-p, ties, the draw's position in the kept mass),
 * option checks naming the flag, and the loop over the decoder: the same
 * rng gives the same tokens, another seed others, and a sequence stops at
 * the end-of-text token (forced through the LM head) without emitting it;
 * --sample-every refuses a model that is not a GPT and is off at 0, logs
 * text through --tokenizer (the ids it logs without one, decoded and
 * escaped onto one line) and refuses a tokenizer of another vocabulary;
 * the escaping; --tokenizer's check before the ranks start, each refusal
 * naming the flag and the cause. */
#include <math.h>
#include <unistd.h>

#include "check_util.h"
#include "ddptrain/data.h"
#include "data/bpe.h"
#include "model/gpt.h"
#include "model/gpt_generate.h"
#include "train/sample_every.h"
#include "train/sample_tokenizer.h"

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
  ck_assert_int_eq(ddp_sample_every_init(&s, &o, 0, &m, g_be, 0), DDP_OK);
  ck_assert_ptr_null(s.dec);
  ck_assert_int_eq(ddp_sample_every_run(&s, 1), DDP_OK);
  o.sample_every = 10;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_sample_every_init(&s, &o, 0, &m, g_be, 0), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "--sample-every: --model mlp is not a GPT");
  free(log);
}
END_TEST

START_TEST(test_sample_escape) {
  const struct {
    const char *in, *want;
  } cases[] = {
      {"plain text, 42 ~!", "plain text, 42 ~!"},
      {"a\nb\tc\\d", "a\\nb\\tc\\\\d"},
      {"\x01\x1b\x7f", "\\x01\\x1b\\x7f"},
      /* printable UTF-8 as is: U+00E9, U+20AC, U+1F600 */
      {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
      /* a C1 control, a lone continuation byte, a character cut short, an
       * overlong '/', a surrogate, beyond U+10FFFF */
      {"\xc2\x85", "\\xc2\\x85"},
      {"\x80x", "\\x80x"},
      {"\xe2\x82", "\\xe2\\x82"},
      {"\xc0\xaf", "\\xc0\\xaf"},
      {"\xed\xa0\x80", "\\xed\\xa0\\x80"},
      {"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},
  };
  char out[64];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    const size_t len = strlen(cases[i].in);
    ck_assert_uint_eq(ddp_sample_escape(cases[i].in, len, out, sizeof out), len);
    ck_assert_str_eq(out, cases[i].want);
  }
  /* a full buffer ends at a whole piece: no cut escape or character */
  ck_assert_uint_eq(ddp_sample_escape("abcdef", 6, out, 4), 3);
  ck_assert_str_eq(out, "abc");
  ck_assert_uint_eq(ddp_sample_escape("a\xc3\xa9", 3, out, 3), 1);
  ck_assert_str_eq(out, "a");
  ck_assert_uint_eq(ddp_sample_escape("a\x01", 2, out, 4), 1);
  ck_assert_str_eq(out, "a");
  /* NUL bytes inside the text are escaped, not an end */
  ck_assert_uint_eq(ddp_sample_escape("a\0b", 3, out, sizeof out), 3);
  ck_assert_str_eq(out, "a\\x00b");
}
END_TEST

/* tests/data/bpe: a 600-token GPT-2 style BPE whose end-of-text is 0 */
static void fixture(char *buf, size_t len) {
  const char *src = getenv("top_srcdir");
  snprintf(buf, len, "%s/tests/data/bpe", src ? src : ".");
}

/* The text of the first "sample: " line of log (up to its newline). */
static char *sample_of(char *log) {
  char *p = strstr(log, "| sample: ");
  ck_assert_ptr_nonnull(p);
  p += strlen("| sample: ");
  p[strcspn(p, "\n")] = '\0';
  return p;
}

START_TEST(test_sample_every_decodes_with_the_tokenizer) {
  char fix[512];
  fixture(fix, sizeof fix);
  ddp_gpt_config_t cfg = k_cfg;
  cfg.vocab = 600;
  ddp_gpt_t *g = NULL;
  ck_assert_int_eq(ddp_gpt_create(&g, g_be, &cfg, 64), DDP_OK);
  ck_assert_int_eq(ddp_gpt_init_weights(g, 3), DDP_OK);
  const ddp_model_ops_t gpt = {.name = "gpt"};
  ddp_model_t m = {.ops = &gpt, .impl = g};
  ddp_options_t o;
  ck_assert_int_eq(ddp_options_defaults(&o), DDP_OK);
  o.sample_every = 1;
  ddp_sample_every_t s;

  /* without a tokenizer: ids, and set-up says how to see text */
  ddp_test_log_start();
  ck_assert_int_eq(ddp_sample_every_init(&s, &o, 0, &m, g_be, 0), DDP_OK);
  ck_assert_int_eq(ddp_sample_every_run(&s, 3), DDP_OK);
  ddp_sample_every_destroy(&s);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "samples are logged as token ids (give --tokenizer DIR to see text)");
  int32_t ids[SAMPLE_TOKENS];
  size_t n = 0;
  for (char *p = sample_of(log), *end; *p; p = end) {
    const long v = strtol(p, &end, 10);
    ck_assert_ptr_ne(end, p);
    ck_assert_uint_lt(n, SAMPLE_TOKENS);
    ck_assert(v > 0 && v < 600); /* 0 is the end-of-text, never emitted */
    ids[n++] = (int32_t)v;
  }
  ck_assert_uint_gt(n, 4);
  free(log);

  /* with it: the same draw (same seed, step and start token), as text */
  snprintf(o.tokenizer, sizeof o.tokenizer, "%s", fix);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_sample_every_init(&s, &o, 0, &m, g_be, 0), DDP_OK);
  ck_assert_int_eq(ddp_sample_every_run(&s, 3), DDP_OK);
  ddp_sample_every_destroy(&s);
  log = ddp_test_log_stop();
  ck_assert_ptr_null(strstr(log, "give --tokenizer"));
  ddp_bpe_t *bpe = NULL;
  ck_assert_int_eq(ddp_bpe_load(fix, &bpe), DDP_OK);
  char *bytes = NULL, want[2048];
  size_t len = 0;
  ck_assert_int_eq(ddp_bpe_decode(bpe, ids, n, &bytes, &len), DDP_OK);
  ck_assert_uint_eq(ddp_sample_escape(bytes, len, want, sizeof want), len);
  ck_assert_str_eq(sample_of(log), want);
  free(bytes);
  ddp_bpe_free(bpe);
  free(log);

  /* a tokenizer of another vocabulary is refused at set-up as well */
  cfg.vocab = 20;
  ddp_gpt_t *small = NULL;
  ck_assert_int_eq(ddp_gpt_create(&small, g_be, &cfg, 64), DDP_OK);
  m.impl = small;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_sample_every_init(&s, &o, 0, &m, g_be, 0), DDP_ERR_INVALID_ARG);
  ddp_sample_every_destroy(&s);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "has 600 tokens but the model's vocabulary is 20");
  free(log);
  ddp_gpt_destroy(small);
  ddp_gpt_destroy(g);
}
END_TEST

/* ddp_sample_tokenizer_check on o: its status, and the log must hold text. */
static void expect_check(const ddp_options_t *o, ddp_status_t want, const char *text) {
  ddp_test_log_start();
  const ddp_status_t st = ddp_sample_tokenizer_check(o);
  char *log = ddp_test_log_stop();
  ck_assert_msg(st == want, "status %d, want %d; log: %s", (int)st, (int)want, log);
  if (text) ddp_assert_contains(log, text);
  free(log);
}

START_TEST(test_sample_tokenizer_check) {
  char fix[512], path[1024], dir[] = "/tmp/ddp_tok_XXXXXX";
  fixture(fix, sizeof fix);
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ddp_options_t o;
  ck_assert_int_eq(ddp_options_defaults(&o), DDP_OK);
  expect_check(&o, DDP_OK, NULL); /* no --tokenizer: nothing to check */
  snprintf(o.tokenizer, sizeof o.tokenizer, "%s", fix);
  /* the built-in data is byte-level */
  expect_check(&o, DDP_ERR_INVALID_ARG,
               "has 600 tokens, but the model's vocabulary is 257 (the built-in data's, "
               "byte-level): it is not the tokenizer the data was made with");
  /* shards of its vocabulary and end-of-text (0) */
  const int32_t tokens[6] = {0, 5, 6, 7, 0, 9};
  snprintf(path, sizeof path, "%s/good_000.bin", dir);
  ck_assert_int_eq(ddp_shard_write(path, tokens, 6, 0, 600), DDP_OK);
  snprintf(o.data, sizeof o.data, "%s/good_*.bin", dir);
  expect_check(&o, DDP_OK, NULL);
  /* the same size, but documents end with another token */
  snprintf(path, sizeof path, "%s/other_000.bin", dir);
  ck_assert_int_eq(ddp_shard_write(path, tokens + 1, 5, 9, 600), DDP_OK);
  snprintf(o.data, sizeof o.data, "%s/other_*.bin", dir);
  expect_check(&o, DDP_ERR_INVALID_ARG, "ends a document with token 0, but the data with 9");
  /* shards that cannot be read are the data's own error */
  snprintf(o.data, sizeof o.data, "%s/none_*.bin", dir);
  expect_check(&o, DDP_ERR_IO, "no file matches");
  o.data[0] = '\0';
  /* the directory: missing, a file, one without the tokenizer's files */
  snprintf(o.tokenizer, sizeof o.tokenizer, "%s/none", dir);
  snprintf(path, sizeof path, "option --tokenizer: %s/none: No such file or directory", dir);
  expect_check(&o, DDP_ERR_INVALID_ARG, path);
  snprintf(o.tokenizer, sizeof o.tokenizer, "%s/vocab.json", fix);
  expect_check(&o, DDP_ERR_INVALID_ARG, "vocab.json is not a directory");
  snprintf(o.tokenizer, sizeof o.tokenizer, "%s", dir);
  snprintf(path, sizeof path, "cannot read '%s/vocab.json'", dir);
  expect_check(&o, DDP_ERR_INVALID_ARG, path);
  snprintf(path, sizeof path, "option --tokenizer: %s is not a GPT-2 tokenizer this run can read",
           dir);
  expect_check(&o, DDP_ERR_INVALID_ARG, path);
  /* only the GPT has tokens to decode */
  snprintf(o.tokenizer, sizeof o.tokenizer, "%s", fix);
  snprintf(o.model, sizeof o.model, "mlp");
  expect_check(&o, DDP_ERR_INVALID_ARG, "option --tokenizer: --model mlp is not a GPT");
  snprintf(path, sizeof path, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(path), 0);
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
  tcase_add_test(tc, test_sample_escape);
  tcase_add_test(tc, test_sample_every_decodes_with_the_tokenizer);
  tcase_add_test(tc, test_sample_tokenizer_check);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(generate_suite());
}
