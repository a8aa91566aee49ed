/* The whole GPT against the PyTorch reference (tests/reference/gpt_reference.py):
 * the same weights and the same padded, variable-length batch give the same
 * logits, loss and every parameter gradient (1e-4 relative), and 10 AdamW
 * steps give the same losses (1e-4). An odd vocabulary, odd lengths and
 * n_head > 1 keep layout mistakes from cancelling out. SKIPs when configure
 * found no Python with torch (Debian: python3-torch). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddptrain/rng.h"
#include "ddptrain/safetensors.h"
#include "check_util.h"
#include "model/gpt.h"
#include "optim/optim.h"

enum { L = 2, NH = 3, C = 24, TMAX = 13, V = 67, B = 3, STEPS = 10 };
static const int k_lengths[B] = {13, 9, 5};
static const float k_lr = 1e-3f, k_wd = 0.1f;

static char g_dir[256];
static ddp_backend_t *g_be;
static ddp_gpt_t *g_model;
static int32_t g_inputs[B * TMAX], g_targets[B * TMAX];
static int g_n_targets;

static void path_in_dir(char *out, size_t len, const char *name) {
  snprintf(out, len, "%s/%s", g_dir, name);
}

/* Relative difference of two tensors, measured against the reference's
 * largest magnitude (element-wise relative error is meaningless for entries
 * near zero). */
