/* Image shards (src/data/image_shard.c, docs/design.md §5.6): a written
 * shard reads back record for record; every header field corrupted in turn,
 * a truncated or extended file, a label out of range and nonzero padding are
 * each refused with a message naming the field and its byte offset; the
 * writer refuses bad shapes and labels and leaves no file behind when it
 * fails or is aborted. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_util.h"
#include "data/image_shard.h"

static char g_dir[64];

static void dir_setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ddp_imgshard_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void dir_teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
}

static const char *in_dir(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "%s/%s", g_dir, name);
  return buf;
}

static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* 3×5×3 images (45 bytes, padded to 48: a record of 52), 7 classes. */
static const ddp_image_shape_t k_shape = {3, 5, 3, 7};
enum { N_RECORDS = 6, IMAGE_BYTES = 45, RECORD_BYTES = 52 };

static uint8_t pixel(int record, int k) {
  return (uint8_t)(record * 31 + k * 7 + 1);
}

static void write_shard(const char *path) {
  ddp_image_writer_t *w = NULL;
  ck_assert_int_eq(ddp_image_writer_open(&w, path, &k_shape), DDP_OK);
  uint8_t img[IMAGE_BYTES];
  for (int r = 0; r < N_RECORDS; ++r) {
    for (int k = 0; k < IMAGE_BYTES; ++k) img[k] = pixel(r, k);
    ck_assert_int_eq(ddp_image_writer_add(w, img, (r * 3) % 7), DDP_OK);
  }
  ck_assert_int_eq(ddp_image_writer_count(w), N_RECORDS);
  ck_assert_int_eq(ddp_image_writer_finish(w), DDP_OK);
}

static void patch(const char *path, long at, const void *bytes, size_t n) {
  FILE *f = fopen(path, "r+b");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fseek(f, at, SEEK_SET), 0);
  ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
}

static void patch_le32(const char *path, long at, uint32_t v) {
  const unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                              (unsigned char)(v >> 24)};
  patch(path, at, b, 4);
}

/* Opens path expecting DDP_ERR_FORMAT and a message holding each of the
 * NULL-terminated fragments; the shard must come back zeroed. */
static void expect_refused(const char *path, const char *const *fragments) {
  ddp_image_shard_t s;
  ddp_test_log_start();
  const ddp_status_t st = ddp_image_shard_open(&s, path);
  char *log = ddp_test_log_stop();
  ck_assert_msg(st == DDP_ERR_FORMAT, "status %d for '%s'", (int)st, log);
  ck_assert_ptr_null(s.map);
  ck_assert_ptr_null(s.name);
  ck_assert_msg(strstr(log, path) != NULL, "no file name in '%s'", log);
  for (const char *const *f = fragments; *f; ++f)
    ck_assert_msg(strstr(log, *f) != NULL, "'%s' not in '%s'", *f, log);
  free(log);
}

START_TEST(test_round_trip) {
  char path[128];
  in_dir(path, sizeof path, "a.img");
  write_shard(path);
  ck_assert(!exists(in_dir((char[128]){0}, 128, "a.img.tmp")));
  struct stat sb;
  ck_assert_int_eq(stat(path, &sb), 0);
  ck_assert_int_eq(sb.st_size, DDP_IMG_HEADER_BYTES + N_RECORDS * RECORD_BYTES);

  ddp_image_shard_t s;
  ck_assert_int_eq(ddp_image_shard_open(&s, path), DDP_OK);
  ck_assert_int_eq(s.count, N_RECORDS);
  ck_assert_int_eq(s.shape.height, 3);
  ck_assert_int_eq(s.shape.width, 5);
  ck_assert_int_eq(s.shape.channels, 3);
  ck_assert_int_eq(s.shape.n_classes, 7);
  ck_assert_int_eq(s.image_bytes, IMAGE_BYTES);
  ck_assert_int_eq(s.record_bytes, RECORD_BYTES);
  ck_assert_int_eq(ddp_image_record_bytes(&k_shape), RECORD_BYTES);
  for (int r = 0; r < N_RECORDS; ++r) {
    expect_eq(ddp_image_shard_label(&s, r), (r * 3) % 7);
    const uint8_t *px = ddp_image_shard_pixels(&s, r);
    for (int k = 0; k < IMAGE_BYTES; ++k) expect_eq(px[k], pixel(r, k));
  }
  ck_assert_str_eq(s.name, path);
  ddp_image_shard_close(&s);
  ck_assert_ptr_null(s.map);
}
END_TEST

