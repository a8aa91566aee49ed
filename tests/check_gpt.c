/* The GPT model's own contracts, without PyTorch: configuration and batch
 * errors, GPT-2 initialisation statistics, the parameter layout and the
 * gradient hook's order, overwrite-then-accumulate gradients, eval equal to
 * training forward, and no allocation per step. */
#include <math.h>

#include "check_util.h"
#include "model/gpt.h"

static ddp_backend_t *g_be;
static const ddp_gpt_config_t k_cfg = {
    .n_layer = 2, .n_head = 2, .n_embd = 16, .max_seq_len = 12, .vocab = 29};

static void setup(void) {
  g_be = ddp_test_cpu_backend();
}
static void teardown(void) {
  ddp_backend_destroy(g_be);
}

static ddp_gpt_t *make(void) {
  ddp_gpt_t *m = NULL;
  ck_assert_int_eq(ddp_gpt_create(&m, g_be, &k_cfg, 48), DDP_OK);
  ck_assert_int_eq(ddp_gpt_init_weights(m, 3), DDP_OK);
  return m;
}

static void batch(int32_t *in, int32_t *tg, int B, int T) {
  for (int i = 0; i < B * T; ++i) {
    in[i] = (i * 7 + 3) % k_cfg.vocab;
    tg[i] = (i % T) < T - 1 - (i / T) ? (i * 5 + 1) % k_cfg.vocab : -1; /* ragged rows */
  }
}

START_TEST(test_gpt_rejects_bad_configs) {
  ddp_gpt_t *m = NULL;
  ddp_gpt_config_t c = k_cfg;
  c.n_embd = 15;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_gpt_create(&m, g_be, &c, 48), DDP_ERR_INVALID_ARG);
  c = k_cfg;
  c.vocab = 1;
  ck_assert_int_eq(ddp_gpt_create(&m, g_be, &c, 48), DDP_ERR_INVALID_ARG);
  c = k_cfg;
  ck_assert_int_eq(ddp_gpt_create(&m, g_be, &c, 0), DDP_ERR_INVALID_ARG);
  c.vocab_pad = -1;
  ck_assert_int_eq(ddp_gpt_create(&m, g_be, &c, 48), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "vocabulary padding -1 is outside [0, 4096]");
  ddp_assert_contains(log, "--n-embd 15 is not divisible by --n-head 2");
  ck_assert_ptr_null(m);
  free(log);
}
END_TEST

START_TEST(test_gpt_rejects_bad_batches) {
  ddp_gpt_t *m = make();
  int32_t in[4 * 13], tg[4 * 13];
  batch(in, tg, 4, 13);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_gpt_forward(m, in, tg, 1, 13, 1, 1.0f), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_gpt_forward(m, in, tg, 5, 12, 1, 1.0f), DDP_ERR_INVALID_ARG);
  /* targets are checked on the host too (a GPU kernel could not refuse
   * them): below -1 or at/above the vocabulary, in training and eval */
  tg[7] = -2;
  ck_assert_int_eq(ddp_gpt_forward(m, in, tg, 2, 12, 1, 1.0f), DDP_ERR_FORMAT);
  tg[7] = k_cfg.vocab;
  ck_assert_int_eq(ddp_gpt_forward(m, in, tg, 2, 12, 0, 0.0f), DDP_ERR_FORMAT);
  tg[7] = -1;
  in[5] = k_cfg.vocab;
  ck_assert_int_eq(ddp_gpt_forward(m, in, tg, 2, 12, 1, 1.0f), DDP_ERR_FORMAT);
  ck_assert_int_eq(ddp_gpt_backward(m, 0, 0), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "target -2 at row 0, position 7 is outside the vocabulary [0, 29)");
  ddp_assert_contains(log, "target 29 at row 0, position 7");
  ddp_assert_contains(log, "a sequence of 13 tokens exceeds --seq-len 12");
  ddp_assert_contains(log, "exceeds the 48-token budget");
  ddp_assert_contains(log, "token 29 at row 0, position 5 is outside the vocabulary [0, 29)");
  free(log);
  ddp_gpt_destroy(m);
}
END_TEST