static double rel_diff(const float *x, const float *ref, size_t n) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < n; ++i) {
    diff = fmax(diff, fabs((double)x[i] - ref[i]));
    scale = fmax(scale, fabs((double)ref[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ddp_gptref_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  g_be = ddp_test_cpu_backend();
  /* logits padded as on a GPU (V = vocab below -> a multiple of 128), so the padded LM head
   * is checked against PyTorch too; every other CPU suite runs unpadded */
  ddp_gpt_config_t cfg = {
      .n_layer = L, .n_head = NH, .n_embd = C, .max_seq_len = TMAX, .vocab = V, .vocab_pad = 128};
  ck_assert_int_eq(ddp_gpt_create(&g_model, g_be, &cfg, B * TMAX), DDP_OK);
  ck_assert_int_eq(ddp_gpt_init_weights(g_model, 7), DDP_OK);
  /* GPT-2 init leaves biases 0 and LayerNorm at (1, 0): perturb every
   * parameter so a bias or gain used wrongly cannot hide. */
  size_t n = ddp_gpt_num_params(g_model);
  float *host = malloc(n * sizeof *host), *noise = malloc(n * sizeof *noise);
  ck_assert_int_eq(ddp_gpt_copy_params_to_host(g_model, host), DDP_OK);
  ddp_rng_t rng;
  ddp_rng_init(&rng, 11, 0);
  ddp_rng_fill_normal(&rng, 0, 0.0f, 0.05f, noise, n);
  for (size_t i = 0; i < n; ++i) host[i] += noise[i];
  ck_assert_int_eq(ddp_gpt_copy_params_from_host(g_model, host), DDP_OK);
  free(noise);
  free(host);
  /* Right-padded rows of different lengths; pads hold token 0 and target -1. */
  g_n_targets = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < TMAX; ++t) {
      const int i = b * TMAX + t, valid = t < k_lengths[b];
      g_inputs[i] = valid ? (int32_t)ddp_rng_below(&rng, 1000 + (uint64_t)i, V) : 0;
      g_targets[i] = valid ? (int32_t)ddp_rng_below(&rng, 5000 + (uint64_t)i, V) : -1;
      g_n_targets += valid;
    }
}

static void teardown(void) {
  ddp_gpt_destroy(g_model);
  ddp_backend_destroy(g_be);
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
  ck_assert_int_eq(ddp_gpt_export_safetensors(g_model, w), DDP_OK);
  ddp_st_tensor_t bt[2] = {
      {.name = "inputs", .dtype = DDP_DTYPE_I32, .ndim = 2, .shape = {B, TMAX}, .data = g_inputs},
      {.name = "targets", .dtype = DDP_DTYPE_I32, .ndim = 2, .shape = {B, TMAX}, .data = g_targets},
  };
  ck_assert_int_eq(ddp_safetensors_write(bpath, bt, 2, NULL), DDP_OK);
  snprintf(cmd, sizeof cmd,
           "'%s' '%s/tests/reference/gpt_reference.py' '%s' '%s' '%s' --adamw-steps %d --lr %g "
           "--beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay %g",
           getenv("TORCH_PYTHON"), getenv("top_srcdir"), w, bpath, out, STEPS, (double)k_lr,
           (double)k_wd);
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

/* The hook must see every tensor once, in table order. */
static int g_announced;
static size_t g_next_offset;
static void on_ready(void *ctx, size_t offset, size_t count) {
  (void)ctx;
  ck_assert_uint_eq(offset, g_next_offset);
  g_next_offset += count;
  g_announced++;
}

START_TEST(test_gpt_matches_pytorch_logits_loss_and_gradients) {
  ddp_safetensors_t *ref = run_reference();
  const size_t n = ddp_gpt_num_params(g_model);
  /* Logits from an eval forward. */
  ck_assert_int_eq(ddp_gpt_forward(g_model, g_inputs, g_targets, B, TMAX, 0, 0.0f), DDP_OK);
  float *logits = malloc(sizeof(float) * B * TMAX * V);
  /* (rows are stored with a padded pitch; this drops the padding) */
  ck_assert_int_eq(ddp_gpt_copy_logits_to_host(g_model, logits, B * TMAX), DDP_OK);
  double eval_loss = 0.0;
  ck_assert_int_eq(ddp_gpt_take_loss(g_model, &eval_loss), DDP_OK);
  double d_logits =
      rel_diff(logits, ref_tensor(ref, "logits", (size_t)B * TMAX * V), (size_t)B * TMAX * V);
  ck_assert_msg(d_logits <= 1e-4, "logits differ by %.3g", d_logits);
  free(logits);
  /* Training forward + backward: loss and every gradient. */
  g_announced = 0;
  g_next_offset = 0;
  ddp_gpt_set_grad_hook(g_model, on_ready, NULL);
  ck_assert_int_eq(ddp_gpt_forward(g_model, g_inputs, g_targets, B, TMAX, 1, 1.0f / g_n_targets),
                   DDP_OK);
  ck_assert_int_eq(ddp_gpt_backward(g_model, 0, 1), DDP_OK);
  ck_assert_int_eq(g_announced, ddp_gpt_num_tensors(g_model));
  ck_assert_uint_eq(g_next_offset, n);
  double loss = 0.0;
  ck_assert_int_eq(ddp_gpt_take_loss(g_model, &loss), DDP_OK);
  const double ref_loss = ref_tensor(ref, "loss_sum", 1)[0];
  ck_assert_msg(fabs(loss - ref_loss) <= 1e-4 * fabs(ref_loss), "loss %.8g vs %.8g", loss,
                ref_loss);
  ck_assert_msg(fabs(eval_loss - loss) <= 1e-6 * fabs(loss), "eval loss %.8g vs train %.8g",
                eval_loss, loss);
  float *grads = malloc(n * sizeof *grads);
  ck_assert_int_eq(ddp_backend_copy(g_be, grads, ddp_gpt_grads(g_model), n * sizeof *grads,
                                    DDP_COPY_KIND_DEVICE_TO_HOST, NULL),
                   DDP_OK);
  for (int i = 0; i < ddp_gpt_num_tensors(g_model); ++i) {
    const ddp_param_t *t = ddp_gpt_tensor(g_model, i);
    char key[DDP_PARAM_NAME_MAX + 8];
    snprintf(key, sizeof key, "grad.%s", t->name);
    double d = rel_diff(grads + t->offset, ref_tensor(ref, key, t->count), t->count);
    ck_assert_msg(d <= 1e-4, "gradient of %s differs by %.3g", t->name, d);
  }
  free(grads);
  ddp_safetensors_close(ref);
}
END_TEST

START_TEST(test_gpt_matches_pytorch_over_ten_adamw_steps) {
  ddp_safetensors_t *ref = run_reference();
  const float *ref_losses = ref_tensor(ref, "adamw_losses", STEPS);
  const int nt = ddp_gpt_num_tensors(g_model);
  const size_t n = ddp_gpt_num_params(g_model);
  ddp_param_t *segs = calloc((size_t)nt, sizeof *segs);
  for (int i = 0; i < nt; ++i) {
    const ddp_param_t *t = ddp_gpt_tensor(g_model, i);
    segs[i] = (ddp_param_t){.offset = t->offset, .count = t->count, .decay = t->decay};
  }
  ddp_optim_config_t oc = {.kind = DDP_OPTIM_KIND_ADAMW,
                           .beta1 = 0.9f,
                           .beta2 = 0.95f,
                           .eps = 1e-8f,
                           .weight_decay = k_wd};
  float *state = calloc(n * ddp_optim_state_per_param(&oc), sizeof *state);
  for (int s = 0; s < STEPS; ++s) {
    ck_assert_int_eq(ddp_gpt_forward(g_model, g_inputs, g_targets, B, TMAX, 1, 1.0f / g_n_targets),
                     DDP_OK);
    ck_assert_int_eq(ddp_gpt_backward(g_model, 0, 0), DDP_OK);
    double loss = 0.0;
    ck_assert_int_eq(ddp_gpt_take_loss(g_model, &loss), DDP_OK);
    loss /= g_n_targets;
    ck_assert_msg(fabs(loss - ref_losses[s]) <= 1e-4 * fabs(ref_losses[s]),
                  "step %d: loss %.8g vs PyTorch %.8g", s, loss, (double)ref_losses[s]);
    ddp_optim_step_args_t a = {.cfg = &oc,
                               .params = ddp_gpt_params(g_model),
                               .grads = ddp_gpt_grads(g_model),
                               .state = state,
                               .tensors = segs,
                               .n_tensors = nt,
                               .n = n,
                               .t = s + 1,
                               .lr = k_lr,
                               .grad_scale = 1.0f};
    ck_assert_int_eq(ddp_optim_step_cpu(g_be, &a, NULL), DDP_OK);
  }
  free(state);
  free(segs);
  ddp_safetensors_close(ref);
}
END_TEST

int main(void) {
  const char *py = getenv("TORCH_PYTHON"), *src = getenv("top_srcdir");
  if (!py || !*py || !src) {
    printf("SKIP: no Python with PyTorch was found at configure time (Debian: python3-torch)\n");
    return 77;
  }
  Suite *s = suite_create("gpt_reference");
  TCase *tc = tcase_create("pytorch");
  tcase_set_timeout(tc, 120);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_gpt_matches_pytorch_logits_loss_and_gradients);
  tcase_add_test(tc, test_gpt_matches_pytorch_over_ten_adamw_steps);
  suite_add_tcase(s, tc);
  return ddp_test_run_suite(s);
}
