/* --model resnet: its tables, its steps and its refusals, in fp32 on the CPU
 * (tests/check_resnet_reference.c compares the numbers with PyTorch).
 *   - layout: names, shapes, offsets in backward order, decay flags and
 *     buffers of a tiny net; torchvision's parameter counts and
 *     multiply-adds for ResNet-18/34/50;
 *   - steps: gradients announced once each, in table order; gradient
 *     coordinates against finite differences of the training loss (batch
 *     statistics); inference uses and keeps the running statistics,
 *     training moves them and the counters; --sync-bn in one process equals
 *     per-rank BatchNorm; accumulation adds; nothing allocated per step;
 *   - init: a pure function of the seed, --zero-init-residual;
 *   - refusals: records that are not images, a backend without the conv
 *     table or with one op missing, a batch norm over one position, a
 *     batch larger than the model was built for. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/model.h"
#include "ddptrain/rng.h"
#include "check_util.h"
#include "model/resnet.h"

static ddp_backend_t *g_be;
static ddp_options_t g_opts;
static ddp_model_t *g_m;
static ddp_record_batch_t g_batch;

static ddp_data_shape_t images(int H, int W, int C, int classes) {
  return (ddp_data_shape_t){.kind = DDP_BATCH_RECORDS,
                            .record_ndim = 3,
                            .record_shape = {H, W, C, 1},
                            .record_floats = (int64_t)H * W * C,
                            .n_classes = classes};
}

static void parse_ok(const char *depth, const char *stem, const char *sync) {
  ck_assert_int_eq(ddp_test_parse(&g_opts, NULL, "--model", "resnet", "--depth", depth, "--width",
                                  "4", "--stem", stem, "--sync-bn", sync, NULL),
                   DDP_OK);
}

/* A model on g_be for N images of H x H x 3 in 5 classes, and a seeded batch. */
static ddp_status_t make(int H, int N, int max_batch) {
  const ddp_model_setup_t s = {
      .be = g_be, .opts = &g_opts, .data = images(H, H, 3, 5), .max_batch = max_batch};
  ddp_status_t st = ddp_model_create(ddp_model_find("resnet"), &s, &g_m);
  if (st != DDP_OK) return st;
  ck_assert_int_eq(g_m->ops->init_weights(g_m, 3), DDP_OK);
  const int64_t floats = (int64_t)H * H * 3;
  ck_assert_int_eq(ddp_record_batch_init(&g_batch, NULL, max_batch, floats), DDP_OK);
  g_batch.B = N, g_batch.floats = floats, g_batch.n_targets = N;
  ddp_rng_t rng;
  ddp_rng_init(&rng, 9, 1);
  ddp_rng_fill_normal(&rng, 0, 0.0f, 1.0f, g_batch.inputs, (size_t)(max_batch * floats));
  for (int r = 0; r < max_batch; ++r) g_batch.labels[r] = (int32_t)ddp_rng_below(&rng, 99 + r, 5);
  return DDP_OK;
}

static void setup(void) {
  g_be = ddp_test_cpu_backend();
  g_m = NULL;
  memset(&g_batch, 0, sizeof g_batch);
}

static void teardown(void) {
  if (g_batch.inputs) ddp_record_batch_destroy(&g_batch);
  ddp_model_destroy(g_m);
  ddp_backend_destroy(g_be);
  ddp_test_free_tracked();
}

static ddp_status_t capture_create(const ddp_model_setup_t *s, char **log) {
  ddp_test_log_start();
  const ddp_status_t st = ddp_model_create(ddp_model_find("resnet"), s, &g_m);
  *log = ddp_test_log_stop();
  return st;
}

/* ---- layout ---------------------------------------------------------------- */

