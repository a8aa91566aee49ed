/* Record data (fixed-size samples with a class label, ddptrain/data.h) from
 * arrays and from safetensors record files, with every rejection and its
 * message; the fingerprint ranks compare; record batch buffers with and
 * without a backend's host allocator; the sampler dealing records (items of
 * one target) to ranks: full micro-batches, equal counts per rank, the
 * step's target count, coverage of an epoch up to the documented
 * wrap-around, determinism by seed, and its refusals; and the trainer's data
 * layer (train/train_data.h) for record models: --data/--val-data record
 * files, a model's own load_records, and filled batches holding exactly the
 * records the plan names; and its rule for --loader-threads 0. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <unistd.h>

#include "ddptrain/data.h"
#include "ddptrain/model.h"
#include "ddptrain/options.h"
#include "ddptrain/safetensors.h"
#include "check_util.h"
#include "data/sampler.h"
#include "train/train_data.h"

#define CAPTURE(log, call)       \
  do {                           \
    ddp_test_log_start();        \
    (call);                      \
    (log) = ddp_test_log_stop(); \
  } while (0)

static char g_dir[64];

static void dir_setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ddp_records_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void dir_teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
  ddp_test_free_tracked();
}

/* NAME in the fixture's directory, written to buf. */
static const char *in_dir(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "%s/%s", g_dir, name);
  return buf;
}

/* Features x[i*floats + k] = i + k / 16 (distinct per record), labels
 * i % classes; tracked by the fixture. */
static float *features(int64_t n, int64_t floats) {
  float *x = ddp_test_track(malloc((size_t)(n * floats) * sizeof *x));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < floats; ++k) x[i * floats + k] = (float)i + (float)k / 16.0f;
  return x;
}

static int32_t *labels(int64_t n, int32_t classes) {
  int32_t *y = ddp_test_track(malloc((size_t)n * sizeof *y));
  for (int64_t i = 0; i < n; ++i) y[i] = (int32_t)(i % classes);
  return y;
}

/* Writes a record-like file: `inputs` (xt, x_ndim dims) and `labels`
 * (yt, y_ndim dims); a NULL data pointer leaves that tensor out. */
static void write_file(const char *path, ddp_dtype_t xt, int x_ndim, const int64_t *x_shape,
                       const void *x, ddp_dtype_t yt, int y_ndim, const int64_t *y_shape,
                       const void *y, const char *const *meta) {
  ddp_st_tensor_t t[2];
  int n = 0;
  if (x) {
    t[n] = (ddp_st_tensor_t){.name = "inputs", .dtype = xt, .ndim = x_ndim, .data = x};
    for (int d = 0; d < x_ndim; ++d) t[n].shape[d] = x_shape[d];
    ++n;
  }
  if (y) {
    t[n] = (ddp_st_tensor_t){.name = "labels", .dtype = yt, .ndim = y_ndim, .data = y};
    for (int d = 0; d < y_ndim; ++d) t[n].shape[d] = y_shape[d];
    ++n;
  }
  ck_assert_int_eq(ddp_safetensors_write(path, t, n, meta), DDP_OK);
}

/* A well-formed record file of n records of shape (2, 3) in `classes`
 * classes (labels i % classes), with optional metadata. */
static void write_records(const char *path, int64_t n, int32_t classes, const char *const *meta) {
  const int64_t xs[3] = {n, 2, 3}, ys[1] = {n};
  write_file(path, DDP_DTYPE_F32, 3, xs, features(n, 6), DDP_DTYPE_I32, 1, ys, labels(n, classes),
             meta);
}

/* Opens path, which must fail with `want` and `needle` in the log; the
 * records are left zeroed. */
static void expect_open_fails(const char *path, ddp_status_t want, const char *needle) {
  ddp_records_t r;
  memset(&r, 0x5a, sizeof r);
  char *log;
  ddp_status_t st;
  CAPTURE(log, st = ddp_records_open(&r, path));
  ck_assert_msg(st == want, "open %s: status %d, expected %d; log: %s", path, st, want, log);
  ddp_assert_contains(log, needle);
  free(log);
  ck_assert_ptr_null(r.x);
  ck_assert_ptr_null(r.y);
  ck_assert_ptr_null(r.items);
  ck_assert_int_eq(r.n, 0);
}

/* ---- from arrays --------------------------------------------------------------- */

START_TEST(test_records_from_arrays_copies_and_indexes) {
  enum { N = 5 };
  float x[N * 6];
  int32_t y[N] = {0, 3, 1, 2, 3};
  for (int i = 0; i < N * 6; ++i) x[i] = 0.5f * (float)i;
  const int64_t shape[2] = {2, 3};
  ddp_records_t r;
  ck_assert_int_eq(ddp_records_from_arrays(&r, x, y, N, 2, shape, 4, "unit"), DDP_OK);
  ck_assert_int_eq(r.n, N);
  ck_assert_int_eq(r.ndim, 2);
  ck_assert_int_eq(r.shape[0], 2);
  ck_assert_int_eq(r.shape[1], 3);
  ck_assert_int_eq(r.shape[2], 1); /* unused dimensions are 1 */
  ck_assert_int_eq(r.shape[3], 1);
  ck_assert_int_eq(r.floats, 6);
  ck_assert_int_eq(r.n_classes, 4);
  ck_assert_str_eq(r.source, "unit");
  /* copies: the caller's arrays may change or go */
  ck_assert_ptr_ne(r.x, x);
  ck_assert_ptr_ne(r.y, y);
  ck_assert_mem_eq(r.x, x, sizeof x);
  ck_assert_mem_eq(r.y, y, sizeof y);
  x[0] = 99.0f, y[0] = 1;
  ck_assert_float_eq(r.x[0], 0.0f);
  ck_assert_int_eq(r.y[0], 0);
  /* the sampler's index: record i is an item of one target at i */
  for (int i = 0; i < N; ++i) {
    ck_assert_int_eq(r.items[i].start, i);
    ck_assert_int_eq(r.items[i].len, 2);
    ck_assert_int_eq(r.items[i].seg, 0);
  }
  ddp_records_destroy(&r);
  ck_assert_ptr_null(r.x);
  ck_assert_int_eq(r.n, 0);
  ddp_records_destroy(&r); /* again, and on NULL: no-ops */
  ddp_records_destroy(NULL);

  /* a NULL source gets a generic name */
  ck_assert_int_eq(ddp_records_from_arrays(&r, x, y, 2, 1, shape, 4, NULL), DDP_OK);
  ck_assert_str_eq(r.source, "records");
  ck_assert_int_eq(r.floats, 2);
  ddp_records_destroy(&r);
}
END_TEST

