/* Record data sets and record batches (see ddptrain/data.h, records).
 *
 * A record file is safetensors: the reader already validates the container
 * (offsets, sizes, dtypes), so this file checks only what records add:
 * matching counts, a label range, finite features. Data is copied out of the
 * file (with memcpy: tensor offsets in a safetensors file need not be
 * aligned for floats) and the file is closed again. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/backend.h"
#include "ddptrain/check.h"
#include "ddptrain/data.h"
#include "ddptrain/safetensors.h"
#include "core/hash.h"

const char *ddp_batch_kind_name(ddp_batch_kind_t kind) {
  switch (kind) {
    case DDP_BATCH_TOKENS:
      return "tokens";
    case DDP_BATCH_RECORDS:
      return "records";
  }
  return "unknown";
}

void ddp_records_destroy(ddp_records_t *r) {
  if (!r) return;
  free(r->x);
  free(r->y);
  free(r->items);
  memset(r, 0, sizeof *r);
}

/* Builds r from n records whose bytes are at x and y (any alignment). */
static ddp_status_t records_copy(ddp_records_t *r, const void *x, const void *y, int64_t n,
                                 int ndim, const int64_t *shape, int32_t n_classes,
                                 const char *source) {
  memset(r, 0, sizeof *r);
  snprintf(r->source, sizeof r->source, "%s", source ? source : "records");
  if (!x || !y || !shape) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: NULL records", r->source);
  if (n < 1 || n > INT32_MAX)
    DDP_FAIL(DDP_ERR_FORMAT, "%s: %lld records (1 to %d allowed)", r->source, (long long)n,
             INT32_MAX);
  if (ndim < 1 || ndim > DDP_RECORD_MAX_DIMS)
    DDP_FAIL(DDP_ERR_FORMAT, "%s: a record has %d dimensions (1 to %d allowed)", r->source, ndim,
             DDP_RECORD_MAX_DIMS);
  if (n_classes < 2 || n_classes > DDP_RECORDS_MAX_CLASSES)
    DDP_FAIL(DDP_ERR_FORMAT, "%s: %d classes (2 to %d allowed)", r->source, n_classes,
             DDP_RECORDS_MAX_CLASSES);
  int64_t floats = 1;
  for (int d = 0; d < DDP_RECORD_MAX_DIMS; ++d) {
    r->shape[d] = d < ndim ? shape[d] : 1;
    if (r->shape[d] < 1 || r->shape[d] > (INT64_C(1) << 31) / floats)
      DDP_FAIL(DDP_ERR_FORMAT, "%s: record dimension %d is %lld", r->source, d,
               (long long)r->shape[d]);
    floats *= r->shape[d];
  }
  r->ndim = ndim;
  r->floats = floats;
  r->n_classes = n_classes;
  ddp_status_t st = DDP_OK;
  r->x = malloc((size_t)n * (size_t)floats * sizeof *r->x);
  r->y = malloc((size_t)n * sizeof *r->y);
  r->items = malloc((size_t)n * sizeof *r->items);
  if (!r->x || !r->y || !r->items)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, fail, "%s: out of memory for %lld records", r->source,
                  (long long)n);
  memcpy(r->x, x, (size_t)n * (size_t)floats * sizeof *r->x);
  memcpy(r->y, y, (size_t)n * sizeof *r->y);
  for (int64_t i = 0; i < n; ++i) {
    if (r->y[i] < 0 || r->y[i] >= n_classes)
      DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, fail, "%s: record %lld has label %d, outside 0 .. %d",
                    r->source, (long long)i, r->y[i], n_classes - 1);
    const float *row = r->x + (size_t)i * (size_t)floats;
    for (int64_t k = 0; k < floats; ++k)
      if (!isfinite(row[k]))
        DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, fail,
                      "%s: record %lld has a non-finite feature (%g at %lld)", r->source,
                      (long long)i, (double)row[k], (long long)k);
    r->items[i] = (ddp_window_t){.start = i, .len = 2, .seg = 0};
  }
  r->n = n;
  return DDP_OK;
fail:
  ddp_records_destroy(r);
  return st;
}

ddp_status_t ddp_records_from_arrays(ddp_records_t *r, const float *x, const int32_t *y, int64_t n,
                                     int ndim, const int64_t *shape, int32_t n_classes,
                                     const char *source) {
  if (!r) DDP_FAIL(DDP_ERR_INVALID_ARG, "records: NULL result");
  return records_copy(r, x, y, n, ndim, shape, n_classes, source);
}