START_TEST(test_resnet_table_is_in_backward_order_with_torchvision_names) {
  parse_ok("10", "cifar", "0");
  resnet_config_t c;
  ck_assert_int_eq(resnet_config_from_options(&g_opts, &c), DDP_OK);
  const ddp_data_shape_t d = images(17, 17, 3, 5);
  ck_assert_int_eq(resnet_config_set_data(&c, &d), DDP_OK);
  resnet_t r;
  ck_assert_int_eq(resnet_layout(&r, &c), DDP_OK);
  /* fc first; each block's main path from its last unit, then its projection; the stem last */
  static const char *const want[] = {"fc.weight",
                                     "fc.bias",
                                     "layer4.0.bn2.weight",
                                     "layer4.0.bn2.bias",
                                     "layer4.0.conv2.weight",
                                     "layer4.0.bn1.weight",
                                     "layer4.0.bn1.bias",
                                     "layer4.0.conv1.weight",
                                     "layer4.0.downsample.1.weight",
                                     "layer4.0.downsample.1.bias",
                                     "layer4.0.downsample.0.weight"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i)
    ck_assert_str_eq(r.table[i].name, want[i]);
  ck_assert_int_eq(r.n_tensors, 2 + 3 * 12); /* stem, 2 + 3 + 3 + 3 units in blocks */
  ck_assert_str_eq(r.table[r.n_tensors - 3].name, "bn1.weight");
  ck_assert_str_eq(r.table[r.n_tensors - 1].name, "conv1.weight");
  /* layer1 keeps its shape: no projection */
  ck_assert_int_lt(ddp_param_find(r.table, r.n_tensors, "layer1.0.downsample.0.weight"), 0);
  ck_assert_int_eq(ddp_param_table_check(r.table, r.n_tensors, r.n_params, "resnet"), DDP_OK);
  /* shapes: (K,R,S,C) convolutions, (classes, features) classifier */
  const ddp_param_t *t = &r.table[ddp_param_find(r.table, r.n_tensors, "conv1.weight")];
  ck_assert_int_eq(t->ndim, 4);
  ck_assert(t->shape[0] == 4 && t->shape[1] == 3 && t->shape[2] == 3 && t->shape[3] == 3);
  t = &r.table[ddp_param_find(r.table, r.n_tensors, "layer4.0.downsample.0.weight")];
  ck_assert(t->shape[0] == 32 && t->shape[1] == 1 && t->shape[2] == 1 && t->shape[3] == 16);
  ck_assert(r.table[0].shape[0] == 5 && r.table[0].shape[1] == 32);
  /* decay: conv and fc weights only */
  for (int i = 0; i < r.n_tensors; ++i) {
    const int conv = r.table[i].ndim == 4, fcw = strcmp(r.table[i].name, "fc.weight") == 0;
    ck_assert_msg(r.table[i].decay == (conv || fcw), "decay of %s", r.table[i].name);
  }
  /* buffers: running_mean/var per BN (mean kind), the counters after them */
  ck_assert_int_eq(r.n_buffers, 3 * 12);
  ck_assert_str_eq(r.buffers[0].t.name, "layer4.0.bn2.running_mean");
  ck_assert_str_eq(r.buffers[1].t.name, "layer4.0.bn2.running_var");
  ck_assert_int_eq(r.buffers[1].kind, DDP_BUFFER_MEAN);
  ck_assert_str_eq(r.buffers[23].t.name, "bn1.running_var");
  ck_assert_str_eq(r.buffers[24].t.name, "layer4.0.bn2.num_batches_tracked");
  ck_assert_int_eq(r.buffers[24].kind, DDP_BUFFER_COUNT);
  ck_assert_str_eq(r.buffers[35].t.name, "bn1.num_batches_tracked");
  ck_assert_uint_eq(r.counters_offset, r.buffers[24].t.offset);
  ck_assert_uint_eq(r.n_buffer_floats, r.buffers[35].t.offset + 1);
  resnet_layout_free(&r);
}
END_TEST

/* Any image keeps a position through the stem and the stages: nothing to refuse. */
START_TEST(test_resnet_layout_of_a_one_pixel_image_ends_one_by_one) {
  ck_assert_int_eq(ddp_test_parse(&g_opts, NULL, "--model", "resnet", "--depth", "50", "--stem",
                                  "imagenet", NULL),
                   DDP_OK);
  resnet_config_t c;
  ck_assert_int_eq(resnet_config_from_options(&g_opts, &c), DDP_OK);
  const ddp_data_shape_t d = images(1, 1, 3, 10);
  ck_assert_int_eq(resnet_config_set_data(&c, &d), DDP_OK);
  resnet_t r;
  ck_assert_int_eq(resnet_layout(&r, &c), DDP_OK);
  for (int i = 0; i < r.n_units; ++i) ck_assert(r.units[i].OH == 1 && r.units[i].OW == 1);
  ck_assert_int_eq(r.features, 2048);
  resnet_layout_free(&r);
}
END_TEST

