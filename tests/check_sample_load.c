/* ddpsample's checkpoint loading (src/tools/sample_load.c) refuses what
 * is not a GPT checkpoint, naming the file and the cause: a checkpoint of
 * another model, one whose configuration lacks an architecture flag, and a
 * directory with no checkpoint in it. (Loading a real GPT checkpoint and an
 * export is tests/test_sample.sh's.) */
#include <stdlib.h>

#include "check_util.h"
#include "tools/sample_load.h"
#include "train/ckpt.h"

static char g_dir[64];
static ddp_backend_t *g_be;

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ddp_sample_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  g_be = ddp_test_cpu_backend();
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
  ddp_backend_destroy(g_be);
}

/* A checkpoint at step 1 of one tensor with the given configuration JSON. */
static void write_ckpt(const char *config) {
  ddp_param_t t;
  const int64_t shape[1] = {4};
  ck_assert_int_eq(ddp_param_set(&t, "transformer.wte.weight", 1, shape, 0, 0), DDP_OK);
  float params[4] = {1, 2, 3, 4};
  ddp_ckpt_image_t img = {
      .tensors = &t, .n_tensors = 1, .n_params = 4, .params = params, .config = config};
  img.meta = (ddp_ckpt_meta_t){.step = 1,
                               .world = 1,
                               .accum = 1,
                               .optimizer = "sgd",
                               .sampler = "bucket",
                               .scaler = {.scale = 1.0}};
  char p[256];
  ck_assert_int_eq(ddp_ckpt_path(p, sizeof p, g_dir, 1), DDP_OK);
  ck_assert_int_eq(ddp_ckpt_write(p, NULL, &img, 0), DDP_OK);
}

static void expect_refused(ddp_status_t want, const char *text) {
  sample_model_t *sm = calloc(1, sizeof *sm);
  ck_assert_ptr_nonnull(sm);
  ddp_test_log_start();
  ck_assert_int_eq(sample_model_load(sm, g_be, NULL, g_dir), want);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, text);
  ck_assert_ptr_null(sm->model);
  free(log);
  free(sm);
}

START_TEST(test_refuses_another_model) {
  write_ckpt(
      "{\"model\": \"mlp\", \"n-layer\": \"1\", \"n-head\": \"2\", \"n-embd\": \"16\", "
      "\"seq-len\": \"48\"}");
  expect_refused(DDP_ERR_FORMAT, "a checkpoint of --model mlp; ddpsample runs gpt models");
}
END_TEST

START_TEST(test_refuses_missing_architecture) {
  write_ckpt("{\"model\": \"gpt\", \"n-layer\": \"1\", \"n-embd\": \"16\", \"seq-len\": \"48\"}");
  expect_refused(DDP_ERR_FORMAT, "ckpt_00000001.safetensors: its configuration has no n-head");
}
END_TEST

START_TEST(test_refuses_an_empty_directory) {
  expect_refused(DDP_ERR_IO, "the directory holds no checkpoint");
}
END_TEST

static Suite *sample_load_suite(void) {
  Suite *s = suite_create("sample_load");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_refuses_another_model);
  tcase_add_test(tc, test_refuses_missing_architecture);
  tcase_add_test(tc, test_refuses_an_empty_directory);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(sample_load_suite());
}
