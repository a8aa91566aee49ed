/* --model resnet in bf16 and fp16 on the CPU (set_precision), against the
 * same net in fp32 on the same master weights and batch: a ResNet-10 of
 * width 4 with the cifar stem (17x17 images) and with the imagenet stem
 * (64x64, so that its last stage still normalises over 16 positions).
 *
 * The tolerances, in u, the relative rounding error of one store: 2^-8 for
 * bf16 (8 significant bits), 2^-11 for fp16 (11 bits).
 *   - The loss and the running statistics (2 u) and the eval logits and
 *     fc.weight's gradient (8 u, 10 u) are sums over many rounded values
 *     whose errors are independent and average out: they stay within a few
 *     u (the runs show 0.05-0.2 u, 1.5-3 u; printed).
 *   - All the parameter gradients together (6 sqrt(u): 0.375 for bf16,
 *     0.133 for fp16): rounding moves some pre-activations across a ReLU's
 *     kink (and some max-pool winners), which changes their gradient by
 *     O(1) instead of O(u). The fraction of such elements is proportional
 *     to u, so the relative L2 difference grows as sqrt(u) (the runs show
 *     1.3-2.7 sqrt(u), and bf16's is about sqrt(8) times fp16's); the
 *     batch-norm backward, which subtracts its mean and projection, makes
 *     it no smaller. A net on other weights is far outside (tested).
 *
 * Also: fp16's loss scale passes through (dloss = 1024 gives 1024 times the
 * gradients, which stay fp32); no allocation in a step; describe names the
 * precision; a second switch and a non-float type are refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "ddptrain/model.h"
#include "ddptrain/rng.h"
#include "model/resnet.h"

enum { N_IMG = 4, H_IMG = 17, CLASSES = 5 };

static ddp_backend_t *g_be;
static ddp_options_t g_opts;
static ddp_model_t *g_m[2]; /* fp32, half */
static ddp_record_batch_t g_batch;

static const ddp_dtype_t k_types[] = {DDP_DTYPE_BF16, DDP_DTYPE_F16};

static double unit(ddp_dtype_t dt) {
  return dt == DDP_DTYPE_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -11);
}

static void setup(void) {
  g_be = ddp_test_cpu_backend();
  g_m[0] = g_m[1] = NULL;
  memset(&g_batch, 0, sizeof g_batch);
}

static void teardown(void) {
  if (g_batch.inputs) ddp_record_batch_destroy(&g_batch);
  ddp_model_destroy(g_m[0]);
  ddp_model_destroy(g_m[1]);
  ddp_backend_destroy(g_be);
  ddp_test_free_tracked();
}

/* The fp32 net and the dt net on the same weights (seed 3), and a seeded
 * batch of N_IMG H x H x 3 images. */
static void make_pair(const char *depth, const char *stem, int H, ddp_dtype_t dt,
                      uint64_t half_seed) {
  ck_assert_int_eq(ddp_test_parse(&g_opts, NULL, "--model", "resnet", "--depth", depth, "--width",
                                  "4", "--stem", stem, NULL),
                   DDP_OK);
  const ddp_model_setup_t s = {.be = g_be,
                               .opts = &g_opts,
                               .data = {.kind = DDP_BATCH_RECORDS,
                                        .record_ndim = 3,
                                        .record_shape = {H, H, 3, 1},
                                        .record_floats = (int64_t)H * H * 3,
                                        .n_classes = CLASSES},
                               .max_batch = N_IMG};
  for (int i = 0; i < 2; ++i) {
    ck_assert_int_eq(ddp_model_create(ddp_model_find("resnet"), &s, &g_m[i]), DDP_OK);
    /* as the runtime: the precision first, then the weights */
    if (i) {
      ck_assert_ptr_nonnull(g_m[i]->ops->set_precision);
      ck_assert_int_eq(g_m[i]->ops->set_precision(g_m[i], dt), DDP_OK);
    }
    ck_assert_int_eq(g_m[i]->ops->init_weights(g_m[i], i ? half_seed : 3), DDP_OK);
  }
  const int64_t floats = (int64_t)H * H * 3;
  ck_assert_int_eq(ddp_record_batch_init(&g_batch, NULL, N_IMG, floats), DDP_OK);
  g_batch.B = N_IMG, g_batch.floats = floats, g_batch.n_targets = N_IMG;
  ddp_rng_t rng;
  ddp_rng_init(&rng, 9, 1);
  ddp_rng_fill_normal(&rng, 0, 0.0f, 1.0f, g_batch.inputs, (size_t)(N_IMG * floats));
  for (int r = 0; r < N_IMG; ++r) g_batch.labels[r] = (int32_t)ddp_rng_below(&rng, 99 + r, CLASSES);
}