/* torchvision's numbers for 224 x 224 ImageNet models, 1000 classes. */
START_TEST(test_resnet_sizes_match_torchvision) {
  static const struct {
    const char *depth;
    size_t params;
    int bns;
    double gmacs;
  } k[] = {{"18", 11689512, 20, 1.814}, {"34", 21797672, 36, 3.664}, {"50", 25557032, 53, 4.089}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; ++i) {
    ck_assert_int_eq(
        ddp_test_parse(&g_opts, NULL, "--model", "resnet", "--depth", k[i].depth, NULL), DDP_OK);
    resnet_config_t c;
    ck_assert_int_eq(resnet_config_from_options(&g_opts, &c), DDP_OK);
    const ddp_data_shape_t d = images(224, 224, 3, 1000);
    ck_assert_int_eq(resnet_config_set_data(&c, &d), DDP_OK);
    ck_assert_int_eq(c.imagenet_stem, 1); /* auto: 224 px */
    resnet_t r;
    ck_assert_int_eq(resnet_layout(&r, &c), DDP_OK);
    ck_assert_uint_eq(r.n_params, k[i].params);
    ck_assert_int_eq(r.n_units, k[i].bns);
    const double g = resnet_forward_macs(&r) / 1e9;
    ck_assert_msg(fabs(g - k[i].gmacs) < 0.01 * k[i].gmacs, "ResNet-%s: %.4f GMACs", k[i].depth, g);
    /* the runtime's cost: 6 FLOPs a multiply-add (forward 2, backward 4) */
    double a = 0, b = 1;
    ck_assert_int_eq(ddp_model_find("resnet")->cost(&g_opts, &d, &a, &b), DDP_OK);
    ck_assert_double_eq_tol(a, 6.0 * resnet_forward_macs(&r), 1.0);
    ck_assert_double_eq(b, 0.0);
    resnet_layout_free(&r);
  }
}
END_TEST

/* ---- steps ------------------------------------------------------------------ */

static size_t g_next_offset;
static int g_announced;
static void on_ready(void *ctx, size_t offset, size_t count) {
  (void)ctx;
  ck_assert_uint_eq(offset, g_next_offset);
  g_next_offset += count;
  g_announced++;
}

static double train_loss(void) {
  ck_assert_int_eq(g_m->ops->forward_backward(g_m, &g_batch, 1.0f, 0, 0), DDP_OK);
  double l = 0;
  ck_assert_int_eq(g_m->ops->take_loss(g_m, &l), DDP_OK);
  return l;
}

START_TEST(test_resnet_gradients_match_finite_differences_in_train_mode) {
  parse_ok(_i ? "14" : "10", _i ? "imagenet" : "cifar", "0");
  ck_assert_int_eq(make(_i ? 32 : 17, 4, 4), DDP_OK);
  g_m->grad_ready_fn = on_ready, g_announced = 0, g_next_offset = 0;
  const uint64_t allocs = g_be->alloc_calls;
  ck_assert_int_eq(g_m->ops->forward_backward(g_m, &g_batch, 1.0f, 0, 1), DDP_OK);
  ck_assert_int_eq(g_announced, g_m->n_tensors);
  ck_assert_uint_eq(g_next_offset, g_m->n_params);
  /* the first forward makes the activation arena, and nothing else */
  ck_assert_uint_eq(g_be->alloc_calls, allocs + 1);
  g_m->grad_ready_fn = NULL;
  double l0;
  ck_assert_int_eq(g_m->ops->take_loss(g_m, &l0), DDP_OK);
  float *grads = ddp_test_track(malloc(g_m->n_params * sizeof *grads));
  memcpy(grads, g_m->grads, g_m->n_params * sizeof *grads);
  static const struct {
    const char *name;
    size_t at;
  } k[] = {{"fc.weight", 3},
           {"fc.bias", 1},
           {"layer3.0.bn1.weight", 2},
           {"layer4.0.bn2.bias", 5},
           {"layer2.0.downsample.0.weight", 5},
           {"layer1.0.conv2.weight", 7},
           {"bn1.bias", 0},
           {"conv1.weight", 4}};
  /* small: a stem weight moves thousands of ReLU inputs and max-pool
   * winners, and a step that crosses one of those kinks gives differences
   * far from the gradient; much smaller steps drown in the fp32 loss's
   * rounding. So each coordinate is tried at two step sizes, and the
   * gradient must match the differences at one of them: a kink sits at one
   * distance, a wrong gradient misses both. */
  const double hs[2] = {2e-4, 1e-4};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; ++i) {
    const int t = ddp_param_find(g_m->tensors, g_m->n_tensors, k[i].name);
    ck_assert_int_ge(t, 0);
    float *p = g_m->params + g_m->tensors[t].offset + k[i].at; /* CPU: host memory */
    const float keep = *p;
    const double g = grads[g_m->tensors[t].offset + k[i].at];
    double fd[2];
    int match = 0;
    for (int j = 0; j < 2; ++j) {
      *p = keep + (float)hs[j];
      const double up = train_loss();
      *p = keep - (float)hs[j];
      const double down = train_loss();
      *p = keep;
      fd[j] = (up - down) / (2 * hs[j]);
      match |= fabs(fd[j] - g) <= 2e-3 + 3e-2 * fabs(g);
    }
    ck_assert_msg(match, "%s[%zu]: gradient %.6g, differences %.6g (h %g) and %.6g (h %g)",
                  k[i].name, k[i].at, g, fd[0], hs[0], fd[1], hs[1]);
  }
}
END_TEST