START_TEST(test_gpt_layout_counts_and_init_statistics) {
  ddp_gpt_t *m = make();
  const int64_t C = k_cfg.n_embd, L = k_cfg.n_layer;
  const size_t expect =
      (size_t)(k_cfg.vocab * C + k_cfg.max_seq_len * C + 2 * C + L * (12 * C * C + 13 * C));
  ck_assert_uint_eq(ddp_gpt_num_params(m), expect);
  ck_assert_int_eq(ddp_gpt_num_tensors(m), 4 + 12 * (int)L);
  ck_assert_str_eq(ddp_gpt_tensor(m, 0)->name, "transformer.ln_f.weight");
  ck_assert_str_eq(ddp_gpt_tensor(m, 2)->name, "transformer.h.1.mlp.c_proj.weight");
  ck_assert_str_eq(ddp_gpt_tensor(m, ddp_gpt_num_tensors(m) - 1)->name, "transformer.wte.weight");
  float *p = malloc(expect * sizeof *p);
  ck_assert_int_eq(ddp_gpt_copy_params_to_host(m, p), DDP_OK);
  size_t next = 0;
  for (int i = 0; i < ddp_gpt_num_tensors(m); ++i) {
    const ddp_param_t *t = ddp_gpt_tensor(m, i);
    ck_assert_uint_eq(t->offset, next); /* contiguous, in table order */
    next += t->count;
    double s = 0, s2 = 0;
    for (size_t k = 0; k < t->count; ++k)
      s += p[t->offset + k], s2 += (double)p[t->offset + k] * p[t->offset + k];
    const double mean = s / t->count, sd = sqrt(s2 / t->count - mean * mean);
    if (strstr(t->name, ".bias")) {
      ck_assert(s2 == 0.0);
    } else if (strstr(t->name, "ln_")) {
      ck_assert(mean == 1.0 && sd < 1e-12);
    } else {
      const double want = strstr(t->name, "c_proj.weight") ? 0.02 / sqrt(2.0 * L) : 0.02;
      /* sd of a normal sample of n values: relative error ~ 1/sqrt(2n);
       * the smallest tensor here has 256 values, so 4 standard errors is 18%. */
      ck_assert_msg(fabs(sd / want - 1) < 4.0 / sqrt(2.0 * t->count), "%s: sd %.4g vs %.4g",
                    t->name, sd, want);
      /* the documented rule: every 2-D weight decays, wpe included */
      ck_assert_int_eq(t->decay, 1);
    }
    if (t->ndim == 1) ck_assert_int_eq(t->decay, 0); /* biases, LayerNorm */
  }
  free(p);
  ddp_gpt_destroy(m);
}
END_TEST

static size_t g_seen;
static int g_calls;
static void hook(void *ctx, size_t offset, size_t count) {
  ck_assert_uint_eq(offset, g_seen);
  g_seen += count;
  g_calls++;
  (void)ctx;
}

START_TEST(test_gpt_hook_announces_tensors_in_order_once) {
  ddp_gpt_t *m = make();
  int32_t in[48], tg[48];
  batch(in, tg, 4, 12);
  ddp_gpt_set_grad_hook(m, hook, NULL);
  g_seen = 0;
  g_calls = 0;
  ck_assert_int_eq(ddp_gpt_forward(m, in, tg, 4, 12, 1, 1.0f), DDP_OK);
  ck_assert_int_eq(ddp_gpt_backward(m, 0, 0), DDP_OK); /* notify off: no calls */
  ck_assert_int_eq(g_calls, 0);
  ck_assert_int_eq(ddp_gpt_forward(m, in, tg, 4, 12, 1, 1.0f), DDP_OK);
  ck_assert_int_eq(ddp_gpt_backward(m, 1, 1), DDP_OK);
  ck_assert_int_eq(g_calls, ddp_gpt_num_tensors(m));
  ck_assert_uint_eq(g_seen, ddp_gpt_num_params(m));
  ddp_gpt_destroy(m);
}
END_TEST

START_TEST(test_gpt_first_backward_overwrites_later_accumulate) {
  ddp_gpt_t *m = make();
  const size_t n = ddp_gpt_num_params(m);
  int32_t in[36], tg[36];
  batch(in, tg, 3, 12);
  float *g1 = malloc(n * sizeof *g1), *g2 = malloc(n * sizeof *g2);
  /* Garbage (NaN) in the gradient buffer must not survive an overwrite. */
  ck_assert_int_eq(g_be->ops->fill(g_be, ddp_gpt_grads(m), DDP_DTYPE_F32, NAN, n, NULL), DDP_OK);
  ck_assert_int_eq(ddp_gpt_forward(m, in, tg, 3, 12, 1, 0.1f), DDP_OK);
  ck_assert_int_eq(ddp_gpt_backward(m, 0, 0), DDP_OK);
  memcpy(g1, ddp_gpt_grads(m), n * sizeof *g1); /* CPU backend: host memory */
  for (size_t i = 0; i < n; ++i) ck_assert(isfinite(g1[i]));
  ck_assert_int_eq(ddp_gpt_forward(m, in, tg, 3, 12, 1, 0.1f), DDP_OK);
  ck_assert_int_eq(ddp_gpt_backward(m, 1, 0), DDP_OK);
  memcpy(g2, ddp_gpt_grads(m), n * sizeof *g2);
  /* Accumulating adds the second pass's terms into the first's sums, which
   * rounds differently from 2 * g where terms nearly cancel: bound the error
   * per tensor, relative to its largest gradient (fp32 sums of a few hundred
   * terms: ~1e-5). */
  for (int t = 0; t < ddp_gpt_num_tensors(m); ++t) {
    const ddp_param_t *d = ddp_gpt_tensor(m, t);
    float scale = 0;
    for (size_t i = d->offset; i < d->offset + d->count; ++i) scale = fmaxf(scale, fabsf(g1[i]));
    for (size_t i = d->offset; i < d->offset + d->count; ++i)
      ck_assert_msg(fabsf(g2[i] - 2 * g1[i]) <= 1e-5f * scale, "%s[%zu]: %g vs 2 x %g", d->name,
                    i - d->offset, g2[i], g1[i]);
  }
  free(g1);
  free(g2);
  ddp_gpt_destroy(m);
}
END_TEST