/* ||a - b|| / ||b|| */
static double rel_l2(const float *a, const float *b, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; ++i) {
    d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    r += (double)b[i] * b[i];
  }
  return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* The relative L2 difference of the two nets' gradients: over all the
 * parameters (name NULL) or over one tensor; the half net's divided by its
 * loss scale. */
static double grad_diff(float scale_half, const char *name) {
  const ddp_model_t *a = g_m[1], *b = g_m[0];
  size_t lo = 0, n = b->n_params;
  if (name) {
    const int t = ddp_param_find(b->tensors, b->n_tensors, name);
    ck_assert_int_ge(t, 0);
    lo = b->tensors[t].offset, n = b->tensors[t].count;
  }
  float *h = ddp_test_track(malloc(n * sizeof *h));
  for (size_t k = 0; k < n; ++k) h[k] = a->grads[lo + k] / scale_half;
  return rel_l2(h, b->grads + lo, n);
}

START_TEST(test_half_forward_backward_follows_fp32) {
  const ddp_dtype_t dt = k_types[_i % 2];
  const int imagenet = _i / 2;
  make_pair("10", imagenet ? "imagenet" : "cifar", imagenet ? 64 : H_IMG, dt, 3);
  const double u = unit(dt);
  ck_assert_int_eq(g_m[1]->precision, dt);
  ck_assert_ptr_nonnull(g_m[1]->compute_params);
  char line[512];
  g_m[1]->ops->describe(g_m[1], line, sizeof line);
  ck_assert_msg(strstr(line, ddp_dtype_name(dt)) != NULL, "describe: %s", line);
  /* fp16 runs with a loss scale: the gradients carry it, fp32 as always */
  const float scale = dt == DDP_DTYPE_F16 ? 1024.0f : 1.0f;
  double loss[2];
  const uint64_t allocs = g_be->alloc_calls;
  for (int i = 0; i < 2; ++i) {
    ck_assert_int_eq(g_m[i]->ops->forward_backward(g_m[i], &g_batch, i ? scale : 1.0f, 0, 0),
                     DDP_OK);
    ck_assert_int_eq(g_m[i]->ops->take_loss(g_m[i], &loss[i]), DDP_OK);
  }
  /* each model's first forward makes its activation arena, in its own
   * precision, and nothing else */
  ck_assert_uint_eq(g_be->alloc_calls, allocs + 2);
  const double dl = fabs(loss[1] - loss[0]) / fabs(loss[0]);
  ck_assert_msg(dl <= 2 * u, "%s loss %.7g, fp32 %.7g: %.3g apart (bound %.3g)", ddp_dtype_name(dt),
                loss[1], loss[0], dl, 2 * u);
  /* the classifier's gradients: before any ReLU, rounding alone */
  const double dfc = grad_diff(scale, "fc.weight");
  ck_assert_msg(dfc <= 10 * u, "%s gradient of fc.weight %.3g from fp32's (bound %.3g)",
                ddp_dtype_name(dt), dfc, 10 * u);
  /* all of them: ReLU and max-pool decisions flipped by rounding */
  const double dg = grad_diff(scale, NULL);
  ck_assert_msg(dg <= 6 * sqrt(u), "%s gradients %.3g from fp32's (bound %.3g)", ddp_dtype_name(dt),
                dg, 6 * sqrt(u));
  /* the running statistics moved the same way, the counters equally */
  const size_t nb = g_m[0]->n_buffer_floats;
  const double db = rel_l2(g_m[1]->buffers, g_m[0]->buffers, nb);
  ck_assert_msg(db <= 2 * u, "%s running statistics %.3g from fp32's (bound %.3g)",
                ddp_dtype_name(dt), db, 2 * u);
  /* eval: the running statistics normalise; logits as close */
  float *lg[2];
  for (int i = 0; i < 2; ++i) {
    lg[i] = ddp_test_track(malloc(N_IMG * CLASSES * sizeof(float)));
    ck_assert_int_eq(g_m[i]->ops->eval_forward(g_m[i], &g_batch), DDP_OK);
    ck_assert_int_eq(g_m[i]->ops->copy_outputs(g_m[i], lg[i], N_IMG), DDP_OK);
  }
  const double de = rel_l2(lg[1], lg[0], N_IMG * CLASSES);
  ck_assert_msg(de <= 8 * u, "%s eval logits %.3g from fp32's (bound %.3g)", ddp_dtype_name(dt), de,
                5 * u);
  fprintf(stderr,
          "%s %s stem: relative differences: loss %.3g, running statistics %.3g, fc.weight "
          "gradient %.3g, all gradients %.3g, eval logits %.3g\n",
          ddp_dtype_name(dt), imagenet ? "imagenet" : "cifar", dl, db, dfc, dg, de);
}
END_TEST