START_TEST(test_resnet_eval_uses_running_statistics_and_training_moves_them) {
  parse_ok("10", "cifar", "0");
  ck_assert_int_eq(make(17, 4, 4), DDP_OK);
  const size_t nb = g_m->n_buffer_floats;
  float *before = ddp_test_track(malloc(nb * sizeof *before));
  float *l1 = ddp_test_track(malloc(20 * sizeof *l1)),
        *l2 = ddp_test_track(malloc(20 * sizeof *l2));
  memcpy(before, g_m->buffers, nb * sizeof *before);
  const uint64_t allocs = g_be->alloc_calls;
  ck_assert_int_eq(g_m->ops->eval_forward(g_m, &g_batch), DDP_OK);
  ck_assert_int_eq(g_m->ops->copy_outputs(g_m, l1, 4), DDP_OK);
  ck_assert_mem_eq(g_m->buffers, before, nb * sizeof *before); /* eval moves nothing */
  /* other running statistics, other logits; the same ones, the same logits */
  const ddp_buffer_t *var = &g_m->buffer_tensors[1];
  ck_assert(strstr(var->t.name, "running_var") != NULL);
  for (size_t k = 0; k < var->t.count; ++k) g_m->buffers[var->t.offset + k] = 4.0f;
  ck_assert_int_eq(g_m->ops->eval_forward(g_m, &g_batch), DDP_OK);
  ck_assert_int_eq(g_m->ops->copy_outputs(g_m, l2, 4), DDP_OK);
  ck_assert(memcmp(l1, l2, 20 * sizeof *l1) != 0);
  memcpy(g_m->buffers, before, nb * sizeof *before);
  ck_assert_int_eq(g_m->ops->eval_forward(g_m, &g_batch), DDP_OK);
  ck_assert_int_eq(g_m->ops->copy_outputs(g_m, l2, 4), DDP_OK);
  ck_assert_mem_eq(l1, l2, 20 * sizeof *l1);
  double unused;
  ck_assert_int_eq(g_m->ops->take_loss(g_m, &unused), DDP_OK);
  /* training moves every statistic and adds 1 to every counter */
  ck_assert_int_eq(g_m->ops->forward_backward(g_m, &g_batch, 0.25f, 0, 0), DDP_OK);
  ck_assert_uint_eq(g_be->alloc_calls, allocs + 1); /* the first eval's arena, then none */
  for (int i = 0; i < g_m->n_buffer_tensors; ++i) {
    const ddp_buffer_t *b = &g_m->buffer_tensors[i];
    if (b->kind == DDP_BUFFER_COUNT) {
      ck_assert_float_eq(g_m->buffers[b->t.offset], 1.0f);
      continue;
    }
    ck_assert_msg(
        memcmp(g_m->buffers + b->t.offset, before + b->t.offset, b->t.count * sizeof(float)) != 0,
        "%s did not move", b->t.name);
  }
}
END_TEST

/* One process: the sums over "all ranks" are this rank's, so --sync-bn
 * must give per-rank BatchNorm's results up to rounding. */