/* from_arrays must fail with `want` and `needle`, leaving r zeroed. */
static void expect_arrays_fail(const float *x, const int32_t *y, int64_t n, int ndim,
                               const int64_t *shape, int32_t classes, ddp_status_t want,
                               const char *needle) {
  ddp_records_t r;
  memset(&r, 0x5a, sizeof r);
  char *log;
  ddp_status_t st;
  CAPTURE(log, st = ddp_records_from_arrays(&r, x, y, n, ndim, shape, classes, "unit"));
  ck_assert_msg(st == want, "from_arrays: status %d, expected %d (%s); log: %s", st, want, needle,
                log);
  ddp_assert_contains(log, needle);
  free(log);
  ck_assert_ptr_null(r.x);
  ck_assert_ptr_null(r.y);
  ck_assert_ptr_null(r.items);
  ck_assert_int_eq(r.n, 0);
}

START_TEST(test_records_from_arrays_rejects_bad_input) {
  float x[12] = {0};
  int32_t y[4] = {0, 1, 2, 1};
  const int64_t two[1] = {3};
  expect_arrays_fail(x, y, 4, 1, two, 2, DDP_ERR_FORMAT,
                     "unit: record 2 has label 2, outside 0 .. 1");
  y[2] = -1;
  expect_arrays_fail(x, y, 4, 1, two, 3, DDP_ERR_FORMAT,
                     "unit: record 2 has label -1, outside 0 .. 2");
  y[2] = 0;

  x[4] = NAN;
  expect_arrays_fail(x, y, 4, 1, two, 2, DDP_ERR_FORMAT,
                     "unit: record 1 has a non-finite feature (nan at 1)");
  x[4] = 0.0f;
  x[11] = -INFINITY;
  expect_arrays_fail(x, y, 4, 1, two, 2, DDP_ERR_FORMAT,
                     "unit: record 3 has a non-finite feature (-inf at 2)");
  x[11] = 0.0f;

  expect_arrays_fail(x, y, 0, 1, two, 2, DDP_ERR_FORMAT,
                     "unit: 0 records (1 to 2147483647 allowed)");
  expect_arrays_fail(x, y, -4, 1, two, 2, DDP_ERR_FORMAT, "unit: -4 records");
  expect_arrays_fail(x, y, 4, 1, two, 1, DDP_ERR_FORMAT, "unit: 1 classes (2 to 16777216 allowed)");
  expect_arrays_fail(x, y, 4, 1, two, 0, DDP_ERR_FORMAT, "unit: 0 classes (2 to 16777216 allowed)");
  expect_arrays_fail(x, y, 4, 1, two, DDP_RECORDS_MAX_CLASSES + 1, DDP_ERR_FORMAT,
                     "unit: 16777217 classes (2 to 16777216 allowed)");
  expect_arrays_fail(x, y, 4, 0, two, 2, DDP_ERR_FORMAT,
                     "unit: a record has 0 dimensions (1 to 4 allowed)");
  const int64_t five[5] = {1, 1, 1, 1, 3};
  expect_arrays_fail(x, y, 4, 5, five, 2, DDP_ERR_FORMAT,
                     "unit: a record has 5 dimensions (1 to 4 allowed)");
  const int64_t zero[2] = {3, 0}, negative[1] = {-3};
  expect_arrays_fail(x, y, 4, 2, zero, 2, DDP_ERR_FORMAT, "unit: record dimension 1 is 0");
  expect_arrays_fail(x, y, 4, 1, negative, 2, DDP_ERR_FORMAT, "unit: record dimension 0 is -3");
  const int64_t huge[2] = {1 << 20, 1 << 12}; /* 2^32 features a record */
  expect_arrays_fail(x, y, 4, 2, huge, 2, DDP_ERR_FORMAT, "unit: record dimension 1 is 4096");

  expect_arrays_fail(NULL, y, 4, 1, two, 2, DDP_ERR_INVALID_ARG, "unit: NULL records");
  expect_arrays_fail(x, NULL, 4, 1, two, 2, DDP_ERR_INVALID_ARG, "unit: NULL records");
  expect_arrays_fail(x, y, 4, 1, NULL, 2, DDP_ERR_INVALID_ARG, "unit: NULL records");
  char *log;
  ddp_status_t st;
  CAPTURE(log, st = ddp_records_from_arrays(NULL, x, y, 4, 1, two, 2, "unit"));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "records: NULL result");
  free(log);
}
END_TEST

/* ---- record files ---------------------------------------------------------------- */

START_TEST(test_records_open_reads_a_record_file) {
  char path[128], plain[128];
  static const char *const meta[] = {"n_classes", "5", NULL};
  write_records(in_dir(path, sizeof path, "meta.safetensors"), 6, 3, meta);
  write_records(in_dir(plain, sizeof plain, "plain.safetensors"), 6, 3, NULL);

  ddp_records_t r;
  ck_assert_int_eq(ddp_records_open(&r, path), DDP_OK);
  ck_assert_int_eq(r.n, 6);
  ck_assert_int_eq(r.ndim, 2);
  ck_assert_int_eq(r.shape[0], 2);
  ck_assert_int_eq(r.shape[1], 3);
  ck_assert_int_eq(r.shape[2], 1);
  ck_assert_int_eq(r.floats, 6);
  ck_assert_int_eq(r.n_classes, 5); /* the metadata, though the labels only reach 2 */
  ck_assert_str_eq(r.source, path);
  ck_assert_mem_eq(r.x, features(6, 6), 36 * sizeof(float));
  ck_assert_mem_eq(r.y, labels(6, 3), 6 * sizeof(int32_t));
  for (int i = 0; i < 6; ++i) ck_assert_int_eq(r.items[i].start, i);
  ddp_records_destroy(&r);

  ck_assert_int_eq(ddp_records_open(&r, plain), DDP_OK);
  ck_assert_int_eq(r.n_classes, 3); /* no metadata: the largest label + 1 */
  ck_assert_mem_eq(r.y, labels(6, 3), 6 * sizeof(int32_t));
  ddp_records_destroy(&r);

  /* one feature dimension (n, d) is the common case */
  const int64_t xs[2] = {4, 3}, ys[1] = {4};
  write_file(in_dir(path, sizeof path, "flat.safetensors"), DDP_DTYPE_F32, 2, xs, features(4, 3),
             DDP_DTYPE_I32, 1, ys, labels(4, 2), NULL);
  ck_assert_int_eq(ddp_records_open(&r, path), DDP_OK);
  ck_assert_int_eq(r.ndim, 1);
  ck_assert_int_eq(r.floats, 3);
  ck_assert_int_eq(r.n_classes, 2);
  ddp_records_destroy(&r);
}
END_TEST

