/* Checkpoint format: a round trip of tensors, optimizer slots and metadata;
 * the CRC catching a flipped data byte and an edited metadata value; an
 * atomic write that fails part-way (ENOSPC) leaving the previous file and
 * no temporary behind; shape mismatches named; directory listing and
 * pruning ignoring other names. */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_util.h"
#include "train/ckpt.h"

enum { N = 10 };
static char g_dir[64];
static ddp_param_t g_tensors[2];
static float g_params[N], g_state[2 * N];
static ddp_options_t g_opts;
static char *g_config;

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ddp_ckpt_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  g_tensors[0] = (ddp_param_t){
      .name = "a.weight", .ndim = 2, .shape = {2, 3}, .offset = 0, .count = 6, .decay = 1};
  g_tensors[1] =
      (ddp_param_t){.name = "a.bias", .ndim = 1, .shape = {4, 0}, .offset = 6, .count = 4};
  for (int i = 0; i < N; ++i) g_params[i] = 0.5f * (float)i - 1.0f;
  for (int i = 0; i < 2 * N; ++i) g_state[i] = 1e-3f * (float)(i + 1);
  ck_assert_int_eq(ddp_options_defaults(&g_opts), DDP_OK);
  g_config = ddp_ckpt_config_json(&g_opts);
  ck_assert_ptr_nonnull(g_config);
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
  free(g_config);
}

static ddp_ckpt_image_t image(float *params, float *state) {
  const char *const *slots;
  int n_slots = ddp_ckpt_slot_names("adamw", &slots);
  ddp_ckpt_image_t img = {.tensors = g_tensors,
                          .n_tensors = 2,
                          .n_params = N,
                          .params = params,
                          .state = state,
                          .n_slots = n_slots,
                          .slot_names = slots,
                          .config = g_config};
  img.meta = (ddp_ckpt_meta_t){.step = 42,
                               .world = 2,
                               .accum = 3,
                               .seed = 1337,
                               .optimizer = "adamw",
                               .sampler = "bucket",
                               .scaler = {.enabled = 0, .scale = 1.0, .growth_tracker = 0}};
  return img;
}

/* --adam-eps is recorded twice: in the optimizer metadata and with every
 * flag of the run; tensors of any rank (a 4-D convolution weight) keep
 * their shapes. */
START_TEST(test_ckpt_records_adam_eps_and_4d_shapes) {
  char p[256];
  ck_assert_int_eq(ddp_ckpt_path(p, sizeof p, g_dir, 7), DDP_OK);
  ddp_param_t conv[2];
  const int64_t w[4] = {2, 1, 1, 3}, b[1] = {4};
  ck_assert_int_eq(ddp_param_set(&conv[0], "conv.weight", 4, w, 0, 1), DDP_OK);
  ck_assert_int_eq(ddp_param_set(&conv[1], "conv.bias", 1, b, 6, 0), DDP_OK);
  ddp_ckpt_image_t img = image(g_params, g_state);
  img.tensors = conv;
  img.meta.adam_eps = 2.5e-7;
  ck_assert_int_eq(ddp_ckpt_write(p, NULL, &img, 0), DDP_OK);
  ddp_ckpt_t *ck = NULL;
  ck_assert_int_eq(ddp_ckpt_open(p, &ck), DDP_OK);
  ck_assert_double_eq(ddp_ckpt_meta(ck)->adam_eps, 2.5e-7);
  ck_assert_str_eq(ddp_ckpt_config_value(ck, "adam-eps"), "1e-08");
  float params[N] = {0}, state[2 * N] = {0};
  ddp_ckpt_image_t got = image(params, state);
  got.tensors = conv;
  ck_assert_int_eq(ddp_ckpt_load(ck, &got), DDP_OK);
  ck_assert_mem_eq(params, g_params, sizeof params);
  ddp_ckpt_close(ck);
  /* the same 4-D tensor with its last two dimensions swapped is refused */
  ck_assert_int_eq(ddp_ckpt_open(p, &ck), DDP_OK);
  conv[0].shape[2] = 3;
  conv[0].shape[3] = 1;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_ckpt_load(ck, &got), DDP_ERR_MISMATCH);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(
      log, "model.conv.weight has shape [2, 1, 1, 3] there and [2, 1, 3, 1] in this model");
  free(log);
  ddp_ckpt_close(ck);
}
END_TEST

