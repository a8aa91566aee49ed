/* --model resnet against the PyTorch reference (tests/reference/resnet_reference.py):
 * the same weights (exported by the model, loaded with load_state_dict) and
 * the same batch give, in fp32 on the CPU, the same inference logits, the
 * same training loss and every parameter gradient (batch statistics), and
 * 10 SGD steps (momentum, Nesterov, weight decay on conv and fc weights
 * only) give the same losses, weights, running statistics and batch
 * counters, and the same inference logits afterwards. Two tiny nets: basic
 * blocks under the cifar stem, bottleneck blocks under the imagenet stem
 * (7x7 conv and max-pool), the latter with label smoothing. Every parameter and running statistic
 * is perturbed first, so a gamma, beta or statistic used wrongly cannot hide behind 1 and 0. SKIPs
 * when configure found no Python with torch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddptrain/model.h"
#include "ddptrain/rng.h"
#include "ddptrain/safetensors.h"
#include "check_util.h"
#include "optim/optim.h"

enum { STEPS = 10 };
static const float k_lr = 0.02f, k_momentum = 0.9f, k_wd = 5e-4f;

typedef struct net {
  const char *depth, *stem, *smoothing;
  int H, W, C, N, classes;
} net_t;
static const net_t k_nets[] = {
    {"10", "cifar", "0", 17, 17, 3, 4, 5},     /* basic blocks, 3x3 stem */
    {"14", "imagenet", "0.1", 64, 64, 3, 4, 6} /* bottleneck blocks, 7x7 stem + max-pool */
};

static char g_dir[256];
static ddp_backend_t *g_be;
static ddp_options_t g_opts;
static ddp_model_t *g_m;
static ddp_record_batch_t g_batch;
static const net_t *g_net;

static void path_in_dir(char *out, size_t len, const char *name) {
  snprintf(out, len, "%s/%s", g_dir, name);
}

