/* safetensors writer and reader (see ddptrain/safetensors.h), with jansson
 * for the JSON header. */
#define _GNU_SOURCE /* qsort_r */
#include "ddptrain/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddptrain/check.h"

/* Indexed by ddp_dtype_t, then DDP_ST_DTYPE_I64 (the file format's own). */
static const char *const k_dtype_names[DDP_DTYPE_COUNT_ + 1] = {"F32", "BF16", "F16", "I32", "I64"};

static size_t elem_size(ddp_dtype_t dtype) {
  return dtype == DDP_ST_DTYPE_I64 ? sizeof(int64_t) : ddp_dtype_size(dtype);
}

static ddp_status_t numel_of(const char *what, int ndim, const int64_t *shape, int64_t *numel) {
  if (ndim < 0 || ndim > DDP_SAFETENSORS_MAX_DIMS)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "safetensors: tensor '%s' has %d dimensions", what, ndim);
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] < 0 || (shape[i] > 0 && n > INT64_MAX / 8 / shape[i]))
      DDP_FAIL(DDP_ERR_INVALID_ARG, "safetensors: tensor '%s' has an invalid shape", what);
    n *= shape[i];
  }
  *numel = n;
  return DDP_OK;
}

/* ---- writing ------------------------------------------------------------ */

/* *budget < 0: unlimited; otherwise the bytes the fault-injected file may
 * still take before writes fail with ENOSPC, as on a full disk. */
static ddp_status_t write_all(FILE *f, const void *p, size_t n, const char *path, int64_t *budget) {
  size_t take = n;
  if (*budget >= 0 && (int64_t)n > *budget) take = (size_t)*budget;
  if (take && fwrite(p, 1, take, f) != take)
    DDP_FAIL(DDP_ERR_IO, "cannot write %s: %s", path, strerror(errno));
  if (take < n) {
    *budget = 0;
    DDP_FAIL(DDP_ERR_IO, "cannot write %s: %s", path, strerror(ENOSPC));
  }
  if (*budget >= 0) *budget -= (int64_t)n;
  return DDP_OK;
}

/* fsync of the directory makes the rename itself durable. */
static void sync_parent_dir(const char *path) {
  char *copy = strdup(path);
  if (!copy) return;
  int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  free(copy);
}

static char *header_json(const ddp_st_tensor_t *t, int n, const char *const *meta,
                         size_t *data_bytes) {
  json_t *root = json_object();
  size_t off = 0;
  if (meta) {
    json_t *m = json_object();
    for (int i = 0; meta[i] && meta[i + 1]; i += 2)
      json_object_set_new(m, meta[i], json_string(meta[i + 1]));
    json_object_set_new(root, "__metadata__", m);
  }
  for (int i = 0; i < n; ++i) {
    int64_t numel = 0;
    numel_of(t[i].name, t[i].ndim, t[i].shape, &numel);
    size_t bytes = (size_t)numel * elem_size(t[i].dtype);
    json_t *shape = json_array();
    for (int d = 0; d < t[i].ndim; ++d) json_array_append_new(shape, json_integer(t[i].shape[d]));
    json_t *entry = json_pack("{s:s, s:o, s:[I,I]}", "dtype", k_dtype_names[t[i].dtype], "shape",
                              shape, "data_offsets", (json_int_t)off, (json_int_t)(off + bytes));
    json_object_set_new(root, t[i].name, entry);
    off += bytes;
  }
  *data_bytes = off;
  char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(root);
  return text;
}

ddp_status_t ddp_safetensors_write(const char *path, const ddp_st_tensor_t *t, int n,
                                   const char *const *meta) {
  return ddp_safetensors_write_opts(path, t, n, meta, NULL);
}

