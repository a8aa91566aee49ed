/* Checkpoint format: a round trip of tensors, optimizer slots and metadata;
 * the CRC catching a flipped data byte, an edited metadata value and two
 * swapped tensor names; format 1 refused by name; an atomic write that
 * fails part-way (ENOSPC) leaving the previous file and no temporary
 * behind; shape mismatches named; directory listing and pruning ignoring
 * other names and sparing the resumed-from step; checkpoints above a
 * start step set aside (and an error naming the file when that fails); the
 * temporary files of dead writers removed, those of live ones and of other
 * hosts kept. */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddptrain/safetensors.h"

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
  ddp_ckpt_prune(g_dir, 2, -1);
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

/* Reads a file whole; *n its size. */
static unsigned char *slurp(const char *p, long *n) {
  *n = file_size(p);
  unsigned char *b = malloc((size_t)*n);
  FILE *f = fopen(p, "rb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fread(b, 1, (size_t)*n, f), (size_t)*n);
  fclose(f);
  return b;
}

static void spill(const char *p, const unsigned char *b, long n) {
  FILE *f = fopen(p, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fwrite(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
}

/* Two tensors of one shape whose names have one length ("h.0.w", "h.1.w"):
 * swapping the names in the header keeps the file valid safetensors and
 * every shape right, so only the CRC can tell that the weights would land
 * in the wrong tensors. */
START_TEST(test_ckpt_crc_covers_tensor_names) {
  ddp_param_t twins[2];
  const int64_t shape[1] = {5};
  ck_assert_int_eq(ddp_param_set(&twins[0], "h.0.w", 1, shape, 0, 1), DDP_OK);
  ck_assert_int_eq(ddp_param_set(&twins[1], "h.1.w", 1, shape, 5, 1), DDP_OK);
  char p[256];
  ck_assert_int_eq(ddp_ckpt_path(p, sizeof p, g_dir, 4), DDP_OK);
  ddp_ckpt_image_t img = image(g_params, g_state);
  img.tensors = twins;
  ck_assert_int_eq(ddp_ckpt_write(p, NULL, &img, 0), DDP_OK);
  long n = 0;
  unsigned char *b = slurp(p, &n);
  int swapped = 0;
  for (long i = 0; i + 5 <= n && i < 8 + 4096; ++i) /* the header only */
    if (memcmp(b + i, "h.0.w", 5) == 0)
      b[i + 2] = '1', ++swapped;
    else if (memcmp(b + i, "h.1.w", 5) == 0)
      b[i + 2] = '0', ++swapped;
  ck_assert_int_eq(swapped, 2 * 3); /* model., optim.exp_avg., optim.exp_avg_sq. */
  spill(p, b, n);
  free(b);
  ddp_safetensors_t *raw = NULL; /* still a well-formed file */
  ck_assert_int_eq(ddp_safetensors_open(p, &raw), DDP_OK);
  ddp_safetensors_close(raw);
  ddp_ckpt_t *ck = NULL;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_ckpt_open(p, &ck), DDP_ERR_FORMAT);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, p);
  ddp_assert_contains(log, "checksum mismatch");
  ddp_assert_contains(log, "names, shapes or offsets");
  free(log);
  ck_assert_ptr_null(ck);
  /* a shape edited to another of the same size ([2, 3] -> [3, 2]) too */
  write_ok(p, 4);
  b = slurp(p, &n);
  unsigned char *hit = memmem(b, (size_t)n, "[2,3]", 5);
  ck_assert_ptr_nonnull(hit);
  memcpy(hit, "[3,2]", 5);
  spill(p, b, n);
  free(b);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_ckpt_open(p, &ck), DDP_ERR_FORMAT);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "checksum mismatch");
  free(log);
}
END_TEST

/* A format-1 file (checksum of the data and values only) is refused with a
 * message that says why, not loaded. */
