/* safetensors: round trip of every dtype and metadata, byte layout of the
 * header, and every corrupt or unwritable case ending in a named error with
 * nothing left under the final name. */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_util.h"
#include "ddptrain/safetensors.h"

static char g_dir[64];

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ddp_st_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
}

static void path(char *out, const char *name) {
  snprintf(out, 256, "%s/%s", g_dir, name);
}

static void write_bytes(const char *p, const void *data, size_t n) {
  FILE *f = fopen(p, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(data, 1, n, f), n);
  fclose(f);
}

/* A file with the given JSON header and `data_bytes` zero bytes of data. */
static void write_raw(const char *p, const char *json, size_t data_bytes) {
  size_t h = strlen(json);
  unsigned char *buf = calloc(1, 8 + h + data_bytes);
  for (int i = 0; i < 8; ++i) buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
  memcpy(buf + 8, json, h);
  write_bytes(p, buf, 8 + h + data_bytes);
  free(buf);
}

/* Opens p expecting failure; returns the log for message checks. Reading
 * the header alone must find the same fault with the same message (the
 * data's extent is checked against the file's size there too). */
static char *open_fails(const char *p, ddp_status_t want) {
  ddp_safetensors_t *st = (ddp_safetensors_t *)1;
  ddp_test_log_start();
  ddp_status_t got = ddp_safetensors_open(p, &st);
  char *log = ddp_test_log_stop();
  ck_assert_msg(got == want, "open: got %s, want %s; log: %s", ddp_status_name(got),
                ddp_status_name(want), log);
  ck_assert_ptr_null(st);
  st = (ddp_safetensors_t *)1;
  ddp_test_log_start();
  got = ddp_safetensors_open_header(p, &st);
  char *header_log = ddp_test_log_stop();
  ck_assert_msg(got == want, "open_header: got %s, want %s; log: %s", ddp_status_name(got),
                ddp_status_name(want), header_log);
  ck_assert_ptr_null(st);
  const char *msg = strstr(log, "ERROR"), *header_msg = strstr(header_log, "ERROR");
  ck_assert_ptr_nonnull(msg);
  ck_assert_ptr_nonnull(header_msg);
  ck_assert_msg(strncmp(msg, header_msg, strcspn(msg, "(\n")) == 0,
                "open and open_header report differently:\n%s%s", log, header_log);
  free(header_log);
  return log;
}

START_TEST(test_safetensors_round_trip_all_dtypes_and_metadata) {
  char p[256];
  path(p, "rt.safetensors");
  float f32[6] = {1, -2, 3.5f, 0, 1e-30f, -7};
  uint16_t b16[3] = {0x3F80, 0xC000, 0x7FC0}, h16[2] = {0x3C00, 0x8001};
  int32_t i32[4] = {-1, 0, 7, 2147483647};
  ddp_st_tensor_t t[] = {
      {.name = "w", .dtype = DDP_DTYPE_F32, .ndim = 2, .shape = {2, 3}, .data = f32},
      {.name = "b", .dtype = DDP_DTYPE_BF16, .ndim = 1, .shape = {3}, .data = b16},
      {.name = "h", .dtype = DDP_DTYPE_F16, .ndim = 1, .shape = {2}, .data = h16},
      {.name = "i", .dtype = DDP_DTYPE_I32, .ndim = 3, .shape = {1, 2, 2}, .data = i32},
      {.name = "empty", .dtype = DDP_DTYPE_F32, .ndim = 1, .shape = {0}, .data = NULL},
      {.name = "scalar", .dtype = DDP_DTYPE_F32, .ndim = 0, .data = f32 + 2},
  };
  const char *meta[] = {"format", "pt", "step", "42", NULL};
  ck_assert_int_eq(ddp_safetensors_write(p, t, 6, meta), DDP_OK);
  ddp_safetensors_t *st;
  ck_assert_int_eq(ddp_safetensors_open(p, &st), DDP_OK);
  ck_assert_int_eq(ddp_safetensors_count(st), 6);
  ck_assert_str_eq(ddp_safetensors_meta(st, "step"), "42");
  ck_assert_ptr_null(ddp_safetensors_meta(st, "nope"));
  for (int i = 0; i < 6; ++i) {
    ddp_st_tensor_t r;
    ck_assert_int_eq(ddp_safetensors_find(st, t[i].name, &r), DDP_OK);
    ck_assert_int_eq(r.dtype, t[i].dtype);
    ck_assert_int_eq(r.ndim, t[i].ndim);
    int64_t n = 1;
    for (int d = 0; d < r.ndim; ++d) {
      ck_assert_int_eq(r.shape[d], t[i].shape[d]);
      n *= r.shape[d];
    }
    if (n) ck_assert_int_eq(memcmp(r.data, t[i].data, (size_t)n * ddp_dtype_size(r.dtype)), 0);
  }
  /* By index: every tensor once, in file (write) order. */
  for (int i = 0; i < 6; ++i) {
    ddp_st_tensor_t r;
    ck_assert_int_eq(ddp_safetensors_get(st, i, &r), DDP_OK);
    ck_assert_str_eq(r.name, t[i].name);
  }
  ddp_test_log_start();
  ddp_st_tensor_t r;
  ck_assert_int_eq(ddp_safetensors_find(st, "missing", &r), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_safetensors_get(st, 6, &r), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_safetensors_get(st, -1, &r), DDP_ERR_INVALID_ARG);
  free(ddp_test_log_stop());
  ddp_safetensors_close(st);
  /* the header alone: the same names, dtypes, shapes and metadata, no data */
  ck_assert_int_eq(ddp_safetensors_open_header(p, &st), DDP_OK);
  ck_assert_int_eq(ddp_safetensors_count(st), 6);
  ck_assert_str_eq(ddp_safetensors_meta(st, "step"), "42");
  for (int i = 0; i < 6; ++i) {
    ck_assert_int_eq(ddp_safetensors_get(st, i, &r), DDP_OK);
    ck_assert_str_eq(r.name, t[i].name);
    ck_assert_int_eq(r.dtype, t[i].dtype);
    ck_assert_int_eq(r.ndim, t[i].ndim);
    for (int d = 0; d < r.ndim; ++d) ck_assert_int_eq(r.shape[d], t[i].shape[d]);
    ck_assert_ptr_null(r.data);
  }
  ddp_safetensors_close(st);
}
END_TEST

