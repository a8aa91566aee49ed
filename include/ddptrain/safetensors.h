/* safetensors files: write and read.
 *
 * Format (https://huggingface.co/docs/safetensors): an 8-byte little-endian
 * header length, a JSON header mapping tensor names to {dtype, shape,
 * data_offsets} plus an optional "__metadata__" map of strings, then the raw
 * little-endian tensor data. ddptrain uses it for exported weights (readable
 * by PyTorch) and, later, checkpoints.
 *
 * Writes are atomic: a temporary file in the same directory, fsync, rename,
 * then fsync of the directory, so a crash or a full disk never leaves a
 * half-written file under the final name. Reads validate the whole header
 * (offsets inside the file, sizes matching dtype x shape, no overlaps) and
 * name the file and the offending tensor on error. */
#ifndef DDPTRAIN_SAFETENSORS_H
#define DDPTRAIN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DDP_SAFETENSORS_MAX_DIMS 8

/* The file format's int64 ("I64"), which the runtime's own element types
 * (ddp_dtype_t) do not need: a tensor of this dtype holds int64_t values.
 * Written for exported counters (BatchNorm's num_batches_tracked is an
 * int64 scalar in PyTorch) and reported as such by the reader. */
#define DDP_ST_DTYPE_I64 ((ddp_dtype_t)DDP_DTYPE_COUNT_)

typedef struct ddp_st_tensor {
  const char *name;
  ddp_dtype_t dtype;
  int ndim;
  int64_t shape[DDP_SAFETENSORS_MAX_DIMS];
  const void *data; /* host memory, numel * dtype size bytes */
} ddp_st_tensor_t;

/* meta: NULL or a NULL-terminated list of key, value, key, value, ... */
ddp_status_t ddp_safetensors_write(const char *path, const ddp_st_tensor_t *tensors, int n,
                                   const char *const *meta);

/* How ddp_safetensors_write_opts writes. */
typedef struct ddp_st_write_opts {
  const char *tmp_path;       /* NULL: PATH.tmp.PID; must be on PATH's file system */
  int64_t enospc_after_bytes; /* fault injection: > 0 makes the write fail
                                  with ENOSPC after that many bytes, as on a
                                  full disk; 0: off */
} ddp_st_write_opts_t;

/* ddp_safetensors_write with a chosen temporary file; wo may be NULL. On
 * any failure the temporary file is removed and PATH is untouched. */
ddp_status_t ddp_safetensors_write_opts(const char *path, const ddp_st_tensor_t *tensors, int n,
                                        const char *const *meta, const ddp_st_write_opts_t *wo);

typedef struct ddp_safetensors ddp_safetensors_t;

ddp_status_t ddp_safetensors_open(const char *path, ddp_safetensors_t **out);
/* ddp_safetensors_open reading the header alone: names, dtypes, shapes and
 * metadata, checked as there against the file's size, with every tensor's
 * data NULL. A look at a large file's layout without reading its data. */
ddp_status_t ddp_safetensors_open_header(const char *path, ddp_safetensors_t **out);
void ddp_safetensors_close(ddp_safetensors_t *st);
int ddp_safetensors_count(const ddp_safetensors_t *st);
/* Fills *t (data points into the loaded file) for the i-th tensor, in file
 * order, or for the named one; DDP_ERR_INVALID_ARG if absent. */
ddp_status_t ddp_safetensors_get(const ddp_safetensors_t *st, int index, ddp_st_tensor_t *t);
ddp_status_t ddp_safetensors_find(const ddp_safetensors_t *st, const char *name,
                                  ddp_st_tensor_t *t);
/* A "__metadata__" value, or NULL. */
const char *ddp_safetensors_meta(const ddp_safetensors_t *st, const char *key);

#ifdef __cplusplus
}
#endif
#endif