START_TEST(test_records_open_rejects_bad_files) {
  char path[128];
  const int64_t xs[3] = {6, 2, 3}, ys[1] = {6};
  const float *x = features(6, 6);
  const int32_t *y = labels(6, 3);

  write_file(in_dir(path, sizeof path, "no_labels.safetensors"), DDP_DTYPE_F32, 3, xs, x,
             DDP_DTYPE_I32, 1, ys, NULL, NULL);
  expect_open_fails(path, DDP_ERR_FORMAT,
                    "no_labels.safetensors: a record file holds the tensors 'inputs' (F32, n x "
                    "...) and 'labels' (I32, n)");
  write_file(in_dir(path, sizeof path, "no_inputs.safetensors"), DDP_DTYPE_F32, 3, xs, NULL,
             DDP_DTYPE_I32, 1, ys, y, NULL);
  expect_open_fails(path, DDP_ERR_FORMAT, "no_inputs.safetensors: a record file holds the tensors");

  /* int32 features (same size as fp32, so the container is valid) */
  write_file(in_dir(path, sizeof path, "int_inputs.safetensors"), DDP_DTYPE_I32, 3, xs, x,
             DDP_DTYPE_I32, 1, ys, y, NULL);
  expect_open_fails(path, DDP_ERR_FORMAT,
                    "inputs are int32 and labels int32; expected F32 and I32");
  write_file(in_dir(path, sizeof path, "float_labels.safetensors"), DDP_DTYPE_F32, 3, xs, x,
             DDP_DTYPE_F32, 1, ys, y, NULL);
  expect_open_fails(path, DDP_ERR_FORMAT, "inputs are fp32 and labels fp32; expected F32 and I32");

  const int64_t five[1] = {5};
  write_file(in_dir(path, sizeof path, "n_mismatch.safetensors"), DDP_DTYPE_F32, 3, xs, x,
             DDP_DTYPE_I32, 1, five, y, NULL);
  expect_open_fails(path, DDP_ERR_FORMAT,
                    "n_mismatch.safetensors: inputs must be (n, d1[, .. d4]) and labels (n) with "
                    "the same n; got 3 and 1 dimensions, n 6 and 5");
  const int64_t flat[1] = {6};
  write_file(in_dir(path, sizeof path, "flat_inputs.safetensors"), DDP_DTYPE_F32, 1, flat, x,
             DDP_DTYPE_I32, 1, ys, y, NULL);
  expect_open_fails(path, DDP_ERR_FORMAT, "got 1 and 1 dimensions, n 6 and 6");
  const int64_t six_dims[6] = {6, 1, 2, 1, 3, 1};
  write_file(in_dir(path, sizeof path, "deep_inputs.safetensors"), DDP_DTYPE_F32, 6, six_dims, x,
             DDP_DTYPE_I32, 1, ys, y, NULL);
  expect_open_fails(path, DDP_ERR_FORMAT, "got 6 and 1 dimensions");
  const int64_t col[2] = {6, 1};
  write_file(in_dir(path, sizeof path, "col_labels.safetensors"), DDP_DTYPE_F32, 3, xs, x,
             DDP_DTYPE_I32, 2, col, y, NULL);
  expect_open_fails(path, DDP_ERR_FORMAT, "got 3 and 2 dimensions");

  /* classes: all labels 0 and no metadata is one class */
  write_records(in_dir(path, sizeof path, "one_class.safetensors"), 6, 1, NULL);
  expect_open_fails(path, DDP_ERR_FORMAT,
                    "one_class.safetensors: the labels span 1 classes; a classifier needs at "
                    "least 2 (or set the metadata n_classes)");
  const char *bad_meta[] = {"1", "abc", "3x", "", "-4", "99999999999", "16777217"};
  for (int i = 0; i < 7; ++i) {
    const char *meta[] = {"n_classes", bad_meta[i], NULL};
    char want[96];
    write_records(in_dir(path, sizeof path, "bad_meta.safetensors"), 6, 3, meta);
    snprintf(want, sizeof want, "metadata n_classes '%s' is not an integer from 2 to 16777216",
             bad_meta[i]);
    expect_open_fails(path, DDP_ERR_FORMAT, want);
  }
  /* a label beyond the class bound, INT32_MAX included (the fuzzer's find:
   * the class count, largest label + 1, overflowed), is a corrupt file */
  const int32_t huge[2] = {INT32_MAX, DDP_RECORDS_MAX_CLASSES};
  for (int i = 0; i < 2; ++i) {
    int32_t big[6] = {0, 1, 2, 0, 1, 2};
    big[3] = huge[i];
    char want[96];
    write_file(in_dir(path, sizeof path, "huge_label.safetensors"), DDP_DTYPE_F32, 3, xs, x,
               DDP_DTYPE_I32, 1, ys, big, NULL);
    snprintf(want, sizeof want, "huge_label.safetensors: a label is %d; labels must be below %d",
             (int)huge[i], DDP_RECORDS_MAX_CLASSES);
    expect_open_fails(path, DDP_ERR_FORMAT, want);
  }
  /* metadata smaller than the labels: the label is named */
  static const char *const two[] = {"n_classes", "2", NULL};
  write_records(in_dir(path, sizeof path, "few_classes.safetensors"), 6, 3, two);
  expect_open_fails(path, DDP_ERR_FORMAT,
                    "few_classes.safetensors: record 2 has label 2, outside 0 .. 1");

  /* a non-finite feature, named with the file */
  float *nan_x = features(6, 6);
  nan_x[4 * 6 + 5] = NAN;
  write_file(in_dir(path, sizeof path, "nan.safetensors"), DDP_DTYPE_F32, 3, xs, nan_x,
             DDP_DTYPE_I32, 1, ys, y, NULL);
  expect_open_fails(path, DDP_ERR_FORMAT,
                    "nan.safetensors: record 4 has a non-finite feature (nan at 5)");

  expect_open_fails(in_dir(path, sizeof path, "missing.safetensors"), DDP_ERR_IO,
                    "missing.safetensors");
  char *log;
  ddp_status_t st;
  ddp_records_t r;
  CAPTURE(log, st = ddp_records_open(&r, NULL));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "records_open: NULL argument");
  free(log);
}
END_TEST