/* One header field set to a bad value, and what the message must name. */
typedef struct corruption {
  long at;
  uint32_t value;
  const char *field, *where;
} corruption_t;

START_TEST(test_every_header_field_is_checked) {
  static const corruption_t k_bad[] = {
      {0, 0x474D4945u, "bad magic", "byte 0"},
      {4, 2, "version", "byte 4"},
      {8, 128, "header size", "byte 8"},
      {12, 0, "record count", "byte 12"},
      {12, 0x80000000u, "record count", "byte 12"},
      {12, N_RECORDS + 1, "truncated", "bytes 12 and 32"},
      {12, N_RECORDS - 1, "trailing data", "bytes 12 and 32"},
      {16, 0, "height", "byte 16"},
      {16, 65536, "height", "byte 16"},
      {16, 0xFFFFFFFFu, "height", "byte 16"},
      {20, 0, "width", "byte 20"},
      {20, 70000, "width", "byte 20"},
      {24, 0, "channels", "byte 24"},
      {24, 5, "channels", "byte 24"},
      {28, 0, "class count", "byte 28"},
      {28, (1u << 24) + 1, "class count", "byte 28"},
      {16, 20000, "height × width × channels", "byte 16"}, /* with width 20000, below */
      {32, RECORD_BYTES + 4, "record size", "byte 32"},
      {36, 1, "reserved header word 9", "byte 36"},
      {60, 1, "reserved header word 15", "byte 60"},
  };
  char path[128];
  in_dir(path, sizeof path, "h.img");
  for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; ++i) {
    write_shard(path);
    corruption_t c = k_bad[i];
    if (strcmp(c.field, "height × width × channels") == 0) {
      /* a 20000 × 20000 × 3 image is over the 2^28-byte bound */
      patch_le32(path, 20, 20000);
    }
    patch_le32(path, c.at, c.value);
    const char *frags[] = {c.field, c.where, NULL};
    expect_refused(path, frags);
  }
}
END_TEST

START_TEST(test_truncated_and_extended_files) {
  char path[128];
  in_dir(path, sizeof path, "t.img");
  write_shard(path);
  ck_assert_int_eq(truncate(path, DDP_IMG_HEADER_BYTES + N_RECORDS * RECORD_BYTES - 1), 0);
  expect_refused(path, (const char *[]){"truncated", "bytes 12 and 32", NULL});
  ck_assert_int_eq(truncate(path, DDP_IMG_HEADER_BYTES - 1), 0);
  expect_refused(path, (const char *[]){"truncated header", "63 bytes", NULL});
  ck_assert_int_eq(truncate(path, 0), 0);
  expect_refused(path, (const char *[]){"truncated header", "0 bytes", NULL});
  write_shard(path);
  ck_assert_int_eq(truncate(path, DDP_IMG_HEADER_BYTES + N_RECORDS * RECORD_BYTES + 1), 0);
  expect_refused(path, (const char *[]){"trailing data", NULL});
}
END_TEST

START_TEST(test_labels_and_padding_are_checked_at_open) {
  char path[128], at[64];
  in_dir(path, sizeof path, "l.img");
  const long rec3 = DDP_IMG_HEADER_BYTES + 3 * RECORD_BYTES;
  snprintf(at, sizeof at, "record 3 at byte %ld is 7", rec3);
  write_shard(path);
  patch_le32(path, rec3, 7); /* == the class count */
  expect_refused(path, (const char *[]){at, "[0, 7)", NULL});
  write_shard(path);
  patch_le32(path, rec3, 0xFFFFFFFFu); /* -1 */
  snprintf(at, sizeof at, "record 3 at byte %ld is -1", rec3);
  expect_refused(path, (const char *[]){at, NULL});
  /* the last padding byte of the last record */
  write_shard(path);
  const long last = DDP_IMG_HEADER_BYTES + N_RECORDS * RECORD_BYTES - 1;
  patch(path, last, "\x01", 1);
  snprintf(at, sizeof at, "padding byte 2 of record 5 (byte %ld)", last);
  expect_refused(path, (const char *[]){at, NULL});
}
END_TEST