ddp_status_t ddp_safetensors_write_opts(const char *path, const ddp_st_tensor_t *t, int n,
                                        const char *const *meta, const ddp_st_write_opts_t *wo) {
  if (!path || (n > 0 && !t) || n < 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "safetensors_write: bad arguments");
  for (int i = 0; i < n; ++i) {
    int64_t numel;
    if (!t[i].name || !t[i].name[0] || strcmp(t[i].name, "__metadata__") == 0)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "safetensors_write: tensor %d has no usable name", i);
    if ((unsigned)t[i].dtype > (unsigned)DDP_ST_DTYPE_I64)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "safetensors_write: tensor '%s' has an invalid dtype",
               t[i].name);
    DDP_CHECK(numel_of(t[i].name, t[i].ndim, t[i].shape, &numel));
    if (numel > 0 && !t[i].data)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "safetensors_write: tensor '%s' has no data", t[i].name);
    for (int j = 0; j < i; ++j)
      if (strcmp(t[i].name, t[j].name) == 0)
        DDP_FAIL(DDP_ERR_INVALID_ARG, "safetensors_write: tensor name '%s' repeats", t[i].name);
  }
  size_t data_bytes = 0;
  char *json = header_json(t, n, meta, &data_bytes);
  if (!json) DDP_FAIL(DDP_ERR_OOM, "safetensors_write: cannot build the header");
  /* Pad the header with spaces so the data starts 8-byte aligned. */
  size_t hlen = strlen(json), padded = (hlen + 7) & ~(size_t)7;
  char tmp[4096];
  int tlen = wo && wo->tmp_path ? snprintf(tmp, sizeof tmp, "%s", wo->tmp_path)
                                : snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  int64_t budget = wo && wo->enospc_after_bytes > 0 ? wo->enospc_after_bytes : -1;
  if (tlen >= (int)sizeof tmp) {
    free(json);
    DDP_FAIL(DDP_ERR_INVALID_ARG, "safetensors_write: path too long");
  }
  ddp_status_t st = DDP_OK;
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    free(json);
    DDP_FAIL(DDP_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
  }
  unsigned char len8[8];
  for (int i = 0; i < 8; ++i) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  DDP_CHECK_GOTO(write_all(f, len8, 8, tmp, &budget), st, remove_tmp);
  DDP_CHECK_GOTO(write_all(f, json, hlen, tmp, &budget), st, remove_tmp);
  DDP_CHECK_GOTO(write_all(f, "        ", padded - hlen, tmp, &budget), st, remove_tmp);
  for (int i = 0; i < n; ++i) {
    int64_t numel = 0;
    numel_of(t[i].name, t[i].ndim, t[i].shape, &numel);
    DDP_CHECK_GOTO(write_all(f, t[i].data, (size_t)numel * elem_size(t[i].dtype), tmp, &budget), st,
                   remove_tmp);
  }
  if (fflush(f) != 0 || fsync(fileno(f)) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, remove_tmp, "cannot write %s: %s", tmp, strerror(errno));
  if (fclose(f) != 0) {
    f = NULL;
    DDP_FAIL_GOTO(st, DDP_ERR_IO, remove_tmp, "cannot write %s: %s", tmp, strerror(errno));
  }
  f = NULL;
  if (rename(tmp, path) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, remove_tmp, "cannot rename %s to %s: %s", tmp, path,
                  strerror(errno));
  sync_parent_dir(path);
  free(json);
  return DDP_OK;
remove_tmp:
  if (f) fclose(f);
  unlink(tmp);
  free(json);
  return st;
}

/* ---- reading ------------------------------------------------------------ */

struct ddp_safetensors {
  char *path;
  unsigned char *file;
  size_t size;
  const unsigned char *data; /* start of the data region */
  size_t data_size;
  json_t *header;
  int header_only; /* only the header was read: the tensors' data are NULL */
  int n;
  ddp_st_tensor_t *tensors;
  size_t *begin;
};

void ddp_safetensors_close(ddp_safetensors_t *st) {
  if (!st) return;
  json_decref(st->header);
  free(st->tensors);
  free(st->begin);
  free(st->file);
  free(st->path);
  free(st);
}

static ddp_status_t read_file(const char *path, unsigned char **buf, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) DDP_FAIL(DDP_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  ddp_status_t st = DDP_OK;
  long len = -1;
  if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
  if (len < 0 || fseek(f, 0, SEEK_SET) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, out, "cannot read %s: %s", path, strerror(errno));
  *buf = malloc(len > 0 ? (size_t)len : 1);
  if (!*buf) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "%s: %ld bytes do not fit in memory", path, len);
  if (len > 0 && fread(*buf, 1, (size_t)len, f) != (size_t)len) {
    free(*buf);
    *buf = NULL;
    DDP_FAIL_GOTO(st, DDP_ERR_IO, out, "cannot read %s: %s", path, strerror(errno));
  }
  *size = (size_t)len;
out:
  fclose(f);
  return st;
}

/* The first 8 bytes and the JSON header only, into *buf; *size is the
 * whole file's. A length that does not fit the file is left for the
 * caller to report (it reads the 8 bytes again). */