START_TEST(test_ckpt_refuses_format_1) {
  char p[256];
  snprintf(p, sizeof p, "%s/ckpt_00000009.safetensors", g_dir);
  ddp_st_tensor_t t = {
      .name = "model.a.weight", .dtype = DDP_DTYPE_F32, .ndim = 1, .data = g_params};
  t.shape[0] = N;
  const char *meta[] = {"format", DDP_CKPT_FORMAT_1, "step", "9", "crc32", "00000000", NULL};
  ck_assert_int_eq(ddp_safetensors_write(p, &t, 1, meta), DDP_OK);
  ddp_ckpt_t *ck = NULL;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_ckpt_open(p, &ck), DDP_ERR_FORMAT);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "format ddptrain-checkpoint-1, written by an older ddptrain");
  ddp_assert_contains(log, "reads only ddptrain-checkpoint-2");
  free(log);
  ck_assert_ptr_null(ck);
}
END_TEST

static void make_file(const char *dir, const char *name) {
  char p[1100];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
}

static int exists(const char *dir, const char *name) {
  char p[1100];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

/* --keep never deletes the checkpoint the run resumed from. */
START_TEST(test_ckpt_prune_spares_resumed_from) {
  char p[256];
  const int64_t steps[] = {5, 10, 15, 20};
  for (int i = 0; i < 4; ++i) {
    ck_assert_int_eq(ddp_ckpt_path(p, sizeof p, g_dir, steps[i]), DDP_OK);
    write_ok(p, steps[i]);
  }
  ddp_ckpt_prune(g_dir, 1, 10);
  ck_assert(exists(g_dir, "ckpt_00000020.safetensors"));
  ck_assert(exists(g_dir, "ckpt_00000010.safetensors"));
  ck_assert(!exists(g_dir, "ckpt_00000015.safetensors"));
  ck_assert(!exists(g_dir, "ckpt_00000005.safetensors"));
}
END_TEST

/* Checkpoints above the start step move to superseded/, keeping their
 * names (a name already taken there gets ".1"); the others stay. */
START_TEST(test_ckpt_set_aside_moves_higher_steps) {
  char p[512], aside[256];
  const int64_t steps[] = {5, 10, 20, 30};
  for (int i = 0; i < 4; ++i) {
    ck_assert_int_eq(ddp_ckpt_path(p, sizeof p, g_dir, steps[i]), DDP_OK);
    write_ok(p, steps[i]);
  }
  snprintf(aside, sizeof aside, "%s/superseded", g_dir);
  ck_assert_int_eq(mkdir(aside, 0777), 0);
  make_file(aside, "ckpt_00000030.safetensors"); /* set aside by an earlier run */
  int moved = -1;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_ckpt_set_aside(g_dir, 10, &moved), DDP_OK);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "its step 30 is above the step 10 this run starts at");
  free(log);
  ck_assert_int_eq(moved, 2);
  int64_t *got = NULL;
  int n = 0;
  ck_assert_int_eq(ddp_ckpt_list(g_dir, &got, &n), DDP_OK);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(got[0], 10);
  ck_assert_int_eq(got[1], 5);
  free(got);
  ck_assert(exists(aside, "ckpt_00000020.safetensors"));
  ck_assert(exists(aside, "ckpt_00000030.safetensors.1"));
  snprintf(p, sizeof p, "%s/ckpt_00000030.safetensors.1", aside);
  ddp_ckpt_t *ck = NULL; /* moved whole: still a valid checkpoint */
  ck_assert_int_eq(ddp_ckpt_open(p, &ck), DDP_OK);
  ddp_ckpt_close(ck);
  /* nothing above the start step: nothing moves */
  ck_assert_int_eq(ddp_ckpt_set_aside(g_dir, 10, &moved), DDP_OK);
  ck_assert_int_eq(moved, 0);
}
END_TEST