START_TEST(test_resnet_sync_bn_on_one_rank_equals_per_rank_bn) {
  float *grads[2], *bufs[2];
  double loss[2];
  for (int sync = 0; sync < 2; ++sync) {
    parse_ok("14", "imagenet", sync ? "1" : "0");
    ck_assert_int_eq(make(32, 4, 4), DDP_OK);
    ck_assert_int_eq(g_m->buffers_in_sync, sync);
    ck_assert_int_eq(g_m->ops->forward_backward(g_m, &g_batch, 0.25f, 0, 0), DDP_OK);
    ck_assert_int_eq(g_m->ops->take_loss(g_m, &loss[sync]), DDP_OK);
    grads[sync] = ddp_test_track(malloc(g_m->n_params * sizeof(float)));
    bufs[sync] = ddp_test_track(malloc(g_m->n_buffer_floats * sizeof(float)));
    memcpy(grads[sync], g_m->grads, g_m->n_params * sizeof(float));
    memcpy(bufs[sync], g_m->buffers, g_m->n_buffer_floats * sizeof(float));
    if (!sync) {
      ddp_record_batch_destroy(&g_batch);
      ddp_model_destroy(g_m);
      g_m = NULL;
    }
  }
  ck_assert_double_eq_tol(loss[0], loss[1], 1e-5 * fabs(loss[0]));
  for (int i = 0; i < g_m->n_tensors; ++i) {
    const ddp_param_t *t = &g_m->tensors[i];
    double diff = 0, scale = 0;
    for (size_t k = 0; k < t->count; ++k) {
      diff = fmax(diff, fabs(grads[0][t->offset + k] - grads[1][t->offset + k]));
      scale = fmax(scale, fabs(grads[0][t->offset + k]));
    }
    ck_assert_msg(diff <= 1e-4 * scale + 1e-7, "gradient of %s: %.3g apart", t->name, diff);
  }
  for (size_t k = 0; k < g_m->n_buffer_floats; ++k)
    ck_assert_msg(fabs(bufs[0][k] - bufs[1][k]) <= 1e-5 * (1 + fabs(bufs[0][k])),
                  "buffer float %zu", k);
}
END_TEST

/* accumulate: a second micro-step adds its gradient to the first's. */
START_TEST(test_resnet_accumulation_adds_gradients) {
  parse_ok("10", "cifar", "0");
  ck_assert_int_eq(make(17, 4, 4), DDP_OK);
  const size_t n = g_m->n_params;
  float *once = ddp_test_track(malloc(n * sizeof *once));
  ck_assert_int_eq(g_m->ops->forward_backward(g_m, &g_batch, 0.5f, 0, 0), DDP_OK);
  memcpy(once, g_m->grads, n * sizeof *once);
  ck_assert_int_eq(g_m->ops->forward_backward(g_m, &g_batch, 0.5f, 1, 0), DDP_OK);
  for (size_t k = 0; k < n; ++k)
    ck_assert_msg(fabsf(g_m->grads[k] - 2 * once[k]) <= 1e-5f * (1 + fabsf(once[k])), "float %zu",
                  k);
}
END_TEST

/* ---- init ------------------------------------------------------------------- */

START_TEST(test_resnet_init_is_seeded_and_zero_init_residual_zeroes_last_gammas) {
  ck_assert_int_eq(ddp_test_parse(&g_opts, NULL, "--model", "resnet", "--depth", "14", "--width",
                                  "4", "--zero-init-residual", "1", NULL),
                   DDP_OK);
  ck_assert_int_eq(make(32, 2, 2), DDP_OK);
  const size_t n = g_m->n_params;
  float *a = ddp_test_track(malloc(n * sizeof *a));
  memcpy(a, g_m->params, n * sizeof *a);
  ck_assert_int_eq(g_m->ops->init_weights(g_m, 3), DDP_OK);
  ck_assert_mem_eq(a, g_m->params, n * sizeof *a);
  ck_assert_int_eq(g_m->ops->init_weights(g_m, 4), DDP_OK);
  ck_assert(memcmp(a, g_m->params, n * sizeof *a) != 0);
  for (int i = 0; i < g_m->n_tensors; ++i) {
    const ddp_param_t *t = &g_m->tensors[i];
    const char *dot = strrchr(t->name, '.');
    if (strncmp(t->name, "layer", 5) != 0 || strcmp(dot, ".weight") != 0 || !strstr(t->name, ".bn"))
      continue;
    const float want = strstr(t->name, ".bn3.") ? 0.0f : 1.0f; /* bottleneck: bn3 is last */
    for (size_t k = 0; k < t->count; ++k)
      ck_assert_msg(g_m->params[t->offset + k] == want, "%s[%zu]", t->name, k);
  }
  /* the counters start at 0, the variances at 1 */
  for (int i = 0; i < g_m->n_buffer_tensors; ++i) {
    const ddp_buffer_t *b = &g_m->buffer_tensors[i];
    const float want = strstr(b->t.name, "running_var") ? 1.0f : 0.0f;
    for (size_t k = 0; k < b->t.count; ++k) ck_assert(g_m->buffers[b->t.offset + k] == want);
  }
}
END_TEST