/* Largest difference over the reference's largest magnitude. */
static double rel_diff(const float *x, const float *ref, size_t n) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < n; ++i) {
    diff = fmax(diff, fabs((double)x[i] - ref[i]));
    scale = fmax(scale, fabs((double)ref[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

static void setup_net(int which) {
  g_net = &k_nets[which];
  snprintf(g_dir, sizeof g_dir, "/tmp/ddp_resnetref_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  g_be = ddp_test_cpu_backend();
  ck_assert_int_eq(
      ddp_test_parse(&g_opts, NULL, "--model", "resnet", "--depth", g_net->depth, "--width", "4",
                     "--stem", g_net->stem, "--label-smoothing", g_net->smoothing, NULL),
      DDP_OK);
  const int64_t floats = (int64_t)g_net->H * g_net->W * g_net->C;
  const ddp_model_setup_t s = {.be = g_be,
                               .opts = &g_opts,
                               .data = {.kind = DDP_BATCH_RECORDS,
                                        .record_ndim = 3,
                                        .record_shape = {g_net->H, g_net->W, g_net->C, 1},
                                        .record_floats = floats,
                                        .n_classes = g_net->classes},
                               .max_batch = g_net->N};
  ck_assert_int_eq(ddp_model_create(ddp_model_find("resnet"), &s, &g_m), DDP_OK);
  ck_assert_int_eq(g_m->ops->init_weights(g_m, 5), DDP_OK);
  /* perturb parameters and running statistics (variances stay positive) */
  const size_t n = g_m->n_params, nb = g_m->n_buffer_floats;
  float *host = ddp_test_track(malloc(n * sizeof *host));
  float *noise = ddp_test_track(malloc((n + nb) * sizeof *noise));
  float *buf = ddp_test_track(malloc(nb * sizeof *buf));
  ck_assert_int_eq(ddp_model_params_to_host(g_m, host), DDP_OK);
  ddp_rng_t rng;
  ddp_rng_init(&rng, 11, 0);
  ddp_rng_fill_normal(&rng, 0, 0.0f, 0.1f, noise, n + nb);
  for (size_t i = 0; i < n; ++i) host[i] += noise[i];
  ck_assert_int_eq(ddp_model_params_from_host(g_m, host), DDP_OK);
  memcpy(buf, g_m->buffers, nb * sizeof *buf); /* CPU backend: host memory */
  for (int i = 0; i < g_m->n_buffer_tensors; ++i) {
    const ddp_buffer_t *b = &g_m->buffer_tensors[i];
    const int var = strstr(b->t.name, "running_var") != NULL;
    for (size_t k = 0; k < b->t.count && b->kind == DDP_BUFFER_MEAN; ++k)
      buf[b->t.offset + k] += var ? fabsf(noise[n + b->t.offset + k]) : noise[n + b->t.offset + k];
  }
  memcpy(g_m->buffers, buf, nb * sizeof *buf);
  ck_assert_int_eq(ddp_record_batch_init(&g_batch, NULL, g_net->N, floats), DDP_OK);
  g_batch.B = g_net->N, g_batch.floats = floats, g_batch.n_targets = g_net->N;
  ddp_rng_fill_normal(&rng, 1u << 20, 0.0f, 1.0f, g_batch.inputs, (size_t)(g_net->N * floats));
  for (int r = 0; r < g_net->N; ++r)
    g_batch.labels[r] = (int32_t)ddp_rng_below(&rng, 7000 + (uint64_t)r, (uint64_t)g_net->classes);
}

static void teardown(void) {
  ddp_record_batch_destroy(&g_batch);
  ddp_model_destroy(g_m);
  ddp_backend_destroy(g_be);
  ddp_test_free_tracked();
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

/* Exports weights and batch, runs the reference, opens its output. */
static ddp_safetensors_t *run_reference(void) {
  char w[512], bpath[512], out[512], cmd[2048];
  path_in_dir(w, sizeof w, "weights.safetensors");
  path_in_dir(bpath, sizeof bpath, "batch.safetensors");
  path_in_dir(out, sizeof out, "reference.safetensors");
  ck_assert_int_eq(ddp_model_export(g_m, w), DDP_OK);
  ddp_st_tensor_t bt[2] = {
      {.name = "inputs",
       .dtype = DDP_DTYPE_F32,
       .ndim = 4,
       .shape = {g_net->N, g_net->H, g_net->W, g_net->C},
       .data = g_batch.inputs},
      {.name = "labels",
       .dtype = DDP_DTYPE_I32,
       .ndim = 1,
       .shape = {g_net->N},
       .data = g_batch.labels},
  };
  ck_assert_int_eq(ddp_safetensors_write(bpath, bt, 2, NULL), DDP_OK);
  snprintf(cmd, sizeof cmd,
           "'%s' '%s/tests/reference/resnet_reference.py' '%s' '%s' '%s' --sgd-steps %d --lr %g "
           "--momentum %g --nesterov 1 --weight-decay %g --label-smoothing %s",
           getenv("TORCH_PYTHON"), getenv("top_srcdir"), w, bpath, out, STEPS, (double)k_lr,
           (double)k_momentum, (double)k_wd, g_net->smoothing);
  ck_assert_msg(system(cmd) == 0, "the reference failed: %s", cmd);
  ddp_safetensors_t *st = NULL;
  ck_assert_int_eq(ddp_safetensors_open(out, &st), DDP_OK);
  return st;
}

static const float *ref_tensor(ddp_safetensors_t *st, const char *name, size_t expect) {
  ddp_st_tensor_t t;
  ck_assert_msg(ddp_safetensors_find(st, name, &t) == DDP_OK, "reference lacks %s", name);
  int64_t n = 1;
  for (int d = 0; d < t.ndim; ++d) n *= t.shape[d];
  ck_assert_int_eq(n, (int64_t)expect);
  return t.data;
}

/* A reference tensor in the model's layout: 4-D (K,C,R,S) -> (K,R,S,C). */
static const float *ref_in_model_layout(ddp_safetensors_t *st, const char *name,
                                        const ddp_param_t *p) {
  const float *src = ref_tensor(st, name, p->count);
  if (p->ndim != 4) return src;
  float *dst = ddp_test_track(malloc(p->count * sizeof *dst));
  const int64_t K = p->shape[0], R = p->shape[1], S = p->shape[2], C = p->shape[3];
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < R; ++y)
        for (int64_t x = 0; x < S; ++x)
          dst[((k * R + y) * S + x) * C + c] = src[((k * C + c) * R + y) * S + x];
  return dst;
}

static size_t g_next_offset;
static int g_announced;
static void on_ready(void *ctx, size_t offset, size_t count) {
  (void)ctx;
  ck_assert_uint_eq(offset, g_next_offset);
  g_next_offset += count;
  g_announced++;
}

START_TEST(test_resnet_matches_pytorch_logits_loss_and_gradients) {
  setup_net(_i);
  ddp_safetensors_t *ref = run_reference();
  const size_t nl = (size_t)g_net->N * (size_t)g_net->classes;
  float *logits = ddp_test_track(malloc(nl * sizeof *logits));
  ck_assert_int_eq(g_m->ops->eval_forward(g_m, &g_batch), DDP_OK);
  ck_assert_int_eq(g_m->ops->copy_outputs(g_m, logits, g_net->N), DDP_OK);
  double eval_loss = 0.0;
  ck_assert_int_eq(g_m->ops->take_loss(g_m, &eval_loss), DDP_OK);
  const double d_eval = rel_diff(logits, ref_tensor(ref, "eval_logits", nl), nl);
  ck_assert_msg(d_eval <= 1e-4, "inference logits differ by %.3g", d_eval);

  g_m->grad_ready_fn = on_ready, g_announced = 0, g_next_offset = 0;
  ck_assert_int_eq(g_m->ops->forward_backward(g_m, &g_batch, 1.0f / (float)g_net->N, 0, 1), DDP_OK);
  ck_assert_int_eq(g_announced, g_m->n_tensors);
  ck_assert_uint_eq(g_next_offset, g_m->n_params);
  double loss = 0.0;
  ck_assert_int_eq(g_m->ops->take_loss(g_m, &loss), DDP_OK);
  const double ref_loss = ref_tensor(ref, "loss_sum", 1)[0];
  ck_assert_msg(fabs(loss - ref_loss) <= 1e-5 * fabs(ref_loss), "loss %.8g vs PyTorch %.8g", loss,
                ref_loss);
  ck_assert_msg(fabs(eval_loss - loss) > 1e-3,
                "inference and training losses agree: batch "
                "statistics were not used in one of them");
  for (int i = 0; i < g_m->n_tensors; ++i) {
    const ddp_param_t *t = &g_m->tensors[i];
    char key[DDP_PARAM_NAME_MAX + 8];
    snprintf(key, sizeof key, "grad.%s", t->name);
    const double d = rel_diff(g_m->grads + t->offset, ref_in_model_layout(ref, key, t), t->count);
    ck_assert_msg(d <= 1e-4, "gradient of %s differs by %.3g", t->name, d);
  }
  ddp_safetensors_close(ref);
  teardown();
}
END_TEST

START_TEST(test_resnet_matches_pytorch_over_ten_sgd_steps) {
  setup_net(_i);
  ddp_safetensors_t *ref = run_reference();
  const float *ref_losses = ref_tensor(ref, "sgd_losses", STEPS);
  const size_t n = g_m->n_params;
  ddp_optim_config_t oc = {
      .kind = DDP_OPTIM_KIND_SGD, .weight_decay = k_wd, .momentum = k_momentum, .nesterov = 1};
  float *state = ddp_test_track(calloc(n * ddp_optim_state_per_param(&oc), sizeof *state));
  for (int s = 0; s < STEPS; ++s) {
    ck_assert_int_eq(g_m->ops->forward_backward(g_m, &g_batch, 1.0f / (float)g_net->N, 0, 0),
                     DDP_OK);
    double loss = 0.0;
    ck_assert_int_eq(g_m->ops->take_loss(g_m, &loss), DDP_OK);
    loss /= g_net->N;
    /* measured against the first loss: the batch is soon learnt and the
     * loss near 0, where a relative error of its own means nothing */
    ck_assert_msg(fabs(loss - ref_losses[s]) <= 1e-4 * fmax(fabs(ref_losses[s]), ref_losses[0]),
                  "step %d: loss %.8g vs PyTorch %.8g", s, loss, (double)ref_losses[s]);
    ddp_optim_step_args_t a = {.cfg = &oc,
                               .params = g_m->params,
                               .grads = g_m->grads,
                               .state = state,
                               .tensors = g_m->tensors,
                               .n_tensors = g_m->n_tensors,
                               .n = n,
                               .t = s + 1,
                               .lr = k_lr,
                               .grad_scale = 1.0f};
    ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
  }
  /* weights (in the model's layout) and every buffer, as PyTorch's state_dict */
  for (int i = 0; i < g_m->n_tensors; ++i) {
    const ddp_param_t *t = &g_m->tensors[i];
    char key[DDP_PARAM_NAME_MAX + 8];
    snprintf(key, sizeof key, "after.%s", t->name);
    const double d = rel_diff(g_m->params + t->offset, ref_in_model_layout(ref, key, t), t->count);
    ck_assert_msg(d <= 1e-4, "%s after %d steps differs by %.3g", t->name, STEPS, d);
  }
  for (int i = 0; i < g_m->n_buffer_tensors; ++i) {
    const ddp_param_t *t = &g_m->buffer_tensors[i].t;
    char key[DDP_PARAM_NAME_MAX + 8];
    snprintf(key, sizeof key, "after.%s", t->name);
    const float *want = ref_tensor(ref, key, t->count);
    const double d = rel_diff(g_m->buffers + t->offset, want, t->count);
    ck_assert_msg(d <= 1e-4, "%s after %d steps differs by %.3g", t->name, STEPS, d);
    if (g_m->buffer_tensors[i].kind == DDP_BUFFER_COUNT)
      ck_assert_float_eq(g_m->buffers[t->offset], (float)STEPS);
  }
  const size_t nl = (size_t)g_net->N * (size_t)g_net->classes;
  float *logits = ddp_test_track(malloc(nl * sizeof *logits));
  ck_assert_int_eq(g_m->ops->eval_forward(g_m, &g_batch), DDP_OK);
  ck_assert_int_eq(g_m->ops->copy_outputs(g_m, logits, g_net->N), DDP_OK);
  const double d = rel_diff(logits, ref_tensor(ref, "eval_logits_after", nl), nl);
  ck_assert_msg(d <= 1e-4, "inference logits after %d steps differ by %.3g", STEPS, d);
  ddp_safetensors_close(ref);
  teardown();
}
END_TEST

int main(void) {
  const char *py = getenv("TORCH_PYTHON"), *src = getenv("top_srcdir");
  if (!py || !*py || !src) {
    printf("SKIP: no Python with PyTorch was found at configure time (Debian: python3-torch)\n");
    return 77;
  }
  Suite *s = suite_create("resnet_reference");
  TCase *tc = tcase_create("pytorch");
  tcase_set_timeout(tc, 300);
  const int nets = (int)(sizeof k_nets / sizeof k_nets[0]);
  tcase_add_loop_test(tc, test_resnet_matches_pytorch_logits_loss_and_gradients, 0, nets);
  tcase_add_loop_test(tc, test_resnet_matches_pytorch_over_ten_sgd_steps, 0, nets);
  suite_add_tcase(s, tc);
  return ddp_test_run_suite(s);
}