static ddp_status_t read_header(const char *path, unsigned char **buf, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) DDP_FAIL(DDP_ERR_IO, "cannot open %s: %s", path, strerror(errno));
  ddp_status_t st = DDP_OK;
  long len = -1;
  unsigned char head[8];
  size_t want = 0;
  if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
  if (len < 0 || fseek(f, 0, SEEK_SET) != 0 || (len >= 8 && fread(head, 1, 8, f) != 8))
    DDP_FAIL_GOTO(st, DDP_ERR_IO, out, "cannot read %s: %s", path, strerror(errno));
  if (len >= 8) {
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | head[i];
    want = hlen <= (uint64_t)len - 8 && hlen <= (100u << 20) ? 8 + (size_t)hlen : 8;
  }
  *buf = malloc(want ? want : 1);
  if (!*buf) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "%s: %zu header bytes do not fit", path, want);
  if (want) memcpy(*buf, head, 8);
  if (want > 8 && fread(*buf + 8, 1, want - 8, f) != want - 8) {
    free(*buf);
    *buf = NULL;
    DDP_FAIL_GOTO(st, DDP_ERR_IO, out, "cannot read %s: %s", path, strerror(errno));
  }
  *size = (size_t)len;
out:
  fclose(f);
  return st;
}

static int cmp_begin(const void *a, const void *b, void *ctx) {
  const size_t *begin = ctx;
  size_t x = begin[*(const int *)a], y = begin[*(const int *)b];
  return x < y ? -1 : x > y;
}

static ddp_status_t parse_entry(ddp_safetensors_t *st, const char *name, json_t *v, int i) {
  const char *dtype = NULL;
  json_t *shape = NULL;
  json_int_t b = -1, e = -1;
  if (json_unpack(v, "{s:s, s:o, s:[II]}", "dtype", &dtype, "shape", &shape, "data_offsets", &b,
                  &e) != 0 ||
      !json_is_array(shape))
    DDP_FAIL(DDP_ERR_FORMAT, "%s: tensor '%s' lacks dtype, shape or data_offsets", st->path, name);
  ddp_st_tensor_t *t = &st->tensors[i];
  t->name = name;
  int known = 0;
  for (int d = 0; d <= DDP_DTYPE_COUNT_ && !known; ++d)
    if (strcmp(dtype, k_dtype_names[d]) == 0) t->dtype = (ddp_dtype_t)d, known = 1;
  if (!known)
    DDP_FAIL(DDP_ERR_UNSUPPORTED,
             "%s: tensor '%s' has dtype %s (ddptrain reads F32, BF16, F16, "
             "I32, I64)",
             st->path, name, dtype);
  t->ndim = (int)json_array_size(shape);
  if (t->ndim > DDP_SAFETENSORS_MAX_DIMS)
    DDP_FAIL(DDP_ERR_FORMAT, "%s: tensor '%s' has %d dimensions", st->path, name, t->ndim);
  for (int d = 0; d < t->ndim; ++d) {
    json_t *x = json_array_get(shape, (size_t)d);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
      DDP_FAIL(DDP_ERR_FORMAT, "%s: tensor '%s' has a malformed shape", st->path, name);
    t->shape[d] = json_integer_value(x);
  }
  int64_t numel = 0;
  if (numel_of(name, t->ndim, t->shape, &numel) != DDP_OK) return DDP_ERR_FORMAT;
  if (b < 0 || e < b || (size_t)e > st->data_size ||
      (size_t)(e - b) != (size_t)numel * elem_size(t->dtype))
    DDP_FAIL(DDP_ERR_FORMAT,
             "%s: tensor '%s' has data_offsets [%lld, %lld] that do not match "
             "its %lld elements of %s or the %zu data bytes in the file",
             st->path, name, (long long)b, (long long)e, (long long)numel, dtype, st->data_size);
  st->begin[i] = (size_t)b;
  t->data = st->header_only ? NULL : st->data + b;
  return DDP_OK;
}