/* ---- refusals --------------------------------------------------------------- */

START_TEST(test_resnet_refuses_records_that_are_not_images) {
  parse_ok("10", "cifar", "0");
  ddp_model_setup_t s = {.be = g_be, .opts = &g_opts, .data = images(4, 4, 3, 5), .max_batch = 2};
  s.data.record_ndim = 1, s.data.record_shape[0] = 48, s.data.record_shape[1] = 1,
  s.data.record_shape[2] = 1;
  char *log;
  ck_assert_int_eq(capture_create(&s, &log), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log,
                      "resnet: records must be (H,W,C) images; the data's records have 1 "
                      "dimension");
  free(log);
  ck_assert_ptr_null(g_m);
}
END_TEST

START_TEST(test_resnet_refuses_a_backend_without_the_ops_it_calls) {
  parse_ok("10", "cifar", "1");
  const ddp_backend_ops_t *real = g_be->ops;
  ddp_backend_ops_t ops = *real;
  ddp_conv_ops_t conv = *real->conv;
  g_be->ops = &ops;
  const ddp_model_setup_t s = {
      .be = g_be, .opts = &g_opts, .data = images(8, 8, 3, 5), .max_batch = 2};
  char *log;
  ops.conv = NULL;
  ck_assert_int_eq(capture_create(&s, &log), DDP_ERR_UNSUPPORTED);
  ddp_assert_contains(log, "model resnet needs convolution kernels; the cpu backend has none");
  free(log);
  ops.conv = &conv;
  conv.bn_apply_bwd = NULL; /* only --sync-bn calls it */
  ck_assert_int_eq(capture_create(&s, &log), DDP_ERR_UNSUPPORTED);
  ddp_assert_contains(log, "model resnet --sync-bn 1: the cpu backend has no bn_apply_bwd op");
  free(log);
  g_be->ops = real;
  ck_assert_ptr_null(g_m);
}
END_TEST

START_TEST(test_resnet_refuses_batch_norm_over_one_position_and_oversized_batches) {
  parse_ok("14", "imagenet", "0");
  ck_assert_int_eq(make(32, 1, 2), DDP_OK); /* layer4 is 1 x 1: one image, one position */
  ddp_test_log_start();
  ddp_status_t st = g_m->ops->forward_backward(g_m, &g_batch, 1.0f, 0, 0);
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  /* the first BN at 1 x 1: the block's shortcut runs before its main path */
  ddp_assert_contains(log,
                      "resnet: layer4.0.downsample.1 sees 1 position(s) per channel in training "
                      "(batch 1 x 1x1); batch norm needs at least 2");
  free(log);
  ck_assert_int_eq(g_m->ops->eval_forward(g_m, &g_batch), DDP_OK); /* inference is fine */
  g_batch.B = 3;
  ddp_test_log_start();
  st = g_m->ops->eval_forward(g_m, &g_batch);
  log = ddp_test_log_stop();
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "resnet: a batch of 3 records (this model holds 1 .. 2)");
  free(log);
}
END_TEST

int main(void) {
  Suite *s = suite_create("resnet");
  TCase *tc = tcase_create("resnet");
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_resnet_table_is_in_backward_order_with_torchvision_names);
  tcase_add_test(tc, test_resnet_layout_of_a_one_pixel_image_ends_one_by_one);
  tcase_add_test(tc, test_resnet_sizes_match_torchvision);
  tcase_add_loop_test(tc, test_resnet_gradients_match_finite_differences_in_train_mode, 0, 2);
  tcase_add_test(tc, test_resnet_eval_uses_running_statistics_and_training_moves_them);
  tcase_add_test(tc, test_resnet_sync_bn_on_one_rank_equals_per_rank_bn);
  tcase_add_test(tc, test_resnet_accumulation_adds_gradients);
  tcase_add_test(tc, test_resnet_init_is_seeded_and_zero_init_residual_zeroes_last_gammas);
  tcase_add_test(tc, test_resnet_refuses_records_that_are_not_images);
  tcase_add_test(tc, test_resnet_refuses_a_backend_without_the_ops_it_calls);
  tcase_add_test(tc, test_resnet_refuses_batch_norm_over_one_position_and_oversized_batches);
  suite_add_tcase(s, tc);
  return ddp_test_run_suite(s);
}