/* A checkpoint that cannot be moved is an error naming it, and it stays. */
START_TEST(test_ckpt_set_aside_failure_is_named) {
  char p[256];
  ck_assert_int_eq(ddp_ckpt_path(p, sizeof p, g_dir, 8), DDP_OK);
  write_ok(p, 8);
  make_file(g_dir, "superseded"); /* a file where the directory should be */
  int moved = -1;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_ckpt_set_aside(g_dir, 2, &moved), DDP_ERR_IO);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, p);
  ddp_assert_contains(log, "above the step 2 this run starts at");
  free(log);
  ck_assert_int_eq(moved, 0);
  ddp_ckpt_t *ck = NULL;
  ck_assert_int_eq(ddp_ckpt_open(p, &ck), DDP_OK);
  ddp_ckpt_close(ck);
}
END_TEST

/* A PID that has just exited (and was reaped): not alive. */
static long dead_pid(void) {
  const pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) _exit(0);
  ck_assert_int_eq(waitpid(child, NULL, 0), child);
  return (long)child;
}

START_TEST(test_ckpt_removes_tmp_of_dead_writers_only) {
  char host[256], name[512];
  ddp_ckpt_host_name(host, sizeof host);
  const long dead = dead_pid();
  /* removed: this host and a dead PID; this process's own PID (it has not
   * written); the older name without a host and a dead PID */
  snprintf(name, sizeof name, ".ckpt_00000005.safetensors.tmp.%s.%ld", host, dead);
  make_file(g_dir, name);
  char own[512];
  ck_assert_int_eq(ddp_ckpt_tmp_path(own, sizeof own, g_dir, 6), DDP_OK);
  make_file(g_dir, strrchr(own, '/') + 1);
  snprintf(name, sizeof name, ".ckpt_00000007.safetensors.tmp.%ld", dead);
  make_file(g_dir, name);
  /* kept: a live PID of this host (the parent), another host's file, other names */
  snprintf(name, sizeof name, ".ckpt_00000008.safetensors.tmp.%s.%ld", host, (long)getppid());
  make_file(g_dir, name);
  snprintf(name, sizeof name, ".ckpt_00000009.safetensors.tmp.other-node.%ld", dead);
  make_file(g_dir, name);
  make_file(g_dir, ".ckpt_x.safetensors.tmp.1");
  make_file(g_dir, "ckpt_00000010.safetensors.tmp.1");
  int removed = -1, kept = -1;
  ddp_test_log_start();
  ddp_ckpt_remove_stale_tmp(g_dir, &removed, &kept);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "written by process");
  ddp_assert_contains(log, "on host other-node, which this host cannot check");
  free(log);
  ck_assert_int_eq(removed, 3);
  ck_assert_int_eq(kept, 2);
  snprintf(name, sizeof name, ".ckpt_00000005.safetensors.tmp.%s.%ld", host, dead);
  ck_assert(!exists(g_dir, name));
  ck_assert(!exists(g_dir, strrchr(own, '/') + 1));
  snprintf(name, sizeof name, ".ckpt_00000007.safetensors.tmp.%ld", dead);
  ck_assert(!exists(g_dir, name));
  snprintf(name, sizeof name, ".ckpt_00000008.safetensors.tmp.%s.%ld", host, (long)getppid());
  ck_assert(exists(g_dir, name));
  snprintf(name, sizeof name, ".ckpt_00000009.safetensors.tmp.other-node.%ld", dead);
  ck_assert(exists(g_dir, name));
  ck_assert(exists(g_dir, ".ckpt_x.safetensors.tmp.1"));
  ck_assert(exists(g_dir, "ckpt_00000010.safetensors.tmp.1"));
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
  tcase_add_test(tc, test_ckpt_crc_covers_tensor_names);
  tcase_add_test(tc, test_ckpt_refuses_format_1);
  tcase_add_test(tc, test_ckpt_prune_spares_resumed_from);
  tcase_add_test(tc, test_ckpt_set_aside_moves_higher_steps);
  tcase_add_test(tc, test_ckpt_set_aside_failure_is_named);
  tcase_add_test(tc, test_ckpt_removes_tmp_of_dead_writers_only);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(ckpt_suite());
}