START_TEST(test_records_fingerprint_sees_every_change) {
  enum { N = 8 };
  const float *x = features(N, 6);
  int32_t *y = labels(N, 3);
  const int64_t shape[2] = {2, 3}, flat[1] = {6};
  ddp_records_t a, b;
  ck_assert_int_eq(ddp_records_from_arrays(&a, x, y, N, 2, shape, 3, "a"), DDP_OK);
  ck_assert_int_eq(ddp_records_from_arrays(&b, x, y, N, 2, shape, 3, "b"), DDP_OK);
  const uint64_t fa = ddp_records_fingerprint(&a);
  /* the same data under another source name: the same fingerprint */
  ck_assert_uint_eq(ddp_records_fingerprint(&b), fa);
  ddp_records_destroy(&b);

  y[5] = (y[5] + 1) % 3; /* one label */
  ck_assert_int_eq(ddp_records_from_arrays(&b, x, y, N, 2, shape, 3, "a"), DDP_OK);
  ck_assert_uint_ne(ddp_records_fingerprint(&b), fa);
  ddp_records_destroy(&b);
  y[5] = (y[5] + 2) % 3;

  float *x2 = features(N, 6);
  x2[N * 6 - 1] += 1.0f; /* the last feature of the last record */
  ck_assert_int_eq(ddp_records_from_arrays(&b, x2, y, N, 2, shape, 3, "a"), DDP_OK);
  ck_assert_uint_ne(ddp_records_fingerprint(&b), fa);
  ddp_records_destroy(&b);

  /* the same bytes as (n, 6) instead of (n, 2, 3), or with another class count */
  ck_assert_int_eq(ddp_records_from_arrays(&b, x, y, N, 1, flat, 3, "a"), DDP_OK);
  ck_assert_uint_ne(ddp_records_fingerprint(&b), fa);
  ddp_records_destroy(&b);
  ck_assert_int_eq(ddp_records_from_arrays(&b, x, y, N, 2, shape, 4, "a"), DDP_OK);
  ck_assert_uint_ne(ddp_records_fingerprint(&b), fa);
  ddp_records_destroy(&b);
  /* one record fewer */
  ck_assert_int_eq(ddp_records_from_arrays(&b, x, y, N - 1, 2, shape, 3, "a"), DDP_OK);
  ck_assert_uint_ne(ddp_records_fingerprint(&b), fa);
  ddp_records_destroy(&b);

  ck_assert_uint_eq(ddp_records_fingerprint(&a), fa); /* a pure function */
  ddp_records_destroy(&a);
}
END_TEST

/* ---- record batches -------------------------------------------------------------- */

/* Writes every byte the batch claims to hold (ASan checks the sizes). */
static void touch(ddp_record_batch_t *b) {
  for (int64_t i = 0; i < (int64_t)b->capacity * b->floats; ++i) b->inputs[i] = (float)i;
  for (int r = 0; r < b->capacity; ++r) b->labels[r] = r, b->items[r] = r;
}

START_TEST(test_record_batch_init_and_destroy) {
  ddp_record_batch_t b;
  ck_assert_int_eq(ddp_record_batch_init(&b, NULL, 7, 5), DDP_OK);
  ck_assert_int_eq(b.capacity, 7);
  ck_assert_int_eq(b.floats, 5);
  ck_assert_int_eq(b.B, 0);
  ck_assert_ptr_null(b.host_of);
  ck_assert_ptr_nonnull(b.inputs);
  ck_assert_ptr_nonnull(b.labels);
  ck_assert_ptr_nonnull(b.items);
  touch(&b);
  ddp_record_batch_destroy(&b);
  ck_assert_ptr_null(b.inputs);
  ck_assert_int_eq(b.capacity, 0);
  ddp_record_batch_destroy(&b); /* twice, a zeroed one and NULL: no-ops */
  ddp_record_batch_t zero;
  memset(&zero, 0, sizeof zero);
  ddp_record_batch_destroy(&zero);
  ddp_record_batch_destroy(NULL);

  /* from the backend's host allocator */
  ddp_backend_t *be = ddp_test_cpu_backend();
  ck_assert_int_eq(ddp_record_batch_init(&b, be, 3, 11), DDP_OK);
  ck_assert_ptr_eq(b.host_of, be);
  ck_assert_int_eq(b.capacity, 3);
  ck_assert_int_eq(b.floats, 11);
  touch(&b);
  ddp_record_batch_destroy(&b);
  ck_assert_ptr_null(b.host_of);
  ddp_backend_destroy(be);

  char *log;
  ddp_status_t st;
  CAPTURE(log, st = ddp_record_batch_init(&b, NULL, 0, 4));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "record_batch_init: 0 rows of 4 features");
  free(log);
  CAPTURE(log, st = ddp_record_batch_init(&b, NULL, 4, 0));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "record_batch_init: 4 rows of 0 features");
  free(log);
  CAPTURE(log, st = ddp_record_batch_init(NULL, NULL, 4, 4));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  free(log);
}
END_TEST

START_TEST(test_batch_kind_names) {
  ck_assert_str_eq(ddp_batch_kind_name(DDP_BATCH_TOKENS), "tokens");
  ck_assert_str_eq(ddp_batch_kind_name(DDP_BATCH_RECORDS), "records");
  ck_assert_str_eq(ddp_batch_kind_name((ddp_batch_kind_t)5), "unknown");
}
END_TEST

/* ---- the sampler over records ---------------------------------------------------- */

/* 97 records, 3 ranks x 2 micro-batches of 5: 97 = 19 x 5 + 2, so the last
 * micro-batch is topped up with 3 records from the start of the epoch's
 * order (wrapped rows), and the 20 micro-batches fill 4 steps of 6 only
 * with 4 of the epoch's first micro-batches repeated (wrapped
 * micro-batches). */
enum { NREC = 97, WORLD = 3, ACCUM = 2, BATCH = 5, STEPS = 4 };

static ddp_records_t g_rec;

static void records_setup(void) {
  dir_setup();
  const int64_t shape[1] = {2};
  ck_assert_int_eq(
      ddp_records_from_arrays(&g_rec, features(NREC, 2), labels(NREC, 4), NREC, 1, shape, 4, "s"),
      DDP_OK);
}

static void records_teardown(void) {
  ddp_records_destroy(&g_rec);
  dir_teardown();
}