static void write_ok(const char *path, int64_t step) {
  ddp_ckpt_image_t img = image(g_params, g_state);
  img.meta.step = step;
  ck_assert_int_eq(ddp_ckpt_write(path, NULL, &img, 0), DDP_OK);
}

static long file_size(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

/* Overwrites one byte at `offset` from the end (negative) or start. */
static void poke(const char *p, long offset, unsigned char v) {
  FILE *f = fopen(p, "r+b");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fseek(f, offset, offset < 0 ? SEEK_END : SEEK_SET), 0);
  fputc(v, f);
  fclose(f);
}

START_TEST(test_ckpt_round_trip) {
  char p[256];
  ck_assert_int_eq(ddp_ckpt_path(p, sizeof p, g_dir, 42), DDP_OK);
  ck_assert_str_eq(strrchr(p, '/'), "/ckpt_00000042.safetensors");
  write_ok(p, 42);
  ddp_ckpt_t *ck = NULL;
  ck_assert_int_eq(ddp_ckpt_open(p, &ck), DDP_OK);
  const ddp_ckpt_meta_t *m = ddp_ckpt_meta(ck);
  ck_assert_int_eq(m->step, 42);
  ck_assert_int_eq(m->world, 2);
  ck_assert_int_eq(m->accum, 3);
  ck_assert_uint_eq(m->seed, 1337);
  ck_assert_str_eq(m->optimizer, "adamw");
  ck_assert_int_eq(m->scaler.enabled, 0);
  ck_assert_double_eq(m->scaler.scale, 1.0);
  ck_assert_str_eq(ddp_ckpt_config_value(ck, "lr"), "0.0030000000000000001");
  ck_assert_str_eq(ddp_ckpt_config_value(ck, "optimizer"), "adamw");
  float params[N] = {0}, state[2 * N] = {0};
  ddp_ckpt_image_t img = image(params, state);
  img.meta.step = 0;
  ck_assert_int_eq(ddp_ckpt_load(ck, &img), DDP_OK);
  ck_assert_mem_eq(params, g_params, sizeof params);
  ck_assert_mem_eq(state, g_state, sizeof state);
  ck_assert_int_eq(img.meta.step, 42);
  ddp_ckpt_close(ck);
}
END_TEST

START_TEST(test_ckpt_crc_catches_corruption) {
  char p[256];
  ck_assert_int_eq(ddp_ckpt_path(p, sizeof p, g_dir, 1), DDP_OK);
  /* a flipped byte in the last tensor's data */
  write_ok(p, 1);
  poke(p, -3, 0x7f);
  ddp_ckpt_t *ck = NULL;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_ckpt_open(p, &ck), DDP_ERR_FORMAT);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "checksum mismatch");
  ddp_assert_contains(log, p);
  free(log);
  ck_assert_ptr_null(ck);
  /* an edited configuration value: "adamw" -> "adamx" stays valid JSON */
  write_ok(p, 1);
  FILE *f = fopen(p, "rb");
  char head[8192];
  size_t n = fread(head, 1, sizeof head - 1, f);
  fclose(f);
  head[n] = '\0';
  char *hit = memmem(head, n, "adamw", 5);
  ck_assert_ptr_nonnull(hit);
  poke(p, (long)(hit - head) + 4, 'x');
  ddp_test_log_start();
  ck_assert_int_eq(ddp_ckpt_open(p, &ck), DDP_ERR_FORMAT);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "checksum mismatch");
  free(log);
  /* a truncated file */
  write_ok(p, 1);
  ck_assert_int_eq(truncate(p, file_size(p) - 8), 0);
  ddp_test_log_start();
  ck_assert_int_ne(ddp_ckpt_open(p, &ck), DDP_OK);
  free(ddp_test_log_stop());
}
END_TEST