START_TEST(test_missing_and_non_regular_files) {
  char path[128];
  ddp_image_shard_t s;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_image_shard_open(&s, in_dir(path, sizeof path, "none.img")), DDP_ERR_IO);
  ck_assert_int_eq(ddp_image_shard_open(&s, g_dir), DDP_ERR_IO);
  char *log = ddp_test_log_stop();
  ck_assert_ptr_nonnull(strstr(log, "none.img"));
  ck_assert_ptr_nonnull(strstr(log, "not a regular file"));
  free(log);
}
END_TEST

START_TEST(test_writer_refuses_bad_input_and_leaves_nothing) {
  char path[128], tmp[140];
  in_dir(path, sizeof path, "w.img");
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  ddp_image_writer_t *w = NULL;
  const ddp_image_shape_t bad[] = {{0, 5, 3, 7}, {3, 0, 3, 7},     {3, 5, 5, 7},
                                   {3, 5, 3, 0}, {65536, 5, 3, 7}, {20000, 20000, 1, 2}};
  ddp_test_log_start();
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    ck_assert_int_eq(ddp_image_writer_open(&w, path, &bad[i]), DDP_ERR_INVALID_ARG);
    ck_assert_ptr_null(w);
    ck_assert(!exists(tmp));
  }
  /* a bad label is refused and the writer stays usable */
  uint8_t img[IMAGE_BYTES] = {0};
  ck_assert_int_eq(ddp_image_writer_open(&w, path, &k_shape), DDP_OK);
  ck_assert_int_eq(ddp_image_writer_add(w, img, 7), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_image_writer_add(w, img, -1), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_image_writer_count(w), 0);
  /* finishing without records fails and removes the temporary file */
  ck_assert_int_eq(ddp_image_writer_finish(w), DDP_ERR_INVALID_ARG);
  ck_assert(!exists(tmp) && !exists(path));
  /* an abort leaves an existing file untouched */
  write_shard(path);
  ck_assert_int_eq(ddp_image_writer_open(&w, path, &k_shape), DDP_OK);
  ck_assert_int_eq(ddp_image_writer_add(w, img, 1), DDP_OK);
  ck_assert(exists(tmp));
  ddp_image_writer_abort(w);
  ck_assert(!exists(tmp));
  /* a directory that does not exist */
  ck_assert_int_eq(ddp_image_writer_open(&w, "/nonexistent-dir/x.img", &k_shape), DDP_ERR_IO);
  ck_assert_ptr_null(w);
  char *log = ddp_test_log_stop();
  ck_assert_ptr_nonnull(strstr(log, "label 7 of record 0 is outside [0, 7)"));
  ck_assert_ptr_nonnull(strstr(log, "without records"));
  ck_assert_ptr_nonnull(strstr(log, "channels is out of bounds"));
  free(log);
  ddp_image_shard_t s;
  ck_assert_int_eq(ddp_image_shard_open(&s, path), DDP_OK);
  ck_assert_int_eq(s.count, N_RECORDS);
  ddp_image_shard_close(&s);
}
END_TEST

static Suite *image_shard_suite(void) {
  Suite *s = suite_create("image_shard");
  TCase *tc = tcase_create("image_shard");
  tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
  tcase_add_test(tc, test_round_trip);
  tcase_add_test(tc, test_every_header_field_is_checked);
  tcase_add_test(tc, test_truncated_and_extended_files);
  tcase_add_test(tc, test_labels_and_padding_are_checked_at_open);
  tcase_add_test(tc, test_missing_and_non_regular_files);
  tcase_add_test(tc, test_writer_refuses_bad_input_and_leaves_nothing);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(image_shard_suite());
}