static ddp_sampler_config_t record_config(ddp_sampler_kind_t kind, uint64_t seed) {
  return (ddp_sampler_config_t){.kind = kind,
                                .seed = seed,
                                .world = WORLD,
                                .accum = ACCUM,
                                .tokens_per_batch = BATCH,
                                .max_rows = BATCH};
}

static ddp_sampler_t *record_sampler(ddp_sampler_kind_t kind, uint64_t seed) {
  const ddp_sampler_config_t cfg = record_config(kind, seed);
  ddp_sampler_t *s = NULL;
  ck_assert_int_eq(ddp_sampler_create_items(g_rec.items, g_rec.n, 1, &cfg, &s), DDP_OK);
  return s;
}

static void check_epoch_coverage(ddp_sampler_kind_t kind) {
  ddp_sampler_t *s = record_sampler(kind, 7);
  ck_assert_int_eq(ddp_sampler_max_rows(s), BATCH);
  int64_t steps = 0;
  ck_assert_int_eq(ddp_sampler_steps_in_epoch(s, 0, &steps), DDP_OK);
  ck_assert_int_eq(steps, STEPS);
  ddp_epoch_stats_t es;
  ck_assert_int_eq(ddp_sampler_epoch_stats(s, 0, &es), DDP_OK);
  ck_assert_int_eq(es.windows, NREC);
  ck_assert_int_eq(es.micro_batches, 20);
  ck_assert_int_eq(es.wrapped_rows, 3);
  ck_assert_int_eq(es.wrapped_micro_batches, 4);
  ck_assert_int_eq(es.useful, STEPS * WORLD * ACCUM * BATCH);
  ck_assert_int_eq(es.padded, es.useful); /* records are never padded */

  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    int seen[NREC] = {0};
    int64_t total = 0;
    for (int64_t t = 0; t < STEPS; ++t) {
      const int64_t step = epoch * STEPS + t;
      ddp_step_info_t info;
      ck_assert_int_eq(ddp_sampler_step_info(s, step, &info), DDP_OK);
      ck_assert_int_eq(info.epoch, epoch);
      ck_assert_int_eq(info.step_in_epoch, t);
      ck_assert_int_eq(info.n_targets, WORLD * ACCUM * BATCH); /* the loss normaliser */
      ck_assert_int_eq(info.n_padded, WORLD * ACCUM * BATCH);
      ck_assert_int_eq(info.wrapped, t == STEPS - 1 ? 4 : 0);
      for (int rank = 0; rank < WORLD; ++rank) {
        int per_rank = 0;
        for (int micro = 0; micro < ACCUM; ++micro) {
          int64_t items[BATCH + 3];
          int rows = -1;
          ddp_step_info_t mi;
          ck_assert_int_eq(ddp_sampler_rows(s, step, rank, micro, items, BATCH + 3, &rows, &mi),
                           DDP_OK);
          ck_assert_int_eq(rows, BATCH); /* every micro-batch is full */
          ck_assert_int_eq(mi.step, step);
          ck_assert_int_eq(mi.n_targets, info.n_targets);
          for (int r = 0; r < rows; ++r) {
            ck_assert(items[r] >= 0 && items[r] < NREC);
            seen[items[r]]++;
          }
          per_rank += rows;
          total += rows;
        }
        ck_assert_int_eq(per_rank, ACCUM * BATCH); /* the same count on every rank */
      }
    }
    /* every record at least once; the repeats are exactly the wrap-around */
    int64_t repeats = 0;
    for (int i = 0; i < NREC; ++i) {
      ck_assert_msg(seen[i] >= 1, "epoch %lld: record %d never dealt", (long long)epoch, i);
      repeats += seen[i] - 1;
    }
    ck_assert_int_eq(total, STEPS * WORLD * ACCUM * BATCH);
    ck_assert_int_eq(repeats, 3 + 4 * BATCH);
  }
  ddp_sampler_destroy(s);
}

START_TEST(test_sampler_records_bucket_full_batches_and_epoch_coverage) {
  check_epoch_coverage(DDP_SAMPLER_BUCKET);
}
END_TEST

START_TEST(test_sampler_records_random_full_batches_and_epoch_coverage) {
  check_epoch_coverage(DDP_SAMPLER_RANDOM);
}
END_TEST

/* The rows of every micro-batch of the first two epochs, in plan order. */
static void plan_rows(ddp_sampler_t *s, int64_t *out) {
  int at = 0;
  for (int64_t step = 0; step < 2 * STEPS; ++step)
    for (int rank = 0; rank < WORLD; ++rank)
      for (int micro = 0; micro < ACCUM; ++micro) {
        int rows;
        ddp_step_info_t info;
        ck_assert_int_eq(ddp_sampler_rows(s, step, rank, micro, out + at, BATCH, &rows, &info),
                         DDP_OK);
        at += rows;
      }
}

START_TEST(test_sampler_records_plan_is_determined_by_the_seed) {
  enum { ROWS = 2 * STEPS * WORLD * ACCUM * BATCH };
  ddp_sampler_t *a = record_sampler(DDP_SAMPLER_BUCKET, 7),
                *b = record_sampler(DDP_SAMPLER_BUCKET, 7),
                *c = record_sampler(DDP_SAMPLER_BUCKET, 8);
  int64_t ra[ROWS], rb[ROWS], rc[ROWS];
  plan_rows(a, ra);
  plan_rows(b, rb);
  plan_rows(c, rc);
  ck_assert_mem_eq(ra, rb, sizeof ra);
  ck_assert_msg(memcmp(ra, rc, sizeof ra) != 0, "seeds 7 and 8 give the same plan");
  uint64_t da, db, dc, da1;
  ck_assert_int_eq(ddp_sampler_epoch_digest(a, 0, &da), DDP_OK);
  ck_assert_int_eq(ddp_sampler_epoch_digest(b, 0, &db), DDP_OK);
  ck_assert_int_eq(ddp_sampler_epoch_digest(c, 0, &dc), DDP_OK);
  ck_assert_int_eq(ddp_sampler_epoch_digest(a, 1, &da1), DDP_OK);
  ck_assert_uint_eq(da, db);
  ck_assert_uint_ne(da, dc);
  ck_assert_uint_ne(da, da1); /* each epoch is shuffled anew */
  ddp_sampler_destroy(a);
  ddp_sampler_destroy(b);
  ddp_sampler_destroy(c);
}
END_TEST