START_TEST(test_safetensors_layout_is_standard) {
  /* 8-byte little-endian length, JSON padded to 8 bytes, data in order. */
  char p[256];
  path(p, "layout.safetensors");
  float x[2] = {1.0f, 2.0f};
  ddp_st_tensor_t t = {.name = "x", .dtype = DDP_DTYPE_F32, .ndim = 1, .shape = {2}, .data = x};
  ck_assert_int_eq(ddp_safetensors_write(p, &t, 1, NULL), DDP_OK);
  FILE *f = fopen(p, "rb");
  unsigned char buf[256];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  uint64_t h = 0;
  for (int i = 7; i >= 0; --i) h = (h << 8) | buf[i];
  ck_assert_uint_eq(h % 8, 0);
  ck_assert_uint_eq(n, 8 + h + 8);
  ck_assert(memmem(buf + 8, h, "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}",
                   51) != NULL);
  ck_assert_int_eq(memcmp(buf + 8 + h, x, 8), 0);
}
END_TEST

START_TEST(test_safetensors_corrupt_files_are_named_errors) {
  char p[256];
  path(p, "bad.safetensors");
  char *log;
  write_bytes(p, "abc", 3);
  log = open_fails(p, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "bad.safetensors: 3 bytes is too short");
  free(log);
  write_raw(p, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4);
  log = open_fails(p, DDP_ERR_FORMAT); /* truncated data */
  ddp_assert_contains(log, "tensor 'x' has data_offsets [0, 8]");
  free(log);
  write_raw(p, "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8);
  log = open_fails(p, DDP_ERR_FORMAT); /* size does not match shape */
  free(log);
  write_raw(p, "{\"x\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8);
  log = open_fails(p, DDP_ERR_UNSUPPORTED);
  ddp_assert_contains(log, "dtype F64");
  free(log);
  write_raw(p,
            "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
            8);
  log = open_fails(p, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "overlap");
  free(log);
  write_raw(p, "{not json", 0);
  log = open_fails(p, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "the header is not a JSON object");
  free(log);
  write_raw(p, "{\"x\":{\"dtype\":\"F32\"}}", 0);
  log = open_fails(p, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "lacks dtype, shape or data_offsets");
  free(log);
  write_raw(p, "{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0);
  log = open_fails(p, DDP_ERR_FORMAT);
  free(log);
  unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
  write_bytes(p, huge, sizeof huge);
  log = open_fails(p, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "exceeds the file");
  free(log);
  path(p, "missing.safetensors");
  log = open_fails(p, DDP_ERR_IO);
  ddp_assert_contains(log, "cannot open");
  free(log);
}
END_TEST

START_TEST(test_safetensors_failed_write_leaves_nothing_and_keeps_old_file) {
  char p[256], dir[256];
  float x = 1.0f;
  ddp_st_tensor_t t = {.name = "x", .dtype = DDP_DTYPE_F32, .ndim = 1, .shape = {1}, .data = &x};
  /* A directory that does not exist: an error naming it. */
  path(p, "nodir/x.safetensors");
  ddp_test_log_start();
  ck_assert_int_eq(ddp_safetensors_write(p, &t, 1, NULL), DDP_ERR_IO);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "nodir/x.safetensors.tmp");
  free(log);
  /* Bad input is rejected before anything is created; an existing file under
   * the final name survives untouched. */
  path(p, "keep.safetensors");
  ck_assert_int_eq(ddp_safetensors_write(p, &t, 1, NULL), DDP_OK);
  ddp_st_tensor_t dup[2] = {t, t};
  ddp_test_log_start();
  ck_assert_int_eq(ddp_safetensors_write(p, dup, 2, NULL), DDP_ERR_INVALID_ARG);
  ddp_st_tensor_t bad = t;
  bad.data = NULL;
  ck_assert_int_eq(ddp_safetensors_write(p, &bad, 1, NULL), DDP_ERR_INVALID_ARG);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "tensor name 'x' repeats");
  free(log);
  ddp_safetensors_t *st;
  ck_assert_int_eq(ddp_safetensors_open(p, &st), DDP_OK);
  ck_assert_int_eq(ddp_safetensors_count(st), 1);
  ddp_safetensors_close(st);
  /* No temporary files are left behind. */
  snprintf(dir, sizeof dir, "ls '%s' | grep -q tmp", g_dir);
  ck_assert_int_ne(system(dir), 0);
}
END_TEST

static Suite *st_suite(void) {
  Suite *s = suite_create("safetensors");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_safetensors_round_trip_all_dtypes_and_metadata);
  tcase_add_test(tc, test_safetensors_layout_is_standard);
  tcase_add_test(tc, test_safetensors_corrupt_files_are_named_errors);
  tcase_add_test(tc, test_safetensors_failed_write_leaves_nothing_and_keeps_old_file);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(st_suite());
}