static ddp_status_t open_file(const char *path, int header_only, ddp_safetensors_t **out) {
  if (!path || !out) DDP_FAIL(DDP_ERR_INVALID_ARG, "safetensors_open: NULL argument");
  *out = NULL;
  ddp_safetensors_t *st = calloc(1, sizeof *st);
  if (!st || !(st->path = strdup(path))) {
    free(st);
    DDP_FAIL(DDP_ERR_OOM, "safetensors_open: out of memory");
  }
  ddp_status_t rc = DDP_OK;
  int *order = NULL;
  st->header_only = header_only;
  DDP_CHECK_GOTO(
      header_only ? read_header(path, &st->file, &st->size) : read_file(path, &st->file, &st->size),
      rc, fail);
  if (st->size < 8)
    DDP_FAIL_GOTO(rc, DDP_ERR_FORMAT, fail,
                  "%s: %zu bytes is too short for a "
                  "safetensors file",
                  path, st->size);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | st->file[i];
  if (hlen > st->size - 8 || hlen > (100u << 20))
    DDP_FAIL_GOTO(rc, DDP_ERR_FORMAT, fail,
                  "%s: header length %llu exceeds the file (%zu bytes): "
                  "truncated or not a safetensors file",
                  path, (unsigned long long)hlen, st->size);
  json_error_t jerr;
  st->header = json_loadb((const char *)st->file + 8, (size_t)hlen, 0, &jerr);
  if (!st->header || !json_is_object(st->header))
    DDP_FAIL_GOTO(rc, DDP_ERR_FORMAT, fail, "%s: the header is not a JSON object (%s at byte %d)",
                  path, st->header ? "not an object" : jerr.text, 8 + jerr.position);
  st->data = st->file + 8 + hlen;
  st->data_size = st->size - 8 - (size_t)hlen;
  size_t cap = json_object_size(st->header);
  st->tensors = calloc(cap ? cap : 1, sizeof *st->tensors);
  st->begin = calloc(cap ? cap : 1, sizeof *st->begin);
  order = calloc(cap ? cap : 1, sizeof *order);
  if (!st->tensors || !st->begin || !order)
    DDP_FAIL_GOTO(rc, DDP_ERR_OOM, fail, "safetensors_open: out of memory");
  const char *key;
  json_t *v;
  json_object_foreach(st->header, key, v) {
    if (strcmp(key, "__metadata__") == 0) {
      if (!json_is_object(v))
        DDP_FAIL_GOTO(rc, DDP_ERR_FORMAT, fail, "%s: __metadata__ is not an object", path);
      continue;
    }
    DDP_CHECK_GOTO(parse_entry(st, key, v, st->n), rc, fail);
    order[st->n] = st->n;
    st->n++;
  }
  /* No two tensors may share bytes. */
  qsort_r(order, (size_t)st->n, sizeof *order, cmp_begin, st->begin);
  for (int i = 1; i < st->n; ++i) {
    const ddp_st_tensor_t *a = &st->tensors[order[i - 1]], *b = &st->tensors[order[i]];
    int64_t na = 0;
    numel_of(a->name, a->ndim, a->shape, &na);
    if (st->begin[order[i - 1]] + (size_t)na * elem_size(a->dtype) > st->begin[order[i]])
      DDP_FAIL_GOTO(rc, DDP_ERR_FORMAT, fail, "%s: tensors '%s' and '%s' overlap", path, a->name,
                    b->name);
  }
  free(order);
  *out = st;
  return DDP_OK;
fail:
  free(order);
  ddp_safetensors_close(st);
  return rc;
}

ddp_status_t ddp_safetensors_open(const char *path, ddp_safetensors_t **out) {
  return open_file(path, 0, out);
}

ddp_status_t ddp_safetensors_open_header(const char *path, ddp_safetensors_t **out) {
  return open_file(path, 1, out);
}

int ddp_safetensors_count(const ddp_safetensors_t *st) {
  return st->n;
}

ddp_status_t ddp_safetensors_get(const ddp_safetensors_t *st, int index, ddp_st_tensor_t *t) {
  if (index < 0 || index >= st->n)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: no tensor number %d", st->path, index);
  *t = st->tensors[index];
  return DDP_OK;
}

ddp_status_t ddp_safetensors_find(const ddp_safetensors_t *st, const char *name,
                                  ddp_st_tensor_t *t) {
  for (int i = 0; i < st->n; ++i)
    if (strcmp(st->tensors[i].name, name) == 0) {
      *t = st->tensors[i];
      return DDP_OK;
    }
  DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: no tensor named '%s'", st->path, name);
}

const char *ddp_safetensors_meta(const ddp_safetensors_t *st, const char *key) {
  json_t *m = json_object_get(st->header, "__metadata__");
  json_t *v = m ? json_object_get(m, key) : NULL;
  return json_is_string(v) ? json_string_value(v) : NULL;
}