/* The bounds are tight enough to tell nets apart: the half net on other
 * weights (seed 4) is far outside them. */
START_TEST(test_half_bounds_tell_other_weights_apart) {
  make_pair("10", "cifar", H_IMG, DDP_DTYPE_BF16, 4);
  for (int i = 0; i < 2; ++i)
    ck_assert_int_eq(g_m[i]->ops->forward_backward(g_m[i], &g_batch, 1.0f, 0, 0), DDP_OK);
  ck_assert_double_gt(grad_diff(1.0f, NULL), 6 * sqrt(unit(DDP_DTYPE_BF16)));
}
END_TEST

START_TEST(test_half_precision_is_set_once) {
  make_pair("10", "cifar", H_IMG, DDP_DTYPE_BF16, 3);
  ck_assert_int_eq(g_m[1]->ops->set_precision(g_m[1], DDP_DTYPE_BF16), DDP_OK); /* no change */
  ddp_test_log_start();
  const ddp_status_t st = g_m[1]->ops->set_precision(g_m[1], DDP_DTYPE_F16);
  const ddp_status_t st_i = g_m[0]->ops->set_precision(g_m[0], DDP_DTYPE_I32);
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(st_i, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "resnet: precision is already bf16");
  ddp_assert_contains(log, "resnet: precision int32 is not fp32, bf16 or fp16");
  free(log);
  ck_assert_int_eq(g_m[0]->precision, DDP_DTYPE_F32);
  ck_assert_ptr_null(g_m[0]->compute_params);
}
END_TEST

/* The activations are made by the first forward in the model's precision:
 * changing it afterwards is refused, and the fp32 net stays fp32. */
START_TEST(test_half_precision_after_a_forward_is_refused) {
  make_pair("10", "cifar", H_IMG, DDP_DTYPE_BF16, 3);
  ck_assert_int_eq(g_m[0]->ops->forward_backward(g_m[0], &g_batch, 1.0f, 0, 0), DDP_OK);
  ddp_test_log_start();
  const ddp_status_t st = g_m[0]->ops->set_precision(g_m[0], DDP_DTYPE_BF16);
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "resnet: the precision is set before the first forward");
  free(log);
  ck_assert_int_eq(g_m[0]->precision, DDP_DTYPE_F32);
  ck_assert_ptr_null(g_m[0]->compute_params);
}
END_TEST

int main(void) {
  Suite *s = suite_create("resnet_half");
  TCase *tc = tcase_create("cpu");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_half_forward_backward_follows_fp32, 0, 4);
  tcase_add_test(tc, test_half_bounds_tell_other_weights_apart);
  tcase_add_test(tc, test_half_precision_is_set_once);
  tcase_add_test(tc, test_half_precision_after_a_forward_is_refused);
  suite_add_tcase(s, tc);
  return ddp_test_run_suite(s);
}