START_TEST(test_sampler_records_refuses_fill_and_bad_rows_requests) {
  ddp_sampler_t *s = record_sampler(DDP_SAMPLER_BUCKET, 7);
  char *log;
  ddp_status_t st;

  /* no corpus to read tokens from */
  ddp_batch_t tb;
  ck_assert_int_eq(ddp_batch_init(&tb, 64, 8), DDP_OK);
  CAPTURE(log, st = ddp_sampler_fill(s, 0, 0, 0, &tb));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "sampler_fill: this sampler deals items, not token windows");
  free(log);
  ddp_batch_destroy(&tb);

  int64_t items[BATCH];
  int rows = -1;
  ddp_step_info_t info;
  CAPTURE(log, st = ddp_sampler_rows(s, 0, 0, 0, items, BATCH - 1, &rows, &info));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "sampler_rows: room for 4 rows, the plan needs 5");
  free(log);
  ck_assert_int_eq(rows, -1); /* nothing reported on failure */
  CAPTURE(log, st = ddp_sampler_rows(s, 0, WORLD, 0, items, BATCH, &rows, &info));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "sampler_rows: rank 3 / micro-step 0 outside 3 x 2");
  free(log);
  CAPTURE(log, st = ddp_sampler_rows(s, 0, -1, 0, items, BATCH, &rows, &info));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "rank -1 / micro-step 0 outside 3 x 2");
  free(log);
  CAPTURE(log, st = ddp_sampler_rows(s, 0, 0, ACCUM, items, BATCH, &rows, &info));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "sampler_rows: rank 0 / micro-step 2 outside 3 x 2");
  free(log);
  CAPTURE(log, st = ddp_sampler_rows(s, -1, 0, 0, items, BATCH, &rows, &info));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "sampler: negative step -1");
  free(log);
  CAPTURE(log, st = ddp_sampler_rows(s, 0, 0, 0, NULL, BATCH, &rows, &info));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "sampler_rows: NULL argument");
  free(log);
  ddp_sampler_destroy(s);

  /* a record is one target: an item sampler with the records' bound of 1
   * refuses items of another length */
  ddp_window_t bad[2] = {{.start = 0, .len = 2}, {.start = 1, .len = 3}};
  const ddp_sampler_config_t cfg = record_config(DDP_SAMPLER_BUCKET, 7);
  CAPTURE(log, st = ddp_sampler_create_items(bad, 2, 1, &cfg, &s));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "sampler: item 1 has length 3, outside 2 .. 2");
  free(log);
  ck_assert_ptr_null(s);
}
END_TEST

/* ---- the trainer's data for record models ------------------------------------------ */

static ddp_status_t rec_cost(const ddp_options_t *o, const ddp_data_shape_t *d, double *a,
                             double *b) {
  *a = 6.0 * (double)d->record_floats * (double)d->n_classes;
  *b = 0.0;
  return DDP_OK;
}

/* What train_data reads of a model: its name, batch kind, cost and data. */
static const ddp_model_ops_t k_trec = {.name = "trec",
                                       .summary = "reads --data record files (tests)",
                                       .batch_kind = DDP_BATCH_RECORDS,
                                       .devices = DDP_MODEL_ON(DDP_DEVICE_KIND_CPU),
                                       .cost = rec_cost};

/* A model with its own data: 30 training records of 3 features in 2
 * classes and 10 validation records, each split only when its bit of
 * g_splits is set (bit 0: training, bit 1: validation). */
static int g_splits = 3;

static ddp_status_t gen_records(const ddp_options_t *o, int split, ddp_records_t *out, int *have) {
  *have = (g_splits >> split) & 1;
  if (!*have) return DDP_OK;
  const int64_t n = split == DDP_SPLIT_TRAIN ? 30 : 10, shape[1] = {3};
  float x[30 * 3];
  int32_t y[30];
  for (int64_t i = 0; i < n; ++i) {
    y[i] = (int32_t)(i % 2);
    for (int k = 0; k < 3; ++k) x[i * 3 + k] = (float)(split * 1000 + i) + 0.1f * (float)k;
  }
  return ddp_records_from_arrays(out, x, y, n, 1, shape, 2,
                                 split == DDP_SPLIT_TRAIN ? "tgen-train" : "tgen-val");
}

static const ddp_model_ops_t k_tgen = {.name = "tgen",
                                       .summary = "generates its records (tests)",
                                       .batch_kind = DDP_BATCH_RECORDS,
                                       .devices = DDP_MODEL_ON(DDP_DEVICE_KIND_CPU),
                                       .load_records = gen_records};

/* Options from a NULL-terminated argument list that must parse. */
#define options(o, ...) ck_assert_int_eq(ddp_test_parse((o), NULL, __VA_ARGS__), DDP_OK)

/* Loads the data for `model`; the log goes to *log (caller frees). */
static ddp_status_t load(const ddp_options_t *o, const ddp_model_ops_t *model, ddp_train_data_t *d,
                         char **log) {
  ddp_status_t st;
  CAPTURE(*log, st = ddp_train_data_load(o, model, d));
  return st;
}

