/* Fuzz target: the safetensors reader (src/io/safetensors.c) and the record
 * file reader on top of it (src/data/records.c; docs/design.md §5.2).
 *
 * The input is a whole file. When the reader accepts it, every tensor is
 * fetched by index and by name and its bytes are read (under AddressSanitizer
 * a tensor reaching past the file is a crash), and no two tensors may share a
 * byte; the metadata entries the project reads are looked up. The record
 * reader then opens the same file, and a record set it accepts must have
 * labels inside its class count and finite features. */
#include "fuzz_input.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

#include "ddptrain/data.h"
#include "ddptrain/safetensors.h"

const char fuzz_target_name[] = "safetensors";

static size_t tensor_bytes(const ddp_st_tensor_t *t) {
  size_t n = ddp_dtype_size(t->dtype);
  for (int d = 0; d < t->ndim; ++d) n *= (size_t)t->shape[d];
  return n;
}

/* Where the header h says tensor `name`'s bytes begin in the file, read
 * with jansson independently of the reader; -1 when it cannot be told. */
static long long header_begin(const json_t *h, uint64_t hlen, const char *name) {
  json_int_t b = -1, e = -1;
  if (json_unpack(json_object_get(h, name), "{s:[II]}", "data_offsets", &b, &e) != 0 || b < 0)
    return -1;
  return (long long)(8 + hlen) + (long long)b;
}

static void check_file(const ddp_safetensors_t *st, const uint8_t *data, size_t size) {
  const int n = ddp_safetensors_count(st);
  FUZZ_ASSERT(n >= 0 && size >= 8);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = hlen << 8 | data[i];
  FUZZ_ASSERT(hlen <= size - 8);
  json_t *h = json_loadb((const char *)data + 8, (size_t)hlen, 0, NULL);
  FUZZ_ASSERT(h != NULL);
  for (int i = 0; i < n; ++i) {
    ddp_st_tensor_t t, by_name;
    FUZZ_ASSERT(ddp_safetensors_get(st, i, &t) == DDP_OK);
    FUZZ_ASSERT(t.ndim >= 0 && t.ndim <= DDP_SAFETENSORS_MAX_DIMS);
    FUZZ_ASSERT(ddp_safetensors_find(st, t.name, &by_name) == DDP_OK);
    FUZZ_ASSERT(strcmp(by_name.name, t.name) == 0);
    /* the tensor is the input's own bytes at the place its header entry
     * names, wholly inside the file */
    const size_t bytes = tensor_bytes(&t);
    const long long at = header_begin(h, hlen, t.name);
    FUZZ_ASSERT(at >= 0 && (size_t)at <= size && bytes <= size - (size_t)at);
    FUZZ_ASSERT(bytes == 0 || memcmp(t.data, data + at, bytes) == 0);
    for (int j = 0; j < i; ++j) { /* no two tensors share a byte */
      ddp_st_tensor_t u;
      FUZZ_ASSERT(ddp_safetensors_get(st, j, &u) == DDP_OK);
      const uint8_t *a = t.data, *b = u.data;
      const size_t ub = tensor_bytes(&u);
      FUZZ_ASSERT(bytes == 0 || ub == 0 || a + bytes <= b || b + ub <= a);
    }
  }
  json_decref(h);
  ddp_st_tensor_t none;
  FUZZ_ASSERT(ddp_safetensors_get(st, n, &none) != DDP_OK);
  static const char *const keys[] = {"format", "n_classes", "crc32", "step", "config", NULL};
  for (int k = 0; keys[k]; ++k) (void)ddp_safetensors_meta(st, keys[k]);
}

static void check_records(const ddp_records_t *r) {
  FUZZ_ASSERT(r->n >= 1 && r->floats >= 1 && r->n_classes >= 2);
  for (int64_t i = 0; i < r->n; ++i) {
    FUZZ_ASSERT(r->y[i] >= 0 && r->y[i] < r->n_classes);
    for (int64_t k = 0; k < r->floats; ++k) FUZZ_ASSERT(isfinite(r->x[i * r->floats + k]));
  }
  (void)ddp_records_fingerprint(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[80];
  fuzz_quiet_log();
  fuzz_write_input(data, size, path, sizeof path);
  ddp_safetensors_t *st = NULL;
  if (ddp_safetensors_open(path, &st) == DDP_OK) {
    FUZZ_ASSERT(st != NULL);
    check_file(st, data, size);
    ddp_safetensors_close(st);
  } else {
    FUZZ_ASSERT(st == NULL);
  }
  ddp_records_t r;
  if (ddp_records_open(&r, path) == DDP_OK) {
    check_records(&r);
    ddp_records_destroy(&r);
  }
  return 0;
}