/* "n_classes" from the metadata, else the largest label + 1. */
static ddp_status_t class_count(const ddp_safetensors_t *st, const char *path,
                                const ddp_st_tensor_t *labels, int32_t *n_classes) {
  const char *meta = ddp_safetensors_meta(st, "n_classes");
  if (meta) {
    char *end = NULL;
    const long v = strtol(meta, &end, 10);
    if (end == meta || *end || v < 2 || v > DDP_RECORDS_MAX_CLASSES)
      DDP_FAIL(DDP_ERR_FORMAT, "%s: metadata n_classes '%s' is not an integer from 2 to %d", path,
               meta, DDP_RECORDS_MAX_CLASSES);
    *n_classes = (int32_t)v;
    return DDP_OK;
  }
  int32_t top = -1;
  for (int64_t i = 0; i < labels->shape[0]; ++i) {
    int32_t y;
    memcpy(&y, (const char *)labels->data + (size_t)i * sizeof y, sizeof y);
    if (y > top) top = y;
  }
  /* top + 1 is computed only below the bound: a label of INT32_MAX (a
   * corrupt file) must not overflow it, even in the message */
  if (top >= DDP_RECORDS_MAX_CLASSES)
    DDP_FAIL(DDP_ERR_FORMAT, "%s: a label is %d; labels must be below %d", path, top,
             DDP_RECORDS_MAX_CLASSES);
  if (top < 1)
    DDP_FAIL(DDP_ERR_FORMAT,
             "%s: the labels span %d classes; a classifier needs at least 2 (or set the "
             "metadata n_classes)",
             path, top + 1);
  *n_classes = top + 1;
  return DDP_OK;
}

ddp_status_t ddp_records_open(ddp_records_t *r, const char *path) {
  if (!r || !path) DDP_FAIL(DDP_ERR_INVALID_ARG, "records_open: NULL argument");
  memset(r, 0, sizeof *r);
  ddp_safetensors_t *st = NULL;
  DDP_CHECK(ddp_safetensors_open(path, &st));
  ddp_st_tensor_t x, y;
  ddp_status_t rc = DDP_OK;
  if (ddp_safetensors_find(st, "inputs", &x) != DDP_OK ||
      ddp_safetensors_find(st, "labels", &y) != DDP_OK)
    DDP_FAIL_GOTO(rc, DDP_ERR_FORMAT, out,
                  "%s: a record file holds the tensors 'inputs' (F32, n x ...) and 'labels' "
                  "(I32, n)",
                  path);
  if (x.dtype != DDP_DTYPE_F32 || y.dtype != DDP_DTYPE_I32)
    DDP_FAIL_GOTO(rc, DDP_ERR_FORMAT, out, "%s: inputs are %s and labels %s; expected F32 and I32",
                  path, ddp_dtype_name(x.dtype), ddp_dtype_name(y.dtype));
  if (x.ndim < 2 || x.ndim > DDP_RECORD_MAX_DIMS + 1 || y.ndim != 1 || x.shape[0] != y.shape[0])
    DDP_FAIL_GOTO(rc, DDP_ERR_FORMAT, out,
                  "%s: inputs must be (n, d1[, .. d%d]) and labels (n) with the same n; got %d "
                  "and %d dimensions, n %lld and %lld",
                  path, DDP_RECORD_MAX_DIMS, x.ndim, y.ndim, (long long)x.shape[0],
                  (long long)(y.ndim ? y.shape[0] : 0));
  int32_t classes = 0;
  DDP_CHECK_GOTO(class_count(st, path, &y, &classes), rc, out);
  rc = records_copy(r, x.data, y.data, x.shape[0], x.ndim - 1, x.shape + 1, classes, path);
out:
  ddp_safetensors_close(st);
  return rc;
}

uint64_t ddp_records_fingerprint(const ddp_records_t *r) {
  uint64_t h = DDP_FNV1A64_INIT;
  h = ddp_fnv1a64(h, &r->n, sizeof r->n);
  h = ddp_fnv1a64(h, r->shape, sizeof r->shape);
  h = ddp_fnv1a64(h, &r->n_classes, sizeof r->n_classes);
  if (r->n > 0) {
    h = ddp_fnv1a64(h, r->x, (size_t)r->n * (size_t)r->floats * sizeof *r->x);
    h = ddp_fnv1a64(h, r->y, (size_t)r->n * sizeof *r->y);
  }
  return h;
}

ddp_status_t ddp_record_batch_init(ddp_record_batch_t *b, ddp_backend_t *be, int rows,
                                   int64_t floats) {
  if (!b || rows < 1 || floats < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "record_batch_init: %d rows of %lld features", rows,
             (long long)floats);
  memset(b, 0, sizeof *b);
  const size_t xb = (size_t)rows * (size_t)floats * sizeof(float),
               yb = (size_t)rows * sizeof(int32_t);
  ddp_status_t st = DDP_OK;
  if (be) {
    b->host_of = be;
    st = be->ops->alloc_host(be, xb, (void **)&b->inputs);
    if (st == DDP_OK) st = be->ops->alloc_host(be, yb, (void **)&b->labels);
  } else {
    b->inputs = malloc(xb);
    b->labels = malloc(yb);
    if (!b->inputs || !b->labels) st = DDP_ERR_OOM;
  }
  b->items = malloc((size_t)rows * sizeof *b->items);
  if (st == DDP_OK && !b->items) st = DDP_ERR_OOM;
  if (st != DDP_OK) {
    ddp_record_batch_destroy(b);
    DDP_FAIL(st, "record batch: out of host memory for %d records of %lld features", rows,
             (long long)floats);
  }
  b->capacity = rows;
  b->floats = floats;
  return DDP_OK;
}

void ddp_record_batch_destroy(ddp_record_batch_t *b) {
  if (!b) return;
  if (b->host_of) {
    if (b->inputs) b->host_of->ops->free_host(b->host_of, b->inputs);
    if (b->labels) b->host_of->ops->free_host(b->host_of, b->labels);
  } else {
    free(b->inputs);
    free(b->labels);
  }
  free(b->items);
  memset(b, 0, sizeof *b);
}