START_TEST(test_train_data_reads_record_files_and_fills_their_batches) {
  char train[128], val[128];
  write_records(in_dir(train, sizeof train, "train.safetensors"), NREC, 4, NULL);
  write_records(in_dir(val, sizeof val, "val.safetensors"), 20, 4, NULL);
  ddp_options_t o;
  options(&o, "--data", train, "--val-data", val, "--batch-size", "5", "--accum", "2", NULL);
  ddp_train_data_t d;
  char *log;
  ck_assert_int_eq(load(&o, &k_trec, &d, &log), DDP_OK);
  free(log);
  ck_assert_int_eq(d.kind, DDP_BATCH_RECORDS);
  ck_assert_int_eq(d.have_val, 1);
  ck_assert_int_eq(d.train.records.n, NREC);
  ck_assert_int_eq(d.val.records.n, 20);
  ck_assert_int_eq(d.shape.kind, DDP_BATCH_RECORDS);
  ck_assert_int_eq(d.shape.record_ndim, 2);
  ck_assert_int_eq(d.shape.record_shape[0], 2);
  ck_assert_int_eq(d.shape.record_shape[1], 3);
  ck_assert_int_eq(d.shape.record_shape[2], 1);
  ck_assert_int_eq(d.shape.record_floats, 6);
  ck_assert_int_eq(d.shape.n_classes, 4);
  ck_assert_uint_eq(ddp_train_data_fingerprint(&d, DDP_SPLIT_TRAIN),
                    ddp_records_fingerprint(&d.train.records));
  ck_assert_uint_eq(ddp_train_data_fingerprint(&d, DDP_SPLIT_VAL),
                    ddp_records_fingerprint(&d.val.records));
  ck_assert_uint_ne(ddp_train_data_fingerprint(&d, DDP_SPLIT_TRAIN),
                    ddp_train_data_fingerprint(&d, DDP_SPLIT_VAL));
  char line[512], want[512];
  ddp_train_data_describe(&o, &d, line, sizeof line);
  snprintf(want, sizeof want, "97 records of 6 features, 4 classes (%s)", train);
  ck_assert_str_eq(line, want);
  ck_assert_int_eq(ddp_train_batch_budget(&o, &d), 5);

  /* the sampler: --batch-size records a micro-batch, costed by the model */
  ddp_sampler_config_t cfg;
  ck_assert_int_eq(ddp_train_sampler_config(&o, &k_trec, &d, WORLD, &cfg), DDP_OK);
  ck_assert_int_eq(cfg.kind, DDP_SAMPLER_BUCKET);
  ck_assert_int_eq(cfg.world, WORLD);
  ck_assert_int_eq(cfg.accum, ACCUM);
  ck_assert_int_eq(cfg.tokens_per_batch, BATCH);
  ck_assert_int_eq(cfg.max_rows, BATCH);
  ck_assert_uint_eq(cfg.seed, 1337);
  ck_assert_double_eq(cfg.cost_a, 6.0 * 6 * 4);
  ck_assert_double_eq(cfg.cost_b, 0.0);
  ddp_sampler_t *s = NULL;
  ck_assert_int_eq(ddp_train_sampler_create(&d, DDP_SPLIT_TRAIN, &cfg, &s), DDP_OK);

  /* every micro-batch of the first epoch holds exactly the records it names */
  ddp_backend_t *be = ddp_test_cpu_backend();
  ddp_train_batch_t b;
  ck_assert_int_eq(ddp_train_batch_init(&b, &d, be, &o, s), DDP_OK);
  ck_assert_int_eq(b.kind, DDP_BATCH_RECORDS);
  ck_assert_int_eq(b.records.capacity, BATCH);
  ck_assert_int_eq(b.records.floats, 6);
  ck_assert_ptr_eq(b.records.host_of, be);
  ck_assert_ptr_eq(ddp_train_batch_input(&b), &b.records);
  const ddp_records_t *r = &d.train.records;
  for (int64_t step = 0; step < STEPS; ++step)
    for (int rank = 0; rank < WORLD; ++rank)
      for (int micro = 0; micro < ACCUM; ++micro) {
        ck_assert_int_eq(ddp_train_batch_fill(&b, &d, DDP_SPLIT_TRAIN, s, step, rank, micro),
                         DDP_OK);
        ck_assert_int_eq(b.records.B, BATCH);
        ck_assert_int_eq(b.records.n_targets, BATCH);
        ck_assert_int_eq(ddp_train_batch_targets(&b), BATCH);
        ck_assert_int_eq(b.records.micro, micro);
        ck_assert_int_eq(ddp_train_batch_info(&b)->step, step);
        ck_assert_int_eq(ddp_train_batch_info(&b)->n_targets, WORLD * ACCUM * BATCH);
        /* the same rows the sampler names */
        int64_t items[BATCH];
        int rows;
        ddp_step_info_t info;
        ck_assert_int_eq(ddp_sampler_rows(s, step, rank, micro, items, BATCH, &rows, &info),
                         DDP_OK);
        ck_assert_mem_eq(b.records.items, items, sizeof items);
        for (int i = 0; i < BATCH; ++i) {
          const int64_t k = items[i];
          ck_assert_mem_eq(b.records.inputs + i * 6, r->x + k * 6, 6 * sizeof(float));
          ck_assert_int_eq(b.records.labels[i], r->y[k]);
          ck_assert_int_eq(b.records.labels[i], (int32_t)(k % 4)); /* what the file holds */
          ck_assert_float_eq(b.records.inputs[i * 6 + 5], (float)k + 5.0f / 16.0f);
        }
      }
  ddp_train_batch_destroy(&b);
  ddp_sampler_destroy(s);

  /* the validation split has its own sampler over its own records */
  ck_assert_int_eq(ddp_train_sampler_create(&d, DDP_SPLIT_VAL, &cfg, &s), DDP_OK);
  ck_assert_int_eq(ddp_train_batch_init(&b, &d, NULL, &o, s), DDP_OK);
  ck_assert_ptr_null(b.records.host_of);
  ck_assert_int_eq(ddp_train_batch_fill(&b, &d, DDP_SPLIT_VAL, s, 0, 2, 1), DDP_OK);
  for (int i = 0; i < b.records.B; ++i) {
    const int64_t k = b.records.items[i];
    ck_assert(k >= 0 && k < 20);
    ck_assert_mem_eq(b.records.inputs + i * 6, d.val.records.x + k * 6, 6 * sizeof(float));
  }
  ddp_train_batch_destroy(&b);
  ddp_sampler_destroy(s);
  ddp_backend_destroy(be);
  ddp_train_data_destroy(&d);
}
END_TEST

START_TEST(test_train_data_rejects_validation_records_of_another_shape) {
  char train[128], val[128], want[600];
  write_records(in_dir(train, sizeof train, "train.safetensors"), 12, 4, NULL);
  const int64_t xs[2] = {8, 4}, ys[1] = {8};
  write_file(in_dir(val, sizeof val, "val4.safetensors"), DDP_DTYPE_F32, 2, xs, features(8, 4),
             DDP_DTYPE_I32, 1, ys, labels(8, 4), NULL);
  ddp_options_t o;
  options(&o, "--data", train, "--val-data", val, NULL);
  ddp_train_data_t d;
  char *log;
  ck_assert_int_eq(load(&o, &k_trec, &d, &log), DDP_ERR_FORMAT);
  snprintf(want, sizeof want,
           "the validation records (%s: 4 features, 4 classes) do not match the training records "
           "(%s: 6 features, 4 classes)",
           val, train);
  ddp_assert_contains(log, want);
  free(log);
  ddp_train_data_destroy(&d);

  /* the same feature count in another shape, and another class count */
  const int64_t flat[2] = {8, 6};
  write_file(in_dir(val, sizeof val, "val6.safetensors"), DDP_DTYPE_F32, 2, flat, features(8, 6),
             DDP_DTYPE_I32, 1, ys, labels(8, 4), NULL);
  options(&o, "--data", train, "--val-data", val, NULL);
  ck_assert_int_eq(load(&o, &k_trec, &d, &log), DDP_ERR_FORMAT);
  ddp_assert_contains(log, "do not match the training records");
  free(log);
  ddp_train_data_destroy(&d);
  static const char *const five[] = {"n_classes", "5", NULL};
  write_records(in_dir(val, sizeof val, "val5.safetensors"), 8, 4, five);
  options(&o, "--data", train, "--val-data", val, NULL);
  ck_assert_int_eq(load(&o, &k_trec, &d, &log), DDP_ERR_FORMAT);
  ddp_assert_contains(log, "6 features, 5 classes) do not match the training records");
  free(log);
  ddp_train_data_destroy(&d);
}
END_TEST