START_TEST(test_gpt_eval_equals_train_loss_without_allocating) {
  ddp_gpt_t *m = make();
  int32_t in[48], tg[48];
  batch(in, tg, 4, 12);
  double train = 0, eval = 0;
  const uint64_t created = g_be->alloc_calls;
  uint64_t allocs = 0;
  for (int rep = 0; rep < 3; ++rep) {
    ck_assert_int_eq(ddp_gpt_forward(m, in, tg, 4, 12, 1, 1.0f), DDP_OK);
    ck_assert_int_eq(ddp_gpt_backward(m, rep > 0, 1), DDP_OK);
    ck_assert_int_eq(ddp_gpt_take_loss(m, &train), DDP_OK);
    ck_assert_int_eq(ddp_gpt_forward(m, in, tg, 4, 12, 0, 0.0f), DDP_OK);
    ck_assert_int_eq(ddp_gpt_take_loss(m, &eval), DDP_OK);
    ck_assert(fabs(train - eval) <= 1e-6 * fabs(train));
    ck_assert(train > 0 && isfinite(train));
    if (rep == 0) allocs = g_be->alloc_calls;
  }
  /* The first forward allocates the activation arena, once (creation only
   * sizes it: see gpt.c, arena_pending); the step loop allocates nothing. */
  ck_assert_uint_eq(allocs, created + 1);
  ck_assert_uint_eq(g_be->alloc_calls, allocs);
  ddp_gpt_destroy(m);
}
END_TEST

/* Logits rows are padded to a multiple of 128 columns: the padding is
 * exactly zero (zero rows after wte), copy_logits_to_host drops it, and the
 * loss is that of the V real columns (the reference test checks values). */
START_TEST(test_gpt_logits_are_padded_to_128_columns) {
  ddp_gpt_t *m = make();
  ck_assert_int_eq(ddp_gpt_vocab_padded(m), 29); /* the CPU's default: no padding */
  ddp_gpt_destroy(m);
  ddp_gpt_config_t c = k_cfg;
  c.vocab_pad = 128; /* what a GPU does by default, on the CPU */
  ck_assert_int_eq(ddp_gpt_create(&m, g_be, &c, 48), DDP_OK);
  ck_assert_int_eq(ddp_gpt_init_weights(m, 1), DDP_OK);
  ck_assert_int_eq(ddp_gpt_vocab_padded(m), 128);
  int32_t in[2 * 12], tg[2 * 12];
  batch(in, tg, 2, 12);
  ck_assert_int_eq(ddp_gpt_forward(m, in, tg, 2, 12, 0, 0.0f), DDP_OK);
  const float *raw = ddp_gpt_logits(m); /* CPU backend memory */
  float packed[24 * 29];
  ck_assert_int_eq(ddp_gpt_copy_logits_to_host(m, packed, 24), DDP_OK);
  for (int r = 0; r < 24; ++r) {
    for (int j = 29; j < 128; ++j) ck_assert(raw[r * 128 + j] == 0.0f);
    for (int j = 0; j < 29; ++j) ck_assert(packed[r * 29 + j] == raw[r * 128 + j]);
  }
  ddp_gpt_destroy(m);
}
END_TEST

static Suite *gpt_suite(void) {
  Suite *s = suite_create("gpt");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_gpt_rejects_bad_configs);
  tcase_add_test(tc, test_gpt_rejects_bad_batches);
  tcase_add_test(tc, test_gpt_logits_are_padded_to_128_columns);
  tcase_add_test(tc, test_gpt_layout_counts_and_init_statistics);
  tcase_add_test(tc, test_gpt_hook_announces_tensors_in_order_once);
  tcase_add_test(tc, test_gpt_first_backward_overwrites_later_accumulate);
  tcase_add_test(tc, test_gpt_eval_equals_train_loss_without_allocating);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(gpt_suite());
}