START_TEST(test_ckpt_failed_write_keeps_previous) {
  char p[256], tmp[256], cmd[400];
  ck_assert_int_eq(ddp_ckpt_path(p, sizeof p, g_dir, 7), DDP_OK);
  ck_assert_int_eq(ddp_ckpt_tmp_path(tmp, sizeof tmp, g_dir, 7), DDP_OK);
  ck_assert_ptr_nonnull(strstr(tmp, "/.ckpt_00000007.safetensors.tmp."));
  write_ok(p, 7);
  const long before = file_size(p);
  /* a second write of other values that runs out of space part-way */
  float params[N];
  for (int i = 0; i < N; ++i) params[i] = 99.0f;
  ddp_ckpt_image_t img = image(params, g_state);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_ckpt_write(p, tmp, &img, 100), DDP_ERR_IO);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "No space left on device");
  ddp_assert_contains(log, tmp);
  free(log);
  ck_assert_int_eq(access(tmp, F_OK), -1);
  ck_assert_int_eq(file_size(p), before);
  ddp_ckpt_t *ck = NULL;
  ck_assert_int_eq(ddp_ckpt_open(p, &ck), DDP_OK);
  float back[N], state[2 * N];
  ddp_ckpt_image_t got = image(back, state);
  ck_assert_int_eq(ddp_ckpt_load(ck, &got), DDP_OK);
  ck_assert_mem_eq(back, g_params, sizeof back);
  ddp_ckpt_close(ck);
  /* nothing else in the directory */
  snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", g_dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(test_ckpt_shape_mismatch_is_named) {
  char p[256];
  ck_assert_int_eq(ddp_ckpt_path(p, sizeof p, g_dir, 3), DDP_OK);
  write_ok(p, 3);
  ddp_ckpt_t *ck = NULL;
  ck_assert_int_eq(ddp_ckpt_open(p, &ck), DDP_OK);
  float params[N], state[2 * N];
  ddp_ckpt_image_t img = image(params, state);
  ddp_param_t other[2] = {g_tensors[0], g_tensors[1]};
  other[0].shape[0] = 3;
  other[0].shape[1] = 2; /* same count, other shape */
  img.tensors = other;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_ckpt_load(ck, &img), DDP_ERR_MISMATCH);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "model.a.weight has shape [2, 3] there and [3, 2] in this model");
  free(log);
  /* SGD's slot is not in an AdamW checkpoint */
  img = image(params, state);
  img.n_slots = ddp_ckpt_slot_names("sgd", &img.slot_names);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_ckpt_load(ck, &img), DDP_ERR_MISMATCH);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "optim.momentum_buffer.a.weight");
  free(log);
  ddp_ckpt_close(ck);
}
END_TEST

START_TEST(test_ckpt_list_and_prune) {
  char p[256];
  const int64_t steps[] = {1, 10, 2, 100000000};
  for (int i = 0; i < 4; ++i) {
    ck_assert_int_eq(ddp_ckpt_path(p, sizeof p, g_dir, steps[i]), DDP_OK);
    write_ok(p, steps[i]);
  }
  const char *junk[] = {".ckpt_00000003.safetensors.tmp.1", "ckpt_x.safetensors",
                        "ckpt_00000004.safetensors.bak", "notes.txt"};
  for (int i = 0; i < 4; ++i) {
    snprintf(p, sizeof p, "%s/%s", g_dir, junk[i]);
    FILE *f = fopen(p, "w");
    fclose(f);
  }
  int64_t *got = NULL;
  int n = 0;
  ck_assert_int_eq(ddp_ckpt_list(g_dir, &got, &n), DDP_OK);
  ck_assert_int_eq(n, 4);
  ck_assert_int_eq(got[0], 100000000);
  ck_assert_int_eq(got[1], 10);
  ck_assert_int_eq(got[2], 2);
  ck_assert_int_eq(got[3], 1);
  free(got);
  ddp_ckpt_prune(g_dir, 2);
  ck_assert_int_eq(ddp_ckpt_list(g_dir, &got, &n), DDP_OK);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(got[1], 10);
  free(got);
  snprintf(p, sizeof p, "%s/notes.txt", g_dir);
  ck_assert_int_eq(access(p, F_OK), 0);
  /* a missing directory is an empty list */
  snprintf(p, sizeof p, "%s/none", g_dir);
  ck_assert_int_eq(ddp_ckpt_list(p, &got, &n), DDP_OK);
  ck_assert_int_eq(n, 0);
}
END_TEST

static Suite *ckpt_suite(void) {
  Suite *s = suite_create("ckpt");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_ckpt_round_trip);
  tcase_add_test(tc, test_ckpt_crc_catches_corruption);
  tcase_add_test(tc, test_ckpt_failed_write_keeps_previous);
  tcase_add_test(tc, test_ckpt_shape_mismatch_is_named);
  tcase_add_test(tc, test_ckpt_records_adam_eps_and_4d_shapes);
  tcase_add_test(tc, test_ckpt_list_and_prune);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(ckpt_suite());
}