START_TEST(test_train_data_record_model_needs_data) {
  ddp_options_t o;
  options(&o, NULL);
  ddp_train_data_t d;
  char *log;
  ck_assert_int_eq(load(&o, &k_trec, &d, &log), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log,
                      "model trec trains on records: give --data FILE (safetensors with 'inputs' "
                      "F32 (n, ...) and 'labels' I32 (n))");
  free(log);
  ddp_train_data_destroy(&d);

  /* --data naming a missing file: the reader's error, naming it */
  char path[128];
  options(&o, "--data", in_dir(path, sizeof path, "absent.safetensors"), NULL);
  ck_assert_int_eq(load(&o, &k_trec, &d, &log), DDP_ERR_IO);
  ddp_assert_contains(log, "absent.safetensors");
  free(log);
  ddp_train_data_destroy(&d);
}
END_TEST

START_TEST(test_train_data_uses_the_models_own_records) {
  /* --data is not read when the model supplies its data */
  char path[128];
  ddp_options_t o;
  options(&o, "--data", in_dir(path, sizeof path, "absent.safetensors"), NULL);
  ddp_train_data_t d;
  char *log;
  g_splits = 3;
  ck_assert_int_eq(load(&o, &k_tgen, &d, &log), DDP_OK);
  free(log);
  ck_assert_int_eq(d.train.records.n, 30);
  ck_assert_str_eq(d.train.records.source, "tgen-train");
  ck_assert_int_eq(d.have_val, 1);
  ck_assert_int_eq(d.val.records.n, 10);
  ck_assert_str_eq(d.val.records.source, "tgen-val");
  ck_assert_float_eq(d.val.records.x[0], 1000.0f);
  ck_assert_int_eq(d.shape.record_floats, 3);
  ck_assert_int_eq(d.shape.n_classes, 2);
  char line[256];
  ddp_train_data_describe(&o, &d, line, sizeof line);
  ck_assert_str_eq(line, "30 records of 3 features, 2 classes (tgen-train)");
  /* no cost operation: records cost 1 each */
  ddp_sampler_config_t cfg;
  ck_assert_int_eq(ddp_train_sampler_config(&o, &k_tgen, &d, 1, &cfg), DDP_OK);
  ck_assert_double_eq(cfg.cost_a, 0.0);
  ck_assert_double_eq(cfg.cost_b, 0.0);
  ck_assert_int_eq(cfg.tokens_per_batch, 32); /* the --batch-size default */
  ddp_train_data_destroy(&d);

  /* no validation split */
  g_splits = 1;
  ck_assert_int_eq(load(&o, &k_tgen, &d, &log), DDP_OK);
  free(log);
  ck_assert_int_eq(d.have_val, 0);
  ddp_train_data_describe(&o, &d, line, sizeof line);
  ck_assert_str_eq(line, "30 records of 3 features, 2 classes (tgen-train); no validation split");
  ddp_train_data_destroy(&d);

  /* no training split */
  g_splits = 2;
  ck_assert_int_eq(load(&o, &k_tgen, &d, &log), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "model tgen supplied no training records");
  free(log);
  ddp_train_data_destroy(&d);
}
END_TEST

/* --loader-threads 0: a GPU rank fills with its CPUs less one, 1 to 8; the
 * CPU backend with 1 (its math threads take the cores). */
START_TEST(test_loader_threads_auto_rule) {
  const int cpus[] = {0, 1, 2, 3, 8, 9, 10, 16, 192};
  const int gpu[] = {1, 1, 1, 2, 7, 8, 8, 8, 8};
  for (size_t i = 0; i < sizeof cpus / sizeof cpus[0]; ++i) {
    ck_assert_int_eq(ddp_loader_threads_auto(1, cpus[i]), gpu[i]);
    ck_assert_int_eq(ddp_loader_threads_auto(0, cpus[i]), 1);
  }
  /* the affinity is this process's own: at least one CPU, at most what
   * the machine has online */
  const int n = ddp_affinity_cpus();
  ck_assert_int_ge(n, 1);
  ck_assert_int_le(n, (int)sysconf(_SC_NPROCESSORS_CONF));
}
END_TEST

static Suite *records_suite(void) {
  Suite *s = suite_create("records");
  TCase *tc = tcase_create("records");
  tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
  tcase_add_test(tc, test_records_from_arrays_copies_and_indexes);
  tcase_add_test(tc, test_records_from_arrays_rejects_bad_input);
  tcase_add_test(tc, test_records_open_reads_a_record_file);
  tcase_add_test(tc, test_records_open_rejects_bad_files);
  tcase_add_test(tc, test_records_fingerprint_sees_every_change);
  tcase_add_test(tc, test_record_batch_init_and_destroy);
  tcase_add_test(tc, test_batch_kind_names);
  suite_add_tcase(s, tc);

  tc = tcase_create("sampler");
  tcase_add_checked_fixture(tc, records_setup, records_teardown);
  tcase_add_test(tc, test_sampler_records_bucket_full_batches_and_epoch_coverage);
  tcase_add_test(tc, test_sampler_records_random_full_batches_and_epoch_coverage);
  tcase_add_test(tc, test_sampler_records_plan_is_determined_by_the_seed);
  tcase_add_test(tc, test_sampler_records_refuses_fill_and_bad_rows_requests);
  suite_add_tcase(s, tc);

  tc = tcase_create("train_data");
  tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
  tcase_add_test(tc, test_train_data_reads_record_files_and_fills_their_batches);
  tcase_add_test(tc, test_train_data_rejects_validation_records_of_another_shape);
  tcase_add_test(tc, test_train_data_record_model_needs_data);
  tcase_add_test(tc, test_train_data_uses_the_models_own_records);
  tcase_add_test(tc, test_loader_threads_auto_rule);
  tcase_set_timeout(tc, 30);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(records_suite());
}
